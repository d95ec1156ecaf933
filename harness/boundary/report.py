"""Result files of a boundary run: costs, decision agreement, evidence, summary, figure.

- ``boundary_costs.csv`` — one row per (setting, arm, mode), in-process next
  to boundary (:data:`COST_COLUMNS`), plus the origin's ``commit`` row;
- ``boundary_decisions.csv`` — per run and (arm, gate, mode): decisions,
  proceeds in-process and across the boundary, how many differ, how many
  fell back (:data:`DECISION_COLUMNS`);
- ``boundary_evidence.csv`` — every accusation the holder recorded;
- ``boundary_meta.json`` — settings, fingerprints, counts, node ids;
- ``boundary.md`` — the summary table and :func:`cost_table`;
  ``boundary_costs.png`` (latency and bytes side by side),
  ``boundary_cost_vs_flips.png`` and ``boundary_bytes_by_cadence.png``
  (delivered bytes relative to full lineage per cadence); every figure
  title names the transport, the link RTT and the fault.
"""

from __future__ import annotations

import csv
import functools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, assert_never, cast

from harness._words import count
from harness.arms import ARM_ORDER, STRUCTURAL_ARMS, ArmName
from harness.boundary.choices import TransportKind
from harness.boundary.records import (
    ArmCosts,
    BoundaryOutcome,
    Setting,
    overall_fingerprints,
)
from harness.gates import GATES, GateClass, Mode, gate_modes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "COST_COLUMNS",
    "DECISION_COLUMNS",
    "EVIDENCE_COLUMNS",
    "conditions",
    "cost_rows",
    "cost_table",
    "evidence_file",
    "percentile",
    "prewarm_figures",
    "summary_markdown",
    "unconfirmed_text",
    "write_outputs",
]

COST_COLUMNS: list[str] = [
    "setting",
    "transport",
    "fault",
    "arm",
    "mode",
    "cadence",
    "decisions",
    "gate_evaluations",
    "flip_rate",
    "false_proceed",
    "false_stop",
    "fallbacks",
    "lookups",
    "rehydrating_decisions",
    "hops_fetched",
    "rpcs",
    "delivery_rpcs",
    "rehydrate_rpcs",
    "delivery_bytes",
    "delivery_value_bytes",
    "delivery_statement_bytes",
    "rehydrate_bytes",
    "delivery_p50_ms",
    "delivery_p99_ms",
    "rehydrate_p50_ms",
    "rehydrate_p99_ms",
    "sign_ops",
    "verify_ops",
    "hash_leaves",
    "delivery_crypto_ms",
    "rehydrate_crypto_ms",
]
DECISION_COLUMNS: list[str] = [
    "run_type",
    "cadence",
    "profile",
    "seed",
    "arm",
    "policy",
    "mode",
    "n",
    "in_process_proceed",
    "boundary_proceed",
    "differ",
    "fallbacks",
]
EVIDENCE_COLUMNS: list[str] = [
    "run",
    "step",
    "arm",
    "kind",
    "accused_name",
    "accused",
    "verified",
    "correct_origin",
    "file",
]


