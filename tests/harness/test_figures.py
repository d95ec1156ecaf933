"""Figures: valid PNGs from documented columns, deterministic bytes, partial data tolerated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.figures import (
    CLASS_ORDER,
    agreement_figure,
    censored_side,
    crossover_figure,
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


# --------------------------------------------------------------------------- what is plotted


def test_agreement_bars_start_at_zero_and_legends_sit_above_the_bars() -> None:
    gates = _gate_rows(
        profiles=("med",),
        cadences=(10, 25),
        modes=("blind", "degrade", "rehydrate"),
        run_type="main",
    )
    fig = agreement_figure(gates)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0
        assert ax.patches
        assert all(bar.get_y() == 0 for bar in ax.patches)
        legend = ax.get_legend()
        assert legend is not None
        box = legend.get_window_extent(renderer)
        assert box.y0 >= ax.get_window_extent(renderer).y1 - 1  # above the axes, over no bar
    assert fig.get_suptitle().endswith("(main matrix)")


def test_agreement_title_names_a_trace_replay_as_such() -> None:
    gates = _gate_rows(profiles=("trace",), cadences=(25,), modes=("blind",), run_type="main")
    fig = agreement_figure(gates, source="trace replay")
    assert "(trace replay)" in fig.get_suptitle()
    assert "main matrix" not in fig.get_suptitle()


def test_censored_side_says_which_edge_of_the_grid_the_crossover_is_beyond() -> None:
    assert censored_side([3.0, 2.0, 0.5]) == "above"
    assert censored_side([-1.0, 2.0]) == "below"
    assert censored_side([0.0, 1.0]) == "below"
    assert censored_side([2.0, -1.0]) is None  # it crosses: not censored
    assert censored_side([float("nan")]) is None


def test_crossover_marks_a_crossing_censored_at_the_grid_edge() -> None:
    # structural_min stays worse than prose at both cadences: C* lies above 25
    gates = _gate_rows(profiles=("med",), cadences=(10, 25), modes=("blind",), run_type="sweep")
    sweep = gates.assign(penalty=0.01)
    fig = crossover_figure(sweep, crossover={0.01: None}, exponent=None, steps=500)
    ax, ax2 = fig.axes
    edge = [line for line in ax.get_lines() if line.get_marker() == ">"]
    assert len(edge) == 1
    assert list(np.asarray(edge[0].get_xdata())) == [25]
    assert list(np.asarray(edge[0].get_ydata())) == [0.0]
    assert edge[0].get_label() == "p = 0.01: C* > 25 (off the grid)"
    legend = ax.get_legend()
    assert legend is not None
    assert "p = 0.01: C* > 25 (off the grid)" in [t.get_text() for t in legend.get_texts()]
    assert any("p = 0.01 (C* > 25)" in t.get_text() for t in ax2.texts)


def test_crossover_found_on_the_grid_is_not_marked_censored() -> None:
    gates = _gate_rows(profiles=("med",), cadences=(10, 25, 50), modes=("blind",), run_type="sweep")
    sweep = gates.assign(penalty=0.01)
    fig = crossover_figure(sweep, crossover={0.01: 30.0}, exponent=None, steps=500)
    ax = fig.axes[0]
    assert not [line for line in ax.get_lines() if line.get_marker() in (">", "<")]
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert [list(np.asarray(c.get_xdata())) for c in crosses] == [[30.0]]
