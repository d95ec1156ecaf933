"""Growth exponents with intervals over seeds: each seed's own log-log slope."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest

from harness.simulate.report import confidence_interval, growth_intervals
from harness.simulate.run import CellRow, SimResult
from harness.simulate.workload import Workload


def _row(n: int, seed: int, decisions: int, rpcs: int) -> CellRow:
    zero = {
        f.name: (0.0 if f.type == "float" else "" if f.type == "str" else 0)
        for f in fields(CellRow)
    }
    base = CellRow(**zero)  # type: ignore[arg-type]
    return replace(base, agents_total=n, seed=seed, agents=n, decisions=decisions, rpcs=rpcs,
                   bytes=1000 * decisions, sign_ops=decisions, verify_ops=decisions)  # fmt: skip


def test_growth_exponent_interval_is_over_the_seeds_own_slopes() -> None:
    exponents = {0: 0.1, 1: 0.2, 2: 0.45}
    rows = [
        _row(n, s, 100, round(100 * 10 * n**k)) for s, k in exponents.items() for n in (10, 1000)
    ]
    w = replace(Workload(), agents=(10, 1000), seeds=(0, 1, 2))
    spread = growth_intervals(SimResult(w, rows))
    mean, half, k = spread["rpcs"]
    slopes = [
        math.log(round(1000 * 1000**e) / round(1000 * 10**e)) / math.log(100)
        for e in exponents.values()
    ]
    assert k == 3
    assert (mean, half) == pytest.approx(confidence_interval(slopes))
    assert half > 0.1
    # costs that do not grow: slope 0 in every seed, so no spread
    assert spread["sign_ops"] == (0.0, 0.0, 3)


def test_one_size_gives_no_growth_interval() -> None:
    w = replace(Workload(), agents=(10,), seeds=(0, 1))
    spread = growth_intervals(SimResult(w, [_row(10, s, 10, 10) for s in (0, 1)]))
    assert all(k == 0 and math.isnan(m) for m, _, k in spread.values())
