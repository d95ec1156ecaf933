"""What compaction does to each arm (spec §4) and the replay order (spec §5)."""

from __future__ import annotations

import pytest

from harness.arms import GroundTruthArm, ProseArm, StructuralMinArm, StructuralPerhopArm
from harness.config import ProseConfig
from harness.events import Decision, Event, Merge, NewValue, OpEvent, Retire
from harness.lineage import build_hop
from harness.prose import MockProseChannel
from harness.replay import ReplayError, ReplayParams, replay


def _feed(arm: GroundTruthArm | StructuralMinArm | StructuralPerhopArm | ProseArm) -> None:
    arm.new_value(NewValue(0, 0, False), build_hop(NewValue(0, 0, False), ()))
    for step in range(1, 9):
        ev = OpEvent(step, 0, "TOOL_CALL", "tool_integrity", 0.9, f"taint:tool_flaky:{step}")
        arm.op(ev, build_hop(ev, (f"h{step - 1:06d}",)))


def test_ground_truth_never_compacts() -> None:
    gt = GroundTruthArm()
    _feed(gt)
    gt.compact(10)
    st = gt.values[0]
    assert len(st.visible) == 9
    assert st.folded is None
    assert st.vec[4] == 1.0


def test_structural_min_folds_the_penalty_into_live_and_newborn_values() -> None:
    arm = StructuralMinArm(0.02, 5)
    _feed(arm)
    arm.compact(10)
    arm.compact(20)
    assert arm.n_compactions == 2
    assert arm.store_reconstruction == (1.0 - 0.02) * (1.0 - 0.02)
    assert arm.values[0].vec[4] == arm.store_reconstruction
    born = NewValue(21, 1, False)
    arm.new_value(born, build_hop(born, ()))
    assert arm.values[1].vec[4] == arm.store_reconstruction
    assert len(arm.values[0].visible) == 5
    assert arm.values[0].taints == {f"taint:tool_flaky:{s}" for s in range(4, 9)}


def test_structural_perhop_carries_the_penalty_as_data() -> None:
    arm = StructuralPerhopArm(0.02, 5)
    _feed(arm)
    assert arm.fidelity == 1.0
    for step in range(10, 2010, 10):
        arm.compact(step)
    assert arm.record.n_compactions == 200
    assert arm.fidelity == pytest.approx(0.98)
    assert arm.values[0].vec[4] == 1.0  # the vector is never touched
    assert arm.reconstruction_scalar(arm.values[0]) == arm.fidelity


def test_prose_extraction_replaces_vector_taints_and_lineage() -> None:
    arm = ProseArm(MockProseChannel(0, ProseConfig()))
    _feed(arm)
    before = list(arm.values[0].vec)
    arm.compact(10)
    st = arm.values[0]
    assert st.vec != before
    assert st.visible == []
    assert st.folded is None
    assert st.blob is not None
    assert st.history_truncated
    assert arm.channel.counters.extractions == 1
    assert arm.channel.counters.true_taints == 8


def test_merged_value_owns_its_state() -> None:
    arm = StructuralMinArm(0.02, 5)
    _feed(arm)
    ev = NewValue(9, 1, True)
    arm.new_value(ev, build_hop(ev, ()))
    m = Merge(10, 2, (0, 1))
    arm.merge(m, build_hop(m, ("h000008", "h000009")))
    merged = arm.values[2]
    assert merged.vec[3] == 0.45  # min over inputs, then the merge hop
    assert "taint:unverified_web:9" in merged.taints
    assert merged.visible is not arm.values[0].visible
    merged.taints.add("x")
    assert "x" not in arm.values[0].taints


def _events_with_retire_at_compaction() -> list[Event]:
    # value 1 is retired at step 10, the compaction step: the compaction must see it
    return [
        NewValue(0, 0, False),
        NewValue(1, 1, False),
        OpEvent(2, 0, "TOOL_CALL", None, 1.0, None),
        OpEvent(3, 1, "TOOL_CALL", None, 1.0, "taint:tool_flaky:3"),
        OpEvent(10, 0, "CACHE_READ", "freshness", 0.95, None),
        Retire(10, 1),
        Decision(10, 0),
    ]


def test_compaction_at_step_s_sees_the_value_a_retire_at_s_removes() -> None:
    channel = MockProseChannel(0, ProseConfig())
    replay(_events_with_retire_at_compaction(), ReplayParams(cadence=10), channel)
    assert channel.counters.extractions == 2


def test_compaction_happens_once_per_step_and_before_the_decision() -> None:
    result = replay(_events_with_retire_at_compaction(), ReplayParams(cadence=10))
    assert result.n_decisions == 1
    (curve,) = result.curve_rows
    assert curve[2] == 1  # n_compactions at the decision
    assert curve[3] == pytest.approx(0.98)


def test_events_on_dead_values_are_rejected_with_step_and_value() -> None:
    events: list[Event] = [NewValue(0, 0, False), OpEvent(1, 5, "TOOL_CALL", None, 1.0, None)]
    with pytest.raises(ReplayError, match="step 1: value 5 is not live"):
        replay(events, ReplayParams(cadence=10))
    dup: list[Event] = [NewValue(0, 0, False), NewValue(1, 0, False)]
    with pytest.raises(ReplayError, match="already exists"):
        replay(dup, ReplayParams(cadence=10))


def test_unknown_axis_from_a_trace_is_rejected_with_its_step() -> None:
    events: list[Event] = [NewValue(0, 0, False), OpEvent(4, 0, "db_query", "latency", 0.5, None)]
    with pytest.raises(ReplayError, match="step 4: unknown axis 'latency'"):
        replay(events, ReplayParams(cadence=10))
