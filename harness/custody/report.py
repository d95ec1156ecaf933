"""The custody experiment's files: CSVs, ``custody_meta.json``, ``summary.md``, figures.

- ``custody_availability.csv`` — one row per (departures, k, p) cell: trials,
  available, availability with its 95% Wilson interval, the closed form and
  whether it lies inside, flips against the oracle, departures, evidence;
- ``custody_evidence.csv`` — evidence records by cell, party role, kind and
  whether the accused party had departed (``departed`` false = an honest party
  accused);
- ``custody_price.csv`` — per k (independent departures): hops stored per
  custodian, bytes per delivery (value, statements, custody statements) against
  the full lineage, RPCs and signatures per compaction, commit latency and
  what custody added to it;
- ``custody_availability.png`` — availability vs p per k, closed-form lines,
  one panel per departure mode; ``custody_modes.png`` — where cells were
  played under more than one departure mode, availability vs k per mode side by
  side (independent, operators departing with placement ignoring them, one
  custodian per operator) with each mode's closed form; ``custody_price.png`` —
  price vs k;
- ``custody_meta.json`` — settings, wall time, SHA-256 of every file.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.boundary.report import percentile
from harness.custody.settings import CellResult, CustodySettings, Departures
from harness.custody.stats import GOAL_HALF_WIDTH, closed_form

__all__ = [
    "AVAILABILITY_CSV",
    "CUSTODY_FILES",
    "PriceRow",
    "cost_line",
    "price_rows",
    "print_outcome",
    "summary_lines",
    "write_results",
]

AVAILABILITY_CSV = "custody_availability.csv"
EVIDENCE_CSV = "custody_evidence.csv"
PRICE_CSV = "custody_price.csv"
META_JSON = "custody_meta.json"
AVAILABILITY_PNG = "custody_availability.png"
MODES_PNG = "custody_modes.png"
PRICE_PNG = "custody_price.png"
SPLIT_VIEW_CSV = "custody_split_view.csv"
DEATH_SPIRAL_CSV = "custody_death_spiral.csv"
#: Every file a custody results folder holds (besides summary.md).
CUSTODY_FILES = (AVAILABILITY_CSV, EVIDENCE_CSV, PRICE_CSV, META_JSON)

_MODE_TITLES = {
    Departures.INDEPENDENT: "independent departures",
    Departures.OPERATOR: "operators depart, placement ignores them",
    Departures.OPERATOR_PLACED: "operators depart, one custodian per operator",
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ms(values: Sequence[float], q: int) -> float:
    return 1000 * percentile(values, q)


@dataclass(frozen=True, slots=True)
class PriceRow:
    """What k custodians cost per trial (independent departures, all p pooled)."""

    k: int
    trials: int
    hops_per_custodian: float
    value_bytes: float
    statement_bytes: float
    custody_bytes: float
    lineage_bytes: float
    commit_rpcs: float
    commit_signatures: float
    commit_p50_ms: float
    commit_p99_ms: float
    added_p50_ms: float
    rehydrate_rpcs: float

    @property
    def delivered_bytes(self) -> float:
        """Value + statements as they cross the wire (custody statements included)."""
        return self.value_bytes + self.statement_bytes

    @property
    def ratio(self) -> float:
        """Compacted value + statements (custody's included) over the full lineage."""
        return self.delivered_bytes / self.lineage_bytes if self.lineage_bytes else 0.0


def price_rows(cells: Sequence[CellResult]) -> list[PriceRow]:
    by_k: dict[int, list[CellResult]] = {}
    for c in cells:
        if c.mode is Departures.INDEPENDENT and c.trials:
            by_k.setdefault(c.k, []).append(c)
    if not by_k:  # no independent cells: price what was played
        for c in cells:
            if c.trials:
                by_k.setdefault(c.k, []).append(c)
    rows: list[PriceRow] = []
    base_p50: float | None = None
    for k in sorted(by_k):
        group = by_k[k]
        n = sum(c.trials for c in group)
        commits = [s for c in group for s in c.commit_seconds]
        held = [h for c in group for h in c.hops_per_custodian]
        p50 = _ms(commits, 50)
        if k == 0:
            base_p50 = p50
        rows.append(
            PriceRow(
                k,
                n,
                statistics.fmean(held) if held else 0.0,
                sum(c.value_bytes for c in group) / n,
                sum(c.statement_bytes for c in group) / n,
                sum(c.custody_bytes for c in group) / n,
                sum(c.lineage_bytes for c in group) / n,
                sum(c.commit_rpcs for c in group) / n,
                sum(c.commit_signatures for c in group) / n,
                p50,
                _ms(commits, 99),
                p50 - base_p50 if base_p50 is not None else float("nan"),
                sum(c.rehydrate_rpcs for c in group) / n,
            )
        )
    return rows


def _csv_value(value: object) -> object:
    return int(value) if isinstance(value, bool) else value


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def _availability_rows(cells: Sequence[CellResult]) -> list[list[object]]:
    rows: list[list[object]] = []
    for c in cells:
        lo, hi = c.interval
        rows.append(
            [
                c.mode.value,
                c.k,
                c.p,
                c.trials,
                c.available,
                f"{c.availability:.6f}",
                f"{lo:.6f}",
                f"{hi:.6f}",
                f"{(hi - lo) / 2:.6f}",
                f"{c.expected:.6f}",
                int(c.inside),
                c.decisions,
                c.flips,
                f"{c.flips / c.decisions:.6f}" if c.decisions else "",
                c.oracle_proceed,
                c.departed_origins,
                c.departed_custodians,
                sum(c.evidence.values()),
                c.honest_accused,
                c.unconfirmed,
                c.served_by.get("origin", 0),
                c.served_by.get("custodian", 0),
                c.custodians_taken,
                f"{c.seconds:.3f}",
            ]
        )
    return rows


_AVAILABILITY_HEADER = (
    "departures",
    "k",
    "p",
    "trials",
    "available",
    "availability",
    "ci_low",
    "ci_high",
    "half_width",
    "closed_form",
    "closed_form_inside",
    "decisions",
    "flips",
    "flip_rate",
    "oracle_proceed",
    "departed_origins",
    "departed_custodians",
    "evidence",
    "honest_accused",
    "unconfirmed",
    "served_by_origin",
    "served_by_custodian",
    "custody_statements",
    "seconds",
)


def write_results(
    out: Path,
    settings: CustodySettings,
    cells: Sequence[CellResult],
    *,
    wall_seconds: float,
    where: str,
    split_view: Sequence[Any] = (),
    death_spiral: Sequence[Any] = (),
) -> None:
    """Write every custody file into ``out`` (a staged folder)."""
    from harness._outdir import file_digests

    _write_csv(out / AVAILABILITY_CSV, _AVAILABILITY_HEADER, _availability_rows(cells))
    ev_rows = [
        [c.mode.value, c.k, c.p, role, kind, int(departed), n]
        for c in cells
        for (role, kind, departed), n in sorted(c.evidence.items())
    ]
    _write_csv(
        out / EVIDENCE_CSV, ("departures", "k", "p", "role", "kind", "departed", "count"), ev_rows
    )
    prices = price_rows(cells)
    _write_csv(
        out / PRICE_CSV,
        (
            "k",
            "trials",
            "hops_per_custodian",
            "value_bytes",
            "statement_bytes",
            "custody_bytes",
            "delivered_bytes",
            "lineage_bytes",
            "delivered_over_lineage",
            "commit_rpcs",
            "commit_signatures",
            "commit_p50_ms",
            "commit_p99_ms",
            "custody_added_p50_ms",
            "rehydrate_rpcs",
        ),
        [
            [
                r.k,
                r.trials,
                f"{r.hops_per_custodian:.2f}",
                f"{r.value_bytes:.1f}",
                f"{r.statement_bytes:.1f}",
                f"{r.custody_bytes:.1f}",
                f"{r.delivered_bytes:.1f}",
                f"{r.lineage_bytes:.1f}",
                f"{r.ratio:.4f}",
                f"{r.commit_rpcs:.3f}",
                f"{r.commit_signatures:.3f}",
                f"{r.commit_p50_ms:.3f}",
                f"{r.commit_p99_ms:.3f}",
                f"{r.added_p50_ms:.3f}",
                f"{r.rehydrate_rpcs:.3f}",
            ]
            for r in prices
        ],
    )
    figures = _figures(out, settings, cells, prices, where)
    names = [AVAILABILITY_CSV, EVIDENCE_CSV, PRICE_CSV, "summary.md", *figures]
    lines = summary_lines(settings, cells, prices, where, figures)
    if split_view:
        from harness.custody.split_view import rows_markdown

        fields = list(split_view[0].to_json())
        _write_csv(
            out / SPLIT_VIEW_CSV,
            fields,
            [[_csv_value(r.to_json()[f]) for f in fields] for r in split_view],
        )
        names.append(SPLIT_VIEW_CSV)
        lines += [
            "## Split views against a witness quorum",
            "",
            "An origin signs two heads for one compaction and sends each to its own"
            " holder with the cosignatures it could gather (n witnesses, f of them"
            " colluding, holders requiring q). Two conflicting heads can both gather a"
            " quorum only when 2q ≤ n + f.",
            "",
            rows_markdown(split_view).rstrip("\n"),
            "",
        ]
    if death_spiral:
        _write_csv(
            out / DEATH_SPIRAL_CSV,
            (
                "k",
                "rehydrated",
                "served_by",
                "attestations_issued",
                "reconstruction_before",
                "reconstruction_after",
                "reconstruction_gates_blocking_before",
                "reconstruction_gates_blocking_after",
                "reconstruction_gates",
                "attest_verify_exit",
                "attest_verify_untrusted_exit",
                "detail",
            ),
            [
                [
                    d.k,
                    int(d.rehydrated),
                    d.served_by,
                    d.issued,
                    d.reconstruction_before,
                    d.reconstruction_after,
                    d.blocking_before,
                    d.blocking_after,
                    d.gates,
                    d.verify_exit,
                    d.verify_untrusted_exit,
                    d.detail,
                ]
                for d in death_spiral
            ],
        )
        names.append(DEATH_SPIRAL_CSV)
        for d in death_spiral:
            if d.bundle:
                name = f"death_spiral_k{d.k}.attestation.json"
                (out / name).write_bytes(d.bundle)
                names.append(name)
        lines += [
            "## Death spiral: the origin is gone",
            "",
            "The value's reconstruction has decayed below the attest policy's"
            " `restore_below` and the reconstruction-coupled gates block; the origin then"
            " departs for good. The holder restores as Part 6 does (Attest.Restore: a full"
            " verified rehydration, from the value's custodians in order, then the"
            " attester's signature), applies what comes back under the attest experiment's"
            " default trust policy, and decides again. The accepted attestation is"
            " `death_spiral_k<k>.attestation.json`, checked with `provnet attest verify`:"
            " under that policy, and under the default verify policy (no attester trusted).",
            "",
            "| k | rehydrated (served by) | attestations issued | reconstruction |"
            " reconstruction gates blocking | attest verify (policy / no attester trusted) |",
            "|---|---|---|---|---|---|",
            *(
                f"| {d.k} | {'yes' if d.rehydrated else 'no'} ({d.served_by}) | {d.issued} |"
                f" {d.reconstruction_before:g} → {d.reconstruction_after:g} |"
                f" {d.blocking_before} → {d.blocking_after} of {d.gates} |"
                + (
                    f" exit {d.verify_exit} / exit {d.verify_untrusted_exit} |"
                    if d.bundle
                    else f" nothing to verify ({d.detail}) |"
                )
                for d in death_spiral
            ),
            "",
        ]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta: dict[str, Any] = {
        "where": where,
        "settings": {
            "k": list(settings.ks),
            "p": list(settings.ps),
            "departures": [d.value for d in settings.departures],
            "trials": settings.trials
            or "planned per cell (Wilson, ±1.8 pp at the closed form), topped up until ±2 pp",
            "batch": settings.batch,
            "operators": settings.operators,
            "hops": settings.hops,
            "seed": settings.seed,
            "transport": settings.transport.value,
            "deadline_ms": settings.deadline_ms,
            "reasks": settings.reasks,
            "witness": settings.witness,
        },
        "interval": "Wilson score, 95%",
        "wall_seconds": round(wall_seconds, 3),
        "trials": sum(c.trials for c in cells),
        "honest_accused": sum(c.honest_accused for c in cells)
        + sum(r.honest_accused for r in split_view),
        "files": file_digests(out, names),
    }
    (out / META_JSON).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def summary_lines(
    settings: CustodySettings,
    cells: Sequence[CellResult],
    prices: Sequence[PriceRow],
    where: str,
    figures: Sequence[str] = (),
) -> list[str]:
    trials = sum(c.trials for c in cells)
    lines = [
        "# Custody experiment",
        "",
        f"{trials:,} trials on {where}; each party departs for good (node closed, data"
        " directory removed) with probability p in the epoch after the commit. Availability"
        " = the holder verified every folded hop from some party; interval = 95% Wilson.",
        "",
    ]
    for mode in settings.departures:
        rows = [c for c in cells if c.mode is mode]
        if not rows:
            continue
        lines += [
            f"## Availability: {_MODE_TITLES[mode]}",
            "",
            "| k | p | trials | availability | 95% interval | closed form | inside |"
            " flip rate | evidence (departed / honest) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in rows:
            lo, hi = c.interval
            ev = sum(c.evidence.values())
            flip = c.flips / c.decisions if c.decisions else 0.0
            lines.append(
                f"| {c.k} | {c.p:g} | {c.trials:,} | {_pct(c.availability)} |"
                f" {_pct(lo)}–{_pct(hi)} (±{100 * (hi - lo) / 2:.1f} pp) | {_pct(c.expected)} |"
                f" {'yes' if c.inside else 'NO'} | {_pct(flip)} |"
                f" {ev - c.honest_accused} / {c.honest_accused} |"
            )
        if mode is Departures.OPERATOR:
            lines.append("")
            lines.append(
                f"Closed form here: 1 − E[p^D], D the distinct operators among the k + 1"
                f" parties each placed uniformly on {settings.operators} operators; the"
                " independent figure 1 − p^(k+1) is what per-operator placement restores."
            )
        lines.append("")
    lines += _side_by_side(settings, cells)
    inside = [c for c in cells if c.trials]
    wide = [c for c in inside if (c.interval[1] - c.interval[0]) / 2 > GOAL_HALF_WIDTH]
    outside = [c for c in inside if not c.inside]
    short = [c for c in inside if c.custodians_taken < c.k * c.trials]
    lines += [
        "## Reading the goals",
        "",
        f"- closed form inside the 95% interval: {len(inside) - len(outside)}/{len(inside)}"
        " cells"
        + (
            " (outside: "
            + ", ".join(f"{c.mode.value} k={c.k} p={c.p:g}" for c in outside)
            + "; at 95% about 1 cell in 20 falls outside by chance)"
            if outside
            else ""
        ),
        f"- cells wider than ±{100 * GOAL_HALF_WIDTH:.0f} pp: {len(wide)}"
        + (
            " ("
            + ", ".join(
                f"{c.mode.value} k={c.k} p={c.p:g} ±{50 * (c.interval[1] - c.interval[0]):.2f}"
                for c in wide[:6]
            )
            + ("; a quick run: `--full` plans the trials for the goal" if settings.trials else "")
            + ")"
            if wide
            else ""
        ),
        "- custody statements carried: "
        + (
            ", ".join(
                f"{c.mode.value} k={c.k} p={c.p:g} {c.custodians_taken}/{c.k * c.trials}"
                for c in short
            )
            + " (a custodian that did not answer in time at commit is skipped: the value"
            " carries fewer statements)"
            if short
            else "every value carried k"
        ),
        f"- honest parties accused: {sum(c.honest_accused for c in cells)};"
        f" unanswered demands no witness confirmed: {sum(c.unconfirmed for c in cells)}",
        "",
    ]
    if prices:
        lines += [
            "## Price per delivery and per compaction (independent departures)",
            "",
            "| k | hops per custodian | value + statements B | of which custody B |"
            " full lineage B | ratio | RPCs per compaction | signatures per compaction |"
            " commit p50 ms | added by custody ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prices:
            lines.append(
                f"| {r.k} | {r.hops_per_custodian:.1f} | {r.delivered_bytes:,.0f}"
                f" | {r.custody_bytes:,.0f} | {r.lineage_bytes:,.0f} | {r.ratio:.2f} |"
                f" {r.commit_rpcs:.2f} | {r.commit_signatures:.2f} | {r.commit_p50_ms:.2f} |"
                f" {r.added_p50_ms:.2f} |"
            )
        lines.append("")
    if figures:
        lines += ["Figures: " + ", ".join(f"`{f}`" for f in figures), ""]
    return lines


_MODE_SHORT = {
    Departures.INDEPENDENT: "independent",
    Departures.OPERATOR: "operators depart, placement ignores them",
    Departures.OPERATOR_PLACED: "operators depart, one per operator",
}


def _compared(
    settings: CustodySettings, cells: Sequence[CellResult]
) -> tuple[list[Departures], list[tuple[int, float]]]:
    """The modes and the (k, p) cells played under more than one of them."""
    played = {(c.mode, c.k, c.p) for c in cells if c.trials}
    modes = [m for m in settings.departures if any(m is mode for mode, _, _ in played)]
    pairs = sorted({(k, p) for _, k, p in played if sum((m, k, p) in played for m in modes) > 1})
    return modes, pairs


def _side_by_side(settings: CustodySettings, cells: Sequence[CellResult]) -> list[str]:
    """One row per (k, p) played under several departure modes, a column per mode."""
    modes, pairs = _compared(settings, cells)
    if not pairs:
        return []
    by = {(c.mode, c.k, c.p): c for c in cells if c.trials}

    def entry(c: CellResult | None) -> str:
        if c is None:
            return "—"
        lo, hi = c.interval
        return (
            f"{_pct(c.availability)} ({_pct(lo)}–{_pct(hi)}, ±{100 * (hi - lo) / 2:.1f} pp;"
            f" {c.trials:,} trials) vs {_pct(c.expected)} {'inside' if c.inside else 'OUTSIDE'}"
        )

    lines = [
        "## Departure modes side by side",
        "",
        "Availability (95% interval; trials) against each mode's closed form. Whole"
        f" operators depart with probability p each ({settings.operators} operators);"
        " per-operator placement should bring availability back to the independent"
        " figure 1 − p^(k+1).",
        "",
        "| k | p | " + " | ".join(_MODE_SHORT[m] for m in modes) + " |",
        "|---|---|" + "---|" * len(modes),
    ]
    for k, p in pairs:
        lines.append(
            f"| {k} | {p:g} | " + " | ".join(entry(by.get((m, k, p))) for m in modes) + " |"
        )
    lines.append("")
    return lines


def _modes_figure(
    out: Path, settings: CustodySettings, cells: Sequence[CellResult], where: str
) -> list[str]:
    """Availability vs k per departure mode, for each p played under several modes."""
    from harness.figures import _pyplot, _save

    modes, pairs = _compared(settings, cells)
    if not pairs:
        return []
    plt = _pyplot()
    ps = sorted({p for _, p in pairs})
    by = {(c.mode, c.k, c.p): c for c in cells if c.trials}
    fig, axes = plt.subplots(1, len(ps), figsize=(5.6 * len(ps), 4.2), squeeze=False)
    colors = {
        Departures.INDEPENDENT: "#222222",
        Departures.OPERATOR: "#c0392b",
        Departures.OPERATOR_PLACED: "#2471a3",
    }
    for ax, p in zip(axes[0], ps, strict=True):
        ks = sorted({k for k, q in pairs if q == p})
        for i, mode in enumerate(modes):
            rows = [by[(mode, k, p)] for k in ks if (mode, k, p) in by]
            if not rows:
                continue
            x = [c.k + (i - (len(modes) - 1) / 2) * 0.12 for c in rows]
            av = [c.availability for c in rows]
            lo = [max(0.0, c.availability - c.interval[0]) for c in rows]
            hi = [max(0.0, c.interval[1] - c.availability) for c in rows]
            color = colors[mode]
            ax.errorbar(
                x, av, yerr=[lo, hi], fmt="o", color=color, capsize=3, label=_MODE_SHORT[mode]
            )
            ax.plot(x, [c.expected for c in rows], ls="none", marker="_", ms=14, color=color)
        ax.set_title(f"p = {p:g} ({settings.operators} operators)")
        ax.set_xlabel("k (custodians)")
        ax.set_xticks(ks)
        ax.set_ylabel("rehydration availability")
        ax.legend(loc="lower right", fontsize="small")
    fig.suptitle(f"Departure modes side by side (95% Wilson; bars: closed forms) — {where}")
    _save(fig, out / MODES_PNG)
    return [MODES_PNG]


def _figures(
    out: Path,
    settings: CustodySettings,
    cells: Sequence[CellResult],
    prices: Sequence[PriceRow],
    where: str,
) -> list[str]:
    from harness.figures import _pyplot, _save

    plt = _pyplot()
    written: list[str] = []
    modes = [m for m in settings.departures if any(c.mode is m and c.trials for c in cells)]
    if modes:
        fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 4.2), squeeze=False)
        colors = ["#222222", "#c0392b", "#2471a3", "#229954"]
        grid = [i / 100 for i in range(0, 61)]
        for ax, mode in zip(axes[0], modes, strict=True):
            for k in settings.ks:
                rows = sorted((c for c in cells if c.mode is mode and c.k == k), key=lambda c: c.p)
                if not rows:
                    continue
                color = colors[k % len(colors)]
                ax.plot(grid, [closed_form(k, p) for p in grid], color=color, lw=1, alpha=0.6)
                if mode is Departures.OPERATOR:
                    ax.plot(
                        grid,
                        [settings.expected(mode, k, p) for p in grid],
                        color=color,
                        lw=1,
                        ls="--",
                        alpha=0.6,
                    )
                ps = [c.p for c in rows]
                av = [c.availability for c in rows]
                lo = [max(0.0, c.availability - c.interval[0]) for c in rows]
                hi = [max(0.0, c.interval[1] - c.availability) for c in rows]
                ax.errorbar(ps, av, yerr=[lo, hi], fmt="o", color=color, capsize=3, label=f"k={k}")
            ax.set_title(_MODE_TITLES[mode])
            ax.set_xlabel("p (departure probability per epoch)")
            ax.set_ylabel("rehydration availability")
            ax.set_ylim(0.4, 1.01)
            ax.legend(loc="lower left")
        fig.suptitle(f"Availability (95% Wilson) vs closed form 1 − p^(k+1) — {where}")
        _save(fig, out / AVAILABILITY_PNG)
        written.append(AVAILABILITY_PNG)
    written += _modes_figure(out, settings, cells, where)
    if prices:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        ks = [r.k for r in prices]
        left.bar(
            [k - 0.2 for k in ks],
            [r.delivered_bytes - r.custody_bytes for r in prices],
            width=0.4,
            label="value + head statements",
        )
        left.bar(
            [k - 0.2 for k in ks],
            [r.custody_bytes for r in prices],
            width=0.4,
            bottom=[r.delivered_bytes - r.custody_bytes for r in prices],
            label="custody statements",
        )
        left.bar(
            [k + 0.2 for k in ks],
            [r.lineage_bytes for r in prices],
            width=0.4,
            label="full lineage",
        )
        left.set_xlabel("k (custodians)")
        left.set_ylabel("bytes per delivery")
        left.set_xticks(ks)
        left.legend()
        right.plot(ks, [r.commit_rpcs for r in prices], marker="o", label="RPCs per compaction")
        right.plot(
            ks, [r.commit_signatures for r in prices], marker="s", label="signatures per compaction"
        )
        right.plot(ks, [r.commit_p50_ms for r in prices], marker="^", label="commit p50 ms")
        right.set_xlabel("k (custodians)")
        right.set_xticks(ks)
        right.legend()
        fig.suptitle(f"The price of custody — {where}")
        _save(fig, out / PRICE_PNG)
        written.append(PRICE_PNG)
    return written


def cost_line(cells: Sequence[CellResult], where: str) -> str:
    """One row for a cost table: availability at (k, p) next to k = 0, each with
    its 95% interval and closed form, and the honest parties accused."""
    base = next(c for c in cells if c.k == 0)
    other = next(c for c in cells if c.k != 0)

    def cell(c: CellResult) -> str:
        lo, hi = c.interval
        return (
            f"k = {c.k}: {100 * c.availability:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
            f" (closed form {100 * c.expected:.1f}%)"
        )

    accused = sum(c.honest_accused for c in cells)
    return (
        f"| custody: rehydration availability, parties departing for good with p = {base.p:g}"
        f" ({base.trials} trials each, {where}; honest accused {accused}) | {cell(base)} |"
        f" {cell(other)} |"
    )


def print_outcome(cells: Sequence[CellResult], wall: float, where: str, out: Path) -> None:
    """The run's few lines: one per cell, then honest parties accused."""
    from harness._words import count

    trials = sum(c.trials for c in cells)
    print(f"custody: {count(trials, 'trial')} in {wall:.2f} s ({where}) → {out}/")
    for c in cells:
        lo, hi = c.interval
        print(
            f"  {c.mode.value:<15} k={c.k} p={c.p:<4g} availability {100 * c.availability:5.1f}%"
            f" [{100 * lo:.1f}, {100 * hi:.1f}] closed form {100 * c.expected:5.1f}%"
            f" {'inside' if c.inside else 'OUTSIDE'}"
        )
    print(f"honest parties accused: {sum(c.honest_accused for c in cells)}")
