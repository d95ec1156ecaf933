"""The event loop a node process runs on: asyncio's selector loop that knows when it was idle.

A node sheds the bulk calls it takes up from a backlog (:class:`nodes.overload.Backlog`):
calls that waited in gRPC's queue while the node was busy. gRPC hands the node
one call per event-loop turn and says nothing of what is still queued, so
the node has to tell from its own loop when the queue has drained. A pause
between two calls taken up does not tell it: the node may have spent the
pause on its own work (a 3 MiB body parsed, a garbage collection, the worker
threads hashing admitted bodies on the same CPU) with the queue still full.
What does tell it is the whole node being idle: its loop waiting for I/O
with nothing to run while its other threads had little to do either. A call
still queued would have been handed over meanwhile: its hand-over is work
for gRPC's threads (matching it, the completion queue's poller writing its
wake-up byte), which run on the node's CPU. The loop waiting alone is not
enough: while the node's worker threads hash admitted 3 MiB bodies and
gRPC's threads read them on the same CPU, the hand-over waits for a CPU
and the loop sits in its wait with hundreds of calls still queued (traced
under the overload benchmark:
docs/measurements/2026-12-01-node-overload-constants.md). :class:`NodeEventLoop`
records when its loop last waited so, for at least :data:`IDLE_WAIT_S` in one wait, with
the process using at most :data:`IDLE_CPU_SHARE` of that time in CPU
(:attr:`IdleSelector.idle_at`).

Only asyncio's public API: a :class:`selectors.DefaultSelector` subclass given
to :class:`asyncio.SelectorEventLoop`, and :func:`run` with
:class:`asyncio.Runner`'s ``loop_factory``.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["IDLE_CPU_SHARE", "IDLE_WAIT_S", "IdleSelector", "NodeEventLoop", "idle_clock", "run"]

#: One wait for I/O at least this long, with nothing else to run, is the loop
#: idle. Long enough that a completion already on its way (gRPC's poller
#: thread writing its wake-up byte while the node's worker threads share its
#: CPU) is not mistaken for none; short enough that the gaps between callers
#: spread out by their retry appointments show it.
IDLE_WAIT_S = 0.001
#: Such a wait is the node idle only if the process (every thread of it: gRPC's,
#: the worker threads') used at most this share of it in CPU. A process busy
#: through the loop's wait (its threads on the loop's CPU, or on another) may
#: owe the loop a call it has not handed over yet.
IDLE_CPU_SHARE = 0.5

_T = TypeVar("_T")


class IdleSelector(selectors.DefaultSelector):
    """The platform's default selector, noting when a wait for I/O lasted ``IDLE_WAIT_S`` or more
    with the process using at most ``IDLE_CPU_SHARE`` of it in CPU.

    asyncio's loop calls :meth:`select` with a zero timeout while it has
    callbacks ready and with a longer one (or none) only when it has nothing
    to run, so a wait that long is the loop idle; the process's CPU time
    (``cpu_clock``, every thread's) over the wait says whether the rest of
    the node was too.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._cpu_clock = cpu_clock
        #: When (``clock`` time) the last idle wait (``IDLE_WAIT_S`` or more, the
        #: process mostly off the CPU) ended; ``-inf`` until there has been one.
        self.idle_at = float("-inf")

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(timeout)
        start = self._clock()
        cpu = self._cpu_clock()
        try:
            return super().select(timeout)
        finally:
            end = self._clock()
            waited = end - start
            if waited >= IDLE_WAIT_S and self._cpu_clock() - cpu <= waited * IDLE_CPU_SHARE:
                self.idle_at = end


class NodeEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector event loop on an :class:`IdleSelector` (its ``idle``)."""

    def __init__(self) -> None:
        self.idle = IdleSelector()
        super().__init__(self.idle)


def idle_clock(loop: asyncio.AbstractEventLoop | None = None) -> Callable[[], float] | None:
    """When ``loop`` (default: the running one) was last idle, as a callable returning
    ``time.monotonic`` time; None if it is not a :class:`NodeEventLoop` (it cannot tell)."""
    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
    if not isinstance(loop, NodeEventLoop):
        return None
    idle = loop.idle

    def idle_at() -> float:
        return idle.idle_at

    return idle_at


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(main)`` on a :class:`NodeEventLoop`."""
    with asyncio.Runner(loop_factory=NodeEventLoop) as runner:
        return runner.run(main)
