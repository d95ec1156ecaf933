"""Agent Card signatures (A2A §8.4): RFC 8785 form, EdDSA JWS, and the SDK agrees.

External vectors: RFC 8785 §3.2.2/§3.2.3 (the "numbers, string, literals"
example and its canonical output) and §3.2.3's property-sorting example,
carried in a card's extension params so they pass through the card's own
canonicalization path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2a.types import a2a_pb2
from a2a.utils.signing import (
    InvalidSignaturesError,
    create_agent_card_signer,
    create_signature_verifier,
)
from google.protobuf.json_format import MessageToDict
from jwt import PyJWK

from contracts.canonical import canonical_bytes
from contracts.errors import BadSignature
from contracts.identity import Identity
from nodes.a2a.agent import build_card
from nodes.a2a.card import card_payload, public_jwk, verify_card
from nodes.a2a.extension import EXTENSION_URI, read_card_params

#: RFC 8785 §3.2.2 input (as JSON text) and §3.2.3 output.
RFC8785_INPUT = (
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
    ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    ' "literals": [null, true, false]}'
)
RFC8785_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)
#: RFC 8785 §3.2.3: properties sorted by their UTF-16 code units.
RFC8785_SORT_INPUT = (
    '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With'
    ' Dagesh", "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control",'
    ' "\\u00f6": "Latin Small Letter O With Diaeresis"}'
)
RFC8785_SORT_VALUES = [
    "Carriage Return",
    "One",
    "Control",
    "Latin Small Letter O With Diaeresis",
    "Euro Sign",
    "Emoji: Grinning Face",
    "Hebrew Letter Dalet With Dagesh",
]

ALICE = Identity.from_seed(bytes(range(32)))
MALLORY = Identity.from_seed(bytes(range(1, 33)))


def _card(identity: Identity = ALICE) -> a2a_pb2.AgentCard:
    return build_card("alice", identity, grpc_url="127.0.0.1:7001", jsonrpc_url="http://a/")


def _bare_card_with(params: dict[str, Any]) -> a2a_pb2.AgentCard:
    card = a2a_pb2.AgentCard(name="vectors")
    ext = card.capabilities.extensions.add(uri="urn:example:vectors")
    ext.params.update(params)
    return card


def test_rfc8785_example_canonicalizes_byte_for_byte() -> None:
    assert canonical_bytes(json.loads(RFC8785_INPUT)) == RFC8785_OUTPUT.encode()


def test_rfc8785_example_inside_a_card_less_its_nulls() -> None:
    # The card's signed form drops empty values, null included, before RFC 8785
    # (the reference SDK's form, so signatures verify across both).
    payload = card_payload(_bare_card_with({"v": json.loads(RFC8785_INPUT)})).decode()
    expected = RFC8785_OUTPUT.replace("[null,", "[")
    assert f'"params":{{"v":{expected}}}' in payload


def test_rfc8785_property_sorting_example_inside_a_card() -> None:
    payload = card_payload(_bare_card_with({"v": json.loads(RFC8785_SORT_INPUT)}))
    inner = json.loads(payload)["capabilities"]["extensions"][0]["params"]["v"]
    assert list(inner.values()) == RFC8785_SORT_VALUES


def test_card_declares_the_extension_with_its_params() -> None:
    card = _card()
    params, required = read_card_params(card)
    assert required
    assert params.node_id == ALICE.node_id
    assert params.rehydration_endpoint == "127.0.0.1:7001"
    (ext,) = [e for e in card.capabilities.extensions if e.uri == EXTENSION_URI]
    jwk = MessageToDict(ext.params)["verificationKey"]
    assert jwk["kty"] == "OKP"
    assert jwk["x"] == public_jwk(ALICE.node_id)["x"]


def test_signed_card_verifies_and_any_change_breaks_it() -> None:
    card = _card()
    verify_card(card, ALICE.node_id)
    changed = a2a_pb2.AgentCard()
    changed.CopyFrom(card)
    changed.supported_interfaces[0].url = "http://evil/"
    with pytest.raises(BadSignature, match="no signature by"):
        verify_card(changed, ALICE.node_id)
    moved = a2a_pb2.AgentCard()
    moved.CopyFrom(card)
    moved.capabilities.extensions[0].params["rehydrationEndpoint"] = "10.0.0.9:1"
    with pytest.raises(BadSignature):
        verify_card(moved, ALICE.node_id)


def test_card_signed_by_another_key_is_refused_naming_the_kid() -> None:
    card = _card(MALLORY)
    with pytest.raises(BadSignature, match="kid"):
        verify_card(card, ALICE.node_id)
    unsigned = a2a_pb2.AgentCard()
    unsigned.CopyFrom(card)
    del unsigned.signatures[:]
    with pytest.raises(BadSignature, match="no signature"):
        verify_card(unsigned, MALLORY.node_id)


def test_a_non_eddsa_header_is_refused() -> None:
    card = _card()
    card.signatures[0].protected = "eyJhbGciOiJub25lIn0"  # {"alg":"none"}
    with pytest.raises(BadSignature, match="alg 'none'"):
        verify_card(card, ALICE.node_id)


def test_the_reference_sdk_verifies_our_card_and_we_verify_its_signature() -> None:
    key = PyJWK(public_jwk(ALICE.node_id))
    sdk_verify = create_signature_verifier(lambda kid, jku: key, ["EdDSA"])
    sdk_verify(_card())  # ours, checked by the SDK
    # The SDK's signer over the same card: verifies here.
    theirs = _card()
    del theirs.signatures[:]
    signer = create_agent_card_signer(
        ALICE.private_pem(), {"alg": "EdDSA", "kid": ALICE.node_id, "jku": None, "typ": "JOSE"}
    )
    verify_card(signer(theirs), ALICE.node_id)
    tampered = _card()
    tampered.name = "bob"
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(tampered)


def test_the_card_lists_the_one_payload_type_each_statement_kind_is_signed_under() -> None:
    """docs/a2a.md: ``statementVersions`` are the payload types a node reads and writes —
    one per DSSE statement kind; demands and receipts only in their one form."""
    from contracts.batch import DEMAND_BATCH_TYPE, RECEIPT_BATCH_TYPE
    from contracts.signed import payload_type_of
    from contracts.statements import StatementKind
    from nodes.a2a.extension import STATEMENT_VERSIONS

    kinds = [k for k in StatementKind if k is not StatementKind.HEAD]
    assert tuple(payload_type_of(k) for k in kinds) == STATEMENT_VERSIONS
    assert DEMAND_BATCH_TYPE in STATEMENT_VERSIONS
    assert RECEIPT_BATCH_TYPE in STATEMENT_VERSIONS
    for gone in ("demand+json", "receipt+json", "head+json", "demand.v2+bin"):
        assert f"application/vnd.provnet.{gone}" not in STATEMENT_VERSIONS
