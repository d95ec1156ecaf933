"""Signing statements into envelopes, and opening envelopes into statements.

``open_statement(data, Commitment)`` is parse-then-verify in one step:

1. parse the DSSE JSON (bounded size and depth);
2. the payload type must be the expected kind's one form: RFC 8785 JSON for
   every kind but demands and receipts, whose one form is the binary layout
   of :mod:`contracts.batch`;
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

from contracts.batch import (
    DEMAND_BATCH_TYPE,
    RECEIPT_BATCH_TYPE,
    FoldKey,
    demand_item,
    demand_payload,
    receipt_item,
    receipt_payload,
)
from contracts.canonical import canonical_bytes, parse_json
from contracts.envelope import MAX_ENVELOPE_BYTES, Envelope, EnvelopeSigner, sign_envelope
from contracts.errors import BindingMismatch, EncodingError
from contracts.identity import Identity, PublicKey
from contracts.statements import (
    STATEMENT_TYPES,
    Attestation,
    Commitment,
    DeliveryReceipt,
    Demand,
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
    "StatementSigner",
    "open_any",
    "open_statement",
    "parse_statement",
    "payload_type_of",
    "sign_statement",
    "verify_parsed",
]

S = TypeVar("S", bound=Statement)
#: Kinds whose one form is the binary layout of :mod:`contracts.batch`: payload
#: type, encoder (one fold's statement → payload) and one fold's reader.
_BINARY: dict[StatementKind, tuple[str, Any, Any]] = {
    StatementKind.DEMAND: (DEMAND_BATCH_TYPE, demand_payload, demand_item),
    StatementKind.RECEIPT: (RECEIPT_BATCH_TYPE, receipt_payload, receipt_item),
}
#: Every kind's one payload type.
_PAYLOAD_TYPES = {
    kind: _BINARY[kind][0] if kind in _BINARY else payload_type_for(kind) for kind in StatementKind
}
_PAYLOAD_WHAT = {kind: f"{kind.value} payload" for kind in StatementKind}


def payload_type_of(kind: StatementKind) -> str:
    """The one DSSE payload type statements of ``kind`` are signed under."""
    return _PAYLOAD_TYPES[kind]


#: Payload type → statement class, for :func:`open_any`.
_CLASSES: dict[str, type[Any]] = {
    **{t: cls for t, cls in STATEMENT_TYPES.items() if cls.KIND not in _BINARY},
    DEMAND_BATCH_TYPE: Demand,
    RECEIPT_BATCH_TYPE: Receipt,
}


@dataclass(frozen=True, slots=True)
class Signed(Generic[S]):
    """A statement together with the verified envelope it came in."""

    envelope: Envelope
    statement: S

    @property
    def digest(self) -> str:
        """Hex SHA-256 of the payload = of the canonical statement bytes."""
        # The envelope's memoised digest without a second property call: digests
        # are read on every binding check (tens of times per rehydration).
        return self.envelope._digest or self.envelope.digest

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
)


def sign_statement(identity: Identity, statement: S) -> Signed[S]:
    """Sign ``statement`` with ``identity``, which must be its signer, in its kind's
    one form (a demand or receipt: for the one fold it names, :mod:`contracts.batch`)."""
    kind = statement.KIND
    payload = _payload(statement, identity.node_id)
    return Signed(sign_envelope(identity, _PAYLOAD_TYPES[kind], payload), statement)


def _payload(statement: Statement, node_id: str) -> bytes:
    """``statement``'s one signed form, after checking ``node_id`` is its signer."""
    kind = statement.KIND
    if statement.signer != node_id:
        raise ValueError(
            f"{kind.value} names signer {statement.signer[:16]}…,"
            f" not this identity {node_id[:16]}…"
        )
    binary = _BINARY.get(kind)
    return canonical_bytes(statement.to_json()) if binary is None else binary[1](statement)


