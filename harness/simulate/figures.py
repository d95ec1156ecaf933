"""The simulation's figures, drawn with matplotlib's Agg backend (as :mod:`harness.figures`).

* ``cost_vs_n.png`` — each cost per delegated decision against N, log-log,
  mean over seeds with its 95% interval, and the least-squares line whose
  slope is the growth exponent of ``growth.csv`` (one panel per cost);
* ``completeness.png`` — per fault class, the share of its agents a
  rehydration could expose (begun while it was up) that were named by a
  proof, and by any record (a proof or a witness-confirmed suspicion): mean
  over seeds at each N, 95% interval;
* ``time_to_evidence_cdf.png`` — per fault class, the empirical CDF of the
  virtual seconds to the first record naming the agent (for ``departed``,
  from its departure), and the time to clear of suspicions of faithful agents.

This module draws; every number comes from :func:`harness.simulate.report.summarise`
and the agent rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from harness.figures import _pyplot, _save
from harness.simulate.run import AgentRow

__all__ = ["write_figures"]

Summary = Sequence[tuple[int, str, float, float, int]]

_COSTS = ("rpcs", "bytes", "sign_ops", "verify_ops")


def _get(summary: Summary, n: int, q: str) -> tuple[float, float] | None:
    for sn, sq, m, h, _ in summary:
        if sn == n and sq == q:
            return m, h
    return None


def _cost_vs_n(
    summary: Summary, agents: Sequence[int], growth: dict[str, float], path: Path
) -> Path:
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:.3g}")

    fig, axes = plt.subplots(1, len(_COSTS), figsize=(3.6 * len(_COSTS), 3.0), layout="constrained")
    ns = sorted(set(agents))
    for ax, cost in zip(axes, _COSTS, strict=True):
        pts = [(n, _get(summary, n, f"{cost}_per_decision")) for n in ns]
        xs = [n for n, v in pts if v is not None and v[0] > 0]
        ys = [v[0] for _, v in pts if v is not None and v[0] > 0]
        es = [0.0 if math.isnan(v[1]) else v[1] for _, v in pts if v is not None and v[0] > 0]
        ax.errorbar(xs, ys, yerr=es, fmt="o", capsize=3, color="#2471a3")
        slope = growth.get(cost, math.nan)
        if len(xs) >= 2 and not math.isnan(slope):
            lx = [math.log(x) for x in xs]
            ly = [math.log(y) for y in ys]
            b = sum(ly) / len(ly) - slope * sum(lx) / len(lx)
            ax.plot(xs, [math.exp(b) * x**slope for x in xs], "--", color="#c0392b",
                    label=f"exponent {slope:.3f}")  # fmt: skip
            ax.legend(loc="best", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)  # costs span less than a decade: plain numbers
        ax.yaxis.set_minor_formatter(plain)
        ax.set_xlabel("agents N")
        ax.set_title(f"{cost} per decision")
    return _save(fig, path)


def _completeness(summary: Summary, agents: Sequence[int], path: Path) -> Path:
    plt = _pyplot()
    classes = sorted(
        {q[len("exposed[") : -1] for _, q, _, _, _ in summary if q.startswith("exposed[")}
    )
    ns = sorted(set(agents))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(classes) * len(ns)), 3.2))
    width = 0.8 / max(1, 2 * len(ns))
    for j, n in enumerate(ns):
        pairs = (("proven_when_exercised", "#c0392b"), ("exposed_when_exercised", "#2471a3"))
        for k, (what, color) in enumerate(pairs):
            xs, ys, es = [], [], []
            for i, c in enumerate(classes):
                v = _get(summary, n, f"{what}[{c}]")
                if v is None:
                    continue
                xs.append(i + (2 * j + k - len(ns) + 0.5) * width)
                ys.append(100.0 * v[0])
                es.append(0.0 if math.isnan(v[1]) else 100.0 * v[1])
            label = f"{'proof' if what.startswith('proven') else 'any record'}, N={n}"
            alpha = 0.4 + 0.6 * (j + 1) / len(ns)
            ax.bar(xs, ys, width, yerr=es, capsize=2, color=color, alpha=alpha, label=label)
    ax.set_xticks(range(len(classes)), classes)
    ax.set_ylim(0, 105)
    ax.set_ylabel("agents named (%)")
    ax.set_title("completeness per fault class (agents a rehydration could expose)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def _cdf(rows: Sequence[AgentRow], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    for c in sorted({a.fault for a in rows}):
        times = sorted(a.time_s for a in rows if a.fault == c and a.time_s >= 0)
        total = sum(a.fault == c for a in rows)
        if not times:
            continue
        label = "time to clear (faithful)" if c == "honest" else c
        ax.step(times, [(i + 1) / total for i in range(len(times))], where="post", label=label)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("virtual seconds to the first record naming the agent")
    ax.set_ylabel("share of the class's agents")
    ax.set_ylim(0, 1.02)
    ax.set_title("time to evidence")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def write_figures(
    summary: Summary,
    agents: Sequence[int],
    growth: dict[str, float],
    rows: Sequence[AgentRow],
    out: Path,
) -> list[Path]:
    """Draw the three figures into ``out``; returns their paths."""
    return [
        _cost_vs_n(summary, agents, growth, out / "cost_vs_n.png"),
        _completeness(summary, agents, out / "completeness.png"),
        _cdf(rows, out / "time_to_evidence_cdf.png"),
    ]
