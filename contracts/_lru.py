"""One bounded, recency-ordered cache: every in-memory memo of the node and of the
pure verifiers that keeps "the last N things" uses it.

Invariant: after :meth:`BoundedCache.put` returns, the cache holds at most
``maxsize`` entries and at most ``maxweight`` in total weight — except that the
entry just put is never the one evicted, so a single entry heavier than
``maxweight`` is kept alone. Entries leave oldest first, where "old" is the
order of insertion, refreshed by :meth:`get`, :meth:`touch` and by putting a
key again (:meth:`peek` and ``in`` refresh nothing). Each entry evicted calls
``on_evict`` (when given) and adds one to :attr:`evicted`; an entry replaced by a
put of its key or removed with :meth:`pop` is not an eviction. A value of ``None``
(a bounded set) is tested with ``in`` or :meth:`touch`, since :meth:`get` answers
None for a miss.

Why not :func:`functools.lru_cache`: it memoises a function of its arguments,
computing the value on a miss. The sites here need what it cannot give:

* the value is decided outside the cache — only after a signature or a root
  was verified, often in an ``async`` call — and only then put;
* a lookup must sometimes leave the order alone (a FIFO memory of nonces, a
  check that bytes are the very object kept) or only test membership;
* an eviction must update another index (the head cache's key ids) or be
  bounded by bytes, not entries (kept hop bytes);
* the cache belongs to one object (one node, one holder), not to a function
  shared by every instance in the process.

Where :func:`functools.lru_cache` fits — a pure function of immutable bytes or
text — it is used instead (``contracts.batch``, ``contracts.lazy``,
``contracts.identity``, ``nodes.wire``).

Policies that are not "oldest first" stay with their owners: the held values
evict per delivering key (:mod:`nodes.held`), demand and control nonces are
forgotten by date and refused rather than evicted for a signer at its share
(:mod:`nodes.replay`, :mod:`nodes.auth`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """``key`` → ``value``, at most ``maxsize`` entries and ``maxweight`` in total
    ``weigh(value)``; see the module docstring for the order and what counts."""

    __slots__ = ("_data", "_on_evict", "_weigh", "evicted", "maxsize", "maxweight", "weight")

    def __init__(
        self,
        maxsize: int | None,
        *,
        maxweight: int | None = None,
        weigh: Callable[[V], int] | None = None,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        if maxsize is None and maxweight is None:
            raise ValueError("a bounded cache needs maxsize, maxweight or both")
        if maxsize is not None and maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        if maxweight is not None and (maxweight < 0 or weigh is None):
            raise ValueError("maxweight must be >= 0 and comes with a weigh function")
        self.maxsize = maxsize
        self.maxweight = maxweight
        self._weigh = weigh
        self._on_evict = on_evict
        self._data: OrderedDict[K, V] = OrderedDict()
        #: Total weight of the entries held (0 without ``weigh``).
        self.weight = 0
        #: Entries evicted to make room, over the cache's life.
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        """The keys, oldest first (the order refreshes nothing)."""
        return iter(self._data)

    def items(self) -> Iterator[tuple[K, V]]:
        """The entries, oldest first (the order refreshes nothing)."""
        return iter(self._data.items())

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), else None."""
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The value kept for ``key``, else None; the order is left as it was."""
        return self._data.get(key)

    def touch(self, key: K) -> bool:
        """Make ``key`` the most recently used; False if it is not kept."""
        if key not in self._data:
            return False
        self._data.move_to_end(key)
        return True

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` as the most recently used, then evict the oldest
        entries while over a bound (never this one)."""
        data = self._data
        weigh = self._weigh
        if weigh is None:  # bounded by count only: the common, hot case
            data[key] = value
            data.move_to_end(key)
            maxsize = self.maxsize
            while maxsize is not None and len(data) > maxsize:
                self._evict_oldest()
            return
        if key in data:
            self.weight -= weigh(data.pop(key))
        data[key] = value
        self.weight += weigh(value)
        while len(data) > 1 and self._over():
            self.weight -= weigh(self._evict_oldest())

    def pop(self, key: K) -> V | None:
        """Remove ``key`` and return its value, else None; not an eviction."""
        if key not in self._data:
            return None
        value = self._data.pop(key)
        if self._weigh is not None:
            self.weight -= self._weigh(value)
        return value

    def _evict_oldest(self) -> V:
        old_key, old_value = self._data.popitem(last=False)
        self.evicted += 1
        if self._on_evict is not None:
            self._on_evict(old_key, old_value)
        return old_value

    def _over(self) -> bool:
        if self.maxsize is not None and len(self._data) > self.maxsize:
            return True
        return self.maxweight is not None and self.weight > self.maxweight
