"""The clock deadlines and budgets are read on: the running event loop's.

A node's deadlines (a call's remaining time, a re-ask's due time, a witness's
budget) are seconds on :func:`loop_time`: ``asyncio.get_running_loop().time()``,
which on a node's own loop (:class:`nodes.eventloop.NodeEventLoop`, any
``asyncio`` selector loop) *is* ``time.monotonic()``. Reading the loop rather
than the process's monotonic clock is what lets a loop with a clock of its own
— the simulation's virtual time (:mod:`harness.simulate.clock`) — run the same
code with every timeout, sleep and budget on one clock: a deadline computed on
it and the ``asyncio.timeout``/``asyncio.sleep`` that enforce it agree.

Outside a running loop (a synchronous caller) it is ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["loop_time"]


def loop_time() -> float:
    """Seconds on the running loop's clock (``time.monotonic()`` with no loop running)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
