"""The report's figures (Part 5), drawn with matplotlib's Agg backend.

Four PNGs, each answering one question of the write-up:

* ``recon_decay.png`` — the death spiral: structural_min's store-level
  reconstruction decays geometrically per compaction and crosses the gate
  thresholds (0.50 archive, 0.55 publish); perhop fidelity stays at
  ``1 − p``; the prose arm's reconstruction is channel noise. The death cycle
  is marked.
* ``agreement_by_class.png`` — blind agreement with the oracle per gate
  class and arm (main matrix, or the trace replay: the title names which),
  plus degrade/rehydrate on the lineage classes; bars from 0 %.
* ``false_proceed_vs_cadence.png`` — false-proceed rate against compaction
  cadence, one panel per degradation profile (all gates solid, irreversible
  gates dashed).
* ``crossover.png`` — structural_min minus prose reconstruction-class flip
  rate against cadence per penalty (the crossover is where it reaches 0;
  a penalty whose crossover lies off the cadence grid is marked at the
  grid's edge), and the crossover cycle count against the penalty with the
  fitted power law.

Every function takes the data frames read from the result CSVs and the
numbers :mod:`harness.analysis` derived (death cycle, crossover, exponent) —
this module draws, it does not decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "ARM_COLORS",
    "ARM_LABELS",
    "CLASS_ORDER",
    "agreement_figure",
    "censored_side",
    "crossover_figure",
    "plot_agreement_by_class",
    "plot_crossover",
    "plot_false_proceed_vs_cadence",
    "plot_recon_decay",
]

ARM_ORDER = ("structural_min", "structural_perhop", "prose")
ARM_COLORS: dict[str, str] = {
    "structural_min": "#c0392b",
    "structural_perhop": "#2471a3",
    "prose": "#229954",
    "ground_truth": "#222222",
}
ARM_LABELS: dict[str, str] = {
    "structural_min": "structural_min",
    "structural_perhop": "structural_perhop",
    "prose": "prose (mock channel)",
    "ground_truth": "ground truth",
}
CLASS_ORDER = ("score", "reconstruction", "lineage_blocklist", "lineage_allowlist")
_DPI = 130


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    )
    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No "Software" chunk: the PNG bytes depend on the data, not on the matplotlib build.
    fig.savefig(path, dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return path


def _flip_rate(frame: pd.DataFrame) -> float:
    n = float(frame["n"].sum())
    return float((frame["n"] - frame["n_agree"]).sum()) / n * 100.0 if n else math.nan


def plot_recon_decay(
    recon: pd.DataFrame,
    path: Path,
    *,
    death_cycle: int | None,
    thresholds: Mapping[float, int | None] | None = None,
    penalty: float | None = None,
) -> Path:
    """Death-spiral run: reconstruction per compaction cycle for the three arms.

    ``thresholds`` maps each gate threshold θ to the first cycle at which
    structural_min sits below it (empirical), or ``None``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    if "cycle" not in recon.columns:  # a lab folder: cycle = step // cadence
        recon = recon.assign(cycle=recon["step"] // recon["cadence"])
    by_cycle = recon.groupby("cycle", sort=True).last()
    cycles = by_cycle.index.to_numpy()
    last_cycle = int(cycles.max()) if len(cycles) else 1
    ax.plot(
        recon["cycle"],
        recon["recon_prose"],
        color=ARM_COLORS["prose"],
        lw=0.6,
        alpha=0.45,
        label="prose: reconstruction read back from the channel",
    )
    ax.plot(
        cycles,
        by_cycle["recon_min"],
        color=ARM_COLORS["structural_min"],
        lw=2.2,
        label="structural_min: store reconstruction (min-folded)",
    )
    ax.plot(
        cycles,
        by_cycle["fidelity_perhop"],
        color=ARM_COLORS["structural_perhop"],
        lw=2.2,
        label="structural_perhop: fidelity = 1 − worst single penalty",
    )
    names = {0.50: "archive_all_axes_floor", 0.55: "publish_discounted_thresholds"}
    marks = dict(thresholds) if thresholds is not None else {0.50: None, 0.55: None}
    for theta, crossed in sorted(marks.items()):
        ax.axhline(theta, color="#555555", ls="--" if theta < 0.525 else ":", lw=1.1)
        gate = names.get(round(theta, 2))
        text = f"θ = {theta:.2f}" + (f" ({gate})" if gate else "")
        if crossed is not None:
            text += f", crossed at cycle {crossed}"
            ax.plot([crossed], [theta], "o", color=ARM_COLORS["structural_min"], ms=5)
        ax.annotate(
            text,
            xy=(last_cycle, theta),
            xytext=(-4, 3 if theta > 0.525 else -11),
            textcoords="offset points",
            ha="right",
            fontsize=8.5,
            color="#444444",
        )
    if death_cycle is not None:
        ax.axvline(death_cycle, color=ARM_COLORS["structural_min"], ls="-.", lw=1.2)
        ax.annotate(
            f"death cycle {death_cycle}: from here on structural_min\n"
            "blocks every oracle-allowed reconstruction-coupled decision",
            xy=(death_cycle, 0.5),
            xytext=(14, 70),
            textcoords="offset points",
            fontsize=9,
            arrowprops={"arrowstyle": "->", "color": "#555555"},
        )
    title = "Reconstruction decay in the death-spiral run"
    if len(recon):
        cadence = int(recon["cadence"].iloc[0])
        detail = f"C = {cadence}" + (f", penalty {penalty:g} per compaction" if penalty else "")
        title += f" ({detail})"
    ax.set_title(title)
    ax.set_xlabel("compaction cycle (step // C)")
    ax.set_ylabel("reconstruction scalar the gates read")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlim(0, max(1, last_cycle))
    ax.legend(loc="lower left", fontsize=8.5, framealpha=0.95)
    return _save(fig, path)


def plot_agreement_by_class(
    gates: pd.DataFrame, path: Path, *, source: str = "main matrix"
) -> Path:
    """``agreement_by_class.png``; ``source`` names the runs in the title."""
    return _save(agreement_figure(gates, source=source), path)


def agreement_figure(gates: pd.DataFrame, *, source: str = "main matrix") -> Any:
    """Left: blind agreement per gate class and arm. Right: lineage gates per mode.

    Bars start at 0 % (a bar's length is its agreement), each bar carries its
    value, and the legends sit above the panels, never over a bar.
    """
    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(
        1, 2, figsize=(12.5, 5.2), gridspec_kw={"width_ratios": [3, 2]}, sharey=True
    )
    width = 0.27
    for ci, cls in enumerate(CLASS_ORDER):
        for ai, arm in enumerate(ARM_ORDER):
            sel = gates[
                (gates["gate_class"] == cls) & (gates["arm"] == arm) & (gates["mode"] == "blind")
            ]
            if not len(sel):
                continue
            x = ci + (ai - 1) * width
            agree = 100.0 - _flip_rate(sel)
            ax.bar(
                x,
                agree,
                width * 0.92,
                color=ARM_COLORS[arm],
                label=ARM_LABELS[arm] if ci == 0 else None,
            )
            ax.text(x, agree + 0.8, f"{agree:.1f}", ha="center", va="bottom", fontsize=7.5)
    ax.set_xticks(range(len(CLASS_ORDER)))
    ax.set_xticklabels([c.replace("_", " ") for c in CLASS_ORDER])
    ax.set_ylabel("agreement with the oracle (%)")
    ax.set_ylim(0, 108)
    ax.set_axisbelow(True)
    ax2.set_axisbelow(True)
    ax.set_title("Blind mode, by gate class and arm", pad=26)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8.5, frameon=False)

    modes = ("blind", "degrade", "rehydrate")
    mode_colors = {"blind": "#7f8c8d", "degrade": "#e67e22", "rehydrate": "#16a085"}
    structural = gates[gates["arm"].isin(("structural_min", "structural_perhop"))]
    lineage = [c for c in CLASS_ORDER if c.startswith("lineage")]
    for ci, cls in enumerate(lineage):
        for mi, mode in enumerate(modes):
            sel = structural[(structural["gate_class"] == cls) & (structural["mode"] == mode)]
            if not len(sel):
                continue
            x = ci + (mi - 1) * width
            agree = 100.0 - _flip_rate(sel)
            ax2.bar(
                x, agree, width * 0.92, color=mode_colors[mode], label=mode if ci == 0 else None
            )
            ax2.text(x, agree + 0.8, f"{agree:.1f}", ha="center", va="bottom", fontsize=7.5)
    ax2.set_xticks(range(len(lineage)))
    ax2.set_xticklabels([c.replace("_", " ") for c in lineage])
    ax2.set_title("Lineage gates, both structural arms, by mode", pad=26)
    ax2.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8.5, frameon=False)
    fig.suptitle(f"Agreement with the uncompacted oracle ({source})")
    fig.tight_layout()
    return fig


