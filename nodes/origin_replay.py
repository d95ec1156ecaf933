"""The origin's replay protection: no demand is answered twice, across restarts.

What this role promises (steps (6) of :mod:`nodes.origin`): a signed demand's
nonce is answered once in a run (ALREADY_EXISTS after), and once ever — every
demand a run recorded is dated below a durable *replay floor* that the next
run finds on disk and refuses below (ABORTED, :class:`DemandPredatesRestart`).
The floor is raised about once per lease, not per demand. A demand dated ahead
of the clock never moves that floor: it raises, durably, a floor of its own
holder's instead, so no caller can make a restarted node refuse everyone.
Only demands whose holder signature was verified are recorded here
(:func:`contracts.rules.holder_signature_decides`; :mod:`nodes.replay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from contracts.errors import ReplayedNonce
from contracts.rules import DEMAND_WINDOW_MS, FUTURE_SLACK_MS
from contracts.signed import Signed
from contracts.statements import Demand
from nodes import store as st
from nodes._disk import disk_full, is_disk_full
from nodes.context import NodeContext, ms
from nodes.errors import DemandPredatesRestart
from nodes.future_floors import (
    FutureFloors,
    RestartFloors,
    append_lines,
    read_floors,
    rewrite_lines,
)
from nodes.replay import DemandNonces

__all__ = [
    "FUTURE_NONCES_FILENAME",
    "MAX_FUTURE_HOLDERS",
    "MAX_NONCES",
    "MAX_NONCES_PER_HOLDER",
    "REPLAY_FLOOR_FILENAME",
    "REPLAY_FLOOR_LEASE_MS",
    "OriginReplay",
    "read_floor",
    "write_floor",
]

#: A demand dated more than FUTURE_SLACK_MS (contracts.rules) ahead of the node's
#: clock does not move the replay floor: a floor of its holder's own is kept
#: durably instead (``FUTURE_NONCES_FILENAME``), so no caller can push the node's
#: floor ahead and make a restarted node refuse everyone.
FUTURE_NONCES_FILENAME = "future_nonces"
#: Open holders (any key) with a durable floor of their own at once, each until
#: its latest demand dated ahead is stale; beyond it the lowest-dated are folded
#: into one global floor (nodes.future_floors). Holders of this node's own
#: obligations have as many again, reserved.
MAX_FUTURE_HOLDERS = 4096
#: Lines the holder-floor file may hold beyond twice its live entries before
#: it is rewritten (each raise appends one line).
_FUTURE_FILE_SLACK_LINES = 1024
#: Nonces of signed (verified) demands remembered at once, each until its demand
#: is twice the window old; full: the lowest-dated are forgotten (nodes.replay).
MAX_NONCES = 200_000
#: A signer's share of a full nonce memory: beyond it, only its demands are refused.
MAX_NONCES_PER_HOLDER = MAX_NONCES // 8
#: How far above the latest accepted demand the durable replay floor is set.
REPLAY_FLOOR_LEASE_MS = 1_000
REPLAY_FLOOR_FILENAME = "replay_floor"
#: Digits of the floor file (fixed, so it can be overwritten in place on a full disk).
_FLOOR_WIDTH = 20


def read_floor(path: Path) -> int:
    """The durable replay floor (ms); 0 for a node that never accepted a demand."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return 0
    if not text.isdigit():
        raise st.StoreCorrupt(f"replay floor {path}: expected an integer (ms), got {text[:40]!r}")
    return int(text)


