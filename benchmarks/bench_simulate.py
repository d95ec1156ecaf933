"""Benchmark: ``provnet simulate`` at two sizes, side by side, in one run.

Plays the default workload (one simulated hour for every agent: two runs of
30 decisions per delegation, a think time of 15 s per delivery) at a small and a large N,
each in its own child process (``provnet simulate --agents N``), and prints
for both: wall seconds, peak RSS (the child's max RSS), cells, decisions,
simulated hours, and wall per agent — so the per-agent cost can be read off
the ratio, on the same machine in the same minute.

With ``--growth N1 N2 …`` it instead plays one sweep over those N
(``provnet simulate --agents N1 N2 … --seeds S --workers W``) and prints its
``growth.csv``: the fitted exponent of each cost per decision from the
smallest to the largest N (the issue asks for 10² to 10⁴ agents).

Usage::

    .venv/bin/python benchmarks/bench_simulate.py [--small 100] [--large 1000] [--seeds 1]
    .venv/bin/python benchmarks/bench_simulate.py --growth 100 1000 10000 --seeds 5 --workers 2
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _one(n: int, seeds: int, out: Path) -> dict[str, float]:
    provnet = Path(sys.executable).with_name("provnet")
    cmd = [str(provnet), "simulate", "--agents", str(n), "--seeds", str(seeds)]
    cmd += ["--out", str(out), "--no-progress"]
    start = time.perf_counter()
    # max RSS from wait4 of this child alone (not of every child so far)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"provnet simulate --agents {n} failed (status {status})")
    with (out / "cells.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    virtual = sum(float(r["virtual_s"]) for r in rows)
    return {
        "agents": float(n),
        "wall_s": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024.0,
        "cells": float(len(rows)),
        "decisions": float(sum(int(r["decisions"]) for r in rows)),
        "agent_hours": sum(int(r["agents"]) * float(r["virtual_s"]) for r in rows) / 3600.0,
        "cell_hours": virtual / 3600.0,
        "proofs_against_honest": float(sum(int(r["proofs_honest"]) for r in rows)),
    }


def _growth(sizes: list[int], seeds: int, workers: int) -> int:
    provnet = Path(sys.executable).with_name("provnet")
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as tmp:
        out = Path(tmp) / "sweep"
        cmd = [str(provnet), "simulate", "--agents", *map(str, sizes), "--seeds", str(seeds)]
        cmd += ["--workers", str(workers), "--out", str(out), "--no-progress"]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print(f"sweep {sizes} x {seeds} seed(s): {time.perf_counter() - start:.1f} s wall")
        print((out / "growth.csv").read_text(encoding="utf-8"), end="")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--large", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--growth", type=int, nargs="+", help="N of one growth sweep instead")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if args.growth:
        return _growth(args.growth, args.seeds, args.workers)
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as tmp:
        small = _one(args.small, args.seeds, Path(tmp) / "small")
        large = _one(args.large, args.seeds, Path(tmp) / "large")
    keys = list(small)
    print(f"{'':24}{'small':>14}{'large':>14}{'large/small':>14}")
    for k in keys:
        ratio = large[k] / small[k] if small[k] else float("nan")
        print(f"{k:24}{small[k]:14.2f}{large[k]:14.2f}{ratio:14.2f}")
    per_agent = [r["wall_s"] / r["agents"] for r in (small, large)]
    print(f"{'wall_s per agent':24}{per_agent[0]:14.4f}{per_agent[1]:14.4f}"
          f"{per_agent[1] / per_agent[0]:14.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
