"""The crossover sweep (spec §8): C* per penalty and the fitted exponent ≈ −1.6."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from harness.analysis import SweepFindings, analyze_sweep, crossover_cadence
from harness.config import DEFAULT_PROFILES, default_sweep_config
from harness.metrics import SWEEP_COLUMNS
from harness.replay import replay, replay_penalties
from harness.sweep import run_sweep, sweep_tasks
from harness.trajectory import generate


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepFindings]:
    # the full 1,400-run sweep: ~10 s on 2 workers
    out = tmp_path_factory.mktemp("sweep")
    outcome = run_sweep(default_sweep_config(), out, workers=2, progress=False)
    assert outcome.n_runs == 1400
    return out, analyze_sweep(out)


def test_min_reconstruction_flips_34_92_vs_prose_6_85_at_c10(
    sweep: tuple[Path, SweepFindings],
) -> None:
    _out, f = sweep
    pt = next(p for p in f.points if p.penalty == 0.02 and p.cadence == 10)
    assert f"{pt.min_reconstruction:.2f}" == "34.92"
    assert f"{pt.prose_reconstruction:.2f}" == "6.85"


def test_min_falls_below_prose_between_c50_and_c75_at_p002(
    sweep: tuple[Path, SweepFindings],
) -> None:
    _out, f = sweep
    pts = [p for p in f.points if p.penalty == 0.02]
    assert all(p.min_reconstruction > p.prose_reconstruction for p in pts if p.cadence <= 50)
    c = next(c for c in f.crossovers if c.penalty == 0.02)
    assert c.cadence is not None
    assert 50 < c.cadence < 75
    assert c.cycles is not None
    assert 500 / 75 < c.cycles < 10


def test_crossover_runs_away_faster_than_one_over_p(sweep: tuple[Path, SweepFindings]) -> None:
    _out, f = sweep
    assert f.exponent is not None
    assert round(f.exponent, 1) == -1.6
    cadences = [c.cadence for c in f.crossovers if c.cadence is not None]
    assert len(cadences) == len(f.crossovers)
    assert cadences == sorted(cadences)  # larger penalty → crossover at coarser cadence


def test_prose_stays_behind_pooled_at_the_published_penalty(
    sweep: tuple[Path, SweepFindings],
) -> None:
    _out, f = sweep
    assert 0.02 in f.pooled_prose_behind_everywhere


def test_sweep_rows_are_blind_plus_degrade_for_structural_lineage_gates_as_in_the_lab(
    sweep: tuple[Path, SweepFindings],
) -> None:
    out, _f = sweep
    with (out / "sweep_metrics.csv").open() as fh:
        reader = csv.reader(fh)
        header = next(reader)
        first = next(reader)
        rows = [first, *reader]
    assert header == SWEEP_COLUMNS
    assert first[0] == "sweep"
    assert first[-1] == "0.005"
    assert {row[8] for row in rows} == {"blind", "degrade"}
    degrade = {(row[4], row[6]) for row in rows if row[8] == "degrade"}
    assert degrade == {
        (arm, cls)
        for arm in ("structural_min", "structural_perhop")
        for cls in ("lineage_blocklist", "lineage_allowlist")
    }
    # per run and penalty: 27 blind rows + 2 arms x 4 lineage gates in degrade
    runs = {(row[1], row[3], row[-1]) for row in rows}
    assert len(rows) == 35 * len(runs)


def test_sweep_runs_one_replay_per_cadence_and_seed_serving_every_penalty() -> None:
    tasks = sweep_tasks(default_sweep_config())
    assert len(tasks) == 280
    assert sum(len(t.labels) for t in tasks) == 1400
    assert (tasks[0].key.cadence, tasks[0].key.seed) == (2, 0)
    assert (tasks[20].key.cadence, tasks[20].key.seed) == (3, 0)
    assert tasks[0].result_penalties == (0.005, 0.01, 0.02, 0.05, 0.1)
    assert tasks[0].labels[2] == "sweep/C=2/med/seed=0/p=0.02"


def test_shared_replay_equals_one_replay_per_penalty() -> None:
    task = sweep_tasks(default_sweep_config())[21]  # C=3, seed 1
    events = generate(task.key.seed, task.steps, task.decision_every, DEFAULT_PROFILES["med"])
    shared = replay_penalties(events, task.params, task.result_penalties)
    for penalty, result in zip(task.result_penalties, shared, strict=True):
        alone = replay(events, replace(task.params, penalty=penalty))
        assert result == alone


def test_crossover_interpolates_in_log_cadence() -> None:
    assert crossover_cadence([10, 100], [1.0, -1.0]) == pytest.approx(10**1.5)
    assert crossover_cadence([10, 100], [1.0, 0.0]) == pytest.approx(100.0)
    assert crossover_cadence([10, 100, 1000], [-1.0, 1.0, 2.0]) is None
    assert crossover_cadence([10, 100], [-1.0, 1.0], either_direction=True) == pytest.approx(
        10**1.5
    )


def test_sweep_files_are_identical_for_one_and_two_workers(tmp_path: Path) -> None:
    cfg = replace(default_sweep_config(), compaction_cadence=(3, 25, 150), seeds=(0, 1, 2))
    one = run_sweep(cfg, tmp_path / "w1", workers=1, progress=False)
    two = run_sweep(cfg, tmp_path / "w2", workers=2, progress=False)
    assert one.n_runs == two.n_runs == 45
    assert one.fingerprint == two.fingerprint
    csv1 = (tmp_path / "w1" / "sweep_metrics.csv").read_bytes()
    assert csv1 == (tmp_path / "w2" / "sweep_metrics.csv").read_bytes()