def _modes(arm: ArmName) -> list[Mode]:
    structural = arm.structural
    seen: list[Mode] = []
    for gate in GATES:
        for mode in gate_modes(gate, structural, True):
            if mode not in seen:
                seen.append(mode)
    return seen


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): the smallest value with at least
    ``q`` % of the values at or below it; 0.0 for no values.

    With this definition a percentile of pooled samples lies between the smallest
    and the largest percentile of the groups pooled (a rank rounded from
    ``q * (n - 1)`` does not: for 60 samples per group its p99 is the second
    largest, and the pooled second largest can be one group's maximum).
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[rank]


def _ms(values: Sequence[float], q: float) -> float:
    return round(percentile(values, q) * 1000.0, 3)


def _gate_totals(
    rows: Iterable[tuple[object, ...]], arm: str, mode: str
) -> tuple[int, int, int, int, int]:
    """(n, false_proceed, false_stop, lookups, bytes_read) summed over gates."""
    n = fp = fs = lookups = nbytes = 0
    for r in rows:
        if r[0] == arm and r[4] == mode:
            n += int(str(r[5]))
            fp += int(str(r[7]))
            fs += int(str(r[8]))
            lookups += int(str(r[11]))
            nbytes += int(str(r[12]))
    return n, fp, fs, lookups, nbytes


def cost_rows(outcome: BoundaryOutcome) -> list[dict[str, object]]:
    """The rows of ``boundary_costs.csv`` (see the module docstring)."""
    s = outcome.settings
    wire = outcome.wire
    zero: dict[str, float] = {}
    rows: list[dict[str, object]] = []
    in_rows = [r for run in outcome.runs for r in run.in_process_rows]
    b_rows = [r for run in outcome.runs for r in run.boundary_rows]
    for setting in Setting:
        gate_rows = in_rows if setting is Setting.IN_PROCESS else b_rows
        for arm in ARM_ORDER:
            costs: ArmCosts = outcome.arm_costs[arm.value]
            delivery = wire.get((arm.value, "delivery"), zero)
            rehydrate = wire.get((arm.value, "rehydrate"), zero)
            for mode in _modes(arm):
                if arm is ArmName.GROUND_TRUTH:
                    n, fp, fs, lookups, nbytes = costs.decisions * len(GATES), 0, 0, 0, 0
                else:
                    n, fp, fs, lookups, nbytes = _gate_totals(gate_rows, arm.value, mode.value)
                rehydrating = mode is Mode.REHYDRATE
                row: dict[str, object] = {
                    "setting": setting.value,
                    "transport": s.transport.value,
                    "fault": s.fault.value,
                    "arm": arm.value,
                    "mode": mode.value,
                    "cadence": "all",
                    "decisions": costs.decisions,
                    "gate_evaluations": n,
                    "flip_rate": round((fp + fs) / n, 6) if n else 0.0,
                    "false_proceed": fp,
                    "false_stop": fs,
                    "lookups": lookups,
                }
                if setting is Setting.IN_PROCESS:
                    row.update(
                        fallbacks=0,
                        rehydrating_decisions=costs.inproc_rehydrations if rehydrating else 0,
                        hops_fetched=lookups,
                        rpcs=0,
                        delivery_rpcs=0,
                        rehydrate_rpcs=0,
                        delivery_bytes=0,
                        delivery_value_bytes=0,
                        delivery_statement_bytes=0,
                        rehydrate_bytes=nbytes,
                        delivery_p50_ms=0.0,
                        delivery_p99_ms=0.0,
                        rehydrate_p50_ms=_ms(costs.inproc_latencies, 50) if rehydrating else 0.0,
                        rehydrate_p99_ms=_ms(costs.inproc_latencies, 99) if rehydrating else 0.0,
                        sign_ops=0,
                        verify_ops=0,
                        hash_leaves=0,
                        delivery_crypto_ms=0.0,
                        rehydrate_crypto_ms=0.0,
                    )
                elif setting is Setting.BOUNDARY:
                    r = rehydrate if rehydrating else zero
                    row.update(
                        fallbacks=sum(
                            rec[4]
                            for run in outcome.runs
                            for (a, _, m), rec in run.decisions.items()
                            if a == arm.value and m == mode.value
                        ),
                        rehydrating_decisions=costs.rehydrations if rehydrating else 0,
                        hops_fetched=int(r.get("hops_received", 0)),
                        rpcs=int(delivery.get("rpcs", 0) + r.get("rpcs", 0)),
                        delivery_rpcs=int(delivery.get("rpcs", 0)),
                        rehydrate_rpcs=int(r.get("rpcs", 0)),
                        delivery_bytes=int(
                            delivery.get("request_bytes", 0) + delivery.get("response_bytes", 0)
                        ),
                        delivery_value_bytes=costs.value_bytes,
                        delivery_statement_bytes=costs.statement_bytes,
                        rehydrate_bytes=int(r.get("request_bytes", 0) + r.get("response_bytes", 0)),
                        delivery_p50_ms=_ms(costs.delivery_latencies, 50),
                        delivery_p99_ms=_ms(costs.delivery_latencies, 99),
                        rehydrate_p50_ms=_ms(costs.rehydration_latencies, 50)
                        if rehydrating
                        else 0.0,
                        rehydrate_p99_ms=_ms(costs.rehydration_latencies, 99)
                        if rehydrating
                        else 0.0,
                        sign_ops=int(delivery.get("sign_ops", 0) + r.get("sign_ops", 0)),
                        verify_ops=int(delivery.get("verify_ops", 0) + r.get("verify_ops", 0)),
                        hash_leaves=int(delivery.get("hash_leaves", 0) + r.get("hash_leaves", 0)),
                        delivery_crypto_ms=round(
                            delivery.get("sig_ms", 0) + delivery.get("hash_ms", 0), 3
                        ),
                        rehydrate_crypto_ms=round(r.get("sig_ms", 0) + r.get("hash_ms", 0), 3),
                    )
                else:
                    assert_never(setting)
                rows.append(row)
    commit = wire.get(("origin", "commit"), zero)
    row = {c: 0 for c in COST_COLUMNS}
    row.update(
        setting=Setting.BOUNDARY.value,
        transport=s.transport.value,
        fault=s.fault.value,
        arm="origin",
        mode="commit",
        decisions=outcome.folds_committed,
        hops_fetched=outcome.hops_appended,
        sign_ops=int(commit.get("sign_ops", 0)),
        verify_ops=int(commit.get("verify_ops", 0)),
        hash_leaves=int(commit.get("hash_leaves", 0)),
        delivery_crypto_ms=round(commit.get("sig_ms", 0) + commit.get("hash_ms", 0), 3),
    )
    row["cadence"] = "all"
    rows.append(row)
    # Delivered bytes per cadence (mode "delivery"): what a value and its
    # statements cost at each compaction cadence of the slice.
    for (cadence, arm_name), (decisions, value_bytes, statement_bytes) in sorted(
        outcome.delivery_by_cadence.items()
    ):
        row = {c: 0 for c in COST_COLUMNS}
        row.update(
            setting=Setting.BOUNDARY.value,
            transport=s.transport.value,
            fault=s.fault.value,
            arm=arm_name,
            mode="delivery",
            cadence=cadence,
            decisions=decisions,
            delivery_value_bytes=value_bytes,
            delivery_statement_bytes=statement_bytes,
        )
        rows.append(row)
    return rows


def cadence_ratios(outcome: BoundaryOutcome) -> list[tuple[int, float, float, float, float]]:
    """Per cadence: (C, full lineage B, compacted value B, statement B, ratio) per decision.

    The ratio is structural_min's compacted value + statements over
    ground_truth's full lineage (both per decision at that cadence).
    """
    out: list[tuple[int, float, float, float, float]] = []
    for cadence in sorted({c for c, _ in outcome.delivery_by_cadence}):
        gt = outcome.delivery_by_cadence.get((cadence, ArmName.GROUND_TRUTH.value))
        sm = outcome.delivery_by_cadence.get((cadence, ArmName.STRUCTURAL_MIN.value))
        if not gt or not sm or not gt[0] or not sm[0] or not gt[1]:
            continue
        full = gt[1] / gt[0]
        value, statements = sm[1] / sm[0], sm[2] / sm[0]
        out.append((cadence, full, value, statements, (value + statements) / full))
    return out


def evidence_file(path: str, out: Path) -> str:
    """An evidence file's path as the results folder names it: relative to ``out``.

    Results are written into a staged folder that is renamed to the output
    folder when complete; a path relative to it is valid after the rename.
    """
    try:
        return Path(path).relative_to(out).as_posix()
    except ValueError:
        return path


def _write_csv(path: Path, columns: list[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)


_Draw = TypeVar("_Draw", bound=Callable[..., bool])


def _own_style(draw: _Draw) -> _Draw:
    """Draw under matplotlib's default style, whatever the process changed.

    A figure must not depend on what else ran in the process (``harness.figures``
    sets its own rcParams process-wide): the same numbers give the same PNG
    bytes in the parent, in a worker and in a test session.
    """

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> bool:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.style

        with matplotlib.style.context("default"):
            return draw(*args, **kwargs)

    return cast(_Draw, drawn)


def prewarm_figures() -> None:
    """Import matplotlib (Agg) and pyplot now, so that drawing later starts at once.

    The import is most of the cost of a small figure; a worker process calls
    this when its runs are done, while the others still play theirs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot


def write_outputs(
    outcome: BoundaryOutcome, out: Path, executor: Executor | None = None
) -> list[Path]:
    """Write every result file into ``out``; returns the paths written.

    With ``executor`` (the run's worker processes) the figures are drawn
    there, in parallel with each other and with the tables written here;
    each figure is drawn from numbers computed here, so the files are the
    same either way.
    """
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    costs = cost_rows(outcome)
    where = conditions(outcome)
    jobs: list[tuple[Path, Callable[..., bool], tuple[Any, ...]]] = []
    data = _costs_figure_data(outcome)
    if data is not None:
        path = out / "boundary_costs.png"
        jobs.append((path, _draw_costs, (data, path)))
    path = out / "boundary_cost_vs_flips.png"
    jobs.append((path, _figure, (costs, path, where)))
    path = out / "boundary_bytes_by_cadence.png"
    jobs.append((path, _cadence_figure, (cadence_ratios(outcome), path, where)))
    drawing: list[tuple[Path, Future[bool]]] = []
    if executor is not None:  # the largest figure first
        drawing = [(path, executor.submit(fn, *args)) for path, fn, args in jobs]
    path = out / "boundary_costs.csv"
    _write_csv(path, COST_COLUMNS, ([row[c] for c in COST_COLUMNS] for row in costs))
    written.append(path)

    path = out / "boundary_decisions.csv"
    _write_csv(
        path,
        DECISION_COLUMNS,
        (
            [*run.key.row(), arm, policy, mode, *rec]
            for run in outcome.runs
            for (arm, policy, mode), rec in run.decisions.items()
        ),
    )
    written.append(path)

    path = out / "boundary_evidence.csv"
    _write_csv(
        path,
        EVIDENCE_COLUMNS,
        (
            [
                e.run,
                e.step,
                e.arm,
                e.kind,
                e.accused_name,
                e.accused,
                e.verified,
                e.correct_origin,
                evidence_file(e.path, out),
            ]
            for e in outcome.evidence
        ),
    )
    written.append(path)

    in_fp, b_fp = overall_fingerprints(outcome)
    meta = {
        "settings": outcome.settings.to_json(),
        "wall_seconds": round(outcome.wall_seconds, 3),
        "n_runs": len(outcome.runs),
        "in_process_fingerprint": in_fp,
        "boundary_fingerprint": b_fp,
        "fingerprints_equal": in_fp == b_fp,
        "runs": {
            r.label: {
                "decisions": r.n_decisions,
                "in_process": r.in_process_fingerprint,
                "boundary": r.boundary_fingerprint,
                "fingerprints_equal": r.fingerprints_equal,
                "gate_rows_equal": r.rows_equal,
            }
            for r in outcome.runs
        },
        "folds_committed": outcome.folds_committed,
        "hops_appended": outcome.hops_appended,
        "evidence_by_kind": outcome.evidence_by_kind,
        "correct_origins_accused": outcome.correct_accused,
        "origin_outcomes": {f"{n}:{o}": c for (n, o), c in sorted(outcome.outcomes.items())},
        "calls_by_node": outcome.wire.get(("calls", "by_node"), {}),
        "nodes": outcome.node_ids,
        "bytes_scheme": "protobuf-encoded request + response messages (no HTTP/2 framing)",
    }
    path = out / "boundary_meta.json"
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    written.append(path)

    path = out / "boundary.md"
    path.write_text(summary_markdown(outcome, costs), encoding="utf-8")
    written.append(path)

    if executor is None:
        written += [path for path, fn, args in jobs if fn(*args)]
    else:
        written += [path for path, future in drawing if future.result()]
    return written


def conditions(outcome: BoundaryOutcome) -> str:
    """Transport, link RTT and fault of a run, as figure titles and tables name them."""
    s = outcome.settings
    nodes = len(outcome.node_ids)
    match s.transport:
        case TransportKind.MEMORY:
            where = f"in-memory transport, {nodes} nodes in one process"
            rtt = "RTT: none (no network)"
        case TransportKind.GRPC:
            where = f"gRPC on loopback, {nodes} nodes in one process"
            rtt = "RTT: loopback, no added delay"
            if s.rtt_ms is not None:
                rtt = f"RTT: {s.rtt_ms:g} ms added per link (user-space proxies)"
        case TransportKind.REMOTE:
            where = f"gRPC{' over TLS' if s.tls_ca else ''} to {nodes} running node processes"
            rtt = "RTT: as the network gives (loopback: no added delay)"
        case _:
            assert_never(s.transport)
    faults = [f"{n} {f}" for n, f in outcome.node_faults.items() if f != "none"]
    return f"{where}; {rtt}; fault: {', '.join(faults) or 'none'}"


def _rehydration_stats(outcome: BoundaryOutcome) -> tuple[int, float, list[float], list[float]]:
    """(rehydrating decisions, RPCs, latencies across, latencies in-process) of both arms."""
    arms = [a.value for a in STRUCTURAL_ARMS]
    n = sum(outcome.arm_costs[a].rehydrations for a in arms)
    rpcs = sum(outcome.wire.get((a, "rehydrate"), {}).get("rpcs", 0.0) for a in arms)
    across = [x for a in arms for x in outcome.arm_costs[a].rehydration_latencies]
    local = [x for a in arms for x in outcome.arm_costs[a].inproc_latencies]
    return n, rpcs, across, local


def unconfirmed_text(outcome: BoundaryOutcome) -> str:
    """The unconfirmed suspicions of a run, in words (\"unconfirmed suspicions: none\")."""
    kept = outcome.unconfirmed_suspicions
    if not kept:
        return "unconfirmed suspicions: none"
    named = ", ".join(f"{n} {c}" for n, c in kept.items())
    return f"unconfirmed suspicions (unanswered, no witness confirmed; not evidence): {named}"


def cost_table(outcome: BoundaryOutcome) -> str:
    """In-process next to across the boundary: calls, bytes, latency, evidence (Markdown)."""
    gt = outcome.arm_costs[ArmName.GROUND_TRUTH.value]
    smin = outcome.arm_costs[ArmName.STRUCTURAL_MIN.value]
    n, rpcs, across, local = _rehydration_stats(outcome)
    decisions = sum(outcome.arm_costs[a].decisions for a in outcome.arm_costs)
    delivery_rpcs = sum(
        outcome.wire.get((a, "delivery"), {}).get("rpcs", 0.0) for a in outcome.arm_costs
    )
    kinds = outcome.evidence_by_kind
    evidence = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) if kinds else "none"
    full = gt.value_bytes / gt.decisions if gt.decisions else 0.0
    value = smin.value_bytes / smin.decisions if smin.decisions else 0.0
    statements = smin.statement_bytes / smin.decisions if smin.decisions else 0.0
    rows = [
        ("| | in-process | across the boundary |", None),
        ("|---|---|---|", None),
        (
            f"| RPCs per arm decision | 0 | {(delivery_rpcs + rpcs) / decisions:.2f}"
            f" ({delivery_rpcs / decisions:.2f} delivery + {rpcs / decisions:.2f} rehydration) |"
            if decisions
            else "| RPCs per arm decision | 0 | – |",
            None,
        ),
        (
            f"| bytes delivered per decision (value + statements) | {full:,.0f} (full lineage,"
            f" ground_truth) | {round(value) + round(statements):,} (structural_min:"
            f" {value:,.0f} value + {statements:,.0f} statements: fold proofs, heads) |",
            None,
        ),
        (
            "| holder cache (folds verified once are not demanded again) | – |"
            + (
                " on (running nodes keep every fold they verified) |"
                if outcome.settings.transport is TransportKind.REMOTE
                else f" {'on' if outcome.settings.holder_cache else 'off'} |"
            ),
            None,
        ),
        (
            f"| rehydrating decisions | {n} (cold-log reads) | {n} ({rpcs:.0f} RPCs) |",
            None,
        ),
        (
            f"| rehydrating decision p50 / p99 | {_ms(local, 50):.3f} / {_ms(local, 99):.3f} ms |"
            f" {_ms(across, 50):.2f} / {_ms(across, 99):.2f} ms |",
            None,
        ),
        (
            f"| evidence | – | {evidence}; {unconfirmed_text(outcome)};"
            f" correct origins accused: {outcome.correct_accused} |",
            None,
        ),
    ]
    return "\n".join(r for r, _ in rows) + "\n"


@dataclass(frozen=True, slots=True)
class _CostsFigure:
    """What ``boundary_costs.png`` shows, computed from an outcome (small, picklable)."""

    labels: tuple[str, ...]
    local50: tuple[float, ...]
    local99: tuple[float, ...]
    across50: tuple[float, ...]
    across99: tuple[float, ...]
    names: tuple[str, ...]
    values: tuple[float, ...]
    statements: tuple[float, ...]
    where: str


def _costs_figure_data(outcome: BoundaryOutcome) -> _CostsFigure | None:
    """The numbers of :func:`_draw_costs`; None when nothing was decided."""
    arms = [a for a in STRUCTURAL_ARMS if outcome.arm_costs[a.value].rehydrations]
    gt = outcome.arm_costs[ArmName.GROUND_TRUTH.value]
    if not gt.decisions:
        return None
    # left: rehydrating-decision latency, p50 and p99, per structural arm
    latencies = [outcome.arm_costs[a.value] for a in arms]
    # right: bytes per decision delivered, full lineage vs compacted + statements
    names = ["ground_truth\n(full lineage)"]
    values = [gt.value_bytes / gt.decisions]
    statements = [0.0]
    for arm in STRUCTURAL_ARMS:
        c = outcome.arm_costs[arm.value]
        if c.decisions:
            names.append(f"{arm.value}\n(compacted)")
            values.append(c.value_bytes / c.decisions)
            statements.append(c.statement_bytes / c.decisions)
    return _CostsFigure(
        tuple(a.value for a in arms),
        tuple(_ms(c.inproc_latencies, 50) for c in latencies),
        tuple(_ms(c.inproc_latencies, 99) for c in latencies),
        tuple(_ms(c.rehydration_latencies, 50) for c in latencies),
        tuple(_ms(c.rehydration_latencies, 99) for c in latencies),
        tuple(names),
        tuple(values),
        tuple(statements),
        conditions(outcome),
    )


@_own_style
def _draw_costs(data: _CostsFigure, path: Path) -> bool:
    """Latency (left) and bytes (right) of deciding across the boundary vs in-process."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, nbytes) = plt.subplots(1, 2, figsize=(11, 4.6))
    labels = list(data.labels)
    xs = list(range(len(labels)))
    width = 0.2
    for offset, values, label, color, hatch in (
        (-1.5, data.local50, "in-process p50", "tab:gray", ""),
        (-0.5, data.local99, "in-process p99", "tab:gray", "//"),
        (0.5, data.across50, "across p50", "tab:blue", ""),
        (1.5, data.across99, "across p99", "tab:blue", "//"),
    ):
        bars = lat.bar(
            [x + offset * width for x in xs],
            values,
            width,
            label=label,
            color=color,
            hatch=hatch,
            edgecolor="black",
        )
        lat.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8, padding=2)
    lat.set_yscale("log")
    shown = [v for v in (*data.local50, *data.local99, *data.across50, *data.across99) if v > 0]
    if shown:  # head room above the tallest bar for its label and the legend
        lat.set_ylim(min(shown) / 2, max(shown) * 30)
    lat.set_xticks(xs, labels)
    lat.set_ylabel("rehydrating decision latency (ms, log scale)")
    lat.set_title("Latency of a decision that needs folded hops", fontsize=10)
    lat.legend(fontsize=8, loc="upper left", ncol=2)
    lat.grid(True, axis="y", alpha=0.3)
    values_b = list(data.values)
    statements = list(data.statements)
    bx = list(range(len(data.names)))
    nbytes.bar(bx, values_b, 0.6, label="value", color="tab:green", edgecolor="black")
    top = nbytes.bar(
        bx,
        statements,
        0.6,
        bottom=values_b,
        label="statements (fold proofs, heads)",
        color="tab:orange",
        edgecolor="black",
    )
    nbytes.bar_label(
        top,
        labels=[f"{v + s:,.0f} B" for v, s in zip(values_b, statements, strict=True)],
        fontsize=8,
        padding=2,
    )
    nbytes.set_xticks(bx, list(data.names), fontsize=9)
    nbytes.set_ylabel("bytes delivered per decision")
    nbytes.set_title("What one delivery carries", fontsize=10)
    nbytes.legend(fontsize=8, loc="upper right")
    nbytes.grid(True, axis="y", alpha=0.3)
    nbytes.set_ylim(0, max(v + s for v, s in zip(values_b, statements, strict=True)) * 1.2)
    fig.suptitle(wrap_title(f"Across the boundary — {data.where}", 110), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


@_own_style
def _cadence_figure(
    ratios: list[tuple[int, float, float, float, float]], path: Path, where: str
) -> bool:
    """Compacted value + statements over full lineage, per compaction cadence."""
    fig = cadence_figure(ratios, where)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


#: Delivered bytes relative to the full lineage that the compaction design aims under.
BYTES_TARGET = 0.75


def wrap_title(text: str, width: int = 80) -> str:
    """``text`` broken into lines of at most ``width`` characters, so a long condition
    (running nodes, several faults) is not cut at the figure's edge."""
    import textwrap

    return "\n".join(
        textwrap.fill(line, width, break_on_hyphens=False) for line in text.split("\n")
    )


def cadence_figure(
    ratios: list[tuple[int, float, float, float, float]], where: str
) -> Figure | None:
    """The figure of ``boundary_bytes_by_cadence.png`` (None without a cadence to show)."""
    if not ratios:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    cs = [r[0] for r in ratios]
    ax.plot(cs, [r[4] for r in ratios], marker="o", label="(compacted value + statements) / full")
    ax.plot(cs, [r[2] / r[1] for r in ratios], marker="s", ls="--", label="compacted value / full")
    ax.axhline(1.0, color="gray", lw=0.8, label="full lineage (1.0)")
    ax.axhline(BYTES_TARGET, color="gray", lw=0.8, ls=":", label=f"target ≤ {BYTES_TARGET:g}")
    ax.set_xscale("log")
    ax.set_xlabel("compaction cadence C (steps)")
    ax.set_ylabel("bytes delivered per decision, relative to full lineage")
    ax.set_ylim(0, 1.15)
    title = "Delivered bytes per cadence (structural_min vs ground_truth)"
    if len(cs) == 1:
        # One cadence is one point per series, not a curve: say so where it is seen.
        title += f"\none cadence in this slice (C = {cs[0]}): pass --cadence C1,C2,… for a curve"
        _, full, value, _, ratio = ratios[0]
        for y in (ratio, value / full):
            ax.annotate(f"{y:.3f}", (cs[0], y), textcoords="offset points", xytext=(8, -3))
    ax.set_title(wrap_title(f"{title}\n{where}", 90), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def _per(value: float, n: int) -> str:
    return f"{value / n:,.0f}" if n else "–"


def _lineage_evaluations(outcome: BoundaryOutcome) -> dict[tuple[str, str], int]:
    """In-process lineage-gate evaluations per (arm, mode): the denominator of lookups,
    as summary.md's "per 100 lineage-gate decisions"."""
    out: dict[tuple[str, str], int] = {}
    for run in outcome.runs:
        for r in run.in_process_rows:
            if GateClass(str(r[2])).is_lineage:
                key = (str(r[0]), str(r[4]))
                out[key] = out.get(key, 0) + int(str(r[5]))
    return out


def _delivery_parts(row: dict[str, object], dec: int) -> str:
    """A Deliver RPC's bytes per decision as parts that add up to the total shown."""
    if not dec:
        return "–"
    total = round(float(str(row["delivery_bytes"])) / dec)
    value = round(float(str(row["delivery_value_bytes"])) / dec)
    statements = round(float(str(row["delivery_statement_bytes"])) / dec)
    return f"{total:,} = {value:,} + {statements:,} + {total - value - statements:,}"


def _latency(row: dict[str, object], rehydrating: bool) -> str:
    if not rehydrating:
        return "–"
    return f"{row['rehydrate_p50_ms']} / {row['rehydrate_p99_ms']}"


#: What each column of the per-arm table means, printed under it.
_COLUMN_NOTES = [
    "Columns:",
    "",
    "- flip %: gate evaluations whose proceed/stop differs from the oracle's, in-process"
    " → across the boundary;",
    "- lookups /100 lineage-gate dec.: folded-hop pointers the gates dereferenced"
    " (in-process, the same across), per 100 lineage-gate evaluations of the mode (the"
    " denominator of summary.md's figure); `–` where the mode evaluates no lineage gate;",
    "- in-process p50 ms: the same rehydrating decisions in one process, on the cold log;",
    "- RPCs /dec: calls made (deliveries and forwards; demands, re-asks and witness challenges);",
    "- Deliver RPC B/dec: protobuf bytes of the Deliver (and Forward) requests and"
    " responses; *value* is the delivered value, *statements* the fold proofs and heads"
    " riding with it (value + statements is what the table above calls bytes delivered),"
    " *rest* the message fields, the receiver's acknowledgement and any forwards along the"
    " chain;",
    "- rehydr. B: protobuf bytes of demand and challenge traffic per rehydrating decision;",
    "- hops fetched: hops that crossed the wire in demand answers per rehydrating decision;",
    "- p50 / p99 ms: latency of a rehydrating decision across the boundary (demand,"
    " verification, the gates);",
    "- crypto ms/dec: CPU time of Ed25519 signatures and Merkle hashing on every node;",
    "- fallbacks: rehydrate evaluations decided by the gate's polarity because the hops did"
    " not arrive verified.",
]


def summary_markdown(outcome: BoundaryOutcome, costs: list[dict[str, object]]) -> str:
    s = outcome.settings
    in_fp, b_fp = overall_fingerprints(outcome)
    lines = [
        "# The experiment across the boundary",
        "",
        f"Transport `{s.transport.value}`, fault `{s.fault.value}` on origin `{s.chain[0]}`,"
        f" chain {' → '.join(s.chain)},"
        f" {'origin' if len(s.origin_names()) == 1 else 'origins'}"
        f" {', '.join(f'`{n}`' for n in s.origin_names())};"
        f" C = {', '.join(map(str, s.cadences))}, profile {', '.join(s.profiles)},"
        f" {count(len(s.seeds), 'seed')}, {s.steps} steps; deadline {s.deadline_ms} ms,"
        f" {count(s.reasks, 're-ask')}, witness {'on' if s.witness else 'off'},"
        f" holder cache {'on' if s.holder_cache else 'off'}."
        f" {count(len(outcome.runs), 'run')} in {outcome.wall_seconds:.2f} s.",
        "",
        "## Decisions",
        "",
        "Every decision across the boundary is compared with the same decision made in"
        " one process: a *fingerprint* is a SHA-256 over a run's decision log (every gate"
        " of every arm and mode), the *gate_metrics rows* are the per-gate counts"
        " `provnet experiment run` writes; a gate that cannot get its folded hops verified"
        " *falls back to its polarity* (blocks, as degrade mode does).",
        "",
        f"- in-process fingerprint `{in_fp[:16]}…`, boundary fingerprint `{b_fp[:16]}…`:"
        f" **{'equal' if in_fp == b_fp else 'different'}**",
    ]
    n_eq = sum(1 for r in outcome.runs if r.fingerprints_equal)
    rows_eq = sum(1 for r in outcome.runs if r.rows_equal)
    differ = sum(rec[3] for r in outcome.runs for rec in r.decisions.values())
    fallbacks = sum(rec[4] for r in outcome.runs for rec in r.decisions.values())
    total = sum(rec[0] for r in outcome.runs for rec in r.decisions.values())
    lines += [
        f"- runs with equal fingerprints: {n_eq}/{len(outcome.runs)};"
        f" equal gate_metrics rows: {rows_eq}/{len(outcome.runs)}",
        f"- gate evaluations that differ from in-process: {differ} of {total};"
        f" fell back to polarity: {fallbacks}",
        "",
        "## In-process vs across",
        "",
        f"{conditions(outcome)}.",
        "",
        cost_table(outcome),
        "## Costs per arm and mode",
        "",
        "Per decision point of the arm (`dec`) unless stated; the delivery column repeats"
        " for every mode of an arm (each mode needs the delivered value: do not add it up"
        " across modes); rehydration columns are per rehydrating decision and `–` where"
        " the mode never rehydrates.",
        "",
        "| arm | mode | flip % (in → across) | lookups /100 lineage-gate dec. | in-process p50 ms"
        " | RPCs /dec | Deliver RPC B/dec = value + statements + rest | rehydr. B | hops fetched"
        " | p50 / p99 ms | crypto ms/dec | fallbacks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(str(r["setting"]), str(r["arm"]), str(r["mode"])): r for r in costs}
    lineage = _lineage_evaluations(outcome)
    for arm in ARM_ORDER:
        for mode in _modes(arm):
            i = by_key[(Setting.IN_PROCESS.value, arm.value, mode.value)]
            b = by_key[(Setting.BOUNDARY.value, arm.value, mode.value)]
            dec = int(str(b["decisions"]))
            reh = int(str(b["rehydrating_decisions"]))
            crypto = float(str(b["delivery_crypto_ms"])) + float(str(b["rehydrate_crypto_ms"]))
            flip_in = 100 * float(str(i["flip_rate"]))
            flip_b = 100 * float(str(b["flip_rate"]))
            evals = lineage.get((arm.value, mode.value), 0)
            lookups = f"{100 * int(str(i['lookups'])) / evals:.1f}" if evals else "–"
            rehydrating = mode is Mode.REHYDRATE
            lines.append(
                f"| {arm.value} | {mode.value} | {flip_in:.2f} → {flip_b:.2f}"
                f" | {lookups}"
                f" | {i['rehydrate_p50_ms'] if rehydrating else '–'}"
                f" | {int(str(b['rpcs'])) / dec if dec else 0:.2f}"
                f" | {_delivery_parts(b, dec)}"
                f" | {_per(float(str(b['rehydrate_bytes'])), reh)}"
                f" | {_per(float(str(b['hops_fetched'])), reh)}"
                f" | {_latency(b, rehydrating)}"
                f" | {crypto / dec if dec else 0:.3f}"
                f" | {b['fallbacks']} |"
            )
    lines += ["", *_COLUMN_NOTES]
    commit = by_key[(Setting.BOUNDARY.value, "origin", "commit")]
    gt = outcome.arm_costs[ArmName.GROUND_TRUTH.value]
    smin = outcome.arm_costs[ArmName.STRUCTURAL_MIN.value]
    lines += [
        "",
        f"Origin commits: {commit['decisions']} folds over {commit['hops_fetched']} appended"
        f" hops; {commit['sign_ops']} signatures,"
        f" {int(str(commit['hash_leaves'])):,} leaves hashed,"
        f" {commit['delivery_crypto_ms']} ms of signature + hash CPU.",
        "",
        "## What compaction saves on delivery",
        "",
    ]
    if gt.decisions and smin.decisions:
        gt_v = gt.value_bytes / gt.decisions
        sm_v = smin.value_bytes / smin.decisions
        sm_all = (smin.value_bytes + smin.statement_bytes) / smin.decisions
        change = sm_all / gt_v - 1.0
        verdict = (
            f"{100 * change:.1f}% more than shipping everything: the signed statements cost"
            " more than folding saved"
            if change > 0
            else f"{-100 * change:.1f}% less than shipping everything"
        )
        lines += [
            f"- ground_truth ships its full lineage: {gt_v:,.0f} B of value per decision",
            f"- structural_min ships the compacted value: {sm_v:,.0f} B"
            f" ({100 * (1 - sm_v / gt_v):.1f}% less), plus"
            f" {smin.statement_bytes / smin.decisions:,.0f} B of statements (fold proofs, heads)"
            f" ({smin.commitments_delivered / smin.decisions:.1f} fold proofs per decision):"
            f" {sm_all:,.0f} B in all, {verdict}",
        ]
    ratios = cadence_ratios(outcome)
    if ratios:
        lines += [
            "",
            "Per compaction cadence C (steps between compactions), per decision: ground_truth's"
            " full lineage, structural_min's compacted value and its statements, and the"
            " ratio of compacted value + statements over full lineage (below 1: compaction"
            " saves bytes on delivery):",
            "",
            "| C | full lineage B | compacted value B | statements B | ratio |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {c} | {full:,.0f} | {value:,.0f} | {st:,.0f} | {ratio:.3f} |"
            for c, full, value, st, ratio in ratios
        ]
    lines += ["", "## Evidence", ""]
    kinds = outcome.evidence_by_kind
    if kinds:
        lines.append("- by kind: " + ", ".join(f"`{k}` {v}" for k, v in sorted(kinds.items())))
        named = sorted({e.accused_name for e in outcome.evidence})
        lines.append(f"- accused: {', '.join(named)}")
        lines.append(
            f"- verified by file alone: {sum(1 for e in outcome.evidence if e.verified)}"
            f" of {len(outcome.evidence)}"
        )
    else:
        lines.append("- none recorded")
    lines.append(f"- {unconfirmed_text(outcome)}")
    lines.append(f"- correct origins accused: {outcome.correct_accused}")
    outcomes = ", ".join(f"{n} {o}: {c}" for (n, o), c in sorted(outcome.outcomes.items()))
    lines += [
        "- origin outcomes per rehydration (origin, what it did when demanded: count):"
        f" {outcomes or 'none'}",
        "",
    ]
    return "\n".join(lines)


@_own_style
def _figure(costs: list[dict[str, object]], path: Path, where: str) -> bool:
    fig = cost_vs_flips_figure(costs, where)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def cost_vs_flips_figure(costs: list[dict[str, object]], where: str) -> Figure | None:
    """The figure of ``boundary_cost_vs_flips.png``: one point per (arm, mode) over the
    whole slice (None without one); the per-cadence ``delivery`` rows have no flip
    rate and are not points here (``boundary_bytes_by_cadence.png`` shows them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points: list[tuple[str, str, float, float]] = []
    for r in costs:
        dec = int(str(r["decisions"]))
        if (
            r["setting"] != Setting.BOUNDARY.value
            or r["arm"] == "origin"
            or r["cadence"] != "all"
            or not dec
        ):
            continue
        wire = (float(str(r["delivery_bytes"])) + float(str(r["rehydrate_bytes"]))) / dec
        points.append((str(r["arm"]), str(r["mode"]), 100 * float(str(r["flip_rate"])), wire))
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    markers = {"blind": "o", "degrade": "s", "rehydrate": "^"}
    style = {
        "ground_truth": ("black", 150, "*"),
        "structural_min": ("tab:blue", 140, None),
        "structural_perhop": ("tab:orange", 50, None),
        "prose": ("tab:green", 70, None),
    }
    for arm, mode, flip, wire in points:
        color, size, marker = style.get(arm, ("gray", 60, None))
        ax.scatter(
            flip,
            wire,
            marker=marker or markers.get(mode, "o"),
            s=size,
            facecolors="none" if arm == "structural_min" else color,
            edgecolors=color,
            label=f"{arm} / {mode}",
        )
    ax.set_xlabel("flip rate vs oracle, all gates of the mode (%)")
    ax.set_ylabel("bytes on the wire per decision (delivery + rehydration)")
    ax.set_title(wrap_title(f"Cost vs flip rate per arm and mode\n{where}"), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
