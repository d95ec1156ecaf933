"""``provnet simulate``: the real node core on virtual time.

The engine check plays the boundary experiment's default slice (origin,
holder, witness: three nodes) on the virtual-time loop and gets the decision
fingerprints the in-process replay pins (tests/harness/test_determinism.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from harness.boundary.choices import TransportKind
from harness.boundary.records import BoundarySettings
from harness.boundary.topology import RunClock, start_topology
from harness.config import ExperimentConfig
from harness.simulate.clock import EPOCH_S, VirtualTimeLoop, run_virtual
from harness.simulate.engine import play_slice
from nodes.store import StoreMode

CFG = ExperimentConfig()

#: The in-process replay fingerprints of med / cadence 25 / 500 steps, seeds 0 and 1.
PINNED_DEFAULT_SLICE = (
    "0cee7f0c57e7aaa94ae246bbd0d0bfdacd7bd1f69f50476c5e106dc61881f79a",
    "c3729baa9cff026307cdffee651a2d3deeb0ba26a6fc51fd0b75e269b5c393e2",
)


def test_virtual_loop_skips_idle_time_and_keeps_thread_work_real() -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[float, float, float, bool]:
        await asyncio.sleep(3600)
        timed_out = False
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            timed_out = True
        before = loop.time()
        # a thread's work is waited for in real time: the clock stands still meanwhile
        await asyncio.to_thread(time.sleep, 0.05)
        return before, loop.time(), loop.wall(), timed_out

    before, after, wall, timed_out = run_virtual(main)
    assert before == 3605.0
    assert after == before
    assert wall == EPOCH_S + 3605.0
    assert timed_out


def test_default_boundary_slice_on_virtual_time_has_the_pinned_fingerprints() -> None:
    settings = BoundarySettings()  # origin -> holder, witness; seeds 0, 1; 500 steps
    assert len(settings.specs()) == 3
    outcome = play_slice(CFG, settings)
    assert [r.boundary_fingerprint for r in outcome.runs] == list(PINNED_DEFAULT_SLICE)
    assert all(r.fingerprints_equal and r.rows_equal for r in outcome.runs)
    assert outcome.evidence == []
    # the holder really rehydrated across the boundary, on the real node core
    assert outcome.arm_costs["structural_min"].rehydrations > 0


def test_nodes_started_for_a_simulation_read_the_virtual_clock(tmp_path: Path) -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[int, int]:
        topo = await start_topology(
            tmp_path,
            BoundarySettings().specs(),
            TransportKind.MEMORY,
            deadline_ms=1000,
            reasks=1,
            store_mode=StoreMode.SCRATCH,
            clock=RunClock(wall=loop.wall),
        )
        try:
            first = topo.holder.core.now_ms()
            await asyncio.sleep(7200)
            return first, topo.origins[0].core.now_ms()
        finally:
            await topo.close()

    first, later = run_virtual(main)
    assert abs(first - EPOCH_S * 1000) <= 1
    assert abs(later - (EPOCH_S + 7200) * 1000) <= 1
