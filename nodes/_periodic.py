"""One background task that runs a pass, sleeps, and runs it again.

The reaper and the re-tester share it: a store error in a pass is handed to
:meth:`PeriodicTask.pass_failed` and the next pass tries again, so the task
never stops silently while the node runs; :meth:`PeriodicTask.stop` cancels
it and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib

from nodes.errors import StoreError
from nodes.logging import get_logger

__all__ = ["PeriodicTask"]

_log = get_logger(__name__)


class PeriodicTask:
    """Runs :meth:`run_once` every ``interval_s`` seconds in a task named ``name``."""

    #: Whether a pass that raised anything but a store error is logged and the
    #: schedule goes on (True) or ends the task (False).
    survive_bugs = False
    #: The event logged for such a pass.
    crash_event = "periodic_pass_crashed"

    def __init__(self, name: str, interval_s: float) -> None:
        self._name = name
        self._interval = interval_s
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> object:
        """One pass (its result is the subclass's)."""
        raise NotImplementedError

    def pass_failed(self, exc: StoreError) -> None:
        """A pass met a store error (logged by the subclass as it sees fit)."""

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                self.pass_failed(exc)
            except Exception:
                if not self.survive_bugs:
                    raise
                _log.exception(self.crash_event, task=self._name)
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        """Start the periodic task (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self._name)

    async def stop(self) -> None:
        """Cancel the task and wait for it."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
