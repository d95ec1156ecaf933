"""Custody statements: a custodian's signed promise to serve an origin's folds (revision 3).

A **custodian** is a node that obtained an origin's folded hops, verified
them against the origin's signed head, made them durable, and only then
signed a **custody statement**: "I hold the hops of the folds of this head,
and serve them to any bearer until ``serve_until``, within ``deadline_ms``,
at these endpoints". It is the precedent of C2SP tlog-mirror (a mirror's
cosignature on a checkpoint adds "I durably logged the contents of this
checkpoint and made them accessible") with the serving terms of an
obligation added: a cosignature-like note with an additional statement.

**One statement per head** (per compaction): it names the head by its note
digest — which commits to the head's origin line, log size and root, and the
root of its fold records — and the folds held, by their records' leaf hashes,
or none when it holds every fold of the head. A value carries at most k
statements per origin, whatever the number of folds.

Encoding: a C2SP signed note (c2sp.org/signed-note, :mod:`contracts.note`),
signed with the custodian's Ed25519 key (type 0x01) under the key name
``provnet-custodian/<custodian node id>``; the key id is C2SP's
``SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]``. Text, line by line::

    provnet-custody/v2                          the statement's type and version
    custodian <node id>                         who promises (its key is its id)
    operator <label>                            its operator: one failure domain
    head b64(<head digest>)                     the origin head the folds are proven under
    fold b64(<record leaf hash>)                one line per fold held (0..64);
                                                none: every fold of the head
    serve <serve_until> <deadline_ms>           the custodian's own serving terms
    endpoint <endpoint>                         where it serves, in order (1..16)
    issued <issued_at>                          ms since the Unix epoch

The lines are declared once, in :data:`CUSTODY_LINES`; :func:`custody_text`
and :func:`parse_custody_text` both walk that table, with the number and
hash codecs notes share (:mod:`contracts.note`). Decoding is strict: lines
in table order, decimals without leading zeros, canonical base64, no unknown
line, so a statement has one text and
``custody_text(parse_custody_text(t)) == t`` for every accepted ``t``.

What is signed, carried, stored and cited is the note as the custodian made
it (:attr:`SignedCustody.note`), never rebuilt; its **digest** is the
SHA-256 of the note text (the signed bytes). :func:`open_custody` verifies
the signature with nothing but the note (the custodian line names the key);
:func:`bind_custody` checks that a statement is about a given, verified head
and fold — only then does it stand for anything (:class:`CustodyFold`).

:class:`CustodyFold` is a :class:`~contracts.heads.VerifiedFold` whose
stand-ins name the **custodian** as the promiser: the commitment stand-in's
origin is the custodian (digest: the same fold record leaf hash), the
obligation stand-in is the custody statement read as the fold's obligation
(digest: the statement digest; terms: the custodian's). Demands, receipts and
evidence then keep their meaning with the custodian in the origin's place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from contracts._fields import MAX_TIME_MS, is_digest
from contracts.envelope import Envelope
from contracts.errors import BindingMismatch, EncodingError, Expired
from contracts.head_note import open_head
from contracts.heads import FOLD_RECORD_TYPE, FoldProof, VerifiedFold, verify_fold
from contracts.identity import Identity, PublicKey
from contracts.note import (
    Note,
    NoteKey,
    VerifierKey,
    decode_decimal,
    decode_hash,
    encode_hash,
    encode_note,
    open_note,
    parse_note,
    text_digest,
)
from contracts.rules import expired
from contracts.signed import Signed
from contracts.statements import Commitment, Obligation

__all__ = [
    "CUSTODY_HEADER",
    "CUSTODY_KEY_PREFIX",
    "CUSTODY_LINES",
    "CUSTODY_TEXT_TYPE",
    "MAX_CUSTODY_BYTES",
    "MAX_CUSTODY_FOLDS",
    "MAX_CUSTODY_PER_ORIGIN",
    "CustodyFold",
    "CustodyStatement",
    "SignedCustody",
    "bind_custody",
    "custodian_key",
    "custody_bundle",
    "custody_digest",
    "custody_text",
    "is_custody_note",
    "open_custody",
    "open_fold",
    "parse_custody",
    "parse_custody_text",
    "sign_custody",
    "split_custody_bundle",
]

#: First line of every custody statement.
CUSTODY_HEADER = "provnet-custody/v2"
#: Key name prefix: ``provnet-custodian/<node id>``.
CUSTODY_KEY_PREFIX = "provnet-custodian"
#: Payload type of the unsigned stand-in envelope of a custody statement read as a
#: fold's obligation (its payload the statement's text: its digest is the statement's).
CUSTODY_TEXT_TYPE = "application/vnd.provnet.custody-text"
#: Largest custody note accepted.
MAX_CUSTODY_BYTES = 16 * 1024
#: Folds one statement may name (and one take may ask for).
MAX_CUSTODY_FOLDS = 64
#: Custody statements a value may carry per origin (k is at most this).
MAX_CUSTODY_PER_ORIGIN = 8
_MAX_ENDPOINTS = 16
_MAX_ENDPOINT = 512
_MAX_OPERATOR = 64
_MAX_SIGNATURES = 4


# ------------------------------------------------------------------ the statement


def _text_problem(what: str, text: object, limit: int) -> str | None:
    if not isinstance(text, str) or not text or len(text) > limit:
        return f"custody {what} must be 1 to {limit} characters, got {text!r:.80}"
    if any(c.isspace() or ord(c) < 0x20 or c == "\u2014" for c in text):
        return f"custody {what} {text!r:.80} holds white space or a control character"
    return None


@dataclass(frozen=True, slots=True)
class CustodyStatement:
    """What a custodian promises (see module docstring); validated on construction.

    ``folds``: the leaf hashes of the fold records held, in the order the take
    named them; empty when the custodian holds every fold of the head.
    """

    custodian: str
    operator: str
    head: str
    folds: tuple[str, ...]
    serve_until: int
    deadline_ms: int
    endpoints: tuple[str, ...]
    issued_at: int

    def __post_init__(self) -> None:
        if not is_digest(self.custodian):
            raise ValueError(f"custodian must be a node id, got {self.custodian!r:.80}")
        problem = _text_problem("operator", self.operator, _MAX_OPERATOR)
        if problem is not None:
            raise ValueError(problem)
        if not is_digest(self.head):
            raise ValueError("custody: head must be a digest (64 lower-case hex)")
        if len(self.folds) > MAX_CUSTODY_FOLDS:
            raise ValueError(f"custody: at most {MAX_CUSTODY_FOLDS} folds, got {len(self.folds)}")
        if not all(is_digest(f) for f in self.folds):
            raise ValueError("custody: a fold leaf hash must be 64 lower-case hex")
        if len(set(self.folds)) != len(self.folds):
            raise ValueError("custody: a fold is named twice")
        if not 1 <= len(self.endpoints) <= _MAX_ENDPOINTS:
            raise ValueError(f"custody: 1 to {_MAX_ENDPOINTS} endpoints, got {len(self.endpoints)}")
        for endpoint in self.endpoints:
            problem = _text_problem("endpoint", endpoint, _MAX_ENDPOINT)
            if problem is not None:
                raise ValueError(problem)
        for name in ("serve_until", "issued_at"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= MAX_TIME_MS:
                raise ValueError(f"custody: {name} {value!r} outside 0..{MAX_TIME_MS}")
        if type(self.deadline_ms) is not int or not 1 <= self.deadline_ms <= MAX_TIME_MS:
            raise ValueError(f"custody: deadline_ms {self.deadline_ms!r} outside 1..{MAX_TIME_MS}")

    def covers(self, leaf_hash: str) -> bool:
        """Whether the statement promises the fold whose record has ``leaf_hash``
        (under its head: every fold when it names none)."""
        return not self.folds or leaf_hash in self.folds


# ---------------------------------------------------------------- the table


def _plain(text: str, where: str, what: str, limit: int) -> str:
    problem = _text_problem(what, text, limit)
    if problem is not None:
        raise EncodingError(f"{where}: {problem}")
    return text


@dataclass(frozen=True, slots=True)
class CustodyLine:
    """One line of a custody statement: ``<keyword>`` then its values, space-separated.

    It occurs ``lo``..``hi`` times (one line per item; exactly once by default).
    """

    keyword: str
    fields: tuple[str, ...]
    lo: int = 1
    hi: int = 1


#: The one declaration of a custody statement's lines after its header, in order.
CUSTODY_LINES: tuple[CustodyLine, ...] = (
    CustodyLine("custodian", ("custodian",)),
    CustodyLine("operator", ("operator",)),
    CustodyLine("head", ("head",)),
    CustodyLine("fold", ("leaf_hash",), 0, MAX_CUSTODY_FOLDS),
    CustodyLine("serve", ("serve_until", "deadline_ms")),
    CustodyLine("endpoint", ("endpoint",), 1, _MAX_ENDPOINTS),
    CustodyLine("issued", ("issued_at",)),
)


def _encode_line(line: CustodyLine, s: CustodyStatement) -> list[str]:
    match line.keyword:
        case "custodian":
            values = [[s.custodian]]
        case "operator":
            values = [[s.operator]]
        case "head":
            values = [[encode_hash(s.head)]]
        case "fold":
            values = [[encode_hash(f)] for f in s.folds]
        case "serve":
            values = [[str(s.serve_until), str(s.deadline_ms)]]
        case "endpoint":
            values = [[e] for e in s.endpoints]
        case "issued":
            values = [[str(s.issued_at)]]
        case _:
            raise AssertionError(f"custody line {line.keyword!r} has no encoder")
    return [" ".join((line.keyword, *v)) for v in values]


def _decode_values(keyword: str, parts: list[str], where: str) -> tuple[object, ...]:
    match keyword:
        case "custodian":
            if not is_digest(parts[0]):
                raise EncodingError(f"{where}: custodian {parts[0]!r:.80} is not a node id")
            return (parts[0],)
        case "operator":
            return (_plain(parts[0], where, "operator", _MAX_OPERATOR),)
        case "head":
            return (decode_hash(parts[0], f"{where} head digest"),)
        case "fold":
            return (decode_hash(parts[0], f"{where} leaf hash"),)
        case "serve":
            return (
                decode_decimal(parts[0], f"{where} serve_until", 0, MAX_TIME_MS),
                decode_decimal(parts[1], f"{where} deadline_ms", 1, MAX_TIME_MS),
            )
        case "endpoint":
            return (_plain(parts[0], where, "endpoint", _MAX_ENDPOINT),)
        case "issued":
            return (decode_decimal(parts[0], f"{where} issued_at", 0, MAX_TIME_MS),)
        case _:
            raise AssertionError(f"custody line {keyword!r} has no decoder")


def custody_text(statement: CustodyStatement) -> str:
    """The note text of ``statement``: the header, then :data:`CUSTODY_LINES` in order."""
    lines = [CUSTODY_HEADER]
    for line in CUSTODY_LINES:
        lines.extend(_encode_line(line, statement))
    return "\n".join(lines) + "\n"


def parse_custody_text(text: str) -> CustodyStatement:
    """The statement a note text states; :class:`EncodingError` names the line that is wrong."""
    if not text.endswith("\n"):
        raise EncodingError("custody text does not end with a newline")
    rows = text[:-1].split("\n")
    if rows[0] != CUSTODY_HEADER:
        raise EncodingError(f"custody line 1 {rows[0]!r:.80} is not {CUSTODY_HEADER!r}")
    at = 1
    values: dict[str, list[tuple[object, ...]]] = {}
    for line in CUSTODY_LINES:
        prefix = line.keyword + " "
        items: list[tuple[object, ...]] = []
        while at < len(rows) and rows[at].startswith(prefix) and len(items) < line.hi:
            where = f"custody line {at + 1} ({line.keyword})"
            parts = rows[at][len(prefix) :].split(" ")
            if len(parts) != len(line.fields):
                raise EncodingError(
                    f"{where}: {len(parts)} values,"
                    f" not {len(line.fields)} ({', '.join(line.fields)})"
                )
            items.append(_decode_values(line.keyword, parts, where))
            at += 1
        if len(items) < line.lo:
            raise EncodingError(f"custody line {at + 1}: expected the {line.keyword!r} line")
        values[line.keyword] = items
    if at != len(rows):
        raise EncodingError(
            f"custody line {at + 1} {rows[at]!r:.80} is unknown, repeated or out of order"
        )
    serve_until, deadline_ms = values["serve"][0]
    try:
        return CustodyStatement(
            custodian=values["custodian"][0][0],  # type: ignore[arg-type]
            operator=values["operator"][0][0],  # type: ignore[arg-type]
            head=values["head"][0][0],  # type: ignore[arg-type]
            folds=tuple(v[0] for v in values["fold"]),  # type: ignore[misc]
            serve_until=serve_until,  # type: ignore[arg-type]
            deadline_ms=deadline_ms,  # type: ignore[arg-type]
            endpoints=tuple(v[0] for v in values["endpoint"]),  # type: ignore[misc]
            issued_at=values["issued"][0][0],  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise EncodingError(f"custody statement: {exc}") from exc


# ---------------------------------------------------------------- signed statements


def custodian_key(node_id: str) -> VerifierKey:
    """The verifier key of a custodian's statements: its node id under its key name."""
    return VerifierKey.ed25519(f"{CUSTODY_KEY_PREFIX}/{node_id}", PublicKey.from_node_id(node_id))


