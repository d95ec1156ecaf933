"""Batched demands and receipts (payload version 3, ``contracts.batch``).

One signed demand per origin names every fold a rehydration wants; one signed
receipt answers them all. Every per-fold guarantee must hold unchanged: each
fold's serve is judged lazily (no signature) when its bytes reproduce the
root, and ``bad_data`` / ``refused`` / ``unanswered`` for any one fold are
provable from the batch statements and that fold's bytes alone.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
    BindingMismatch,
    EncodingError,
    Evidence,
    EvidenceKind,
    EvidenceStatus,
    NotEvidence,
    ReceiptStatus,
    RefusalReason,
    build_witness_report,
    cite_head,
    open_statement,
    sign_envelope,
    unanswered_evidence,
    verify_evidence,
)
from contracts._fields import MAX_TIME_MS
from contracts.batch import (
    DEMAND_BATCH_TYPE,
    MAX_BATCH,
    RECEIPT_BATCH_TYPE,
    DemandBatch,
    DemandItem,
    decode_demand_batch,
    decode_receipt_batch,
    encode_demand_batch,
    encode_receipt_batch,
    receipt_item,
    receipt_item_bytes,
    served_whole_item,
    sign_receipt_batch,
)
from contracts.envelope import Envelope
from contracts.evidence import Answer, AnswerKind, verify_clearing
from contracts.identity import SignatureCount, observe_signatures
from contracts.lazy import (
    judge_fold_answer,
    served_batch_without_signature,
)
from contracts.serve import build_demand
from contracts.signed import Signed
from contracts.statements import Demand, Receipt
from tests.contracts._support import (
    DAY,
    NOW,
    BatchWorld,
    fixed_identity,
    make_batch_world,
    make_head_world,
)


def _items(b: BatchWorld, receipt: bytes) -> list[Signed[Receipt]]:
    """The receipt batch's items, read without a signature check (as a holder does)."""
    envelope = Envelope.from_bytes(receipt)
    return [Signed(envelope, r) for r in decode_receipt_batch(envelope.payload).items]


def _key(b: BatchWorld, i: int) -> tuple[str, str]:
    return b.folds[i].obligation.digest, b.folds[i].commitment.digest


def _judge(b: BatchWorld, receipt: bytes, served: Sequence[Sequence[bytes]], i: int) -> Answer:
    return judge_fold_answer(
        _items(b, receipt)[i],
        served[i],
        demand=b.demands[i],
        fold=b.folds[i],
        reported_at=NOW + 4_000,
    )


# ---------------------------------------------------------------- one signature per side


def test_one_batch_names_every_fold_and_is_read_as_each_folds_demand() -> None:
    b = make_batch_world(values=3)
    batch = decode_demand_batch(b.demand.payload)
    assert len(batch.items) == 3
    assert len(b.demand.signatures) == 1
    assert b.demand.payload_type == DEMAND_BATCH_TYPE
    for i, demand in enumerate(b.demands):
        opened = open_statement(b.demand, Demand, fold=_key(b, i))  # one signature, the batch's
        assert opened.statement == demand.statement
        assert opened.digest == b.demand.digest
        assert (demand.statement.obligation, demand.statement.commitment) == _key(b, i)
    assert encode_demand_batch(batch) == b.demand.payload


def test_a_batch_is_not_read_without_naming_the_fold() -> None:
    b = make_batch_world()
    with pytest.raises(EncodingError, match="name the fold"):
        open_statement(b.demand, Demand)
    other = ("ab" * 32, "cd" * 32)
    with pytest.raises(BindingMismatch, match="names no fold"):
        open_statement(b.demand, Demand, fold=other)


def test_a_faithful_batch_serve_is_judged_with_no_signature_verification() -> None:
    b = make_batch_world()
    receipt = b.answer(now=NOW + 2_000).to_bytes()
    checked = SignatureCount()
    with observe_signatures(checked):
        for i in range(3):
            verdict = _judge(b, receipt, list(b.hops), i)
            assert verdict.kind is AnswerKind.SERVED, verdict.reason
            assert verdict.served is not None
            assert verdict.served.hops == b.hops[i]
            assert verdict.served.receipt_verified is False
    assert checked.verifies == 0


# ---------------------------------------------------------------- evidence per fold


