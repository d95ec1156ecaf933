"""The synthetic generator (spec §2): exact rng consumption and event topology."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from harness.config import DEFAULT_PROFILES
from harness.events import Decision, Merge, NewValue, OpEvent, Retire
from harness.trajectory import MAX_RECENTS, OP_WEIGHTS, generate, op_cdf


def test_bisect_draw_equals_numpy_choice_over_many_seeds() -> None:
    cdf = op_cdf()
    for seed in range(200):
        a = np.random.default_rng(seed)
        b = np.random.default_rng(seed)
        for _ in range(250):
            expected = int(a.choice(5, p=list(OP_WEIGHTS)))
            assert bisect_right(cdf, b.random()) == expected
        # both streams consumed exactly the same number of doubles
        assert a.random() == b.random()


def test_same_seed_same_events_and_different_seed_differs() -> None:
    med = DEFAULT_PROFILES["med"]
    assert generate(3, 200, 5, med) == generate(3, 200, 5, med)
    assert generate(3, 200, 5, med) != generate(4, 200, 5, med)


def test_one_hop_event_per_step_and_decisions_every_d() -> None:
    events = generate(0, 500, 5, DEFAULT_PROFILES["high"])
    hop_steps = [e.step for e in events if isinstance(e, NewValue | OpEvent | Merge)]
    assert hop_steps == list(range(0, 501))
    decisions = [e.step for e in events if isinstance(e, Decision)]
    assert decisions == list(range(5, 501, 5))


def test_recents_are_bounded_and_merges_precede_retires() -> None:
    events = generate(1, 2000, 5, DEFAULT_PROFILES["med"])
    live: set[int] = set()
    for ev in events:
        if isinstance(ev, NewValue):
            assert ev.value_id not in live
            live.add(ev.value_id)
        elif isinstance(ev, Merge):
            assert all(v in live for v in ev.inputs)
            assert len(set(ev.inputs)) == len(ev.inputs)
            assert 2 <= len(ev.inputs) <= 4
            live.add(ev.value_id)
        elif isinstance(ev, Retire):
            live.remove(ev.value_id)
        elif isinstance(ev, OpEvent | Decision):
            assert ev.value_id in live
        # a new value may briefly make eight before the oldest recent retires
        assert len(live) <= MAX_RECENTS + 2
        if isinstance(ev, Decision):
            # the working value plus at most six recents
            assert len(live) <= MAX_RECENTS + 1


def test_taints_follow_the_profile_and_name_their_step() -> None:
    events = generate(5, 3000, 5, DEFAULT_PROFILES["high"])
    stale = [e for e in events if isinstance(e, OpEvent) and e.op == "CACHE_READ"]
    assert all(
        (e.taint == f"taint:stale_cache:{e.step}" and e.factor == 0.70)
        or (e.taint is None and e.factor == 0.95)
        for e in stale
    )
    rate = sum(e.taint is not None for e in stale) / len(stale)
    assert abs(rate - 0.40) < 0.05
    fetches = [e for e in events if isinstance(e, NewValue) and e.step > 0]
    unverified = sum(e.unverified for e in fetches) / len(fetches)
    assert abs(unverified - 0.30) < 0.06
