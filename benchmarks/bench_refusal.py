"""What one shed bulk call costs a node: node CPU per refusal, by thread.

    .venv/bin/python benchmarks/bench_refusal.py [--waves 6] [--calls 500]
        [--connections 16] [--node-env KEY=VALUE ...]

One ``provnet node`` (pinned to the first CPU, this process to the others
when there are two or more). Two operator-signed deliveries open their call
and never send a body, so they hold the node's byte budget (two 4 MiB
reservations of its 8 MiB); every further delivery is then refused at its
headers (``RESOURCE_EXHAUSTED``, its body never sent: the caller sends a body
only once admitted, as the overload benchmark's callers do). After 200
refusals to warm up, ``--waves`` waves of ``--calls`` concurrent deliveries
over ``--connections`` connections; per wave: the status codes, the wall
time, and the node's CPU seconds (``/proc``) over the wave and 0.3 s after it
(so the refusals' completions are in), divided by the calls. Then the CPU
each of the node's threads used over all waves (the event loop's thread is
the process's main thread; gRPC's C-core threads are ``event_engine``; the
completion queue's poller is another ``python`` thread) and the node's CPU
over 1 s idle. ``--node-env`` sets node settings, e.g.
``PROVNET_MAX_CONCURRENT_RPCS=3`` (gRPC's own concurrency limit refuses
every delivery, no Python handler run) or ``PROVNET_MAX_PENDING_RPCS=2``
(gRPC's pending-call limit resets most of them, ``CANCELLED``). Loopback
only; the clock ticks of ``/proc`` are 10 ms, so a wave's figure is ±0.02 ms
at 500 calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from _procs import cpu_seconds, one_node_setup, pinned_node

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodes.methods import method_name  # noqa: E402  (after the path insert)

DELIVER = method_name("Deliver", "Deliver")
INFO = method_name("Node", "Info")


def _threads(pid: int) -> dict[tuple[str, str], float]:
    """(thread id, name) → CPU seconds, for every thread of ``pid``."""
    out: dict[tuple[str, str], float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            raw = (task / "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        out[(task.name, name)] = cpu_seconds(task / "stat")
    return out


async def _measure(args: argparse.Namespace, address: str, pid: int, key: Path) -> int:
    import grpc

    from contracts.identity import load_identity
    from nodes.auth import ControlCredentials

    operator = ControlCredentials(load_identity(key))
    options = [("grpc.use_local_subchannel_pool", 1)]
    chans = [grpc.aio.insecure_channel(address, options=options) for _ in range(args.connections)]
    for chan in chans:  # connected before anything is measured
        await chan.unary_unary(INFO)(b"", timeout=10)
    streams = [chan.stream_unary(DELIVER) for chan in chans]
    release = asyncio.Event()

    async def silent() -> AsyncIterator[bytes]:
        await release.wait()
        return
        yield b""  # an async generator that sends nothing

    from nodes.auth import node_id_at

    target = await node_id_at(chans[0])

    def meta() -> tuple[tuple[str, str], ...]:
        # Fresh per call: a nonce is refused as replayed before the body is read.
        return operator.metadata(DELIVER, b"", target=target)

    holders = []
    for k in range(2):
        call = streams[k % len(streams)](silent(), metadata=meta(), timeout=120)
        await call.initial_metadata()  # admitted: it holds its reservation
        holders.append(call)

    async def one(k: int) -> str:
        try:
            await streams[k % len(streams)](silent(), metadata=meta(), timeout=30)
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        return "OK"

    await asyncio.gather(*(one(k) for k in range(200)))
    await asyncio.sleep(0.5)
    stat = Path(f"/proc/{pid}/stat")
    per_call: list[float] = []
    before = _threads(pid)
    for w in range(args.waves):
        cpu0, t0 = cpu_seconds(stat), time.perf_counter()
        codes = await asyncio.gather(*(one(k) for k in range(args.calls)))
        wall = time.perf_counter() - t0
        await asyncio.sleep(0.3)
        cpu = cpu_seconds(stat) - cpu0
        per_call.append(cpu / args.calls * 1000)
        counts = {code: codes.count(code) for code in sorted(set(codes))}
        print(
            f"wave {w + 1}: {args.calls} calls {counts}, wall {wall * 1000:.0f} ms,"
            f" node CPU {cpu * 1000:.0f} ms = {per_call[-1]:.3f} ms a call",
            flush=True,
        )
    after = _threads(pid)
    main = str(pid)
    by_thread: dict[str, float] = {}
    for (tid, name), seconds in after.items():
        label = "event loop (main)" if tid == main else name
        by_thread[label] = by_thread.get(label, 0.0) + seconds - before.get((tid, name), 0.0)
    total = sum(by_thread.values()) or 1.0
    calls = args.waves * args.calls
    print(
        "node CPU by thread over the waves: "
        + ", ".join(
            f"{label} {seconds * 1000:.0f} ms ({seconds / total:.0%},"
            f" {seconds / calls * 1000:.3f} ms a call)"
            for label, seconds in sorted(by_thread.items(), key=lambda kv: -kv[1])
            if seconds > 0
        )
    )
    cpu0 = cpu_seconds(stat)
    await asyncio.sleep(1.0)
    print(f"node CPU over 1 s idle: {(cpu_seconds(stat) - cpu0) * 1000:.0f} ms")
    print(
        f"per refusal: median {statistics.median(per_call):.3f} ms of node CPU"
        f" (waves {min(per_call):.3f}-{max(per_call):.3f}); load average"
        f" {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    release.set()
    for call in holders:
        call.cancel()
    for chan in chans:
        await chan.close(None)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=6)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--node-env", action="append", default=[], help="KEY=VALUE for the node")
    args = parser.parse_args()
    if args.waves < 1 or args.calls < 1 or args.connections < 1:
        parser.error("--waves, --calls and --connections must be >= 1")

    work, _operator_id, address, env = one_node_setup("provnet-refusal-")
    for kv in args.node_env:
        key, sep, value = kv.partition("=")
        if not sep:
            parser.error(f"--node-env wants KEY=VALUE, got {kv!r}")
        env[key] = value
    with pinned_node("refusal", work, address, env) as (node, cpu):
        print(
            f"node on CPU {'any' if cpu is None else cpu}, {args.waves} waves of"
            f" {args.calls} deliveries over {args.connections} connections,"
            f" node env {args.node_env or 'default'}",
            flush=True,
        )
        return asyncio.run(_measure(args, address, node.pid, work / "operator.key"))


if __name__ == "__main__":
    raise SystemExit(main())
