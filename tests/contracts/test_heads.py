"""Signed tree heads, fold proofs, lazy verification and split views (design revision 2).

Tests are named after the clause they pin (S1–S8 with heads) or the
revision-2 rule ("one signature per compaction", "verify where it carries
information", "split view").
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest

from contracts import (
    AnswerKind,
    BadSignature,
    BindingMismatch,
    ContractError,
    DigestMismatch,
    EncodingError,
    Evidence,
    EvidenceKind,
    EvidenceStatus,
    Expired,
    FoldInput,
    FoldProof,
    FoldRecord,
    HeadCache,
    HeadLog,
    Identity,
    NotEvidence,
    PublicKey,
    ReceiptStatus,
    RefusalReason,
    RootMismatch,
    answer_demand,
    build_demand,
    build_witness_report,
    check_evidence,
    cite_head,
    eviction_blockers,
    judge_fold_answer,
    judge_head_extension,
    sign_envelope,
    sign_served,
    split_view_evidence,
    unanswered_evidence,
    verify_evidence,
    verify_fold,
)
from contracts.note import Note, parse_note
from contracts.signed import Signed
from contracts.statements import Receipt
from tests.contracts._support import (
    DAY,
    EPOCH,
    NOW,
    HeadWorld,
    fixed_identity,
    make_head_world,
    make_hops,
    make_world,
    resign_receipt,
)

TERMS = {"serve_until": NOW + DAY, "deadline_ms": 2_000, "endpoints": ["127.0.0.1:50051"]}


def _answer(w: HeadWorld, hops: Sequence[bytes] | None, *, now: int) -> Signed[Receipt]:
    """The origin's signed answer to the world's demand for its fold (S1–S3, S6)."""
    return answer_demand(
        w.origin,
        w.demand,
        obligation=w.fold.obligation,
        commitment=w.fold.commitment,
        hops=hops,
        now=now,
    )


@pytest.fixture
def signature_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the signer of every Ed25519 verification made (the real one still runs)."""
    seen: list[str] = []
    real = PublicKey.verify

    def counting(self: PublicKey, signature: bytes, message: bytes) -> None:
        seen.append(self.node_id)
        real(self, signature, message)

    monkeypatch.setattr(PublicKey, "verify", counting)
    return seen


@pytest.fixture
def signatures_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    real = Identity.sign

    def counting(self: Identity, message: bytes) -> bytes:
        made.append(self.node_id)
        return real(self, message)

    monkeypatch.setattr(Identity, "sign", counting)
    return made


# ------------------------------------------------------------------ heads


def test_one_signature_per_compaction_however_many_values_and_folds(
    signatures_made: list[str],
) -> None:
    origin = fixed_identity("origin")
    log = HeadLog(origin, EPOCH)
    for c in range(3):
        folds = [
            FoldInput(f"value:{v}", c, make_hops(origin.node_id, 5, start=1 + 10 * v))
            for v in range(20)
        ]
        compaction = log.compact(folds, issued_at=NOW + c, **TERMS)  # type: ignore[arg-type]
        assert len(compaction.proofs) == 20
        for proof in compaction.proofs.values():
            verify_fold(proof, compaction.head)
    assert len(signatures_made) == 3
    assert [h.statement.seq for h in log.heads] == [0, 1, 2]


def test_s1_heads_fold_proof_serves_byte_exact_to_the_holder() -> None:
    w = make_head_world()
    receipt = _answer(w, w.hops["value:42"], now=NOW + 2_000)
    answer = judge_fold_answer(
        receipt.to_bytes(), w.hops["value:42"], demand=w.demand, fold=w.fold, reported_at=NOW
    )
    assert answer.kind is AnswerKind.SERVED, answer.reason
    assert answer.served is not None
    assert answer.served.hops == w.hops["value:42"]
    # The demand names the head (as obligation) and the fold's leaf hash (as commitment).
    assert w.demand.statement.obligation == w.head.digest
    assert w.demand.statement.commitment == w.fold.leaf_hash.hex()


