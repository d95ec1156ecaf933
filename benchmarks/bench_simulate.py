"""Benchmark: ``provnet simulate`` at two sizes, side by side, in one run.

Plays the default workload (one simulated hour for every agent: two runs of
30 decisions per delegation, a think time of 15 s per delivery) at a small and a large N,
each in its own child process (``provnet simulate --agents N``), and prints
for both: wall seconds, CPU seconds (user+sys of the child and its workers) and
both per decision, peak RSS (the child's max RSS, and the peak of the
sum over it and its worker processes, sampled every 0.5 s), cells,
decisions, simulated hours, costs per decision and per agent-hour, wall per
agent — so the per-agent cost can be read off the ratio, on the same machine
in the same minute — and the log-log exponent of each cost per decision
between the two sizes.

With ``--growth N1 N2 …`` it instead plays one sweep over those N
(``provnet simulate --agents N1 N2 … --seeds S --workers W``) and prints its
``growth.csv``: the fitted exponent of each cost per decision from the
smallest to the largest N (the issue asks for 10² to 10⁴ agents), with the
95% interval over the seeds' own slopes (``--seeds`` ≥ 2; the issue asks ≥ 5),
and the sweep's wall and CPU seconds.

Usage::

    .venv/bin/python benchmarks/bench_simulate.py [--small 100] [--large 1000] [--seeds 1]
        [--workers 1]
    .venv/bin/python benchmarks/bench_simulate.py --growth 100 1000 10000 --seeds 5 --workers 2
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

COSTS = ("rpcs", "bytes", "sign_ops", "verify_ops")


def _tree_rss_bytes(root: int) -> int:
    """Resident bytes of ``root`` and every process below it (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree = {root}
    grew = True
    while grew:  # at most one pass per generation of processes
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
                total += int(fh.read().split()[1]) * page
        except OSError:
            continue
    return total


def _one(n: int, seeds: int, workers: int, out: Path) -> dict[str, float]:
    provnet = Path(sys.executable).with_name("provnet")
    cmd = [str(provnet), "simulate", "--agents", str(n), "--seeds", str(seeds)]
    cmd += ["--workers", str(workers), "--out", str(out), "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak_tree = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_tree
        while not done.wait(0.5):
            peak_tree = max(peak_tree, _tree_rss_bytes(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # max RSS from wait4 of this child alone (not of every child so far)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # user+sys of the child and every process it waited for (its workers)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"provnet simulate --agents {n} failed (status {status})")
    with (out / "cells.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    virtual = sum(float(r["virtual_s"]) for r in rows)
    decisions = sum(int(r["decisions"]) for r in rows)
    agent_hours = sum(int(r["agents"]) * float(r["virtual_s"]) for r in rows) / 3600.0
    result = {
        "agents": float(n),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": usage.ru_maxrss / 1024.0,
        "peak_tree_rss_mib": peak_tree / 2**20,
        "cells": float(len(rows)),
        "decisions": float(decisions),
        "agent_hours": agent_hours,
        "cell_hours": virtual / 3600.0,
        "proofs_against_honest": float(sum(int(r["proofs_honest"]) for r in rows)),
    }
    result["cpu_ms_per_decision"] = 1000.0 * cpu / decisions if decisions else 0.0
    result["wall_ms_per_decision"] = 1000.0 * wall / decisions if decisions else 0.0
    for c in COSTS:
        total = sum(int(r[c]) for r in rows)
        result[f"{c}_per_decision"] = total / decisions if decisions else 0.0
        result[f"{c}_per_agent_hour"] = total / agent_hours if agent_hours else 0.0
    return result


def _growth(sizes: list[int], seeds: int, workers: int) -> int:
    provnet = Path(sys.executable).with_name("provnet")
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as tmp:
        out = Path(tmp) / "sweep"
        cmd = [str(provnet), "simulate", "--agents", *map(str, sizes), "--seeds", str(seeds)]
        cmd += ["--workers", str(workers), "--out", str(out), "--no-progress"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"sweep {sizes} x {seeds} seed(s): {wall:.1f} s wall, {cpu:.1f} s CPU")
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
        small = _one(args.small, args.seeds, args.workers, Path(tmp) / "small")
        large = _one(args.large, args.seeds, args.workers, Path(tmp) / "large")
    keys = list(small)
    print(f"{'':24}{'small':>14}{'large':>14}{'large/small':>14}")
    for k in keys:
        ratio = large[k] / small[k] if small[k] else float("nan")
        print(f"{k:24}{small[k]:14.2f}{large[k]:14.2f}{ratio:14.2f}")
    per_agent = [r["wall_s"] / r["agents"] for r in (small, large)]
    print(f"{'wall_s per agent':24}{per_agent[0]:14.4f}{per_agent[1]:14.4f}"
          f"{per_agent[1] / per_agent[0]:14.2f}")  # fmt: skip
    # the growth exponent of each cost per decision between the two sizes (log-log slope)
    span = math.log(large["agents"] / small["agents"])
    for c in COSTS:
        a, b = small[f"{c}_per_decision"], large[f"{c}_per_decision"]
        slope = math.log(b / a) / span if a > 0 and b > 0 and span else float("nan")
        print(f"{'exponent ' + c:24}{slope:42.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
