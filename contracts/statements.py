"""The signed statements of the serve and attest contracts.

Each kind has one signed form. Commitments, obligations, delivery receipts,
witness reports and attestations: ``to_json()`` is the JSON object whose
RFC 8785 bytes are the DSSE payload and ``from_json()`` its strict parser;
every payload carries ``"type": <kind>`` under the payload type
``application/vnd.provnet.<kind>+json``, and both must agree, so a statement
of one kind is never accepted as another. Demands and receipts are signed
in the binary layout of :mod:`contracts.batch` (one demand or receipt names
one or more folds); their ``to_json()`` shows the fields and is never
signed or parsed. A head is a C2SP signed note (below).

Conventions:

* keys are node ids (raw Ed25519 public key, hex); ``signer`` names the key
  that must have signed the envelope;
* digests are hex SHA-256 of a statement's envelope payload (see
  :mod:`contracts.envelope`);
* times are integer ms since the Unix epoch; ``deadline_ms`` is a duration.

Statement kinds and signers:

=================  =========  ==================================================
kind               signer     says
=================  =========  ==================================================
commitment         origin     these ``leaf_count`` hops of fold ``fold_seq`` of
                              ``value_ref`` in ``epoch`` have Merkle ``root``
obligation         origin     I serve commitment X until ``serve_until``,
                              within ``deadline_ms``, at ``endpoints``
demand             holder     serve me leaves (or all) of obligation X; nonce
receipt            origin     my answer to demand D (nonce N): SERVED leaf
                              hashes (+ proofs if partial) | ABSENT | REFUSED
                              with reason | PENDING
delivery-receipt   holder     I received value V with these commitments
witness-report     witness    I re-issued demand D' for obligation X: answered
                              with receipt R | unanswered
attestation        attester   raise ``axis`` of value V to ``floor``; these
                              taints are discharged; evidence cited; expiry
head               origin     compaction ``seq`` of ``epoch``: ``size`` fold
                              records with RFC 6962 ``root``; the log of this
                              epoch's compactions 0..seq has root ``log_root``;
                              I serve every fold under it until ``serve_until``,
                              within ``deadline_ms``, at ``endpoints``
=================  =========  ==================================================

A ``head`` is the signed tree head of design revision 2 (one signature per
compaction; see :mod:`contracts.heads`). It is the one statement not signed
as a DSSE envelope: it is a C2SP tlog-checkpoint signed note
(:mod:`contracts.head_note`). The per-fold ``commitment`` and ``obligation``
remain valid statements.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from contracts._fields import (
    MAX_COUNT,
    MAX_LIST,
    MAX_STR,
    MAX_TIME_MS,
    check_fields,
    get_bool,
    get_digest,
    get_enum,
    get_float01,
    get_int,
    get_list,
    get_node_id,
    get_opt,
    get_str,
    is_digest,
)
from contracts.errors import EncodingError

__all__ = [
    "AXES",
    "PAYLOAD_TYPE_PREFIX",
    "Attestation",
    "Axis",
    "Commitment",
    "DeliveryReceipt",
    "Demand",
    "Head",
    "Obligation",
    "Receipt",
    "ReceiptStatus",
    "RefusalReason",
    "Statement",
    "StatementKind",
    "WitnessOutcome",
    "WitnessReport",
    "check_receipt_shape",
    "payload_type_for",
]

PAYLOAD_TYPE_PREFIX = "application/vnd.provnet."
_LOWER_HEX = re.compile(r"[0-9a-f]*")
_HEX_CHARS = "0123456789abcdef"
_MAX_ENDPOINTS = 16
_MAX_NONCE = 128
_MIN_NONCE = 16


class StatementKind(StrEnum):
    COMMITMENT = "commitment"
    OBLIGATION = "obligation"
    DEMAND = "demand"
    RECEIPT = "receipt"
    DELIVERY_RECEIPT = "delivery-receipt"
    WITNESS_REPORT = "witness-report"
    ATTESTATION = "attestation"
    HEAD = "head"


def payload_type_for(kind: StatementKind) -> str:
    """The RFC 8785 JSON payload type of a statement kind. Demands and receipts are
    not signed in that form (their one form: :mod:`contracts.batch`); the payload
    type every kind is signed under is :func:`contracts.signed.payload_type_of`."""
    return f"{PAYLOAD_TYPE_PREFIX}{kind.value}+json"


class Axis(StrEnum):
    """The five provenance axes, in canonical order."""

    FRESHNESS = "freshness"
    CAPABILITY = "capability"
    TOOL_INTEGRITY = "tool_integrity"
    VERIFICATION = "verification"
    RECONSTRUCTION = "reconstruction"


AXES: tuple[Axis, ...] = tuple(Axis)


class ReceiptStatus(StrEnum):
    SERVED = "SERVED"
    ABSENT = "ABSENT"
    REFUSED = "REFUSED"
    PENDING = "PENDING"


class RefusalReason(StrEnum):
    """Why an origin did not serve. Only EXPIRED after ``serve_until`` is legitimate.

    STORE_CORRUPTED: the origin's own stored bytes no longer reproduce the root
    it committed (its disk damaged them); it says so instead of signing them.
    """

    EXPIRED = "EXPIRED"
    UNKNOWN = "UNKNOWN"
    EVICTED = "EVICTED"
    NOT_BOUND_HOLDER = "NOT_BOUND_HOLDER"
    BAD_DEMAND = "BAD_DEMAND"
    OVERLOADED = "OVERLOADED"
    PROVENANCE_PENDING = "PROVENANCE_PENDING"
    OTHER = "OTHER"
    STORE_CORRUPTED = "STORE_CORRUPTED"


_RECEIPT_STATUS = {m.value: m for m in ReceiptStatus}
_REFUSAL_REASON = {m.value: m for m in RefusalReason}


class WitnessOutcome(StrEnum):
    ANSWERED = "ANSWERED"
    UNANSWERED = "UNANSWERED"


class Statement(Protocol):
    """What every statement dataclass provides."""

    KIND: ClassVar[StatementKind]

    @property
    def signer(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


def _time(obj: dict[str, Any], key: str, kind: str) -> int:
    return get_int(obj, key, kind, lo=0, hi=MAX_TIME_MS)


def _digest_item(kind: str) -> Any:
    def read(value: object, where: str) -> str:
        if not is_digest(value):
            raise EncodingError(f"{kind}: {where} must be 64 lower-case hex characters")
        return str(value)

    return read


def _str_item(kind: str, max_len: int = MAX_STR) -> Any:
    def read(value: object, where: str) -> str:
        if not isinstance(value, str) or len(value) > max_len:
            raise EncodingError(f"{kind}: {where} must be a string of at most {max_len} characters")
        return value

    return read


def _index_item(kind: str) -> Any:
    def read(value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
            raise EncodingError(f"{kind}: {where} must be a leaf index (non-negative integer)")
        return value

    return read


def _hash_list(value: object, kind: str, what: str, max_len: int = MAX_LIST) -> tuple[bytes, ...]:
    """A list of hex SHA-256 hashes, decoded in one pass (this is on the hot path)."""
    if not isinstance(value, list) or len(value) > max_len:
        raise EncodingError(f"{kind}: {what} must be a list of at most {max_len} hashes")
    if not value:
        return ()
    try:
        joined = "".join(value)
    except TypeError as exc:
        raise EncodingError(f"{kind}: {what} must hold hex strings") from exc
    if set(map(len, value)) != {64} or _LOWER_HEX.fullmatch(joined) is None:
        raise EncodingError(f"{kind}: {what} must hold 64-character lower-case hex hashes")
    raw = bytes.fromhex(joined)
    return tuple(raw[i : i + 32] for i in range(0, len(raw), 32))


def _validate_indices(indices: tuple[int, ...], kind: str, what: str) -> None:
    if any(b <= a for a, b in itertools.pairwise(indices)):
        raise EncodingError(f"{kind}: {what} must be strictly increasing")


def _check_node_id(value: str, what: str) -> None:
    if not is_digest(value):
        raise ValueError(f"{what} must be a node id (64 lower-case hex), got {value!r:.80}")


def _check_digest(value: str, what: str) -> None:
    if not is_digest(value):
        raise ValueError(f"{what} must be a hex SHA-256 digest, got {value!r:.80}")


@dataclass(frozen=True, slots=True)
class Commitment:
    """The origin commits to the Merkle root of one fold's hops."""

    KIND: ClassVar[StatementKind] = StatementKind.COMMITMENT
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "type",
            "origin",
            "epoch",
            "value_ref",
            "fold_seq",
            "leaf_count",
            "root",
            "issued_at",
            "provenance_pending",
        }
    )

    origin: str
    epoch: str
    value_ref: str
    fold_seq: int
    leaf_count: int
    root: str
    issued_at: int
    provenance_pending: bool = False

    def __post_init__(self) -> None:
        _check_node_id(self.origin, "commitment origin")
        _check_digest(self.root, "commitment root")

    @property
    def signer(self) -> str:
        return self.origin

    @property
    def fold_key(self) -> tuple[str, str, str, int]:
        """(origin, epoch, value_ref, fold_seq): one root per key, or equivocation."""
        return (self.origin, self.epoch, self.value_ref, self.fold_seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "origin": self.origin,
            "epoch": self.epoch,
            "value_ref": self.value_ref,
            "fold_seq": self.fold_seq,
            "leaf_count": self.leaf_count,
            "root": self.root,
            "issued_at": self.issued_at,
            "provenance_pending": self.provenance_pending,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Commitment:
        k = cls.KIND.value
        check_fields(obj, k, cls._FIELDS)
        return cls(
            origin=get_node_id(obj, "origin", k),
            epoch=get_str(obj, "epoch", k, max_len=128),
            value_ref=get_str(obj, "value_ref", k),
            fold_seq=get_int(obj, "fold_seq", k),
            leaf_count=get_int(obj, "leaf_count", k),
            root=get_digest(obj, "root", k),
            issued_at=_time(obj, "issued_at", k),
            provenance_pending=get_bool(obj, "provenance_pending", k),
        )


@dataclass(frozen=True, slots=True)
class Obligation:
    """The origin will serve a commitment's hops to any bearer until ``serve_until``."""

    KIND: ClassVar[StatementKind] = StatementKind.OBLIGATION
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "type",
            "origin",
            "commitment",
            "serve_until",
            "deadline_ms",
            "endpoints",
            "holder",
            "issued_at",
        }
    )

    origin: str
    commitment: str
    serve_until: int
    deadline_ms: int
    endpoints: tuple[str, ...]
    issued_at: int
    holder: str | None = None

    def __post_init__(self) -> None:
        _check_node_id(self.origin, "obligation origin")
        _check_digest(self.commitment, "obligation commitment")
        if self.holder is not None:
            _check_node_id(self.holder, "obligation holder")

    @property
    def signer(self) -> str:
        return self.origin

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "origin": self.origin,
            "commitment": self.commitment,
            "serve_until": self.serve_until,
            "deadline_ms": self.deadline_ms,
            "endpoints": list(self.endpoints),
            "holder": self.holder,
            "issued_at": self.issued_at,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Obligation:
        k = cls.KIND.value
        check_fields(obj, k, cls._FIELDS)
        return cls(
            origin=get_node_id(obj, "origin", k),
            commitment=get_digest(obj, "commitment", k),
            serve_until=_time(obj, "serve_until", k),
            deadline_ms=get_int(obj, "deadline_ms", k, lo=1, hi=MAX_TIME_MS),
            endpoints=get_list(obj, "endpoints", k, _str_item(k, 512), max_len=_MAX_ENDPOINTS),
            holder=get_opt(obj, "holder", lambda: get_node_id(obj, "holder", k)),
            issued_at=_time(obj, "issued_at", k),
        )


