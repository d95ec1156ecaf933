"""The nine gates and the three lineage modes (spec §6)."""

from __future__ import annotations

import pytest

from harness.arms import ValueState, truncate
from harness.events import Hop
from harness.gates import GATES, Decision, Gate, GateClass, GateView, Mode, evaluate, gate_modes
from harness.lineage import HopLog, hop_bytes

BY_NAME = {g.name: g for g in GATES}
PAYMENT = BY_NAME["payment_no_untrusted_taint"]
WIRE = BY_NAME["send_wire_clean_window"]


def _hop(step: int, taint: str | None = None) -> Hop:
    return Hop(f"h{step:06d}", step, "TOOL_CALL", (), (taint,) if taint else (), ())


def _compacted(hops: list[Hop], keep: int = 5) -> tuple[ValueState, HopLog]:
    log = HopLog()
    for h in hops:
        log.append(h)
    st = ValueState([1.0] * 5, {t for h in hops for t in h.taints_added}, list(hops))
    truncate(st, keep)
    return st, log


def _view(st: ValueState) -> GateView:
    return GateView(st.vec, st.taints, st.visible, st.folded, st.history_truncated)


def test_gate_table_matches_the_spec() -> None:
    assert [(g.name, g.gate_class.value, g.irreversible) for g in GATES] == [
        ("summarize_freshness_strict", "score", False),
        ("draft_reply_capability", "score", False),
        ("send_email_fresh_verified", "score", True),
        ("archive_all_axes_floor", "reconstruction", False),
        ("publish_discounted_thresholds", "reconstruction", False),
        ("summarize_no_unverified_taint", "lineage_blocklist", False),
        ("audit_requires_clean_window", "lineage_allowlist", False),
        ("payment_no_untrusted_taint", "lineage_blocklist", True),
        ("send_wire_clean_window", "lineage_allowlist", True),
    ]


def test_blocklist_forgets_folded_taint_false_proceed_in_blind_mode() -> None:
    hops = [_hop(2, "taint:unverified_web:2"), *(_hop(s) for s in range(3, 9))]
    st, log = _compacted(hops)
    oracle = evaluate(PAYMENT, GateView([1.0] * 5, {"taint:unverified_web:2"}, hops, None, False))
    assert oracle == Decision(False)
    assert evaluate(PAYMENT, _view(st), Mode.BLIND, log) == Decision(True)


def test_blocklist_degrade_refuses_when_folded_taints_exist() -> None:
    hops = [_hop(2, "taint:stale_cache:2"), *(_hop(s) for s in range(3, 9))]
    st, log = _compacted(hops)
    # the folded taint is benign: degrade's refusal is a false-stop
    assert evaluate(PAYMENT, _view(st), Mode.DEGRADE, log) == Decision(False)
    assert evaluate(PAYMENT, _view(st), Mode.BLIND, log) == Decision(True)


def test_blocklist_rehydrate_recovers_the_oracle_and_counts_lookups_and_bytes() -> None:
    hops = [_hop(2, "taint:tool_flaky:2"), _hop(3), *(_hop(s) for s in range(4, 9))]
    st, log = _compacted(hops)
    d = evaluate(PAYMENT, _view(st), Mode.REHYDRATE, log)
    assert d.proceed is False
    assert d.lookups == 2
    assert d.bytes_read == hop_bytes(hops[0]) + hop_bytes(hops[1])


def test_blocklist_needs_no_lookup_without_folded_taints() -> None:
    st, log = _compacted([_hop(s) for s in range(1, 9)])
    for mode in Mode:
        assert evaluate(PAYMENT, _view(st), mode, log) == Decision(True)


def test_allowlist_starves_when_the_window_was_folded() -> None:
    # W = 8 > K = 5: the proof of a clean window is gone after compaction
    st, log = _compacted([_hop(s) for s in range(1, 11)])
    assert evaluate(WIRE, _view(st), Mode.BLIND, log) == Decision(False)
    assert evaluate(WIRE, _view(st), Mode.DEGRADE, log) == Decision(False)
    d = evaluate(WIRE, _view(st), Mode.REHYDRATE, log)
    assert d.proceed is True
    assert d.lookups == 5


