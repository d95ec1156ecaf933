"""The files of a simulation: ``cells.csv``, ``agents.csv``, ``summary.csv``,
``growth.csv``, ``summary.md`` and three figures (:mod:`harness.simulate.figures`).

- ``cells.csv`` — one row per cell (:class:`harness.simulate.run.CellRow`).
- ``agents.csv`` — one row per faulty origin, faithful origin that departed,
  and suspicion of a faithful agent (:class:`harness.simulate.run.AgentRow`):
  the time-to-evidence and time-to-clear distributions.
- ``summary.csv`` — per N and quantity: the mean over seeds of the per-seed
  value and, with two or more seeds, a 95% confidence interval
  (Student's t, seeds as independent replicates; the issue asks for ≥ 5).
  Quantities: costs per delegated decision and per agent-hour (RPCs, bytes,
  signatures, verifications); per fault class the share of its agents named
  at all (*exposed*) and by a proof (*proven*), the same among those a
  rehydration could expose (``*_when_exercised``: begun while the origin was
  up; for ``departed``, asked after it left), and
  the time to evidence (mean, p50, p90); accuracy (proofs and suspicions
  against faithful nodes, the liars' forgeries, the share of suspicions that
  cleared and their time to clear); storage per agent.
- ``growth.csv`` — with several N: per cost, the slope of the least-squares
  line through (log N, log cost per decision). A slope near 0 says the cost
  per decision does not grow with the network.
- ``summary.md`` — the same, in words and tables.

Every number is computed from the rows, in row order: the files depend on
the workload and the seeds alone (no wall-clock quantity is written).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import astuple, fields
from pathlib import Path

from harness.simulate.run import AgentRow, CellRow, SimResult

__all__ = ["COSTS", "confidence_interval", "growth_intervals", "loglog_slope", "write_outputs"]

#: Costs reported per delegated decision.
COSTS = ("rpcs", "bytes", "sign_ops", "verify_ops")

# two-sided 95% Student t quantiles by degrees of freedom (1..30); beyond: normal
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def confidence_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, 95% half-width); half-width NaN for fewer than two values."""
    k = len(values)
    mean = sum(values) / k
    if k < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (k - 1)
    t = _T95[k - 2] if k - 1 <= len(_T95) else 1.960
    return mean, t * math.sqrt(var / k)


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y on log x (NaN without two distinct x or with y ≤ 0)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({p[0] for p in pts}) < 2 or len(pts) != len(xs):
        return math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _per_seed(rows: Sequence[CellRow], agents: Sequence[AgentRow]) -> dict[str, float]:
    """The quantities of one (N, seed): costs per decision, completeness, accuracy."""
    decisions = sum(r.decisions for r in rows)
    out: dict[str, float] = {
        f"{c}_per_decision": sum(getattr(r, c) for r in rows) / decisions if decisions else 0.0
        for c in COSTS
    }
    agent_hours = sum(r.agents * r.virtual_s for r in rows) / 3600.0
    for c in COSTS:
        total = sum(getattr(r, c) for r in rows)
        out[f"{c}_per_agent_hour"] = total / agent_hours if agent_hours > 0 else 0.0
    out["agent_hours"] = agent_hours
    out["agents_faulty_share"] = sum(r.faulty_agents for r in rows) / sum(r.agents for r in rows)
    out["proofs_against_honest"] = float(sum(r.proofs_honest for r in rows))
    out["suspicions_against_honest"] = float(sum(r.suspicions_honest for r in rows))
    out["unconfirmed_against_honest"] = float(sum(r.unconfirmed_honest for r in rows))
    n_agents = sum(r.agents for r in rows)
    for what in ("hops", "statements", "evidence", "evidence_bytes"):
        out[f"stored_{what}_per_agent"] = sum(getattr(r, f"stored_{what}") for r in rows) / n_agents
    out["forgeries"] = float(sum(r.forgeries for r in rows))
    out["forgeries_rejected"] = float(sum(r.forgeries_rejected for r in rows))
    for fault in sorted({a.fault for a in agents} - {"honest", "liar"}):
        mine = [a for a in agents if a.fault == fault]
        asked = [a for a in mine if a.exercised > 0]
        out[f"exposed[{fault}]"] = sum(a.proven or a.confirmed for a in mine) / len(mine)
        out[f"proven[{fault}]"] = sum(a.proven for a in mine) / len(mine)
        if asked:
            out[f"exposed_when_exercised[{fault}]"] = sum(
                a.proven or a.confirmed for a in asked
            ) / len(asked)
            out[f"proven_when_exercised[{fault}]"] = sum(a.proven for a in asked) / len(asked)
            out[f"confirmed_when_exercised[{fault}]"] = sum(a.confirmed for a in asked) / len(asked)
        times = sorted(a.time_s for a in mine if a.time_s >= 0)
        if times:
            out[f"time_to_evidence_s[{fault}]"] = sum(times) / len(times)
            out[f"time_to_evidence_p50_s[{fault}]"] = _quantile(times, 0.5)
            out[f"time_to_evidence_p90_s[{fault}]"] = _quantile(times, 0.9)
    honest = [a for a in agents if a.fault == "honest"]
    cleared = [a.time_s for a in honest if a.time_s >= 0]
    if honest:
        out["suspicions_cleared_share"] = len(cleared) / len(honest)
    if cleared:
        out["time_to_clear_s"] = sum(cleared) / len(cleared)
    return out


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values (nearest rank)."""
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6g}"


def summarise(result: SimResult) -> list[tuple[int, str, float, float, int]]:
    """(N, quantity, mean, 95% half-width, seeds that have it), in N then quantity order."""
    by: dict[tuple[int, int], list[CellRow]] = {}
    for r in result.rows:
        by.setdefault((r.agents_total, r.seed), []).append(r)
    agents: dict[tuple[int, int], list[AgentRow]] = {}
    for a in result.agents:
        agents.setdefault((a.agents_total, a.seed), []).append(a)
    out: list[tuple[int, str, float, float, int]] = []
    for n in result.workload.agents:
        seeds = [
            _per_seed(by[(n, s)], agents.get((n, s), []))
            for s in result.workload.seeds
            if (n, s) in by
        ]
        names = sorted({k for d in seeds for k in d})
        for name in names:
            values = [d[name] for d in seeds if name in d]
            mean, half = confidence_interval(values)
            out.append((n, name, mean, half, len(values)))
    return out


def write_outputs(result: SimResult, out: Path, *, figures: bool = True) -> list[Path]:
    """Write the files into ``out`` (created); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    cells = out / "cells.csv"
    with cells.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow([f.name for f in fields(CellRow)])
        w.writerows(astuple(r) for r in result.rows)
    summary = summarise(result)
    summary_csv = out / "summary.csv"
    with summary_csv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["agents", "quantity", "mean", "ci95_half_width", "seeds"])
        for n, name, mean, half, k in summary:
            w.writerow([n, name, _fmt(mean), _fmt(half), k])
    growth = _growth(summary, result.workload.agents)
    spread = growth_intervals(result)
    growth_csv = out / "growth.csv"
    with growth_csv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["cost", "loglog_exponent", "ci95_half_width", "seeds", "agents"])
        for cost, slope in growth:
            _, half, k = spread[cost]
            w.writerow(
                [cost, _fmt(slope), _fmt(half), k, " ".join(str(n) for n in result.workload.agents)]
            )
    agents_csv = out / "agents.csv"
    with agents_csv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow([f.name for f in fields(AgentRow)])
        w.writerows(astuple(a) for a in result.agents)
    md = out / "summary.md"
    md.write_text(_markdown(result, summary, growth, spread), encoding="utf-8")
    written = [cells, summary_csv, growth_csv, agents_csv, md]
    if figures:
        from harness.simulate.figures import write_figures

        written += write_figures(summary, result.workload.agents, dict(growth), result.agents, out)
    return written


