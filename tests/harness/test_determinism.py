"""Determinism: pinned decision-log fingerprints; identical files for any worker count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config import DEFAULT_PROFILES, DeathSpiralConfig, ExperimentConfig
from harness.replay import ReplayParams, replay
from harness.runner import run_main
from harness.trajectory import generate

# SHA-256 of the canonical decision log (harness.fingerprint) per run.
PINNED = {
    ("med", 25, 0): "0cee7f0c57e7aaa94ae246bbd0d0bfdacd7bd1f69f50476c5e106dc61881f79a",
    ("med", 25, 1): "c3729baa9cff026307cdffee651a2d3deeb0ba26a6fc51fd0b75e269b5c393e2",
    ("med", 25, 2): "782d59c05e864fd10129a35dbf4b0c284da3067db784f41bf62a9c82b00f47f8",
    ("low", 10, 7): "6154f9514fd5410cdedde59befb8fedb8ed2edd7fb761272042e6341f48fd072",
    ("high", 50, 19): "4804aca863db57892c7a7a3abb7f2e2903f9c0430a9aef8f055b4e78978f9acb",
}
DEATH_SPIRAL = "fdc8c8b7660f9a1d5533d6090c541e64f1e6b307361ca9c1f392c2576137d23b"
MATRIX = "d7ce83713af9aaf2e1d9b21a98361210bba2747995830f9a941e593164f669bc"


@pytest.mark.parametrize(("profile", "cadence", "seed"), sorted(PINNED))
def test_decision_log_fingerprint_is_pinned_per_seed(profile: str, cadence: int, seed: int) -> None:
    events = generate(seed, 500, 5, DEFAULT_PROFILES[profile])
    result = replay(events, ReplayParams(cadence=cadence, prose_seed=seed))
    assert result.n_decisions == 100
    assert result.fingerprint == PINNED[(profile, cadence, seed)]


def test_death_spiral_fingerprint_is_pinned() -> None:
    events = generate(0, 5000, 5, DEFAULT_PROFILES["med"])
    result = replay(events, ReplayParams(cadence=25, prose_seed=0, record_death_spiral=True))
    assert result.fingerprint == DEATH_SPIRAL


def test_repeated_replays_are_identical() -> None:
    events = generate(11, 500, 5, DEFAULT_PROFILES["high"])
    a = replay(events, ReplayParams(cadence=10, prose_seed=11))
    b = replay(list(events), ReplayParams(cadence=10, prose_seed=11))
    assert a == b


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".csv"}


def test_output_files_are_identical_for_one_and_two_workers(tmp_path: Path) -> None:
    cfg = ExperimentConfig(
        seeds=(0, 1, 2), death_spiral_run=DeathSpiralConfig(steps=1000, compaction_cadence=25)
    )
    one = run_main(cfg, tmp_path / "w1", workers=1, progress=False)
    two = run_main(cfg, tmp_path / "w2", workers=2, progress=False)
    three = run_main(cfg, tmp_path / "w3", workers=3, progress=False)
    assert one.fingerprint == two.fingerprint == three.fingerprint
    assert _files(tmp_path / "w1") == _files(tmp_path / "w2") == _files(tmp_path / "w3")
    meta = json.loads((tmp_path / "w2" / "run_meta.json").read_text())
    assert meta["fingerprint"] == one.fingerprint
    assert meta["workers"] == 2
    assert len(meta["run_fingerprints"]) == 28


def test_full_matrix_fingerprint_is_pinned(tmp_path: Path) -> None:
    outcome = run_main(ExperimentConfig(), tmp_path, workers=2, progress=False)
    assert outcome.n_runs == 181
    assert outcome.fingerprint == MATRIX