@dataclass(frozen=True, slots=True)
class Demand:
    """A holder's signed request for committed hops (``leaves=None``: all)."""

    KIND: ClassVar[StatementKind] = StatementKind.DEMAND
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"type", "holder", "origin", "obligation", "commitment", "leaves", "nonce", "time"}
    )

    holder: str
    origin: str
    obligation: str
    commitment: str
    nonce: str
    time: int
    leaves: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_node_id(self.holder, "demand holder")
        _check_node_id(self.origin, "demand origin")
        _check_digest(self.obligation, "demand obligation")
        _check_digest(self.commitment, "demand commitment")
        if not _MIN_NONCE <= len(self.nonce) <= _MAX_NONCE:
            raise ValueError(f"demand nonce must have {_MIN_NONCE}..{_MAX_NONCE} characters")
        if self.leaves is not None and any(
            b <= a for a, b in zip(self.leaves, self.leaves[1:], strict=False)
        ):
            raise ValueError("demand leaves must be strictly increasing")

    @property
    def signer(self) -> str:
        return self.holder

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "holder": self.holder,
            "origin": self.origin,
            "obligation": self.obligation,
            "commitment": self.commitment,
            "leaves": None if self.leaves is None else list(self.leaves),
            "nonce": self.nonce,
            "time": self.time,
        }