def _growth(
    summary: Sequence[tuple[int, str, float, float, int]], agents: Sequence[int]
) -> list[tuple[str, float]]:
    if len(set(agents)) < 2:
        return []
    means = {(n, q): m for n, q, m, _, _ in summary}
    return [
        (c, loglog_slope(agents, [means.get((n, f"{c}_per_decision"), 0.0) for n in agents]))
        for c in COSTS
    ]


def growth_intervals(result: SimResult) -> dict[str, tuple[float, float, int]]:
    """Per cost: (mean, 95% half-width, seeds) of the per-seed growth exponent — the
    log-log slope of each seed's cost per decision over the N it was played at
    (seeds played at fewer than two N give none). Each seed's cells are drawn
    independently, so the seeds' slopes are independent replicates of the exponent."""
    by: dict[tuple[int, int], list[CellRow]] = {}
    for r in result.rows:
        by.setdefault((r.agents_total, r.seed), []).append(r)
    sizes = sorted(set(result.workload.agents))
    slopes: dict[str, list[float]] = {c: [] for c in COSTS}
    for seed in result.workload.seeds:
        per_n = [(n, _per_seed(by[(n, seed)], [])) for n in sizes if (n, seed) in by]
        if len(per_n) < 2:
            continue
        for c in COSTS:
            key = f"{c}_per_decision"
            points = [(n, d[key]) for n, d in per_n if d.get(key, 0.0) > 0]
            if len(points) >= 2:
                slopes[c].append(loglog_slope([n for n, _ in points], [v for _, v in points]))
    out: dict[str, tuple[float, float, int]] = {}
    for c, values in slopes.items():
        mean, half = confidence_interval(values) if values else (math.nan, math.nan)
        out[c] = (mean, half, len(values))
    return out


