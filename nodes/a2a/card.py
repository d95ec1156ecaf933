"""Agent Card signatures: A2A §8.4, a JWS (RFC 7515) with EdDSA (RFC 8037).

The signed bytes, exactly:

1. the card as JSON in the protobuf JSON mapping (``MessageToDict``: field
   names in lowerCamelCase, fields at their default value left out), with
   ``signatures`` removed and then every empty string, list and object, and
   every null, removed, recursively — the form the reference SDK
   canonicalizes, so a card signed here verifies there and back (tested both
   ways against its signer and verifier);
2. that object in RFC 8785 canonical JSON (:func:`contracts.canonical.canonical_bytes`,
   the ``rfc8785`` package for anything beyond its fast path) — the JWS payload;
3. the JWS signing input ``BASE64URL(protected) || '.' || BASE64URL(payload)``
   (RFC 7515 §5.1), where ``protected`` is the canonical JSON of
   ``{"alg": "EdDSA", "kid": <node id>, "typ": "JOSE"}``;
4. an Ed25519 signature over it by the node's key (the key every statement of
   the node is signed with); the card keeps ``protected`` and ``signature``
   (detached payload: the card itself is the payload).

Verification (:func:`verify_card`) rebuilds the payload from the card it was
given — a card is a JSON document, not bytes that travel signed, so there is
no original byte string to keep — and checks, in order: a signature exists;
its protected header parses, names ``EdDSA`` and the key the caller trusts;
the signature verifies over the rebuilt signing input. Each failure raises
:class:`~contracts.errors.BadSignature` or :class:`~contracts.errors.EncodingError`
naming it. A card verified against the key it declares itself proves only that
it is intact; the caller pins the key (a peer list, a directory) to make it
prove who published it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from a2a.types import a2a_pb2
from google.protobuf.json_format import MessageToDict

from contracts.canonical import canonical_bytes
from contracts.errors import BadSignature, EncodingError
from contracts.identity import Identity, PublicKey

__all__ = ["JWS_ALG", "card_payload", "public_jwk", "sign_card", "verify_card"]

JWS_ALG = "EdDSA"
#: Nesting accepted in a card (its extension params are the client's to fill).
_MAX_DEPTH = 32


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise EncodingError(f"card signature: {what} is not base64url ({exc})") from None


def public_jwk(node_id: str) -> dict[str, str]:
    """The node's Ed25519 key as an RFC 8037 OKP JSON Web Key."""
    raw = PublicKey.from_node_id(node_id).raw
    return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw), "kid": node_id}


def _clean(value: Any, depth: int = 0) -> Any:
    """Drop empty strings, lists and objects and nulls, recursively (bounded)."""
    if depth > _MAX_DEPTH:
        raise EncodingError(f"card: nested deeper than {_MAX_DEPTH}")
    if isinstance(value, dict):
        out = {k: c for k, v in value.items() if (c := _clean(v, depth + 1)) is not None}
        return out or None
    if isinstance(value, list):
        items = [c for v in value if (c := _clean(v, depth + 1)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def card_payload(card: a2a_pb2.AgentCard) -> bytes:
    """Steps (1)-(2): the RFC 8785 bytes of the card without its signatures."""
    data = MessageToDict(card)
    data.pop("signatures", None)
    try:
        return canonical_bytes(_clean(data) or {})
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodingError(f"card: no canonical form ({exc})") from None


def _protected(node_id: str) -> str:
    return _b64url(canonical_bytes({"alg": JWS_ALG, "kid": node_id, "typ": "JOSE"}))


def sign_card(card: a2a_pb2.AgentCard, identity: Identity) -> a2a_pb2.AgentCard:
    """Append the node's §8.4 signature to ``card`` (in place) and return it."""
    protected = _protected(identity.node_id)
    signing_input = f"{protected}.{_b64url(card_payload(card))}".encode("ascii")
    card.signatures.append(
        a2a_pb2.AgentCardSignature(
            protected=protected, signature=_b64url(identity.sign(signing_input))
        )
    )
    return card


def verify_card(card: a2a_pb2.AgentCard, trusted_node_id: str) -> None:
    """Raise unless one of the card's signatures is the trusted node's, over this card."""
    # (1) there is something to check
    if not card.signatures:
        raise BadSignature(f"card {card.name!r}: no signature")
    payload = _b64url(card_payload(card))
    key = PublicKey.from_node_id(trusted_node_id)
    reasons: list[str] = []
    for i, sig in enumerate(card.signatures):
        # (2) the protected header parses and names EdDSA and the trusted key
        try:
            header = json.loads(_unb64url(sig.protected, "protected header"))
        except (EncodingError, ValueError) as exc:
            reasons.append(f"signature {i}: protected header unreadable ({exc})")
            continue
        if not isinstance(header, dict) or header.get("alg") != JWS_ALG:
            alg = header.get("alg") if isinstance(header, dict) else None
            reasons.append(f"signature {i}: alg {alg!r}, not {JWS_ALG}")
            continue
        if header.get("kid") != trusted_node_id:
            reasons.append(f"signature {i}: kid {str(header.get('kid'))[:16]!r}… is not the key")
            continue
        # (3) the signature verifies over the signing input rebuilt from this card
        try:
            key.verify(
                _unb64url(sig.signature, "signature"),
                f"{sig.protected}.{payload}".encode("ascii"),
            )
        except (BadSignature, EncodingError) as exc:
            reasons.append(f"signature {i}: {exc}")
            continue
        return
    raise BadSignature(
        f"card {card.name!r}: no signature by {trusted_node_id[:16]}… verifies: "
        + "; ".join(reasons)
    )
