"""``summary.md`` and the figures for a results directory (Part 5 write-up).

:func:`write_report` renders what :mod:`harness.analysis` computed — every
published number comes from :func:`harness.analysis.analyze` /
:func:`harness.analysis.analyze_sweep`, never recomputed here — formatted as
the write-up prints them: rates ``3.47%``, ratios ``1.39×``, lookups per 100
decisions ``459`` (headline) and ``639.9`` (tables), drift ``0.2100``,
closed-form cycles ``34.3``. Figures come from :mod:`harness.figures`.

``summary.md`` opens with the four headline numbers and the H1–H4 verdict
table, then: per gate class, per configuration (cadence × profile), payment
gate and rehydration, drift, prose channel, death-cycle analytics, crossover
(when a sweep directory is given) and, for trace runs, what the trace
mapping mapped, skipped and derived.

A missing or malformed results directory raises :class:`harness.cli_errors.UsageError`
naming the file and what was expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.cli_errors import UsageError

__all__ = ["FIGURE_FILES", "SUMMARY_FILE", "fmt_pct", "fmt_ratio", "write_report"]

SUMMARY_FILE = "summary.md"
FIGURE_FILES: dict[str, str] = {
    "recon_decay": "recon_decay.png",
    "agreement": "agreement_by_class.png",
    "false_proceed": "false_proceed_vs_cadence.png",
    "crossover": "crossover.png",
}
_ARMS = ("prose", "structural_min", "structural_perhop")
_AXES = ("freshness", "capability", "tool_integrity", "verification", "reconstruction")
_BOOL_COLUMNS = ("irreversible",)
_INT_COLUMNS = ("cadence", "seed", "n", "n_agree", "n_false_proceed", "n_false_stop", "lookups")


# ---------------------------------------------------------------- formatting


def _finite(x: float | None) -> bool:
    return x is not None and not math.isnan(x) and not math.isinf(x)


def fmt_pct(x: float | None) -> str:
    """A percentage as the write-up prints it: ``3.47%``."""
    return f"{x:.2f}%" if x is not None and _finite(x) else "n/a"


def fmt_ratio(x: float | None) -> str:
    """A ratio as the write-up prints it: ``1.39×``."""
    return f"{x:.2f}×" if x is not None and _finite(x) else "n/a"


def _fmt(x: float | None, spec: str) -> str:
    return format(x, spec) if x is not None and _finite(x) else "n/a"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` is one char per column: l or r (default r after col 0)."""
    cols = len(headers)
    spec = align or "l" + "r" * (cols - 1)
    rule = ["---:" if a == "r" else ":---" for a in spec]
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule) + " |"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return [*out, ""]


# ---------------------------------------------------------------- input checks