def test_s2_batch_bad_data_for_one_fold_is_proven_from_the_batches_and_its_bytes() -> None:
    b = make_batch_world()
    tampered = [b.hops[1][0] + b" ", *b.hops[1][1:]]
    receipt = b.answer([b.hops[0], tampered, b.hops[2]], now=NOW + 2_000).to_bytes()
    served = [b.hops[0], tuple(tampered), b.hops[2]]
    assert _judge(b, receipt, served, 0).kind is AnswerKind.SERVED
    assert _judge(b, receipt, served, 2).kind is AnswerKind.SERVED
    verdict = _judge(b, receipt, served, 1)
    assert verdict.kind is AnswerKind.EVIDENCE
    assert verdict.evidence is not None
    assert verdict.evidence.kind is EvidenceKind.BAD_DATA
    # standalone: the file alone (batch demand + batch receipt + head + fold proof)
    data = verdict.evidence.to_bytes()
    v = verify_evidence(data, now=NOW + DAY)
    assert (v.kind, v.status, v.accused) == (
        EvidenceKind.BAD_DATA,
        EvidenceStatus.PROVEN,
        b.world.origin.node_id,
    )
    # the same batch receipt cited for a fold it served faithfully proves nothing
    other = dataclasses.replace(verdict.evidence, proof={"fold": b.folds[0].proof.to_text()})
    with pytest.raises(NotEvidence):
        verify_evidence(other, now=NOW + DAY)


def test_s2_batch_bytes_altered_after_signing_are_never_evidence() -> None:
    b = make_batch_world()
    receipt = b.answer(now=NOW + 2_000).to_bytes()
    altered = [b.hops[0], (b.hops[1][0] + b" ", *b.hops[1][1:]), b.hops[2]]
    verdict = _judge(b, receipt, altered, 1)
    assert verdict.kind is AnswerKind.UNATTRIBUTABLE
    assert verdict.evidence is None


def test_s3_batch_refusal_of_one_fold_before_serve_until_is_proof() -> None:
    b = make_batch_world()
    receipt = b.answer([b.hops[0], b.hops[1], None], now=NOW + 2_000).to_bytes()
    item = receipt_item(Envelope.from_bytes(receipt).payload, _key(b, 2))
    assert (item.status, item.reason) == (ReceiptStatus.ABSENT, RefusalReason.EVICTED)
    verdict = _judge(b, receipt, [b.hops[0], b.hops[1], ()], 2)
    assert verdict.kind is AnswerKind.EVIDENCE
    assert verdict.evidence is not None
    v = verify_evidence(verdict.evidence.to_bytes(), now=NOW + DAY)
    assert (v.kind, v.status) == (EvidenceKind.REFUSED, EvidenceStatus.PROVEN)
    assert _judge(b, receipt, [b.hops[0], b.hops[1], ()], 0).kind is AnswerKind.SERVED


def test_s4_batch_unanswered_cites_the_signed_batch_and_clears_on_its_receipt() -> None:
    b = make_batch_world()
    witness = fixed_identity("witness")
    fold = b.folds[1]
    w_demand = build_demand(witness, fold.obligation, now=NOW + 3_000, nonce="e5" * 16)
    report = build_witness_report(witness, w_demand, at=NOW + 9_000, address="127.0.0.1:50051")
    suspicion = cite_head(
        unanswered_evidence(
            b.demands[1],
            obligation=fold.obligation,
            commitment=fold.commitment,
            re_asks=1,
            reported_at=NOW + 10_000,
            witness_demands=[w_demand],
            witness_reports=[report],
        ),
        fold,
    )
    assert suspicion.demand == b.demand  # the signed batch itself
    v = verify_evidence(suspicion.to_bytes(), now=NOW + DAY)
    assert (v.kind, v.status) == (EvidenceKind.UNANSWERED, EvidenceStatus.WITNESS_CONFIRMED)
    receipt = b.answer(now=NOW + 20_000)
    cleared = verify_evidence(suspicion.with_answer(receipt).to_bytes(), now=NOW + DAY)
    assert cleared.status is EvidenceStatus.CLEARED
    assert verify_clearing(suspicion, receipt.to_bytes(), now=NOW + DAY).status is (
        EvidenceStatus.CLEARED
    )


