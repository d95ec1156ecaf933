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
(:mod:`harness.simulate.network`). N agents are the nodes of all cells
together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.boundary.records import BoundaryOutcome, BoundarySettings
from harness.boundary.runner import SliceObserver, run_boundary_async
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
    on_decision: Callable[[], None] | None,
    observer: SliceObserver | None = None,
) -> CellResult:
    start = loop.time()
    outcome = await run_boundary_async(
        cfg,
        settings,
        progress=False,
        on_decision=on_decision,
        clock=_clock(loop),
        network=network,
        observer=observer,
    )
    return CellResult(index, outcome, loop.time() - start)


def play_cells(
    cfg: ExperimentConfig,
    cells: Sequence[tuple[BoundarySettings, Network | None]],
    *,
    on_decision: Callable[[], None] | None = None,
    observers: Sequence[SliceObserver | None] = (),
) -> list[CellResult]:
    """Play every cell, in order, each on a fresh virtual-time loop (virtual time 0
    at its start, the same epoch). Cells share no node, so playing them one
    after the other gives what playing them side by side would, and a cell's
    result depends on its own settings and seed alone — whatever else is
    played, in this process or another. (The signature and hash counters,
    :class:`harness.boundary.wire.CryptoMeter`, are one per process, which is
    also why cells are not interleaved on one loop.) ``observers``, one per cell
    if given, see and wrap what the cell plays (:mod:`harness.simulate.adversary`)."""
    results: list[CellResult] = []
    for i, (settings, network) in enumerate(cells):
        observer = observers[i] if i < len(observers) else None

        async def main(
            loop: VirtualTimeLoop,
            i: int = i,
            s: BoundarySettings = settings,
            n: Network | None = network,
            o: SliceObserver | None = observer,
        ) -> CellResult:
            return await _play_cell(loop, cfg, i, s, n, on_decision, o)

        results.append(run_virtual(main))
    return results


def play_slice(cfg: ExperimentConfig, settings: BoundarySettings) -> BoundaryOutcome:
    """One boundary slice on virtual time (no network model): the engine's check
    that it plays the experiment's own code — same fingerprints as in-process."""
    return play_cells(cfg, [(settings, None)])[0].outcome
