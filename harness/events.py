"""The event stream every arm replays (experiment spec §2–§3).

A trajectory — synthetic (:mod:`harness.trajectory`) or replayed from a real
agent log (:mod:`harness.trace`) — is an ordered sequence of these events.
All four arms see the same events in the same order (spec §5); hops are built
from events identically for every arm (spec §3).

Events carry only what the spec says they carry. Hop ids restart at every
run (``h{step:06d}``): anything that stores hops across runs must scope them
by (run, epoch, origin) — the key-recycling hazard of seed 000.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "AXES",
    "BASE_AXES",
    "Decision",
    "Event",
    "Hop",
    "Merge",
    "NewValue",
    "Op",
    "OpEvent",
    "Retire",
    "hop_id_for",
]

#: Canonical axis order (spec §1). The first four are the base axes.
AXES: tuple[str, ...] = (
    "freshness",
    "capability",
    "tool_integrity",
    "verification",
    "reconstruction",
)
BASE_AXES: tuple[str, ...] = AXES[:4]


class Op(StrEnum):
    """Synthetic ops, in the generator's weight order (spec §2)."""

    SOURCE_FETCH = "SOURCE_FETCH"
    CACHE_READ = "CACHE_READ"
    LLM_TRANSFORM = "LLM_TRANSFORM"
    TOOL_CALL = "TOOL_CALL"
    MERGE = "MERGE"


def hop_id_for(step: int) -> str:
    """``h{step:06d}`` — six digits, zero padded (spec §3)."""
    return f"h{step:06d}"


@dataclass(frozen=True, slots=True)
class Hop:
    """One lineage record (spec §3). Identical for all arms.

    ``axis_deltas`` is a tuple of (axis, factor) pairs in the order they
    apply; ``parent_hop_ids`` is empty for a fetch, the working value's tip
    for an op, and every input's tip (input order) for a merge.
    """

    hop_id: str
    step: int
    op: str
    axis_deltas: tuple[tuple[str, float], ...]
    taints_added: tuple[str, ...]
    parent_hop_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NewValue:
    """A fetch creates value ``value_id`` (``unverified`` → verification ×0.45)."""

    step: int
    value_id: int
    unverified: bool
    op: str = Op.SOURCE_FETCH
    #: Trace mode may set axis deltas/taints from rules; synthetic mode leaves
    #: these ``None`` and the hop is derived from ``unverified``.
    axis: str | None = None
    factor: float = 1.0
    taint: str | None = None


@dataclass(frozen=True, slots=True)
class OpEvent:
    """An op on an existing value: at most one axis degraded, at most one taint."""

    step: int
    value_id: int
    op: str
    axis: str | None
    factor: float
    taint: str | None


@dataclass(frozen=True, slots=True)
class Merge:
    """A merge creating ``value_id`` from ``inputs`` (working value first)."""

    step: int
    value_id: int
    inputs: tuple[int, ...]
    op: str = Op.MERGE


@dataclass(frozen=True, slots=True)
class Retire:
    """The value leaves the recents list; arms drop it. Yields no hop."""

    step: int
    value_id: int


@dataclass(frozen=True, slots=True)
class Decision:
    """Gates fire on ``value_id`` at ``step``. Yields no hop."""

    step: int
    value_id: int


Event = NewValue | OpEvent | Merge | Retire | Decision
