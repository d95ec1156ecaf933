"""The framing benchmark's judge: evidence classified by the verifier, targets PASS/FAIL.

``benchmarks/bench_framing.py`` reads every evidence file a run leaves and
counts it against issue 23's goals; a mistake here would report a framed
origin as safe. These are its pure parts, on records signed here with real
keys (no node): a witness-confirmed suspicion stays counted as confirmed
after a later receipt clears it, a clearing receipt the accused did not sign
clears nothing, a file that does not verify accuses nobody, and each target
fails on what it must.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import pytest

from contracts.evidence import unanswered_evidence
from contracts.identity import Identity
from contracts.serve import (
    answer_demand,
    build_commitment,
    build_demand,
    build_obligation,
    build_witness_report,
)
from tests.scripts import load_script

_ENDPOINT = "127.0.0.1:7001"
_NOW = 1_800_000_000_000
_HOPS = [b'{"step": 1}']


def _load() -> ModuleType:
    return load_script("benchmarks/bench_framing.py", "bench_framing")


bench = _load()


class _World:
    """An origin's fold and obligation, a holder's overdue demand, a witness."""

    def __init__(self) -> None:
        self.origin, self.holder, self.witness = (Identity.generate() for _ in range(3))
        self.commitment = build_commitment(
            self.origin, epoch="e", value_ref="v", fold_seq=0, hops=_HOPS, issued_at=_NOW - 60_000
        )
        self.obligation = build_obligation(
            self.origin, self.commitment, serve_until=_NOW + 3_600_000, deadline_ms=2_000,
            endpoints=[_ENDPOINT], issued_at=_NOW - 60_000,
        )  # fmt: skip
        self.demand = build_demand(self.holder, self.obligation, now=_NOW - 10_000)

    def suspicion(self, *, witnessed: bool) -> bytes:
        w_demands, w_reports = [], []
        if witnessed:
            wd = build_demand(self.witness, self.obligation, now=_NOW - 9_000)
            w_demands.append(wd)
            w_reports.append(
                build_witness_report(self.witness, wd, at=_NOW - 6_000, address=_ENDPOINT)
            )
        return unanswered_evidence(
            self.demand, obligation=self.obligation, commitment=self.commitment, re_asks=1,
            reported_at=_NOW - 5_000, witness_demands=w_demands, witness_reports=w_reports,
        ).to_bytes()  # fmt: skip

    def later_receipt(self, signer: Identity | None = None) -> bytes:
        later = build_demand(self.holder, self.obligation, now=_NOW - 1_000)
        return answer_demand(
            signer or self.origin, later, obligation=self.obligation,
            commitment=self.commitment, hops=_HOPS, now=_NOW - 900,
        ).to_bytes()  # fmt: skip


def _judge(data: bytes, cleared_by: bytes | None = None, cleared_at: float | None = None) -> Any:
    return bench.judge_file("f.json", data, cleared_by, now_ms=_NOW, cleared_at=cleared_at)


def test_witness_confirmed_suspicion_is_classified_confirmed() -> None:
    w = _World()
    j = _judge(w.suspicion(witnessed=True))
    assert (j.kind, j.level, j.status, j.confirmed) == (
        "unanswered", "suspicion", "witness_confirmed", True,
    ), j  # fmt: skip
    assert j.accused == w.origin.node_id


def test_unwitnessed_suspicion_is_unconfirmed() -> None:
    j = _judge(_World().suspicion(witnessed=False))
    assert (j.status, j.confirmed) == ("suspected", False), j


def test_cleared_suspicion_still_counts_as_once_confirmed() -> None:
    w = _World()
    j = _judge(w.suspicion(witnessed=True), w.later_receipt(), cleared_at=1234.5)
    assert (j.status, j.confirmed, j.cleared_at) == ("cleared", True, 1234.5), j
    t = bench.tally([j], honest=[w.origin.node_id], origin=w.origin.node_id, attack_end=1200.0)
    assert (t.confirmed_vs_live, t.cleared, t.standing) == (1, 1, 0)
    assert t.clear_s == pytest.approx(34.5)
    v = bench.verdicts(t)
    assert v == {"no_proof_vs_honest": True, "no_confirmed_vs_live": False, "cleared_in_time": True}


def test_a_record_cleared_by_its_own_answer_was_still_confirmed() -> None:
    """A holder that got the receipt before writing the file keeps it inside: the
    record verifies as cleared, but witnesses had confirmed it — that counts."""
    w = _World()
    data = w.suspicion(witnessed=True)
    from contracts.evidence import Evidence

    answered = Evidence.from_bytes(data).with_answer(_answer(w, w.demand)).to_bytes()
    j = _judge(answered)
    assert (j.status, j.confirmed, j.cleared_at) == ("cleared", True, None), j
    t = bench.tally([j], honest=[], origin=w.origin.node_id, attack_end=0.0)
    assert (t.confirmed_vs_live, t.standing, t.clear_s) == (1, 0, 0.0)


def _answer(w: _World, demand: Any) -> Any:
    from contracts.envelope import Envelope

    receipt = answer_demand(
        w.origin, demand, obligation=w.obligation, commitment=w.commitment, hops=_HOPS,
        now=_NOW - 9_500,
    )  # fmt: skip
    return Envelope.from_bytes(receipt.to_bytes())


def test_a_receipt_the_accused_did_not_sign_clears_nothing() -> None:
    w = _World()
    j = _judge(w.suspicion(witnessed=True), w.later_receipt(signer=Identity.generate()), 1.0)
    assert j.status == "witness_confirmed", j
    assert j.cleared_at is None
    assert "clearing receipt does not verify" in j.reason, j.reason
    t = bench.tally([j], honest=[], origin=w.origin.node_id, attack_end=0.0)
    assert t.standing == 1
    assert math.isinf(t.clear_s)
    assert bench.verdicts(t)["cleared_in_time"] is False


def test_a_file_that_does_not_verify_accuses_nobody() -> None:
    w = _World()
    data = bytearray(w.suspicion(witnessed=True))
    at = data.index(b'"reported_at":') + len(b'"reported_at":')
    data[at : at + 1] = b"x"  # no longer JSON the verifier reads
    j = _judge(bytes(data))
    assert j.status == bench.INVALID, j
    t = bench.tally([j], honest=[w.origin.node_id], origin=w.origin.node_id, attack_end=0.0)
    assert (t.invalid, t.standing, t.confirmed_vs_live, t.proofs_vs_honest) == (1, 0, 0, 0)


def _j(kind: str, level: str, status: str, accused: str, **kw: Any) -> Any:
    return bench.Judged("x", kind, level, status, accused, "", **kw)


def test_proofs_count_against_honest_parties_only() -> None:
    judged = [
        _j("bad_data", "proof", "proven", "honest-witness"),
        _j("refused", "proof", "proven", "someone-else"),
    ]
    t = bench.tally(judged, honest=["origin", "honest-witness"], origin="origin", attack_end=0.0)
    assert t.proofs_vs_honest == 1
    assert bench.verdicts(t)["no_proof_vs_honest"] is False
    assert bench.verdicts(bench.tally(judged[1:], honest=["origin"], origin="origin",
                                      attack_end=0.0))["no_proof_vs_honest"]  # fmt: skip


def test_clearing_target_is_sixty_seconds_after_the_attack() -> None:
    def late(seconds: float) -> Any:
        one = _j("unanswered", "suspicion", "cleared", "o", confirmed=False,
                 cleared_at=100.0 + seconds)  # fmt: skip
        return bench.tally([one], honest=["o"], origin="o", attack_end=100.0)

    assert bench.verdicts(late(59.0))["cleared_in_time"] is True
    assert bench.verdicts(late(61.0))["cleared_in_time"] is False
    # cleared before the attack ended: nothing to wait for
    assert late(-5.0).clear_s == 0.0
    # a suspicion against another origin is not this run's to clear
    other = _j("unanswered", "suspicion", "suspected", "other")
    assert bench.tally([other], honest=["o"], origin="o", attack_end=0.0).standing == 0
