"""The extension itself: URI, media types, card parameters, the message layout.

What travels (``docs/a2a.md`` is the reference):

* a delegation ``Message`` names :data:`EXTENSION_URI` in ``extensions`` and
  carries exactly one ``Part(raw=…)`` of media type :data:`DELIVERY_MEDIA_TYPE`:
  the ``provnet.v1.DeliverRequest`` a node sends on its own Deliver call — the
  value, its heads, fold proofs and obligations as the signed bytes the origin
  made (never re-encoded into A2A structures);
* the answer is a ``Task`` whose result ``Artifact`` names the URI and
  carries the receiver's signed delivery receipt (:data:`RECEIPT_MEDIA_TYPE`)
  and any evidence it recorded (:data:`EVIDENCE_MEDIA_TYPE`, the file's
  bytes); its final status message says what it decided and why;
* ``metadata`` (a protobuf ``Struct``) holds only routing hints, each a
  string under a key prefixed by the URI (:data:`HINTS`). A ``Struct`` number
  is a double and a ``Struct`` keeps no key order, so nothing signed may
  travel in one; a hint that is not a string is refused, not coerced.

Reading is bounded and strict (:func:`read_delegation`): every failure is an
:class:`A2AError` subclass naming what was wrong, which the SDK maps to a
JSON-RPC error or a gRPC status. Nothing read here produces evidence: only
signed statements that verify against their signer's key can, and those are
judged by the node (:mod:`nodes.services`), not here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from a2a.types import a2a_pb2
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    ExtensionSupportRequiredError,
    InvalidParamsError,
)
from google.protobuf import struct_pb2

from contracts.errors import ContractError, EncodingError
from contracts.signed import payload_type_of
from contracts.statements import StatementKind
from nodes import wire
from nodes.messages import Delivery

__all__ = [
    "DELIVERY_MEDIA_TYPE",
    "EVIDENCE_MEDIA_TYPE",
    "EXTENSION_URI",
    "HINTS",
    "HINT_ACTION",
    "HINT_FORWARD_TO",
    "HINT_VALUE_REF",
    "LEGACY_EXTENSIONS_HEADER",
    "MAX_DELIVERY_BYTES",
    "MAX_HINT_CHARS",
    "RECEIPT_MEDIA_TYPE",
    "STATEMENT_VERSIONS",
    "CardParams",
    "Delegation",
    "card_extension",
    "check_activation",
    "delegation_message",
    "hint_key",
    "read_card_params",
    "read_delegation",
]

#: The extension's URI, owned by the project; the trailing version changes
#: with any change a v1 reader would misread.
EXTENSION_URI = "https://provnet.dev/a2a/ext/v1"
#: ``provnet.v1.DeliverRequest`` bytes (proto/provnet/v1/deliver.proto).
DELIVERY_MEDIA_TYPE = "application/vnd.provnet.deliver-request+protobuf"
#: A DSSE envelope of a ``delivery-receipt`` statement, as signed.
RECEIPT_MEDIA_TYPE = "application/vnd.provnet.delivery-receipt+dsse"
#: An evidence record's bytes, as written to its file (``provnet evidence verify``).
EVIDENCE_MEDIA_TYPE = "application/vnd.provnet.evidence+json"
#: The header v0.3 peers send instead of ``A2A-Extensions`` (HTTP and gRPC metadata).
LEGACY_EXTENSIONS_HEADER = "X-A2A-Extensions"
#: Largest delivery part read; a larger one is refused before it is parsed.
MAX_DELIVERY_BYTES = 4 * 1024 * 1024
#: Longest routing hint (characters).
MAX_HINT_CHARS = 256
#: Statement payload types this version reads and writes: the one DSSE payload type of
#: each kind (a head is a C2SP signed note, not an envelope, and has none).
STATEMENT_VERSIONS = tuple(
    payload_type_of(kind) for kind in StatementKind if kind is not StatementKind.HEAD
)

HINT_VALUE_REF = "valueRef"
HINT_ACTION = "action"
HINT_FORWARD_TO = "forwardTo"
#: The routing hints a delegation may carry (all strings, all optional except valueRef).
HINTS = (HINT_VALUE_REF, HINT_ACTION, HINT_FORWARD_TO)


def hint_key(name: str) -> str:
    """The ``metadata`` key of hint ``name``: prefixed by the URI, so it cannot clash."""
    return f"{EXTENSION_URI}/{name}"


# --------------------------------------------------------------------------- card


@dataclass(frozen=True, slots=True)
class CardParams:
    """What an agent's card declares about its provnet node (all strings on the card)."""

    node_id: str
    rehydration_endpoint: str
    statement_versions: tuple[str, ...] = STATEMENT_VERSIONS
    wire_version: str = str(wire.WIRE_VERSION)


