"""What ``provnet experiment attest`` writes and prints, read without the docs.

The death-spiral run is shortened and its penalty raised (death at cycle 7),
as in test_attest.py, so the rows play in seconds. Figures are checked on
their matplotlib objects: which series, where the legends sit, the axis
limits — not pixels.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest

from harness.attest.policy import AttestPolicy
from harness.attest.report import (
    price_vs_lifetime_figure,
    recon_per_cycle_figure,
    row_numbers,
    summary_md,
)
from harness.attest.rows import Row, RowSpec
from harness.attest.runner import AttestSlice, RowResult, run_row
from harness.cli import main
from harness.config import DeathSpiralConfig, ExperimentConfig

FAST = dataclasses.replace(
    ExperimentConfig(),
    reconstruction_penalty=0.1,
    death_spiral_run=DeathSpiralConfig(steps=300, compaction_cadence=25),
)
POLICY = AttestPolicy(lifetime_steps=50)
#: Lifetimes given out of order, as `--lifetimes 625,5` gives them.
SPECS = [
    RowSpec(Row.NONE),
    RowSpec(Row.HONEST),
    RowSpec(Row.HONEST, lifetime_steps=200),
    RowSpec(Row.HONEST, lifetime_steps=5),
    RowSpec(Row.REVOKED),
    RowSpec(Row.TAINT_DISCHARGE),
]


@pytest.fixture(scope="module")
def results() -> list[RowResult]:
    return [asyncio.run(run_row(FAST, s, POLICY, AttestSlice())) for s in SPECS]


def _summary(results: list[RowResult]) -> str:
    nums = {r.name: row_numbers(r) for r in results}
    return summary_md(results, nums, results[0].fingerprint)


def test_summary_prints_no_python_literals(results: list[RowResult]) -> None:
    md = _summary(results)
    for literal in ("True", "False", "None", "nan", "{'", "':"):
        assert literal not in md, literal


def test_summary_lists_lifetimes_sorted(results: list[RowResult]) -> None:
    md = _summary(results)
    lifetimes = [int(m) for m in re.findall(r"^\| attest \| (\d+) \|", md, flags=re.M)]
    assert lifetimes == sorted(lifetimes)
    assert len(lifetimes) == 3


def test_summary_explains_its_jargon_and_its_choice_of_cycles(results: list[RowResult]) -> None:
    md = _summary(results)
    assert "rule 2.2" not in md
    assert "item 4" not in md
    first_a4 = md.index("A4")
    assert md[first_a4 : first_a4 + 4] == "A4: "  # explained where first used
    first_a5 = md.index("A5")
    assert md[first_a5 : first_a5 + 4] == "A5: "
    assert "Every tenth cycle, and the cycles either side of the death cycle (7)" in md
    opening = md.split("\n\n")[1]
    assert "A *death cycle* is" in opening  # defined in the opening paragraph
    assert "The spiral is *broken*" in opening
    # every price column is defined above its table
    price = md.split("## Price per 100 structural_min decisions", 1)[1]
    for term in ("lifetime", "full rehydrations", "attestations issued / verified", "p50 / p99 ms"):
        assert f"*{term}*" in price


def test_cli_prints_never_for_a_run_without_death(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    out = f"{tmp_path}/a"
    assert main(["experiment", "attest", "--rows", "none", "--steps", "150", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "death never → never" in printed
    assert printed.startswith("attest: 1 row, ")
    assert "None" not in printed


def test_recon_figure_legends_sit_outside_the_data_and_the_sample_size_is_shown(
    results: list[RowResult],
) -> None:
    fig = recon_per_cycle_figure(results)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.y0 >= ax.get_window_extent(renderer).y1 - 1, ax.get_ylabel()
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "attested" in labels
    lower = fig.axes[1]
    assert re.match(r"n = \d+–\d+ oracle-allowed evaluations per cycle", lower.get_title())


def test_price_figure_starts_at_zero_and_no_series_hides_another(
    results: list[RowResult],
) -> None:
    fig = price_vs_lifetime_figure(results)
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y0 >= ax.get_window_extent(renderer).y1 - 1  # above the data, covers none
    lines = ax.get_lines()
    assert [list(line.get_xdata()) for line in lines] == [[5, 50, 200]] * 4
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines}
    assert len(styles) == len(lines)
    for a in lines:
        for b in lines:
            if a is not b and list(a.get_ydata()) == list(b.get_ydata()):
                under, over = sorted((a, b), key=lambda line: line.get_zorder())
                # the series drawn below is wider, so it shows around the one on top
                assert under.get_linewidth() > over.get_linewidth()
                assert under.get_markersize() > over.get_markersize()
