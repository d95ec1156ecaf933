"""The nonces of signed demands a node answered in this run: no pool a stranger can drain.

Invariant: a demand whose ``(holder, nonce)`` is remembered here is refused
(:class:`contracts.errors.ReplayedNonce`, ALREADY_EXISTS), and so is every
demand dated at or below :attr:`DemandNonces.floor_ms` (:class:`nodes.errors.
DemandPredatesFloor`, ABORTED: its nonce may have been forgotten under load;
the holder issues a fresh demand). So a recorded demand is never answered
twice, however full the memory gets.

Who can fill it, and what that costs them:

* Only demands whose holder signature was **verified** are recorded (the
  caller, the origin's answers in :mod:`nodes.origin`, decides). A bearer demand
  answered without its signature checked names a holder and nonce anyone can
  choose, so remembering it would protect nothing and hand a stranger with no
  key a node-wide pool to fill; it is checked against this memory (a lookup)
  and answered, and moves no state.
* A full memory does not refuse. A signer that already holds
  ``per_signer`` nonces is refused alone (:class:`nodes.errors.RequestTooLarge`,
  RESOURCE_EXHAUSTED, naming it); anyone else's demand evicts the
  **lowest-dated** nonces, and the floor rises to the latest date evicted.
  Keeping the newest dates means an honest demand, dated about now, is
  refused only while the memory holds ``capacity`` verified demands dated
  after it — a rate of signed demands far above what the node can verify.
* Nonces are forgotten once their demand is stale (dated more than
  ``keep_ms`` before now): the freshness window refuses a replay by then.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from contracts.errors import ReplayedNonce
from nodes.errors import DemandPredatesFloor, RequestTooLarge

__all__ = ["DemandNonces"]


class DemandNonces:
    """Remembered ``(holder, nonce)`` → demand time (ms), ordered by date; see the module."""

    __slots__ = ("_by_date", "_per", "_seen", "capacity", "evicted", "floor_ms", "keep_ms",
                 "per_signer", "what")  # fmt: skip

    def __init__(
        self, *, capacity: int, per_signer: int, keep_ms: int, what: str = "demand"
    ) -> None:
        """``what`` names the signed thing in refusals ("demand", "control call")."""
        if not 0 < per_signer <= capacity:
            raise ValueError(f"per_signer must be 1..{capacity}, got {per_signer}")
        self.capacity = capacity
        self.per_signer = per_signer
        self.keep_ms = keep_ms
        self.what = what
        self.floor_ms = 0
        self.evicted = 0
        self._seen: dict[tuple[str, str], int] = {}
        self._by_date: list[tuple[int, str, str]] = []
        self._per: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def held_by(self, holder: str) -> int:
        return self._per.get(holder, 0)

    def check(self, holder: str, nonce: str) -> None:
        """Refuse a demand whose nonce is remembered (a dict lookup: no signature needed)."""
        time_ms = self._seen.get((holder, nonce))
        if time_ms is not None:
            raise ReplayedNonce(
                f"{self.what} nonce {nonce[:16]} from {holder[:12]}… already answered"
                f" ({self.what} dated {time_ms} ms, remembered until {time_ms + self.keep_ms} ms)"
            )

    def check_floor(self, holder: str, time_ms: int) -> None:
        """Refuse a demand to be recorded that is dated at or below the eviction floor."""
        if time_ms <= self.floor_ms:
            raise DemandPredatesFloor(
                f"{self.what} from {holder[:12]}… is dated {time_ms} ms, at or below"
                f" {self.floor_ms} ms: under load this node forgot the nonces of signed"
                f" {self.what}s dated up to then; issue a fresh one"
            )

    def prune(self, now_ms: int) -> None:
        """Forget the nonces of demands dated more than ``keep_ms`` before ``now_ms``."""
        heap = self._by_date
        while heap and heap[0][0] + self.keep_ms < now_ms:
            self._forget(heapq.heappop(heap))

    def claim(self, entries: Sequence[tuple[str, str, int]]) -> None:
        """Record ``(holder, nonce, time_ms)`` entries (already checked), making room
        by evicting the lowest-dated nonces; a signer at its share of a full memory
        is refused (RESOURCE_EXHAUSTED) before anything changes."""
        if len(self._seen) + len(entries) > self.capacity:
            wanted: dict[str, int] = {}
            for holder, _, _ in entries:
                wanted[holder] = wanted.get(holder, 0) + 1
            for holder, n in wanted.items():
                if self._per.get(holder, 0) + n > self.per_signer:
                    raise RequestTooLarge(
                        f"{self.what}: signer {holder[:16]}… has {self._per.get(holder, 0)}"
                        f" signed {self.what}s remembered, its share ({self.per_signer}) of"
                        f" this node's full nonce memory ({self.capacity}); try again shortly"
                    )
            heap = self._by_date
            while heap and len(self._seen) + len(entries) > self.capacity:
                entry = heapq.heappop(heap)
                if self._forget(entry):
                    self.evicted += 1
                    self.floor_ms = max(self.floor_ms, entry[0])
        for holder, nonce, time_ms in entries:
            self.add(holder, nonce, time_ms)

    def add(self, holder: str, nonce: str, time_ms: int) -> None:
        """Record one nonce unconditionally (reloaded from disk, or claimed)."""
        key = (holder, nonce)
        if key in self._seen:
            return
        self._seen[key] = time_ms
        self._per[holder] = self._per.get(holder, 0) + 1
        heapq.heappush(self._by_date, (time_ms, holder, nonce))

    def release(self, entries: Iterable[tuple[str, str, int]]) -> None:
        """Give back claimed nonces whose demands were not answered (their heap
        entries stay and are skipped when they come up)."""
        for holder, nonce, time_ms in entries:
            if self._seen.get((holder, nonce)) == time_ms:
                del self._seen[(holder, nonce)]
                self._uncount(holder)

    def _forget(self, entry: tuple[int, str, str]) -> bool:
        time_ms, holder, nonce = entry
        if self._seen.get((holder, nonce)) != time_ms:
            return False  # released before
        del self._seen[(holder, nonce)]
        self._uncount(holder)
        return True

    def _uncount(self, holder: str) -> None:
        left = self._per[holder] - 1
        if left:
            self._per[holder] = left
        else:
            del self._per[holder]
