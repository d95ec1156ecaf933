"""Boundary slices played on virtual time: the real node core, nothing re-implemented.

One *cell* is one slice of the boundary experiment
(:func:`harness.boundary.runner.run_boundary_async`): its origins, relays,
holder and witness are :class:`nodes.services.NodeCore` instances over the
in-memory transport, with scratch stores, the holder a
:class:`nodes.client.Holder`, the values and gates the experiment's. What
the engine adds is only *where time comes from* — every node and the holder
read :meth:`harness.simulate.clock.VirtualTimeLoop.wall` through a
:class:`harness.boundary.topology.RunClock` — and, optionally, a network
model wrapped around each node's outgoing transport
(:mod:`harness.simulate.network`). Many cells run concurrently on one loop,
so N agents are the nodes of all cells together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from harness.boundary.records import BoundaryOutcome, BoundarySettings
from harness.boundary.runner import run_boundary_async
from harness.boundary.topology import Network, RunClock
from harness.config import ExperimentConfig
from harness.simulate.clock import VirtualTimeLoop, run_virtual

__all__ = ["CellResult", "play_cells", "play_slice"]


@dataclass(frozen=True, slots=True)
class CellResult:
    """One cell's outcome and the virtual seconds it took."""

    index: int
    outcome: BoundaryOutcome
    virtual_seconds: float


def _clock(loop: VirtualTimeLoop) -> RunClock:
    return RunClock(wall=loop.wall)


async def _play_cell(
    loop: VirtualTimeLoop,
    cfg: ExperimentConfig,
    index: int,
    settings: BoundarySettings,
    network: Network | None,
    on_decision: object,
) -> CellResult:
    start = loop.time()
    outcome = await run_boundary_async(
        cfg,
        settings,
        progress=False,
        on_decision=on_decision if callable(on_decision) else None,
        clock=_clock(loop),
        network=network,
    )
    return CellResult(index, outcome, loop.time() - start)


def play_cells(
    cfg: ExperimentConfig,
    cells: Sequence[tuple[BoundarySettings, Network | None]],
    *,
    on_decision: object = None,
    concurrency: int = 0,
) -> tuple[list[CellResult], float]:
    """Play every cell on one virtual-time loop; results in cell order and the
    virtual seconds the whole simulation took. ``concurrency`` > 0 bounds how
    many cells are alive at once (memory); the order of results never depends
    on it."""

    async def main(loop: VirtualTimeLoop) -> tuple[list[CellResult], float]:
        gate = asyncio.Semaphore(concurrency if concurrency > 0 else max(1, len(cells)))

        async def one(i: int, settings: BoundarySettings, net: Network | None) -> CellResult:
            async with gate:
                return await _play_cell(loop, cfg, i, settings, net, on_decision)

        results = await asyncio.gather(*(one(i, s, n) for i, (s, n) in enumerate(cells)))
        return list(results), loop.time()

    return run_virtual(main)


def play_slice(cfg: ExperimentConfig, settings: BoundarySettings) -> BoundaryOutcome:
    """One boundary slice on virtual time (no network model): the engine's check
    that it plays the experiment's own code — same fingerprints as in-process."""
    results, _ = play_cells(cfg, [(settings, None)])
    return results[0].outcome
