"""A full disk, said once: ENOSPC turned into :class:`nodes.errors.StoreFull`, logged per interval.

Every write a node makes — the hop log's transactions, the replay floor, the
holder floors of demands dated ahead (``future_nonces``), evidence files —
can meet a full disk. Each such failure becomes one error naming the path
and "no space left on device", which the server answers as
RESOURCE_EXHAUSTED; nothing of the failed write was acknowledged, and
nothing was signed for it that could leave the process (the store signs
inside its transaction and releases only after COMMIT).

A disk stays full for a while and every write call in that time fails the
same way, so the event ``disk_full`` is logged at most once per
:data:`DISK_FULL_LOG_INTERVAL_S` (with how many refusals the interval
suppressed) and ``disk_space_returned`` once when a write succeeds again.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import structlog

from nodes.errors import StoreFull

__all__ = [
    "DISK_FULL_LOG_INTERVAL_S",
    "DiskFullReporter",
    "disk_full",
    "is_disk_full",
    "reporter",
]

# structlog's own logger, not nodes.logging's: the store imports this module,
# and nodes.logging sits above it (nodes.config → nodes.faults → nodes.store).
# The events are rare, so its per-call binding costs nothing that matters.
log = structlog.get_logger(__name__)

#: At most one ``disk_full`` log event per this many seconds (per process).
DISK_FULL_LOG_INTERVAL_S: Final = 10.0

_SQLITE_FULL: Final = 13


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for lack of space (OS ENOSPC/EDQUOT or SQLITE_FULL)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:
            return True
        return "disk is full" in str(exc).lower()
    return False


class DiskFullReporter:
    """Counts disk-full refusals and logs them at most once per interval."""

    def __init__(
        self,
        interval_s: float = DISK_FULL_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last_logged: float | None = None
        self._suppressed = 0
        self.refusals = 0
        self.full = False

    def refused(self, what: str, path: Path | str, detail: str) -> None:
        """One write refused for lack of space: counted; logged if the interval allows."""
        self.refusals += 1
        self.full = True
        now = self._clock()
        if self._last_logged is not None and now - self._last_logged < self.interval_s:
            self._suppressed += 1
            return
        log.error(
            "disk_full",
            path=str(path),
            what=what,
            detail=detail,
            refusals=self.refusals,
            suppressed_since_last=self._suppressed,
        )
        self._last_logged = now
        self._suppressed = 0

    def wrote(self, path: Path | str) -> None:
        """A write succeeded: if the disk was full, say once that space returned."""
        if self.full:
            self.full = False
            log.warning("disk_space_returned", path=str(path), refusals=self.refusals)


#: The process's reporter (a node process is one node).
reporter: Final = DiskFullReporter()


def disk_full(exc: BaseException, what: str, path: Path | str) -> StoreFull:
    """The :class:`StoreFull` for a write ``what`` to ``path`` that met a full disk (reported)."""
    detail = str(exc) or type(exc).__name__
    reporter.refused(what, path, detail)
    return StoreFull(f"{what}: no space left on device for {path} ({detail})")
