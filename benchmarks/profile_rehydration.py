"""Profile the rehydrating decisions of the boundary benchmark's default slice.

Plays the slice (C = 25, med, 2 seeds, 500 steps, as ``bench_boundary.py``)
once per transport with :mod:`cProfile` switched on only while the holder
rehydrates (:meth:`harness.boundary.topology.LocalOps.rehydrate`): the
holder's demand, the origin's answer and — over gRPC, where every node is a
grpc.aio server in this process and event loop — both ends of the call and
grpc's own callbacks. Deliveries, commits and the gates are not profiled.

Prints per transport the calls per rehydration that do not depend on the
machine's load (Python function calls, event-loop iterations, tasks,
Ed25519 signatures, Merkle roots, store reads) and the top functions by own
time — CPU time of the event loop's thread (``time.thread_time``), so time
spent blocked in epoll or preempted by other processes is not counted; the
profiler inflates it (ms per rehydration under the profiler and share of
the profiled time).

Usage::

    .venv/bin/python benchmarks/profile_rehydration.py [--transports memory,grpc] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from typing import Any

from harness.boundary import topology
from harness.boundary.choices import TransportKind
from harness.boundary.runner import BoundarySettings, run_boundary
from harness.config import ExperimentConfig
from nodes.config import LogFormat
from nodes.logging import configure_logging

#: (label, file name ending, function name) of the calls counted per rehydration
COUNTED = (
    ("event-loop iterations", "base_events.py", "_run_once"),
    ("tasks created", "base_events.py", "create_task"),
    ("Ed25519 signatures", "identity.py", "sign"),
    ("Merkle roots", "merkle.py", "merkle_root"),
    ("store reads (resolve)", "store.py", "resolve"),
)


def _name(key: tuple[str, int, str]) -> str:
    file, _, fn = key
    return fn if file == "~" else f"{os.path.basename(file)}:{fn}"


def profile(transport: TransportKind, top: int) -> None:
    # CPU time of this thread, not wall time: waiting in epoll and being
    # preempted on a shared machine are not the decision's work.
    prof = cProfile.Profile(time.thread_time)
    original = topology.LocalOps.rehydrate
    count = [0]

    async def profiled(self: topology.LocalOps, value_ref: str) -> Any:
        prof.enable()
        try:
            return await original(self, value_ref)
        finally:
            prof.disable()
            count[0] += 1

    topology.LocalOps.rehydrate = profiled  # type: ignore[method-assign]
    try:
        settings = BoundarySettings(cadences=(25,), seeds=(0, 1), steps=500, transport=transport)
        run_boundary(ExperimentConfig(), settings, progress=False)
    finally:
        topology.LocalOps.rehydrate = original  # type: ignore[method-assign]
    n = max(1, count[0])
    stats: Any = pstats.Stats(prof)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{transport.value}: {count[0]} rehydrations, {stats.total_calls / n:,.0f} function"
        f" calls and {stats.total_tt / n * 1000:.2f} ms profiled per rehydration"
        f" (load average {load:.1f})"
    )
    entries = stats.stats.items()
    for label, file, fn in COUNTED:
        calls = sum(v[1] for k, v in entries if k[0].endswith(file) and k[2] == fn)
        print(f"  {label:24}{calls / n:8.1f} per rehydration")
    rows = sorted(entries, key=lambda kv: kv[1][2], reverse=True)[:top]
    print(f"  {'own ms/reh':>10} {'share':>6} {'calls/reh':>9}  function")
    for key, (_, ncalls, tottime, _, _) in rows:
        print(
            f"  {tottime / n * 1000:10.3f} {100 * tottime / stats.total_tt:5.1f}%"
            f" {ncalls / n:9.1f}  {_name(key)}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="memory,grpc")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    configure_logging(LogFormat.JSON, "warning")
    for name in args.transports.split(","):
        profile(TransportKind(name), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
