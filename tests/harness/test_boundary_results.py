"""What a boundary run's result files say and show, read as a newcomer reads them.

Each test pins one thing a results file must get right without the docs:
paths valid after the staged folder is renamed, one definition of bytes
delivered with parts that add up, percentiles that pool, the same
denominator as summary.md, `–` where a mode has nothing to show, figures
that plot what they claim (checked on the matplotlib objects, not pixels).
"""

from __future__ import annotations

import csv
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from contracts.rules import MIN_DEADLINE_MS
from harness._words import count, yes_no
from harness.boundary.choices import TransportKind
from harness.boundary.records import BoundaryOutcome, BoundarySettings
from harness.boundary.report import (
    cadence_figure,
    cadence_ratios,
    cost_rows,
    cost_table,
    cost_vs_flips_figure,
    percentile,
    summary_markdown,
)
from harness.boundary.rtt import RttSweep, rtt_figure_of, run_rtt_sweep, write_rtt_outputs
from harness.boundary.runner import run_boundary
from harness.cli import main
from harness.config import ExperimentConfig
from harness.gates import GateClass

CFG = ExperimentConfig()


@pytest.fixture(scope="module")
def faithful() -> BoundaryOutcome:
    settings = BoundarySettings(seeds=(0,), steps=200, deadline_ms=10_000)
    return run_boundary(CFG, settings, None, progress=False)