def plot_false_proceed_vs_cadence(gates: pd.DataFrame, path: Path) -> Path:
    """False-proceed rate against cadence, one panel per profile, blind mode."""
    plt = _pyplot()
    blind = gates[gates["mode"] == "blind"]
    profiles = [p for p in ("low", "med", "high") if p in set(blind["profile"])]
    profiles += sorted(set(blind["profile"]) - set(profiles))
    fig, axes = plt.subplots(
        1, max(1, len(profiles)), figsize=(4.2 * max(1, len(profiles)), 4.2), sharey=True
    )
    axes_list = list(axes) if len(profiles) > 1 else [axes]
    for ax, profile in zip(axes_list, profiles, strict=False):
        sel = blind[blind["profile"] == profile]
        cadences = sorted(set(sel["cadence"]))
        for arm in ARM_ORDER:
            arm_sel = sel[sel["arm"] == arm]
            for irreversible_only, style in ((False, "-"), (True, "--")):
                rows = arm_sel[arm_sel["irreversible"]] if irreversible_only else arm_sel
                scope = "irreversible gates" if irreversible_only else "all gates"
                rates = []
                for c in cadences:
                    at = rows[rows["cadence"] == c]
                    n = float(at["n"].sum())
                    rates.append(float(at["n_false_proceed"].sum()) / n * 100.0 if n else math.nan)
                under = arm == "structural_min"
                ax.plot(
                    cadences,
                    rates,
                    style,
                    marker="o",
                    ms=7 if under else 4,
                    lw=4.5 if under else 1.6,
                    alpha=0.45 if under else 1.0,
                    zorder=1 if under else 2,
                    color=ARM_COLORS[arm],
                    label=f"{ARM_LABELS[arm]}, {scope}",
                )
        ax.set_title(f"profile {profile}")
        ax.set_xlabel("compaction cadence C (steps)")
        ax.set_xticks(cadences)
    axes_list[0].set_ylabel("false-proceed rate (%), blind")
    handles, labels = axes_list[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=3, fontsize=8.5, bbox_to_anchor=(0.5, -0.15)
    )
    fig.suptitle("False-proceed (arm proceeds, oracle blocks) against compaction cadence")
    fig.text(
        0.5,
        -0.2,
        "structural_min and structural_perhop coincide here: their only difference, the "
        "reconstruction scalar, fails by false-stop, never by false-proceed.",
        ha="center",
        fontsize=8.5,
        color="#444444",
    )
    return _save(fig, path)