class StatementSigner:
    """Signs statements of one kind with one identity straight to envelope bytes.

    ``sign(statement)`` is ``sign_statement(identity, statement).to_bytes()`` (the
    same bytes, the same one form and checks: pinned by a test), for a signer that
    sends the bytes and keeps nothing else: the envelope's parts that do not
    depend on the statement are written once (:class:`EnvelopeSigner`).
    """

    __slots__ = ("_envelopes", "_kind", "_node_id")

    def __init__(self, identity: Identity, kind: StatementKind) -> None:
        self._kind = kind
        self._node_id = identity.node_id
        self._envelopes = EnvelopeSigner(identity, _PAYLOAD_TYPES[kind])

    def sign(self, statement: Statement) -> bytes:
        kind = statement.KIND
        if kind is not self._kind:
            raise ValueError(f"{kind.value} given to a signer of {self._kind.value}")
        return self._envelopes.sign(_payload(statement, self._node_id))


def _as_envelope(data: bytes | Envelope | dict[str, Any], max_bytes: int) -> Envelope:
    if type(data) is bytes:
        return Envelope.from_bytes(data, max_bytes=max_bytes)
    if isinstance(data, Envelope):
        return data
    if isinstance(data, dict):
        return Envelope.from_json(data)
    return Envelope.from_bytes(data, max_bytes=max_bytes)


def _parse(envelope: Envelope, cls: type[Any], fold: FoldKey | None = None) -> Any:
    """The statement of kind ``cls`` in ``envelope``, in its kind's one form.

    A demand or receipt holds one statement per fold: ``fold`` (obligation,
    commitment digests) selects it; without it, one naming several folds is
    an error.
    """
    kind = cls.KIND
    payload_type = envelope.payload_type
    if payload_type != _PAYLOAD_TYPES[kind]:
        raise EncodingError(
            f"payload type {payload_type!r:.80} where {_PAYLOAD_TYPES[kind]!r} was expected"
        )
    binary = _BINARY.get(kind)
    if binary is not None:
        return binary[2](envelope.payload, fold)
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
    fold: FoldKey | None = None,
) -> Signed[S]:
    """Parse and verify a signed statement of kind ``cls``.

    If ``signer`` is given, the statement must name that node id as its
    signer (:class:`BindingMismatch` otherwise). ``fold`` (obligation,
    commitment digests) reads that fold's statement out of a demand or
    receipt (:mod:`contracts.batch`; not needed for one naming a single
    fold): the envelope, its signature and its digest are the whole
    statement's. It is ignored for the other kinds.
    """
    envelope = _as_envelope(data, max_bytes)
    # (1) payload type names the kind we were asked for, (2) strict parse of
    # the payload bytes in the form it names
    statement: S = _parse(envelope, cls, fold)
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
    signer: str | None = None,
    max_bytes: int = MAX_ENVELOPE_BYTES,
    fold: FoldKey | None = None,
) -> Signed[S]:
    """Steps (1) to (3) of :func:`open_statement` only: **no signature is checked**.

    For lazy verification (design revision 2): a caller that needs the
    statement's content but not its signature (bytes that already reproduce a
    root proven under a verified head; a delivery receipt whose heads only
    decide what travels next time). Nothing parsed here may be cited, kept as
    evidence or relied on; :func:`verify_parsed` (or :func:`open_statement`) it
    first.
    """
    envelope = _as_envelope(data, max_bytes)
    statement: S = _parse(envelope, cls, fold)
    if signer is not None and statement.signer != signer:
        raise BindingMismatch(
            f"{cls.KIND.value} {envelope.digest[:12]}… names signer {statement.signer[:16]}…,"
            f" expected {signer[:16]}…"
        )
    return Signed(envelope, statement)


def verify_parsed(signed: Signed[S]) -> Signed[S]:
    """Step (4) of :func:`open_statement` for a statement :func:`parse_statement` read:
    the Ed25519 signature by the signer it names, over the payload as received."""
    signed.envelope.verify(PublicKey.from_node_id(signed.statement.signer))
    return signed


def open_any(
    data: bytes | Envelope | dict[str, Any], *, max_bytes: int = MAX_ENVELOPE_BYTES
) -> AnySigned:
    """Open a signed statement of any kind, dispatching on its payload type."""
    envelope = _as_envelope(data, max_bytes)
    cls = _CLASSES.get(envelope.payload_type)
    if cls is None:
        raise EncodingError(f"unknown payload type {envelope.payload_type!r:.80}")
    result: AnySigned = open_statement(envelope, cls)
    return result
