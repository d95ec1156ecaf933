"""Benchmark: ``provnet experiment boundary --full`` next to the lab's in-process matrix.

Issue #24 sets ``--full`` (180 runs across the boundary, memory transport)
against the in-process matrix of the provenance-compaction lab
(P0rt/provenance-compaction-lab: ``prov-lab run --mock`` on its default
config). The lab is not part of this project: install it in a virtual
environment of its own and point ``--lab`` at its ``prov-lab`` script and
``--lab-dir`` at its checkout (the default config is read from there).

Each round runs the lab, then ``--full`` (then, in the next round, the other
way round), back to back, so both meet the same minute of a shared machine.
For each command it prints the wall time and the CPU time of its whole
process tree (user + system of the child and the workers it waited for),
and the ratio ``--full`` ÷ lab for both; at the end the median ratio over
the rounds, the load average and the target (≤ 0.5×) as PASS/FAIL on the
median wall ratio. ``--full``'s fingerprint and the runs deciding as in
process are read from the ``boundary_meta.json`` it writes.

Usage::

    .venv/bin/python benchmarks/bench_full_vs_lab.py --lab /tmp/labvenv/bin/prov-lab \\
        --lab-dir /tmp/lab [--rounds 2] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: ``--full`` wall time ÷ the lab's, issue #24's target.
TARGET_RATIO = 0.5


@dataclass(frozen=True, slots=True)
class Timed:
    """One command's run: wall and process-tree CPU seconds, load average at its start."""

    wall_s: float
    cpu_s: float
    load: float


def timed(cmd: list[str], cwd: Path) -> Timed:
    """Run ``cmd`` in ``cwd`` (output discarded); fails loudly if it fails."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, load)


def full_meta(out: Path) -> tuple[str, int, int]:
    """(boundary fingerprint, runs, runs deciding as in-process) from ``--full``'s meta file."""
    meta = json.loads((out / "boundary_meta.json").read_text())
    runs = meta["runs"]
    equal = sum(1 for r in runs.values() if r["fingerprints_equal"])
    return str(meta["boundary_fingerprint"]), int(meta["n_runs"]), equal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", required=True, help="the lab's prov-lab script (its own venv)")
    ap.add_argument("--lab-dir", required=True, help="the lab's checkout (default config)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=None, help="--full's --workers")
    args = ap.parse_args(argv)
    lab_dir = Path(args.lab_dir)
    walls: list[float] = []
    cpus: list[float] = []
    loads: list[float] = []
    fingerprints: set[str] = set()
    ok_runs = True
    with tempfile.TemporaryDirectory(prefix="bench-full-vs-lab-") as tmp:
        for r in range(args.rounds):
            lab_out = Path(tmp) / f"lab{r}"
            full_out = Path(tmp) / f"full{r}"
            lab_cmd = [args.lab, "run", "--mock", "--out", str(lab_out)]
            full_cmd = [sys.executable, "-m", "harness", "experiment", "boundary", "--full"]
            full_cmd += ["--out", str(full_out), "--no-progress"]
            if args.workers is not None:
                full_cmd += ["--workers", str(args.workers)]
            order = [("lab", lab_cmd, lab_dir), ("full", full_cmd, Path.cwd())]
            if r % 2:
                order.reverse()
            got: dict[str, Timed] = {}
            for name, cmd, cwd in order:
                got[name] = timed(cmd, cwd)
            fp, runs, equal = full_meta(full_out)
            fingerprints.add(fp)
            ok_runs = ok_runs and runs == equal
            lab, full = got["lab"], got["full"]
            walls.append(full.wall_s / lab.wall_s)
            cpus.append(full.cpu_s / lab.cpu_s)
            loads += [lab.load, full.load]
            print(
                f"round {r + 1}: lab {lab.wall_s:.1f} s wall / {lab.cpu_s:.1f} s CPU"
                f" (load {lab.load:.1f}); --full {full.wall_s:.1f} s wall / {full.cpu_s:.1f} s CPU"
                f" (load {full.load:.1f}), {equal}/{runs} runs as in-process;"
                f" ratio wall {walls[-1]:.2f}x, CPU {cpus[-1]:.2f}x",
                flush=True,
            )
    wall_ratio = statistics.median(walls)
    verdict = "PASS" if wall_ratio <= TARGET_RATIO else "FAIL"
    print(
        f"median over {args.rounds} round(s): --full / lab wall {wall_ratio:.2f}x,"
        f" CPU {statistics.median(cpus):.2f}x (target wall <= {TARGET_RATIO}x) {verdict};"
        f" load average {min(loads):.1f}-{max(loads):.1f} at the starts;"
        f" --full fingerprint {', '.join(sorted(fingerprints))}"
    )
    return 0 if ok_runs and len(fingerprints) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