def _per_arm_rows(markdown: str) -> dict[tuple[str, str], list[str]]:
    rows: dict[tuple[str, str], list[str]] = {}
    table = markdown.split("## Costs per arm and mode", 1)[1].split("Columns:", 1)[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[0] not in ("arm", "---"):
            rows[(cells[0], cells[1])] = cells
    return rows


def test_evidence_csv_file_column_names_files_that_exist_after_the_rename(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "res"
    argv = ["experiment", "boundary", "--fault", "refuse", "--steps", "120", "--seeds", "1"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    with (out / "boundary_evidence.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for row in rows:
        assert ".partial" not in row["file"], row["file"]
        assert not Path(row["file"]).is_absolute()
        assert (out / row["file"]).is_file(), row["file"]


def test_pooled_percentile_lies_between_the_percentiles_of_the_groups_pooled() -> None:
    # 60 samples per arm, as the default slice has: a rank rounded from q*(n-1) made
    # the pooled p99 one arm's maximum, above both arms' p99.
    a = [1.0] * 58 + [10.39, 30.0]
    b = [1.0] * 58 + [13.08, 20.54]
    pooled = percentile(a + b, 99)
    assert min(percentile(a, 99), percentile(b, 99)) <= pooled
    assert pooled <= max(percentile(a, 99), percentile(b, 99))
    rng = random.Random(7)
    for _ in range(300):
        groups = [[rng.expovariate(1.0) for _ in range(rng.randint(1, 80))] for _ in range(2)]
        for q in (50, 90, 99):
            each = [percentile(g, q) for g in groups]
            assert min(each) <= percentile(groups[0] + groups[1], q) <= max(each)


def test_percentile_is_the_smallest_sample_with_q_percent_at_or_below() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([], 99) == 0.0


def test_bytes_delivered_is_one_figure_and_the_deliver_column_parts_add_up(
    faithful: BoundaryOutcome,
) -> None:
    md = summary_markdown(faithful, cost_rows(faithful))
    rows = _per_arm_rows(md)
    headline = re.search(
        r"\| bytes delivered per decision \(value \+ statements\) \| [\d,]+ \(full lineage,"
        r" ground_truth\) \| ([\d,]+) \(structural_min: ([\d,]+) value \+ ([\d,]+) statements",
        md,
    )
    assert headline is not None, md
    total, value, statements = (int(g.replace(",", "")) for g in headline.groups())
    assert total == value + statements
    for key, cells in rows.items():
        m = re.fullmatch(r"([\d,]+) = ([\d,]+) \+ ([\d,]+) \+ ([\d,]+)", cells[6])
        assert m is not None, (key, cells[6])
        whole, *parts = (int(g.replace(",", "")) for g in m.groups())
        assert whole == sum(parts), (key, cells[6])
    smin = rows[("structural_min", "rehydrate")][6]
    assert f"= {value:,} + {statements:,} +" in smin


def test_blind_and_degrade_rows_show_a_dash_for_rehydration_latency(
    faithful: BoundaryOutcome,
) -> None:
    rows = _per_arm_rows(summary_markdown(faithful, cost_rows(faithful)))
    for (arm, mode), cells in rows.items():
        if mode == "rehydrate":
            assert re.fullmatch(r"[\d.]+ / [\d.]+", cells[9]), cells
            assert cells[4] != "–"
        else:
            assert cells[9] == "–", (arm, mode, cells[9])
            assert cells[4] == "–", (arm, mode, cells[4])
            assert "0.0 / 0.0" not in cells


def test_lookups_are_per_100_lineage_gate_decisions_as_in_summary_md(
    faithful: BoundaryOutcome,
) -> None:
    md = summary_markdown(faithful, cost_rows(faithful))
    assert "lookups /100 lineage-gate dec." in md
    rows = _per_arm_rows(md)
    lookups = n = 0
    for run in faithful.runs:
        for r in run.in_process_rows:
            if r[0] == "structural_min" and r[4] == "rehydrate":
                assert GateClass(str(r[2])).is_lineage
                lookups += int(str(r[11]))
                n += int(str(r[5]))
    assert n > 0
    assert lookups > 0
    assert rows[("structural_min", "rehydrate")][3] == f"{100 * lookups / n:.1f}"


def test_every_per_arm_column_is_defined_under_the_table(faithful: BoundaryOutcome) -> None:
    md = summary_markdown(faithful, cost_rows(faithful))
    notes = md.split("Columns:", 1)[1].split("\n\n", 2)[1]
    header = md.split("| arm | mode |", 1)[1].split("\n", 1)[0]
    for column in [c.strip() for c in header.strip("|").split("|")]:
        name = column.split(" = ")[0].replace(" (in → across)", "")
        assert f"- {name}" in notes, name
    assert "True" not in md
    assert "None" not in md


def test_cost_table_says_whether_the_holder_cache_was_on(faithful: BoundaryOutcome) -> None:
    assert "| holder cache (folds verified once are not demanded again) | – | off |" in (
        cost_table(faithful)
    )
    remote = replace(faithful, settings=replace(faithful.settings, transport=TransportKind.REMOTE))
    assert "| – | on (running nodes keep every fold they verified) |" in cost_table(remote)


def test_no_witness_counts_unanswered_demands_as_unconfirmed_suspicions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nw"
    argv = ["experiment", "boundary", "--fault", "drop", "--no-witness"]
    argv += ["--deadline-ms", str(MIN_DEADLINE_MS)]
    argv += ["--steps", "100", "--seeds", "1", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("boundary: 1 run in ")  # not "1 runs"
    meta = json.loads((out / "boundary_meta.json").read_text())
    kept = meta["origin_outcomes"]["origin:unanswered_unconfirmed"]
    assert kept > 0
    assert meta["evidence_by_kind"] == {}
    evidence_dir = out / "evidence"
    assert not evidence_dir.exists() or not any(evidence_dir.iterdir())  # nothing written
    line = next(x for x in printed.splitlines() if x.startswith("evidence:"))
    assert (
        f"unconfirmed suspicions (unanswered, no witness confirmed; not evidence): origin {kept}"
        in line
    )
    assert f"origin {kept}" in (out / "boundary.md").read_text()


def test_faithful_run_says_it_has_no_unconfirmed_suspicion(faithful: BoundaryOutcome) -> None:
    assert "unconfirmed suspicions: none" in cost_table(faithful)
    assert faithful.unconfirmed_suspicions == {}


# --------------------------------------------------------------------------- figures


def test_cost_vs_flips_plots_one_point_per_arm_and_mode_and_no_delivery_rows(
    faithful: BoundaryOutcome,
) -> None:
    costs = cost_rows(faithful)
    assert any(r["mode"] == "delivery" for r in costs)
    fig = cost_vs_flips_figure(costs, "somewhere")
    assert fig is not None
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    expected = {
        f"{r['arm']} / {r['mode']}"
        for r in costs
        if r["setting"] == "boundary" and r["cadence"] == "all" and r["arm"] != "origin"
    }
    assert len(labels) == len(set(labels)) == len(expected)
    assert set(labels) == expected
    for coll in ax.collections:
        for x, y in np.asarray(coll.get_offsets()):
            assert y > 0, (coll.get_label(), x, y)  # bytes on the wire: never a (0, 0) point


def test_figure_titles_fit_the_figure_on_running_nodes(faithful: BoundaryOutcome) -> None:
    where = (
        "gRPC to 4 running node processes; RTT: as the network gives (loopback: no"
        " added delay); fault: none"
    )
    figures = [
        cost_vs_flips_figure(cost_rows(faithful), where),
        cadence_figure(cadence_ratios(faithful), where),
    ]
    for fig in figures:
        assert fig is not None
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        title = fig.axes[0].title
        box = title.get_window_extent(renderer)
        assert box.x0 >= fig.bbox.x0, title.get_text()
        assert box.x1 <= fig.bbox.x1, title.get_text()
        assert "fault: none" in title.get_text().replace("\n", " ")


def test_cadence_figure_labels_its_lines_and_says_when_it_has_one_cadence(
    faithful: BoundaryOutcome,
) -> None:
    fig = cadence_figure(cadence_ratios(faithful), "here")
    assert fig is not None
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert "target ≤ 0.75" in labels
    assert "full lineage (1.0)" in labels
    assert all(line.get_label() in labels for line in ax.get_lines())
    assert "one cadence in this slice (C = 25)" in ax.get_title()
    assert ax.get_ylim()[0] == 0


def test_cadence_figure_with_several_cadences_draws_curves_without_the_note() -> None:
    ratios = [(10, 2000.0, 1000.0, 200.0, 0.6), (25, 2000.0, 1300.0, 140.0, 0.72)]
    fig = cadence_figure(ratios, "here")
    assert fig is not None
    ax = fig.axes[0]
    assert "one cadence" not in ax.get_title()
    assert [np.asarray(line.get_xdata()).tolist() for line in ax.get_lines()[:2]] == [
        [10, 25],
        [10, 25],
    ]


# --------------------------------------------------------------------------- RTT sweep


@pytest.fixture(scope="module")
def rtt_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[RttSweep, Path]:
    out = tmp_path_factory.mktemp("rtt")
    settings = BoundarySettings(
        seeds=(0,), steps=100, deadline_ms=10_000, transport=TransportKind.GRPC
    )
    # one positive RTT: the case where a two-point reference line had nothing to draw
    sweep = run_rtt_sweep(CFG, settings, [0.0, 2.0], out, progress=False)
    write_rtt_outputs(sweep, out)
    return sweep, out


def test_rtt_summary_defines_every_column_under_its_table(
    rtt_sweep: tuple[RttSweep, Path],
) -> None:
    _, out = rtt_sweep
    md = (out / "boundary_rtt.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| RTT ms |"))
    notes = md.split("Columns", 1)[1]
    for column in [c.strip() for c in header.strip("|").split("|")]:
        assert f"- {column}:" in notes, column


def test_rtt_figure_draws_every_series_its_legend_names(rtt_sweep: tuple[RttSweep, Path]) -> None:
    sweep, _ = rtt_sweep
    fig = rtt_figure_of(sweep)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        named = {t.get_text() for t in legend.get_texts()}
        drawn = [line for a in fig.axes for line in a.get_lines() if line.get_label() in named]
        assert {line.get_label() for line in drawn} == named
        for line in drawn:
            visible_line = len(np.asarray(line.get_xdata())) >= 2 and line.get_linestyle() != "None"
            visible_marker = line.get_marker() not in ("None", "", " ", None)
            assert visible_line or visible_marker, line.get_label()
    lat = fig.axes[0]
    one_rtt = next(line for line in lat.get_lines() if line.get_label() == "one RTT (y = x)")
    assert list(np.asarray(one_rtt.get_xdata())) == [2.0]
    assert one_rtt.get_marker() == "x"


def test_counts_agree_with_their_noun() -> None:
    assert count(1, "run") == "1 run"
    assert count(2, "run") == "2 runs"
    assert count(0, "receipt") == "0 receipts"
    assert count(1, "re-ask") == "1 re-ask"
    assert count(1_200, "seed") == "1,200 seeds"
    assert yes_no(True) == "yes"
    assert yes_no(False) == "no"


def test_summary_explains_its_terms_where_first_used(faithful: BoundaryOutcome) -> None:
    md = summary_markdown(faithful, cost_rows(faithful))
    decisions = md.split("## Decisions", 1)[1].split("- in-process fingerprint", 1)[0]
    for term in ("*fingerprint*", "*gate_metrics rows*", "*falls back to its polarity*"):
        assert term in decisions, term
    assert "Per compaction cadence C (steps between compactions)" in md
    assert "origin outcomes per rehydration (origin, what it did when demanded: count)" in md