@dataclass(frozen=True, slots=True)
class SignedCustody:
    """A custody statement and the note it travels as, byte for byte."""

    note: bytes
    statement: CustodyStatement
    digest: str
    #: True when :func:`open_custody` verified the signature; False from :func:`parse_custody`.
    verified: bool = False

    @property
    def signer(self) -> str:
        return self.statement.custodian

    @property
    def text(self) -> bytes:
        """The note text: the signed bytes."""
        return self.note[: self.note.rfind(b"\n\n") + 1]

    def to_bytes(self) -> bytes:
        return self.note


def custody_digest(data: bytes) -> str:
    """The digest of a custody note (SHA-256 of its text), read without verifying it."""
    return text_digest(data, "custody note")


_BUNDLE_MARK = b"\n" + CUSTODY_HEADER.encode() + b"\n"


def custody_bundle(head_note: bytes, custody_note: bytes) -> bytes:
    """A head note followed by a custody statement about it: how a custodian's fold
    travels where one obligation's bytes go (a witness challenge)."""
    if not is_custody_note(custody_note) or not head_note.endswith(b"\n"):
        raise ValueError("a custody bundle is a head note then a custody note")
    return head_note + custody_note


def split_custody_bundle(data: bytes) -> tuple[bytes, bytes]:
    """(head note, custody note) of a bundle; (data, b"") when ``data`` holds no
    custody statement. Neither part is verified here. A head note's lines never
    read ``provnet-custody/v1`` (its text lines have keywords of their own, its
    signature lines start with an em dash), so the first such line splits."""
    raw = bytes(data)
    at = raw.find(_BUNDLE_MARK)
    if at < 0:
        return raw, b""
    return raw[: at + 1], raw[at + 1 :]


