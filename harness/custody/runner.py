"""Plan and play a custody sweep: cells, trial counts, progress, results files."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.custody.settings import CellResult, CustodySettings
from harness.custody.stats import trials_for

__all__ = ["CustodyOutcome", "growing_tick", "plan_cells", "run_custody"]


@dataclass(frozen=True, slots=True)
class CustodyOutcome:
    cells: list[CellResult]
    wall_seconds: float
    #: the split-view rows (:mod:`harness.custody.split_view`), when played
    split_view: list[Any] = field(default_factory=list)
    #: the death-spiral rows (:mod:`harness.custody.death_spiral`), when played
    death_spiral: list[Any] = field(default_factory=list)


def plan_cells(settings: CustodySettings) -> list[tuple[CellResult, int]]:
    """Every (departures, k, p) cell with its trial count: ``settings.trials``, or
    (0) planned from the cell's closed form (:func:`harness.custody.stats.trials_for`);
    planned cells are topped up as they play (:meth:`TrialPool.play_to_goal`)."""
    cells: list[tuple[CellResult, int]] = []
    for mode in settings.departures:
        for k in settings.ks:
            for p in settings.ps:
                expected = settings.expected(mode, k, p)
                n = settings.trials or trials_for(expected)
                cells.append((CellResult(mode, k, p, expected), n))
    return cells


def growing_tick(bar: Any) -> Callable[[int], None]:
    """A progress tick whose bar's total grows when a cell is topped up past its plan."""

    def tick(n: int) -> None:
        if bar.total is not None and bar.n + n > bar.total:
            bar.total = bar.n + n
            bar.refresh()
        bar.update(n)

    return tick


def run_custody(
    settings: CustodySettings,
    *,
    progress: bool | None = None,
    node_dir: Path | None = None,
    rows: bool = True,
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
        asyncio.run(run_cells(settings, plan, tick=growing_tick(bar), node_dir=node_dir))
    finally:
        bar.close()
    split = play_split_view(node_dir) if rows else []
    death = play_death_spiral_rows(node_dir) if rows else []
    return CustodyOutcome([c for c, _ in plan], time.perf_counter() - started, split, death)


def play_death_spiral_rows(node_dir: Path | None = None) -> list[Any]:
    """The death-spiral rows at k = 0 and 1 (:mod:`harness.custody.death_spiral`)."""
    from harness.boundary.runner import _scratch_root
    from harness.custody.death_spiral import play_death_spiral

    root = node_dir if node_dir is not None else _scratch_root()
    return asyncio.run(play_death_spiral((0, 1), root=Path(root) if root else None))


def play_split_view(node_dir: Path | None = None) -> list[Any]:
    """The split-view rows (n, q, f) of :data:`harness.custody.split_view.DEFAULT_ROWS`,
    each on its own in-process nodes (removed after)."""
    from harness.boundary.runner import _scratch_root
    from harness.custody.split_view import run_rows

    root = str(node_dir) if node_dir is not None else _scratch_root()
    with tempfile.TemporaryDirectory(prefix="provnet-split-view-", dir=root) as tmp:
        return asyncio.run(run_rows(root=Path(tmp)))
