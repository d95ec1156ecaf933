"""Clearing a suspicion across clock skew (S4, S8): a receipt clears only if it shows the
origin served after it was suspected, whatever the holder's and the origin's clocks read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts import (
    BindingMismatch,
    Evidence,
    EvidenceStatus,
    build_demand,
    unanswered_evidence,
)
from contracts.evidence import CLEARING_SKEW_MS, verify_clearing
from harness.cli import main
from tests.contracts._support import NOW, World, make_world

#: The holder's clock runs this far ahead of the origin's (inside the documented skew).
AHEAD_MS = 10_000


def _suspicion(w: World) -> Evidence:
    """The holder's suspicion of ``w.demand`` (dated NOW + 1 s on the holder's clock)."""
    return unanswered_evidence(
        w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        re_asks=1,
        reported_at=NOW + 4_000,
    )


def test_a_holder_ahead_clears_with_the_receipt_of_its_later_demand() -> None:
    """The re-test 2 s after the suspected demand (holder's clock) is answered by the
    origin at once, on a clock 10 s behind: its receipt is dated before the suspected
    demand, yet it answers a demand the holder made after it."""
    w = make_world()
    retest = build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="b2" * 16)
    receipt = w.answer(retest, now=NOW + 3_000 - AHEAD_MS).to_bytes()
    suspicion = _suspicion(w)
    with pytest.raises(BindingMismatch, match="before the suspected demand"):
        verify_clearing(suspicion, receipt, now=NOW + 5_000)  # the receipt alone
    verdict = verify_clearing(
        suspicion.to_bytes(), receipt, now=NOW + 5_000, demand=retest.to_bytes()
    )
    assert verdict.status is EvidenceStatus.CLEARED
    assert "the holder made after the suspected one" in verdict.reason


def test_a_receipt_alone_still_clears_as_before() -> None:
    """Files written with the receipt only keep their verdict."""
    w = make_world()
    retest = build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="b3" * 16)
    receipt = w.answer(retest, now=NOW + 3_100).to_bytes()
    verdict = verify_clearing(_suspicion(w), receipt, now=NOW + 5_000)
    assert verdict.status is EvidenceStatus.CLEARED
    assert "by the origin's own clock" in verdict.reason


def test_a_receipt_answering_a_demand_before_the_suspected_one_does_not_clear() -> None:
    """Adversarial: the origin answers (late, or dated late) a demand the holder made
    before the one it was silent to; that shows no service after the suspicion."""
    w = make_world()
    earlier = build_demand(w.holder, w.obligation, now=NOW + 1_000 - 1, nonce="c4" * 16)
    receipt = w.answer(earlier, now=NOW + 1_000 - 1).to_bytes()
    with pytest.raises(BindingMismatch, match=r"before the suspected demand .* same holder"):
        verify_clearing(_suspicion(w), receipt, now=NOW + 5_000, demand=earlier.to_bytes())
    # Within the skew window of the suspected demand, yet still earlier: no clearing
    # by the receipt alone either.
    with pytest.raises(BindingMismatch, match="before the suspected demand"):
        verify_clearing(_suspicion(w), receipt, now=NOW + 5_000)


@pytest.mark.parametrize("signer", ["origin", "witness", "stranger"])
def test_a_demand_not_signed_by_the_suspecting_holder_does_not_clear(signer: str) -> None:
    """Adversarial: a demand the origin (or anyone but the holder) signed, dated as late
    as it likes, orders nothing on the holder's clock."""
    w = make_world()
    forged = build_demand(getattr(w, signer), w.obligation, now=NOW + 9_000, nonce="d5" * 16)
    receipt = w.answer(forged, now=NOW + 9_000).to_bytes()
    with pytest.raises(BindingMismatch, match="not by the suspecting holder"):
        verify_clearing(_suspicion(w), receipt, now=NOW + 10_000, demand=forged.to_bytes())


def test_a_receipt_that_does_not_answer_the_given_demand_does_not_clear() -> None:
    """Adversarial: the holder's later demand shown beside a receipt for another
    (earlier) demand of the holder's."""
    w = make_world()
    later = build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="e6" * 16)
    other = build_demand(w.holder, w.obligation, now=NOW + 500, nonce="f7" * 16)
    receipt = w.answer(other, now=NOW + 500).to_bytes()
    with pytest.raises(BindingMismatch, match="answers demand"):
        verify_clearing(_suspicion(w), receipt, now=NOW + 5_000, demand=later.to_bytes())


def test_a_receipt_dated_beyond_the_skew_before_its_demand_does_not_clear() -> None:
    """No origin answers a demand dated more than the skew ahead of its clock: a
    receipt claiming it did is not a later answer."""
    w = make_world()
    retest = build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="a8" * 16)
    too_early = w.answer(retest, now=NOW + 3_000 - CLEARING_SKEW_MS - 1).to_bytes()
    with pytest.raises(BindingMismatch, match="beyond the documented clock skew"):
        verify_clearing(_suspicion(w), too_early, now=NOW + 5_000, demand=retest.to_bytes())
    at_edge = w.answer(retest, now=NOW + 3_000 - CLEARING_SKEW_MS).to_bytes()
    verdict = verify_clearing(_suspicion(w), at_edge, now=NOW + 5_000, demand=retest.to_bytes())
    assert verdict.status is EvidenceStatus.CLEARED


def test_a_demand_for_another_obligation_does_not_clear() -> None:
    w, other = make_world(), make_world(n_hops=3)
    foreign = build_demand(w.holder, other.obligation, now=NOW + 3_000, nonce="b9" * 16)
    receipt = w.answer(
        build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="c1" * 16), now=NOW + 3_000
    ).to_bytes()
    with pytest.raises(BindingMismatch, match="names no fold"):
        verify_clearing(_suspicion(w), receipt, now=NOW + 5_000, demand=foreign.to_bytes())


def test_evidence_verify_answering_orders_the_receipt_on_the_holder_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = make_world()
    retest = build_demand(w.holder, w.obligation, now=NOW + 3_000, nonce="d2" * 16)
    files = {
        "ev.json": _suspicion(w).to_bytes(),
        "receipt": w.answer(retest, now=NOW + 3_000 - AHEAD_MS).to_bytes(),
        "demand": retest.to_bytes(),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    ev, receipt, demand = (str(tmp_path / n) for n in files)
    now = ("--now", str(NOW + 5_000), "--json")
    assert main(["evidence", "verify", ev, "--cleared-by", receipt, *now]) == 1
    assert "before the suspected demand" in capsys.readouterr().out
    both = ("--cleared-by", receipt, "--answering", demand)
    assert main(["evidence", "verify", ev, *both, *now]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "cleared"
    assert main(["evidence", "verify", ev, "--answering", demand, *now]) == 2
    assert f"--answering {demand}: needs --cleared-by RECEIPT" in capsys.readouterr().err
    missing = str(tmp_path / "nothing")
    assert main(["evidence", "verify", ev, "--cleared-by", receipt, "--answering", missing]) == 2
    assert f"--answering {missing}: cannot read" in capsys.readouterr().err