def write_floor(path: Path, floor_ms: int) -> None:
    """Replace the floor file atomically and durably (fsync file, rename, fsync dir).

    The floor is written at a fixed width, so on a full disk (no block for a
    new file) it is overwritten in place instead: the same bytes of the same
    block, one write, fsync'd — a node with a full disk keeps raising its
    floor, and so keeps answering demands for what it holds. Only when even
    that is refused does the demand fail, RESOURCE_EXHAUSTED naming the disk.
    """
    text = f"{floor_ms:0{_FLOOR_WIDTH}d}\n".encode("ascii")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not is_disk_full(exc) or not path.exists():
            if is_disk_full(exc):
                raise disk_full(exc, f"raise replay floor to {floor_ms} ms", path) from exc
            raise
        try:
            _overwrite_floor(path, text)
        except OSError as again:
            if is_disk_full(again):
                raise disk_full(again, f"raise replay floor to {floor_ms} ms", path) from again
            raise
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _overwrite_floor(path: Path, text: bytes) -> None:
    """Write the floor over the existing file's first bytes (no new block needed)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.pwrite(fd, text, 0) != len(text):
            raise OSError(errno.ENOSPC, f"short write of the replay floor to {path}")
        os.ftruncate(fd, len(text))
        os.fsync(fd)
    finally:
        os.close(fd)


def _future_raises(future: Sequence[Signed[Demand]]) -> dict[str, int]:
    """Per holder, the latest time of its demands dated ahead in ``future``."""
    raises: dict[str, int] = {}
    for d in future:
        h, t = d.statement.holder, d.statement.time
        if t > raises.get(h, -1):
            raises[h] = t
    return raises


class OriginReplay:
    """One origin's nonces and floors; see the module docstring."""

    def __init__(self, ctx: NodeContext, *, restart_floor_ms: int = 0) -> None:
        self.ctx = ctx
        config = ctx.config
        # Nonces of this run's signed demands in memory, and a durable floor every
        # demand ever recorded is dated below.
        self.nonces = DemandNonces(
            capacity=MAX_NONCES, per_signer=MAX_NONCES_PER_HOLDER, keep_ms=2 * DEMAND_WINDOW_MS
        )
        self.floor_path = config.data_dir / REPLAY_FLOOR_FILENAME
        self.restart_floor_ms = restart_floor_ms
        self.floor_ms = restart_floor_ms
        self._floor_lock = asyncio.Lock()
        self.floor_writes = 0
        # Demands dated ahead of the clock: per holder, the latest time accepted
        # (durable, this run and runs before), and as the previous run left it.
        self._future_path = config.data_dir / FUTURE_NONCES_FILENAME
        # Holders whose floors are reserved besides those an obligation names: the
        # configured peers and the operator's keys (fixed for the run).
        self._known_holders = frozenset(
            [p.node_id for p in config.peers if p.node_id] + list(config.operator_keys)
        )
        self._future_floors = FutureFloors(
            capacity=MAX_FUTURE_HOLDERS, window_ms=DEMAND_WINDOW_MS, known=self._known_holders
        )
        self._restart_future_floors = RestartFloors()
        self._future_lock = asyncio.Lock()
        self._future_lines = 0

    def load_future_floors(self) -> None:
        """Read the holder floors a previous run left (stale ones dropped, file rewritten)."""
        restart = read_floors(self._future_path, self.ctx.now_ms() - DEMAND_WINDOW_MS)
        table = FutureFloors.loaded(
            restart,
            capacity=MAX_FUTURE_HOLDERS,
            window_ms=DEMAND_WINDOW_MS,
            known=self._known_holders,
        )
        lines = table.lines()
        if lines or self._future_path.exists():
            rewrite_lines(self._future_path, lines)
        self._future_floors = table
        self._restart_future_floors = restart
        self._future_lines = len(lines)

    async def outwait_restart_floor(self) -> None:
        """Start serving only once the floor a previous run left is in the past.

        The floor runs up to ``REPLAY_FLOOR_LEASE_MS`` ahead of the clock. A
        node back at once would otherwise turn away even demands made after
        it came back (ABORTED), and a holder or witness asking in that moment
        would record a correct origin as ``unanswered``. Waiting out the lease
        (at most that long, plus a margin; a floor further ahead means the
        clock went back, and demands below it stay refused) makes every demand
        dated after the start acceptable.
        """
        clock = self.ctx.clock
        give_up = time.monotonic() + (REPLAY_FLOOR_LEASE_MS + FUTURE_SLACK_MS) / 1000 + 0.25
        while self.restart_floor_ms > ms(clock()) and time.monotonic() < give_up:
            ahead_s = (self.restart_floor_ms - ms(clock())) / 1000
            await asyncio.sleep(min(0.05, max(0.001, ahead_s)))

    def refuse_replay(self, d: Demand) -> None:
        """Step (6): a remembered nonce, refused as soon as the demand is parsed."""
        try:
            self.nonces.check(d.holder, d.nonce)
        except ReplayedNonce:
            self.ctx.bump(st.CounterName.NONCE_REPLAYS)
            raise

    def refuse_below_floors(self, d: Demand, digest: str) -> None:
        """Step (6) for a demand to be recorded, before its signature is verified:
        dated below the restart floor, or at or below the nonces a full memory forgot."""
        if d.time < self.restart_floor_ms:
            raise DemandPredatesRestart(
                f"demand {digest[:12]}… is dated {d.time} ms, before this node's"
                f" restart floor {self.restart_floor_ms} ms; issue a fresh demand"
            )
        self.nonces.check_floor(d.holder, d.time)

    def refuse_below_holder_floor(self, d: Demand, digest: str) -> None:
        """Step (6), once the holder's signature is verified (the floor is that holder's
        own): dated at or below its latest demand dated ahead a previous run accepted."""
        why = self._restart_future_floors.refusal(d.holder, d.time)
        if why is not None:
            raise DemandPredatesRestart(
                f"demand {digest[:12]}… is dated {d.time} ms, {why}; issue a fresh demand"
            )

    async def accept_nonces(
        self, demands: Sequence[Signed[Demand]], now: float, named: Collection[str] = ()
    ) -> None:
        """Replay protection, exact across restarts, without a write per demand.

        ``demands``: those whose holder signature was verified (only they are
        recorded: :func:`contracts.rules.holder_signature_decides`, :mod:`nodes.replay`).

        Invariant: every demand this node ever recorded is dated below the
        durable *replay floor* (``<data_dir>/replay_floor``). Before recording
        a demand dated at or above it, the floor is raised — to the demand's
        time (or now) plus ``REPLAY_FLOOR_LEASE_MS`` — and fsync'd, so the
        write happens about once per lease, not per demand. Within a run every
        accepted nonce is remembered until the demand is stale, so a replay is
        ALREADY_EXISTS. A restarted node rejects demands dated below the floor
        it found on disk with ABORTED (:class:`DemandPredatesRestart`): a
        previous run may have answered them, and the holder simply issues a
        fresh demand.

        A demand dated more than ``FUTURE_SLACK_MS`` ahead of the clock does
        not move that floor (nobody can push it ahead and make a restarted
        node refuse everyone): it raises, durably, a floor of its own holder's
        instead (``FUTURE_NONCES_FILENAME``), and a restarted node answers that
        holder's demands dated at or before it ABORTED. One entry per holder,
        not per demand, so a holder whose clock runs ahead (inside the window)
        is served as often as any. ``named``: holders an obligation of this node's
        names; their floors are reserved, as the configured peers' and the
        operator keys' are, and other holders' floors are never refused
        for room, the lowest-dated folded into one global floor instead
        (:mod:`nodes.future_floors`).
        """
        if not demands:
            return
        now_ms = ms(now)
        self.nonces.prune(now_ms)
        ahead = now_ms + FUTURE_SLACK_MS
        entries: list[tuple[str, str, int]] = []
        future: list[Signed[Demand]] = []
        latest: int | None = None  # the latest time of a demand not dated ahead
        for demand in demands:  # one pass: checks (again: a concurrent call may have
            d = demand.statement  # claimed the nonce since), and which are dated ahead
            self.refuse_replay(d)
            self.refuse_below_floors(d, demand.digest)
            self.refuse_below_holder_floor(d, demand.digest)
            entries.append((d.holder, d.nonce, d.time))
            if d.time > ahead:
                future.append(demand)
            elif latest is None or d.time > latest:
                latest = d.time
        raises = _future_raises(future) if future else None
        # Claim the nonces before the first await, so a concurrent call with the
        # same nonce sees it; give them back if they cannot be made durable.
        self.nonces.claim(entries)
        try:
            if raises:
                # Dated ahead of our clock: its holder's own floor, made durable, so
                # the node's floor never runs ahead of the clock by more than its lease.
                await self._raise_future_floors(raises, named, now_ms)
            if latest is not None and latest >= self.floor_ms:
                await self._raise_floor(max(latest, now_ms) + REPLAY_FLOOR_LEASE_MS)
        except BaseException:
            self.nonces.release(entries)
            raise

    async def _raise_future_floors(
        self, raises: dict[str, int], named: Collection[str], now_ms: int
    ) -> None:
        """Append the raised holder floors (and the global fold, if open floors are
        evicted for room), fsync'd, before any demand under them is answered; rewrite
        the file once it holds many more lines than live floors."""
        async with self._future_lock:
            table = self._future_floors
            table.prune(now_ms)
            lines, evict = table.plan(raises, {h for h in raises if h in named})
            if not lines:
                return
            await asyncio.to_thread(append_lines, self._future_path, lines)
            table.apply(lines, evict)
            self._future_lines += len(lines)
            if self._future_lines > 2 * len(table) + _FUTURE_FILE_SLACK_LINES:
                live = table.lines()
                await asyncio.to_thread(rewrite_lines, self._future_path, live)
                self._future_lines = len(live)

    async def _raise_floor(self, floor_ms: int) -> None:
        async with self._floor_lock:
            if floor_ms <= self.floor_ms:
                return
            await asyncio.to_thread(write_floor, self.floor_path, floor_ms)
            self.floor_ms = floor_ms
            self.floor_writes += 1