def test_s8_batch_evidence_for_a_fold_the_batch_does_not_name_is_rejected() -> None:
    b = make_batch_world(values=3)
    receipt = b.answer(
        [b.hops[0], (b.hops[1][0] + b" ", *b.hops[1][1:]), b.hops[2]], now=NOW + 2_000
    )
    verdict = _judge(
        b, receipt.to_bytes(), [b.hops[0], (b.hops[1][0] + b" ", *b.hops[1][1:]), b.hops[2]], 1
    )
    assert verdict.evidence is not None
    # a demand batch (signed by the holder) that does not name the fold
    lone = make_batch_world(values=3)
    other_items = tuple(
        it
        for it in decode_demand_batch(lone.demand.payload).items
        if (it.obligation, it.commitment) != _key(b, 1)
    )
    batch = dataclasses.replace(decode_demand_batch(lone.demand.payload), items=other_items)
    forged = sign_envelope(lone.world.holder, DEMAND_BATCH_TYPE, encode_demand_batch(batch))
    framed = dataclasses.replace(verdict.evidence, demand=forged)
    with pytest.raises(BindingMismatch, match="names no fold"):
        verify_evidence(framed, now=NOW + DAY)


# ---------------------------------------------------------------- strict encoding


def test_batch_payloads_are_strict_every_truncation_and_trailing_byte_fails() -> None:
    b = make_batch_world()
    demand = b.demand.payload
    receipt = b.answer([b.hops[0], None, b.hops[2]], now=NOW + 2_000).payload
    assert encode_receipt_batch(decode_receipt_batch(receipt)) == receipt
    for data, decode in ((demand, decode_demand_batch), (receipt, decode_receipt_batch)):
        for cut in range(len(data)):
            with pytest.raises(EncodingError):
                decode(data[:cut])
        with pytest.raises(EncodingError, match="trailing"):
            decode(data + b"\x00")
        with pytest.raises(EncodingError, match="version"):
            decode(b"\x02" + data[1:])


def test_batch_items_are_in_one_order_once_and_counted() -> None:
    b = make_batch_world()
    batch = decode_demand_batch(b.demand.payload)
    swapped = dataclasses.replace(batch, items=tuple(reversed(batch.items)))
    with pytest.raises(ValueError, match="strictly increasing"):
        encode_demand_batch(swapped)
    # hand-built payload with the items out of order: rejected on decode too
    head_len = 2 + 32 + 32 + 8 + 1 + len(batch.nonce) + 2
    items = b.demand.payload[head_len:]
    size = 65  # 32 + 32 + whole-fold flag
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    reordered = b.demand.payload[:head_len] + b"".join(reversed(chunks))
    with pytest.raises(EncodingError, match="strictly increasing"):
        decode_demand_batch(reordered)
    zero = b.demand.payload[: head_len - 2] + struct.pack(">H", 0)
    with pytest.raises(EncodingError, match="item count 0"):
        decode_demand_batch(zero)
    with pytest.raises(ValueError, match=f"1..{MAX_BATCH}"):
        encode_demand_batch(dataclasses.replace(batch, items=()))
    receipt = decode_receipt_batch(b.answer(now=NOW + 2_000).payload)
    twice = dataclasses.replace(receipt, items=(receipt.items[0], receipt.items[0]))
    with pytest.raises(ValueError, match="once"):
        encode_receipt_batch(twice)


def test_one_form_per_payload_type_a_batch_is_never_read_as_a_single_statement() -> None:
    b = make_batch_world()
    as_single = sign_envelope(
        b.world.holder, "application/vnd.provnet.demand.v2+bin", b.demand.payload
    )
    with pytest.raises(EncodingError):
        open_statement(as_single, Demand)
    as_receipt = sign_envelope(b.world.holder, RECEIPT_BATCH_TYPE, b.demand.payload)
    with pytest.raises(EncodingError):
        open_statement(as_receipt, Receipt, fold=_key(b, 0))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_raise_encoding_error(data: bytes) -> None:
    for decode in (decode_demand_batch, decode_receipt_batch):
        try:
            decoded = decode(data)
        except EncodingError:
            continue
        encode = encode_demand_batch if isinstance(decoded, DemandBatch) else encode_receipt_batch
        assert encode(decoded) == data  # type: ignore[arg-type]


