"""Virtual time for a simulation: an asyncio loop whose clock jumps to the next timer.

:class:`VirtualTimeLoop` is an ordinary :class:`asyncio.SelectorEventLoop`
with two differences:

- ``time()`` returns a virtual clock (seconds since the loop started, 0.0
  at the start) instead of ``time.monotonic()``;
- when the loop has nothing ready to run, it does not block until its next
  timer: it polls its file descriptors once and, if none is ready, moves the
  virtual clock forward to that timer. A simulated hour of sleeps, deadlines
  and timeouts therefore takes as long as the code between them runs.

Why the project's own loop rather than ``looptime`` or aiotools' virtual
clock: the node core needs nothing from the clock library but ``loop.time()``
and ``asyncio.sleep``/``asyncio.timeout``, which any loop subclass provides;
a loop of our own adds no dependency, and it knows one thing the others do
not — work handed to a thread (:meth:`run_in_executor`, ``asyncio.to_thread``)
finishes in *real* time. While any such work is pending the virtual clock
stands still and the loop waits for it for real, so a thread's result is
never overtaken by a timeout that virtual time would otherwise have reached
first. Node stores must run in :class:`nodes.store.StoreMode` ``scratch``
(statements on the loop's own thread) for the run to stay deterministic.

The wall clock a node reads (``NodeCore.clock``, the holder's clock) is
:meth:`VirtualTimeLoop.wall`: a fixed epoch plus the virtual clock, so
every timestamp a node signs depends on the seed and the workload alone,
not on when the simulation ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import signal
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

__all__ = ["EPOCH_S", "VirtualTimeLoop", "run_virtual"]

_T = TypeVar("_T")

#: The wall-clock time (Unix seconds) at virtual time 0: 2026-01-01T00:00:00Z.
EPOCH_S = 1_767_225_600.0

#: How long one real wait for a thread's work may last before the loop looks again.
_THREAD_POLL_S = 0.05


class _VirtualSelector(selectors.BaseSelector):
    """The real selector, asked never to block: idle time is skipped on the virtual clock."""

    def __init__(self, loop_ref: list[VirtualTimeLoop]) -> None:
        self._real = selectors.DefaultSelector()
        self._loop_ref = loop_ref

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop_ref[0]
        if loop.threads_pending:
            # real work in a thread: wait for it for real, virtual time stands still
            wait = _THREAD_POLL_S if timeout is None else min(timeout, _THREAD_POLL_S)
            return self._real.select(wait)
        if timeout is not None and timeout <= 0:
            # callbacks are ready: with no thread's work pending, nothing but this
            # thread writes to the loop's file descriptors (its self-pipe, woken by
            # ``call_soon_threadsafe``, whose callback is queued already), so they
            # are looked at when the loop next runs out of ready callbacks
            return []
        if timeout is not None and len(self._real.get_map()) <= 1:
            # idle, and only the loop's self-pipe is registered (nothing for it to
            # report: see above): straight to the next timer
            loop.advance(timeout)
            return []
        ready = self._real.select(0)
        if ready or timeout is None:
            if not ready and timeout is None:
                # nothing scheduled at all: only another thread can wake the loop
                return self._real.select(_THREAD_POLL_S)
            return ready
        loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time; see the module docstring."""

    def __init__(self, epoch_s: float = EPOCH_S) -> None:
        ref: list[VirtualTimeLoop] = []
        super().__init__(_VirtualSelector(ref))
        ref.append(self)
        self._now = 0.0
        self._epoch_s = epoch_s
        self.threads_pending = 0
        #: how often the loop skipped idle time, and how much (virtual seconds)
        self.jumps = 0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the virtual clock forward (the loop calls this when idle)."""
        if seconds > 0:
            self._now += seconds
            self.jumps += 1

    def wall(self) -> float:
        """Unix seconds on the virtual clock: the fixed epoch plus virtual time."""
        return self._epoch_s + self._now

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        fut = super().run_in_executor(executor, func, *args)
        self.threads_pending += 1

        def done(_: asyncio.Future[_T]) -> None:
            self.threads_pending -= 1

        fut.add_done_callback(done)
        return fut


def run_virtual(main: Callable[[VirtualTimeLoop], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``main(loop)`` to completion on a fresh :class:`VirtualTimeLoop`, then close it.

    Ctrl-C (SIGINT) cancels the task, as :func:`asyncio.run` does, instead of
    raising wherever the signal lands (inside a callback it would be ignored
    and the run would go on): the task runs its ``finally`` blocks (nodes
    closed, scratch directories removed) and :class:`KeyboardInterrupt` is
    raised here. A second Ctrl-C raises at once."""
    loop = VirtualTimeLoop()
    interrupted = False
    task: asyncio.Task[_T] | None = None

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal interrupted
        if interrupted or task is None:
            raise KeyboardInterrupt
        interrupted = True
        loop.call_soon_threadsafe(task.cancel)

    previous: Any = None
    install = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    try:
        asyncio.set_event_loop(loop)
        task = loop.create_task(main(loop))
        if install:
            previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        except KeyboardInterrupt:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                loop.run_until_complete(task)
            raise
    finally:
        if install:
            signal.signal(signal.SIGINT, previous)
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
