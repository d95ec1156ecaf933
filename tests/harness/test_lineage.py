"""Truncation, taint folding and lineage merging (spec §3–§4)."""

from __future__ import annotations

import json

import pytest

from harness.arms import ValueState, truncate
from harness.events import Hop, Merge, NewValue, OpEvent
from harness.lineage import (
    FoldedPrefix,
    HopLog,
    build_hop,
    hop_bytes,
    merge_folded,
    merge_visible,
)


def hop(step: int, taint: str | None = None, op: str = "TOOL_CALL") -> Hop:
    return Hop(f"h{step:06d}", step, op, (), (taint,) if taint else (), ())


def state_with(hops: list[Hop]) -> ValueState:
    return ValueState([1.0] * 5, {t for h in hops for t in h.taints_added}, list(hops))


def test_truncation_keeps_last_k_and_folds_the_rest_into_counts() -> None:
    hops = [hop(s, f"taint:tool_flaky:{s}" if s in (1, 2, 7) else None) for s in range(1, 9)]
    st = state_with(hops)
    truncate(st, 5)
    assert [h.step for h in st.visible] == [4, 5, 6, 7, 8]
    assert st.folded == FoldedPrefix(3, (("TOOL_CALL", 3),), 2, ("h000001", "h000002", "h000003"))


def test_blocklist_forgets_folded_taint_ids_only_the_count_survives() -> None:
    hops = [hop(1, "taint:unverified_web:1"), *(hop(s) for s in range(2, 8))]
    st = state_with(hops)
    truncate(st, 5)
    assert st.taints == set()
    assert st.folded is not None
    assert st.folded.n_taints_folded == 1
    assert st.history_truncated


def test_truncation_is_a_noop_within_k() -> None:
    hops = [hop(s, "taint:x:1") for s in range(1, 6)]
    st = state_with(hops)
    truncate(st, 5)
    assert st.folded is None
    assert len(st.visible) == 5
    assert not st.history_truncated


def test_second_truncation_extends_the_same_prefix() -> None:
    st = state_with([hop(s) for s in range(1, 8)])
    truncate(st, 5)
    st.visible.extend([hop(8), hop(9)])
    truncate(st, 5)
    assert st.folded is not None
    assert st.folded.n_hops_folded == 4
    assert st.folded.folded_hop_ids == ("h000001", "h000002", "h000003", "h000004")


def test_merged_visible_hops_are_deduplicated_and_sorted() -> None:
    a = [hop(1), hop(4), hop(6)]
    b = [hop(2), hop(4), hop(5)]
    merged = merge_visible([a, b])
    assert [h.hop_id for h in merged] == ["h000001", "h000002", "h000004", "h000005", "h000006"]
    single = merge_visible([a])
    assert single == a
    assert single is not a


def test_merged_prefix_sums_counts_and_dedupes_ids_keeping_first() -> None:
    p1 = FoldedPrefix(2, (("CACHE_READ", 1), ("TOOL_CALL", 1)), 1, ("h000001", "h000003"))
    p2 = FoldedPrefix(2, (("TOOL_CALL", 2),), 2, ("h000002", "h000003"))
    merged = merge_folded([p1, None, p2])
    assert merged == FoldedPrefix(
        4, (("CACHE_READ", 1), ("TOOL_CALL", 3)), 3, ("h000001", "h000003", "h000002")
    )
    assert merge_folded([None, None]) is None


def test_hops_follow_the_spec_shapes() -> None:
    fetch = build_hop(NewValue(7, 3, True), ())
    assert fetch.hop_id == "h000007"
    assert fetch.axis_deltas == (("verification", 0.45),)
    assert fetch.taints_added == ("taint:unverified_web:7",)
    assert fetch.parent_hop_ids == ()
    op = build_hop(OpEvent(8, 3, "CACHE_READ", "freshness", 0.95, None), ("h000007",))
    assert op.axis_deltas == (("freshness", 0.95),)
    assert op.taints_added == ()
    assert op.parent_hop_ids == ("h000007",)
    mg = build_hop(Merge(9, 4, (3, 1)), ("h000008", "h000002"))
    assert (mg.op, mg.axis_deltas, mg.parent_hop_ids) == ("MERGE", (), ("h000008", "h000002"))


def test_hop_log_counts_canonical_json_bytes_and_rejects_recycled_ids() -> None:
    log = HopLog()
    h = build_hop(
        OpEvent(3, 0, "TOOL_CALL", "tool_integrity", 0.65, "taint:tool_flaky:3"), ("h000002",)
    )
    log.append(h)
    expected = json.dumps(
        {
            "axis_deltas": {"tool_integrity": 0.65},
            "hop_id": "h000003",
            "op": "TOOL_CALL",
            "parent_hop_ids": ["h000002"],
            "step": 3,
            "taints_added": ["taint:tool_flaky:3"],
        },
        separators=(",", ":"),
    ).encode()
    assert hop_bytes(h) == len(expected)
    hops, nbytes = log.fetch(["h000003"])
    assert hops == [h]
    assert nbytes == len(expected)
    with pytest.raises(ValueError, match="duplicate hop id h000003"):
        log.append(h)
