"""Benchmark: the Part 5 main matrix and the crossover sweep, side by side.

Times, in one run on this machine:

1. the main matrix (180 runs + the 5,000-step death-spiral run, rehydrate
   on) and the 1,400-run sweep with the engine on ``--workers`` processes
   (the shipped path: ``provnet experiment run`` / ``sweep``, CSV files
   written);
2. the same engine on one process;
3. the baseline: :mod:`harness.reference`, a literal single-process
   implementation of the spec (``rng.choice`` op draws, scalar prose draws,
   deep-copied merges, the oracle re-evaluated per comparison, every
   decision record held until the run ends) — computing the same runs, no
   files written.

It checks that all three produce the same overall decision-log fingerprint,
prints the ratios, and measures peak memory (max RSS) of
``provnet experiment run`` at 20 and at 80 seeds per cell to show that
memory does not grow with the number of runs.

Usage::

    .venv/bin/python benchmarks/bench_harness.py [--workers 2] [--reference-every 1]
                                                 [--repeat 3] [--skip-memory]

Engine timings are the best of ``--repeat`` runs (the machine is shared);
the baseline runs once.

``--reference-every K`` times the baseline on every K-th run only and
scales its time by the run count (reported as an estimate); the default
K = 1 runs the full baseline (~3–4 minutes here).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from harness.config import ExperimentConfig, default_sweep_config
from harness.fingerprint import combine
from harness.reference import reference_generate, reference_run
from harness.runner import RunTask, death_spiral_task, main_tasks, run_main
from harness.sweep import run_sweep, sweep_tasks

MATRIX_TARGET_S = 5.0
SWEEP_TARGET_S = 35.0


def _reference(
    tasks: Sequence[RunTask], every: int, always: Sequence[RunTask] = ()
) -> tuple[float, str | None]:
    """Seconds for the baseline over ``tasks`` + ``always`` and its fingerprint.

    With ``every`` > 1 only every ``every``-th of ``tasks`` is run and that
    part's time is scaled by the run count; ``always`` (the death-spiral run,
    not like the others) is always run in full.
    """
    fingerprints: dict[str, str] = {}
    sampled = list(tasks[::every])

    def run(batch: Sequence[RunTask]) -> float:
        start = time.perf_counter()
        for task in batch:
            if task.profile is None:
                raise ValueError("trace tasks are not benchmarked")
            p = task.params
            events = reference_generate(
                task.key.seed, task.steps, task.decision_every, task.profile
            )
            for label, penalty in zip(task.labels, task.result_penalties, strict=True):
                fp, _rows = reference_run(
                    events,
                    p.cadence,
                    keep=p.keep,
                    window=p.window,
                    penalty=penalty,
                    prose=p.prose,
                    prose_seed=p.prose_seed,
                    rehydrate=p.rehydrate,
                    lineage_modes=p.lineage_modes,
                )
                fingerprints[label] = fp
        return time.perf_counter() - start

    uniform = run(sampled) * len(tasks) / len(sampled)
    fixed = run(always)
    if every > 1:
        return uniform + fixed, None
    return uniform + fixed, combine(fingerprints.items())


def _peak_rss_mb(seeds: int, workers: int, out: Path) -> tuple[float, float]:
    """Max RSS (MB) of the parent and of the largest worker for one ``experiment run``."""
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from harness.config import ExperimentConfig\n"
        "from harness.runner import run_main\n"
        f"run_main(ExperimentConfig().with_seed_count({seeds}), Path({str(out)!r}),"
        f" workers={workers}, progress=False)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
        " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    parent_kb, child_kb = proc.stdout.split()
    return int(parent_kb) / 1024, int(child_kb) / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reference-every", type=int, default=1)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--repeat", type=int, default=3, help="engine timings: best of N (the box is shared)"
    )
    args = parser.parse_args(argv)
    # every results directory the engine writes lives here and is removed at the end
    with tempfile.TemporaryDirectory(prefix="provnet-bench-") as tmp:
        return _bench(args, Path(tmp))


def _bench(args: argparse.Namespace, tmp: Path) -> int:
    every = max(1, args.reference_every)
    main_cfg = ExperimentConfig()
    sweep_cfg = default_sweep_config()
    rows: list[tuple[str, int, float, float, float, float, bool]] = []

    # --- main matrix -------------------------------------------------------
    ds = death_spiral_task(main_cfg)
    repeat = max(1, args.repeat)
    fast = min(
        (run_main(main_cfg, tmp / "m-fast", workers=args.workers) for _ in range(repeat)),
        key=lambda o: o.wall_seconds,
    )
    one = min(
        (run_main(main_cfg, tmp / "m-one", workers=1) for _ in range(repeat)),
        key=lambda o: o.wall_seconds,
    )
    ref_s, ref_fp = _reference(main_tasks(main_cfg), every, [ds] if ds is not None else [])
    same = fast.fingerprint == one.fingerprint and (ref_fp is None or ref_fp == fast.fingerprint)
    rows.append(
        (
            "main matrix",
            fast.n_runs,
            ref_s,
            one.wall_seconds,
            fast.wall_seconds,
            MATRIX_TARGET_S,
            same,
        )
    )

    # --- sweep ----------------------------------------------------------------
    s_tasks = sweep_tasks(sweep_cfg)
    s_fast = min(
        (run_sweep(sweep_cfg, tmp / "s-fast", workers=args.workers) for _ in range(repeat)),
        key=lambda o: o.wall_seconds,
    )
    s_one = min(
        (run_sweep(sweep_cfg, tmp / "s-one", workers=1) for _ in range(repeat)),
        key=lambda o: o.wall_seconds,
    )
    s_ref_s, s_ref_fp = _reference(s_tasks, every)
    s_same = s_fast.fingerprint == s_one.fingerprint and (
        s_ref_fp is None or s_ref_fp == s_fast.fingerprint
    )
    rows.append(
        (
            "sweep",
            s_fast.n_runs,
            s_ref_s,
            s_one.wall_seconds,
            s_fast.wall_seconds,
            SWEEP_TARGET_S,
            s_same,
        )
    )

    est = f" (estimated from every {every}-th run)" if every > 1 else ""
    print(f"\nbaseline = harness.reference, literal single-process spec implementation{est}")
    print(
        f"engine = harness.replay via provnet experiment run/sweep (CSV written); "
        f"{args.workers} workers vs 1; best of {repeat}\n"
    )
    header = (
        f"{'workload':<12} {'runs':>5} {'baseline s':>11} {'engine 1w s':>12} "
        f"{'engine ' + str(args.workers) + 'w s':>12} {'vs baseline':>12} {'target s':>9} "
        f"{'meets':>6} {'same decisions':>15}"
    )
    print(header)
    print("-" * len(header))
    report: dict[str, object] = {}
    for name, n, base, w1, wn, target, same_fp in rows:
        print(
            f"{name:<12} {n:>5} {base:>11.2f} {w1:>12.2f} {wn:>12.2f} {base / wn:>11.1f}× "
            f"{target:>9.1f} {'yes' if wn <= target else 'NO':>6} {'yes' if same_fp else 'NO':>15}"
        )
        report[name] = {
            "runs": n,
            "baseline_s": round(base, 3),
            "engine_1_worker_s": round(w1, 3),
            f"engine_{args.workers}_workers_s": round(wn, 3),
            "speedup_vs_baseline": round(base / wn, 2),
            "target_s": target,
            "same_fingerprint": same_fp,
        }

    if not args.skip_memory:
        small = _peak_rss_mb(20, args.workers, tmp / "mem20")
        large = _peak_rss_mb(80, args.workers, tmp / "mem80")
        print(
            f"\npeak RSS, experiment run: 20 seeds/cell (181 runs) parent {small[0]:.0f} MB, "
            f"worker {small[1]:.0f} MB; 80 seeds/cell (721 runs) parent {large[0]:.0f} MB, "
            f"worker {large[1]:.0f} MB (ratio {large[0] / small[0]:.2f})"
        )
        report["memory_mb"] = {"seeds20": small, "seeds80": large}
    print("\n" + json.dumps(report))
    ok = all(r[4] <= r[5] and r[6] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
