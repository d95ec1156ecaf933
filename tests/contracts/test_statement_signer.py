"""StatementSigner: the bytes sign_statement's envelope has, with its checks;
a list field's bad item named by its index."""

from __future__ import annotations

import pytest

from contracts.errors import EncodingError
from contracts.signed import StatementSigner, open_statement, sign_statement
from contracts.statements import DeliveryReceipt, StatementKind
from tests.contracts._support import NOW, fixed_identity


def _receipt(holder: str, sender: str, n: int) -> DeliveryReceipt:
    return DeliveryReceipt(
        holder=holder,
        sender=sender,
        value_digest="ab" * 32,
        commitments=tuple(f"{i:064x}" for i in range(n)),
        obligations=tuple(f"{i + 100:064x}" for i in range(n)),
        received_at=NOW + n,
    )


def test_statement_signer_writes_sign_statements_envelope_bytes() -> None:
    holder, sender = fixed_identity("holder"), fixed_identity("sender")
    signer = StatementSigner(holder, StatementKind.DELIVERY_RECEIPT)
    for n in (0, 1, 3):
        statement = _receipt(holder.node_id, sender.node_id, n)
        data = signer.sign(statement)
        assert data == sign_statement(holder, statement).to_bytes()
        opened = open_statement(data, DeliveryReceipt, signer=holder.node_id)
        assert opened.statement == statement


def test_statement_signer_refuses_another_signer_or_kind() -> None:
    holder, sender = fixed_identity("holder"), fixed_identity("sender")
    signer = StatementSigner(holder, StatementKind.DELIVERY_RECEIPT)
    with pytest.raises(ValueError, match="not this identity"):
        signer.sign(_receipt(sender.node_id, holder.node_id, 1))
    other = StatementSigner(holder, StatementKind.WITNESS_REPORT)
    with pytest.raises(ValueError, match="given to a signer of witness-report"):
        other.sign(_receipt(holder.node_id, sender.node_id, 1))


def test_a_bad_list_item_is_named_by_its_index() -> None:
    holder, sender = fixed_identity("holder"), fixed_identity("sender")
    obj = _receipt(holder.node_id, sender.node_id, 4).to_json()
    obj["obligations"][2] = "not hex"
    with pytest.raises(EncodingError, match=r"obligations\[2\] must be 64 lower-case hex"):
        DeliveryReceipt.from_json(obj)
    obj["obligations"][2] = "cd" * 32
    assert DeliveryReceipt.from_json(obj).obligations[2] == "cd" * 32