def _read_csv(path: Path, columns: Sequence[str], *, what: str) -> Any:
    import pandas as pd

    if not path.is_file():
        raise UsageError(f"{path}: missing (expected {what})")
    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # pandas raises several parser error types
        raise UsageError(f"{path}: not a readable CSV ({exc}); expected {what}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UsageError(
            f"{path}: missing columns {', '.join(missing)} (expected {what} with columns "
            f"{', '.join(columns)})"
        )
    if frame.empty:
        raise UsageError(f"{path}: no rows (expected {what})")
    for col in _INT_COLUMNS:
        if col in columns and not pd.api.types.is_integer_dtype(frame[col]):
            raise UsageError(f"{path}: column {col}: expected integers")
    for col in _BOOL_COLUMNS:
        if col in columns and not pd.api.types.is_bool_dtype(frame[col]):
            raise UsageError(f"{path}: column {col}: expected True/False")
    return frame


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(f"{path}: missing (expected the run_meta.json of the run)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or "config" not in meta:
        raise UsageError(f"{path}: expected a JSON object with a 'config' entry")
    return meta


def _check_dir(path: Path, what: str) -> None:
    if not path.exists():
        raise UsageError(f"{path}: results directory not found (expected {what})")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (expected {what})")


# ---------------------------------------------------------------- sections


def _headlines(f: Any, is_trace: bool) -> list[str]:
    lines = ["## Headline numbers", ""]
    if f.irreversible_false_proceed_pct is not None and f.headline_cell is not None:
        c, prof = f.headline_cell
        lines.append(
            f"1. **{fmt_pct(f.irreversible_false_proceed_pct)}** of irreversible-action decisions "
            f"(payment, send) proceeded when the uncompacted oracle said block — "
            f"structural_min, C={c}, {prof} profile, blind."
        )
    else:
        lines.append("1. Irreversible false-proceed at C=25, med: not in this run.")
    if f.death_cycle_min is not None:
        closed = "; ".join(
            f"closed form {d.closed_form:.1f} at θ = {d.theta:.2f}" for d in f.death_cycles
        )
        perhop = (
            "structural_perhop never dies"
            if f.death_cycle_perhop is None
            else f"structural_perhop dies at cycle {f.death_cycle_perhop}"
        )
        lines.append(
            f"2. structural_min memory dies at compaction cycle **{f.death_cycle_min}**: from that "
            f"cycle on, every reconstruction-coupled gate blocks permanently ({closed}). "
            f"{perhop}."
        )
    elif f.death_cycles:
        lines.append("2. structural_min never dies in the death-spiral run.")
    else:
        lines.append("2. Death cycle: no death-spiral run in this directory.")
    lines.append(
        f"3. Prose-vs-structural flip ratio: **{fmt_ratio(f.flip_ratio)}** — prose disagrees with "
        f"the oracle on {fmt_pct(f.flip_prose_pct)} of decisions, structural_min on "
        f"{fmt_pct(f.flip_min_pct)}, all gates pooled, blind."
    )
    if f.lineage_lookups_per_100 is not None and f.lineage_flip_rehydrate_pct is not None:
        lines.append(
            f"4. Rehydration: **{_fmt(f.lineage_lookups_per_100, '.0f')}** cold-storage lookups "
            f"per 100 lineage-gate decisions buy the flip rate down from "
            f"{fmt_pct(f.lineage_flip_blind_pct)} to {fmt_pct(f.lineage_flip_rehydrate_pct)}."
        )
    else:
        lines.append("4. Rehydration: not evaluated in this run (`--no-rehydrate`).")
    scope = "the trace replays" if is_trace else "the main matrix"
    lines += ["", f"Rates pool counts over {scope} ({f.n_runs} runs).", ""]
    lines += ["## Hypotheses (preregistered)", ""]
    lines += _table(
        ("", "hypothesis", "criterion", "measured", "verdict"),
        ((h.hid, h.statement, h.criterion, h.measured, f"**{h.verdict}**") for h in f.hypotheses),
        align="lllll",
    )
    lines += [
        "*flip*: a gate decision that differs from the uncompacted oracle's; *fp*"
        " (false-proceed): the arm proceeds where the oracle blocks; *fs* (false-stop): the"
        " arm blocks where the oracle proceeds. *Blind*, *degrade*, *rehydrate*: the lineage"
        " modes (see *Payment gate and rehydration*).",
        "",
    ]
    return lines


def _per_class(f: Any) -> list[str]:
    lines = ["## Per gate class", "", "Blind flip rate (disagreement with the oracle):", ""]
    lines += _table(
        ("gate class", "prose", "structural_min", "structural_perhop"),
        (
            (
                r.gate_class,
                fmt_pct(r.prose),
                fmt_pct(r.structural_min),
                fmt_pct(r.structural_perhop),
            )
            for r in f.per_class
        ),
    )
    return lines


def _per_config(f: Any) -> list[str]:
    cells: dict[tuple[int, str], dict[str, Any]] = {}
    for row in f.per_config:
        cells.setdefault((row.cadence, row.profile), {})[row.arm] = row
    lines = [
        "## Per configuration (cadence × profile)",
        "",
        "Blind flip rate over all gates, and the false-proceed rate on irreversible gates:",
        "",
    ]
    headers = ["C", "profile"]
    headers += [f"flip {a}" for a in _ARMS] + [f"irrev. fp {a}" for a in _ARMS]
    rows = []
    for (c, prof), arms in cells.items():
        rows.append(
            [str(c), prof]
            + [fmt_pct(arms[a].flip_pct) if a in arms else "n/a" for a in _ARMS]
            + [
                fmt_pct(arms[a].irreversible_false_proceed_pct) if a in arms else "n/a"
                for a in _ARMS
            ]
        )
    lines += _table(headers, rows, align="rl" + "r" * (len(headers) - 2))
    return lines


def _mode_rows(rows: Iterable[Any], *, with_arm: bool) -> list[list[str]]:
    out = []
    for r in rows:
        cells = [r.arm] if with_arm else []
        cells += [
            r.mode,
            fmt_pct(r.agreement_pct),
            fmt_pct(r.false_proceed_pct),
            fmt_pct(r.false_stop_pct),
            _fmt(r.lookups_per_100, ".1f"),
            _fmt(r.kb_per_100, ".1f"),
            str(r.n),
        ]
        out.append(cells)
    return out


def _rehydration(f: Any) -> list[str]:
    lines = [
        "## Payment gate and rehydration",
        "",
        "Blind decides on what survived compaction; degrade refuses to act when folded taints "
        "exist (blocklist) or the window is not provable (allowlist); rehydrate fetches the "
        "folded hops from the cold hop log. *lookups / 100*: folded-hop pointers dereferenced"
        " in the cold log per 100 of the row's gate decisions (*n*); *KB / 100*: kilobytes"
        " (1,000 bytes) of canonical hop JSON read per 100 of them.",
        "",
        "`payment_no_untrusted_taint` (irreversible, default-allow), both structural arms:",
        "",
    ]
    headers = ["mode", "agreement", "false-proceed", "false-stop", "lookups / 100", "KB / 100", "n"]
    lines += _table(headers, _mode_rows(f.payment, with_arm=False))
    lines += ["All lineage gates, per structural arm:", ""]
    lines += _table(
        ["arm", *headers], _mode_rows(f.rehydration, with_arm=True), align="ll" + "r" * 6
    )
    if f.lineage_lookups_per_100 is not None:
        lines += [
            f"Pooled over both structural arms: {_fmt(f.lineage_lookups_per_100, '.0f')} lookups "
            f"and {_fmt(f.lineage_kb_per_100, '.1f')} KB per 100 lineage-gate decisions; flip rate "
            f"blind {fmt_pct(f.lineage_flip_blind_pct)}, degrade "
            f"{fmt_pct(f.lineage_flip_degrade_pct)}, rehydrate "
            f"{fmt_pct(f.lineage_flip_rehydrate_pct)}.",
            "",
        ]
    return lines


def _drift(f: Any) -> list[str]:
    by_arm: dict[str, dict[str, float]] = {}
    for d in f.drift:
        by_arm.setdefault(d.arm, {})[d.axis] = d.mae
    lines = [
        "## Drift",
        "",
        "Mean absolute error of each axis score against the oracle at decision points (blind):",
        "",
    ]
    arms: list[str] = [a for a in ("structural_min", "structural_perhop", "prose") if a in by_arm]
    arms += sorted(set(by_arm) - set(arms))
    lines += _table(
        ["arm", *_AXES],
        ([a, *(_fmt(by_arm[a].get(x), ".4f") for x in _AXES)] for a in arms),
    )
    lines += [
        f"structural_min reconstruction MAE {_fmt(f.drift_min_reconstruction, '.4f')}, "
        f"structural_perhop {_fmt(f.drift_perhop_reconstruction, '.4f')}; largest base-axis MAE "
        f"on the structural arms {_fmt(f.drift_base_max, '.4f')} (running-min scores are "
        "lossless under compaction).",
        "",
    ]
    return lines


def _prose(f: Any) -> list[str]:
    p = f.prose_channel
    if p is None:
        return []
    if p.llm is None:
        intro = "Mock summarize→extract channel, assumed vs realised:"
    else:
        intro = (
            f"Real summarize→extract channel ({p.llm.get('provider')} {p.llm.get('model')}); "
            "realised vs the mock's assumed values:"
        )
    lines = ["## Prose channel", "", intro, ""]
    lines += _table(
        ("", "assumed", "realised"),
        (
            ("taint recall", _fmt(p.assumed_recall, ".3f"), _fmt(p.realized_recall, ".3f")),
            (
                "taint precision",
                _fmt(p.assumed_precision, ".3f"),
                _fmt(p.realized_precision, ".3f"),
            ),
        ),
    )
    lines += [
        f"{p.extractions:,} extractions, {p.parse_failures:,} parse failures; "
        f"{p.true_taints:,} true taints offered, {p.kept:,} kept, {p.fabricated:,} fabricated.",
        "",
    ]
    if p.llm is not None:
        lines += [
            f"{p.llm.get('calls')} requests sent, {p.llm.get('cache_hits')} answers from the "
            f"cache, {p.llm.get('refusals')} refusals (counted among the parse failures).",
            "",
        ]
    return lines


def _death(f: Any) -> list[str]:
    if not f.death_cycles:
        return []
    lines = [
        "## Death-cycle analytics",
        "",
        f"Death-spiral run: {f.death_spiral_compactions} compactions at penalty "
        f"p = {f.penalty:g}. Closed form n = ln θ / ln(1 − p) is the number of compactions "
        "until the min-folded reconstruction falls below the gate threshold θ; the empirical "
        "cycle is the first from which the arm blocks every oracle-allowed decision of that "
        "gate.",
        "",
    ]
    lines += _table(
        ("gate", "θ", "closed form n", "empirical structural_min", "structural_perhop"),
        (
            (
                d.gate,
                f"{d.theta:.2f}",
                _fmt(d.closed_form, ".1f"),
                "never" if d.empirical_min is None else str(d.empirical_min),
                "never" if d.empirical_perhop is None else str(d.empirical_perhop),
            )
            for d in f.death_cycles
        ),
    )
    return lines


def _crossover(s: Any, sweep_out: Path) -> list[str]:
    lines = [
        "## Crossover (sweep)",
        "",
        f"From `{sweep_out}` ({s.n_runs} runs, blind). C* is the cadence where structural_min's "
        "reconstruction-class flip rate minus prose's changes sign from positive to ≤ 0, "
        "interpolated in log10(C); cycles* = steps / C*.",
        "",
    ]
    lines += _table(
        ("penalty p", "C*", "cycles*", "closed-form death cycle (θ = 0.50)"),
        (
            (
                f"{c.penalty:g}",
                "none on grid" if c.cadence is None else _fmt(c.cadence, ".1f"),
                "n/a" if c.cycles is None else _fmt(c.cycles, ".1f"),
                _fmt(c.closed_form_death_cycle, ".1f"),
            )
            for c in s.crossovers
        ),
    )
    if s.exponent is not None:
        lines += [f"Fitted exponent: cycles* ∝ p^{s.exponent:.2f} (log-log least squares).", ""]
    block = getattr(s, "blocklist_crossover", None)
    if block is not None:
        direction = getattr(s, "blocklist_crossover_direction", None)
        extra = f" ({direction})" if direction else ""
        lines += [
            f"Blocklist gates: structural_min − prose changes sign at C ≈ {block:.1f}{extra}.",
            "",
        ]
    penalties = sorted({pt.penalty for pt in s.points})
    for p in penalties:
        pts = [pt for pt in s.points if pt.penalty == p]
        lines += [f"### p = {p:g}", ""]
        lines += _table(
            (
                "C",
                "recon. structural_min",
                "recon. prose",
                "recon. structural_perhop",
                "blocklist structural_min",
                "blocklist prose",
                "all gates structural_min",
                "all gates prose",
            ),
            (
                (
                    str(pt.cadence),
                    fmt_pct(pt.min_reconstruction),
                    fmt_pct(pt.prose_reconstruction),
                    fmt_pct(pt.perhop_reconstruction),
                    fmt_pct(pt.min_blocklist),
                    fmt_pct(pt.prose_blocklist),
                    fmt_pct(pt.min_all),
                    fmt_pct(pt.prose_all),
                )
                for pt in pts
            ),
            align="r" * 8,
        )
    return lines


def _trace(summary: dict[str, Any]) -> list[str]:
    lines = [
        "## Trace mapping",
        "",
        f"Trace `{summary.get('trace')}`, rules `{summary.get('rules') or '(none)'}`, "
        f"decision every {summary.get('decision_every')} steps (plus explicit decision records).",
        "",
        f"- records read: {summary.get('records_read')}; mapped: {summary.get('records_mapped')}; "
        f"skipped (unknown op): {summary.get('records_skipped')}",
    ]
    values = summary.get("values") or {}
    decisions = summary.get("decisions") or {}
    dropped = summary.get("merge_inputs_dropped") or {}
    lines.append(
        f"- values created {values.get('created')}, merged {values.get('merged')}, retired "
        f"{values.get('retired')}; implicit initial value: "
        f"{'yes' if summary.get('implicit_initial_value') else 'no'}"
    )
    lines.append(
        f"- decisions: {decisions.get('total')} ({decisions.get('periodic')} periodic, "
        f"{decisions.get('explicit')} explicit)"
    )
    lines.append(
        f"- merge inputs dropped: {dropped.get('retired', 0)} already retired, "
        f"{dropped.get('duplicate', 0)} duplicate; merges with no live input: "
        f"{dropped.get('merges_without_live_input', 0)}"
    )
    lines.append("")
    mapped = summary.get("ops_mapped") or {}
    skipped = summary.get("ops_skipped") or {}
    lines += ["Ops mapped and skipped:", ""]
    lines += _table(
        ("op", "mapped", "skipped"),
        (
            (op, str(mapped.get(op, 0)), str(skipped.get(op, 0)))
            for op in sorted(set(mapped) | set(skipped))
        ),
    )
    rules = summary.get("taints_derived") or []
    if rules:
        lines += [f"Taints derived by rule ({summary.get('taints_total')} taints in total):", ""]
        lines += _table(
            ("rule", "matched", "field missing"),
            (
                (str(r.get("describe")), str(r.get("matched")), str(r.get("field_missing")))
                for r in rules
            ),
        )
    return lines


def _coverage(coverage: dict[str, Any], summary: object) -> list[str]:
    """The lab's trace_coverage.json: what was mapped, skipped, warned and derived."""
    lines = ["## Trace mapping", ""]
    if isinstance(summary, dict) and summary.get("trace"):
        lines += [
            f"Trace `{summary.get('trace')}`, rules `{summary.get('rules') or '(lab defaults)'}`.",
            "",
        ]
    lines.append(
        f"- records: {coverage.get('n_records')}; mapped: {coverage.get('n_mapped')}; "
        f"skipped: {coverage.get('n_skipped')}"
    )
    for title, key in (
        ("skipped", "skipped_by_reason"),
        ("warnings", "warnings"),
        ("rule hits", "rule_hits"),
    ):
        entries = coverage.get(key) or {}
        if isinstance(entries, dict) and entries:
            lines.append(
                f"- {title}: " + "; ".join(f"{k}: {v}" for k, v in sorted(entries.items()))
            )
        else:
            lines.append(f"- {title}: none")
    lines.append("")
    return lines


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return data


def _figures_section(written: dict[str, Path]) -> list[str]:
    captions = {
        "recon_decay": "Reconstruction decay in the death-spiral run",
        "agreement": "Agreement with the oracle by gate class and arm",
        "false_proceed": "False-proceed rate against compaction cadence, per profile",
        "crossover": "Crossover against penalty (sweep)",
    }
    lines = ["## Figures", ""]
    for key, path in written.items():
        lines += [f"![{captions[key]}]({path.name})", ""]
    return lines


# ---------------------------------------------------------------- entry point


def write_report(out: Path, sweep_out: Path | None) -> list[Path]:
    """Write ``summary.md`` and the figures into ``out``; return the paths written."""
    from harness._outdir import check_digests
    from harness.analysis import AnalysisError, analyze, analyze_sweep
    from harness.figures import (
        plot_agreement_by_class,
        plot_crossover,
        plot_false_proceed_vs_cadence,
        plot_recon_decay,
    )
    from harness.metrics import GATE_COLUMNS, LAB_DRIFT_COLUMNS, LAB_RECON_COLUMNS, SWEEP_COLUMNS

    run_what = "the output directory of `provnet experiment run`"
    _check_dir(out, run_what)
    meta = _read_meta(out / "run_meta.json")
    check_digests(out, "run_meta.json", meta.get("files"))
    # Read and checked here with the report's messages, then handed to the
    # analyses, which check their columns without reading the files again.
    loaded = {
        "gate_metrics.csv": _read_csv(
            out / "gate_metrics.csv", GATE_COLUMNS, what="gate metrics rows"
        ),
        "drift.csv": _read_csv(out / "drift.csv", LAB_DRIFT_COLUMNS, what="per-axis drift rows"),
    }
    gates = loaded["gate_metrics.csv"]
    recon_path = out / "recon_curve.csv"
    recon = (
        _read_csv(recon_path, LAB_RECON_COLUMNS, what="the reconstruction curve")
        if recon_path.is_file()
        else None
    )
    if recon is not None:
        loaded["recon_curve.csv"] = recon
    try:
        findings = analyze(out, loaded=loaded)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    sweep = None
    sweep_frame = None
    if sweep_out is not None:
        _check_dir(sweep_out, "the output directory of `provnet experiment sweep`")
        sweep_meta = sweep_out / "sweep_meta.json"
        if sweep_meta.is_file():
            check_digests(sweep_out, "sweep_meta.json", _read_json(sweep_meta).get("files"))
        sweep_frame = _read_csv(
            sweep_out / "sweep_metrics.csv", SWEEP_COLUMNS, what="sweep metrics rows"
        )
        try:
            sweep = analyze_sweep(sweep_out, loaded={"sweep_metrics.csv": sweep_frame})
        except AnalysisError as exc:
            raise UsageError(str(exc)) from None

    run_type = findings.run_type
    # trace replays are keyed (main, C, trace, 0) as in the lab; older provnet
    # folders used run_type "trace"
    is_trace = run_type == "trace" or bool((gates["profile"] == "trace").all())
    primary = gates[gates["run_type"] == run_type]

    figures: dict[str, Path] = {}
    if recon is not None:
        spiral = recon[recon["run_type"] == "death_spiral"]
        if not spiral.empty:
            thresholds = {d.theta: d.empirical_min for d in findings.death_cycles}
            figures["recon_decay"] = plot_recon_decay(
                spiral,
                out / FIGURE_FILES["recon_decay"],
                death_cycle=findings.death_cycle_min,
                thresholds=thresholds or None,
                penalty=findings.penalty,
            )
    figures["agreement"] = plot_agreement_by_class(
        primary,
        out / FIGURE_FILES["agreement"],
        source="trace replay" if is_trace else "main matrix",
    )
    figures["false_proceed"] = plot_false_proceed_vs_cadence(
        primary, out / FIGURE_FILES["false_proceed"]
    )
    if sweep is not None and sweep_frame is not None:
        figures["crossover"] = plot_crossover(
            sweep_frame,
            out / FIGURE_FILES["crossover"],
            crossover={c.penalty: c.cadence for c in sweep.crossovers},
            exponent=sweep.exponent,
            steps=sweep.steps,
        )

    title = "Trace replay" if is_trace else "Part 5 experiment"
    versions = meta.get("versions") or {}
    lines = [
        f"# {title}: summary",
        "",
        f"Results `{out}`: {findings.n_runs} {run_type} runs"
        + (" + the death-spiral run" if findings.death_cycles else "")
        + f"; fingerprint `{str(meta.get('fingerprint', 'n/a'))[:16]}…`; rehydrate "
        f"{'on' if meta.get('rehydrate', True) else 'off'}; "
        f"provnet {versions.get('provnet', '?')}, numpy {versions.get('numpy', '?')}.",
        "",
    ]
    # What the trace loader read comes first: every number below depends on it
    # (a rule that never matched, an op skipped), so it is read before them.
    trace_summary = meta.get("trace")
    coverage_path = out / "trace_coverage.json"
    if coverage_path.is_file():
        lines += _coverage(_read_json(coverage_path), trace_summary)
    elif isinstance(trace_summary, dict):
        lines += _trace(trace_summary)
    lines += _headlines(findings, is_trace)
    lines += _per_class(findings)
    lines += _per_config(findings)
    lines += _rehydration(findings)
    lines += _drift(findings)
    lines += _prose(findings)
    lines += _death(findings)
    if sweep is not None and sweep_out is not None:
        lines += _crossover(sweep, sweep_out)
    lines += _figures_section(figures)
    summary_path = out / SUMMARY_FILE
    summary_path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return [summary_path, *figures.values()]