def open_fold(obligation: bytes, proof: FoldProof, *, now: int | None = None) -> VerifiedFold:
    """The fold a (head note, fold proof) pair stands for — or, when ``obligation`` is a
    custody bundle (:func:`custody_bundle`), the custodian's :class:`CustodyFold`.

    (1) the head verifies with its origin's key — with ``now``: and is unexpired
    (:class:`~contracts.errors.Expired`); (2) the proof is under it; (3) a bundle's
    statement verifies with its custodian's key and binds to exactly that head and
    fold, unexpired at ``now`` (:func:`bind_custody`).
    """
    head_note, custody = split_custody_bundle(obligation)
    # (1) the origin's head, still promised
    head = open_head(head_note)
    if now is not None and expired(head.statement.serve_until, now):
        raise Expired(
            f"head {head.digest[:12]}… by {head.statement.origin[:16]}… expired at"
            f" {head.statement.serve_until} ms (now {now} ms)"
        )
    # (2) the fold under it
    fold = verify_fold(proof, head)
    if not custody:
        return fold
    # (3) the custodian's promise about that fold
    return bind_custody(open_custody(custody), fold, now=now)


def is_custody_note(data: bytes) -> bool:
    """Whether ``data`` starts with a custody statement's header line (which parser to try)."""
    return bytes(data[: len(CUSTODY_HEADER) + 1]) == CUSTODY_HEADER.encode() + b"\n"


