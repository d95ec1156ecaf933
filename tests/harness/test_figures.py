"""Figures: valid PNGs from documented columns, deterministic bytes, partial data tolerated."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.figures import (
    CLASS_ORDER,
    plot_agreement_by_class,
    plot_crossover,
    plot_false_proceed_vs_cadence,
    plot_recon_decay,
)
from harness.metrics import GATE_COLUMNS, RECON_COLUMNS, SWEEP_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _gate_rows(
    *, profiles: tuple[str, ...], cadences: tuple[int, ...], modes: tuple[str, ...], run_type: str
) -> pd.DataFrame:
    rows = []
    for profile in profiles:
        for cadence in cadences:
            for arm_index, arm in enumerate(("prose", "structural_min", "structural_perhop")):
                for class_index, gate_class in enumerate(CLASS_ORDER):
                    for mode in modes:
                        flips = (arm_index + class_index + cadence // 10) % 7
                        rows.append(
                            {
                                "run_type": run_type,
                                "cadence": cadence,
                                "profile": profile,
                                "seed": 0,
                                "arm": arm,
                                "policy": f"gate_{class_index}",
                                "gate_class": gate_class,
                                "irreversible": class_index % 2 == 0,
                                "mode": mode,
                                "n": 100,
                                "n_agree": 100 - flips,
                                "n_false_proceed": flips // 2,
                                "n_false_stop": flips - flips // 2,
                                "n_proceed": 60,
                                "n_oracle_proceed": 60,
                                "lookups": 0,
                                "bytes_read": 0,
                            }
                        )
    frame = pd.DataFrame(rows)
    assert list(frame.columns) == GATE_COLUMNS
    return frame


def _recon(cycles: int = 60, penalty: float = 0.02) -> pd.DataFrame:
    rows = []
    for cycle in range(cycles):
        for k in range(5):
            rows.append(
                {
                    "run_type": "death_spiral",
                    "cadence": 25,
                    "profile": "med",
                    "seed": 0,
                    "step": cycle * 25 + 5 * (k + 1),
                    "n_compactions": cycle,
                    "recon_min": (1 - penalty) ** cycle,
                    "fidelity_perhop": 1 - penalty if cycle else 1.0,
                    "recon_prose": 1.0 - 0.01 * (k % 3),
                    "cycle": cycle,
                }
            )
    frame = pd.DataFrame(rows)
    assert list(frame.columns) == RECON_COLUMNS
    return frame


def _assert_png(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = mpimg.imread(path)
    assert pixels.shape[0] >= 300
    assert pixels.shape[1] >= 500
    assert float(pixels.std()) > 0.05


def test_recon_decay_png_is_byte_identical_across_renders(tmp_path: Path) -> None:
    curve = _recon()
    first = plot_recon_decay(
        curve, tmp_path / "a.png", death_cycle=35, thresholds={0.5: 35, 0.55: 29}, penalty=0.02
    )
    second = plot_recon_decay(
        curve, tmp_path / "b.png", death_cycle=35, thresholds={0.5: 35, 0.55: 29}, penalty=0.02
    )
    _assert_png(first)
    assert first.read_bytes() == second.read_bytes()


def test_recon_decay_without_a_death_cycle_still_draws(tmp_path: Path) -> None:
    _assert_png(plot_recon_decay(_recon(10), tmp_path / "r.png", death_cycle=None))


def test_figures_cope_with_a_blind_only_single_profile_trace_run(tmp_path: Path) -> None:
    gates = _gate_rows(profiles=("trace",), cadences=(10, 25), modes=("blind",), run_type="trace")
    _assert_png(plot_agreement_by_class(gates, tmp_path / "agree.png"))
    _assert_png(plot_false_proceed_vs_cadence(gates, tmp_path / "fp.png"))


def test_agreement_figure_with_all_modes_and_three_profiles(tmp_path: Path) -> None:
    gates = _gate_rows(
        profiles=("low", "med", "high"),
        cadences=(10, 25, 50),
        modes=("blind", "degrade", "rehydrate"),
        run_type="main",
    )
    _assert_png(plot_agreement_by_class(gates, tmp_path / "agree.png"))
    _assert_png(plot_false_proceed_vs_cadence(gates, tmp_path / "fp.png"))


def test_crossover_without_any_crossing_still_draws(tmp_path: Path) -> None:
    gates = _gate_rows(profiles=("med",), cadences=(10, 25, 50), modes=("blind",), run_type="sweep")
    sweep = pd.concat([gates.assign(penalty=0.01), gates.assign(penalty=0.02)], ignore_index=True)
    assert list(sweep.columns) == SWEEP_COLUMNS
    path = plot_crossover(
        sweep, tmp_path / "x.png", crossover={0.01: None, 0.02: None}, exponent=None, steps=500
    )
    _assert_png(path)