def check_receipt_shape(
    k: str,
    status: ReceiptStatus,
    reason: RefusalReason | None,
    leaves: tuple[int, ...] | None,
    served_root: str | None,
    leaf_hashes: tuple[bytes, ...],
    proofs: tuple[tuple[bytes, ...], ...],
) -> None:
    """The fields a receipt of ``status`` carries (checked on every decoded item)."""
    if status is ReceiptStatus.SERVED:
        if reason is not None:
            raise EncodingError(f"{k}: a SERVED receipt carries no reason")
        if leaves is None:
            if served_root is None or leaf_hashes or proofs:
                raise EncodingError(
                    f"{k}: a full serve signs served_root, without leaf hashes or proofs"
                )
        elif served_root is not None or not len(leaves) == len(leaf_hashes) == len(proofs):
            raise EncodingError(
                f"{k}: a partial serve of {len(leaves)} leaves signs one leaf hash and one"
                f" proof per leaf ({len(leaf_hashes)} hashes, {len(proofs)} proofs)"
            )
    elif leaf_hashes or proofs or leaves is not None or served_root is not None:
        raise EncodingError(f"{k}: a {status.value} receipt carries no leaves")
    elif reason is None:
        raise EncodingError(f"{k}: a {status.value} receipt must give a reason")


