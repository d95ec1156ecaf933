"""Overload: many concurrent callers delivering large values to one node process.

    .venv/bin/python benchmarks/bench_overload.py [--callers 1000] [--payload-mib 3]
        [--duration 20] [--max-concurrent 256]

One ``provnet node`` process (the command ``provnet cluster up`` runs) with an
operator key. Phase 1 (unloaded): a serve probe — one holder demanding one
committed fold over and over — gives the unloaded p99. Phase 2 (overload):
``--callers`` tasks each deliver a ``--payload-mib`` value (operator-signed
``Deliver``, a valid commitment + obligation) in a loop for ``--duration``
seconds while the same serve probe runs; the node sheds what it cannot admit
(``RESOURCE_EXHAUSTED`` at once, from ``--max-concurrent-rpcs``). Printed:
probe p50/p99 unloaded and under load (and their ratio, target ≤ 10), the
deliveries admitted and shed with the shed calls' p99 latency, and the node's
peak RSS (``VmHWM``) against the bound given with ``--rss-bound-mib``.
Exit 0 when both hold, 1 otherwise. Loopback only; every loop is bounded by
``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run(args: argparse.Namespace) -> int:
    import grpc

    from contracts.identity import Identity
    from contracts.serve import build_commitment, build_demand, build_obligation
    from contracts.signed import open_statement
    from contracts.statements import Obligation
    from nodes import wire
    from nodes._pb.provnet.v1 import (
        deliver_pb2_grpc,
        hoplog_pb2,
        hoplog_pb2_grpc,
        serve_pb2,
        serve_pb2_grpc,
    )
    from nodes.auth import ControlCredentials, control_channel
    from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv
    from nodes.messages import Delivery

    operator = ControlCredentials(Identity.generate())
    work = Path(tempfile.mkdtemp(prefix="provnet-overload-"))
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    env = child_env()
    env.update(
        PROVNET_OPERATOR_KEYS=operator.key_id,
        PROVNET_MAX_CONCURRENT_RPCS=str(args.max_concurrent),
        PROVNET_REAP_INTERVAL_S="0",
        PROVNET_LOG_LEVEL="warning",
    )
    argv = provnet_argv(
        "node", "--name", "load", "--listen", address, "--data-dir", str(work / "node"),
        "--log-format", "json",
    )  # fmt: skip
    log = (work / "node.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while probe_health(address, timeout=0.5) is not HealthState.SERVING:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"node did not start: {(work / 'node.log').read_text()[-2000:]}")
            await asyncio.sleep(0.05)
        opts = [
            ("grpc.max_send_message_length", 8 << 20),
            ("grpc.max_receive_message_length", 8 << 20),
        ]
        ops = control_channel(address, operator, opts)
        hoplog: Any = hoplog_pb2_grpc.HopLogStub(ops)
        await hoplog.Append(
            hoplog_pb2.AppendRequest(hops=[b'{"step": 1, "op": "x"}'], seqs=[1]), timeout=10
        )
        fold = await hoplog.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="p", seqs=[1]), timeout=10
        )
        obligation = open_statement(bytes(fold.obligation), Obligation)
        holder = Identity.generate()
        probe_chan = control_channel(address, None, opts)
        serve: Any = serve_pb2_grpc.ServeStub(probe_chan)

        async def probe(until: float) -> list[float]:
            samples = []
            while time.monotonic() < until:
                demand = build_demand(holder, obligation, now=int(time.time() * 1000))
                start = time.perf_counter()
                try:
                    await serve.Demand(
                        serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=10
                    )
                    samples.append((time.perf_counter() - start) * 1000)
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.01)
            return samples

        unloaded = await probe(time.monotonic() + min(5.0, args.duration))
        # The delivered values: one origin's commitment over a 1-hop fold, a big value.
        origin = Identity.generate()
        now = int(time.time() * 1000)
        commitment = build_commitment(
            origin, epoch="e", value_ref="big", fold_seq=0, hops=[b"{}"], issued_at=now
        )
        ob = build_obligation(
            origin, commitment, serve_until=now + 3_600_000, deadline_ms=2000,
            endpoints=["127.0.0.1:1"], issued_at=now,
        )  # fmt: skip
        payload = os.urandom(int(args.payload_mib * 1024 * 1024))
        admitted, shed, other = 0, [], 0
        chans = [control_channel(address, operator, opts) for _ in range(8)]

        async def caller(i: int, until: float) -> None:
            nonlocal admitted, other
            stub: Any = deliver_pb2_grpc.DeliverStub(chans[i % len(chans)])
            n = 0
            while time.monotonic() < until:
                request = wire.deliver_request(
                    Delivery(f"v{i}-{n}", payload, (commitment.to_bytes(),), (ob.to_bytes(),), "")
                )
                n += 1
                start = time.perf_counter()
                try:
                    await stub.Deliver(request, timeout=30)
                    admitted += 1
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        shed.append((time.perf_counter() - start) * 1000)
                        await asyncio.sleep(0.05)
                    else:
                        other += 1

        until = time.monotonic() + args.duration
        peak_now = 0.0

        async def watch_rss() -> None:
            nonlocal peak_now
            while time.monotonic() < until:
                peak_now = max(peak_now, _rss_mib(proc.pid, "VmRSS"))
                await asyncio.sleep(0.2)

        results = await asyncio.gather(
            probe(until), watch_rss(), *(caller(i, until) for i in range(args.callers))
        )
        loaded: list[float] = results[0]
        hwm = _rss_mib(proc.pid, "VmHWM")
        u99, l99 = _p(unloaded, 0.99), _p(loaded, 0.99)
        ratio = l99 / u99 if u99 else float("inf")
        print(f"callers {args.callers}  payload {args.payload_mib} MiB  duration {args.duration} s"
              f"  max-concurrent-rpcs {args.max_concurrent}")  # fmt: skip
        print(
            f"serve probe unloaded  n={len(unloaded)} p50 {_p(unloaded, 0.5):.2f} ms"
            f" p99 {u99:.2f} ms"
        )
        print(
            f"serve probe loaded    n={len(loaded)} p50 {_p(loaded, 0.5):.2f} ms p99 {l99:.2f} ms"
        )
        print(
            f"p99 loaded / unloaded {ratio:.1f}"
            f"  (target <= 10: {'PASS' if ratio <= 10 else 'FAIL'})"
        )
        print(f"deliveries admitted {admitted}  shed {len(shed)} (p99 {_p(shed, 0.99):.1f} ms)"
              f"  other errors {other}")  # fmt: skip
        rss_ok = hwm <= args.rss_bound_mib
        print(f"node RSS peak {hwm:.0f} MiB (sampled max {peak_now:.0f})"
              f"  bound {args.rss_bound_mib}"
              f" MiB: {'PASS' if rss_ok else 'FAIL'}")  # fmt: skip
        for chan in (*chans, ops, probe_chan):
            await chan.close(None)
        return 0 if ratio <= 10 and rss_ok else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callers", type=int, default=1000)
    parser.add_argument("--payload-mib", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--max-concurrent", type=int, default=256)
    parser.add_argument("--rss-bound-mib", type=int, default=1536)
    return asyncio.run(_run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
