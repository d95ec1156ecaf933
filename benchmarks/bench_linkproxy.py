"""Link proxy benchmark: what a `provnet link-proxy` link adds to a gRPC round trip.

Run (loopback only; ~20 s)::

    .venv/bin/python benchmarks/bench_linkproxy.py
    .venv/bin/python benchmarks/bench_linkproxy.py --samples 50 --delays 0,5,20

A grpc.aio health service runs in this process; unary ``Health/Check`` calls
go to it directly and through a :class:`nodes.linkproxy.LinkProxy` with each
one-way delay, on an established channel. Printed per delay: p50 and p99 of
the round trip and the p50 added over the direct call, next to the nominal
2 × delay; then the time to echo a payload through a bandwidth-limited link
next to bytes / bandwidth. Exit status 0 when every p50 added is at least
2 × delay (the proxy's guarantee), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from nodes.linkproxy import LinkProxy, LinkSpec

LOOPBACK = "127.0.0.1"


async def _samples(address: str, n: int) -> list[float]:
    async with aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest()
        for _ in range(5):  # connection set-up and warm-up
            await stub.Check(request, timeout=10)
        out = []
        for _ in range(n):
            start = time.perf_counter()
            await stub.Check(request, timeout=10)
            out.append(time.perf_counter() - start)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.write_eof()
    writer.close()


async def _bandwidth(nbytes: int, bandwidth: int) -> float:
    server = await asyncio.start_server(_echo, LOOPBACK, 0)
    port = server.sockets[0].getsockname()[1]
    spec = LinkSpec(listen=(LOOPBACK, 0), target=(LOOPBACK, port), bandwidth=bandwidth)
    try:
        async with LinkProxy(spec) as proxy:
            reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
            start = time.perf_counter()
            writer.write(b"\0" * nbytes)
            await writer.drain()
            writer.write_eof()
            got = await reader.read(-1)
            elapsed = time.perf_counter() - start
            writer.close()
            assert len(got) == nbytes
            return elapsed
    finally:
        server.close()


async def _main(delays: list[float], n: int) -> int:
    server = aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    ok = True
    try:
        direct = await _samples(f"{LOOPBACK}:{port}", n)
        base = statistics.median(direct)
        print(f"{'link':>14} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'2×delay':>8}")
        print(f"{'direct':>14} {1000 * base:8.2f} {1000 * _pct(direct, 99):8.2f}")
        for delay in delays:
            spec = LinkSpec(listen=(LOOPBACK, 0), target=(LOOPBACK, port), delay_ms=delay)
            async with LinkProxy(spec) as proxy:
                rtts = await _samples(proxy.address, n)
            p50 = statistics.median(rtts)
            added = p50 - base
            ok &= p50 >= 2 * delay / 1000
            print(
                f"{f'delay {delay:g} ms':>14} {1000 * p50:8.2f} {1000 * _pct(rtts, 99):8.2f}"
                f" {1000 * added:10.2f} {2 * delay:8.1f}"
            )
    finally:
        await server.stop(None)
    nbytes, bandwidth = 1_000_000, 2_000_000
    seconds = await _bandwidth(nbytes, bandwidth)
    print(
        f"echo of {nbytes} B through a {bandwidth} B/s link: {seconds:.3f} s"
        f" (one way at that rate: {nbytes / bandwidth:.3f} s)"
    )
    ok &= seconds >= nbytes / bandwidth
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--delays", default="0,1,5,20,50", help="one-way delays in ms")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",") if d.strip()]
    return asyncio.run(_main(delays, args.samples))


if __name__ == "__main__":
    sys.exit(main())
