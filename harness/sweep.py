"""The crossover sweep: cadence × penalty × seed, blind only (spec §8, Part 5).

Where does min-folded reconstruction become a worse corruption source than
the prose channel? The sweep runs the experiment on one profile (med) over
a cadence grid and a penalty grid, evaluating every gate in blind mode, and
writes ``sweep_metrics.csv`` (gate_metrics columns plus ``penalty``) and
``run_meta.json``. :func:`harness.analysis.analyze_sweep` derives the
crossover cadence C* per penalty and the fitted exponent.

One task per (cadence, seed) replays the trajectory once for every penalty
(ground truth, the prose arm and the trajectory do not depend on the
penalty; one structural_min / structural_perhop pair runs per penalty) —
results identical to separate runs, at a fraction of the cost. Row order is
cadence, seed, penalty; rows stream to disk in that order for any number of
workers.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config import ConfigError, ExperimentConfig
from harness.fingerprint import combine
from harness.metrics import SWEEP_COLUMNS, RunKey
from harness.runner import RunTask, execute, replay_params, versions

__all__ = ["SweepOutcome", "run_sweep", "sweep_tasks"]


def sweep_tasks(cfg: ExperimentConfig) -> list[RunTask]:
    """Cadence × seed on the sweep profile, each serving every penalty; blind only."""
    profile_name = cfg.profile or "med"
    if profile_name not in cfg.degradation_profiles:
        raise ConfigError(f"sweep profile '{profile_name}' is not among the configured profiles")
    profile = cfg.degradation_profiles[profile_name]
    grid = cfg.penalty_grid or (cfg.reconstruction_penalty,)
    return [
        RunTask(
            RunKey("sweep", c, profile_name, seed),
            cfg.steps,
            cfg.decision_every,
            profile,
            replay_params(
                cfg,
                c,
                seed,
                penalty=grid[0],
                lineage_modes=False,
                rehydrate=False,
                record_curve=False,
            ),
            penalties=tuple(grid),
        )
        for c in cfg.compaction_cadence
        for seed in cfg.seeds
    ]


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    out: Path
    n_runs: int
    wall_seconds: float
    fingerprint: str


def run_sweep(
    cfg: ExperimentConfig, out: Path, *, workers: int = 2, progress: bool | None = None
) -> SweepOutcome:
    """Run the sweep and write ``sweep_metrics.csv`` and ``run_meta.json``."""
    start = time.perf_counter()
    tasks = sweep_tasks(cfg)
    out.mkdir(parents=True, exist_ok=True)
    fingerprints: dict[str, str] = {}
    with (out / "sweep_metrics.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(SWEEP_COLUMNS)
        for task, results in execute(tasks, workers, None, progress, desc="sweep"):
            key = task.key.row()
            for label, penalty, result in zip(
                task.labels, task.result_penalties, results, strict=True
            ):
                writer.writerows([*key, *row, penalty] for row in result.gate_rows)
                fingerprints[label] = result.fingerprint
    wall = time.perf_counter() - start
    overall = combine(fingerprints.items())
    meta = {
        "config": cfg.to_json(),
        "versions": versions(),
        "workers": workers,
        "wall_seconds": round(wall, 3),
        "n_runs": len(fingerprints),
        "n_replays": len(tasks),
        "fingerprint": overall,
        "run_fingerprints": fingerprints,
    }
    (out / "run_meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return SweepOutcome(out, len(fingerprints), wall, overall)
