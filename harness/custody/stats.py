"""Closed forms, confidence intervals and trial counts of the custody experiment.

Availability is a proportion of independent trials, so its 95% confidence
interval is the Wilson score interval (it stays inside [0, 1] and keeps its
coverage near 0 and 1, where most cells of the sweep are; the normal
approximation does not).

How many trials a cell needs is planned in two steps. Before it runs: the
smallest ``n`` whose Wilson interval around the expected count ``n · a``
(``a`` the closed-form availability) is at most :data:`PLANNED_HALF_WIDTH`
wide on either side (:func:`trials_for`). That alone guarantees nothing: near
1 the Wilson width grows quickly when the measured share falls below the
closed form. So after the planned trials a cell is topped up
(:func:`more_trials`): while its measured interval is wider than
:data:`GOAL_HALF_WIDTH` on either side, it plays the trials the measured
share needs for :data:`PLANNED_HALF_WIDTH`, from the same seeded draws, and
checks again. The total is deterministic per seed, and every cell that ends
meets the goal.
"""

from __future__ import annotations

import itertools
import math

__all__ = [
    "GOAL_HALF_WIDTH",
    "PLANNED_HALF_WIDTH",
    "Z95",
    "closed_form",
    "closed_form_random_placement",
    "half_width",
    "more_trials",
    "trials_for",
    "wilson",
]

#: Two-sided 95% standard normal quantile.
Z95 = 1.959963984540054
#: The goal: every cell's 95% interval at most ±2 percentage points.
GOAL_HALF_WIDTH = 0.02
#: The half-width trial counts are planned (and topped up) for: a margin under the goal.
PLANNED_HALF_WIDTH = 0.018


def closed_form(k: int, p: float) -> float:
    """Availability with ``k`` custodians and independent departures: ``1 - p^(k+1)``."""
    return 1.0 - p ** (k + 1)


def closed_form_random_placement(k: int, p: float, operators: int) -> float:
    """Availability when whole operators depart (probability ``p`` each) and each of
    the ``k + 1`` parties sits on an operator drawn uniformly from ``operators``,
    regardless of the others: ``1 - E[p^D]`` with ``D`` the distinct operators
    among them (enumerated exactly)."""
    if operators < 1:
        raise ValueError(f"operators must be >= 1, got {operators}")
    total = 0.0
    cases = 0
    for placement in itertools.product(range(operators), repeat=k + 1):
        total += p ** len(set(placement))
        cases += 1
    return 1.0 - total / cases


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n`` (``(0, 1)`` for ``n`` 0)."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    phat = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (phat + z2 / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z2 / (4 * n * n)) / denom
    # At 0 or n successes the interval ends exactly at 0 or 1 (not a rounding off it).
    lo = 0.0 if successes == 0 else max(0.0, min(phat, centre - half))
    hi = 1.0 if successes == n else min(1.0, max(phat, centre + half))
    return lo, hi


def _half_width_at(a: float, n: int) -> float:
    """The Wilson half-width at proportion ``a`` of ``n`` (``a · n`` need not be whole,
    so the width falls strictly with ``n``)."""
    z2 = Z95 * Z95
    return Z95 * math.sqrt(a * (1 - a) / n + z2 / (4 * n * n)) / (1.0 + z2 / n)


def trials_for(availability: float, half_width: float = PLANNED_HALF_WIDTH) -> int:
    """The fewest trials whose Wilson interval at the expected count is within
    ``half_width`` on either side (binary search; the width falls with ``n``)."""
    if not 0.0 <= availability <= 1.0:
        raise ValueError(f"availability must be within 0..1, got {availability}")
    if not 0.0 < half_width < 0.5:
        raise ValueError(f"half_width must be within (0, 0.5), got {half_width}")
    lo, hi = 1, 1
    while _half_width_at(availability, hi) > half_width:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _half_width_at(availability, mid) <= half_width:
            hi = mid
        else:
            lo = mid + 1
    return lo


def half_width(successes: int, n: int) -> float:
    """Half the width of the Wilson interval of ``successes`` out of ``n``."""
    lo, hi = wilson(successes, n)
    return (hi - lo) / 2


def more_trials(successes: int, n: int, goal: float = GOAL_HALF_WIDTH) -> int:
    """Trials to add to a cell that measured ``successes`` of ``n``: 0 when its Wilson
    interval is within ``goal`` on either side, else enough that, at the measured
    share, the interval would be within the planning margin (``goal`` less a tenth)."""
    if not 0.0 < goal < 0.5:
        raise ValueError(f"goal must be within (0, 0.5), got {goal}")
    if n > 0 and half_width(successes, n) <= goal:
        return 0
    share = successes / n if n > 0 else 0.5
    return max(1, trials_for(share, 0.9 * goal) - n)
