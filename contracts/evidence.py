"""Evidence that a named origin failed an obligation (S2–S4, S8).

Two levels, as in PeerReview:

* **proofs** expose the origin for good and never clear —
  ``bad_data``: a SERVED receipt signed by the origin whose leaves do not
  lead to the root it committed (or are not the leaves demanded);
  ``refused``: a signed ABSENT/REFUSED (or PENDING for a commitment issued as
  durable) answering a valid demand, issued before ``serve_until`` — status
  ``admitted_loss`` when its reason is STORE_CORRUPTED (the origin says its
  own disk damaged the bytes; a loss, not bad data);
  ``equivocation``: two commitments signed by the origin for the same
  (origin, epoch, value_ref, fold_seq) with different roots or sizes;
  ``split_view``: two heads signed by the origin for the same epoch that no
  consistency proof reconciles — the same compaction ``seq`` with another
  tree, or a consistency path that reproduces the later head's log root but
  not the earlier one's (design revision 2);
* **suspicions** are clearable — ``unanswered``: the holder's signed demand,
  made while the obligation ran, re-asked ``re_asks`` times, with no receipt
  by the deadline. It becomes ``witness_confirmed`` when enough other nodes'
  signed reports say their own re-issued demands went unanswered too, and it
  is ``cleared`` by any receipt of the origin answering one of those demands.
  Silence is never proof. A record with ``"status": "RESOURCE_EXHAUSTED"``
  says the origin was not silent but **busy**: it answered every ask with
  that (unsigned) status until the deadline. It verifies as ``busy``, a
  suspicion witnesses cannot confirm (their reports are checked, not counted)
  and a receipt still clears; records without the field keep their bytes and
  their verdicts.

An evidence file is standalone JSON (:meth:`Evidence.to_bytes`) holding the
signed statements themselves: DSSE envelopes (JSON objects) and heads, C2SP
signed notes carried verbatim (JSON strings, :mod:`contracts.head_note`).
:func:`verify_evidence` needs nothing else: every
statement attributed to the accused must verify with the accused's own key
(its node id is its public key), every demand or report with its signer's.
Anything that does not verify that way is rejected, so a correct origin
cannot be framed (S8 accuracy); :func:`judge_answer` turns every attributable
failure a holder observes into evidence (S8 completeness).

Custodians (design revision 3, :mod:`contracts.custody`): a head-bound
``bad_data``, ``refused`` or ``unanswered`` record against a custodian also
holds its custody statement in ``custody`` (the note, verbatim); the head in
``commitment`` is then the origin's, verified with the origin's key, the
statement with the accused custodian's, and it must name exactly that head
and fold (:func:`contracts.custody.bind_custody`). Demands and receipts are
bound to the statement's digest as their obligation: a custodian is accused
only with statements its own key signed, like an origin.

Head-bound records (design revision 2): a ``bad_data``, ``refused`` or
``unanswered`` record about a fold proven under a signed head holds the head
note in ``commitment``, no ``obligation`` (the head carries the serving
terms) and the fold proof in ``proof`` as ``{"fold": base64 of its bytes}``
(:class:`contracts.heads.FoldProof`, its one encoding; the JSON object form of
earlier files is refused by name, :func:`cited_fold`); :func:`cite_head` turns a record built with a
:class:`~contracts.heads.VerifiedFold`'s stand-ins into that form. The verifier
checks the head's signature by the accused and the fold's inclusion under it,
then the same bindings as for per-fold statements.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, assert_never

from contracts._fields import (
    MAX_COUNT,
    MAX_TIME_MS,
    check_fields,
    get_enum,
    get_int,
    get_node_id,
    is_digest,
)
from contracts.batch import FoldKey
from contracts.canonical import (
    JsonObject,
    canonical_bytes,
    format_ms,
    parse_json_object,
)
from contracts.custody import CustodyFold, bind_custody, open_custody
from contracts.envelope import Envelope
from contracts.errors import (
    BindingMismatch,
    CheckResult,
    ContractError,
    EncodingError,
    NotEvidence,
    RootMismatch,
    VerificationError,
    run_check,
)
from contracts.head_note import SignedHead, open_head
from contracts.heads import FoldProof, VerifiedFold, verify_fold
from contracts.merkle import consistency_roots
from contracts.rules import DEMAND_WINDOW_MS, demand_due_ms, expired
from contracts.serve import (
    ServedFold,
    verify_receipt_binding,
    verify_served_bytes,
    verify_signed_leaves,
)
from contracts.signed import Signed, open_statement
from contracts.statements import (
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
    WitnessOutcome,
    WitnessReport,
)

__all__ = [
    "BUSY_STATUS",
    "CLEARING_SKEW_MS",
    "EVIDENCE_FORMAT",
    "Answer",
    "AnswerKind",
    "EquivocationDetector",
    "Evidence",
    "EvidenceKind",
    "EvidenceLevel",
    "EvidenceStatus",
    "EvidenceVerdict",
    "check_evidence",
    "cite_head",
    "cited_fold",
    "equivocation_evidence",
    "judge_answer",
    "judge_head_extension",
    "split_view_evidence",
    "unanswered_evidence",
    "verify_clearing",
    "verify_evidence",
]

EVIDENCE_FORMAT = "provnet-evidence/v1"
#: The one status an ``unanswered`` record may name: the origin said it was busy.
BUSY_STATUS = "RESOURCE_EXHAUSTED"
_MAX_WITNESSES = 64
_MAX_ANSWERS = 64


class EvidenceKind(StrEnum):
    BAD_DATA = "bad_data"
    REFUSED = "refused"
    EQUIVOCATION = "equivocation"
    UNANSWERED = "unanswered"
    SPLIT_VIEW = "split_view"


class EvidenceLevel(StrEnum):
    PROOF = "proof"
    SUSPICION = "suspicion"


class EvidenceStatus(StrEnum):
    """What a verified record establishes.

    ``admitted_loss``: a ``refused`` record whose signed refusal says
    STORE_CORRUPTED — the origin broke its obligation (the bytes are gone for
    the holder), and said so itself, naming its own damaged store, rather
    than signing bytes that miss its root. A proof of loss, not of lying:
    never ``bad_data``.
    """

    PROVEN = "proven"
    SUSPECTED = "suspected"
    WITNESS_CONFIRMED = "witness_confirmed"
    #: An ``unanswered`` record whose holder was told the origin was busy, not met
    #: with silence: a suspicion never confirmed, never a proof.
    BUSY = "busy"
    CLEARED = "cleared"
    ADMITTED_LOSS = "admitted_loss"


def _level(kind: EvidenceKind) -> EvidenceLevel:
    match kind:
        case (
            EvidenceKind.BAD_DATA
            | EvidenceKind.REFUSED
            | EvidenceKind.EQUIVOCATION
            | EvidenceKind.SPLIT_VIEW
        ):
            return EvidenceLevel.PROOF
        case EvidenceKind.UNANSWERED:
            return EvidenceLevel.SUSPICION
        case _:
            assert_never(kind)


_FIELDS = frozenset(
    {
        "type",
        "format",
        "kind",
        "accused",
        "reported_at",
        "re_asks",
        "commitment",
        "obligation",
        "demand",
        "receipt",
        "conflicting",
        "witness_demands",
        "witness_reports",
        "answers",
        "proof",
        "status",
        "custody",
    }
)


#: A signed statement in an evidence record: a DSSE envelope, or a head's note (bytes).
Cited = Envelope | bytes


def _env_or_none(obj: JsonObject, key: str) -> Envelope | None:
    value = obj.get(key)
    return None if value is None else Envelope.from_json(value)


def _cited_or_none(obj: JsonObject, key: str) -> Cited | None:
    """An envelope (JSON object) or a head note (JSON string: the note's text verbatim)."""
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is str:
        return value.encode("utf-8")
    return Envelope.from_json(value)


def _cited_json(value: Cited) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value.to_json()


def _env_list(obj: JsonObject, key: str, limit: int) -> tuple[Envelope, ...]:
    value = obj.get(key, [])
    if not isinstance(value, list) or len(value) > limit:
        raise EncodingError(f"evidence: field {key!r} must be a list of at most {limit} envelopes")
    return tuple(Envelope.from_json(v) for v in value)


@dataclass(frozen=True, slots=True)
class Evidence:
    """A standalone evidence record; check it with :func:`verify_evidence`.

    Parsing (:meth:`from_bytes`) only checks the shape; nothing in it is
    trusted until :func:`verify_evidence` has verified every signature.
    """

    kind: EvidenceKind
    accused: str
    #: the commitment's envelope, or (head-bound and split-view records) a head note
    commitment: Cited
    obligation: Envelope | None = None
    demand: Envelope | None = None
    receipt: Envelope | None = None
    conflicting: Cited | None = None
    re_asks: int = 0
    witness_demands: tuple[Envelope, ...] = ()
    witness_reports: tuple[Envelope, ...] = ()
    answers: tuple[Envelope, ...] = ()
    reported_at: int = 0
    proof: JsonObject | None = None
    #: ``unanswered`` only: :data:`BUSY_STATUS` if the origin answered that, not silence.
    status: str = ""
    #: A head-bound record against a **custodian**: its custody statement's note
    #: (:mod:`contracts.custody`); ``commitment`` is then the origin's head, signed
    #: by the origin, and everything attributed is the custodian's.
    custody: bytes | None = None

    @property
    def level(self) -> EvidenceLevel:
        return _level(self.kind)

    @property
    def digest(self) -> str:
        """Hex SHA-256 of :meth:`to_bytes`."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def to_json(self) -> JsonObject:
        def env(e: Envelope | None) -> JsonObject | None:
            return None if e is None else e.to_json()

        out: JsonObject = {
            "type": "evidence",
            "format": EVIDENCE_FORMAT,
            "kind": self.kind.value,
            "accused": self.accused,
            "reported_at": self.reported_at,
            "re_asks": self.re_asks,
            "commitment": _cited_json(self.commitment),
            "obligation": env(self.obligation),
            "demand": env(self.demand),
            "receipt": env(self.receipt),
            "conflicting": None if self.conflicting is None else _cited_json(self.conflicting),
            "witness_demands": [e.to_json() for e in self.witness_demands],
            "witness_reports": [e.to_json() for e in self.witness_reports],
            "answers": [e.to_json() for e in self.answers],
        }
        if self.proof is not None:
            # Only head-bound and split-view records have it: older files keep their bytes.
            out["proof"] = self.proof
        if self.status:
            out["status"] = self.status  # likewise: records without it keep their bytes
        if self.custody is not None:
            out["custody"] = self.custody.decode("utf-8")  # likewise
        return out

    def to_bytes(self) -> bytes:
        """RFC 8785 canonical JSON: the evidence file's content."""
        return canonical_bytes(self.to_json())

    @classmethod
    def from_json(cls, obj: Any) -> Evidence:
        if not isinstance(obj, dict):
            raise EncodingError(f"evidence: expected a JSON object, got {type(obj).__name__}")
        check_fields(obj, "evidence", _FIELDS)
        if obj.get("format") != EVIDENCE_FORMAT:
            raise EncodingError(
                f"evidence: format {obj.get('format')!r:.60} is not {EVIDENCE_FORMAT!r}"
            )
        commitment = _cited_or_none(obj, "commitment")
        if commitment is None:
            raise EncodingError("evidence: missing field 'commitment'")
        proof = obj.get("proof")
        if proof is not None and type(proof) is not dict:
            raise EncodingError("evidence: field 'proof' must be a JSON object")
        custody = obj.get("custody")
        if custody is not None and (
            type(custody) is not str
            or proof is None
            or obj.get("kind") not in ("bad_data", "refused", "unanswered")
        ):
            # split_view and equivocation accuse the origin that signed both heads:
            # a custody note there would be read by nothing yet name a custodian
            raise EncodingError(
                "evidence: field 'custody' must be a custody note (text), on a head-bound"
                " bad_data, refused or unanswered record"
            )
        status = obj.get("status", "")
        if status != "" and (status != BUSY_STATUS or obj.get("kind") != "unanswered"):
            raise EncodingError(
                f"evidence: field 'status' {status!r:.60} must be {BUSY_STATUS!r}, on an"
                " unanswered record only"
            )
        return cls(
            kind=get_enum(obj, "kind", "evidence", EvidenceKind),
            accused=get_node_id(obj, "accused", "evidence"),
            commitment=commitment,
            obligation=_env_or_none(obj, "obligation"),
            demand=_env_or_none(obj, "demand"),
            receipt=_env_or_none(obj, "receipt"),
            conflicting=_cited_or_none(obj, "conflicting"),
            re_asks=get_int(obj, "re_asks", "evidence", hi=MAX_COUNT),
            witness_demands=_env_list(obj, "witness_demands", _MAX_WITNESSES),
            witness_reports=_env_list(obj, "witness_reports", _MAX_WITNESSES),
            answers=_env_list(obj, "answers", _MAX_ANSWERS),
            reported_at=get_int(obj, "reported_at", "evidence", hi=MAX_TIME_MS),
            proof=proof,
            status=status,
            custody=None if custody is None else custody.encode("utf-8"),
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Evidence:
        return cls.from_json(parse_json_object(data, what="evidence"))

    def with_answer(self, receipt: Envelope | Signed[Receipt]) -> Evidence:
        """The same record plus a receipt that may clear an ``unanswered`` suspicion."""
        env = receipt.envelope if isinstance(receipt, Signed) else receipt
        return dataclasses.replace(self, answers=(*self.answers, env))


@dataclass(frozen=True, slots=True)
class EvidenceVerdict:
    """What a verified evidence record establishes."""

    kind: EvidenceKind
    level: EvidenceLevel
    status: EvidenceStatus
    accused: str
    commitment: str
    obligation: str | None
    reason: str
    witnesses: tuple[str, ...] = ()
    re_asks: int = 0

    @property
    def accuses(self) -> bool:
        """True unless the suspicion was cleared."""
        return self.status is not EvidenceStatus.CLEARED

    @property
    def is_proof(self) -> bool:
        return self.level is EvidenceLevel.PROOF


@dataclass(frozen=True, slots=True)
class _Core:
    commitment: Signed[Commitment]
    obligation: Signed[Obligation]
    demand: Signed[Demand]


def _party(e: Evidence) -> str:
    """How a verdict names the accused: the custodian of a custody record, else the origin."""
    return "custodian" if e.custody is not None else "origin"


def _by_accused(
    env: Cited | None, cls: Any, accused: str, what: str, fold: FoldKey | None = None
) -> Any:
    if env is None:
        raise EncodingError(f"evidence: missing {what}")
    if isinstance(env, bytes):
        raise EncodingError(f"evidence: {what} is a head note where a signed envelope belongs")
    # Attributed statements must verify with the accused's own key; a batch
    # (contracts.batch) is read for the record's own fold.
    return open_statement(env, cls, signer=accused, fold=fold)


def _head_by_accused(value: Cited | None, accused: str, what: str) -> SignedHead:
    if value is None:
        raise EncodingError(f"evidence: missing {what}")
    if not isinstance(value, bytes):
        raise EncodingError(f"evidence: {what} is an envelope; a head is a signed note")
    # Attributed heads must verify with the accused's own key (its node id).
    return open_head(value, origin=accused)


def _core(e: Evidence) -> _Core:
    if e.proof is not None:
        return _head_core(e)
    c: Signed[Commitment] = _by_accused(e.commitment, Commitment, e.accused, "commitment")
    o: Signed[Obligation] = _by_accused(e.obligation, Obligation, e.accused, "obligation")
    if e.demand is None:
        raise EncodingError("evidence: missing demand")
    demand = open_statement(e.demand, Demand, fold=(o.digest, c.digest))
    return _bound_core(c, o, demand, e.accused)


def cited_fold(proof: JsonObject | None) -> FoldProof:
    """The fold proof a head-bound record cites in ``proof``: ``{"fold": base64 of its
    bytes}`` (:meth:`contracts.heads.FoldProof.to_text`). Read, not verified."""
    if proof is None or proof.keys() != {"fold"}:
        keys = sorted(proof) if proof is not None else []
        if {"head", "index", "path", "record"} <= set(keys):
            raise EncodingError(
                "evidence: proof is a fold proof in the earlier JSON form, not read; this"
                ' version cites {"fold": base64 of the fold proof\'s bytes}'
            )
        raise EncodingError(f'evidence: proof must be {{"fold": base64}}, got keys {keys}')
    return FoldProof.from_text(proof["fold"])


def _head_core(e: Evidence) -> _Core:
    """A head-bound record: the head by the accused, the fold proven under it — or,
    against a custodian, the origin's head, the fold under it, and the custodian's
    statement bound to both (:func:`contracts.custody.bind_custody`)."""
    if e.obligation is not None:
        raise EncodingError("evidence: a head-bound record has no obligation (the head has it)")
    fold: VerifiedFold
    if e.custody is None:
        # (1) the head is signed by the accused
        head = _head_by_accused(e.commitment, e.accused, "head")
        # (2) the fold record is included under the head's root
        fold = verify_fold(cited_fold(e.proof), head)
    else:
        # (1') the head is signed by its origin, the custody statement by the accused
        if not isinstance(e.commitment, bytes):
            raise EncodingError("evidence: head is an envelope; a head is a signed note")
        head = open_head(e.commitment)
        custody = open_custody(e.custody, custodian=e.accused)
        # (2') the fold is under the head, and the statement promises exactly it
        fold = bind_custody(custody, verify_fold(cited_fold(e.proof), head))
    if e.demand is None:
        raise EncodingError("evidence: missing demand")
    # (3) the demand names the head and the fold (as for per-fold statements)
    key = (fold.obligation.digest, fold.commitment.digest)
    demand = open_statement(e.demand, Demand, fold=key)
    return _bound_core(fold.commitment, fold.obligation, demand, e.accused)


def _bound_core(
    c: Signed[Commitment], o: Signed[Obligation], d: Signed[Demand], accused: str
) -> _Core:
    """The bindings between already opened (signature-checked) statements."""
    for statement in (c, o):
        if statement.signer != accused:
            raise BindingMismatch(
                f"{statement.statement.KIND.value} {statement.digest[:12]}… is signed by"
                f" {statement.signer[:16]}…, not the accused {accused[:16]}…"
            )
    if o.statement.commitment != c.digest:
        raise BindingMismatch(
            f"obligation {o.digest[:12]}… names commitment {o.statement.commitment[:12]}…,"
            f" not {c.digest[:12]}…"
        )
    _check_demand(d, o, c, accused)
    return _Core(c, o, d)


def _check_demand(
    d: Signed[Demand], o: Signed[Obligation], c: Signed[Commitment], accused: str
) -> None:
    ds = d.statement
    if ds.obligation != o.digest or ds.commitment != c.digest or ds.origin != accused:
        raise BindingMismatch(f"demand {d.digest[:12]}… is not for obligation {o.digest[:12]}…")
    bound = o.statement.holder
    if bound is not None and ds.holder != bound:
        raise NotEvidence(
            f"obligation {o.digest[:12]}… is bound to holder {bound[:16]}…;"
            f" demand {d.digest[:12]}… came from {ds.holder[:16]}…"
        )
    count = c.statement.leaf_count
    if ds.leaves is not None and ds.leaves and ds.leaves[-1] >= count:
        raise NotEvidence(
            f"demand {d.digest[:12]}… asks for leaf {ds.leaves[-1]} of a {count}-leaf fold"
        )


def _key(core: _Core) -> FoldKey:
    """The fold a record is about: selects its statements out of a batch."""
    return core.obligation.digest, core.commitment.digest


def _verdict(
    e: Evidence,
    status: EvidenceStatus,
    c: Signed[Commitment] | SignedHead,
    o: Signed[Obligation] | None,
    reason: str,
    witnesses: tuple[str, ...] = (),
) -> EvidenceVerdict:
    return EvidenceVerdict(
        kind=e.kind,
        level=e.level,
        status=status,
        accused=e.accused,
        commitment=c.digest,
        obligation=None if o is None else o.digest,
        reason=reason,
        witnesses=witnesses,
        re_asks=e.re_asks,
    )


def _verify_bad_data(e: Evidence) -> EvidenceVerdict:
    core = _core(e)
    r: Signed[Receipt] = _by_accused(e.receipt, Receipt, e.accused, "receipt", _key(core))
    verify_receipt_binding(
        r, demand=core.demand, obligation=core.obligation, commitment=core.commitment
    )
    if r.statement.status is not ReceiptStatus.SERVED:
        raise NotEvidence(f"receipt {r.digest[:12]}… is {r.statement.status.value}, not SERVED")
    try:
        verify_signed_leaves(r, core.demand.statement, core.commitment.statement)
    except VerificationError as exc:
        return _bad_data(e, core, r, exc)
    raise NotEvidence(
        f"receipt {r.digest[:12]}…: signed leaves lead to the committed root; no bad data"
    )


def _bad_data(e: Evidence, core: _Core, r: Signed[Receipt], miss: Exception) -> EvidenceVerdict:
    """The verdict on a bound, SERVED receipt whose signed leaves missed the root (``miss``)."""
    return _verdict(
        e,
        EvidenceStatus.PROVEN,
        core.commitment,
        core.obligation,
        f"{_party(e)} {e.accused[:16]}… signed receipt {r.digest[:12]}… that misses"
        f" its commitment {core.commitment.digest[:12]}…: {miss}",
    )


def _verify_refused(e: Evidence) -> EvidenceVerdict:
    core = _core(e)
    r: Signed[Receipt] = _by_accused(e.receipt, Receipt, e.accused, "receipt", _key(core))
    verify_receipt_binding(
        r, demand=core.demand, obligation=core.obligation, commitment=core.commitment
    )
    return _refused(e, core, r)


def _refused(e: Evidence, core: _Core, r: Signed[Receipt]) -> EvidenceVerdict:
    """The verdict on a receipt already bound to the demand, obligation and commitment."""
    rs, os_ = r.statement, core.obligation.statement
    if rs.status is ReceiptStatus.SERVED:
        raise NotEvidence(f"receipt {r.digest[:12]}… is SERVED, not a refusal")
    reason = "?" if rs.reason is None else rs.reason.value
    if rs.status is ReceiptStatus.PENDING and core.commitment.statement.provenance_pending:
        raise NotEvidence(
            f"receipt {r.digest[:12]}… is PENDING for commitment {core.commitment.digest[:12]}…"
            " issued as provenance_pending: legitimate (S6)"
        )
    if expired(os_.serve_until, rs.issued_at):
        raise NotEvidence(
            f"refusal {r.digest[:12]}… ({reason}) at {format_ms(rs.issued_at)} is not before"
            f" serve_until {format_ms(os_.serve_until)}: the obligation had expired"
        )
    if rs.reason is RefusalReason.STORE_CORRUPTED:
        return _verdict(
            e,
            EvidenceStatus.ADMITTED_LOSS,
            core.commitment,
            core.obligation,
            f"{_party(e)} {e.accused[:16]}… answered {rs.status.value} ({reason}) at"
            f" {format_ms(rs.issued_at)}, before serve_until {format_ms(os_.serve_until)}:"
            f" it admits its own store is corrupted, the hops of"
            f" {core.commitment.digest[:12]}… no longer reproduce its root"
            " (its loss, not bad data)",
        )
    return _verdict(
        e,
        EvidenceStatus.PROVEN,
        core.commitment,
        core.obligation,
        f"{_party(e)} {e.accused[:16]}… answered {rs.status.value} ({reason}) at"
        f" {format_ms(rs.issued_at)}, before serve_until {format_ms(os_.serve_until)}",
    )


def _verify_equivocation(e: Evidence) -> EvidenceVerdict:
    a: Signed[Commitment] = _by_accused(e.commitment, Commitment, e.accused, "commitment")
    b: Signed[Commitment] = _by_accused(e.conflicting, Commitment, e.accused, "conflicting")
    sa, sb = a.statement, b.statement
    if sa.fold_key != sb.fold_key:
        raise NotEvidence(
            f"commitments {a.digest[:12]}… and {b.digest[:12]}… are for different folds"
        )
    if sa.root == sb.root and sa.leaf_count == sb.leaf_count:
        raise NotEvidence(
            f"commitments {a.digest[:12]}… and {b.digest[:12]}… agree on root and size"
        )
    return _verdict(
        e,
        EvidenceStatus.PROVEN,
        a,
        None,
        f"{_party(e)} {e.accused[:16]}… committed fold (epoch {sa.epoch!r}, value {sa.value_ref!r},"
        f" fold {sa.fold_seq}) to two roots {sa.root[:12]}… ({sa.leaf_count} leaves)"
        f" and {sb.root[:12]}… ({sb.leaf_count} leaves)",
    )


def _split_view_path(e: Evidence) -> tuple[bytes, ...]:
    raw = None if e.proof is None else e.proof.get("path")
    if type(raw) is not list or len(raw) > 64 or not all(is_digest(h) for h in raw):
        raise EncodingError(
            "evidence: split view of two heads of different seq needs proof.path,"
            " a list of 64 lower-case hex hashes"
        )
    return tuple(bytes.fromhex(h) for h in raw)


def _verify_split_view(e: Evidence) -> EvidenceVerdict:
    # (1) both heads signed by the accused, for the same epoch
    a = _head_by_accused(e.commitment, e.accused, "head")
    b = _head_by_accused(e.conflicting, e.accused, "conflicting head")
    sa, sb = a.statement, b.statement
    if sa.epoch != sb.epoch:
        raise NotEvidence(f"heads {a.digest[:12]}… and {b.digest[:12]}… are of different epochs")
    if sa.seq == sb.seq:
        # (2a) one compaction, two trees
        if sa.tree == sb.tree:
            raise NotEvidence(
                f"heads {a.digest[:12]}… and {b.digest[:12]}… agree on compaction {sa.seq}"
            )
        reason = (
            f"{_party(e)} {e.accused[:16]}… signed two trees for compaction {sa.seq} of epoch"
            f" {sa.epoch!r}: {sa.size} folds, root {sa.root[:12]}…, log {sa.log_root[:12]}…"
            f" and {sb.size} folds, root {sb.root[:12]}…, log {sb.log_root[:12]}…"
        )
    else:
        # (2b) a consistency path authenticated by the later head's log root
        # yields another log root for the earlier size than the earlier head signed
        lo, hi = (a, b) if sa.seq < sb.seq else (b, a)
        first, second = lo.statement.seq + 1, hi.statement.seq + 1
        fr, fh = consistency_roots(first, second, _split_view_path(e))
        if fh.hex() != hi.statement.log_root:
            raise NotEvidence(
                f"consistency path does not lead to the log root of head {hi.digest[:12]}…;"
                " it proves nothing"
            )
        if fr.hex() == lo.statement.log_root:
            raise NotEvidence(
                f"head {hi.digest[:12]}… extends head {lo.digest[:12]}…: the logs are consistent"
            )
        reason = (
            f"{_party(e)} {e.accused[:16]}… signed log root {lo.statement.log_root[:12]}… for"
            f" {first} compaction(s) of epoch {sa.epoch!r}, but its head {hi.digest[:12]}…"
            f" of {second} has {fr.hex()[:12]}… for those: a split view"
        )
    return _verdict(e, EvidenceStatus.PROVEN, a, None, reason)


def _verify_unanswered(e: Evidence, now: int, min_witnesses: int) -> EvidenceVerdict:
    core = _core(e)
    c, o, d = core.commitment, core.obligation, core.demand
    os_, ds = o.statement, d.statement
    # (1) the demand was made while the obligation ran, and its deadline passed
    if expired(os_.serve_until, ds.time):
        raise NotEvidence(
            f"demand {d.digest[:12]}… at {format_ms(ds.time)} came after serve_until"
            f" {format_ms(os_.serve_until)}"
        )
    due = demand_due_ms(ds.time, os_.deadline_ms)
    if now < due:
        raise NotEvidence(
            f"demand {d.digest[:12]}… is due at {format_ms(due)}; not unanswered yet"
            f" (now {format_ms(now)})"
        )
    # (2) witnesses: their own signed demands and reports for this obligation
    demands: dict[str, Signed[Demand]] = {d.digest: d}
    for env in e.witness_demands:
        wd = open_statement(env, Demand, fold=_key(core))
        _check_demand(wd, o, c, e.accused)
        demands[wd.digest] = wd
    confirmed: list[str] = []
    for env in e.witness_reports:
        rep = open_statement(env, WitnessReport)
        rs = rep.statement
        wd_ = demands.get(rs.demand)
        if rs.origin != e.accused or rs.obligation != o.digest or wd_ is None:
            raise BindingMismatch(
                f"witness report {rep.digest[:12]}… is not about a demand in this record"
            )
        if wd_.statement.holder != rs.witness or rs.witness in (ds.holder, e.accused):
            raise BindingMismatch(
                f"witness report {rep.digest[:12]}…: witness {rs.witness[:16]}… must be a third"
                " node that signed its own demand"
            )
        if rs.outcome is WitnessOutcome.UNANSWERED:
            if rs.address not in os_.endpoints:
                raise BindingMismatch(
                    f"witness report {rep.digest[:12]}… asked {rs.address[:80]!r}, not an"
                    f" endpoint the origin signed into obligation {o.digest[:12]}…"
                    f" ({', '.join(os_.endpoints)[:200]})"
                )
            w_due = demand_due_ms(wd_.statement.time, os_.deadline_ms)
            if expired(os_.serve_until, wd_.statement.time) or rs.at < w_due:
                raise BindingMismatch(
                    f"witness report {rep.digest[:12]}… says unanswered at {format_ms(rs.at)},"
                    f" before its demand was due ({format_ms(w_due)}) or after serve_until"
                )
            if rs.witness not in confirmed:
                confirmed.append(rs.witness)
    # (3) any receipt of the origin answering one of these demands clears it
    for env in e.answers:
        r: Signed[Receipt] = open_statement(env, Receipt, signer=e.accused, fold=_key(core))
        answered = demands.get(r.statement.demand)
        if answered is None:
            raise BindingMismatch(
                f"answer {r.digest[:12]}… does not answer a demand in this record"
            )
        verify_receipt_binding(r, demand=answered, obligation=o, commitment=c)
        return _verdict(
            e,
            EvidenceStatus.CLEARED,
            c,
            o,
            f"{_party(e)} {e.accused[:16]}… answered ({r.statement.status.value}) with receipt"
            f" {r.digest[:12]}… at {format_ms(r.statement.issued_at)}: suspicion cleared",
            tuple(confirmed),
        )
    if e.status:
        # Busy is what the holder was told, not silence: witnesses' reports of
        # silence do not make it confirmed (docs/security.md, "No answer").
        return _verdict(
            e,
            EvidenceStatus.BUSY,
            c,
            o,
            f"{_party(e)} {e.accused[:16]}… answered {e.status} (busy, not silent) to demand"
            f" {d.digest[:12]}… until it was due {format_ms(due)}, asked {e.re_asks + 1}"
            " time(s): a suspicion, never confirmed",
        )
    if len(confirmed) >= min_witnesses:
        status = EvidenceStatus.WITNESS_CONFIRMED
        detail = f"confirmed by {len(confirmed)} witness(es)"
    else:
        status = EvidenceStatus.SUSPECTED
        detail = f"{len(confirmed)} of {min_witnesses} witness confirmation(s)"
    return _verdict(
        e,
        status,
        c,
        o,
        f"{_party(e)} {e.accused[:16]}… did not answer demand {d.digest[:12]}… due"
        f" {format_ms(due)}, re-asked {e.re_asks} time(s); {detail}",
        tuple(confirmed),
    )


def verify_evidence(
    evidence: Evidence | bytes, *, now: int, min_witnesses: int = 1
) -> EvidenceVerdict:
    """Verify a record with nothing but its content; raise if it shows no failure.

    ``now`` matters only for ``unanswered`` (the deadline must have passed).
    ``min_witnesses`` is how many third-party reports confirm a suspicion.
    """
    if min_witnesses < 1:
        raise ValueError("min_witnesses must be at least 1")
    e = evidence if isinstance(evidence, Evidence) else Evidence.from_bytes(evidence)
    match e.kind:
        case EvidenceKind.BAD_DATA:
            return _verify_bad_data(e)
        case EvidenceKind.REFUSED:
            return _verify_refused(e)
        case EvidenceKind.EQUIVOCATION:
            return _verify_equivocation(e)
        case EvidenceKind.UNANSWERED:
            return _verify_unanswered(e, now, min_witnesses)
        case EvidenceKind.SPLIT_VIEW:
            return _verify_split_view(e)
        case _:
            assert_never(e.kind)


#: The documented clock skew between nodes (:data:`contracts.rules.DEMAND_WINDOW_MS`):
#: an origin answers a demand only if its time is within this of its own clock,
#: so a receipt answering a demand is issued no earlier than this before it.
CLEARING_SKEW_MS = DEMAND_WINDOW_MS


def verify_clearing(
    evidence: Evidence | bytes,
    receipt: bytes,
    *,
    now: int,
    min_witnesses: int = 1,
    demand: bytes | None = None,
) -> EvidenceVerdict:
    """A suspicion cleared by a later receipt of the accused (design: "cleared by any
    later valid receipt").

    The receipt must verify with the accused's own key and answer a demand for
    the same obligation. What makes it *later*:

    * with ``demand`` (the demand envelope the receipt answers, single or
      batch): the demand is signed by the suspecting holder, for the same
      obligation, dated at or after the suspected demand **on that holder's own
      clock**, and the receipt answers exactly it (its digest and nonce), issued
      no earlier than :data:`CLEARING_SKEW_MS` before it. The receipt names a
      demand the holder signed after it suspected the origin, so the origin
      served after the suspicion, whatever the two clocks read: no skew enters
      the ordering.
    * without it (a receipt alone, as files written before the demand was kept
      beside the receipt): issued, on the origin's own clock, at or after the
      suspected demand's time on the holder's clock. This takes the origin's
      ``issued_at`` at its word and orders two clocks; it is kept so those files
      still verify.

    Proofs never clear (``NotEvidence`` is not raised for them: a
    ``VerificationError`` says so). Returns the CLEARED verdict.
    """
    e = evidence if isinstance(evidence, Evidence) else Evidence.from_bytes(evidence)
    if e.kind is not EvidenceKind.UNANSWERED:
        raise VerificationError(f"{e.kind.value} is a proof; a later receipt does not clear it")
    verify_evidence(e, now=now, min_witnesses=min_witnesses)  # the record itself holds up
    core = _core(e)
    r: Signed[Receipt] = open_statement(receipt, Receipt, signer=e.accused, fold=_key(core))
    rs = r.statement
    if rs.obligation != core.obligation.digest or rs.commitment != core.commitment.digest:
        raise BindingMismatch(
            f"receipt {r.digest[:12]}… answers obligation {rs.obligation[:12]}…, not the"
            f" suspected {core.obligation.digest[:12]}…"
        )
    suspected = core.demand.statement
    if demand is not None:
        how = _later_by_demand(r, demand, core, e.accused)
    elif rs.issued_at < suspected.time:
        raise BindingMismatch(
            f"receipt {r.digest[:12]}… was issued at {format_ms(rs.issued_at)}, before the"
            f" suspected demand ({format_ms(suspected.time)}); give the demand it answers"
            " to order them on the holder's clock"
        )
    else:
        how = "issued after the suspected demand by the origin's own clock"
    return _verdict(
        e,
        EvidenceStatus.CLEARED,
        core.commitment,
        core.obligation,
        f"{_party(e)} {e.accused[:16]}… answered obligation {core.obligation.digest[:12]}… later"
        f" ({rs.status.value}, receipt {r.digest[:12]}… at {format_ms(rs.issued_at)}, {how}):"
        " suspicion cleared",
    )


def _later_by_demand(r: Signed[Receipt], demand: bytes, core: _Core, accused: str) -> str:
    """``r`` answers ``demand``, which the suspecting holder signed no earlier (on its
    own clock) than the suspected demand; raise naming what does not hold."""
    suspected = core.demand.statement
    d: Signed[Demand] = open_statement(demand, Demand, fold=_key(core))
    ds = d.statement
    if ds.holder != suspected.holder:
        raise BindingMismatch(
            f"clearing demand {d.digest[:12]}… is signed by {ds.holder[:16]}…, not by the"
            f" suspecting holder {suspected.holder[:16]}…"
        )
    _check_demand(d, core.obligation, core.commitment, accused)
    if ds.time < suspected.time:
        raise BindingMismatch(
            f"clearing demand {d.digest[:12]}… is dated {format_ms(ds.time)}, before the"
            f" suspected demand ({format_ms(suspected.time)}) on the same holder's clock"
        )
    verify_receipt_binding(r, demand=d, obligation=core.obligation, commitment=core.commitment)
    if r.statement.issued_at < ds.time - CLEARING_SKEW_MS:
        raise BindingMismatch(
            f"receipt {r.digest[:12]}… was issued at {format_ms(r.statement.issued_at)},"
            f" more than {CLEARING_SKEW_MS // 1000} s before the demand it answers"
            f" ({format_ms(ds.time)}): beyond the documented clock skew"
        )
    return f"answering demand {d.digest[:12]}… the holder made after the suspected one"


def check_evidence(
    evidence: Evidence | bytes, *, now: int, min_witnesses: int = 1
) -> CheckResult[EvidenceVerdict]:
    """:func:`verify_evidence` returning a falsy result instead of raising."""
    return run_check(lambda: verify_evidence(evidence, now=now, min_witnesses=min_witnesses))


# ----------------------------------------------------------------- builders


def equivocation_evidence(
    a: Signed[Commitment], b: Signed[Commitment], *, reported_at: int
) -> Evidence:
    """Evidence from two commitments for one fold; raises NotEvidence if they agree."""
    e = Evidence(
        kind=EvidenceKind.EQUIVOCATION,
        accused=a.statement.origin,
        commitment=a.envelope,
        conflicting=b.envelope,
        reported_at=reported_at,
    )
    _verify_equivocation(e)
    return e


def split_view_evidence(
    a: SignedHead,
    b: SignedHead,
    *,
    reported_at: int,
    path: Sequence[bytes] = (),
) -> Evidence:
    """Evidence from two heads of one epoch; raises NotEvidence if they are consistent.

    Heads of the same ``seq`` need nothing else. Heads of different ``seq``
    need ``path``: the consistency path between their logs in the seeded form
    of :meth:`contracts.heads.HeadLog.consistency_path`, as the origin gave it
    for the later head.
    """
    e = Evidence(
        kind=EvidenceKind.SPLIT_VIEW,
        accused=a.statement.origin,
        commitment=a.note,
        conflicting=b.note,
        reported_at=reported_at,
        proof=None if a.statement.seq == b.statement.seq else {"path": [p.hex() for p in path]},
    )
    _verify_split_view(e)
    return e


def judge_head_extension(
    earlier: SignedHead,
    later: SignedHead,
    path: Sequence[bytes],
    *,
    reported_at: int,
) -> Evidence | None:
    """Does ``later`` extend ``earlier`` (two verified heads of one origin and epoch)?

    ``None`` when it provably does (same tree for the same ``seq``, or the
    consistency path, in the seeded form of
    :meth:`contracts.heads.HeadLog.consistency_path`, reproduces both log
    roots); split-view evidence when the path reproduces ``later``'s signed
    log root but not ``earlier``'s (or the same ``seq`` has another tree).
    A path that does not reproduce ``later``'s log root proves nothing either
    way: :class:`RootMismatch` (ask again; it is not evidence).
    """
    a, b = earlier.statement, later.statement
    if (a.origin, a.epoch) != (b.origin, b.epoch) or a.seq > b.seq:
        raise ValueError("judge_head_extension takes two heads of one log, earlier first")
    if a.seq == b.seq:
        if a.tree == b.tree:
            return None
        return split_view_evidence(earlier, later, reported_at=reported_at)
    fr, fh = consistency_roots(a.seq + 1, b.seq + 1, path)
    if fh.hex() != b.log_root:
        raise RootMismatch(
            f"consistency path from head {earlier.digest[:12]}… does not lead to the log root"
            f" of head {later.digest[:12]}…"
        )
    if fr.hex() == a.log_root:
        return None
    return split_view_evidence(earlier, later, reported_at=reported_at, path=path)


def cite_head(evidence: Evidence, fold: VerifiedFold) -> Evidence:
    """A record built from ``fold``'s stand-ins, re-cited as head + fold proof.

    The stand-in commitment is not a signed envelope; the head is. The result
    verifies with :func:`verify_evidence` like any record.
    """
    if isinstance(fold, CustodyFold) and fold.custody is not None:
        # against a custodian: its statement is the obligation, the head the origin's
        if evidence.obligation is None or evidence.obligation.digest != fold.custody.digest:
            raise ValueError("evidence was not built from this fold's custody statement")
        return dataclasses.replace(
            evidence,
            commitment=fold.head.note,
            obligation=None,
            proof={"fold": fold.proof.to_text()},
            custody=fold.custody.note,
        )
    if evidence.obligation is None or evidence.obligation.digest != fold.head.digest:
        raise ValueError("evidence was not built from this fold's head")
    return dataclasses.replace(
        evidence, commitment=fold.head.note, obligation=None, proof={"fold": fold.proof.to_text()}
    )


class EquivocationDetector:
    """Remembers the first commitment seen per fold key; flags conflicting ones."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str, int], Signed[Commitment]] = {}

    def observe(self, commitment: Signed[Commitment], *, now: int) -> Evidence | None:
        key = commitment.statement.fold_key
        first = self._seen.setdefault(key, commitment)
        if first.digest == commitment.digest:
            return None
        try:
            return equivocation_evidence(first, commitment, reported_at=now)
        except NotEvidence:
            return None


def unanswered_evidence(
    demand: Signed[Demand],
    *,
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    re_asks: int,
    reported_at: int,
    witness_demands: Sequence[Signed[Demand]] = (),
    witness_reports: Sequence[Signed[WitnessReport]] = (),
    status: str = "",
) -> Evidence:
    """A suspicion record; verify it with :func:`verify_evidence` at ``now``.

    ``status``: :data:`BUSY_STATUS` if the origin answered that, not silence."""
    if status not in ("", BUSY_STATUS):
        raise ValueError(f"unanswered evidence: status {status!r} is not {BUSY_STATUS!r}")
    return Evidence(
        kind=EvidenceKind.UNANSWERED,
        accused=obligation.statement.origin,
        commitment=commitment.envelope,
        obligation=obligation.envelope,
        demand=demand.envelope,
        re_asks=re_asks,
        witness_demands=tuple(w.envelope for w in witness_demands),
        witness_reports=tuple(w.envelope for w in witness_reports),
        reported_at=reported_at,
        status=status,
    )


class AnswerKind(StrEnum):
    SERVED = "served"
    LEGITIMATE = "legitimate"
    EVIDENCE = "evidence"
    UNATTRIBUTABLE = "unattributable"


@dataclass(frozen=True, slots=True)
class Answer:
    """How a holder should read an origin's answer to its demand.

    SERVED: ``served`` holds the verified hops. LEGITIMATE: a non-answer the
    origin was entitled to (expired, pending, not the bound holder).
    EVIDENCE: ``evidence`` is a proof against the origin. UNATTRIBUTABLE: the
    answer cannot be pinned on the origin (bad signature, another demand's
    receipt, bytes altered after signing): re-ask; it is not evidence.
    """

    kind: AnswerKind
    reason: str
    served: ServedFold | None = None
    evidence: Evidence | None = None


def judge_answer(
    receipt: bytes | Envelope | Signed[Receipt],
    hops: Sequence[bytes],
    *,
    demand: Signed[Demand],
    obligation: Signed[Obligation],
    commitment: Signed[Commitment],
    reported_at: int,
) -> Answer:
    """Classify an origin's receipt (+ served bytes) for a holder's demand."""
    origin = commitment.statement.origin
    # (1) attributable at all: signed by the origin, answering this demand
    try:
        r = (
            receipt
            if isinstance(receipt, Signed)
            else open_statement(
                receipt, Receipt, signer=origin, fold=(obligation.digest, commitment.digest)
            )
        )
        verify_receipt_binding(r, demand=demand, obligation=obligation, commitment=commitment)
    except ContractError as exc:
        return Answer(AnswerKind.UNATTRIBUTABLE, str(exc))
    base = Evidence(
        kind=EvidenceKind.BAD_DATA,
        accused=origin,
        commitment=commitment.envelope,
        obligation=obligation.envelope,
        demand=demand.envelope,
        receipt=r.envelope,
        reported_at=reported_at,
    )
    # (2) a refusal: proof, unless legitimate. The statements are open and the
    # receipt bound already: the verdict takes the evidence checks that remain.
    if r.statement.status is not ReceiptStatus.SERVED:
        refused = dataclasses.replace(base, kind=EvidenceKind.REFUSED)
        try:
            verdict = _refused(refused, _bound_core(commitment, obligation, demand, origin), r)
        except NotEvidence as exc:
            return Answer(AnswerKind.LEGITIMATE, str(exc))
        except ContractError as exc:
            return Answer(AnswerKind.UNATTRIBUTABLE, str(exc))
        return Answer(AnswerKind.EVIDENCE, verdict.reason, evidence=refused)
    # (3) signed leaves that miss the committed root: bad_data
    try:
        verify_signed_leaves(r, demand.statement, commitment.statement)
    except VerificationError as miss:
        try:
            verdict = _bad_data(base, _bound_core(commitment, obligation, demand, origin), r, miss)
        except ContractError as exc:
            return Answer(AnswerKind.UNATTRIBUTABLE, str(exc))
        return Answer(AnswerKind.EVIDENCE, verdict.reason, evidence=base)
    # (4) the bytes must be the bytes signed; if not, nobody can prove who changed them
    # (steps 1-3 above are verify_served's own; only its byte check is left)
    try:
        served = verify_served_bytes(r, hops)
    except ContractError as exc:
        return Answer(AnswerKind.UNATTRIBUTABLE, str(exc))
    return Answer(AnswerKind.SERVED, f"served {len(served.hops)} hop(s)", served=served)
