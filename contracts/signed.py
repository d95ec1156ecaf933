"""Signing statements into envelopes, and opening envelopes into statements.

``open_statement(data, Commitment)`` is parse-then-verify in one step:

1. parse the DSSE JSON (bounded size and depth);
2. the payload type must be the one of the expected kind;
3. parse the payload (bounded) into the statement, strictly;
4. verify an Ed25519 signature by the statement's own signer
   (``statement.signer``) over the PAE of the payload bytes as received.

Only then is a :class:`Signed` returned. Whether that signer is the *right*
one (e.g. the origin the caller expected) is checked by the caller or by the
serve/attest checks, which compare node ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from contracts.canonical import canonical_bytes, parse_json
from contracts.envelope import MAX_ENVELOPE_BYTES, Envelope, sign_envelope
from contracts.errors import BindingMismatch, EncodingError
from contracts.identity import Identity, PublicKey
from contracts.statements import (
    STATEMENT_TYPES,
    Attestation,
    Commitment,
    DeliveryReceipt,
    Demand,
    Head,
    Obligation,
    Receipt,
    Statement,
    StatementKind,
    WitnessReport,
    payload_type_for,
)

__all__ = [
    "AnySigned",
    "Signed",
    "open_any",
    "open_statement",
    "parse_statement",
    "sign_statement",
]

S = TypeVar("S", bound=Statement)
_PAYLOAD_TYPES = {kind: payload_type_for(kind) for kind in StatementKind}
_PAYLOAD_WHAT = {kind: f"{kind.value} payload" for kind in StatementKind}


@dataclass(frozen=True, slots=True)
class Signed(Generic[S]):
    """A statement together with the verified envelope it came in."""

    envelope: Envelope
    statement: S

    @property
    def digest(self) -> str:
        """Hex SHA-256 of the payload = of the canonical statement bytes."""
        return self.envelope.digest

    @property
    def signer(self) -> str:
        return self.statement.signer

    def to_bytes(self) -> bytes:
        """The envelope's DSSE JSON bytes (what goes on the wire)."""
        return self.envelope.to_bytes()

    def to_json(self) -> dict[str, Any]:
        return self.envelope.to_json()


AnySigned = (
    Signed[Commitment]
    | Signed[Obligation]
    | Signed[Demand]
    | Signed[Receipt]
    | Signed[DeliveryReceipt]
    | Signed[WitnessReport]
    | Signed[Attestation]
    | Signed[Head]
)


def sign_statement(identity: Identity, statement: S) -> Signed[S]:
    """Sign ``statement`` with ``identity``, which must be its signer."""
    if statement.signer != identity.node_id:
        raise ValueError(
            f"{statement.KIND.value} names signer {statement.signer[:16]}…,"
            f" not this identity {identity.node_id[:16]}…"
        )
    payload = canonical_bytes(statement.to_json())
    return Signed(sign_envelope(identity, payload_type_for(statement.KIND), payload), statement)


def _as_envelope(data: bytes | Envelope | dict[str, Any], max_bytes: int) -> Envelope:
    if type(data) is bytes:
        return Envelope.from_bytes(data, max_bytes=max_bytes)
    if isinstance(data, Envelope):
        return data
    if isinstance(data, dict):
        return Envelope.from_json(data)
    return Envelope.from_bytes(data, max_bytes=max_bytes)


def _parse(envelope: Envelope, cls: type[Any]) -> Any:
    payload = parse_json(envelope.payload, what=_PAYLOAD_WHAT[cls.KIND])
    if type(payload) is not dict:
        raise EncodingError(f"{_PAYLOAD_WHAT[cls.KIND]}: expected a JSON object")
    try:
        return cls.from_json(payload)
    except (ValueError, TypeError) as exc:
        # Constructors re-validate; anything they reject is malformed input.
        raise EncodingError(f"{cls.KIND.value}: {exc}") from exc


def open_statement(
    data: bytes | Envelope | dict[str, Any],
    cls: type[S],
    *,
    signer: str | None = None,
    max_bytes: int = MAX_ENVELOPE_BYTES,
) -> Signed[S]:
    """Parse and verify a signed statement of kind ``cls``.

    If ``signer`` is given, the statement must name that node id as its
    signer (:class:`BindingMismatch` otherwise).
    """
    envelope = _as_envelope(data, max_bytes)
    expected_type = _PAYLOAD_TYPES[cls.KIND]
    # (1) payload type names the kind we were asked for
    if envelope.payload_type != expected_type:
        raise EncodingError(
            f"payload type {envelope.payload_type!r:.80} where {expected_type!r} was expected"
        )
    # (2) strict parse of the payload bytes
    statement: S = _parse(envelope, cls)
    # (3) the statement's signer is the expected one, if the caller has one
    if signer is not None and statement.signer != signer:
        raise BindingMismatch(
            f"{cls.KIND.value} {envelope.digest[:12]}… names signer {statement.signer[:16]}…,"
            f" expected {signer[:16]}…"
        )
    # (4) an Ed25519 signature by that signer over PAE(payload as received)
    envelope.verify(PublicKey.from_node_id(statement.signer))
    return Signed(envelope, statement)


def parse_statement(
    data: bytes | Envelope | dict[str, Any],
    cls: type[S],
    *,
    max_bytes: int = MAX_ENVELOPE_BYTES,
) -> Signed[S]:
    """Steps (1) and (2) of :func:`open_statement` only: **no signature is checked**.

    For lazy verification (design revision 2): a caller that needs the
    statement's content but not its signature (bytes that already reproduce a
    root proven under a verified head). Nothing parsed here may be cited or
    kept as evidence; :func:`open_statement` it first.
    """
    envelope = _as_envelope(data, max_bytes)
    expected_type = _PAYLOAD_TYPES[cls.KIND]
    if envelope.payload_type != expected_type:
        raise EncodingError(
            f"payload type {envelope.payload_type!r:.80} where {expected_type!r} was expected"
        )
    statement: S = _parse(envelope, cls)
    return Signed(envelope, statement)


def open_any(
    data: bytes | Envelope | dict[str, Any], *, max_bytes: int = MAX_ENVELOPE_BYTES
) -> AnySigned:
    """Open a signed statement of any kind, dispatching on its payload type."""
    envelope = _as_envelope(data, max_bytes)
    cls = STATEMENT_TYPES.get(envelope.payload_type)
    if cls is None:
        raise EncodingError(f"unknown payload type {envelope.payload_type!r:.80}")
    result: AnySigned = open_statement(envelope, cls)
    return result
