"""The provenance vector and its three operations (spec §1, Part 3/4).

A vector is five scores in [0, 1], in the canonical axis order
``freshness, capability, tool_integrity, verification, reconstruction``;
1.0 is pristine. Every operation can only lower a score:

- ``degrade(axis, f)``: score := clip01(score × f)
- ``floor(axis, v)``:  score := min(score, clip01(v))
- ``merge(vectors)``:  element-wise min over the inputs (Part 3)

The replay keeps vectors as plain 5-element lists indexed by
:data:`AXIS_INDEX` because they are updated on every hop; this module's
functions are the single definition of the arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.events import AXES, BASE_AXES

__all__ = [
    "AXES",
    "AXIS_INDEX",
    "BASE_AXES",
    "RECON",
    "Vector",
    "clip01",
    "degrade",
    "floor",
    "merge",
    "pristine",
]

AXIS_INDEX: dict[str, int] = {axis: i for i, axis in enumerate(AXES)}
#: Index of the reconstruction axis (only compaction lowers it).
RECON = AXIS_INDEX["reconstruction"]

Vector = list[float]


def clip01(x: float) -> float:
    """Clamp to [0, 1]."""
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


def pristine() -> Vector:
    return [1.0, 1.0, 1.0, 1.0, 1.0]


def degrade(vec: Vector, axis: str, factor: float) -> None:
    """score := clip01(score × factor), in place."""
    i = AXIS_INDEX[axis]
    vec[i] = clip01(vec[i] * factor)


def floor(vec: Vector, axis: str, value: float) -> None:
    """score := min(score, clip01(value)), in place."""
    i = AXIS_INDEX[axis]
    v = clip01(value)
    if v < vec[i]:
        vec[i] = v


def merge(vectors: Iterable[Sequence[float]]) -> Vector:
    """Element-wise min across inputs (Part 3); an empty input is an error."""
    vs = list(vectors)
    if not vs:
        raise ValueError("merge() needs at least one input vector")
    if len(vs) == 1:
        return list(vs[0])
    return [min(column) for column in zip(*vs, strict=True)]