def test_allowlist_rehydrate_sees_a_forbidden_hop_inside_the_window() -> None:
    hops = [_hop(s, "taint:fallback_model:4" if s == 4 else None) for s in range(1, 11)]
    st, log = _compacted(hops)
    assert evaluate(WIRE, _view(st), Mode.REHYDRATE, log).proceed is False
    # outside the last 8 hops, the same taint does not matter
    hops = [_hop(s, "taint:fallback_model:2" if s == 2 else None) for s in range(1, 11)]
    st, log = _compacted(hops)
    assert evaluate(WIRE, _view(st), Mode.REHYDRATE, log).proceed is True


def test_allowlist_decides_on_short_untruncated_history() -> None:
    view = GateView([1.0] * 5, set(), [_hop(1), _hop(2)], None, False)
    for mode in Mode:
        assert evaluate(WIRE, view, mode).proceed is True
    tainted = GateView([1.0] * 5, set(), [_hop(1, "taint:tool_flaky:1")], None, False)
    assert evaluate(WIRE, tainted, Mode.BLIND).proceed is False


def test_allowlist_blocks_on_a_prose_blob() -> None:
    view = GateView([1.0] * 5, set(), [_hop(9)], None, True)
    for mode in Mode:
        assert evaluate(WIRE, view, mode).proceed is False


def test_allowlist_with_a_full_visible_window_ignores_the_fold() -> None:
    hops = [_hop(s) for s in range(1, 11)]
    st, log = _compacted(hops, keep=8)
    d = evaluate(WIRE, _view(st), Mode.REHYDRATE, log)
    assert d == Decision(True)


@pytest.mark.parametrize(
    ("name", "scores", "proceed"),
    [
        ("summarize_freshness_strict", [0.6, 0, 0, 0.5, 0], True),
        ("summarize_freshness_strict", [0.59, 1, 1, 1, 1], False),
        ("draft_reply_capability", [0, 0.5, 0.5, 0, 0], True),
        ("draft_reply_capability", [1, 0.49, 1, 1, 1], False),
        ("send_email_fresh_verified", [0.5, 0, 0, 0.6, 0], True),
        ("send_email_fresh_verified", [1, 1, 1, 0.59, 1], False),
        ("archive_all_axes_floor", [0.5] * 5, True),
        ("archive_all_axes_floor", [1, 1, 1, 1, 0.49], False),
        ("publish_discounted_thresholds", [1, 1, 1, 0.5, 0.55], False),
        ("publish_discounted_thresholds", [1, 1, 1, 0.8, 0.55], True),
        ("publish_discounted_thresholds", [0.95, 1, 1, 1, 0.5578], False),
    ],
)
def test_score_and_reconstruction_thresholds(name: str, scores: list[float], proceed: bool) -> None:
    view = GateView(scores, set(), [], None, False)
    assert evaluate(BY_NAME[name], view).proceed is proceed


def test_score_gates_never_read_reconstruction() -> None:
    for gate in GATES:
        if gate.gate_class is GateClass.SCORE:
            hi = evaluate(gate, GateView([0.9] * 4 + [1.0], set(), [], None, False))
            lo = evaluate(gate, GateView([0.9] * 4 + [0.0], set(), [], None, False))
            assert hi == lo


def test_modes_evaluated_per_arm_kind() -> None:
    score: Gate = BY_NAME["draft_reply_capability"]
    assert gate_modes(score, True, True) == (Mode.BLIND,)
    assert gate_modes(PAYMENT, False, True) == (Mode.BLIND,)
    assert gate_modes(PAYMENT, True, True) == (Mode.BLIND, Mode.DEGRADE, Mode.REHYDRATE)
    assert gate_modes(WIRE, True, False) == (Mode.BLIND, Mode.DEGRADE)


def test_rehydrate_without_a_hop_log_is_a_programming_error() -> None:
    st, _log = _compacted([_hop(1, "taint:tool_flaky:1"), *(_hop(s) for s in range(2, 9))])
    with pytest.raises(ValueError, match="cold hop log"):
        evaluate(PAYMENT, _view(st), Mode.REHYDRATE, None)
