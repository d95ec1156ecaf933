"""Lineage: hops, the folded prefix, truncation and the cold hop log (spec §3–§4).

A value's lineage is its visible hops (ordered by (step, hop_id)), an
optional folded prefix and an optional prose blob. Truncation at compaction
(Part 4's lossy step) keeps the last K visible hops and folds the older ones
into counts: the folded taint *ids* are gone from ``tainted_by``; only
``n_taints_folded`` and the pointers ``folded_hop_ids`` into the cold hop
log survive. Rehydration dereferences those pointers — possible only while
the gate and the log share a process (the pointers dangle across agents).

Hops are immutable and shared between arms and values; a value owns its
visible-hop list (no aliasing), never the hops themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter
from typing import Any, assert_never

from harness.events import Hop, Merge, NewValue, OpEvent, hop_id_for

__all__ = [
    "FoldedPrefix",
    "HopBytes",
    "HopLog",
    "build_hop",
    "hop_bytes",
    "hop_fields",
    "merge_folded",
    "merge_visible",
    "sort_hops",
]

_HOP_ORDER = attrgetter("step", "hop_id")


@dataclass(frozen=True, slots=True)
class FoldedPrefix:
    """What survives of the folded hops: counts and pointers (spec §4).

    ``n_hops_folded`` and ``n_taints_folded`` are sums over merged inputs
    (not deduplicated); ``folded_hop_ids`` is deduplicated keeping first
    occurrence. ``op_counts`` is sorted by op name.
    """

    n_hops_folded: int
    op_counts: tuple[tuple[str, int], ...]
    n_taints_folded: int
    folded_hop_ids: tuple[str, ...]

    def absorb(self, hops: Sequence[Hop]) -> FoldedPrefix:
        """A new prefix with ``hops`` (oldest first) folded in."""
        counts = dict(self.op_counts)
        n_taints = self.n_taints_folded
        for hop in hops:
            counts[hop.op] = counts.get(hop.op, 0) + 1
            n_taints += len(hop.taints_added)
        return FoldedPrefix(
            self.n_hops_folded + len(hops),
            tuple(sorted(counts.items())),
            n_taints,
            self.folded_hop_ids + tuple(h.hop_id for h in hops),
        )


EMPTY_PREFIX = FoldedPrefix(0, (), 0, ())


def merge_folded(prefixes: Sequence[FoldedPrefix | None]) -> FoldedPrefix | None:
    """Combine the inputs' prefixes: counts summed, ids concatenated, deduplicated.

    A lone prefix (only one input has one) is carried over unchanged. A hop
    re-folded after a merge (folded in one input, still visible in another)
    can then appear twice in ``folded_hop_ids`` and is fetched twice on
    rehydration — the Part 5 lab behaves exactly so, and its published
    lookup counts (459 and 639.9 per 100 decisions) include those repeats.
    """
    present = [p for p in prefixes if p is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    counts: dict[str, int] = {}
    for p in present:
        for op, n in p.op_counts:
            counts[op] = counts.get(op, 0) + n
    ids: dict[str, None] = {}
    for p in present:
        for hop_id in p.folded_hop_ids:
            ids[hop_id] = None
    return FoldedPrefix(
        sum(p.n_hops_folded for p in present),
        tuple(sorted(counts.items())),
        sum(p.n_taints_folded for p in present),
        tuple(ids),
    )


def sort_hops(hops: Iterable[Hop]) -> list[Hop]:
    """Deduplicate by hop_id (first wins) and sort by (step, hop_id)."""
    unique: dict[str, Hop] = {}
    for hop in hops:
        if hop.hop_id not in unique:
            unique[hop.hop_id] = hop
    return sorted(unique.values(), key=_HOP_ORDER)


def merge_visible(lists: Sequence[list[Hop]]) -> list[Hop]:
    """Union of the inputs' visible hops, deduplicated, sorted (spec §4)."""
    if len(lists) == 1:
        return list(lists[0])
    return sort_hops(h for hops in lists for h in hops)