def test_head_cache_verifies_a_head_once_then_needs_only_its_digest(
    signature_checks: list[str],
) -> None:
    w = make_head_world(values=4)
    cache = HeadCache()
    compaction_proofs = [w.log.fold_proof(f"value:{v}") for v in (42, 1, 2, 3)]
    first = cache.verify_fold(compaction_proofs[0], now=NOW, head=w.head.to_bytes())
    assert first.record.value_ref == "value:42"
    for proof in compaction_proofs[1:]:
        # Later values of the same head arrive with the digest only.
        assert proof.head == w.head.digest
        cache.verify_fold(proof, now=NOW + 1)
    cache.verify(w.head.to_bytes(), now=NOW + 2)
    assert cache.signature_checks == 1
    assert signature_checks == [w.origin.node_id]
    with pytest.raises(DigestMismatch, match="not verified here"):
        HeadCache().verify_fold(compaction_proofs[1], now=NOW)


def test_head_cache_rejects_forged_foreign_and_expired_heads() -> None:
    w = make_head_world()
    note = parse_note(w.head.note)
    (line,) = note.signatures
    flipped = bytes([line.payload[0] ^ 1]) + line.payload[1:]
    forged = Note(note.text, (dataclasses.replace(line, payload=flipped),)).to_bytes()
    with pytest.raises(BadSignature):
        HeadCache().verify(forged, now=NOW)
    with pytest.raises(BindingMismatch):
        HeadCache().verify(w.head, now=NOW, origin=fixed_identity("stranger").node_id)
    cache = HeadCache()
    with pytest.raises(Expired, match="expired at"):
        cache.verify(w.head, now=NOW + DAY)
    # Expiry is checked on every use, also for a cached head.
    cache.verify(w.head, now=NOW)
    with pytest.raises(Expired):
        cache.verify(w.head, now=NOW + DAY)


def test_head_cache_verifies_a_known_heads_text_under_other_signature_lines() -> None:
    """The digest names the text; bytes with a forged line are not waved through."""
    w = make_head_world()
    cache = HeadCache()
    cache.verify(w.head.note, now=NOW)
    note = parse_note(w.head.note)
    (line,) = note.signatures
    forged = Note(note.text, (line, dataclasses.replace(line, payload=bytes(64)))).to_bytes()
    with pytest.raises(BadSignature):
        cache.verify(forged, now=NOW)
    assert cache.signature_checks == 1
    assert cache.verify(w.head.note, now=NOW).note == w.head.note
    assert cache.signature_checks == 1


def test_fold_proof_rejects_a_record_not_under_the_head() -> None:
    w = make_head_world(values=3)
    proof = w.fold.proof
    with pytest.raises(RootMismatch):
        verify_fold(dataclasses.replace(proof, index=1), w.head)
    other = FoldRecord("value:42", 0, 8, "00" * 32).to_bytes()
    with pytest.raises(RootMismatch):
        verify_fold(dataclasses.replace(proof, record=other), w.head)
    with pytest.raises(BindingMismatch, match="names head"):
        verify_fold(dataclasses.replace(proof, head="ab" * 32), w.head)
    with pytest.raises(EncodingError, match="after its last part"):
        verify_fold(dataclasses.replace(proof, record=proof.record + b"\x00"), w.head)
    with pytest.raises(EncodingError, match="not base64"):
        FoldProof.from_text("zz")


def test_a_value_carries_one_fold_proof_whatever_its_number_of_folds() -> None:
    sizes = {}
    for folds in (1, 5, 50):
        w = make_head_world(values=1, compactions=folds)
        proof = w.log.fold_proof("value:42")
        sizes[folds] = len(proof.to_bytes())
        assert verify_fold(proof, w.head).record.fold_seq == folds - 1
    # Only the digits of fold_seq differ (and the null prev of a first fold).
    assert max(sizes.values()) - sizes[5] <= 1
    assert sizes[1] < sizes[5]


