"""Numbers, files and figures of ``provnet experiment attest`` (see docs/attest.md).

All rates are over structural_min's decisions, the nine gates in blind mode
(the mode reconstruction-coupled gates have), judged against the oracle
(ground_truth). *Changed* compares the holder's decision after attestations
with its decision on the same delivered view before them; *flips* compare
with the oracle. A row changes nothing iff its boundary fingerprint — all
arms, all modes — equals the ``none`` row's.

Files (``--out``, default ``results-attest/``): ``attest_rows.csv``,
``attest_cycles.csv``, ``attest_price.csv``, ``attest_dishonest.csv``,
``attest_meta.json``, ``summary.md``, ``attest_recon_per_cycle.png``,
``attest_price_vs_lifetime.png`` and ``attestations/*.json`` (bundles a third
party checks with ``provnet attest verify``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness._words import count, yes_no
from harness.attest.play import DecisionRecord
from harness.attest.rows import Row
from harness.attest.runner import RowResult
from harness.boundary.report import percentile
from harness.gates import GATES, GateClass

__all__ = [
    "CycleNumbers",
    "RowNumbers",
    "death_cycle",
    "death_text",
    "load_results",
    "row_numbers",
    "save_results",
    "write_outputs",
]

_RECON = tuple(i for i, g in enumerate(GATES) if g.gate_class is GateClass.RECONSTRUCTION)
#: Gate index → axes (canonical indices) its rule reads.
_READS: dict[int, frozenset[int]] = {
    0: frozenset({0, 3}),
    1: frozenset({1, 2}),
    2: frozenset({0, 3}),
    3: frozenset({0, 1, 2, 3, 4}),
    4: frozenset({0, 3, 4}),
}
_AXES = ("freshness", "capability", "tool_integrity", "verification", "reconstruction")


def death_cycle(records: Sequence[DecisionRecord], *, after: bool) -> int | None:
    """First cycle after which every oracle-allowed reconstruction-coupled decision
    blocks, for good (spec §8's definition); ``None``: never dies."""
    cycles: list[int | None] = []
    for gi in _RECON:
        allowed = [r for r in records if r.oracle[gi] == "1"]
        if not allowed:
            cycles.append(None)
            continue
        alive = [r.cycle for r in allowed if (r.after if after else r.before)[gi] == "1"]
        if not alive:
            cycles.append(min(r.cycle for r in allowed))
            continue
        last = max(alive)
        cycles.append(None if max(r.cycle for r in allowed) <= last else last + 1)
    if any(c is None for c in cycles):
        return None
    return max(c for c in cycles if c is not None)


@dataclass(frozen=True, slots=True)
class RowNumbers:
    decisions: int
    evaluations: int
    changed: int
    to_proceed: int
    to_block: int
    flips_before: int
    flips_after: int
    false_proceed_before: int
    false_proceed_after: int
    decisions_raised: int
    raised_by_axis: tuple[int, ...]
    changed_after_revocation: int | None
    recon_agree_before: float
    recon_agree_after: float
    death_before: int | None
    death_after: int | None
    broken_at: int | None
    changed_by_class: dict[str, tuple[int, int]]


def row_numbers(r: RowResult) -> RowNumbers:
    recs = r.records
    changed = to_p = to_b = fb = fa = fpb = fpa = 0
    by_class: dict[str, list[int]] = {}
    for d in recs:
        for gi, (o, b, a) in enumerate(zip(d.oracle, d.before, d.after, strict=True)):
            fb += b != o
            fa += a != o
            fpb += b == "1" and o == "0"
            fpa += a == "1" and o == "0"
            if a != b:
                changed += 1
                to_p += a == "1"
                to_b += a == "0"
                c = by_class.setdefault(GATES[gi].gate_class.value, [0, 0])
                c[0 if a == "1" else 1] += 1
    raised = tuple(sum(1 for d in recs if d.raised[i] == "1") for i in range(5))
    rev = r.revoked_at_step
    after_rev = (
        None
        if rev is None
        else sum(
            1
            for d in recs
            if d.step >= rev
            for a, b in zip(d.after, d.before, strict=True)
            if a != b
        )
    )
    n_recon = sum(1 for d in recs for _ in _RECON)
    agree_b = sum(1 for d in recs for gi in _RECON if d.before[gi] == d.oracle[gi])
    agree_a = sum(1 for d in recs for gi in _RECON if d.after[gi] == d.oracle[gi])
    death_b = death_cycle(recs, after=False)
    broken = None
    if death_b is not None:
        for d in recs:
            if d.cycle >= death_b and any(
                d.oracle[gi] == "1" and d.after[gi] == "1" and d.before[gi] == "0" for gi in _RECON
            ):
                broken = d.cycle
                break
    return RowNumbers(
        len(recs),
        len(recs) * len(GATES),
        changed,
        to_p,
        to_b,
        fb,
        fa,
        fpb,
        fpa,
        sum(1 for d in recs if "1" in d.raised),
        raised,
        after_rev,
        100.0 * agree_b / n_recon if n_recon else 0.0,
        100.0 * agree_a / n_recon if n_recon else 0.0,
        death_b,
        death_cycle(recs, after=True),
        broken,
        {k: (v[0], v[1]) for k, v in sorted(by_class.items())},
    )


@dataclass(frozen=True, slots=True)
class CycleNumbers:
    """One cycle of reconstruction-coupled decisions, before and after attestations."""

    evaluations: int
    agree_before: int
    agree_after: int
    allowed: int  # evaluations the oracle proceeds on
    allowed_before: int  # … on which the holder proceeds too, before attestations
    allowed_after: int
    mean_r_before: float
    mean_r_after: float

    @staticmethod
    def pct(k: int, n: int) -> float:
        return 100.0 * k / n if n else float("nan")


def _per_cycle(records: Sequence[DecisionRecord]) -> dict[int, CycleNumbers]:
    acc: dict[int, list[float]] = {}
    for d in records:
        a = acc.setdefault(d.cycle, [0, 0, 0, 0, 0, 0, 0.0, 0.0, 0])
        for gi in _RECON:
            a[0] += 1
            a[1] += d.before[gi] == d.oracle[gi]
            a[2] += d.after[gi] == d.oracle[gi]
            if d.oracle[gi] == "1":
                a[3] += 1
                a[4] += d.before[gi] == "1"
                a[5] += d.after[gi] == "1"
        a[6] += d.recon_before
        a[7] += d.recon_after
        a[8] += 1
    return {
        c: CycleNumbers(
            int(a[0]),
            int(a[1]),
            int(a[2]),
            int(a[3]),
            int(a[4]),
            int(a[5]),
            a[6] / a[8],
            a[7] / a[8],
        )
        for c, a in sorted(acc.items())
    }


def price(r: RowResult) -> dict[str, float]:
    """Per 100 structural_min decisions: what the attest path cost in this row."""
    n = len(r.records) or 1
    w = r.wire.get("structural_min/attest", {})
    k = 100.0 / n
    c = r.counts
    return {
        "full_rehydrations": k * c.get("full_rehydrations", 0),
        "attestations_issued": k * c.get("attestations_issued", 0),
        "attestations_verified": k * c.get("attestations_verified", 0),
        "rpcs": k * w.get("rpcs", 0.0),
        "bytes": k * w.get("bytes", 0.0),
        "sign_ops": k * w.get("sign_ops", 0.0),
        "verify_ops": k * w.get("verify_ops", 0.0),
        "p50_ms": 1000.0 * percentile(r.latencies, 50),
        "p99_ms": 1000.0 * percentile(r.latencies, 99),
    }


def plain_price(r: RowResult) -> dict[str, float]:
    """Per 100 decisions: plain rehydrate mode of the lineage gates (the same run)."""
    p = r.plain
    n = p.get("decisions", 0.0) or 1.0
    k = 100.0 / n
    lat = r.extra.get("plain_latencies", [])
    return {
        "full_rehydrations": k * p.get("rehydrations", 0.0),
        "attestations_issued": 0.0,
        "attestations_verified": 0.0,
        "rpcs": k * p.get("rpcs", 0.0),
        "bytes": k * p.get("bytes", 0.0),
        "sign_ops": k * p.get("sign_ops", 0.0),
        "verify_ops": k * p.get("verify_ops", 0.0),
        "p50_ms": 1000.0 * percentile(lat, 50),
        "p99_ms": 1000.0 * percentile(lat, 99),
    }


_PRICE_COLS = (
    "full_rehydrations",
    "attestations_issued",
    "attestations_verified",
    "rpcs",
    "bytes",
    "sign_ops",
    "verify_ops",
    "p50_ms",
    "p99_ms",
)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def death_text(x: int | None) -> str:
    """A death cycle as results print it: ``never`` when the run ends before one."""
    return "never" if x is None else str(x)


def _rejected(r: RowResult) -> dict[str, int]:
    return {
        k[len("rejected_") :]: int(v)
        for k, v in sorted(r.counts.items())
        if k.startswith("rejected_")
    }


def write_outputs(results: Sequence[RowResult], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    nums = {r.name: row_numbers(r) for r in results}
    none_fp = next((r.fingerprint for r in results if r.row == Row.NONE.value), None)
    rows = []
    for r in results:
        n = nums[r.name]
        rej = _rejected(r)
        rows.append(
            (
                r.name,
                r.row,
                r.axis,
                r.lifetime_steps,
                n.decisions,
                n.evaluations,
                r.counts.get("attestations_issued", 0),
                r.counts.get("attestations_applied", 0),
                sum(rej.values()),
                json.dumps(rej, sort_keys=True),
                n.decisions_raised,
                n.changed,
                n.to_proceed,
                n.to_block,
                n.flips_before,
                n.flips_after,
                n.false_proceed_before,
                n.false_proceed_after,
                "" if n.changed_after_revocation is None else n.changed_after_revocation,
                f"{n.recon_agree_before:.2f}",
                f"{n.recon_agree_after:.2f}",
                death_text(n.death_before),
                death_text(n.death_after),
                death_text(n.broken_at),
                r.fingerprint,
                none_fp is not None and r.fingerprint == none_fp,
                r.logged,
                f"{r.a6_verified}/{r.a6_checked}",
            )
        )
    written.append(
        _write_csv(
            out / "attest_rows.csv",
            (
                "row_name",
                "row",
                "axis",
                "lifetime_steps",
                "decisions",
                "gate_evaluations",
                "attestations_issued",
                "attestations_applied",
                "rejected",
                "rejected_by_reason",
                "decisions_axis_raised",
                "changed",
                "changed_to_proceed",
                "changed_to_block",
                "flips_before",
                "flips_after",
                "false_proceed_before",
                "false_proceed_after",
                "changed_after_revocation",
                "recon_agreement_before_pct",
                "recon_agreement_after_pct",
                "death_cycle_before",
                "death_cycle_after",
                "spiral_broken_cycle",
                "fingerprint",
                "fingerprint_equals_none",
                "attestation_hops_logged",
                "a6_demanded_back_verified",
            ),
            rows,
        )
    )
    honest = [r for r in results if r.row == Row.HONEST.value]
    none = next((r for r in results if r.row == Row.NONE.value), None)
    head = honest[0] if honest else None
    cyc_rows: list[tuple[object, ...]] = []
    for r in [x for x in (none, *honest) if x is not None]:
        for c, k in _per_cycle(r.records).items():
            pct = CycleNumbers.pct
            cyc_rows.append(
                (
                    r.name,
                    c,
                    k.evaluations,
                    f"{pct(k.agree_before, k.evaluations):.2f}",
                    f"{pct(k.agree_after, k.evaluations):.2f}",
                    k.allowed,
                    f"{pct(k.allowed_before, k.allowed):.2f}",
                    f"{pct(k.allowed_after, k.allowed):.2f}",
                    f"{k.mean_r_before:.4f}",
                    f"{k.mean_r_after:.4f}",
                )
            )
    written.append(
        _write_csv(
            out / "attest_cycles.csv",
            (
                "row_name",
                "cycle",
                "recon_evaluations",
                "agreement_before_pct",
                "agreement_after_pct",
                "oracle_allowed",
                "allowed_proceed_before_pct",
                "allowed_proceed_after_pct",
                "mean_recon_before",
                "mean_recon_after",
            ),
            cyc_rows,
        )
    )
    price_rows: list[tuple[object, ...]] = []
    if head is not None:
        zero = dict.fromkeys(_PRICE_COLS, 0.0)
        price_rows.append(("blind", "", *(zero[k] for k in _PRICE_COLS)))
        price_rows.append(("degrade", "", *(zero[k] for k in _PRICE_COLS)))
        pp = plain_price(head)
        price_rows.append(
            ("rehydrate (lineage gates)", "", *(round(pp[k], 3) for k in _PRICE_COLS))
        )
    for r in honest:
        p = price(r)
        price_rows.append(("attest", r.lifetime_steps, *(round(p[k], 3) for k in _PRICE_COLS)))
    written.append(
        _write_csv(out / "attest_price.csv", ("mode", "lifetime_steps", *_PRICE_COLS), price_rows)
    )
    dis_rows: list[tuple[object, ...]] = []
    for r in results:
        if r.row != Row.DISHONEST.value:
            continue
        n = nums[r.name]
        granted = _AXES.index(r.axis)
        for gi, g in enumerate(GATES):
            ch = fp = 0
            for d in r.records:
                if d.after[gi] != d.before[gi]:
                    ch += 1
                    fp += d.after[gi] == "1" and d.oracle[gi] == "0"
            reads = _READS.get(gi, frozenset())
            dis_rows.append((r.axis, g.name, granted in reads, ch, fp))
        for ai, axis in enumerate(_AXES):
            dis_rows.append((r.axis, f"axis:{axis}", ai == granted, n.raised_by_axis[ai], ""))
    written.append(
        _write_csv(
            out / "attest_dishonest.csv",
            (
                "granted_axis",
                "gate_or_axis",
                "reads_granted_axis",
                "changed_or_raised",
                "false_proceeds_added",
            ),
            dis_rows,
        )
    )
    bdir = out / "attestations"
    for r in results:
        for label, body in r.bundle_files:
            bdir.mkdir(parents=True, exist_ok=True)
            path = bdir / f"{r.name.replace(':', '-').replace('@', '-')}-{label}.json"
            path.write_bytes(body)
            written.append(path)
    meta_obj = {
        **meta,
        "rows": {
            r.name: {
                "fingerprint": r.fingerprint,
                "in_process_fingerprint": r.in_process_fingerprint,
                "runs": r.runs,
                "counts": r.counts,
                "wall_seconds": round(r.wall_seconds, 2),
                "policy": json.loads(r.extra.get("policy", "{}")),
            }
            for r in results
        },
    }
    meta_path = out / "attest_meta.json"
    meta_path.write_text(json.dumps(meta_obj, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    written.append(meta_path)
    written += _figures(results, out)
    written.append(save_results(results, out / "attest_results.json"))
    summary = out / "summary.md"
    summary.write_text(summary_md(results, nums, none_fp), encoding="utf-8")
    written.append(summary)
    return written


def _figures(results: Sequence[RowResult], out: Path) -> list[Path]:
    from harness.figures import _save

    paths: list[Path] = []
    fig = recon_per_cycle_figure(results)
    if fig is not None:
        paths.append(_save(fig, out / "attest_recon_per_cycle.png"))
    fig = price_vs_lifetime_figure(results)
    if fig is not None:
        paths.append(_save(fig, out / "attest_price_vs_lifetime.png"))
    return paths


def recon_per_cycle_figure(results: Sequence[RowResult]) -> Any:
    """``attest_recon_per_cycle.png`` of the first honest row (None without one).

    The legends sit above each panel, outside the data, so neither covers a line
    (the attested line runs along 1.0 and 100 % for most of the run); the lower
    panel says how many evaluations each of its percentages is of.
    """
    from harness.figures import _pyplot

    honest = [r for r in results if r.row == Row.HONEST.value]
    if not honest:
        return None
    plt = _pyplot()
    head = next((r for r in honest if r.name == Row.HONEST.value), honest[0])
    cycles = _per_cycle(head.records)
    xs = list(cycles)
    ks = list(cycles.values())
    pct = CycleNumbers.pct
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.5, 7.2), sharex=True)
    ax1.plot(xs, [k.mean_r_before for k in ks], label="blind (as delivered)", color="tab:red")
    ax1.plot(xs, [k.mean_r_after for k in ks], label="attested", color="tab:green")
    for theta, style in ((0.5, "--"), (0.55, ":")):
        ax1.axhline(theta, color="grey", linestyle=style, label=f"θ = {theta}")
    ax1.set_ylabel("mean reconstruction\nof the decided values")
    ax1.set_ylim(0, 1.05)
    ax1.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"structural_min, death-spiral run ({head.name}): reconstruction per cycle")
    ax2.plot(xs, [pct(k.allowed_before, k.allowed) for k in ks], label="blind", color="tab:red")
    ax2.plot(xs, [pct(k.allowed_after, k.allowed) for k in ks], label="attested", color="tab:green")
    ax2.set_ylabel("oracle-allowed reconstruction-\ngate decisions that proceed (%)")
    ax2.set_xlabel("compaction cycle")
    ax2.set_ylim(-3, 105)
    sizes = [k.allowed for k in ks if k.allowed]
    if sizes:
        gaps = len(ks) - len(sizes)
        ax2.set_title(
            f"n = {min(sizes)}–{max(sizes)} oracle-allowed evaluations per cycle"
            f" ({sum(sizes):,} in all)"
            + (f"; {count(gaps, 'cycle')} with none not drawn" if gaps else ""),
            fontsize=9,
            pad=22,
        )
    ax2.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


#: The price series of ``attest_price_vs_lifetime.png``: key, label, marker, line style.
_PRICE_SERIES = (
    ("full_rehydrations", "full rehydrations", "o", "-"),
    ("attestations_issued", "attestations issued", "s", "--"),
    ("attestations_verified", "attestations verified", "^", ":"),
    ("rpcs", "RPCs", "D", "-."),
)


def price_vs_lifetime_figure(results: Sequence[RowResult]) -> Any:
    """``attest_price_vs_lifetime.png`` over the honest rows' lifetimes (None for fewer
    than two). Full rehydrations and attestations issued are equal (one attestation
    per rehydration): each series has its own marker and dash, and the first drawn is
    the widest, so one never hides the other; the y axis starts at 0.
    """
    from harness.figures import _pyplot

    honest = sorted(
        (r for r in results if r.row == Row.HONEST.value), key=lambda r: r.lifetime_steps
    )
    if len(honest) < 2:
        return None
    plt = _pyplot()
    ls = [r.lifetime_steps for r in honest]
    ps = [price(r) for r in honest]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (key, label, marker, style) in enumerate(_PRICE_SERIES):
        ax.plot(
            ls,
            [p[key] for p in ps],
            marker=marker,
            linestyle=style,
            linewidth=3.5 - 0.8 * i,
            markersize=10 - 2 * i,
            label=label,
            zorder=2 + i,
        )
    ax.set_xscale("log")
    ax.set_ylim(0, max(p[key] for p in ps for key, *_ in _PRICE_SERIES) * 1.1 or 1)
    ax.set_xlabel("attestation lifetime (steps; one cycle = C steps)")
    ax.set_ylabel("per 100 structural_min decisions")
    ax.set_title("price of restoration vs attestation lifetime", pad=34)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _pct_text(k: int, n: int) -> str:
    return f"{100.0 * k / n:.1f}" if n else "–"


def _axes_raised(raised: Sequence[int]) -> str:
    named = [f"{axis} {n}" for axis, n in zip(_AXES, raised, strict=True) if n]
    return ", ".join(named) or "none"


def _cycles_shown(per: Mapping[int, CycleNumbers], death: int | None) -> list[int]:
    """Every tenth cycle, and the cycles either side of the death cycle."""
    return [c for c in per if c % 10 == 0 or (death is not None and abs(c - death) <= 1)]


def summary_md(
    results: Sequence[RowResult], nums: Mapping[str, RowNumbers], none_fp: str | None
) -> str:
    lines: list[str] = [
        "# attest across the boundary: restoring an axis by attestation (Part 6 of the"
        " write-up, in numbers)",
        "",
        "Each row is one boundary run of structural_min with an attester node: `none` has"
        " attestation disabled, `honest` restores reconstruction only with proof of a full"
        " verified rehydration (A4: the origin's signed receipts for every folded hop), the"
        " other rows are attesters whose attestations must change nothing or only what"
        " their grant allows. A *death cycle* is the compaction cycle (C steps each) from"
        " which every decision of a reconstruction-coupled gate that the oracle allows"
        " blocks for good; `never` means the run ends before that. The spiral is *broken*"
        " at the first cycle from the death cycle on where an attestation lets such a"
        " decision proceed.",
        "",
    ]
    pooled = max((len(r.runs) for r in results), default=0)
    if pooled > 1:
        lines += [
            f"{pooled} runs pooled per row (cycle = step // C of each run, cadences mixed):"
            " read agreement, changes and price; death cycles and the per-cycle table"
            " are the death-spiral run's quantities.",
            "",
        ]
    none = next((r for r in results if r.row == Row.NONE.value), None)
    honest = sorted(
        (r for r in results if r.row == Row.HONEST.value), key=lambda r: r.lifetime_steps
    )
    if none is not None:
        n0 = nums[none.name]
        equal = all(i == b for _, i, b in none.runs)
        lines += [
            f"- attest disabled: structural_min death cycle **{death_text(n0.death_before)}**;"
            f" boundary decisions {'equal' if equal else '**differ from**'} the in-process"
            f" ones (fingerprint `{none.in_process_fingerprint[:16]}…`"
            f"{' both ways' if equal else ''})",
        ]
    if honest:
        h = next((r for r in honest if r.name == Row.HONEST.value), honest[0])
        n = nums[h.name]
        c = h.counts
        per_h = _per_cycle(h.records)
        if n.death_before is not None:
            dead = [k for cyc, k in per_h.items() if cyc >= n.death_before]
            allowed = sum(k.allowed for k in dead)
            lines.append(
                f"- from cycle {n.death_before} on, oracle-allowed reconstruction-gate"
                " decisions that proceed: without attest"
                f" **{_pct_text(sum(k.allowed_before for k in dead), allowed)}%**, with attest"
                f" **{_pct_text(sum(k.allowed_after for k in dead), allowed)}%**"
                f" ({count(allowed, 'evaluation')})"
            )
        else:
            lines.append(
                "- no death cycle in this run (it ends before the spiral): nothing for attest"
                " to restore yet; a longer run (`--steps`) reaches it"
            )
        lines += [
            f"- attest ({h.name}): reconstruction-gate agreement with the oracle"
            f" {n.recon_agree_before:.2f}% → **{n.recon_agree_after:.2f}%** over the run;"
            f" death cycle {death_text(n.death_before)} → **{death_text(n.death_after)}**;"
            f" spiral first broken at cycle **{death_text(n.broken_at)}**",
            f"- restorations needed {c.get('restorations_needed', 0)}, full rehydrations"
            f" {c.get('full_rehydrations', 0)}, attestations issued"
            f" {c.get('attestations_issued', 0)}, reused {c.get('attestations_reused', 0)},"
            f" expired and renewed {c.get('held_expired', 0)}; restoration folds committed"
            f" {c.get('restoration_folds_committed', 0)} (a value with nothing folded yet"
            " first has its visible lineage committed as one fold under a signed head, so"
            " that its rehydration has a receipt to cite — step 2.2 of docs/attest.md;"
            f" {count(c.get('restorations_unfolded', 0), 'restoration')} needed one);"
            f" folds rehydrated {c.get('folds_rehydrated', 0)}",
            f"- decisions changed {n.changed} (to proceed {n.to_proceed}, to block"
            f" {n.to_block}); flips vs oracle {n.flips_before} → {n.flips_after};"
            f" false-proceeds {n.false_proceed_before} → {n.false_proceed_after}",
            f"- fingerprint (attest) `{h.fingerprint}`",
            "",
            "## Agreement on reconstruction-coupled gates per cycle (structural_min)",
            "",
            "Every tenth cycle"
            + (
                f", and the cycles either side of the death cycle ({n.death_before})"
                if n.death_before is not None
                else ""
            )
            + "; `attest_cycles.csv` has every cycle. *Evaluations*: reconstruction-coupled"
            " gate decisions in the cycle; *agreement*: those equal to the oracle's;"
            " *oracle-allowed*: those the oracle proceeds on, and the share of them the"
            " holder proceeds on (– where a cycle has none); *mean r*: mean reconstruction"
            " score of the decided values, as delivered and after attestations.",
            "",
            "| cycle | evaluations | agreement without attest % | with attest %"
            " | oracle-allowed | of those proceeding without attest % | with attest %"
            " | mean r delivered | mean r attested |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for cyc in _cycles_shown(per_h, n.death_before):
            k = per_h[cyc]
            lines.append(
                f"| {cyc} | {k.evaluations} | {_pct_text(k.agree_before, k.evaluations)}"
                f" | {_pct_text(k.agree_after, k.evaluations)} | {k.allowed}"
                f" | {_pct_text(k.allowed_before, k.allowed)}"
                f" | {_pct_text(k.allowed_after, k.allowed)}"
                f" | {k.mean_r_before:.3f} | {k.mean_r_after:.3f} |"
            )
        lines += [
            "",
            "## Price per 100 structural_min decisions",
            "",
            "*lifetime*: steps an attestation counts before it must be renewed (rows sorted"
            " by it); *full rehydrations*: demands for every leaf of every fold of a value"
            " (what A4 asks as proof); *attestations issued / verified*: signed by the"
            " attester / checked by the holder; *RPCs*, *bytes* (protobuf request +"
            " response), *signatures made*, *verified sigs*: on the attest path (plain"
            " rehydrate mode: on its demands); *p50 / p99 ms*: latency of a decision that"
            " took that path (– where none did).",
            "",
            "| mode | lifetime | full rehydrations | attestations issued | verified | RPCs"
            " | bytes | signatures made | verified sigs | p50 ms | p99 ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            "| blind | – | 0 | 0 | 0 | 0 | 0 | 0 | 0 | – | – |",
            "| degrade | – | 0 | 0 | 0 | 0 | 0 | 0 | 0 | – | – |",
        ]
        pp = plain_price(h)
        lines.append(
            f"| rehydrate (lineage gates) | – | {pp['full_rehydrations']:.1f} | 0 | 0 |"
            f" {pp['rpcs']:.1f} | {pp['bytes']:,.0f} | {pp['sign_ops']:.1f} |"
            f" {pp['verify_ops']:.1f} |"
            f" {_latency_cells(pp, bool(h.extra.get('plain_latencies')))} |"
        )
        for r in honest:
            p = price(r)
            lines.append(
                f"| attest | {r.lifetime_steps} | {p['full_rehydrations']:.1f} |"
                f" {p['attestations_issued']:.1f} | {p['attestations_verified']:.1f} |"
                f" {p['rpcs']:,.1f} | {p['bytes']:,.0f} | {p['sign_ops']:,.1f} |"
                f" {p['verify_ops']:,.1f} | {_latency_cells(p, bool(r.latencies))} |"
            )
    auth = [r for r in results if r.row not in (Row.NONE.value, Row.HONEST.value)]
    if auth:
        lines += [
            "",
            "## Authority: attesters that must change nothing, taint discharge and a"
            " dishonest attester",
            "",
            "The rows up to `revoked` are attesters without the authority or the proof"
            " their attestations need (outside the trust policy, an axis not granted, above"
            " the ceiling, no or wrong receipts, replayed, expired, revoked): each must"
            " change nothing. `taint_discharge` may discharge one taint kind (A5: a"
            " discharged taint is named, and a blocklist gate ignores exactly it);"
            " `dishonest:AXIS` is a trusted attester that raises its granted axis without"
            " cause, to show what such trust costs. *rejected*: attestations the holder"
            " refused, by reason; *decisions changed*: gate decisions that differ from the"
            " same view without attestations; *after revocation*: changes after the"
            " attester's key was revoked (– for rows without a revocation); *same as none*:"
            " the row's decisions, all arms and modes, are the `none` row's (its"
            " fingerprint is equal).",
            "",
            "| row | issued | applied | rejected (by reason) | decisions with an axis raised"
            " | decisions changed | after revocation | same as none |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in auth:
            n = nums[r.name]
            rej = _rejected(r)
            reasons = ", ".join(f"{k} {v}" for k, v in rej.items()) or "–"
            lines.append(
                f"| {r.name} | {r.counts.get('attestations_issued', 0)} |"
                f" {r.counts.get('attestations_applied', 0)} | {sum(rej.values())} ({reasons}) |"
                f" {n.decisions_raised} | {n.changed} |"
                f" {'–' if n.changed_after_revocation is None else n.changed_after_revocation} |"
                f" {yes_no(none_fp is not None and r.fingerprint == none_fp)} |"
            )
        lines.append("")
        for r in auth:
            n = nums[r.name]
            if r.row == Row.TAINT_DISCHARGE.value or r.row == Row.DISHONEST.value:
                parts = ", ".join(
                    f"{k}: {a} to proceed / {b} to block"
                    for k, (a, b) in n.changed_by_class.items()
                )
                lines.append(
                    f"- {r.name}: changed {n.changed} ({parts or 'none'}); flips vs oracle"
                    f" {n.flips_before} → {n.flips_after}; false-proceeds"
                    f" {n.false_proceed_before} → {n.false_proceed_after}; decisions with"
                    f" an axis raised, by axis: {_axes_raised(n.raised_by_axis)}"
                )
    lines.append("")
    return "\n".join(lines)


def _latency_cells(p: Mapping[str, float], any_sample: bool) -> str:
    if not any_sample:
        return "– | –"
    return f"{p['p50_ms']:.2f} | {p['p99_ms']:.2f}"


def save_results(results: Sequence[RowResult], path: Path) -> Path:
    """Every row's numbers as JSON (bundle files are written separately), for re-rendering."""
    import dataclasses

    rows = []
    for r in results:
        obj = dataclasses.asdict(r)
        obj["bundle_files"] = []
        rows.append(obj)
    path.write_text(json.dumps(rows) + "\n", encoding="utf-8")
    return path


def load_results(path: Path) -> list[RowResult]:
    """The rows :func:`save_results` wrote (``ValueError`` on a malformed file)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        out = []
        for obj in rows:
            obj["records"] = [DecisionRecord(**d) for d in obj["records"]]
            obj["runs"] = [tuple(x) for x in obj["runs"]]
            obj["bundle_files"] = []
            out.append(RowResult(**obj))
    except (OSError, TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: not a saved attest result: {exc}") from exc
    return out