def _markdown(
    result: SimResult,
    summary: Sequence[tuple[int, str, float, float, int]],
    growth: Sequence[tuple[str, float]],
    spread: dict[str, tuple[float, float, int]],
) -> str:
    w = result.workload
    rows = result.rows
    honest_proofs = sum(r.proofs_honest for r in rows)
    forged = sum(r.forgeries for r in rows)
    rejected = sum(r.forgeries_rejected for r in rows)
    lines = [
        "# Simulation summary",
        "",
        f"- agents (N): {', '.join(str(n) for n in w.agents)}; seeds: {len(w.seeds)};"
        f" cells: {len(rows)}; delegated decisions: {sum(r.decisions for r in rows)}",
        f"- adversary fraction f = {w.fraction:g} (faults: {', '.join(f.value for f in w.faults)})",
        f"- network: RTT log-normal, median {w.link.rtt_median_ms:g} ms, sigma"
        f" {w.link.rtt_sigma:g}; loss {w.link.loss:g}; think time {w.link.think_s:g} s",
        f"- churn: Pareto up scale {w.churn.up_scale_s:g} s, down scale {w.churn.down_scale_s:g} s,"
        f" alpha {w.churn.alpha:g}; departures {w.churn.departure_rate_per_h:g}/h",
        "",
        "## Accuracy",
        "",
        f"Proofs against faithful nodes, all runs: **{honest_proofs}** (must be 0).",
        "Witness-confirmed suspicions against faithful nodes:"
        f" {sum(r.suspicions_honest for r in rows)};"
        f" unconfirmed unanswered rehydrations of faithful origins: "
        f"{sum(r.unconfirmed_honest for r in rows)}.",
        f"Records the liars filed: {forged}, of which a verifier rejected {rejected};"
        f" accepted: {forged - rejected} (each counted above, as a proof or a suspicion"
        " against a faithful node).",
        "",
        "## Per N (mean over seeds, ± 95% CI half-width)",
        "",
        "| N | quantity | mean | ± 95% | seeds |",
        "|---:|---|---:|---:|---:|",
    ]
    lines += [f"| {n} | {q} | {_fmt(m)} | {_fmt(h)} | {k} |" for n, q, m, h, k in summary]
    if growth:
        lines += [
            "",
            "## Growth with N",
            "",
            "Slope of log(cost per decision) on log N (through the means over seeds);"
            " 0 means no growth. ± 95%: Student's t over the seeds' own slopes.",
            "",
            "| cost | exponent | ± 95% | seeds |",
            "|---|---:|---:|---:|",
            *(f"| {c} | {_fmt(s)} | {_fmt(spread[c][1])} | {spread[c][2]} |" for c, s in growth),
        ]
    lines += [
        "",
        "*exposed[f]*: share of cells whose faulty origin (fault f) was named by any evidence;"
        " *proven[f]*: by a proof; *time_to_evidence_s*: virtual seconds from the cell's start"
        " to the step of the first record naming it. See docs/simulate.md.",
        "",
    ]
    return "\n".join(lines)