def sign_custody(identity: Identity, statement: CustodyStatement) -> SignedCustody:
    """Sign ``statement`` as its custodian (``identity`` must be it).

    The caller signs only after the hops are durable (seed 000): signing is the
    last step of taking custody, never the first.
    """
    if statement.custodian != identity.node_id:
        raise ValueError(
            f"statement names custodian {statement.custodian[:16]}…,"
            f" not this identity {identity.node_id[:16]}…"
        )
    text = custody_text(statement)
    key = NoteKey(f"{CUSTODY_KEY_PREFIX}/{identity.node_id}", identity)
    note = Note(text=text, signatures=(key.sign(text),))
    return SignedCustody(
        encode_note(note), statement, hashlib.sha256(text.encode()).hexdigest(), True
    )


def _read(data: bytes) -> tuple[Note, CustodyStatement]:
    raw = bytes(data)
    # (1) bounded before anything is decoded (parse_note checks the size first)
    note = parse_note(raw, max_bytes=MAX_CUSTODY_BYTES, max_signatures=_MAX_SIGNATURES)
    # (2) the text is a statement's, line for line
    return note, parse_custody_text(note.text)


def open_custody(data: bytes, *, custodian: str | None = None) -> SignedCustody:
    """Verify a custody note and read its statement.

    (1) bounded (:data:`MAX_CUSTODY_BYTES`); (2) the text parses strictly;
    (3) when ``custodian`` (a node id) is given, the statement names it
    (:class:`BindingMismatch`); (4) the signature line by the custodian's key
    verifies over the text (:class:`~contracts.errors.BadSignature`). What
    it promises is about a head only once :func:`bind_custody` says so.
    """
    note, statement = _read(data)
    # (3) whose statement it says it is
    if custodian is not None and statement.custodian != custodian:
        raise BindingMismatch(
            f"custody statement is by {statement.custodian[:16]}…, not {custodian[:16]}…"
        )
    # (4) signed by that node's key, under its custodian key name
    open_note(note, [custodian_key(statement.custodian)])
    return SignedCustody(bytes(data), statement, hashlib.sha256(note.text_bytes).hexdigest(), True)


