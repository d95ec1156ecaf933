"""The values that travel between nodes, as the node's own types (no protobuf here).

These are what the :class:`~nodes.transport.Transport` seam, the holder
client and the node core pass around; :mod:`nodes.wire` converts each of
them to and from its protobuf message, and is the only module that does.
Statements inside them are envelope bytes exactly as received: nothing
here verifies or re-encodes them.

:class:`Outcome` is what a holder got from one origin. Its accusing members
are :class:`contracts.evidence.EvidenceKind`, member for member
(:func:`outcome_for` maps a kind to its outcome exhaustively, so a kind added
to ``contracts`` without an outcome here fails the type check, and a test
pins that the values agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, assert_never

from contracts.evidence import EvidenceKind

__all__ = [
    "EVIDENCE_KINDS",
    "Acknowledgement",
    "Answer",
    "ChallengeResult",
    "CommittedCompaction",
    "CommittedFold",
    "Delivery",
    "NodeInfo",
    "OriginOutcome",
    "Outcome",
    "RehydrationReport",
    "VerifiedHop",
    "WitnessReply",
    "outcome_for",
    "select_hops",
]


@dataclass(frozen=True, slots=True)
class Answer:
    """An origin's answer to one demand, as received (nothing verified yet).

    ``receipt`` and ``commitment`` are envelope bytes; ``hops`` the served hop
    bytes in the receipt's leaf order (empty unless the receipt is SERVED).
    """

    receipt: bytes
    commitment: bytes
    hops: tuple[bytes, ...] = ()


def select_hops(leaves: Sequence[bytes], wanted: Sequence[int] | None) -> tuple[bytes, ...]:
    """The demanded leaves of a fold, in demand order (``None``: all of them)."""
    return tuple(leaves) if wanted is None else tuple(leaves[i] for i in wanted)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A compacted value with its origins' statements.

    Per-fold form: ``commitments`` and ``obligations`` (same order). Head
    form: ``fold_proofs`` (:class:`contracts.heads.FoldProof` JSON, each
    naming its head by digest) and ``heads``, the signed head notes
    (:mod:`contracts.head_note`, bytes as signed) the receiver is not known to
    hold already (a head it verified before travels as the digest in the fold
    proof only). A value may carry both forms.
    """

    value_ref: str
    value: bytes
    commitments: tuple[bytes, ...]
    obligations: tuple[bytes, ...]
    sender: str = ""
    fold_proofs: tuple[bytes, ...] = ()
    heads: tuple[bytes, ...] = ()
    #: Custody statements (:mod:`contracts.custody`) for the folds, as signed.
    custody: tuple[bytes, ...] = ()
    #: Bytes of this delivery's request on the wire, once :func:`nodes.wire.deliver_request_size`
    #: has built it (0 before): the sender's size check and its meter size the same
    #: delivery, and the message is built once for both. The fields are immutable,
    #: so the size stays the message's.
    _request_size: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Bytes of the value and its statements (the payload; the message size on
        the wire is :func:`nodes.wire.deliver_request_size`, its request's length)."""
        return (
            len(self.value)
            + sum(len(c) for c in self.commitments)
            + sum(len(p) for p in self.fold_proofs)
            + sum(len(h) for h in self.heads)
            + sum(len(o) for o in self.obligations)
            + sum(len(c) for c in self.custody)
        )


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """A receiver's answer to a delivery it now holds.

    The answer itself is the acknowledgement: the receiver verified, or held
    verified, every statement and head the delivery named. ``receipt`` is its
    signed delivery receipt (:class:`contracts.statements.DeliveryReceipt`
    envelope bytes) when the sender asked for one, else empty: on the
    delivery path it decides nothing (design, "Sign where it carries
    information"), so a sender asks only where it cites it (``Forward``).
    """

    #: The receiver's clock when it held the value, ms since the epoch.
    received_at: int
    receipt: bytes = b""


@dataclass(frozen=True, slots=True)
class ChallengeResult:
    """A witness's answer: its signed report, its own demand, the origin's receipt if any.

    ``witness_report`` is empty when the witness ran out of budget before the
    origin's deadline passed (inconclusive).
    """

    witness_report: bytes
    answered: bool
    witness_demand: bytes = b""
    receipt: bytes = b""


@dataclass(frozen=True, slots=True)
class CommittedFold:
    """What ``HopLog.CommitFold`` returns: the signed statements' envelope bytes."""

    commitment: bytes
    obligation: bytes
    provenance_pending: bool


@dataclass(frozen=True, slots=True)
class CommittedCompaction:
    """What ``HopLog.CommitCompaction`` returns: ONE signed head and a fold proof per value."""

    head: bytes
    fold_proofs: tuple[bytes, ...]
    provenance_pending: bool
    #: Custody statements custodians signed for the folds (:mod:`nodes.custodian`;
    #: ``statements_for`` picks one fold's): empty with ``custody_k`` 0.
    custody: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What ``Node.Info`` reports about a node."""

    name: str
    node_id: str
    public_key: bytes
    epoch: str
    fault: str
    listen: str


class Outcome(StrEnum):
    """What a holder got from one origin for one decision."""

    SERVED = "served"  # every fold verified (possibly from cache)
    PENDING = "pending"  # origin says provenance_pending (legitimate; ask later)
    EXPIRED = "expired"  # obligation past serve_until (legitimate, S3)
    REJECTED = "rejected"  # origin answered an unsigned error: not attributable
    UNATTRIBUTABLE = "unattributable"  # a reply nobody can pin on the origin
    # said it was overloaded (RESOURCE_EXHAUSTED) until the deadline: not silence
    # (nodes.noanswer); a suspicion never confirmed, never a proof, not an accusation
    BUSY = "busy"
    # The accusing outcomes: one per contracts EvidenceKind, same value.
    BAD_DATA = EvidenceKind.BAD_DATA.value
    REFUSED = EvidenceKind.REFUSED.value
    EQUIVOCATION = EvidenceKind.EQUIVOCATION.value
    SPLIT_VIEW = EvidenceKind.SPLIT_VIEW.value
    UNANSWERED = EvidenceKind.UNANSWERED.value


def outcome_for(kind: EvidenceKind) -> Outcome:
    """The holder outcome an evidence kind is recorded as."""
    match kind:
        case EvidenceKind.BAD_DATA:
            return Outcome.BAD_DATA
        case EvidenceKind.REFUSED:
            return Outcome.REFUSED
        case EvidenceKind.EQUIVOCATION:
            return Outcome.EQUIVOCATION
        case EvidenceKind.SPLIT_VIEW:
            return Outcome.SPLIT_VIEW
        case EvidenceKind.UNANSWERED:
            return Outcome.UNANSWERED
        case _:
            assert_never(kind)


#: Outcomes that are evidence against the origin (one per evidence kind).
EVIDENCE_KINDS = frozenset(outcome_for(kind) for kind in EvidenceKind)


class VerifiedHop(NamedTuple):
    """One served hop the holder verified: its origin, fold (commitment digest), leaf, bytes.

    A named tuple, not a frozen dataclass: a rehydration makes one per served
    hop (~36 in the boundary slice), and a frozen dataclass's ``__init__``
    (one ``object.__setattr__`` per field) costs about twice as much."""

    origin: str
    commitment: str
    leaf_index: int
    hop: bytes


@dataclass(frozen=True, slots=True)
class OriginOutcome:
    """The result for one origin; ``evidence``/``evidence_path`` set when it accuses."""

    origin: str
    outcome: Outcome
    detail: str
    evidence: bytes = b""
    evidence_path: str = ""
    asks: int = 0
    witnesses_asked: int = 0
    witnesses_unanswered: int = 0
    witness_confirmed: bool = False
    cleared: bool = False

    @property
    def accuses(self) -> bool:
        return self.outcome in EVIDENCE_KINDS and not self.cleared


@dataclass(frozen=True, slots=True)
class RehydrationReport:
    """One value's rehydration: per origin its outcome; with custodians
    (:func:`nodes.custodian.rehydrate_with_custody`), per custodian asked, in the
    order asked, its own outcome in ``parties`` (``origin`` names the custodian),
    and ``recovered`` when custodians served every fold the origins did not."""

    value_ref: str
    outcomes: tuple[OriginOutcome, ...]
    hops: tuple[VerifiedHop, ...]
    rpcs: int
    demand_rpcs: int
    parties: tuple[OriginOutcome, ...] = ()
    recovered: bool = False

    @property
    def complete(self) -> bool:
        """Every fold served: by its origins, or what they did not by custodians."""
        return self.recovered or all(o.outcome is Outcome.SERVED for o in self.outcomes)

    @property
    def served_by(self) -> tuple[str, ...]:
        """Parties (origins and custodians, node ids) that served, in the order asked."""
        return tuple(
            o.origin for o in (*self.outcomes, *self.parties) if o.outcome is Outcome.SERVED
        )

    @property
    def failed(self) -> tuple[OriginOutcome, ...]:
        """Every party asked that did not serve, origins first, then custodians."""
        return tuple(o for o in (*self.outcomes, *self.parties) if o.outcome is not Outcome.SERVED)


@dataclass(frozen=True, slots=True)
class WitnessReply:
    """A ``Witness.AddCheckpoint`` answer: cosignature lines, or a conflict with the
    witness's size (tlog-witness's 409)."""

    cosignatures: bytes = b""
    conflict: bool = False
    size: int = 0