def test_s1_an_earlier_fold_is_proven_through_the_chain_and_served() -> None:
    w = make_head_world(values=2, compactions=4)
    origin = w.origin
    proof = w.log.fold_proof("value:42", back=3)
    fold = verify_fold(proof, w.head)
    assert (fold.record.fold_seq, len(proof.chain)) == (0, 3)
    hops0 = tuple(make_hops(origin.node_id, 8, start=1))
    assert fold.record.root == FoldRecord("value:42", 0, 8, fold.record.root).root
    d = build_demand(w.holder, fold.obligation, now=NOW + 1, nonce="c4" * 16)
    receipt = answer_demand(
        origin, d, obligation=fold.obligation, commitment=fold.commitment, hops=hops0, now=NOW + 2
    )
    answer = judge_fold_answer(receipt, hops0, demand=d, fold=fold, reported_at=NOW + 3)
    assert answer.kind is AnswerKind.SERVED, answer.reason
    broken = dataclasses.replace(proof, chain=(proof.chain[0], proof.chain[2]))
    with pytest.raises(BindingMismatch, match="chain"):
        verify_fold(broken, w.head)


# ------------------------------------------------------------ lazy verification


def test_verify_where_it_carries_information_a_faithful_serve_checks_no_signature(
    signature_checks: list[str],
) -> None:
    w = make_head_world(leaves=None)
    receipt = _answer(w, w.hops["value:42"], now=NOW + 2_000)
    # Even a receipt whose signature is broken: the bytes alone reproduce the signed root.
    raw = json.loads(receipt.to_bytes())
    raw["signatures"][0]["sig"] = "A" * 86 + "=="
    answer = judge_fold_answer(
        json.dumps(raw).encode(), w.hops["value:42"], demand=w.demand, fold=w.fold, reported_at=NOW
    )
    assert answer.kind is AnswerKind.SERVED
    assert answer.served is not None
    assert answer.served.receipt_verified is False
    assert signature_checks == []