@dataclass(frozen=True, slots=True)
class Receipt:
    """The origin's signed answer to one demand.

    SERVED, full fold (``leaves`` is ``None``): ``served_root`` is the RFC
    6962 root the origin computed over the hop bytes it served, in order.
    SERVED, partial (``leaves`` lists indices): ``leaf_hashes`` are the leaf
    hashes of the hops served and ``proofs`` one audit path per leaf.

    The hop bytes travel beside the receipt. A signed ``served_root`` (or
    signed leaf hashes and proofs) that does not lead to the committed root is
    the origin's own admission of serving other bytes (``bad_data``); bytes
    that do not match what the receipt signs were altered after signing.
    """

    KIND: ClassVar[StatementKind] = StatementKind.RECEIPT
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "type",
            "origin",
            "obligation",
            "commitment",
            "demand",
            "nonce",
            "status",
            "reason",
            "tree_size",
            "leaves",
            "served_root",
            "leaf_hashes",
            "proofs",
            "issued_at",
        }
    )

    origin: str
    obligation: str
    commitment: str
    demand: str
    nonce: str
    status: ReceiptStatus
    issued_at: int
    reason: RefusalReason | None = None
    tree_size: int = 0
    leaves: tuple[int, ...] | None = None
    served_root: str | None = None
    leaf_hashes: tuple[bytes, ...] = ()
    proofs: tuple[tuple[bytes, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.served_root is not None:
            _check_digest(self.served_root, "receipt served_root")
        _check_node_id(self.origin, "receipt origin")
        _check_digest(self.obligation, "receipt obligation")
        _check_digest(self.commitment, "receipt commitment")
        _check_digest(self.demand, "receipt demand")

    @property
    def signer(self) -> str:
        return self.origin

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "origin": self.origin,
            "obligation": self.obligation,
            "commitment": self.commitment,
            "demand": self.demand,
            "nonce": self.nonce,
            "status": self.status.value,
            "reason": None if self.reason is None else self.reason.value,
            "tree_size": self.tree_size,
            "leaves": None if self.leaves is None else list(self.leaves),
            "served_root": self.served_root,
            "leaf_hashes": [h.hex() for h in self.leaf_hashes],
            "proofs": [[p.hex() for p in path] for path in self.proofs],
            "issued_at": self.issued_at,
        }


@dataclass(frozen=True, slots=True)
class DeliveryReceipt:
    """The holder acknowledges receiving a value with its commitments/obligations."""

    KIND: ClassVar[StatementKind] = StatementKind.DELIVERY_RECEIPT
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"type", "holder", "sender", "value_digest", "commitments", "obligations", "received_at"}
    )

    holder: str
    sender: str
    value_digest: str
    commitments: tuple[str, ...]
    obligations: tuple[str, ...]
    received_at: int

    def __post_init__(self) -> None:
        _check_node_id(self.holder, "delivery receipt holder")
        _check_node_id(self.sender, "delivery receipt sender")
        _check_digest(self.value_digest, "delivery receipt value digest")

    @property
    def signer(self) -> str:
        return self.holder

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "holder": self.holder,
            "sender": self.sender,
            "value_digest": self.value_digest,
            "commitments": list(self.commitments),
            "obligations": list(self.obligations),
            "received_at": self.received_at,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeliveryReceipt:
        k = cls.KIND.value
        check_fields(obj, k, cls._FIELDS)
        return cls(
            holder=get_node_id(obj, "holder", k),
            sender=get_node_id(obj, "sender", k),
            value_digest=get_digest(obj, "value_digest", k),
            commitments=get_list(obj, "commitments", k, _digest_item(k), max_len=4096),
            obligations=get_list(obj, "obligations", k, _digest_item(k), max_len=4096),
            received_at=_time(obj, "received_at", k),
        )