def test_demand_item_fields_round_trip() -> None:
    item = DemandItem("00" * 32, "11" * 32, (1, 5))
    batch = DemandBatch("22" * 32, "33" * 32, "n" * 16, NOW, (item,))
    assert decode_demand_batch(encode_demand_batch(batch)) == batch


def test_not_evidence_when_the_batch_receipt_serves_every_fold_faithfully() -> None:
    b = make_batch_world()
    receipt = b.answer(now=NOW + 2_000)
    bogus = Evidence(
        kind=EvidenceKind.BAD_DATA,
        accused=b.world.origin.node_id,
        commitment=b.folds[0].commitment.envelope,
        obligation=b.folds[0].obligation.envelope,
        demand=b.demand,
        receipt=receipt,
        reported_at=NOW + 4_000,
    )
    with pytest.raises(NotEvidence):
        verify_evidence(cite_head(bogus, b.folds[0]), now=NOW + DAY)


# ---------------------------------------------------------------- packed items, batches by bytes


def _whole(b: BatchWorld, i: int) -> bytes:
    f = b.folds[i]
    return served_whole_item(
        f.obligation.digest, f.commitment.digest, f.record.leaf_count, f.record.root
    )


def test_a_packed_whole_fold_item_is_the_item_the_receipt_encoder_writes() -> None:
    b = make_batch_world()
    now = NOW + 2_000
    reference = b.answer(now=now)  # items built as Receipt statements
    packed = sign_receipt_batch(
        b.world.origin,
        [_whole(b, i) for i in range(3)],
        demand=b.demand.digest,
        nonce=b.demands[0].statement.nonce,
        issued_at=now,
    )
    assert packed.payload == reference.payload
    batch = decode_receipt_batch(packed.payload)
    assert encode_receipt_batch(batch) == packed.payload
    assert [receipt_item_bytes(r) for r in batch.items] == [_whole(b, i) for i in range(3)]
    with pytest.raises(ValueError, match="each fold once"):
        sign_receipt_batch(
            b.world.origin,
            [_whole(b, 0), _whole(b, 0)],
            demand=b.demand.digest,
            nonce=b.demands[0].statement.nonce,
            issued_at=now,
        )


def _served_batch(b: BatchWorld, payload: bytes, hops: Sequence[Sequence[bytes]]) -> bool:
    return served_batch_without_signature(
        payload,
        hops,
        origin=b.world.origin.node_id,
        demand=b.demand.digest,
        nonce=b.demands[0].statement.nonce,
        folds=b.folds,
    )


def test_a_faithful_receipt_batch_is_recognised_by_its_bytes_with_no_signature_check() -> None:
    b = make_batch_world()
    payload = b.answer(now=NOW + 2_000).payload
    checked = SignatureCount()
    with observe_signatures(checked):
        assert _served_batch(b, payload, b.hops)
    assert checked.verifies == 0


def test_a_receipt_batch_that_is_not_exactly_the_faithful_one_decides_nothing() -> None:
    b = make_batch_world()
    now = NOW + 2_000
    payload = b.answer(now=now).payload
    head_len = len(payload) - sum(len(_whole(b, i)) for i in range(3))
    altered = [b.hops[0], b.hops[1], (b"x" + b.hops[2][0][1:], *b.hops[2][1:])]
    assert not _served_batch(b, payload, altered)  # bytes that miss the root
    assert not _served_batch(b, payload, [b.hops[0], b.hops[1], b.hops[2][:-1]])
    assert not _served_batch(b, payload, b.hops[:2])
    assert not _served_batch(b, payload + b"\x00", b.hops)  # trailing byte
    assert not _served_batch(b, payload[:-1], b.hops)
    refused = b.answer([b.hops[0], None, b.hops[2]], now=b.folds[1].head.statement.serve_until)
    assert not _served_batch(b, refused.payload, b.hops)
    # another demand, nonce or origin; items out of order; issued_at out of range
    flipped = bytearray(payload)
    flipped[40] ^= 1  # inside the demand digest
    assert not _served_batch(b, bytes(flipped), b.hops)
    flipped = bytearray(payload)
    flipped[5] ^= 1  # inside the origin id
    assert not _served_batch(b, bytes(flipped), b.hops)
    flipped = bytearray(payload)
    flipped[head_len - 3] ^= 1  # the nonce's last byte
    assert not _served_batch(b, bytes(flipped), b.hops)
    swapped = payload[:head_len] + _whole(b, 1) + _whole(b, 0) + _whole(b, 2)
    assert not _served_batch(b, swapped, b.hops)
    late = payload[:66] + struct.pack(">Q", MAX_TIME_MS + 1) + payload[74:]
    assert not _served_batch(b, late, b.hops)
    assert _served_batch(b, payload[:66] + struct.pack(">Q", 7) + payload[74:], b.hops)