def test_verify_where_it_carries_information_partial_serve_checks_no_signature(
    signature_checks: list[str],
) -> None:
    w = make_head_world(leaves=[1, 6])
    receipt = _answer(w, w.hops["value:42"], now=NOW + 2_000)
    served = [w.hops["value:42"][i] for i in (1, 6)]
    answer = judge_fold_answer(receipt, served, demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.SERVED, answer.reason
    assert signature_checks == []
    swapped = [served[1], served[0]]
    answer = judge_fold_answer(receipt, swapped, demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.UNATTRIBUTABLE
    assert signature_checks == [w.origin.node_id]


def test_s2_heads_signed_wrong_bytes_are_bad_data_verified_only_then(
    signature_checks: list[str],
) -> None:
    w = make_head_world()
    tampered = [h.replace(b'"step":2', b'"step":20') for h in w.hops["value:42"]]
    lying = sign_served(
        w.origin,
        w.demand,
        obligation=w.fold.obligation,
        commitment=w.fold.commitment,
        hops=tampered,
        now=NOW + 2_000,
    )
    answer = judge_fold_answer(lying, tampered, demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.EVIDENCE, answer.reason
    assert signature_checks == [w.origin.node_id]
    assert answer.evidence is not None
    data = answer.evidence.to_bytes()
    assert b'"proof"' in data
    assert Evidence.from_bytes(data).obligation is None
    verdict = verify_evidence(data, now=NOW)
    assert (verdict.kind, verdict.status) == (EvidenceKind.BAD_DATA, EvidenceStatus.PROVEN)
    assert verdict.obligation == w.head.digest
    assert verdict.commitment == w.fold.leaf_hash.hex()


def test_s2_heads_bytes_altered_after_signing_are_never_evidence() -> None:
    w = make_head_world()
    honest = _answer(w, w.hops["value:42"], now=NOW + 2_000)
    altered = [*w.hops["value:42"][:-1], b'{"forged":true}']
    answer = judge_fold_answer(honest, altered, demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.UNATTRIBUTABLE
    assert answer.evidence is None


def test_s3_heads_refusal_before_serve_until_is_proof_after_it_is_legitimate() -> None:
    w = make_head_world()
    refused = _answer(w, None, now=NOW + 2_000)
    assert refused.statement.reason is RefusalReason.EVICTED
    answer = judge_fold_answer(refused, [], demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.EVIDENCE
    assert answer.evidence is not None
    assert verify_evidence(answer.evidence.to_bytes(), now=NOW).kind is EvidenceKind.REFUSED
    expired = _answer(w, w.hops["value:42"], now=NOW + DAY)
    assert expired.statement.status is ReceiptStatus.REFUSED
    answer = judge_fold_answer(expired, [], demand=w.demand, fold=w.fold, reported_at=NOW + DAY)
    assert answer.kind is AnswerKind.LEGITIMATE


def test_s6_heads_pending_answer_for_a_pending_head_is_legitimate() -> None:
    w = make_head_world(pending=True)
    pending = _answer(w, None, now=NOW + 2_000)
    assert pending.statement.status is ReceiptStatus.PENDING
    answer = judge_fold_answer(pending, [], demand=w.demand, fold=w.fold, reported_at=NOW)
    assert answer.kind is AnswerKind.LEGITIMATE


def test_s4_heads_unanswered_cites_the_head_and_clears_on_an_answer() -> None:
    w = make_head_world()
    witness = fixed_identity("witness")
    wd = build_demand(witness, w.fold.obligation, now=NOW + 3_000, nonce="c3" * 16)
    report = build_witness_report(witness, wd, at=NOW + 9_000, address="127.0.0.1:50051")
    record = cite_head(
        unanswered_evidence(
            w.demand,
            obligation=w.fold.obligation,
            commitment=w.fold.commitment,
            re_asks=3,
            reported_at=NOW + 10_000,
            witness_demands=[wd],
            witness_reports=[report],
        ),
        w.fold,
    )
    verdict = verify_evidence(record.to_bytes(), now=NOW + 10_000)
    assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED
    answer = answer_demand(
        w.origin,
        wd,
        obligation=w.fold.obligation,
        commitment=w.fold.commitment,
        hops=w.hops["value:42"],
        now=NOW + 20_000,
    )
    cleared = verify_evidence(record.with_answer(answer).to_bytes(), now=NOW + 30_000)
    assert cleared.status is EvidenceStatus.CLEARED


def test_s7_heads_any_bearer_of_the_fold_proof_demands_from_the_origin() -> None:
    w = make_head_world()
    # The value went holder -> stranger; the fold proof and head travel with it.
    bearer = fixed_identity("stranger")
    cache = HeadCache()
    fold = cache.verify_fold(w.fold.proof.to_bytes(), now=NOW, head=w.head.to_bytes())
    d = build_demand(bearer, fold.obligation, now=NOW + 5, nonce="d5" * 16)
    receipt = answer_demand(
        w.origin,
        d,
        obligation=fold.obligation,
        commitment=fold.commitment,
        hops=w.hops["value:42"],
        now=NOW + 6,
    )
    answer = judge_fold_answer(receipt, w.hops["value:42"], demand=d, fold=fold, reported_at=NOW)
    assert answer.kind is AnswerKind.SERVED


def test_s8_heads_evidence_against_a_correct_origin_does_not_verify() -> None:
    w = make_head_world()
    honest = _answer(w, w.hops["value:42"], now=NOW + 2_000)
    framed = cite_head(
        Evidence(
            kind=EvidenceKind.BAD_DATA,
            accused=w.origin.node_id,
            commitment=w.fold.commitment.envelope,
            obligation=w.fold.obligation.envelope,
            demand=w.demand.envelope,
            receipt=honest.envelope,
        ),
        w.fold,
    )
    assert not check_evidence(framed.to_bytes(), now=NOW)
    # A receipt re-signed by the holder, claiming wrong bytes, is not the origin's.
    lie = resign_receipt(w.origin, honest, [b"{}"] * 8).envelope
    forged = sign_envelope(w.holder, lie.payload_type, lie.payload)
    stolen = dataclasses.replace(framed, receipt=forged)
    result = check_evidence(stolen.to_bytes(), now=NOW)
    assert not result
    assert isinstance(result.error, ContractError)
    # A fold proof that is not under the head makes the record invalid.
    other = dataclasses.replace(make_head_world(values=2).fold.proof, index=1)
    bad_proof = dataclasses.replace(framed, proof={"fold": other.to_text()})
    assert not check_evidence(bad_proof.to_bytes(), now=NOW)


# ------------------------------------------------------------------ split views


def _two_views(diverge_at: int, length: int) -> tuple[HeadLog, HeadLog]:
    """One origin keeping two logs for one epoch that differ from compaction ``diverge_at``."""
    origin = fixed_identity("origin")
    x, y = HeadLog(origin, EPOCH), HeadLog(origin, EPOCH)
    for c in range(length):
        for view, tag in ((x, "x"), (y, "y")):
            start = 1 + 10 * c + (1000 if tag == "y" and c >= diverge_at else 0)
            folds = [FoldInput("value:42", c, make_hops(origin.node_id, 3, start=start))]
            view.compact(folds, issued_at=NOW + c, **TERMS)  # type: ignore[arg-type]
    return x, y


def test_split_view_two_heads_of_one_compaction_with_different_trees_is_proof() -> None:
    x, y = _two_views(diverge_at=1, length=3)
    ev = split_view_evidence(x.heads[1], y.heads[1], reported_at=NOW)
    verdict = verify_evidence(ev.to_bytes(), now=NOW)
    assert (verdict.kind, verdict.status) == (EvidenceKind.SPLIT_VIEW, EvidenceStatus.PROVEN)
    assert verdict.is_proof
    with pytest.raises(NotEvidence, match="agree"):
        split_view_evidence(x.heads[0], y.heads[0], reported_at=NOW)


def test_a_split_view_record_carrying_a_custody_note_is_refused() -> None:
    # A split view accuses the origin that signed both heads; a custody note on it
    # would be read by no check and name a custodian in the verdict.
    x, y = _two_views(diverge_at=1, length=3)
    obj = json.loads(split_view_evidence(x.heads[1], y.heads[1], reported_at=NOW).to_bytes())
    obj["custody"] = "provnet-custody/v1\n"
    with pytest.raises(EncodingError, match="bad_data, refused or unanswered"):
        Evidence.from_json(obj)


@pytest.mark.parametrize(("diverge_at", "first", "second"), [(1, 1, 4), (2, 2, 6), (1, 3, 5)])
def test_split_view_a_consistency_path_that_fails_under_the_later_log_root_is_proof(
    diverge_at: int, first: int, second: int
) -> None:
    x, y = _two_views(diverge_at=diverge_at, length=second + 1)
    # The holder of X's head asks the origin to prove Y's later head extends it;
    # the origin's own path (from its Y log) reproduces Y's signed log root but
    # not X's: the two heads cannot both be true.
    path = y.consistency_path(first, second)
    ev = split_view_evidence(x.heads[first], y.heads[second], reported_at=NOW, path=path)
    assert verify_evidence(ev.to_bytes(), now=NOW).kind is EvidenceKind.SPLIT_VIEW
    # The same heads of one view are consistent: not evidence.
    with pytest.raises(NotEvidence, match="consistent"):
        split_view_evidence(
            y.heads[first], y.heads[second], reported_at=NOW, path=y.consistency_path(first, second)
        )
    # A path that does not reproduce the later log root proves nothing (no framing).
    with pytest.raises(NotEvidence, match="proves nothing"):
        split_view_evidence(
            x.heads[first], y.heads[second], reported_at=NOW, path=x.consistency_path(first, second)
        )


def test_split_view_record_framing_another_origin_or_epoch_does_not_verify() -> None:
    x, y = _two_views(diverge_at=0, length=1)
    ev = split_view_evidence(x.heads[0], y.heads[0], reported_at=NOW)
    framed = dataclasses.replace(ev, accused=fixed_identity("stranger").node_id)
    assert check_evidence(framed.to_bytes(), now=NOW).failed == "BindingMismatch"
    other_epoch = HeadLog(fixed_identity("origin"), "run-2")
    other_epoch.compact(
        [FoldInput("value:42", 0, make_hops(x.heads[0].signer, 3))],
        issued_at=NOW,
        **TERMS,  # type: ignore[arg-type]
    )
    with pytest.raises(NotEvidence, match="different epochs"):
        split_view_evidence(x.heads[0], other_epoch.heads[0], reported_at=NOW)
    # Heads of different seq need a path.
    x2, _ = _two_views(diverge_at=0, length=2)
    no_path = dataclasses.replace(ev, conflicting=x2.heads[1].note)
    assert check_evidence(no_path.to_bytes(), now=NOW).failed == "EncodingError"


def test_head_cache_points_out_a_conflicting_head_of_the_same_compaction() -> None:
    x, y = _two_views(diverge_at=0, length=1)
    cache = HeadCache()
    cache.verify(x.heads[0], now=NOW)
    seen = cache.verify(y.heads[0], now=NOW)
    other = cache.conflicting(seen)
    assert other is not None
    assert other.digest == x.heads[0].digest
    assert cache.conflicting(x.heads[0]) is None
    ev = split_view_evidence(other, seen, reported_at=NOW)
    assert verify_evidence(ev, now=NOW).status is EvidenceStatus.PROVEN


@pytest.mark.parametrize("values", [1, 4])
def test_bytes_per_value_with_a_verified_head_stay_under_400_for_any_number_of_folds(
    values: int,
) -> None:
    ow = make_world()
    old_per_fold = len(ow.commitment.to_bytes()) + len(ow.obligation.to_bytes())
    sizes = []
    for folds in (1, 5, 50):
        w = make_head_world(values=values, compactions=folds)
        proof = w.log.fold_proof("value:42").to_bytes()
        sizes.append(len(proof))
        assert len(proof) <= 400, (values, folds, len(proof))
        # The per-fold scheme carries every fold's pair; one pair already costs more.
        assert len(proof) < old_per_fold
    assert sizes[1] == sizes[2]  # fold_seq 4 -> 49: both one-byte varints, nothing else


def test_s5_heads_an_unexpired_head_blocks_evicting_its_folds() -> None:
    w = make_head_world()
    leaf = w.fold.leaf_hash.hex()
    blockers = eviction_blockers([w.fold.obligation], commitment=leaf, now=NOW + 1)
    assert [b.digest for b in blockers] == [w.head.digest]
    assert eviction_blockers([w.fold.obligation], commitment=leaf, now=NOW + DAY) == ()
    other = verify_fold(w.log.fold_proof("value:1"), w.head)
    assert eviction_blockers([other.obligation], commitment=leaf, now=NOW + 1) == ()


def test_split_view_a_holder_judges_whether_a_later_head_extends_the_one_it_holds() -> None:
    x, y = _two_views(diverge_at=2, length=6)
    # One view: the origin's path shows head 5 extends head 1.
    path = y.consistency_path(1, 5)
    assert judge_head_extension(y.heads[1], y.heads[5], path, reported_at=NOW) is None
    assert judge_head_extension(y.heads[3], y.heads[3], (), reported_at=NOW) is None
    # The holder of X's head 3 is shown Y's head 5: the origin's own path convicts it.
    ev = judge_head_extension(x.heads[3], y.heads[5], y.consistency_path(3, 5), reported_at=NOW)
    assert ev is not None
    assert verify_evidence(ev, now=NOW).kind is EvidenceKind.SPLIT_VIEW
    # A path that does not lead to the later signed root proves nothing either way.
    with pytest.raises(RootMismatch):
        judge_head_extension(x.heads[3], y.heads[5], x.consistency_path(3, 5), reported_at=NOW)
    with pytest.raises(ValueError, match="earlier first"):
        judge_head_extension(y.heads[5], y.heads[1], (), reported_at=NOW)
