"""Provenance-vector arithmetic (spec §1) and the lossless base-axis invariant."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.axes import AXES, BASE_AXES, clip01, degrade, floor, merge
from harness.config import DEFAULT_PROFILES
from harness.replay import ReplayParams, replay
from harness.trajectory import generate

score = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
vector = st.lists(score, min_size=5, max_size=5)


@given(st.lists(vector, min_size=1, max_size=6))
def test_merge_is_elementwise_min(vectors: list[list[float]]) -> None:
    merged = merge(vectors)
    for i in range(len(AXES)):
        assert merged[i] == min(v[i] for v in vectors)


@given(vector, vector)
def test_merge_is_commutative_and_idempotent(a: list[float], b: list[float]) -> None:
    assert merge([a, b]) == merge([b, a])
    assert merge([a, a]) == a
    assert merge([merge([a, b]), b]) == merge([a, b])


@given(st.lists(vector, min_size=1, max_size=4))
def test_merge_never_raises_a_score(vectors: list[list[float]]) -> None:
    merged = merge(vectors)
    for v in vectors:
        assert all(m <= x for m, x in zip(merged, v, strict=True))


def test_merge_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one input"):
        merge([])


@given(vector, st.sampled_from(AXES), st.floats(min_value=0.0, max_value=2.0))
def test_degrade_and_floor_only_lower_and_stay_in_unit_interval(
    vec: list[float], axis: str, factor: float
) -> None:
    before = list(vec)
    degrade(vec, axis, factor)
    i = AXES.index(axis)
    assert 0.0 <= vec[i] <= 1.0
    assert vec[i] == clip01(before[i] * factor)
    floor(vec, axis, factor)
    assert vec[i] <= min(before[i] * factor, 1.0) + 1e-15
    assert vec[i] == min(clip01(before[i] * factor), clip01(factor))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    cadence=st.sampled_from([2, 3, 5, 10, 25]),
    profile=st.sampled_from(sorted(DEFAULT_PROFILES)),
    penalty=st.sampled_from([0.0, 0.02, 0.1]),
)
def test_compaction_never_touches_base_axes(
    seed: int, cadence: int, profile: str, penalty: float
) -> None:
    # Part 4's claim: running-min base axes survive compaction losslessly, so the
    # structural arms' base-axis drift against the oracle is exactly zero.
    events = generate(seed, 120, 5, DEFAULT_PROFILES[profile])
    result = replay(events, ReplayParams(cadence=cadence, penalty=penalty, prose_seed=seed))
    for arm, axis, n, total, _mae in result.drift_rows:
        if arm in ("structural_min", "structural_perhop") and axis in BASE_AXES:
            assert n == 24
            assert total == 0.0, (arm, axis)
    for row in result.gate_rows:
        arm, _policy, gate_class = row[0], row[1], row[2]
        if arm != "prose" and gate_class == "score":
            assert row[7] == 0
            assert row[8] == 0
