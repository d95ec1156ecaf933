"""Synthetic trajectory generator (spec §2, Part 5).

One ``numpy.random.default_rng(seed)`` drives everything and is consumed in
exactly the spec's order, so a (seed, steps, D, profile) tuple names one
event sequence forever.

The op draw ``rng.choice(5, p=weights)`` is the hot call. numpy implements
it as ``cdf = cumsum(p); cdf /= cdf[-1]; u = rng.random();
idx = searchsorted(cdf, u, side="right")``; :func:`op_cdf` computes the same
cdf with numpy once and ``bisect_right`` reproduces the search, so the
draw consumes the same single double and returns the same index
(``tests/harness/test_trajectory.py`` checks equality against
``rng.choice`` over many seeds).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from harness.config import Profile
from harness.events import Decision, Event, Merge, NewValue, Op, OpEvent, Retire

__all__ = [
    "MAX_RECENTS",
    "OPS",
    "OP_WEIGHTS",
    "generate",
    "op_cdf",
]

OPS: tuple[Op, ...] = (
    Op.SOURCE_FETCH,
    Op.CACHE_READ,
    Op.LLM_TRANSFORM,
    Op.TOOL_CALL,
    Op.MERGE,
)
OP_WEIGHTS: tuple[float, ...] = (0.18, 0.22, 0.30, 0.22, 0.08)
MAX_RECENTS = 6

_STALE_FACTOR = 0.70
_FRESH_READ_FACTOR = 0.95
_FALLBACK_FACTOR = 0.65
_FLAKY_FACTOR = 0.65


def op_cdf(weights: tuple[float, ...] = OP_WEIGHTS) -> list[float]:
    """The cdf numpy's ``Generator.choice(p=...)`` searches, as Python floats."""
    p = np.asarray(weights, dtype=np.float64)
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return [float(x) for x in cdf]


_CDF = op_cdf()


def generate(seed: int, steps: int, decision_every: int, profile: Profile) -> list[Event]:
    """The event sequence for one run, in generation order (spec §2)."""
    rng = np.random.default_rng(seed)
    random = rng.random
    cdf = _CDF
    p_unverified = profile.p_unverified
    p_fallback = profile.p_fallback
    p_flaky = profile.p_flaky
    p_stale = profile.p_stale

    events: list[Event] = [NewValue(0, 0, False)]
    append = events.append
    working = 0
    recents: list[int] = []
    next_id = 1

    def replace_working(new_id: int, step: int) -> None:
        nonlocal working
        recents.append(working)
        working = new_id
        if len(recents) > MAX_RECENTS:
            append(Retire(step, recents.pop(0)))

    for step in range(1, steps + 1):
        op = bisect_right(cdf, random())
        if op == 0:  # SOURCE_FETCH
            unverified = random() < p_unverified
            new_id = next_id
            next_id += 1
            append(NewValue(step, new_id, unverified))
            replace_working(new_id, step)
        elif op == 1:  # CACHE_READ
            if random() < p_stale:
                append(
                    OpEvent(
                        step,
                        working,
                        Op.CACHE_READ,
                        "freshness",
                        _STALE_FACTOR,
                        f"taint:stale_cache:{step}",
                    )
                )
            else:
                append(OpEvent(step, working, Op.CACHE_READ, "freshness", _FRESH_READ_FACTOR, None))
        elif op == 2:  # LLM_TRANSFORM
            if random() < p_fallback:
                append(
                    OpEvent(
                        step,
                        working,
                        Op.LLM_TRANSFORM,
                        "capability",
                        _FALLBACK_FACTOR,
                        f"taint:fallback_model:{step}",
                    )
                )
            else:
                append(OpEvent(step, working, Op.LLM_TRANSFORM, None, 1.0, None))
        elif op == 3:  # TOOL_CALL
            if random() < p_flaky:
                append(
                    OpEvent(
                        step,
                        working,
                        Op.TOOL_CALL,
                        "tool_integrity",
                        _FLAKY_FACTOR,
                        f"taint:tool_flaky:{step}",
                    )
                )
            else:
                append(OpEvent(step, working, Op.TOOL_CALL, None, 1.0, None))
        else:  # MERGE
            if not recents:
                append(OpEvent(step, working, Op.MERGE, None, 1.0, None))
            else:
                k = int(rng.integers(1, min(3, len(recents)) + 1))
                idx = rng.choice(len(recents), size=k, replace=False)
                picked = tuple(recents[int(i)] for i in sorted(idx.tolist()))
                new_id = next_id
                next_id += 1
                append(Merge(step, new_id, (working, *picked)))
                replace_working(new_id, step)
        if step % decision_every == 0:
            append(Decision(step, working))
    return events
