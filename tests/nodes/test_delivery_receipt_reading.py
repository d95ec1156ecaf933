"""A signed delivery receipt as the sender that asked for it reads it
(``Holding.forward``: :func:`contracts.signed.parse_statement` bound to the
peer's key, before the signature is verified): a receipt that is malformed, of
another kind or bound to another key than the peer's is refused with the error
naming what failed; a well-formed one is read field for field as signed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contracts.canonical import canonical_bytes
from contracts.envelope import sign_envelope
from contracts.errors import BindingMismatch, EncodingError
from contracts.signed import Signed, StatementSigner, parse_statement, payload_type_of
from contracts.statements import DeliveryReceipt, StatementKind
from tests.contracts._support import NOW, fixed_identity

HOLDER, SENDER = fixed_identity("holder"), fixed_identity("sender")
KIND = StatementKind.DELIVERY_RECEIPT


def _receipt(n: int = 3) -> DeliveryReceipt:
    return DeliveryReceipt(
        holder=HOLDER.node_id,
        sender=SENDER.node_id,
        value_digest="ab" * 32,
        commitments=tuple(f"{i:064x}" for i in range(n)),
        obligations=tuple(f"{i + 100:064x}" for i in range(n)),
        received_at=NOW,
    )


def _signed_json(obj: Any, kind: StatementKind = KIND) -> bytes:
    """``obj`` signed by the holder as it is (checked by nothing on the way)."""
    return sign_envelope(HOLDER, payload_type_of(kind), canonical_bytes(obj)).to_bytes()


def _read(answer: bytes) -> Signed[DeliveryReceipt]:
    return parse_statement(answer, DeliveryReceipt, signer=HOLDER.node_id)


def test_a_well_formed_receipt_is_read_as_signed() -> None:
    statement = _receipt()
    data = StatementSigner(HOLDER, KIND).sign(statement)
    receipt = _read(data)
    assert receipt.statement == statement
    assert receipt.to_bytes() == data


def test_a_receipt_bound_to_another_key_is_refused() -> None:
    other = fixed_identity("other")
    statement = DeliveryReceipt(
        holder=other.node_id,
        sender=SENDER.node_id,
        value_digest="ab" * 32,
        commitments=(),
        obligations=(),
        received_at=NOW,
    )
    data = StatementSigner(other, KIND).sign(statement)
    with pytest.raises(BindingMismatch, match=r"delivery-receipt .* names signer .* expected"):
        _read(data)


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda o: o.__setitem__(key, value)


def _item(key: str, i: int, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda o: o[key].__setitem__(i, value)


_P = "delivery-receipt: "
MALFORMED: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "holder not hex": (_set("holder", "zz" * 32), "field 'holder' must be a node id"),
    "holder upper case": (
        lambda o: o.__setitem__("holder", o["holder"].upper()),
        "field 'holder' must be a node id",
    ),
    "holder missing": (lambda o: o.pop("holder"), "missing field 'holder'"),
    "sender an integer": (_set("sender", 7), "field 'sender' must be a node id"),
    "value digest short": (
        _set("value_digest", "ab" * 31),
        "field 'value_digest' must be 64 lower-case hex characters",
    ),
    "commitments a string": (
        _set("commitments", "ab" * 32),
        "field 'commitments' must be a list, got str",
    ),
    "commitments missing": (lambda o: o.pop("commitments"), "missing field 'commitments'"),
    "commitments too many": (
        _set("commitments", ["ab" * 32] * 4097),
        "field 'commitments' has 4097 items, limit 4096",
    ),
    "commitment an integer": (
        _item("commitments", 1, 5),
        "commitments[1] must be 64 lower-case hex characters",
    ),
    "commitment upper case": (
        _item("commitments", 2, "AB" * 32),
        "commitments[2] must be 64 lower-case hex characters",
    ),
    "obligation short": (
        _item("obligations", 0, "ab"),
        "obligations[0] must be 64 lower-case hex characters",
    ),
    "obligation null": (
        _item("obligations", 2, None),
        "obligations[2] must be 64 lower-case hex characters",
    ),
    "obligations missing": (lambda o: o.pop("obligations"), "missing field 'obligations'"),
    "received_at a boolean": (
        _set("received_at", True),
        "field 'received_at' must be an integer, got bool",
    ),
    "received_at negative": (
        _set("received_at", -1),
        "field 'received_at' = -1 outside [0, 100000000000000]",
    ),
    "received_at a string": (
        _set("received_at", "1"),
        "field 'received_at' must be an integer, got str",
    ),
    "received_at missing": (lambda o: o.pop("received_at"), "missing field 'received_at'"),
    "an unknown field": (_set("extra", 1), "unknown fields ['extra']"),
    "another type": (
        _set("type", "receipt"),
        "field 'type' is 'receipt', expected 'delivery-receipt'",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_receipt_is_refused_naming_what_failed(case: str) -> None:
    mutate, message = MALFORMED[case]
    obj = _receipt().to_json()
    mutate(obj)
    with pytest.raises(EncodingError) as raised:
        _read(_signed_json(obj))
    assert str(raised.value).startswith(_P + message), str(raised.value)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"not json", "envelope: not valid JSON"),
        (
            sign_envelope(HOLDER, payload_type_of(KIND), b"[1,2]").to_bytes(),
            "delivery-receipt payload: expected a JSON object",
        ),
        (
            sign_envelope(HOLDER, payload_type_of(KIND), b'{"type":"a","type":"b"}').to_bytes(),
            "delivery-receipt payload: duplicate JSON key 'type'",
        ),
    ],
)
def test_a_receipt_that_is_no_receipt_object_is_refused(answer: bytes, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        _read(answer)


def test_a_statement_of_another_kind_is_refused() -> None:
    obj = _receipt().to_json()
    with pytest.raises(EncodingError, match=r"payload type .* where .*delivery-receipt"):
        _read(_signed_json(obj, StatementKind.WITNESS_REPORT))