def parse_custody(data: bytes) -> SignedCustody:
    """Read a custody note **without checking its signature** (one this node signed
    and stored): nothing read here may be relied on before :func:`open_custody`."""
    note, statement = _read(data)
    return SignedCustody(bytes(data), statement, hashlib.sha256(note.text_bytes).hexdigest())


def bind_custody(
    custody: SignedCustody, fold: VerifiedFold, *, now: int | None = None
) -> CustodyFold:
    """The custodian's stand-ins for ``fold`` (proven under a verified head), if
    ``custody`` (verified) is about exactly that head and fold.

    (1) the statement was verified; (2) it names the head's digest (which commits
    to the head's origin, epoch, size, log root and fold records); (3) it covers
    the fold's record leaf hash (it names it, or names none: every fold of the
    head); (4) with ``now``: not past ``serve_until``
    (:class:`~contracts.errors.Expired`). :class:`BindingMismatch` names what differs.
    """
    # (1) only a verified statement binds
    if not custody.verified:
        raise ValueError("bind_custody needs a statement verified with open_custody")
    s = custody.statement
    # an origin's promise about its own head adds no second party
    if s.custodian == fold.head.statement.origin:
        raise BindingMismatch(
            f"custody statement {custody.digest[:12]}… is by the head's own origin"
            f" {s.custodian[:16]}…: an origin is not its own custodian"
        )
    # (2) the same head
    if s.head != fold.head.digest:
        raise BindingMismatch(
            f"custody statement {custody.digest[:12]}… by {s.custodian[:16]}… names"
            f" head {s.head[:16]}…, but the fold is under head {fold.head.digest[:16]}…"
        )
    # (3) the fold
    if not s.covers(fold.leaf_hash.hex()):
        raise BindingMismatch(
            f"custody statement {custody.digest[:12]}… does not name fold"
            f" {fold.leaf_hash.hex()[:12]}… of head {fold.head.digest[:12]}…"
        )
    # (4) still promised
    if now is not None and expired(s.serve_until, now):
        raise Expired(
            f"custody statement {custody.digest[:12]}… by {s.custodian[:16]}… expired at"
            f" {s.serve_until} ms (now {now} ms)"
        )
    return CustodyFold(
        head=fold.head,
        proof=fold.proof,
        record=fold.record,
        leaf_hash=fold.leaf_hash,
        custody=custody,
    )


@dataclass(frozen=True, slots=True)
class CustodyFold(VerifiedFold):
    """A fold proven under an origin's head, promised by a custodian (:func:`bind_custody`).

    Its stand-ins name the custodian: demands to the custodian name the
    custody statement's digest as their obligation and the fold record's
    leaf hash as their commitment; receipts are the custodian's; evidence
    accuses the custodian (:func:`contracts.evidence.cite_head` adds the
    statement to the record).
    """

    custody: SignedCustody = field(compare=False)

    @property
    def custodian(self) -> str:
        return self.custody.statement.custodian

    def _make_commitment(self) -> Signed[Commitment]:
        s, r = self.custody.statement, self.record
        statement = Commitment(
            origin=s.custodian,
            epoch=self.head.statement.epoch,
            value_ref=r.value_ref,
            fold_seq=r.fold_seq,
            leaf_count=r.leaf_count,
            root=r.root,
            issued_at=s.issued_at,
        )
        return Signed(Envelope(b"\x00" + self.proof.target, FOLD_RECORD_TYPE, ()), statement)

    def _make_obligation(self) -> Signed[Obligation]:
        s = self.custody.statement
        statement = Obligation(
            origin=s.custodian,
            commitment=self.leaf_hash.hex(),
            serve_until=s.serve_until,
            deadline_ms=s.deadline_ms,
            endpoints=s.endpoints,
            issued_at=s.issued_at,
        )
        return Signed(Envelope(self.custody.text, CUSTODY_TEXT_TYPE, ()), statement)
