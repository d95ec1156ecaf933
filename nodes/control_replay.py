"""Control-call replay protection that survives a restart.

A control call (``nodes.auth``) is accepted once: its ``(key, nonce)`` is
remembered in memory for twice the clock-skew window. Memory alone forgets
every nonce when the process ends, and a call captured before a restart
would be accepted again after it. The guarantee kept here, as the node keeps
one for demands (``nodes.origin_replay``, ``replay_floor``), per call:

    every control call a node ever accepted is either dated below the durable
    *control floor* (``<data_dir>/control_floor``), or its ``(key, nonce)`` is
    in the durable *future-nonce file* (``<data_dir>/control_future_nonces``),
    before the call's handler runs.

So a restarted node refuses a call dated below the floor it found on disk
(a previous run may have accepted it) and a call whose nonce the file lists.
The floor is raised (fsync'd) only when a call is dated at or above it, to
the later of the call's time and now, plus :data:`CONTROL_FLOOR_LEASE_MS`: a
write about once per lease, not per call. A call dated more than
:data:`CONTROL_FUTURE_SLACK_MS` ahead of the node's clock does not move the
floor (one caller with a fast clock would otherwise push it ahead and make a
restarted node refuse everybody's calls for up to the skew window): its
nonce is appended to the future-nonce file, fsync'd, at most
:data:`MAX_CONTROL_FUTURE_NONCES` of them from keys the node does not know
(operator keys and pinned peers are not counted there) and
:data:`MAX_CONTROL_FUTURE_NONCES_PER_KEY` per key. The floor therefore stays
within lease + slack of the clock, and a restarted node waits that out
before it serves (:meth:`ControlReplay.outwait_floor`), so a call signed
after the restart is accepted.

A node without a data directory (an in-process test server) keeps nonces in
memory only.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from nodes._disk import disk_full, is_disk_full
from nodes.errors import NodeError, RequestTooLarge, StoreCorrupt
from nodes.logging import get_logger

__all__ = [
    "CONTROL_FLOOR_FILENAME",
    "CONTROL_FLOOR_LEASE_MS",
    "CONTROL_FUTURE_FILENAME",
    "CONTROL_FUTURE_SLACK_MS",
    "MAX_CONTROL_FUTURE_NONCES",
    "MAX_CONTROL_FUTURE_NONCES_PER_KEY",
    "ControlReplay",
    "ControlReplayUnavailable",
]

CONTROL_FLOOR_FILENAME = "control_floor"
CONTROL_FUTURE_FILENAME = "control_future_nonces"
#: How far above the latest accepted control call the durable floor is set.
CONTROL_FLOOR_LEASE_MS = 1_000
#: A call dated more than this ahead of the node's clock is remembered by nonce.
CONTROL_FUTURE_SLACK_MS = 500
MAX_CONTROL_FUTURE_NONCES = 4096
MAX_CONTROL_FUTURE_NONCES_PER_KEY = 64
#: The future-nonce file is rewritten (only the nonces still remembered) once it
#: holds twice as many lines as that, or as there are nonces remembered.
_COMPACT_FUTURE_LINES = MAX_CONTROL_FUTURE_NONCES


log = get_logger(__name__)


class ControlReplayUnavailable(NodeError):
    """The control-call replay record could not be written: the call is not accepted."""

    code = grpc.StatusCode.UNAVAILABLE


def _written(path: Path, exc: OSError) -> NodeError:
    if is_disk_full(exc):
        # Counted and logged once per interval with every other full-disk refusal.
        return disk_full(exc, "control replay record", path)
    return ControlReplayUnavailable(f"control replay record {path}: {exc}")


def _read_floor(path: Path) -> int:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit():
        raise StoreCorrupt(f"control floor {path}: expected an integer (ms), got {text[:40]!r}")
    return int(text)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _append_durably(path: Path, line: str) -> None:
    with open(path, "a", encoding="ascii") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


class ControlReplay:
    """The durable half of control-call replay protection (see module docstring).

    ``window_ms``: how long a call's nonce must be remembered after its date
    (twice the clock-skew window: a call is accepted up to the skew either side).
    """

    def __init__(
        self,
        data_dir: Path | None,
        window_ms: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = data_dir
        self._window_ms = window_ms
        self._clock = clock
        #: The floor a previous run left: calls dated below it are refused.
        self.restart_floor_ms = 0
        self._floor_ms = 0
        self._lock = asyncio.Lock()
        #: Future-dated calls remembered durably: (key, nonce) → forget at (ms).
        self.future: dict[tuple[str, str], int] = {}
        #: Floor writes since start (how often the durable record cost an fsync).
        self.floor_writes = 0
        #: Lines in the future-nonce file (rewritten once mostly stale).
        self._future_lines = 0
        if data_dir is not None:
            self._load(data_dir)

    @property
    def _floor_path(self) -> Path | None:
        return None if self._dir is None else self._dir / CONTROL_FLOOR_FILENAME

    @property
    def _future_path(self) -> Path | None:
        return None if self._dir is None else self._dir / CONTROL_FUTURE_FILENAME

    def _load(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.restart_floor_ms = self._floor_ms = _read_floor(data_dir / CONTROL_FLOOR_FILENAME)
        now_ms = int(self._clock() * 1000)
        path = data_dir / CONTROL_FUTURE_FILENAME
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            return
        live: dict[tuple[str, str], int] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) != 3 or not parts[2].isdigit():
                continue  # a torn last line: that call's handler never ran
            forget_at = int(parts[2]) + self._window_ms
            if forget_at > now_ms:
                live[(parts[0], parts[1])] = forget_at
        self.future = live
        _replace_durably(path, self._future_text(now_ms))
        self._future_lines = len(live)

    def _future_text(self, now_ms: int) -> str:
        """The future-nonce file's lines for the nonces still remembered at ``now_ms``."""
        return "".join(
            f"{k} {n} {t - self._window_ms}\n" for (k, n), t in self.future.items() if t > now_ms
        )

    def predates_restart(self, time_ms: int) -> bool:
        """Whether a call so dated may have been accepted by a previous run (below its floor)."""
        return time_ms < self.restart_floor_ms

    def is_future(self, time_ms: int, now_ms: int) -> bool:
        return time_ms > now_ms + CONTROL_FUTURE_SLACK_MS

    def check_future_room(self, method: str, key: str, known: bool, now_ms: int) -> None:
        """Refuse a future-dated call the durable record has no room for."""
        self._prune_future(now_ms)
        mine = sum(1 for k, _ in self.future if k == key)
        if mine >= MAX_CONTROL_FUTURE_NONCES_PER_KEY:
            raise RequestTooLarge(
                f"{method}: key {key[:16]}… has {mine} control calls dated ahead of this"
                f" node's clock pending (cap {MAX_CONTROL_FUTURE_NONCES_PER_KEY}); check its clock"
            )
        if not known and len(self.future) >= MAX_CONTROL_FUTURE_NONCES:
            raise RequestTooLarge(
                f"{method}: {len(self.future)} control calls dated ahead of this node's clock"
                f" remembered (cap {MAX_CONTROL_FUTURE_NONCES}); check the caller's clock"
            )

    def _prune_future(self, now_ms: int) -> None:
        for slot in [s for s, t in self.future.items() if t <= now_ms]:
            del self.future[slot]

    async def record(self, key: str, nonce: str, time_ms: int, now_ms: int) -> None:
        """Make an accepted call's replay record durable (before its handler runs)."""
        future_path, floor_path = self._future_path, self._floor_path
        if future_path is None or floor_path is None:
            return
        if self.is_future(time_ms, now_ms):
            # Claimed before the first await, so a concurrent call sees the room taken.
            self.future[(key, nonce)] = time_ms + self._window_ms
            try:
                async with self._lock:
                    self._prune_future(now_ms)
                    if self._future_lines >= 2 * max(len(self.future), _COMPACT_FUTURE_LINES):
                        # Lines of calls long past: the file is rewritten with the live ones.
                        await asyncio.to_thread(
                            _replace_durably, future_path, self._future_text(now_ms)
                        )
                        self._future_lines = len(self.future)
                    else:
                        await asyncio.to_thread(
                            _append_durably, future_path, f"{key} {nonce} {time_ms}\n"
                        )
                        self._future_lines += 1
            except OSError as exc:
                self.future.pop((key, nonce), None)
                raise _written(future_path, exc) from exc
            return
        if time_ms < self._floor_ms:
            return
        async with self._lock:
            floor_ms = max(time_ms, now_ms) + CONTROL_FLOOR_LEASE_MS
            if floor_ms <= self._floor_ms or time_ms < self._floor_ms:
                return
            try:
                await asyncio.to_thread(_replace_durably, floor_path, f"{floor_ms}\n")
            except OSError as exc:
                raise _written(floor_path, exc) from exc
            self._floor_ms = floor_ms
            self.floor_writes += 1

    async def outwait_floor(self) -> None:
        """Wait (at most lease + slack) until the floor a previous run left is past.

        Without it a node back at once would refuse calls signed just after it
        came back, dated below a floor that ran up to the lease ahead.
        """
        limit_s = (CONTROL_FLOOR_LEASE_MS + CONTROL_FUTURE_SLACK_MS) / 1000 + 0.25
        give_up = time.monotonic() + limit_s
        while self.restart_floor_ms > int(self._clock() * 1000) and time.monotonic() < give_up:
            ahead_s = (self.restart_floor_ms - int(self._clock() * 1000)) / 1000
            await asyncio.sleep(min(0.05, max(0.001, ahead_s)))
        now_ms = int(self._clock() * 1000)
        if self.restart_floor_ms > now_ms:
            # Further ahead than any run leaves it: the clock went back. Calls signed
            # before the floor stay refused (ABORTED) until the clock passes it.
            log.warning(
                "control_floor_ahead_of_clock",
                floor_ms=self.restart_floor_ms,
                now_ms=now_ms,
                ahead_s=round((self.restart_floor_ms - now_ms) / 1000, 3),
                path=str(self._floor_path),
            )