@dataclass(frozen=True, slots=True)
class WitnessReport:
    """A witness re-issued a demand (its own, ``demand``) to ``origin``."""

    KIND: ClassVar[StatementKind] = StatementKind.WITNESS_REPORT
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "type",
            "witness",
            "origin",
            "obligation",
            "demand",
            "address",
            "outcome",
            "receipt",
            "at",
        }
    )

    witness: str
    origin: str
    obligation: str
    demand: str
    outcome: WitnessOutcome
    at: int
    receipt: str | None = None
    #: The endpoint the witness asked (one the origin signed into the obligation).
    address: str = ""

    def __post_init__(self) -> None:
        _check_node_id(self.witness, "witness report witness")
        _check_node_id(self.origin, "witness report origin")
        _check_digest(self.obligation, "witness report obligation")
        _check_digest(self.demand, "witness report demand")
        if (self.outcome is WitnessOutcome.ANSWERED) != (self.receipt is not None):
            raise ValueError("an ANSWERED witness report names a receipt, an UNANSWERED one none")
        if not self.address or len(self.address) > 512:
            raise ValueError("a witness report names the address it asked (1..512 chars)")

    @property
    def signer(self) -> str:
        return self.witness

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "witness": self.witness,
            "origin": self.origin,
            "obligation": self.obligation,
            "demand": self.demand,
            "address": self.address,
            "outcome": self.outcome.value,
            "receipt": self.receipt,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> WitnessReport:
        k = cls.KIND.value
        check_fields(obj, k, cls._FIELDS)
        outcome = get_enum(obj, "outcome", k, WitnessOutcome)
        receipt = get_opt(obj, "receipt", lambda: get_digest(obj, "receipt", k))
        if (outcome is WitnessOutcome.ANSWERED) != (receipt is not None):
            raise EncodingError(f"{k}: outcome {outcome.value} with receipt {receipt!r}")
        return cls(
            witness=get_node_id(obj, "witness", k),
            origin=get_node_id(obj, "origin", k),
            obligation=get_digest(obj, "obligation", k),
            demand=get_digest(obj, "demand", k),
            outcome=outcome,
            receipt=receipt,
            at=_time(obj, "at", k),
            address=get_str(obj, "address", k, max_len=512),
        )


