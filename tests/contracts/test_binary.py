"""The compact binary form (version 2) of demands and receipts (``contracts.binary``)."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
    ContractError,
    EncodingError,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    answer_demand,
    build_demand,
    judge_answer,
    open_any,
    open_statement,
    parse_statement,
    sign_envelope,
    sign_statement,
    verify_served,
)
from contracts.binary import (
    DEMAND_BINARY_TYPE,
    REASON_CODES,
    RECEIPT_BINARY_TYPE,
    STATUS_CODES,
    decode_demand,
    decode_receipt,
    encode_demand,
    encode_receipt,
)
from contracts.envelope import EnvelopeSigner
from contracts.evidence import AnswerKind
from contracts.serve import WholeFoldReceipts
from contracts.signed import is_binary
from contracts.statements import Demand, payload_type_for
from tests.contracts._support import DAY, NOW, make_head_world, make_world


def _receipts() -> list[Receipt]:
    w = make_world(n_hops=8)
    out = []
    for leaves in (None, [1, 6], []):
        demand = build_demand(w.holder, w.obligation, now=NOW + 1_000, leaves=leaves)
        served = w.answer(demand, now=NOW + 2_000)
        out.append(served.statement)
    pending = make_world(n_hops=8, provenance_pending=True)
    out.append(
        answer_demand(
            pending.origin,
            pending.demand,
            obligation=pending.obligation,
            commitment=pending.commitment,
            hops=None,
            now=NOW + 2_000,
        ).statement
    )
    out.append(
        dataclasses.replace(
            out[-1], status=ReceiptStatus.REFUSED, reason=RefusalReason.OVERLOADED, nonce=""
        )
    )
    return out


def test_every_status_and_reason_has_a_fixed_wire_code() -> None:
    assert set(STATUS_CODES) == set(ReceiptStatus)
    assert set(REASON_CODES) == set(RefusalReason)
    assert len(set(STATUS_CODES.values())) == len(STATUS_CODES)
    assert len(set(REASON_CODES.values())) == len(REASON_CODES)
    assert 0 not in REASON_CODES.values()  # 0 means "no reason"


@pytest.mark.parametrize("leaves", [None, [0], [1, 6], []])
def test_a_demand_decodes_to_the_same_fields_as_its_json_form(leaves: list[int] | None) -> None:
    w = make_world()
    binary = build_demand(w.holder, w.obligation, now=NOW + 1_000, leaves=leaves)
    legacy = build_demand(
        w.holder,
        w.obligation,
        now=NOW + 1_000,
        leaves=leaves,
        nonce=binary.statement.nonce,
        binary=False,
    )
    assert binary.envelope.payload_type == DEMAND_BINARY_TYPE
    assert legacy.envelope.payload_type == payload_type_for(Demand.KIND)
    assert decode_demand(binary.envelope.payload) == legacy.statement
    assert encode_demand(legacy.statement) == binary.envelope.payload
    # smaller on the wire than the JSON form, and a different digest
    assert len(binary.to_bytes()) < len(legacy.to_bytes()) * 0.7
    assert binary.digest != legacy.digest


def test_receipts_of_every_shape_round_trip() -> None:
    for receipt in _receipts():
        data = encode_receipt(receipt)
        assert decode_receipt(data) == receipt
        assert Receipt.from_json(receipt.to_json()) == receipt


@pytest.mark.parametrize("binary", [False, True])
def test_an_origin_answers_in_the_form_of_the_demand(binary: bool) -> None:
    w = make_world(binary=binary)
    assert is_binary(w.demand) is binary
    served = w.answer(w.demand, now=NOW + 2_000)
    assert is_binary(served) is binary
    fold = verify_served(
        served.to_bytes(),
        w.hops,
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
    )
    assert fold.hops == w.hops


def _mutations(data: bytes) -> list[tuple[str, bytes]]:
    return [
        ("trailing byte", data + b"\x00"),
        ("version", b"\x01" + data[1:]),
        ("kind", data[:1] + b"X" + data[2:]),
        ("empty", b""),
    ]


def test_the_demand_decoder_is_strict() -> None:
    w = make_world(leaves=[1, 6])
    data = w.demand.envelope.payload
    for what, bad in _mutations(data):
        with pytest.raises(EncodingError):
            decode_demand(bad)
        assert what
    for cut in range(len(data)):
        with pytest.raises(EncodingError):
            decode_demand(data[:cut])
    nonce_at = 2 + 4 * 32 + 8
    assert data[nonce_at] == 32
    spaced = bytearray(data)
    spaced[nonce_at + 1] = 0x20  # a space in the nonce
    with pytest.raises(EncodingError, match="nonce"):
        decode_demand(bytes(spaced))
    leaves_at = nonce_at + 1 + 32
    flag = bytearray(data)
    flag[leaves_at] = 2
    with pytest.raises(EncodingError, match="leaves flag"):
        decode_demand(bytes(flag))
    unsorted = bytearray(data)
    unsorted[leaves_at + 5 : leaves_at + 21] = struct.pack(">QQ", 6, 1)
    with pytest.raises(EncodingError, match="strictly increasing"):
        decode_demand(bytes(unsorted))


def test_the_receipt_decoder_is_strict() -> None:
    served_full, served_partial, *_ = _receipts()
    for receipt in (served_full, served_partial):
        data = encode_receipt(receipt)
        for _, bad in _mutations(data):
            with pytest.raises(EncodingError):
                decode_receipt(bad)
        for cut in range(len(data)):
            with pytest.raises(EncodingError):
                decode_receipt(data[:cut])
    buf = bytearray(encode_receipt(served_full))
    status_at = 2 + 4 * 32 + 16
    buf[status_at] = 9
    with pytest.raises(EncodingError, match="unknown status"):
        decode_receipt(bytes(buf))
    buf[status_at] = STATUS_CODES[ReceiptStatus.SERVED]
    buf[status_at + 1] = REASON_CODES[RefusalReason.EVICTED]
    with pytest.raises(EncodingError, match="SERVED receipt carries no reason"):
        decode_receipt(bytes(buf))


def test_the_encoder_refuses_what_the_binary_form_cannot_carry() -> None:
    w = make_world()
    with pytest.raises(ValueError, match="visible ASCII"):
        build_demand(w.holder, w.obligation, now=NOW, nonce="é" * 16)
    # the JSON form still carries it
    assert build_demand(w.holder, w.obligation, now=NOW, nonce="é" * 16, binary=False)
    with pytest.raises(ValueError, match="no binary form"):
        sign_statement(w.origin, w.commitment.statement, binary=True)


def test_a_payload_type_names_one_kind_and_one_form() -> None:
    w = make_world()
    payload = w.demand.envelope.payload
    # binary demand bytes under the JSON demand type, or the receipt type: refused
    for wrong in (payload_type_for(Demand.KIND), RECEIPT_BINARY_TYPE):
        env = sign_envelope(w.holder, wrong, payload)
        with pytest.raises(EncodingError):
            open_statement(env.to_bytes(), Demand)
        with pytest.raises(ContractError):
            open_any(env.to_bytes())
    with pytest.raises(EncodingError, match="payload type"):
        parse_statement(w.demand.to_bytes(), Receipt)
    assert open_any(w.demand.to_bytes()).statement == w.demand.statement


def test_a_binary_receipt_altered_after_signing_is_not_evidence_but_a_signed_lie_is() -> None:
    w = make_world()
    tampered = [w.hops[0] + b" ", *w.hops[1:]]
    lying = w.answer(w.demand, now=NOW + 2_000)
    # the origin signs a served root of other bytes: bad_data, from the binary receipt
    lie = dataclasses.replace(
        lying.statement, served_root=verify_root_of(tampered), issued_at=NOW + 2_000
    )
    signed_lie = sign_statement(w.origin, lie, binary=True)
    answer = judge_answer(
        signed_lie.to_bytes(),
        tampered,
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 3_000,
    )
    assert answer.kind is AnswerKind.EVIDENCE
    assert answer.evidence is not None
    # the same receipt with one payload byte changed: its signature fails, no evidence
    env = signed_lie.envelope
    altered = dataclasses.replace(env, payload=env.payload[:-9] + b"\x00" + env.payload[-8:])
    answer = judge_answer(
        altered.to_bytes(),
        tampered,
        demand=w.demand,
        obligation=w.obligation,
        commitment=w.commitment,
        reported_at=NOW + 3_000,
    )
    assert answer.evidence is None


def verify_root_of(hops: list[bytes]) -> str:
    from contracts import merkle_root

    return merkle_root(hops).hex()


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600), kind=st.sampled_from(["demand", "receipt"]))
def test_arbitrary_bytes_decode_or_raise_encoding_error(data: bytes, kind: str) -> None:
    decode = decode_demand if kind == "demand" else decode_receipt
    prefix = b"\x02D" if kind == "demand" else b"\x02R"
    for candidate in (data, prefix + data):
        try:
            decoded = decode(candidate)
        except EncodingError:
            continue
        # whatever decodes re-encodes to exactly the same bytes: one encoding per value
        encode = encode_demand if kind == "demand" else encode_receipt
        assert encode(decoded) == candidate  # type: ignore[arg-type]


# ---------------------------------------------------------------- receipts from a fold's template


@pytest.mark.parametrize("n_hops", [1, 8])
@pytest.mark.parametrize("nonce", ["a1" * 8, "Z" * 128, "n0nce-" * 5])
def test_a_whole_fold_receipt_from_the_template_is_the_one_answer_demand_signs(
    n_hops: int, nonce: str
) -> None:
    w = make_head_world(n_hops=n_hops)
    receipts = WholeFoldReceipts(
        w.origin, obligation=w.fold.obligation, commitment=w.fold.commitment
    )
    hops = w.hops["value:42"]
    for time_ms, now in ((NOW + 1_000, NOW + 2_000), (NOW, NOW + DAY - 1)):
        demand = build_demand(w.holder, w.fold.obligation, now=time_ms, nonce=nonce)
        expected = w.answer(demand, hops, now=now)
        assert expected.statement.status is ReceiptStatus.SERVED
        assert receipts.sign(demand, now) == expected.to_bytes()


def test_the_template_serves_only_binary_demands_for_the_whole_fold() -> None:
    w = make_head_world()
    receipts = WholeFoldReceipts(
        w.origin, obligation=w.fold.obligation, commitment=w.fold.commitment
    )
    subset = build_demand(w.holder, w.fold.obligation, now=NOW + 1_000, leaves=[1, 2])
    as_json = build_demand(w.holder, w.fold.obligation, now=NOW + 1_000, binary=False)
    for demand in (subset, as_json):
        with pytest.raises(ValueError, match="not a binary demand for the whole fold"):
            receipts.sign(demand, NOW + 2_000)


def test_an_envelope_signer_writes_the_bytes_of_sign_envelope() -> None:
    origin = make_head_world().origin
    signer = EnvelopeSigner(origin, RECEIPT_BINARY_TYPE)
    for payload in (b"", b"x", bytes(range(256)) * 3):
        expected = sign_envelope(origin, RECEIPT_BINARY_TYPE, payload)
        assert signer.sign(payload) == expected.to_bytes()
    with pytest.raises(ValueError, match="not plain text"):
        EnvelopeSigner(origin, 'type with "quotes"')