def card_extension(params: CardParams, *, required: bool) -> a2a_pb2.AgentExtension:
    """The ``capabilities.extensions`` entry of a provnet agent's card.

    ``verificationKey`` is the node's Ed25519 key as an RFC 8037 OKP JWK
    (the key the card's signature and every statement of the node verify
    under); ``nodeId`` is its hex form.
    """
    from nodes.a2a.card import public_jwk

    ext = a2a_pb2.AgentExtension(
        uri=EXTENSION_URI,
        description="Compacted values with signed heads and serving obligations;"
        " rehydrated from the named origin, or evidence naming it.",
        required=required,
    )
    ext.params.update(
        {
            "nodeId": params.node_id,
            "verificationKey": public_jwk(params.node_id),
            "rehydrationEndpoint": params.rehydration_endpoint,
            "serveService": "provnet.v1.Serve",
            "statementVersions": list(params.statement_versions),
            "wireVersion": params.wire_version,
            "deliveryMediaType": DELIVERY_MEDIA_TYPE,
        }
    )
    return ext


def _param_str(params: struct_pb2.Struct, key: str) -> str:
    if key not in params.fields:
        raise ValueError(f"provnet extension params: {key!r} missing")
    value = params.fields[key]
    if value.WhichOneof("kind") != "string_value":
        raise ValueError(
            f"provnet extension params: {key!r} must be a string, got {value.WhichOneof('kind')}"
        )
    return value.string_value


def read_card_params(card: a2a_pb2.AgentCard) -> tuple[CardParams, bool]:
    """The provnet parameters a card declares, and whether it marks them required.

    ``ValueError`` naming the parameter when the card declares the extension
    wrongly; ``LookupError`` when it does not declare it at all.
    """
    for ext in card.capabilities.extensions:
        if ext.uri != EXTENSION_URI:
            continue
        versions = ext.params.fields.get("statementVersions")
        if versions is None or versions.WhichOneof("kind") != "list_value":
            raise ValueError("provnet extension params: 'statementVersions' must be a list")
        if any(v.WhichOneof("kind") != "string_value" for v in versions.list_value.values):
            raise ValueError("provnet extension params: 'statementVersions' must hold strings")
        node_id = _param_str(ext.params, "nodeId")
        if len(node_id) != 64 or node_id.strip("0123456789abcdef"):
            raise ValueError(f"provnet extension params: nodeId {node_id[:80]!r} is not a node id")
        return (
            CardParams(
                node_id=node_id,
                rehydration_endpoint=_param_str(ext.params, "rehydrationEndpoint"),
                statement_versions=tuple(v.string_value for v in versions.list_value.values),
                wire_version=_param_str(ext.params, "wireVersion"),
            ),
            ext.required,
        )
    raise LookupError(f"card {card.name!r} does not declare {EXTENSION_URI}")


# --------------------------------------------------------------------------- activation


def check_activation(requested: Iterable[str], *, required: bool) -> bool:
    """Whether the client activated the extension; raises when it must and did not.

    The SDK collects ``A2A-Extensions`` (and, through its v0.3 context
    builders, ``X-A2A-Extensions``) into ``requested`` but never enforces a
    required extension itself: this is where the agent does.
    """
    active = EXTENSION_URI in set(requested)
    if required and not active:
        raise ExtensionSupportRequiredError(
            message=f"this agent requires extension {EXTENSION_URI}; activate it with the"
            " A2A-Extensions header (gRPC metadata a2a-extensions)"
        )
    return active


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Delegation:
    """A delegation read from a message: the delivery and the routing hints."""

    delivery: Delivery
    value_ref: str
    action: str
    forward_to: str
    raw: bytes