# ---------------------------------------------------------------- the one layout, declared once


def test_the_layout_tables_are_the_documented_bytes_for_a_demand_and_receipt_of_one() -> None:
    """docs/contracts.md "Demands and receipts": the bytes written out by hand from the
    table there equal what the layout tables encode, and decode back to the fields."""
    from contracts.batch import DEMAND_LAYOUT, RECEIPT_LAYOUT, demand_payload, receipt_payload

    w = make_head_world()
    d = w.demand.statement
    nonce = d.nonce.encode()
    by_hand = (
        bytes((3, ord("d")))
        + bytes.fromhex(d.holder)
        + bytes.fromhex(d.origin)
        + struct.pack(">QB", d.time, len(nonce))
        + nonce
        + struct.pack(">H", 1)
        + bytes.fromhex(d.obligation)
        + bytes.fromhex(d.commitment)
        + b"\x00"  # LEAVES: the whole fold
    )
    assert demand_payload(d) == w.demand.envelope.payload == by_hand
    r = w.answer(w.demand, w.hops["value:42"], now=NOW + 2_000).statement
    by_hand = (
        bytes((3, ord("r")))
        + bytes.fromhex(r.origin)
        + bytes.fromhex(r.demand)
        + struct.pack(">QB", r.issued_at, len(nonce))
        + nonce
        + struct.pack(">H", 1)
        + bytes.fromhex(r.obligation)
        + bytes.fromhex(r.commitment)
        + struct.pack(">QBB", r.tree_size, 1, 0)  # SERVED, no reason
        + b"\x00\x01"  # whole fold; served_root present
        + bytes.fromhex(str(r.served_root))
        + struct.pack(">II", 0, 0)  # no leaf hashes, no proofs
    )
    assert receipt_payload(r) == by_hand
    assert [name for name, _ in DEMAND_LAYOUT.head] == [
        "version", "kind", "holder", "origin", "time", "nonce",
    ]  # fmt: skip
    assert [name for name, _ in RECEIPT_LAYOUT.item] == [
        "obligation", "commitment", "tree_size", "status", "reason", "leaves",
        "served_root", "leaf_hashes", "proofs",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("at", "byte", "field"),
    [
        (0, 2, "version"),
        (1, ord("D"), "kind"),
        (74, 3, "nonce"),  # the nonce's length byte: too short
        (-1, 7, "leaves"),
    ],
)
def test_a_malformed_demand_is_refused_naming_the_field(at: int, byte: int, field: str) -> None:
    payload = bytearray(make_head_world().demand.envelope.payload)
    payload[at] = byte
    with pytest.raises(EncodingError, match=rf"demand \(v3\).* {field}"):
        decode_demand_batch(bytes(payload))


def test_earlier_demand_and_receipt_forms_are_not_read() -> None:
    """One wire form: a demand signed as JSON (version 1) or in the per-fold binary
    form (version 2) is refused naming its payload type, whoever signed it."""
    w = make_head_world()
    for old in ("demand+json", "demand.v2+bin"):
        env = sign_envelope(w.holder, f"application/vnd.provnet.{old}", w.demand.envelope.payload)
        with pytest.raises(EncodingError, match=old.replace("+", r"\+")):
            open_statement(env, Demand)
    receipt = w.answer(w.demand, w.hops["value:42"], now=NOW + 2_000)
    for old in ("receipt+json", "receipt.v2+bin"):
        env = sign_envelope(w.origin, f"application/vnd.provnet.{old}", receipt.envelope.payload)
        with pytest.raises(EncodingError, match=old.replace("+", r"\+")):
            open_statement(env, Receipt)
