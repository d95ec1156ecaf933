"""``summary.md``: every printed number is analysis's, formatted as the write-up prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import Findings, SweepFindings, analyze, analyze_sweep
from harness.cli import UsageError, main
from harness.report import FIGURE_FILES, SUMMARY_FILE, write_report

EXAMPLES = Path(__file__).resolve().parents[2] / "experiments" / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_SMALL_SWEEP = """\
steps: 500
decision_every: 5
compaction_cadence: [10, 25, 50, 75, 100]
lineage_keep_hops: 5
allowlist_window: 8
reconstruction_penalty: 0.02
penalty_grid: [0.01, 0.02, 0.05]
profile: med
degradation_profiles:
  med: {p_unverified: 0.15, p_fallback: 0.15, p_flaky: 0.08, p_stale: 0.25}
seeds: 2
death_spiral_run: null
prose: {sigma: 0.08, taint_recall: 0.6, taint_precision: 0.9, parse_failure_rate: 0.0}
"""


def _run(*argv: str) -> None:
    assert main([*argv, "--workers", "1", "--no-progress"]) == 0


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A real 2-seed main run (plus the death-spiral run) and a 30-run sweep, reported."""
    base = tmp_path_factory.mktemp("report")
    out, sweep_out = base / "results", base / "results-sweep"
    _run("experiment", "run", "--out", str(out), "--seeds", "2")
    config = base / "sweep.yaml"
    config.write_text(_SMALL_SWEEP, encoding="utf-8")
    _run("experiment", "sweep", "--config", str(config), "--out", str(sweep_out))
    write_report(out, sweep_out)
    return out, sweep_out, (out / SUMMARY_FILE).read_text(encoding="utf-8")


def _pct(x: float) -> str:
    return f"{x:.2f}%"


def test_headlines_and_verdicts_are_the_analysis_numbers(small: tuple[Path, Path, str]) -> None:
    out, _, text = small
    f: Findings = analyze(out)
    assert f.irreversible_false_proceed_pct is not None
    assert f.lineage_lookups_per_100 is not None
    assert f.lineage_flip_rehydrate_pct is not None
    assert f"1. **{_pct(f.irreversible_false_proceed_pct)}** of irreversible" in text
    assert f"at compaction cycle **{f.death_cycle_min}**" in text
    assert f"**{f.flip_ratio:.2f}×** — prose disagrees with the oracle on " in text
    assert (
        f"on {_pct(f.flip_prose_pct)} of decisions, structural_min on {_pct(f.flip_min_pct)}"
        in text
    )
    assert (
        f"**{f.lineage_lookups_per_100:.0f}** cold-storage lookups per 100 lineage-gate decisions "
        f"buy the flip rate down from {_pct(f.lineage_flip_blind_pct)} to "
        f"{_pct(f.lineage_flip_rehydrate_pct)}"
    ) in text
    for h in f.hypotheses:
        assert (
            f"| {h.hid} | {h.statement} | {h.criterion} | {h.measured} | **{h.verdict}** |" in text
        )
    assert text.index("## Headline numbers") < text.index("## Hypotheses") < text.index("## Per")


def test_tables_print_the_analysis_rows(small: tuple[Path, Path, str]) -> None:
    out, _, text = small
    f = analyze(out)
    for row in f.per_class:
        cells = (row.prose, row.structural_min, row.structural_perhop)
        assert f"| {row.gate_class} | " + " | ".join(_pct(c) for c in cells) + " |" in text
    for m in f.payment:
        assert (
            f"| {m.mode} | {_pct(m.agreement_pct)} | {_pct(m.false_proceed_pct)} | "
            f"{_pct(m.false_stop_pct)} | {m.lookups_per_100:.1f} | {m.kb_per_100:.1f} | {m.n} |"
        ) in text
    for d in f.death_cycles:
        assert f"| {d.gate} | {d.theta:.2f} | {d.closed_form:.1f} | {d.empirical_min} |" in text
    assert f"structural_min reconstruction MAE {f.drift_min_reconstruction:.4f}" in text
    assert f"structural_perhop {f.drift_perhop_reconstruction:.4f}" in text
    for c in f.per_config:
        assert f"| {c.cadence} | {c.profile} |" in text
    assert f.prose_channel is not None
    assert f"| taint recall | 0.600 | {f.prose_channel.realized_recall:.3f} |" in text


