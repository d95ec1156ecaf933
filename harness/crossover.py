"""The crossover sweep's analysis: C* per penalty and the fitted exponent (spec §8).

For each penalty, C* is the cadence at which structural_min's
reconstruction-class blind flip rate minus prose's first changes sign from
> 0 to ≤ 0, interpolated linearly in log10(cadence); cycles* = steps / C*;
the exponent is the least-squares slope of ln(cycles*) on ln(p) (Part 5:
≈ −1.6 on the default grid — steeper than the 1/p of the death cycle,
because prose noise also compounds with the cycle count).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness._results import AnalysisError, closed_form_death_cycle, read_or_check
from harness._results import flip as _flip

__all__ = ["Crossover", "SweepFindings", "SweepPoint", "analyze_sweep", "crossover_cadence"]


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """Blind flip rates (%) at one (penalty, cadence)."""

    penalty: float
    cadence: int
    min_reconstruction: float
    prose_reconstruction: float
    perhop_reconstruction: float
    min_blocklist: float
    prose_blocklist: float
    min_all: float
    prose_all: float


@dataclass(frozen=True, slots=True)
class Crossover:
    """C* where structural_min's reconstruction flip rate drops to prose's."""

    penalty: float
    cadence: float | None
    cycles: float | None
    closed_form_death_cycle: float


@dataclass(frozen=True, slots=True)
class SweepFindings:
    steps: int
    points: tuple[SweepPoint, ...]
    crossovers: tuple[Crossover, ...]
    #: first sign change (either direction) of structural_min − prose on
    #: blocklist gates at the first penalty (blocklist flips do not depend on p)
    blocklist_crossover: float | None
    blocklist_crossover_direction: str | None
    #: penalties at which prose's pooled (all-gate) flip rate exceeds
    #: structural_min's at every cadence of the grid
    pooled_prose_behind_everywhere: tuple[float, ...]
    exponent: float | None
    n_runs: int

    def lines(self) -> list[str]:
        out = []
        for c in self.crossovers:
            cs = "none on grid" if c.cadence is None else f"C*={c.cadence:.1f}"
            cy = "" if c.cycles is None else f", cycles*={c.cycles:.1f}"
            out.append(f"p={c.penalty:g}: {cs}{cy}")
        if self.blocklist_crossover is not None:
            out.append(
                f"blocklist sign change: C≈{self.blocklist_crossover:.1f} "
                f"({self.blocklist_crossover_direction})"
            )
        if self.exponent is not None:
            out.append(f"fitted exponent: cycles* ∝ p^{self.exponent:.2f}")
        return out


def crossover_cadence(
    cadences: list[int], diff: list[float], *, either_direction: bool = False
) -> float | None:
    """First sign change of ``diff`` from > 0 to ≤ 0, interpolated in log10(cadence).

    With ``either_direction`` a change from ≤ 0 to > 0 also counts.
    """
    for i in range(1, len(cadences)):
        d0, d1 = diff[i - 1], diff[i]
        down = d0 > 0.0 and d1 <= 0.0
        up = either_direction and d0 <= 0.0 and d1 > 0.0
        if down or up:
            x0, x1 = math.log10(cadences[i - 1]), math.log10(cadences[i])
            x = x0 + (x1 - x0) * d0 / (d0 - d1)
            return float(10.0**x)
    return None


def analyze_sweep(out: Path, *, loaded: Mapping[str, Any] | None = None) -> SweepFindings:
    """Crossover C* per penalty, cycles* = steps / C*, and the fitted exponent.

    ``loaded``: frames already read from files in ``out``, by file name.
    """
    from harness.metrics import SWEEP_COLUMNS

    df = read_or_check(out, "sweep_metrics.csv", SWEEP_COLUMNS, loaded)
    steps = 500
    # sweep_meta.json (the lab's and provnet's) carries `steps`; older provnet
    # sweep folders have run_meta.json with config.steps
    meta_path = out / "sweep_meta.json"
    if not meta_path.exists():
        meta_path = out / "run_meta.json"
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            steps = int(meta["steps"] if "steps" in meta else meta["config"]["steps"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AnalysisError(f"{meta_path}: malformed ({exc})") from exc
    blind = df[df["mode"] == "blind"]
    n_runs = int(blind[["penalty", "cadence", "seed"]].drop_duplicates().shape[0])
    agg = (
        blind.groupby(["penalty", "cadence", "arm", "gate_class"])[["n", "n_agree"]]
        .sum()
        .reset_index()
    )
    pooled = blind.groupby(["penalty", "cadence", "arm"])[["n", "n_agree"]].sum().reset_index()

    def rate(frame: Any, **sel: object) -> float:
        f = frame
        for k, v in sel.items():
            f = f[f[k] == v]
        return _flip(f)

    points = []
    crossovers = []
    penalties = sorted(float(p) for p in blind["penalty"].unique())
    cadences = sorted(int(c) for c in blind["cadence"].unique())
    block_cross: float | None = None
    block_dir: str | None = None
    behind: list[float] = []
    for p in penalties:
        a = agg[agg["penalty"] == p]
        pa = pooled[pooled["penalty"] == p]
        diffs = []
        block_diffs = []
        for c in cadences:
            ac = a[a["cadence"] == c]
            pt = SweepPoint(
                p,
                c,
                rate(ac, arm="structural_min", gate_class="reconstruction"),
                rate(ac, arm="prose", gate_class="reconstruction"),
                rate(ac, arm="structural_perhop", gate_class="reconstruction"),
                rate(ac, arm="structural_min", gate_class="lineage_blocklist"),
                rate(ac, arm="prose", gate_class="lineage_blocklist"),
                rate(pa[pa["cadence"] == c], arm="structural_min"),
                rate(pa[pa["cadence"] == c], arm="prose"),
            )
            points.append(pt)
            diffs.append(pt.min_reconstruction - pt.prose_reconstruction)
            block_diffs.append(pt.min_blocklist - pt.prose_blocklist)
        c_star = crossover_cadence(cadences, diffs)
        crossovers.append(
            Crossover(
                p, c_star, steps / c_star if c_star else None, closed_form_death_cycle(0.5, p)
            )
        )
        if p == penalties[0]:
            block_cross = crossover_cadence(cadences, block_diffs, either_direction=True)
            if block_cross is not None:
                i = next(k for k in range(1, len(cadences)) if cadences[k] > block_cross)
                block_dir = (
                    "structural_min rises above prose"
                    if block_diffs[i] > 0.0
                    else "structural_min falls below prose"
                )
        pts = [pt for pt in points if pt.penalty == p]
        if all(pt.prose_all > pt.min_all for pt in pts):
            behind.append(p)
    fit = [
        (math.log(c.penalty), math.log(c.cycles)) for c in crossovers if c.cycles and c.penalty > 0
    ]
    exponent: float | None = None
    if len(fit) >= 2:
        xs = [x for x, _ in fit]
        ys = [y for _, y in fit]
        mx = sum(xs) / len(xs)
        my = sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        exponent = sum((x - mx) * (y - my) for x, y in fit) / sxx if sxx else None
    return SweepFindings(
        steps,
        tuple(points),
        tuple(crossovers),
        block_cross,
        block_dir,
        tuple(behind),
        exponent,
        n_runs,
    )