def delegation_message(
    delivery: Delivery,
    *,
    action: str = "",
    forward_to: str = "",
    message_id: str,
    context_id: str = "",
    text: str = "",
) -> a2a_pb2.Message:
    """A delegation ``Message`` carrying ``delivery`` as provnet's own bytes.

    The DeliverRequest goes with an empty ``sender``: over A2A no provnet key
    signs the call, so every head names its origin in full and the receiver's
    receipt names the value's origin as sender (as a delivery by an operator
    that names none, :meth:`nodes.holding.Holding.deliver`).
    """
    unsigned = dataclasses.replace(delivery, sender="")
    raw = wire.deliver_request(unsigned).SerializeToString()
    message = a2a_pb2.Message(
        message_id=message_id,
        context_id=context_id,
        role=a2a_pb2.ROLE_USER,
        extensions=[EXTENSION_URI],
    )
    if text:
        message.parts.append(a2a_pb2.Part(text=text))
    message.parts.append(
        a2a_pb2.Part(raw=raw, media_type=DELIVERY_MEDIA_TYPE, filename=f"{delivery.value_ref}.pb")
    )
    hints = {HINT_VALUE_REF: delivery.value_ref, HINT_ACTION: action, HINT_FORWARD_TO: forward_to}
    message.metadata.update({hint_key(k): v for k, v in hints.items() if v})
    return message


def _hints(metadata: struct_pb2.Struct) -> Mapping[str, str]:
    """The routing hints, each a string; anything else under the prefix is refused."""
    prefix = f"{EXTENSION_URI}/"
    out: dict[str, str] = {}
    for key, value in metadata.fields.items():
        if not key.startswith(prefix):
            continue  # another extension's, or the client's own: not ours to judge
        name = key[len(prefix) :]
        if name not in HINTS:
            raise InvalidParamsError(message=f"metadata {key!r}: not a provnet hint {HINTS}")
        kind = value.WhichOneof("kind")
        if kind != "string_value":
            # A Struct number is a double (2^53+1 arrives as 2^53): never coerced.
            raise InvalidParamsError(
                message=f"metadata {key!r}: must be a string, got {kind or 'nothing'}"
            )
        if len(value.string_value) > MAX_HINT_CHARS:
            raise InvalidParamsError(
                message=f"metadata {key!r}: {len(value.string_value)} characters, limit"
                f" {MAX_HINT_CHARS}"
            )
        out[name] = value.string_value
    return out


def read_delegation(message: a2a_pb2.Message, *, max_bytes: int = MAX_DELIVERY_BYTES) -> Delegation:
    """The delegation a message carries, parsed; an A2A error naming the fault otherwise.

    Checked here: exactly one delivery part, of the provnet media type, as
    ``raw`` bytes within ``max_bytes``, that parse as a DeliverRequest whose
    statements decode; the hints are strings; the value the hints name is the
    value the part carries. Signatures, heads and fold proofs are verified by
    the node when it takes the delivery (:meth:`nodes.holding.Holding.deliver`).
    """
    if EXTENSION_URI not in message.extensions:
        raise InvalidParamsError(message=f"message does not name extension {EXTENSION_URI}")
    ours = [p for p in message.parts if p.media_type == DELIVERY_MEDIA_TYPE]
    if len(ours) != 1:
        raise InvalidParamsError(
            message=f"a delegation carries exactly one {DELIVERY_MEDIA_TYPE} part, got {len(ours)}"
        )
    (part,) = ours
    if part.WhichOneof("content") != "raw":
        raise ContentTypeNotSupportedError(
            message=f"{DELIVERY_MEDIA_TYPE} travels as raw bytes, got"
            f" {part.WhichOneof('content') or 'an empty part'}"
        )
    raw = part.raw
    if len(raw) > max_bytes:
        raise InvalidParamsError(
            message=f"{DELIVERY_MEDIA_TYPE} part is {len(raw)} bytes, limit {max_bytes}"
        )
    hints = _hints(message.metadata)
    try:
        request = wire.deliver_request_from_bytes(raw)
        if not request.HasField("value"):
            raise EncodingError("no value")
        if request.sender:
            raise EncodingError(
                f"sender {request.sender[:16]!r} set; over A2A no provnet key signs the call,"
                " so a delivery names no sender"
            )
        delivery = wire.delivery_from_pb(request.value)
    except (ContractError, ValueError) as exc:
        raise InvalidParamsError(message=f"{DELIVERY_MEDIA_TYPE} part: {exc}") from None
    value_ref = hints.get(HINT_VALUE_REF, delivery.value_ref)
    if value_ref != delivery.value_ref:
        raise InvalidParamsError(
            message=f"metadata names value {value_ref[:80]!r} but the part carries"
            f" {delivery.value_ref[:80]!r}"
        )
    return Delegation(
        delivery=delivery,
        value_ref=delivery.value_ref,
        action=hints.get(HINT_ACTION, ""),
        forward_to=hints.get(HINT_FORWARD_TO, ""),
        raw=raw,
    )