def test_crossover_section_prints_the_sweep_analysis(small: tuple[Path, Path, str]) -> None:
    _, sweep_out, text = small
    s: SweepFindings = analyze_sweep(sweep_out)
    for c in s.crossovers:
        star = "none on grid" if c.cadence is None else f"{c.cadence:.1f}"
        assert f"| {c.penalty:g} | {star} |" in text
    assert s.exponent is not None
    assert f"cycles* ∝ p^{s.exponent:.2f}" in text
    assert text.count("### p = ") == 3


def test_figures_are_valid_nonblank_pngs_linked_from_the_summary(
    small: tuple[Path, Path, str],
) -> None:
    import matplotlib.image as mpimg

    out, _, text = small
    for name in FIGURE_FILES.values():
        path = out / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        pixels = mpimg.imread(path)
        height, width = pixels.shape[:2]
        assert width >= 800
        assert height >= 400
        assert float(pixels.std()) > 0.05
        assert f"]({name})" in text


def test_report_on_a_trace_run_states_what_was_mapped_skipped_and_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.figures

    titled: list[str] = []
    draw = harness.figures.plot_agreement_by_class

    def spy(gates: Any, path: Path, *, source: str = "main matrix") -> Path:
        titled.append(source)
        return draw(gates, path, source=source)

    monkeypatch.setattr(harness.figures, "plot_agreement_by_class", spy)

    from harness.trace import load_trace

    trace = EXAMPLES / "trace-research.jsonl"
    rules = EXAMPLES / "rules-research.yaml"
    _run(
        "experiment",
        "run",
        "--trace",
        str(trace),
        "--trace-format",
        "provnet",
        "--rules",
        str(rules),
        "--out",
        str(tmp_path),
    )
    meta = json.loads((tmp_path / "run_meta.json").read_text(encoding="utf-8"))
    loaded = load_trace(trace, rules)
    assert meta["trace"] == {"format": "provnet", **json.loads(json.dumps(loaded.summary))}
    written = write_report(tmp_path, None)
    text = (tmp_path / SUMMARY_FILE).read_text(encoding="utf-8")
    assert {p.name for p in written} == {
        SUMMARY_FILE,
        FIGURE_FILES["agreement"],
        FIGURE_FILES["false_proceed"],
    }
    assert "# Trace replay: summary" in text
    # the abbreviations the tables use are spelt out where they are shown
    assert "*fp* (false-proceed): the arm proceeds where the oracle blocks" in text
    assert "*lookups / 100*: folded-hop pointers dereferenced" in text
    # the mapping, which every number depends on, is read first
    assert text.index("## Trace mapping") < text.index("## Headline numbers")
    assert titled == ["trace replay"]
    assert "- records read: 400; mapped: 376; skipped (unknown op): 24" in text
    assert "| heartbeat | 0 | 11 |" in text
    assert '| rules[4] tool_call when status != "ok" -> taint:tool_flaky:{step}, ' in text
    decisions = loaded.summary["decisions"]
    assert isinstance(decisions, dict)
    import pandas as pd

    gates = pd.read_csv(tmp_path / "gate_metrics.csv")
    # keyed as the lab keys trace replays: (main, C, trace, 0)
    assert set(gates["run_type"]) == {"main"}
    assert set(gates["profile"]) == {"trace"}
    assert set(gates["n"]) == {decisions["total"]}


