"""The serve contract S1–S8, one test per decidable clause (negatives included)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

import contracts._answer_rule as answer_rule
from contracts import (
    Answer,
    AnswerKind,
    BadSignature,
    BindingMismatch,
    DigestMismatch,
    EncodingError,
    EquivocationDetector,
    Evidence,
    EvidenceKind,
    EvidenceLevel,
    EvidenceStatus,
    Expired,
    NotAuthorized,
    NotEvidence,
    NotServed,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    ReplayedNonce,
    RootMismatch,
    Signed,
    answer_demand,
    build_commitment,
    build_demand,
    build_obligation,
    build_witness_report,
    check_evidence,
    check_served,
    equivocation_evidence,
    eviction_blockers,
    hop_bytes,
    judge_answer,
    sign_statement,
    unanswered_evidence,
    verify_delivery,
    verify_demand,
    verify_evidence,
    verify_served,
)
from contracts.evidence import BUSY_STATUS
from contracts.merkle import merkle_root
from contracts.serve import NonceRegistry
from tests.contracts._support import (
    DAY,
    EPOCH,
    HOUR,
    NOW,
    World,
    make_hops,
    make_world,
    resign_receipt,
)


def answer(
    w: World, *, now: int = NOW + 2_000, hops: Sequence[bytes] | None = None, stored: bool = True
) -> Signed[Receipt]:
    fold = (w.hops if hops is None else tuple(hops)) if stored else None
    return answer_demand(
        w.origin, w.demand, obligation=w.obligation, commitment=w.commitment, hops=fold, now=now
    )


def judge(w: World, receipt: Signed[Receipt] | bytes, hops: Sequence[bytes]) -> Answer:
    return judge_answer(
        receipt,
        hops,
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 3_000,
    )


def refusal(w: World, status: ReceiptStatus, reason: RefusalReason, at: int) -> Signed[Receipt]:
    receipt = Receipt(
        origin=w.origin.node_id,
        obligation=w.obligation.digest,
        commitment=w.commitment.digest,
        demand=w.demand.digest,
        nonce=w.demand.statement.nonce,
        status=status,
        reason=reason,
        tree_size=len(w.hops),
        issued_at=at,
    )
    return sign_statement(w.origin, receipt)


# ------------------------------------------------------------------------ S1


def test_s1_any_bearer_gets_committed_hops_byte_exact() -> None:
    w = make_world()
    for bearer in (w.holder, w.witness, w.stranger):
        demand = build_demand(bearer, w.obligation, now=NOW + 1, nonce=bearer.node_id[:32])
        checked = verify_demand(demand.to_bytes(), obligation=w.obligation, commitment=w.commitment)
        receipt = answer_demand(
            w.origin,
            checked,
            obligation=w.obligation,
            commitment=w.commitment,
            hops=w.hops,
            now=NOW + 2,
        )
        served = verify_served(
            receipt.to_bytes(),
            w.hops,
            demand=demand,
            obligation=w.obligation,
            commitment=w.commitment,
        )
        assert served.hops == w.hops
        assert served.leaves == tuple(range(len(w.hops)))


def test_s1_partial_demand_is_served_with_inclusion_proofs() -> None:
    w = make_world(n_hops=13, leaves=[0, 5, 12])
    receipt = answer(w)
    assert receipt.statement.leaves == (0, 5, 12)
    assert len(receipt.statement.proofs) == 3
    picked = [w.hops[i] for i in (0, 5, 12)]
    result = judge(w, receipt.to_bytes(), picked)
    assert result.kind is AnswerKind.SERVED
    assert result.served is not None
    assert result.served.hops == tuple(picked)


def test_s1_holder_bound_obligation_serves_its_holder_and_refuses_others_legitimately() -> None:
    w = make_world(holder_bound=True)
    assert judge(w, answer(w), w.hops).kind is AnswerKind.SERVED
    other = build_demand(w.stranger, w.obligation, now=NOW + 1, nonce="b2" * 16)
    receipt = answer_demand(
        w.origin, other, obligation=w.obligation, commitment=w.commitment, hops=w.hops, now=NOW + 2
    )
    assert receipt.statement.reason is RefusalReason.NOT_BOUND_HOLDER
    verdict = judge_answer(
        receipt,
        [],
        demand=other,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 3,
    )
    assert verdict.kind is AnswerKind.LEGITIMATE
    with pytest.raises(NotAuthorized, match="bound to holder"):
        verify_delivery(w.commitment, w.obligation, now=NOW, holder=w.stranger.node_id)


def test_s1_expired_obligation_is_rejected_at_delivery_with_times_in_message() -> None:
    w = make_world(serve_until=NOW + HOUR)
    verify_delivery(w.commitment.to_bytes(), w.obligation.to_bytes(), now=NOW)
    with pytest.raises(Expired, match=r"expired at 2026-11-29T11:00:00.000Z \(now"):
        verify_delivery(w.commitment.to_bytes(), w.obligation.to_bytes(), now=NOW + HOUR)


def test_s1_demand_replayed_nonce_is_rejected_by_origin() -> None:
    w = make_world()
    nonces = NonceRegistry(capacity=4)
    verify_demand(w.demand, obligation=w.obligation, commitment=w.commitment, nonces=nonces)
    with pytest.raises(ReplayedNonce):
        verify_demand(w.demand, obligation=w.obligation, commitment=w.commitment, nonces=nonces)


def test_s1_demand_for_another_obligation_is_rejected_by_origin() -> None:
    w, other = make_world(), make_world(n_hops=3)
    with pytest.raises(BindingMismatch, match="names obligation"):
        verify_demand(other.demand, obligation=w.obligation, commitment=w.commitment)


# ------------------------------------------------------------------------ S2


def test_s2_served_bytes_missing_root_are_bad_data() -> None:
    w = make_world()
    tampered = list(w.hops)
    tampered[2] = tampered[2].replace(b'"step":3', b'"step":4')
    receipt = resign_receipt(w.origin, answer(w), tampered)
    result = judge(w, receipt.to_bytes(), tampered)
    assert result.kind is AnswerKind.EVIDENCE
    assert result.evidence is not None
    verdict = verify_evidence(result.evidence.to_bytes(), now=NOW)
    assert verdict.kind is EvidenceKind.BAD_DATA
    assert verdict.status is EvidenceStatus.PROVEN
    assert verdict.accused == w.origin.node_id
    with pytest.raises(RootMismatch):
        verify_served(
            receipt, tampered, demand=w.demand, obligation=w.obligation, commitment=w.commitment
        )


def test_s2_partial_leaf_whose_proof_misses_root_is_bad_data() -> None:
    w = make_world(n_hops=9, leaves=[4])
    good = answer(w)
    wrong = make_hops(w.origin.node_id, 1, start=100)
    receipt = resign_receipt(w.origin, good, wrong)
    result = judge(w, receipt, wrong)
    assert result.kind is AnswerKind.EVIDENCE
    assert result.evidence is not None
    assert verify_evidence(result.evidence, now=NOW).kind is EvidenceKind.BAD_DATA


def test_s2_serving_leaves_other_than_demanded_is_bad_data() -> None:
    w = make_world(n_hops=9, leaves=[4])
    honest = answer(w)
    swapped = dataclasses.replace(honest.statement, leaves=(5,))
    receipt = sign_statement(w.origin, swapped)
    result = judge(w, receipt, [w.hops[5]])
    assert result.kind is AnswerKind.EVIDENCE


def test_s2_bytes_altered_after_signing_are_not_attributed_to_origin() -> None:
    w = make_world()
    tampered = list(w.hops)
    tampered[0] = tampered[0] + b" "
    result = judge(w, answer(w), tampered)
    assert result.kind is AnswerKind.UNATTRIBUTABLE
    assert result.evidence is None
    with pytest.raises(DigestMismatch, match="8 hops received hash to root"):
        verify_served(
            answer(w), tampered, demand=w.demand, obligation=w.obligation, commitment=w.commitment
        )


def test_s2_correct_receipt_is_not_bad_data_evidence() -> None:
    w = make_world()
    fake = Evidence(
        kind=EvidenceKind.BAD_DATA,
        accused=w.origin.node_id,
        commitment=w.commitment.envelope,
        obligation=w.obligation.envelope,
        demand=w.demand.envelope,
        receipt=answer(w).envelope,
    )
    with pytest.raises(NotEvidence, match="lead to the committed root"):
        verify_evidence(fake, now=NOW)


# ------------------------------------------------------------------------ S3


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (ReceiptStatus.REFUSED, RefusalReason.OVERLOADED),
        (ReceiptStatus.ABSENT, RefusalReason.EVICTED),
        (ReceiptStatus.REFUSED, RefusalReason.EXPIRED),
    ],
)
def test_s3_refusal_before_serve_until_is_refused_proof(
    status: ReceiptStatus, reason: RefusalReason
) -> None:
    w = make_world(serve_until=NOW + HOUR)
    result = judge(w, refusal(w, status, reason, NOW + HOUR - 1), [])
    assert result.kind is AnswerKind.EVIDENCE
    assert result.evidence is not None
    verdict = verify_evidence(result.evidence.to_bytes(), now=NOW + 2 * HOUR)
    assert (verdict.kind, verdict.level) == (EvidenceKind.REFUSED, EvidenceLevel.PROOF)
    assert reason.value in verdict.reason


def test_s3_store_corrupted_refusal_is_the_origins_admitted_loss_not_bad_data() -> None:
    w = make_world(serve_until=NOW + HOUR)
    # What an origin signs when the bytes its disk gave back miss its own root.
    damaged = [*w.hops[:-1], b'{"flipped":true}']
    receipt = answer_demand(
        w.origin,
        w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        hops=damaged,
        now=NOW + 2_000,
    )
    assert (receipt.statement.status, receipt.statement.reason) == (
        ReceiptStatus.ABSENT,
        RefusalReason.STORE_CORRUPTED,
    )
    assert receipt.statement.served_root is None
    result = judge(w, receipt, [])
    assert result.kind is AnswerKind.EVIDENCE
    assert result.evidence is not None
    assert result.evidence.kind is EvidenceKind.REFUSED
    verdict = verify_evidence(result.evidence.to_bytes(), now=NOW + 2 * HOUR)
    assert (verdict.kind, verdict.status) == (EvidenceKind.REFUSED, EvidenceStatus.ADMITTED_LOSS)
    assert "STORE_CORRUPTED" in verdict.reason
    assert "admits its own store is corrupted" in verdict.reason
    assert "not bad data" in verdict.reason


def test_s3_refusal_expired_after_serve_until_is_not_evidence() -> None:
    w = make_world(serve_until=NOW + HOUR)
    receipt = answer(w, now=NOW + HOUR)
    assert (receipt.statement.status, receipt.statement.reason) == (
        ReceiptStatus.REFUSED,
        RefusalReason.EXPIRED,
    )
    result = judge(w, receipt, [])
    assert result.kind is AnswerKind.LEGITIMATE
    forced = Evidence(
        kind=EvidenceKind.REFUSED,
        accused=w.origin.node_id,
        commitment=w.commitment.envelope,
        obligation=w.obligation.envelope,
        demand=w.demand.envelope,
        receipt=receipt.envelope,
    )
    check = check_evidence(forced, now=NOW + 2 * HOUR)
    assert not check
    assert check.failed == "NotEvidence"
    assert "serve_until 2026-11-29T11:00:00.000Z" in check.reason


def test_s3_refusal_of_a_leaf_outside_the_fold_is_not_evidence() -> None:
    w = make_world(n_hops=4)
    bad = build_demand(w.holder, w.obligation, now=NOW + 1, leaves=[7], nonce="c3" * 16)
    receipt = sign_statement(
        w.origin,
        dataclasses.replace(
            refusal(w, ReceiptStatus.ABSENT, RefusalReason.BAD_DEMAND, NOW + 2).statement,
            demand=bad.digest,
            nonce=bad.statement.nonce,
        ),
    )
    result = judge_answer(
        receipt, [], demand=bad, obligation=w.obligation, commitment=w.commitment, reported_at=NOW
    )
    assert result.kind is AnswerKind.LEGITIMATE


# ------------------------------------------------------------------------ S4


def _unanswered(w: World, **kw: object) -> Evidence:
    return unanswered_evidence(
        w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        re_asks=3,
        reported_at=NOW + 10_000,
        **kw,  # type: ignore[arg-type]
    )


def test_s4_unanswered_without_witnesses_is_only_a_suspicion() -> None:
    w = make_world()
    verdict = verify_evidence(_unanswered(w).to_bytes(), now=NOW + 10_000)
    assert verdict.kind is EvidenceKind.UNANSWERED
    assert verdict.level is EvidenceLevel.SUSPICION
    assert verdict.status is EvidenceStatus.SUSPECTED
    assert not verdict.is_proof
    assert verdict.re_asks == 3


def test_s4_unanswered_before_its_deadline_is_not_evidence() -> None:
    w = make_world(deadline_ms=5_000)
    with pytest.raises(NotEvidence, match="not unanswered yet"):
        verify_evidence(_unanswered(w), now=w.demand.statement.time + 4_999)


def test_s4_witness_reports_confirm_but_never_turn_silence_into_proof() -> None:
    w = make_world()
    wd = build_demand(w.witness, w.obligation, now=NOW + 2_000, nonce="d4" * 16)
    report = build_witness_report(w.witness, wd, at=NOW + 9_000, address="127.0.0.1:50051")
    ev = _unanswered(w, witness_demands=[wd], witness_reports=[report])
    verdict = verify_evidence(ev.to_bytes(), now=NOW + 10_000)
    assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED
    assert verdict.level is EvidenceLevel.SUSPICION
    assert verdict.witnesses == (w.witness.node_id,)
    needs_two = verify_evidence(ev, now=NOW + 10_000, min_witnesses=2)
    assert needs_two.status is EvidenceStatus.SUSPECTED


def test_s4_holder_cannot_confirm_its_own_suspicion_as_witness() -> None:
    w = make_world()
    wd = build_demand(w.holder, w.obligation, now=NOW + 2_000, nonce="e5" * 16)
    report = build_witness_report(w.holder, wd, at=NOW + 9_000, address="127.0.0.1:50051")
    with pytest.raises(BindingMismatch, match="third node"):
        verify_evidence(
            _unanswered(w, witness_demands=[wd], witness_reports=[report]), now=NOW + 10_000
        )


def test_s4_any_answer_to_a_witness_clears_the_suspicion() -> None:
    w = make_world()
    wd = build_demand(w.witness, w.obligation, now=NOW + 2_000, nonce="f6" * 16)
    silent = build_witness_report(w.witness, wd, at=NOW + 9_000, address="127.0.0.1:50051")
    confirmed = _unanswered(w, witness_demands=[wd], witness_reports=[silent])
    assert verify_evidence(confirmed, now=NOW + 10_000).status is EvidenceStatus.WITNESS_CONFIRMED
    # The origin answers the witness's re-issued demand, late: that clears it.
    late = answer_demand(
        w.origin,
        wd,
        obligation=w.obligation,
        commitment=w.commitment,
        hops=w.hops,
        now=NOW + 60_000,
    )
    verdict = verify_evidence(confirmed.with_answer(late).to_bytes(), now=NOW + 70_000)
    assert verdict.status is EvidenceStatus.CLEARED
    assert not verdict.accuses


def test_s4_busy_is_a_suspicion_witnesses_cannot_confirm_and_a_receipt_clears() -> None:
    """An origin that answered RESOURCE_EXHAUSTED was busy, not silent: the record says
    so and verifies as ``busy``, whatever witnesses say of silence; a receipt clears it."""
    w = make_world()
    wd = build_demand(w.witness, w.obligation, now=NOW + 2_000, nonce="a7" * 16)
    silent = build_witness_report(w.witness, wd, at=NOW + 9_000, address="127.0.0.1:50051")
    busy = _unanswered(w, witness_demands=[wd], witness_reports=[silent], status=BUSY_STATUS)
    data = busy.to_bytes()
    assert b'"status":"RESOURCE_EXHAUSTED"' in data
    verdict = verify_evidence(Evidence.from_bytes(data), now=NOW + 10_000)
    assert verdict.status is EvidenceStatus.BUSY
    assert verdict.level is EvidenceLevel.SUSPICION
    assert "busy, not silent" in verdict.reason
    assert verdict.accuses
    late = answer_demand(
        w.origin,
        wd,
        obligation=w.obligation,
        commitment=w.commitment,
        hops=w.hops,
        now=NOW + 60_000,
    )
    cleared = verify_evidence(busy.with_answer(late), now=NOW + 70_000)
    assert cleared.status is EvidenceStatus.CLEARED
    # A record without the field keeps its bytes (files written before stay valid).
    assert b'"status"' not in _unanswered(w).to_bytes()


@pytest.mark.parametrize(
    ("kind", "status"), [("unanswered", "INTERNAL"), ("unanswered", 7), ("refused", BUSY_STATUS)]
)
def test_s4_an_evidence_status_other_than_busy_on_unanswered_is_malformed(
    kind: str, status: object
) -> None:
    obj = _unanswered(make_world()).to_json()
    obj["kind"], obj["status"] = kind, status
    with pytest.raises(EncodingError, match="field 'status'"):
        Evidence.from_json(obj)


def test_s4_a_receipt_for_an_unrelated_demand_does_not_clear() -> None:
    w, other = make_world(), make_world(n_hops=3)
    foreign = answer(other)
    with pytest.raises(BindingMismatch):
        verify_evidence(_unanswered(w).with_answer(foreign), now=NOW + 10_000)


# ------------------------------------------------------------------------ S5


def test_s5_hop_under_unexpired_obligation_is_not_evictable() -> None:
    w = make_world(serve_until=NOW + HOUR)
    table = [w.obligation, make_world(n_hops=2).obligation]
    blockers = eviction_blockers(table, commitment=w.commitment.digest, now=NOW + HOUR - 1)
    assert blockers == (w.obligation,)
    assert eviction_blockers(table, commitment=w.commitment.digest, now=NOW + HOUR) == ()


# ------------------------------------------------------------------------ S6


def test_s6_pending_commitment_answers_pending_which_is_not_a_lie() -> None:
    w = make_world(provenance_pending=True)
    receipt = answer(w, stored=False)
    assert receipt.statement.status is ReceiptStatus.PENDING
    assert judge(w, receipt, []).kind is AnswerKind.LEGITIMATE


def test_s6_pending_answer_for_a_durable_commitment_is_refused_proof() -> None:
    w = make_world(provenance_pending=False)
    receipt = refusal(w, ReceiptStatus.PENDING, RefusalReason.PROVENANCE_PENDING, NOW + 2_000)
    result = judge(w, receipt, [])
    assert result.kind is AnswerKind.EVIDENCE


def test_s6_store_whose_hops_changed_answers_absent_never_wrong_bytes() -> None:
    w = make_world()
    drifted = list(w.hops)
    drifted[1] = make_hops(w.origin.node_id, 1, start=500)[0]
    receipt = answer(w, hops=drifted)
    assert receipt.statement.status is ReceiptStatus.ABSENT
    with pytest.raises(NotServed, match="ABSENT"):
        verify_served(
            receipt, [], demand=w.demand, obligation=w.obligation, commitment=w.commitment
        )


def test_s6_recycled_hop_id_from_another_epoch_never_resolves_a_commitment() -> None:
    w = make_world()
    # Same hop fields, same ids, a later epoch: the store recycled its keys.
    recycled = make_hops(w.origin.node_id, len(w.hops), epoch="run-2")
    assert [h.replace(b'"run-2"', b'"run-1"') for h in recycled] == list(w.hops)
    result = check_served(
        answer(w), recycled, demand=w.demand, obligation=w.obligation, commitment=w.commitment
    )
    assert not result
    assert result.failed == "DigestMismatch"
    assert hop_bytes({"hop_id": "h000001"}, w.origin.node_id, EPOCH) != hop_bytes(
        {"hop_id": "h000001"}, w.origin.node_id, "run-2"
    )


# ------------------------------------------------------------------------ S7


def test_s7_forwarded_obligation_lets_the_third_node_demand_from_the_origin() -> None:
    w = make_world()
    # A (origin) -> B (holder) -> C (witness): B forwards A's exact bytes.
    c_bytes, o_bytes = w.commitment.to_bytes(), w.obligation.to_bytes()
    c, o = verify_delivery(c_bytes, o_bytes, now=NOW, origin=w.origin.node_id)
    demand = build_demand(w.witness, o, now=NOW + 5, nonce="ab" * 16)
    assert demand.statement.origin == w.origin.node_id
    receipt = answer_demand(
        w.origin,
        verify_demand(demand.to_bytes(), obligation=w.obligation, commitment=w.commitment),
        obligation=w.obligation,
        commitment=w.commitment,
        hops=w.hops,
        now=NOW + 6,
    )
    result = judge_answer(
        receipt.to_bytes(), w.hops, demand=demand, obligation=o, commitment=c, reported_at=NOW
    )
    assert result.kind is AnswerKind.SERVED


def test_s7_forwarder_cannot_substitute_its_own_obligation_for_the_origins() -> None:
    w = make_world()
    own = build_commitment(
        w.holder, epoch=EPOCH, value_ref="value:42", fold_seq=3, hops=w.hops, issued_at=NOW
    )
    forged = build_obligation(
        w.holder,
        own,
        serve_until=NOW + DAY,
        deadline_ms=1,
        endpoints=[],
        issued_at=NOW,
    )
    with pytest.raises(BindingMismatch):
        verify_delivery(w.commitment, forged.to_bytes(), now=NOW)
    with pytest.raises(BindingMismatch, match="expected"):
        verify_delivery(own.to_bytes(), forged, now=NOW, origin=w.origin.node_id)


# ------------------------------------------------------------------------ S8


def test_s8_evidence_signed_by_another_key_never_accuses_the_origin() -> None:
    w = make_world()
    # A framer signs a "refusal" in the origin's name with its own key.
    forged = refusal(w, ReceiptStatus.REFUSED, RefusalReason.OTHER, NOW + 2_000)
    bad_env = dataclasses.replace(
        forged.envelope,
        signatures=tuple(
            dataclasses.replace(s, sig=w.stranger.sign(forged.envelope.pae()))
            for s in forged.envelope.signatures
        ),
    )
    ev = Evidence(
        kind=EvidenceKind.REFUSED,
        accused=w.origin.node_id,
        commitment=w.commitment.envelope,
        obligation=w.obligation.envelope,
        demand=w.demand.envelope,
        receipt=bad_env,
    )
    with pytest.raises(BadSignature):
        verify_evidence(ev, now=NOW)
    assert judge(w, bad_env.to_bytes(), []).kind is AnswerKind.UNATTRIBUTABLE


def test_s8_evidence_naming_a_different_accused_is_rejected() -> None:
    w = make_world()
    ev = Evidence(
        kind=EvidenceKind.REFUSED,
        accused=w.stranger.node_id,
        commitment=w.commitment.envelope,
        obligation=w.obligation.envelope,
        demand=w.demand.envelope,
        receipt=refusal(w, ReceiptStatus.REFUSED, RefusalReason.OTHER, NOW + 2_000).envelope,
    )
    with pytest.raises(BindingMismatch, match="expected"):
        verify_evidence(ev, now=NOW)


def test_s8_a_correct_origin_yields_no_evidence_for_any_demand() -> None:
    w = make_world(n_hops=11, serve_until=NOW + HOUR)
    demands = [None, [0], [10], [1, 2, 3], list(range(11))]
    for i, leaves in enumerate(demands):
        d = build_demand(w.holder, w.obligation, now=NOW + i, leaves=leaves, nonce=f"{i:032x}")
        for now in (NOW + 10, NOW + HOUR - 1, NOW + HOUR, NOW + DAY):
            r = answer_demand(
                w.origin, d, obligation=w.obligation, commitment=w.commitment, hops=w.hops, now=now
            )
            served = [w.hops[j] for j in (range(11) if leaves is None else leaves)]
            result = judge_answer(
                r.to_bytes(),
                served if r.statement.status is ReceiptStatus.SERVED else [],
                demand=d,
                obligation=w.obligation,
                commitment=w.commitment,
                reported_at=now,
            )
            assert result.kind in (AnswerKind.SERVED, AnswerKind.LEGITIMATE), result.reason
            assert result.evidence is None


def test_s8_every_attributable_failure_yields_evidence_naming_the_origin() -> None:
    w = make_world(serve_until=NOW + HOUR)
    tampered = [h + b"\n" for h in w.hops]
    failures = [
        (resign_receipt(w.origin, answer(w), tampered), tampered),
        (refusal(w, ReceiptStatus.ABSENT, RefusalReason.EVICTED, NOW + 5), []),
        (refusal(w, ReceiptStatus.REFUSED, RefusalReason.OVERLOADED, NOW + 5), []),
        (refusal(w, ReceiptStatus.PENDING, RefusalReason.PROVENANCE_PENDING, NOW + 5), []),
    ]
    for receipt, hops in failures:
        result = judge(w, receipt, hops)
        assert result.kind is AnswerKind.EVIDENCE, result.reason
        assert result.evidence is not None
        verdict = verify_evidence(result.evidence.to_bytes(), now=NOW + 10)
        assert verdict.accused == w.origin.node_id
        assert verdict.is_proof


def test_s8_equivocation_two_roots_for_one_fold_is_proof() -> None:
    w = make_world()
    other = build_commitment(
        w.origin,
        epoch=EPOCH,
        value_ref="value:42",
        fold_seq=3,
        hops=list(w.hops[:-1]),
        issued_at=NOW + 1,
    )
    detector = EquivocationDetector()
    assert detector.observe(w.commitment, now=NOW) is None
    assert detector.observe(w.commitment, now=NOW) is None
    ev = detector.observe(other, now=NOW + 2)
    assert ev is not None
    verdict = verify_evidence(ev.to_bytes(), now=NOW)
    assert (verdict.kind, verdict.status) == (EvidenceKind.EQUIVOCATION, EvidenceStatus.PROVEN)


def test_s8_same_root_reissued_or_different_fold_is_not_equivocation() -> None:
    w = make_world()
    reissued = build_commitment(
        w.origin, epoch=EPOCH, value_ref="value:42", fold_seq=3, hops=w.hops, issued_at=NOW + 9
    )
    with pytest.raises(NotEvidence, match="agree on root"):
        equivocation_evidence(w.commitment, reissued, reported_at=NOW)
    next_fold = build_commitment(
        w.origin, epoch=EPOCH, value_ref="value:42", fold_seq=4, hops=w.hops[:2], issued_at=NOW
    )
    with pytest.raises(NotEvidence, match="different folds"):
        equivocation_evidence(w.commitment, next_fold, reported_at=NOW)


def test_check_forms_are_falsy_and_name_the_failure_verify_forms_raise() -> None:
    w = make_world(serve_until=NOW + HOUR)
    from contracts import check_delivery, check_demand

    ok = check_delivery(w.commitment.to_bytes(), w.obligation.to_bytes(), now=NOW)
    assert ok
    assert ok.value is not None
    assert ok.value[0].digest == w.commitment.digest
    late = check_delivery(w.commitment, w.obligation, now=NOW + HOUR)
    assert not late
    assert late.failed == "Expired"
    assert f"obligation {w.obligation.digest[:12]}" in late.reason
    other = make_world(n_hops=2)
    wrong = check_demand(other.demand, obligation=w.obligation, commitment=w.commitment)
    assert (bool(wrong), wrong.failed) == (False, "BindingMismatch")


def test_s1_an_origin_that_read_its_fold_under_the_root_does_not_hash_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = make_world()
    hashed: list[int] = []

    def counting(leaves: Sequence[bytes]) -> bytes:
        hashed.append(1)
        return merkle_root(leaves)

    monkeypatch.setattr(answer_rule, "merkle_root", counting)  # where the answer rule hashes
    kwargs = {"obligation": w.obligation, "commitment": w.commitment, "now": NOW + 2_000}
    receipt = answer_demand(w.origin, w.demand, hops=w.hops, **kwargs)  # type: ignore[arg-type]
    assert hashed == [1]
    known = answer_demand(
        w.origin,
        w.demand,
        hops=w.hops,
        hops_root=w.commitment.statement.root,
        **kwargs,  # type: ignore[arg-type]
    )
    assert hashed == [1]  # the caller's root stood in for the hash
    assert known.statement.served_root == receipt.statement.served_root
    assert judge(w, receipt, w.hops).kind is AnswerKind.SERVED
    assert judge(w, known, w.hops).kind is AnswerKind.SERVED
    # a fold of the wrong length is never served, whatever root the caller passes
    short = answer_demand(
        w.origin,
        w.demand,
        hops=w.hops[:-1],
        hops_root=w.commitment.statement.root,
        **kwargs,  # type: ignore[arg-type]
    )
    assert short.statement.reason is RefusalReason.STORE_CORRUPTED
