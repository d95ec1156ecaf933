"""The hop log a rehydration hands the gates: what it holds, sizes, and coverage."""

from __future__ import annotations

from harness.boundary.play import FetchedLog
from harness.events import Hop
from harness.lineage import HopLog, hop_bytes


def _hop(hop_id: str, step: int) -> Hop:
    return Hop(hop_id, step, "LLM_TRANSFORM", (("capability", 0.65),), (), ())


def test_holds_each_served_hop_once_with_its_canonical_size() -> None:
    log = FetchedLog()
    a, b = _hop("h000001", 1), _hop("h000002", 2)
    log.add(a, hop_bytes(a))
    log.add(b, hop_bytes(b))
    log.add(a, 10_000)  # the same hop served again under another fold: kept once
    assert len(log) == 2
    assert log.get("h000001") is a
    # sizes as a cold log of the same hops counts them (the first size kept)
    cold = HopLog()
    cold.append(a)
    cold.append(b)
    assert log.fetch(("h000001", "h000002")) == cold.fetch(("h000001", "h000002"))


def test_membership_and_coverage_of_folded_pointers() -> None:
    log = FetchedLog()
    for i in range(1, 4):
        hop = _hop(f"h{i:06d}", i)
        log.add(hop, hop_bytes(hop))
    assert "h000002" in log
    assert "h000009" not in log
    assert log.covers(("h000001", "h000003"))
    assert log.covers(())
    assert not log.covers(("h000001", "h000009"))  # a pointer the served folds lack
