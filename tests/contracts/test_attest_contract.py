"""The attest contract A1–A7, one test per decidable clause (negatives included)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from contracts import (
    AXES,
    Attestation,
    Axis,
    DigestMismatch,
    Expired,
    NotAuthorized,
    RehydrationProof,
    Revoked,
    Signed,
    TrustPolicy,
    answer_demand,
    apply_attestations,
    attestation_hop_fields,
    build_attestation,
    build_commitment,
    build_demand,
    build_obligation,
    check_attestation,
    hop_bytes,
    judge_answer,
    parse_hop,
    remaining_taints,
    sha256_hex,
    verify_attestation,
)
from contracts.attest import PROOF_VERSION, verify_rehydration
from contracts.errors import ContractError, EncodingError, RootMismatch
from contracts.evidence import AnswerKind
from contracts.head_note import SignedHead
from contracts.heads import FoldProof
from tests.contracts._support import (
    DAY,
    EPOCH,
    HOUR,
    NOW,
    HeadWorld,
    World,
    make_head_world,
    make_world,
    resign_receipt,
)

VALUE = sha256_hex(b"value 42 at decision 17")
OTHER_VALUE = sha256_hex(b"value 43 at decision 17")
LOW = {a: 0.3 for a in AXES}


def policy(w: World, **extra: dict[Axis, float]) -> TrustPolicy:
    grants: dict[str, dict[Axis, float]] = {
        w.attester.node_id: {Axis.VERIFICATION: 0.9, Axis.RECONSTRUCTION: 1.0}
    }
    grants.update(extra)
    return TrustPolicy(grants=grants)


def attest(
    w: World,
    axis: Axis = Axis.VERIFICATION,
    floor: float = 0.8,
    *,
    value: str = VALUE,
    cites: tuple[str, ...] = (),
    discharged: tuple[str, ...] = (),
    expires_at: int = NOW + DAY,
) -> Signed[Attestation]:
    return build_attestation(
        w.attester,
        value_digest=value,
        axis=axis,
        floor=floor,
        discharged=discharged,
        cites=cites,
        issued_at=NOW,
        expires_at=expires_at,
    )


def rehydrate(
    w: World, *, leaves: list[int] | None = None, tamper: bool = False
) -> RehydrationProof:
    demand = build_demand(w.holder, w.obligation, now=NOW + 1, leaves=leaves, nonce="9a" * 16)
    receipt = answer_demand(
        w.origin,
        demand,
        obligation=w.obligation,
        commitment=w.commitment,
        hops=w.hops,
        now=NOW + 2,
    )
    hops = list(w.hops) if leaves is None else [w.hops[i] for i in leaves]
    if tamper:
        hops = [h + b" " for h in hops]
        receipt = resign_receipt(w.origin, receipt, hops)
    return RehydrationProof.of(
        commitment=w.commitment, obligation=w.obligation, demand=demand, receipt=receipt, hops=hops
    )


# ------------------------------------------------------------------------ A1


def test_a1_only_a_valid_attestation_raises_an_axis() -> None:
    w = make_world()
    good = attest(w, floor=0.8)
    replayed = attest(w, floor=0.9, value=OTHER_VALUE)
    forged_scope = attest(w, Axis.CAPABILITY, floor=1.0)
    out = apply_attestations(
        LOW,
        [replayed.to_bytes(), forged_scope, b"not json"],
        value_digest=VALUE,
        policy=policy(w),
        now=NOW + 1,
    )
    assert out.scores == LOW
    assert len(out.rejected) == 3
    out = apply_attestations(LOW, [good], value_digest=VALUE, policy=policy(w), now=NOW + 1)
    assert out.scores[Axis.VERIFICATION] == 0.8
    assert {a: s for a, s in out.scores.items() if a is not Axis.VERIFICATION} == {
        a: 0.3 for a in AXES if a is not Axis.VERIFICATION
    }


def test_a1_an_attestation_never_lowers_an_axis() -> None:
    w = make_world()
    high = {a: 0.95 for a in AXES}
    out = apply_attestations(
        high, [attest(w, floor=0.5)], value_digest=VALUE, policy=policy(w), now=NOW + 1
    )
    assert out.scores[Axis.VERIFICATION] == 0.95
    assert len(out.applied) == 1


# ------------------------------------------------------------------------ A2


def test_a2_attestation_replayed_on_another_value_is_rejected() -> None:
    w = make_world()
    a = attest(w)
    verify_attestation(a.to_bytes(), value_digest=VALUE, policy=policy(w), now=NOW + 1)
    with pytest.raises(DigestMismatch, match=f"is for value {VALUE[:12]}…, not {OTHER_VALUE[:12]}"):
        verify_attestation(a.to_bytes(), value_digest=OTHER_VALUE, policy=policy(w), now=NOW + 1)


# ------------------------------------------------------------------------ A3


def test_a3_attester_outside_the_trust_policy_is_rejected() -> None:
    w = make_world()
    a = attest(w)
    check = check_attestation(a, value_digest=VALUE, policy=TrustPolicy(), now=NOW + 1)
    assert not check
    assert check.failed == "NotAuthorized"
    assert "may not raise verification" in check.reason


def test_a3_axis_not_granted_to_the_attester_is_rejected() -> None:
    w = make_world()
    with pytest.raises(NotAuthorized, match="may not raise freshness"):
        verify_attestation(
            attest(w, Axis.FRESHNESS), value_digest=VALUE, policy=policy(w), now=NOW + 1
        )


def test_a3_floor_above_the_ceiling_is_rejected() -> None:
    w = make_world()
    with pytest.raises(NotAuthorized, match=r"above the ceiling 0\.9"):
        verify_attestation(attest(w, floor=0.95), value_digest=VALUE, policy=policy(w), now=NOW + 1)


def test_a3_trust_policy_round_trips_through_its_json_form() -> None:
    w = make_world()
    p = TrustPolicy(
        grants={w.attester.node_id: {Axis.VERIFICATION: 0.9}},
        revocations={w.stranger.node_id: NOW},
    )
    assert TrustPolicy.from_bytes(p.to_bytes()) == p


# ------------------------------------------------------------------------ A4


def test_a4_reconstruction_is_raised_with_a_full_verified_rehydration() -> None:
    w = make_world()
    proof = rehydrate(w)
    receipt_digest = judge_answer(
        proof.receipt.to_bytes(),
        proof.hops,
        demand=build_demand(w.holder, w.obligation, now=NOW + 1, nonce="9a" * 16),
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW,
    )
    assert receipt_digest.kind is AnswerKind.SERVED
    assert receipt_digest.served is not None
    a = attest(w, Axis.RECONSTRUCTION, 1.0, cites=(receipt_digest.served.receipt.digest,))
    out = apply_attestations(
        LOW,
        [a],
        value_digest=VALUE,
        policy=policy(w),
        now=NOW + 5,
        rehydrations=[proof],
        value_commitments=[w.commitment.digest],
    )
    assert out.scores[Axis.RECONSTRUCTION] == 1.0


def test_a4_no_authority_raises_reconstruction_without_rehydration_receipts() -> None:
    w = make_world()
    a = attest(w, Axis.RECONSTRUCTION, 1.0)
    with pytest.raises(NotAuthorized, match="full verified rehydration"):
        verify_attestation(
            a,
            value_digest=VALUE,
            policy=policy(w),
            now=NOW + 5,
            value_commitments=[w.commitment.digest],
        )


def test_a4_partial_rehydration_does_not_restore_reconstruction() -> None:
    w = make_world()
    proof = rehydrate(w, leaves=[0, 1])
    a = attest(w, Axis.RECONSTRUCTION, 1.0)
    with pytest.raises(NotAuthorized, match="not the full fold"):
        verify_attestation(
            a,
            value_digest=VALUE,
            policy=policy(w),
            now=NOW + 5,
            rehydrations=[proof],
            value_commitments=[w.commitment.digest],
        )


def test_a4_rehydration_with_bytes_missing_the_root_does_not_count() -> None:
    w = make_world()
    proof = rehydrate(w, tamper=True)
    a = attest(w, Axis.RECONSTRUCTION, 1.0)
    with pytest.raises(NotAuthorized, match="does not verify"):
        verify_attestation(
            a,
            value_digest=VALUE,
            policy=policy(w),
            now=NOW + 5,
            rehydrations=[proof],
            value_commitments=[w.commitment.digest],
        )


def test_a4_every_commitment_of_the_value_must_be_rehydrated_and_cited() -> None:
    w, w2 = make_world(), make_world(n_hops=3)
    proof = rehydrate(w)
    served = judge_answer(
        proof.receipt,
        proof.hops,
        demand=build_demand(w.holder, w.obligation, now=NOW + 1, nonce="9a" * 16),
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW,
    ).served
    assert served is not None
    a = attest(w, Axis.RECONSTRUCTION, 1.0, cites=(served.receipt.digest,))
    with pytest.raises(NotAuthorized, match="not rehydrated"):
        verify_attestation(
            a,
            value_digest=VALUE,
            policy=policy(w),
            now=NOW + 5,
            rehydrations=[proof],
            value_commitments=[w.commitment.digest, w2.commitment.digest],
        )
    uncited = attest(w, Axis.RECONSTRUCTION, 1.0)
    with pytest.raises(NotAuthorized, match="cites receipts other"):
        verify_attestation(
            uncited,
            value_digest=VALUE,
            policy=policy(w),
            now=NOW + 5,
            rehydrations=[proof],
            value_commitments=[w.commitment.digest],
        )


# ------------------------------------------------------------------------ A5


def test_a5_blocklist_ignores_exactly_the_discharged_taints() -> None:
    w = make_world()
    tainted = {"taint:unverified_web:3", "taint:unverified_web:9", "taint:tool_flaky:4"}
    a = attest(w, discharged=("taint:unverified_web:3", "taint:never_present:1"))
    out = apply_attestations(LOW, [a], value_digest=VALUE, policy=policy(w), now=NOW + 1)
    assert out.discharged == {"taint:unverified_web:3", "taint:never_present:1"}
    assert remaining_taints(tainted, out.discharged) == {
        "taint:unverified_web:9",
        "taint:tool_flaky:4",
    }


def test_a5_rejected_attestation_discharges_nothing() -> None:
    w = make_world()
    a = attest(w, discharged=("taint:unverified_web:3",), value=OTHER_VALUE)
    out = apply_attestations(LOW, [a], value_digest=VALUE, policy=policy(w), now=NOW + 1)
    assert out.discharged == frozenset()


# ------------------------------------------------------------------------ A6


def test_a6_attestation_is_a_hop_with_provenance() -> None:
    w = make_world()
    a = attest(w)
    fields = attestation_hop_fields(a, hop_id="a000001")
    hop = hop_bytes(fields, w.attester.node_id, EPOCH)
    parsed = parse_hop(hop, origin=w.attester.node_id, epoch=EPOCH)
    assert parsed["attestation"] == a.digest
    assert parsed["op"] == "ATTEST"
    # The attester commits to its log like any origin; the hop is servable.
    c = build_commitment(
        w.attester, epoch=EPOCH, value_ref="attestations", fold_seq=0, hops=[hop], issued_at=NOW
    )
    o = build_obligation(
        w.attester, c, serve_until=NOW + DAY, deadline_ms=1_000, endpoints=[], issued_at=NOW
    )
    d = build_demand(w.holder, o, now=NOW + 1, nonce="7e" * 16)
    r = answer_demand(w.attester, d, obligation=o, commitment=c, hops=[hop], now=NOW + 2)
    result = judge_answer(r, [hop], demand=d, obligation=o, commitment=c, reported_at=NOW)
    assert result.kind is AnswerKind.SERVED


# ------------------------------------------------------------------------ A7


def test_a7_expired_attestation_stops_counting() -> None:
    w = make_world()
    a = attest(w, expires_at=NOW + HOUR)
    verify_attestation(a, value_digest=VALUE, policy=policy(w), now=NOW + HOUR - 1)
    with pytest.raises(Expired, match=r"expired at 2026-11-29T11:00:00.000Z \(now 2026-11-29T11:"):
        verify_attestation(a, value_digest=VALUE, policy=policy(w), now=NOW + HOUR)
    out = apply_attestations(LOW, [a], value_digest=VALUE, policy=policy(w), now=NOW + HOUR)
    assert out.scores == LOW


def test_a7_revoked_key_stops_counting_even_for_earlier_attestations() -> None:
    w = make_world()
    a = attest(w)
    p = TrustPolicy(grants=dict(policy(w).grants), revocations={w.attester.node_id: NOW + HOUR})
    verify_attestation(a, value_digest=VALUE, policy=p, now=NOW + HOUR - 1)
    with pytest.raises(Revoked, match=r"was revoked at 2026-11-29T11:00:00\.000Z"):
        verify_attestation(a, value_digest=VALUE, policy=p, now=NOW + HOUR)


# ------------------------------------------------------------------------ A4 under signed heads


def _head_proof(
    hw: HeadWorld, *, fold: FoldProof | None = None, head: SignedHead | None = None
) -> RehydrationProof:
    hops = hw.hops["value:42"]
    receipt = answer_demand(
        hw.origin,
        hw.demand,
        obligation=hw.fold.obligation,
        commitment=hw.fold.commitment,
        hops=hops,
        now=NOW + 2_000,
    )
    return RehydrationProof.under_head(
        head=head if head is not None else hw.head,
        fold=fold if fold is not None else hw.fold.proof,
        demand=hw.demand,
        receipt=receipt,
        hops=hops,
    )


def _head_policy(w: World) -> TrustPolicy:
    return TrustPolicy(grants={w.attester.node_id: {Axis.RECONSTRUCTION: 1.0}})


def test_a4_a_fold_under_a_signed_head_restores_reconstruction() -> None:
    w, hw = make_world(), make_head_world(values=3, compactions=2)
    proof = _head_proof(hw)
    commitment, receipt = verify_rehydration(proof)
    assert commitment == hw.fold.leaf_hash.hex()  # the fold record's leaf hash
    a = attest(w, Axis.RECONSTRUCTION, 1.0, cites=(receipt,))
    out = apply_attestations(
        LOW,
        [a],
        value_digest=VALUE,
        policy=_head_policy(w),
        now=NOW + 3_000,
        rehydrations=[proof],
        value_commitments=[commitment],
    )
    assert out.scores[Axis.RECONSTRUCTION] == 1.0
    # the JSON form (version 2) reads back to the same proof
    assert RehydrationProof.from_bytes(proof.to_bytes()) == proof
    assert json.loads(proof.to_bytes())["v"] == PROOF_VERSION == 3


def test_a4_head_whose_inclusion_proof_does_not_match_is_rejected_naming_it() -> None:
    w, hw = make_world(), make_head_world(values=3, compactions=2)
    # the same fold record, proven with another leaf's audit path
    bent = dataclasses.replace(hw.fold.proof, index=(hw.fold.proof.index + 1) % 3)
    proof = _head_proof(hw, fold=bent)
    with pytest.raises(RootMismatch, match="inclusion proof under head"):
        verify_rehydration(proof)
    good = _head_proof(hw)
    a = attest(w, Axis.RECONSTRUCTION, 1.0, cites=(verify_rehydration(good)[1],))
    check = check_attestation(
        a,
        value_digest=VALUE,
        policy=_head_policy(w),
        now=NOW + 3_000,
        rehydrations=[proof],
        value_commitments=[hw.fold.leaf_hash.hex()],
    )
    assert not check
    assert "inclusion proof" in check.reason


def test_a4_head_form_proof_under_another_head_is_rejected() -> None:
    hw = make_head_world(values=3, compactions=2)
    other = make_head_world(values=3, compactions=1)  # an earlier head, same origin
    with pytest.raises(ContractError):
        verify_rehydration(_head_proof(hw, head=other.head))


def test_a4_head_form_partial_demand_is_not_a_full_rehydration() -> None:
    hw = make_head_world(values=3, compactions=2, leaves=[0])
    receipt = answer_demand(
        hw.origin,
        hw.demand,
        obligation=hw.fold.obligation,
        commitment=hw.fold.commitment,
        hops=hw.hops["value:42"],
        now=NOW + 2_000,
    )
    proof = RehydrationProof.under_head(
        head=hw.head,
        fold=hw.fold.proof,
        demand=hw.demand,
        receipt=receipt,
        hops=hw.hops["value:42"][:1],
    )
    with pytest.raises(NotAuthorized, match="not the full fold"):
        verify_rehydration(proof)


def test_rehydration_proof_json_versions() -> None:
    w = make_world()
    v1 = rehydrate(w)
    body = json.loads(v1.to_bytes())
    assert "v" not in body  # the per-fold form keeps its version-1 shape
    assert RehydrationProof.from_json(body) == v1
    with pytest.raises(EncodingError, match="unknown version 4"):
        RehydrationProof.from_json({**body, "v": 4})
    with pytest.raises(EncodingError, match="v3: fields must be"):
        RehydrationProof.from_json({**body, "v": 3})
    # the earlier head form (its fold proof a JSON object) is refused by name
    with pytest.raises(EncodingError, match="v2: the earlier head form"):
        RehydrationProof.from_json({**body, "v": 2})
    with pytest.raises(ValueError, match="either a per-fold commitment or a fold proof"):
        RehydrationProof(None, v1.obligation, v1.demand, v1.receipt, v1.hops)
