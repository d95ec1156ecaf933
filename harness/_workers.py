"""Worker processes that do not outlive the process that started them.

``run``, ``sweep``, ``boundary`` and ``attest`` share their runs over
process pools. A parent that ends normally (or on Ctrl-C) shuts its pool
down; a parent killed outright (SIGKILL, the OOM killer) cannot, and its
workers would play their whole share of the matrix for nobody.
:func:`exit_with_parent`, called first thing in every worker, makes the
worker end as soon as its parent is gone:

- on Linux the kernel delivers SIGKILL to the worker when the thread that
  started it exits (``prctl(PR_SET_PDEATHSIG)``);
- everywhere, a daemon thread watches the parent's pid (a child whose
  parent died is re-parented, so ``os.getppid()`` changes) and ends the
  worker with ``os._exit``: this also covers a pool whose workers were
  started from a thread that exits before the parent does.

If the parent is already gone when the worker starts, the worker exits at
once.

Ctrl-C is the parent's alone (one line, exit 130; leaving the pool ends the
workers): a pool started inside :func:`ctrl_c_blocked` has workers born with
SIGINT blocked, and :func:`ignore_ctrl_c` in their initializer turns that
into "ignored". A worker never has a moment — between its fork and its
initializer, nor while :func:`exit_with_parent` looks up libc — in which the
terminal's SIGINT to the whole group would end it with a traceback.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["WATCH_INTERVAL_S", "ctrl_c_blocked", "exit_with_parent", "ignore_ctrl_c"]

#: How often the watchdog thread looks at the parent pid (seconds).
WATCH_INTERVAL_S = 0.25

_PR_SET_PDEATHSIG = 1
#: Exit status of a worker whose parent died (128 + SIGKILL, as if killed).
_ORPHAN_STATUS = 128 + 9


def _set_pdeathsig() -> bool:
    """Ask the kernel for SIGKILL when the parent goes (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(_ORPHAN_STATUS)


def exit_with_parent(parent: int) -> None:
    """Make this process end when process ``parent`` (its parent) ends.

    Call it in the worker, with the parent's pid taken in the parent (a pool
    initializer argument): comparing with ``os.getppid()`` here also catches
    a parent that died before this call.
    """
    _set_pdeathsig()
    if os.getppid() != parent:
        os._exit(_ORPHAN_STATUS)
    threading.Thread(target=_watch, args=(parent,), name="exit-with-parent", daemon=True).start()


@contextmanager
def ctrl_c_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while the block runs (processes forked meanwhile
    inherit the mask); a Ctrl-C meanwhile is delivered when it ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_ctrl_c() -> None:
    """In a worker: SIGINT ignored, then unblocked (one pending meanwhile is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