def _copy_run(src: Path, dst: Path) -> Path:
    """A copy without the run's file digests (as a lab folder has none), to damage."""
    dst.mkdir()
    for item in src.iterdir():
        if item.is_file() and item.suffix in (".csv", ".json"):
            (dst / item.name).write_bytes(item.read_bytes())
    meta = json.loads((dst / "run_meta.json").read_text(encoding="utf-8"))
    del meta["files"]
    (dst / "run_meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return dst


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("rm gate_metrics.csv", "gate_metrics.csv: missing (expected gate metrics rows)"),
        ("rm run_meta.json", "run_meta.json: missing (expected the run_meta.json of the run)"),
        ("drop gate_metrics.csv n_agree", "gate_metrics.csv: missing columns n_agree"),
        ("header-only drift.csv", "drift.csv: no rows (expected per-axis drift rows)"),
        ("text gate_metrics.csv n", "gate_metrics.csv: column n: expected integers"),
        ("garbage run_meta.json", "run_meta.json: not valid JSON"),
        ("list run_meta.json", "run_meta.json: expected a JSON object with a 'config' entry"),
    ],
)
def test_malformed_results_dir_is_a_usage_error_naming_file_and_expectation(
    small: tuple[Path, Path, str], tmp_path: Path, damage: str, expected: str
) -> None:
    out = _copy_run(small[0], tmp_path / "r")
    verb, name, *rest = damage.split()
    path = out / name
    if verb == "rm":
        path.unlink()
    elif verb == "drop":
        import pandas as pd

        pd.read_csv(path).drop(columns=rest).to_csv(path, index=False)
    elif verb == "header-only":
        path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    elif verb == "text":
        import pandas as pd

        frame = pd.read_csv(path)
        frame[rest[0]] = frame[rest[0]].astype(str)
        frame.loc[0, rest[0]] = "many"
        frame.to_csv(path, index=False)
    elif verb == "garbage":
        path.write_text("{not json", encoding="utf-8")
    elif verb == "list":
        path.write_text("[]", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        write_report(out, None)
    assert str(out) in str(info.value)
    assert expected in str(info.value)


def test_missing_results_and_sweep_dirs_are_named(
    small: tuple[Path, Path, str], tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match=r"nowhere: results directory not found \(expected the"):
        write_report(tmp_path / "nowhere", None)
    with pytest.raises(UsageError, match=r"sweepless: results directory not found"):
        write_report(small[0], tmp_path / "sweepless")
    empty = tmp_path / "empty-sweep"
    empty.mkdir()
    with pytest.raises(UsageError, match=r"sweep_metrics\.csv: missing \(expected sweep metrics"):
        write_report(small[0], empty)


def test_report_command_on_a_missing_dir_exits_two_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["experiment", "report", "--out", str(tmp_path / "none"), "--sweep-out", "x"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"provnet: error: {tmp_path / 'none'}: results directory not found" in err
    assert "Traceback" not in err


#: The Part 5 write-up's printed numbers (experiment spec §8), as summary.md must print them.
PUBLISHED = (
    "1. **3.47%** of irreversible-action decisions",
    "at compaction cycle **35**",
    "closed form 34.3 at θ = 0.50; closed form 29.6 at θ = 0.55",
    "structural_perhop never dies",
    "**1.39×** — prose disagrees with the oracle on 9.97% of decisions, structural_min on 7.16%",
    "**459** cold-storage lookups per 100 lineage-gate decisions buy the flip rate down from "
    "8.01% to 0.00%",
    "| score | 2.44% | 0.00% | 0.00% |",
    "| reconstruction | 4.97% | 16.17% | 0.00% |",
    "| lineage_blocklist | 6.82% | 8.50% | 8.50% |",
    "| lineage_allowlist | 29.41% | 7.53% | 7.53% |",
    "| blind | 91.22% | 8.78% | 0.00% | 0.0 |",
    "| degrade | 95.72% | 0.00% | 4.28% | 0.0 |",
    "| rehydrate | 100.00% | 0.00% | 0.00% | 639.9 |",
    "| archive_all_axes_floor | 0.50 | 34.3 | 35 | never |",
    "| publish_discounted_thresholds | 0.55 | 29.6 | 29 | never |",
    "| structural_min | 0.0000 | 0.0000 | 0.0000 | 0.0000 | 0.2100 |",
    "| structural_perhop | 0.0000 | 0.0000 | 0.0000 | 0.0000 | 0.0191 |",
)


def test_default_matrix_report_prints_every_published_number(tmp_path: Path) -> None:
    out = tmp_path / "results"
    assert main(["experiment", "run", "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    write_report(out, None)
    text = (out / SUMMARY_FILE).read_text(encoding="utf-8")
    missing = [line for line in PUBLISHED if line not in text]
    assert missing == []
    verdicts = [
        line.rsplit("|", 2)[-2].strip()
        for line in text.splitlines()
        if line.startswith(("| H1 ", "| H2 ", "| H3 ", "| H4 "))
    ]
    assert verdicts == ["**PASS**", "**PASS**", "**PASS**", "**FAIL**"]


def test_report_without_rehydration_says_so_and_lists_no_rehydrate_rows(tmp_path: Path) -> None:
    _run("experiment", "run", "--out", str(tmp_path), "--seeds", "1", "--no-rehydrate")
    write_report(tmp_path, None)
    text = (tmp_path / SUMMARY_FILE).read_text(encoding="utf-8")
    assert "4. Rehydration: not evaluated in this run (`--no-rehydrate`)." in text
    assert "| rehydrate |" not in text
    assert "| degrade |" in text