@dataclass(frozen=True, slots=True)
class Attestation:
    """An attester raises one axis of one value (by digest) to ``floor``."""

    KIND: ClassVar[StatementKind] = StatementKind.ATTESTATION
    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        {
            "type",
            "attester",
            "value_digest",
            "axis",
            "floor",
            "discharged",
            "cites",
            "issued_at",
            "expires_at",
        }
    )

    attester: str
    value_digest: str
    axis: Axis
    floor: float
    discharged: tuple[str, ...]
    cites: tuple[str, ...]
    issued_at: int
    expires_at: int

    def __post_init__(self) -> None:
        _check_node_id(self.attester, "attestation attester")
        _check_digest(self.value_digest, "attestation value digest")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"attestation floor {self.floor} outside [0, 1]")

    @property
    def signer(self) -> str:
        return self.attester

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.KIND.value,
            "attester": self.attester,
            "value_digest": self.value_digest,
            "axis": self.axis.value,
            "floor": self.floor,
            "discharged": list(self.discharged),
            "cites": list(self.cites),
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Attestation:
        k = cls.KIND.value
        check_fields(obj, k, cls._FIELDS)
        return cls(
            attester=get_node_id(obj, "attester", k),
            value_digest=get_digest(obj, "value_digest", k),
            axis=get_enum(obj, "axis", k, Axis),
            floor=get_float01(obj, "floor", k),
            discharged=get_list(obj, "discharged", k, _str_item(k, 256), max_len=4096),
            cites=get_list(obj, "cites", k, _digest_item(k), max_len=4096),
            issued_at=_time(obj, "issued_at", k),
            expires_at=_time(obj, "expires_at", k),
        )


@dataclass(frozen=True, slots=True)
class Head:
    """A signed tree head: one compaction's fold records, in the epoch's log of heads.

    ``root`` is the RFC 6962 root over the ``size`` fold records of compaction
    ``seq`` (leaf data: :meth:`contracts.heads.FoldRecord.to_bytes`).
    ``log_root`` is the RFC 6962 root over the batch records (``size``,
    ``root``) of compactions ``0..seq`` of ``epoch``, a tree of ``seq + 1``
    leaves, so a later head proves it extends this one with a consistency
    proof. The serving terms are signed here once for every fold under the
    head (design revision 2), not once per fold.

    A head is signed, carried and cited as a C2SP tlog-checkpoint signed note
    (:mod:`contracts.head_note`), not as a DSSE envelope: this class is what
    that note states.
    """

    KIND: ClassVar[StatementKind] = StatementKind.HEAD

    origin: str
    epoch: str
    seq: int
    size: int
    root: str
    log_root: str
    serve_until: int
    deadline_ms: int
    endpoints: tuple[str, ...]
    issued_at: int
    pending: bool = False

    def __post_init__(self) -> None:
        _check_node_id(self.origin, "head origin")
        _check_digest(self.root, "head root")
        _check_digest(self.log_root, "head log_root")
        if not 0 <= self.seq < MAX_COUNT:
            raise ValueError(f"head seq {self.seq} outside [0, {MAX_COUNT})")
        if not 1 <= self.size <= MAX_COUNT:
            raise ValueError(f"head size {self.size}: a head covers at least one fold")
        if self.deadline_ms < 1:
            raise ValueError(f"head deadline_ms {self.deadline_ms} must be positive")
        if not 0 <= self.serve_until <= MAX_TIME_MS or not 0 <= self.issued_at <= MAX_TIME_MS:
            raise ValueError("head serve_until and issued_at must be times in ms")
        if self.deadline_ms > MAX_TIME_MS:
            raise ValueError(f"head deadline_ms {self.deadline_ms} is not a duration in ms")
        if len(self.endpoints) > _MAX_ENDPOINTS:
            raise ValueError(f"a head names at most {_MAX_ENDPOINTS} endpoints")

    @property
    def signer(self) -> str:
        return self.origin

    @property
    def log_key(self) -> tuple[str, str, int]:
        """(origin, epoch, seq): one tree per key, or a split view."""
        return (self.origin, self.epoch, self.seq)

    @property
    def tree(self) -> tuple[int, str, str]:
        """What the head says about the log: (size, root, log_root)."""
        return (self.size, self.root, self.log_root)


STATEMENT_TYPES: dict[str, type[Any]] = {
    payload_type_for(cls.KIND): cls
    for cls in (
        Commitment,
        Obligation,
        DeliveryReceipt,
        WitnessReport,
        Attestation,
    )
}
