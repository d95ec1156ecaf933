"""Durable floors for demands dated ahead of a node's clock: no table a stranger can fill.

A demand dated more than the slack ahead of the node's clock does not move the
node's replay floor (nobody may push that ahead); instead its holder's own
floor is raised, durably, before the demand is answered, and a restarted node
refuses (ABORTED, "issue a fresh demand") a holder's demands dated at or below
the floor a previous run left. One entry per holder, not per demand.

Invariant (what makes replays across a restart impossible): every demand dated
ahead that this node answered is dated at or below, on disk, either its
holder's entry or the *global fold* ``global_ms``, and a restarted node refuses
a demand dated at or below its holder's entry, or at or below the global fold
unless its holder is *reserved* (below).

Who can fill what:

* **Reserved entries** are for holders an obligation this node signed names
  (only the operator makes those: a stranger cannot add one). They are never
  evicted, only dropped once stale, and a restarted node does not apply the
  global fold to them: an entry is made reserved with a floor at least the
  global fold of that moment, so it covers whatever of that holder's was
  folded before.
* **Open entries** are for every other holder (a bearer's key is any key). At
  most ``capacity`` at once; a stranger with fresh keys can fill them, and
  then each new holder evicts the lowest-dated entries, whose floors are
  folded into the global fold. Nobody is refused for a full table: a node in
  its run catches replays by the nonces it remembers (:mod:`nodes.replay`);
  what a fill costs is paid only after a restart, by open holders' demands
  dated at or below the fold, and only until the clock passes it (it is never
  more than the skew window ahead).
* An entry or fold dated more than the skew window before now is dropped: a
  demand dated at or below it is refused as stale anyway.

A holder the node knows for the whole of a run (a configured peer, an
operator key) is never given an open entry in that run, so it is never
folded: each run writes them as its *known* holders, and a restarted node
does not apply that run's fold to them either, even without an entry (a peer
whose clock is right has none). The fold is kept per run for that.

File format, one line each, appended and fsync'd: ``<holder> <ms>`` (open),
``<holder> <ms> r`` (reserved), ``* <ms> <run>`` (the global fold of run
``<run>``, a random tag), ``k <run> <holder>`` (a holder known for the whole
of that run, written when the file is rewritten); ``<holder> <nonce> <ms>``
is the per-nonce form of earlier versions, read as an open entry, and ``*
<ms>`` a fold no holder is exempt from.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodes._disk import disk_full, is_disk_full
from nodes.errors import RequestTooLarge

__all__ = ["FloorLine", "FutureFloors", "RestartFloors", "append_lines", "read_floors"]

#: One durable line: an entry (holder, ms, "r" if reserved else ""), a fold
#: ("*", ms, run) or a known holder ("k", 0, "<run> <holder>").
FloorLine = tuple[str, int, str]

_GLOBAL = "*"
_KNOWN = "k"


@dataclass(frozen=True, slots=True)
class RestartFloors:
    """What a previous run left, as a restarted node checks demands against it:
    the holders' floors, the reserved holders, each run's fold and, per run, the
    holders it knew (exempt from that run's fold)."""

    floors: Mapping[str, int] = field(default_factory=dict)
    reserved: Collection[str] = frozenset()
    folds: Mapping[str, int] = field(default_factory=dict)
    known: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def global_ms(self) -> int:
        return max(self.folds.values(), default=-1)

    def refusal(self, holder: str, time_ms: int) -> str | None:
        """Why a demand of ``holder`` dated ``time_ms`` may have been answered by a
        previous run (the reason, for the ABORTED message), or None."""
        own = self.floors.get(holder, -1)
        if time_ms <= own:
            return (
                f"not after holder {holder[:16]}…'s latest demand dated ahead of this"
                f" node's clock that a previous run accepted ({own} ms)"
            )
        if holder in self.reserved:
            return None
        for run, fold_ms in self.folds.items():
            if time_ms <= fold_ms and holder not in self.known.get(run, ()):
                return (
                    f"at or below {fold_ms} ms, the floor into which a previous run"
                    " folded the floors of holders it could not keep one for (demands"
                    " dated ahead of its clock from more holders than it remembers)"
                )
        return None


def read_floors(path: Path, stale_ms: int) -> RestartFloors:
    """What a file holds that is live (dated after ``stale_ms``); a torn line is
    skipped (its demand was never answered: every line is fsync'd before)."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return RestartFloors()
    floors: dict[str, int] = {}
    reserved: set[str] = set()
    folds: dict[str, int] = {}
    known: dict[str, set[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == _KNOWN:
            known.setdefault(parts[1], set()).add(parts[2])
            continue
        if len(parts) == 3 and parts[2] == "r":
            holder, time_s, is_reserved = parts[0], parts[1], True
        elif len(parts) in (2, 3):
            holder, time_s, is_reserved = parts[0], parts[-1], False
            if holder == _GLOBAL:
                time_s = parts[1]
        else:
            continue
        if not time_s.isdigit():
            continue
        time_ms = int(time_s)
        if time_ms <= stale_ms:
            continue
        if holder == _GLOBAL:
            run = parts[2] if len(parts) == 3 else ""
            folds[run] = max(time_ms, folds.get(run, -1))
            continue
        floors[holder] = max(time_ms, floors.get(holder, -1))
        if is_reserved:
            reserved.add(holder)
    return RestartFloors(
        floors,
        frozenset(reserved),
        folds,
        {run: frozenset(known[run]) for run in folds if run and run in known},
    )


def _line(entry: FloorLine) -> str:
    holder, time_ms, tail = entry
    if holder == _KNOWN:
        return f"{_KNOWN} {tail}\n"
    return f"{holder} {time_ms} {tail}\n" if tail else f"{holder} {time_ms}\n"


def append_lines(path: Path, lines: Sequence[FloorLine]) -> None:
    """Append and fsync; a full disk is :class:`nodes._disk.StoreFull` (the demands are
    refused, and a torn last line is skipped when read)."""
    try:
        with open(path, "a", encoding="ascii") as fh:
            fh.write("".join(_line(e) for e in lines))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if is_disk_full(exc):
            what = f"raise {len(lines)} floor(s) of demands dated ahead of this node's clock"
            raise disk_full(exc, what, path) from exc
        raise


def rewrite_lines(path: Path, lines: Sequence[FloorLine]) -> None:
    """Replace the file with ``lines``; on a full disk keep the old file as it is
    (what it holds beyond them is stale, skipped when read)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write("".join(_line(e) for e in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not is_disk_full(exc):
            raise
        disk_full(exc, "compact the holder-floor file", path)


class FutureFloors:
    """This run's floors of demands dated ahead (see the module): the open and the
    reserved entries and the folds (this run's, and those a previous run left that
    are live). Plan a raise with :meth:`plan`, make its lines durable, then
    :meth:`apply` it (both under the caller's lock)."""

    __slots__ = ("_heap", "capacity", "carried_known", "evicted", "folds", "known", "open",
                 "reserved", "run", "window_ms")  # fmt: skip

    def __init__(
        self, *, capacity: int, window_ms: int, known: Collection[str] = frozenset()
    ) -> None:
        """``known``: holders known for the whole run (never given an open entry)."""
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.window_ms = window_ms
        self.known = frozenset(known)
        self.run = secrets.token_hex(8)
        self.open: dict[str, int] = {}
        self.reserved: dict[str, int] = {}
        self.folds: dict[str, int] = {}  # run -> its global fold (ms)
        self.carried_known: dict[str, frozenset[str]] = {}  # a previous run's known holders
        self.evicted = 0  # open entries folded into the global fold, this run
        self._heap: list[tuple[int, str]] = []  # open entries by date (stale ones skipped)

    @classmethod
    def loaded(
        cls,
        restart: RestartFloors,
        *,
        capacity: int,
        window_ms: int,
        known: Collection[str] = frozenset(),
    ) -> FutureFloors:
        table = cls(capacity=capacity, window_ms=window_ms, known=known)
        table.folds.update(restart.folds)
        table.carried_known.update(restart.known)
        for holder, time_ms in restart.floors.items():
            if holder in restart.reserved:
                table.reserved[holder] = time_ms
            elif holder in table.known:  # made reserved: see plan
                table.reserved[holder] = max(time_ms, table._cover(holder))
            else:
                table._set_open(holder, time_ms)
        return table

    def __len__(self) -> int:
        return len(self.open) + len(self.reserved)

    @property
    def global_ms(self) -> int:
        """The highest fold any holder may be under (this run's or a carried one)."""
        return max(self.folds.values(), default=-1)

    def lines(self) -> list[FloorLine]:
        """The live state as lines (for a rewrite)."""
        out: list[FloorLine] = [(h, t, "") for h, t in self.open.items()]
        out.extend((h, t, "r") for h, t in self.reserved.items())
        out.extend((_GLOBAL, t, run) for run, t in self.folds.items())
        for run, holders in self.carried_known.items():
            out.extend((_KNOWN, 0, f"{run} {h}") for h in holders)
        out.extend((_KNOWN, 0, f"{self.run} {h}") for h in self.known)
        return out

    def prune(self, now_ms: int) -> None:
        stale = now_ms - self.window_ms
        for table in (self.open, self.reserved):
            for holder in [h for h, t in table.items() if t <= stale]:
                del table[holder]
        while self._heap and self._heap[0][0] <= stale:
            heapq.heappop(self._heap)
        for run in [r for r, t in self.folds.items() if t <= stale]:
            del self.folds[run]
            self.carried_known.pop(run, None)

    def plan(
        self, raises: Mapping[str, int], reserved: Collection[str]
    ) -> tuple[list[FloorLine], list[str]]:
        """The lines that raise ``raises`` (holder → latest time dated ahead; those in
        ``reserved`` or known are named by an obligation this node signed, or known
        for the run), and the open entries to evict to make room; nothing changes
        until :meth:`apply`. RESOURCE_EXHAUSTED only when reserved entries alone
        would exceed the cap."""
        lines: list[FloorLine] = []
        new_reserved = 0
        new_open: list[tuple[int, str]] = []
        for holder, time_ms in raises.items():
            if holder in self.reserved or holder in reserved or holder in self.known:
                if holder not in self.reserved:
                    new_reserved += 1
                    # made reserved (exempt from every fold after a restart): it must
                    # cover what of this holder's may have been folded
                    time_ms = max(time_ms, self.open.get(holder, -1), self._cover(holder))
                if time_ms > self.reserved.get(holder, -1):
                    lines.append((holder, time_ms, "r"))
            elif time_ms > self.open.get(holder, -1):
                lines.append((holder, time_ms, ""))
                if holder not in self.open:
                    new_open.append((time_ms, holder))
        if new_reserved and len(self.reserved) + new_reserved > self.capacity:
            raise RequestTooLarge(
                f"demand dated ahead of this node's clock: {len(self.reserved)} holders of"
                f" this node's obligations or keys it knows with such demands remembered"
                f" (cap {self.capacity}); check the holders' clocks"
            )
        over = len(self.open) + len(new_open) - self.capacity
        evict: list[str] = []
        if over > 0:
            # the lowest-dated open entries; outdated heap entries dropped on the way,
            # live ones put back (the eviction happens in apply, if the lines are durable)
            heap, kept = self._heap, []
            while heap and len(evict) < over:
                time_ms, holder = heapq.heappop(heap)
                if self.open.get(holder) != time_ms:
                    continue
                kept.append((time_ms, holder))
                if holder not in raises:
                    evict.append(holder)
            for entry in kept:
                heapq.heappush(heap, entry)
            fold = max((self.open[h] for h in evict), default=-1)
            if len(evict) < over:  # more new holders than the table holds: fold the lowest
                new_open.sort()
                spill = {h for _, h in new_open[: over - len(evict)]}
                fold = max([fold] + [t for t, h in new_open if h in spill])
                lines = [e for e in lines if e[0] not in spill]
            if fold > self.folds.get(self.run, -1):
                lines.append((_GLOBAL, fold, self.run))
        return lines, evict

    def apply(self, lines: Sequence[FloorLine], evict: Sequence[str]) -> None:
        """Make the planned raise (its lines durable already) the in-memory state."""
        for holder in evict:
            if self.open.pop(holder, None) is not None:
                self.evicted += 1
        for holder, time_ms, tail in lines:
            if holder == _GLOBAL:
                self.folds[tail] = max(time_ms, self.folds.get(tail, -1))
            elif tail == "r":
                self.open.pop(holder, None)
                self.reserved[holder] = max(time_ms, self.reserved.get(holder, -1))
            elif holder != _KNOWN:
                self._set_open(holder, time_ms)

    def _cover(self, holder: str) -> int:
        """The highest fold that may hold a floor of ``holder``'s: every fold but this
        run's for a holder known for the run, and a previous run's that knew it."""
        return max(
            (
                fold_ms
                for run, fold_ms in self.folds.items()
                if not (run == self.run and holder in self.known)
                and holder not in self.carried_known.get(run, ())
            ),
            default=-1,
        )

    def _set_open(self, holder: str, time_ms: int) -> None:
        if time_ms > self.open.get(holder, -1):
            self.open[holder] = time_ms
            heapq.heappush(self._heap, (time_ms, holder))
            if len(self._heap) > 4 * self.capacity:  # entries raised since: rebuilt
                self._heap = [(t, h) for h, t in self.open.items()]
                heapq.heapify(self._heap)
