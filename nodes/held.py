"""Delivered values a node holds, accounted per delivering key: no key evicts another's.

A value is held under its ``value_ref`` for the key that delivered it (the
call's signer; ``None`` for an in-process caller). Keys are of two classes:
**reserved** — the node itself, its operator keys, its peers' pinned node ids,
in-process callers — and **strangers**, every other key (Ed25519 keys cost
nothing, so "a peer delivering as itself" may be anyone).

Invariant, over the caps (``max_values``, ``max_bytes``):

* a stranger's delivery never evicts or replaces a reserved key's value: when
  only reserved values would be left to evict it is refused
  (:class:`nodes.errors.RequestTooLarge`), and a ``value_ref`` a reserved key
  delivered is not replaced by a stranger (:class:`nodes.errors.HeldConflict`);
* a reserved delivery evicts strangers' values first;
* within a class, the victim is the oldest value of the key holding the most
  (values, or bytes when the byte cap is what is exceeded), so one key that
  floods evicts its own values, and a key holding little keeps it;
* the value just delivered is never the one evicted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from nodes.errors import HeldConflict, RequestTooLarge

__all__ = ["HeldValues"]

V = TypeVar("V")
#: The account of an in-process caller (no signed call).
LOCAL = ""


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    by: str
    size: int
    reserved: bool


class HeldValues(Generic[V]):
    """``value_ref`` → value, with per-key accounts; see the module docstring."""

    def __init__(
        self, *, max_values: int, max_bytes: int, on_evict: Callable[[str, V], None]
    ) -> None:
        self.max_values = max_values
        self.max_bytes = max_bytes
        self._on_evict = on_evict
        self._entries: dict[str, _Entry[V]] = {}
        # key → its refs, oldest first (a dict keeps insertion order). Not a
        # contracts._lru cache: the victim is chosen across keys, by class and by
        # who holds the most, never simply the oldest value.
        self._refs: dict[str, dict[str, None]] = {}
        self._key_bytes: dict[str, int] = {}
        # Per class (reserved?), keys by how many values they hold: the key holding
        # the most is found among the few distinct counts, not by scanning keys.
        self._by_count: dict[bool, dict[int, dict[str, None]]] = {False: {}, True: {}}
        self.bytes = 0
        self._reserved_count = 0
        self._reserved_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, value_ref: str) -> V | None:
        entry = self._entries.get(value_ref)
        return None if entry is None else entry.value

    def held_by(self, key: str | None) -> int:
        return len(self._refs.get(key or LOCAL, ()))

    def put(self, value_ref: str, value: V, size: int, *, by: str | None, reserved: bool) -> None:
        """Hold ``value`` for ``by``; refuse, or evict, as the module docstring says."""
        key = by or LOCAL
        old = self._entries.get(value_ref)
        if old is not None and old.reserved and not reserved and old.by != key:
            raise HeldConflict(
                f"deliver {value_ref!r:.80}: held for key {old.by[:16] or 'local'}…, which this"
                f" node reserves (operator, configured peer or itself); key {key[:16]}… may"
                " not replace it"
            )
        if not reserved:
            replaced = old is not None and old.reserved
            kept_count = self._reserved_count - (1 if replaced else 0)
            kept_bytes = self._reserved_bytes - (old.size if old is not None and replaced else 0)
            if kept_count + 1 > self.max_values or kept_bytes + size > self.max_bytes:
                raise RequestTooLarge(
                    f"deliver {value_ref!r:.80}: held values are full of deliveries from this"
                    f" node's operator and configured peers ({kept_count} values,"
                    f" {kept_bytes} bytes; caps {self.max_values}, {self.max_bytes})"
                )
        if old is not None:
            self._drop(value_ref)
        self._entries[value_ref] = _Entry(value, key, size, reserved)
        refs = self._refs.setdefault(key, {})
        self._recount(key, reserved, len(refs), len(refs) + 1)
        refs[value_ref] = None
        self._key_bytes[key] = self._key_bytes.get(key, 0) + size
        self.bytes += size
        if reserved:
            self._reserved_count += 1
            self._reserved_bytes += size
        while len(self._entries) > self.max_values or self.bytes > self.max_bytes:
            victim = self._victim(by_bytes=len(self._entries) <= self.max_values, keep=value_ref)
            if victim is None:
                break
            evicted = self._drop(victim)
            self._on_evict(victim, evicted.value)

    def _only(self, key: str, value_ref: str) -> bool:
        refs = self._refs[key]
        return len(refs) == 1 and value_ref in refs

    def _recount(self, key: str, reserved: bool, old: int, new: int) -> None:
        buckets = self._by_count[reserved]
        if old:
            bucket = buckets[old]
            del bucket[key]
            if not bucket:
                del buckets[old]
        if new:
            buckets.setdefault(new, {})[key] = None

    def _victim(self, *, by_bytes: bool, keep: str) -> str | None:
        """The oldest value of the key holding the most, strangers first (by bytes: a
        scan of the keys, only once the byte cap is exceeded)."""
        for reserved in (False, True):
            best: str | None = None
            if by_bytes:
                most = -1
                for key, refs in self._refs.items():
                    first = next(iter(refs))
                    if self._entries[first].reserved is not reserved or self._only(key, keep):
                        continue
                    if self._key_bytes[key] > most:
                        best, most = key, self._key_bytes[key]
            else:
                for count in sorted(self._by_count[reserved], reverse=True):
                    keys = self._by_count[reserved][count]
                    best = next((k for k in keys if not self._only(k, keep)), None)
                    if best is not None:
                        break
            if best is not None:
                return next(ref for ref in self._refs[best] if ref != keep)
        return None

    def _drop(self, value_ref: str) -> _Entry[V]:
        entry = self._entries.pop(value_ref)
        refs = self._refs[entry.by]
        self._recount(entry.by, entry.reserved, len(refs), len(refs) - 1)
        del refs[value_ref]
        if not refs:
            del self._refs[entry.by]
            del self._key_bytes[entry.by]
        else:
            self._key_bytes[entry.by] -= entry.size
        self.bytes -= entry.size
        if entry.reserved:
            self._reserved_count -= 1
            self._reserved_bytes -= entry.size
        return entry
