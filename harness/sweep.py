"""The crossover sweep: cadence × penalty × seed (spec §8, §10, Part 5).

Where does min-folded reconstruction become a worse corruption source than
the prose channel? The sweep runs the experiment on one profile (med) over
a cadence grid and a penalty grid, evaluating every gate in blind mode and
the lineage gates of the structural arms in degrade mode too (rehydrate
off), as the lab does, and writes ``sweep_metrics.csv`` (gate_metrics
columns plus ``penalty``) and ``sweep_meta.json`` (the lab's keys first).
The crossover reads blind rows only, so degrade rows leave it unchanged.
:func:`harness.analysis.analyze_sweep` derives the crossover cadence C* per
penalty and the fitted exponent.

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
from harness.runner import RunTask, execute, replay_params, sorted_gate_rows, versions

__all__ = ["SweepOutcome", "run_sweep", "sweep_tasks"]


def sweep_tasks(cfg: ExperimentConfig) -> list[RunTask]:
    """Cadence × seed on the sweep profile, each serving every penalty; no rehydrate."""
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
                lineage_modes=True,
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
    """Run the sweep and write ``sweep_metrics.csv`` and ``sweep_meta.json``.

    Written into a fresh folder renamed to ``out`` when complete, like
    :func:`harness.runner.run_main`.
    """
    from harness._outdir import file_digests, staged_dir

    start = time.perf_counter()
    tasks = sweep_tasks(cfg)
    fingerprints: dict[str, str] = {}
    with staged_dir(out) as partial:
        with (partial / "sweep_metrics.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(SWEEP_COLUMNS)
            for task, results in execute(tasks, workers, None, progress, desc="sweep"):
                key = task.key.row()
                for label, penalty, result in zip(
                    task.labels, task.result_penalties, results, strict=True
                ):
                    writer.writerows(
                        [*key, *row, penalty] for row in sorted_gate_rows(result.gate_rows)
                    )
                    fingerprints[label] = result.fingerprint
        wall = time.perf_counter() - start
        overall = combine(fingerprints.items())
        grid = cfg.penalty_grid or (cfg.reconstruction_penalty,)
        meta = {
            # the lab's keys, in the lab's order (spec §10)
            "config": cfg.to_json(),
            "steps": cfg.steps,
            "penalty_grid": list(grid),
            "cadences": list(cfg.compaction_cadence),
            "seeds": list(cfg.seeds),
            "wall_seconds": round(wall, 3),
            # provnet's
            "versions": versions(),
            "workers": workers,
            "n_runs": len(fingerprints),
            "n_replays": len(tasks),
            "fingerprint": overall,
            "run_fingerprints": fingerprints,
            "files": file_digests(partial, ["sweep_metrics.csv"]),
        }
        (partial / "sweep_meta.json").write_text(
            json.dumps(meta, indent=2) + "\n", encoding="utf-8"
        )
    return SweepOutcome(out, len(fingerprints), wall, overall)
