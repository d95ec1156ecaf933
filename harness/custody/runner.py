"""Plan and play a custody sweep: cells, trial counts, progress, results files."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from harness.custody.settings import CellResult, CustodySettings
from harness.custody.stats import trials_for

__all__ = ["CustodyOutcome", "plan_cells", "run_custody"]


@dataclass(frozen=True, slots=True)
class CustodyOutcome:
    cells: list[CellResult]
    wall_seconds: float


def plan_cells(settings: CustodySettings) -> list[tuple[CellResult, int]]:
    """Every (departures, k, p) cell with its trial count: ``settings.trials``, or
    (0) planned from the cell's closed form (:func:`harness.custody.stats.trials_for`)."""
    cells: list[tuple[CellResult, int]] = []
    for mode in settings.departures:
        for k in settings.ks:
            for p in settings.ps:
                expected = settings.expected(mode, k, p)
                n = settings.trials or trials_for(expected)
                cells.append((CellResult(mode, k, p, expected), n))
    return cells


def run_custody(
    settings: CustodySettings,
    *,
    progress: bool | None = None,
    node_dir: Path | None = None,
) -> CustodyOutcome:
    """Play every planned cell on in-process nodes; progress on stderr (one tick per trial)."""
    from tqdm import tqdm

    from harness.custody.trials import run_cells
    from harness.runner import progress_disabled

    settings.validate()
    plan = plan_cells(settings)
    total = sum(n for _, n in plan)
    started = time.perf_counter()
    bar = tqdm(
        total=total,
        desc="custody trials",
        unit="trial",
        disable=progress_disabled(progress),
        leave=False,
    )
    try:
        asyncio.run(run_cells(settings, plan, tick=bar.update, node_dir=node_dir))
    finally:
        bar.close()
    return CustodyOutcome([c for c, _ in plan], time.perf_counter() - started)