def build_hop(event: NewValue | OpEvent | Merge, parents: tuple[str, ...]) -> Hop:
    """The hop an event yields (spec §3); ``parents`` are the inputs' tips."""
    step = event.step
    hop_id = hop_id_for(step)
    if isinstance(event, NewValue):
        deltas: list[tuple[str, float]] = []
        taints: list[str] = []
        if event.unverified:
            deltas.append(("verification", 0.45))
            taints.append(f"taint:unverified_web:{step}")
        if event.axis is not None:
            deltas.append((event.axis, event.factor))
        if event.taint is not None:
            taints.append(event.taint)
        return Hop(hop_id, step, str(event.op), tuple(deltas), tuple(taints), ())
    if isinstance(event, OpEvent):
        return Hop(
            hop_id,
            step,
            str(event.op),
            ((event.axis, event.factor),) if event.axis is not None else (),
            (event.taint,) if event.taint is not None else (),
            parents,
        )
    return Hop(hop_id, step, str(event.op), (), (), parents)


def hop_fields(hop: Hop) -> dict[str, Any]:
    """The hop's spec fields (§3) as a JSON object: what is logged, served and read."""
    return {
        "hop_id": hop.hop_id,
        "step": hop.step,
        "op": hop.op,
        "axis_deltas": dict(hop.axis_deltas),
        "taints_added": list(hop.taints_added),
        "parent_hop_ids": list(hop.parent_hop_ids),
    }


def hop_bytes(hop: Hop) -> int:
    """Size of the hop's canonical JSON: sorted keys, no spaces, UTF-8.

    ``json.dumps(hop_fields(hop), sort_keys=True, separators=(",", ":"))`` —
    what a rehydrating gate reads per lookup.
    """
    doc = hop_fields(hop)
    return len(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8"))


class HopBytes(StrEnum):
    """How a rehydrating gate counts the bytes of one fetched hop.

    ``canonical``: :func:`hop_bytes`, the hop's canonical JSON (synthetic
    runs; the pinned decision-log fingerprints include these counts).
    ``jsonl_line``: the same JSON as one line of a JSONL hop log, newline
    included (+1 byte per hop) — what the Part 5 lab reports for its trace
    replays (shared/fixtures/lab-trace/expected_gate_metrics.csv), so
    lab-schema trace replays count this way.
    """

    CANONICAL = "canonical"
    JSONL_LINE = "jsonl_line"

    @property
    def framing(self) -> int:
        match self:
            case HopBytes.CANONICAL:
                return 0
            case HopBytes.JSONL_LINE:
                return 1
            case _:
                assert_never(self)


class HopLog:
    """The append-only cold hop log of one run (in-process, keyed per run).

    Hop ids restart every run, so a log must never be shared across runs.
    """

    __slots__ = ("_bytes", "_framing", "_hops", "_memo")

    def __init__(self, accounting: HopBytes = HopBytes.CANONICAL) -> None:
        self._framing = accounting.framing
        self._hops: dict[str, Hop] = {}
        self._bytes: dict[str, int] = {}
        # fetches keyed by the identity of the (immutable) id tuple; the entry
        # keeps the tuple alive, so its id cannot be reused while memoised
        self._memo: dict[int, tuple[Sequence[str], list[Hop], int]] = {}

    def append(self, hop: Hop) -> None:
        if hop.hop_id in self._hops:
            raise ValueError(
                f"hop log: duplicate hop id {hop.hop_id} at step {hop.step}"
                " (hop ids must be unique within a run)"
            )
        self._hops[hop.hop_id] = hop

    def __len__(self) -> int:
        return len(self._hops)

    def get(self, hop_id: str) -> Hop:
        return self._hops[hop_id]

    def size_of(self, hop_id: str) -> int:
        size = self._bytes.get(hop_id)
        if size is None:
            size = hop_bytes(self._hops[hop_id]) + self._framing
            self._bytes[hop_id] = size
        return size

    def fetch(self, hop_ids: Sequence[str]) -> tuple[list[Hop], int]:
        """The hops and the bytes of their canonical JSON.

        A folded prefix is immutable and shared, so repeated fetches of the
        same id tuple (several gates, several modes) are served from a memo;
        the caller must not mutate the returned list.
        """
        key = id(hop_ids)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is hop_ids:
            return hit[1], hit[2]
        hops = [self._hops[h] for h in hop_ids]
        nbytes = sum(self.size_of(h) for h in hop_ids)
        if isinstance(hop_ids, tuple):
            self._memo[key] = (hop_ids, hops, nbytes)
        return hops, nbytes