def plot_crossover(
    sweep: pd.DataFrame,
    path: Path,
    *,
    crossover: Mapping[float, float | None],
    exponent: float | None,
    steps: int,
) -> Path:
    """``crossover.png`` (see :func:`crossover_figure`)."""
    return _save(crossover_figure(sweep, crossover=crossover, exponent=exponent, steps=steps), path)


def censored_side(gap: list[float]) -> str | None:
    """Where a crossover missing from the grid lies: ``"above"`` the largest cadence
    when structural_min is still worse there (every gap > 0), ``"below"`` the
    smallest when it is no worse already at the smallest (first gap ≤ 0); None
    when the gap has no such reading (no finite value)."""
    finite = [g for g in gap if not math.isnan(g)]
    if not finite:
        return None
    if all(g > 0.0 for g in finite):
        return "above"
    if finite[0] <= 0.0:
        return "below"
    return None


def crossover_figure(
    sweep: pd.DataFrame,
    *,
    crossover: Mapping[float, float | None],
    exponent: float | None,
    steps: int,
) -> Any:
    """Reconstruction-class flip gap (structural_min − prose) per penalty, and cycles* vs p.

    A penalty whose gap does not cross 0 inside the cadence grid is censored at
    the grid's edge: marked there with a triangle pointing off the grid (C* above
    the largest or below the smallest cadence), and named on the right panel,
    which can only plot the crossovers found.
    """
    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    recon = sweep[(sweep["gate_class"] == "reconstruction") & (sweep["mode"] == "blind")]
    penalties = sorted(set(recon["penalty"]))
    cmap = plt.get_cmap("viridis")
    censored: list[tuple[float, str, int]] = []
    for i, p in enumerate(penalties):
        color = cmap(i / max(1, len(penalties) - 1) * 0.9)
        sel = recon[recon["penalty"] == p]
        cadences = sorted(set(sel["cadence"]))
        gap = []
        for c in cadences:
            at = sel[sel["cadence"] == c]
            gap.append(
                _flip_rate(at[at["arm"] == "structural_min"]) - _flip_rate(at[at["arm"] == "prose"])
            )
        ax.plot(cadences, gap, marker="o", ms=3.5, color=color, label=f"p = {p:g}")
        c_star = crossover.get(p)
        if c_star is not None:
            ax.plot([c_star], [0.0], marker="x", ms=9, mew=2, color=color)
            continue
        side = censored_side(gap)
        if side is not None:
            edge = int(cadences[-1] if side == "above" else cadences[0])
            censored.append((p, side, edge))
            ax.plot(
                [edge],
                [0.0],
                marker=">" if side == "above" else "<",
                ms=10,
                color=color,
                markeredgecolor="black",
                linestyle="none",
                label=f"p = {p:g}: C* {'>' if side == 'above' else '<'} {edge} (off the grid)",
            )
    ax.axhline(0.0, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("compaction cadence C (steps, log scale)")
    ax.set_ylabel("flip rate: structural_min − prose (pp)")
    ax.set_title("Reconstruction-coupled gates: above 0, min-folding is worse than prose")
    ax.legend(title="penalty per compaction (x: crossover C*)", fontsize=8.5)

    points = [(p, steps / c) for p, c in sorted(crossover.items()) if c is not None and c > 0]
    if points:
        ps = [p for p, _ in points]
        cycles = [y for _, y in points]
        ax2.plot(ps, cycles, "o", color="#333333", label="crossover cycles* = steps / C*")
        if exponent is not None and len(points) >= 2:
            # Draw the least-squares line through the points in log-log space.
            lx = [math.log(p) for p in ps]
            ly = [math.log(y) for y in cycles]
            intercept = sum(ly) / len(ly) - exponent * sum(lx) / len(lx)
            grid = [min(ps) * (max(ps) / min(ps)) ** (k / 50) for k in range(51)]
            ax2.plot(
                grid,
                [math.exp(intercept) * g**exponent for g in grid],
                "-",
                color="#c0392b",
                label=f"fit: cycles* ∝ $p^{{{exponent:.2f}}}$",
            )
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.legend(fontsize=8.5)
    else:
        ax2.text(0.5, 0.5, "no crossover on this grid", ha="center", transform=ax2.transAxes)
    if censored:
        ax2.text(
            0.02,
            0.02,
            "off the grid, not plotted: "
            + "; ".join(
                f"p = {p:g} (C* {'>' if side == 'above' else '<'} {edge})"
                for p, side, edge in censored
            ),
            transform=ax2.transAxes,
            fontsize=8,
            color="#444444",
            wrap=True,
        )
    ax2.set_xlabel("penalty p per compaction (log)")
    ax2.set_ylabel("compaction cycles at the crossover (log)")
    ax2.set_title("Crossover cycle count against the penalty")
    fig.tight_layout()
    return fig
