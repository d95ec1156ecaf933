"""A signed tree head as a C2SP tlog-checkpoint signed note (design revision 3).

A head (:class:`~contracts.statements.Head`: one compaction of an origin's
epoch) is a checkpoint (:mod:`contracts.checkpoint`) whose **log is the
epoch's log of heads** (:mod:`contracts.heads`): its tree size is the number
of compactions so far (``seq + 1``) and its root hash the log root, so two
heads of one origin and epoch are two checkpoints of one log, and a witness
cosigning them (tlog-cosignature/v1) vouches for exactly what a split view
would contradict. The compaction's own tree and the serving terms are
extension lines. Text, line by line::

    provnet/<origin node id>/<epoch>        origin line (the log's name)
    <seq + 1>                               tree size: compactions in the log
    base64(<log root>)                      RFC 6962 root over the batch records
    folds <size> base64(<root>)             the compaction: fold records, their root
    issued <issued_at>                      ms since the Unix epoch
    serve <serve_until> <deadline_ms>       the serving terms, signed once per head
    endpoint <endpoint>                     one line per endpoint, in order (0..16)
    pending                                 only for a head signed before its hops
                                            were durable (S6)

followed by the blank line and the signature line
``— provnet/<node id>/<epoch> base64(key id ‖ Ed25519 signature)``: the key
name is the origin line (tlog-checkpoint: it SHOULD be), the key the origin's
Ed25519 key — its node id — and the key id C2SP's
``SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]``. The origin line names the
node id in full, so a head is verified with nothing but its own bytes.

The extension lines are declared once, in :data:`HEAD_LINES` (keyword, the
head fields it holds, their spelling, how often it occurs);
:func:`head_checkpoint` and :func:`head_from_checkpoint` both walk that
table. Decoding is strict — lines in table order, decimals without leading
zeros, canonical base64, no unknown line — so a head has one text, and
``head_checkpoint(head_from_checkpoint(c)) == c`` for every accepted ``c``.

What is signed, carried, stored and cited is the note as the origin made it
(:attr:`SignedHead.note`), never rebuilt. :func:`open_head` verifies it
with :func:`contracts.checkpoint.verify_checkpoint`; a head's **digest** is
the SHA-256 of its note text (the signed bytes), so the cosignatures a
witness appends leave it the same head.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from contracts._fields import MAX_COUNT, MAX_TIME_MS, is_digest
from contracts.checkpoint import (
    Checkpoint,
    VerifiedCheckpoint,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)
from contracts.errors import BindingMismatch, EncodingError
from contracts.identity import Identity, PublicKey
from contracts.note import (
    NoteKey,
    VerifierKey,
    decode_decimal,
    decode_hash,
    encode_hash,
    encode_note,
    parse_note,
    text_digest,
)
from contracts.statements import Head

__all__ = [
    "HEAD_LINES",
    "HEAD_ORIGIN_PREFIX",
    "MAX_HEAD_BYTES",
    "MAX_HEAD_SIGNATURES",
    "HeadLine",
    "Occurs",
    "SignedHead",
    "claimed_origin",
    "head_checkpoint",
    "head_digest",
    "head_from_checkpoint",
    "head_log_key",
    "head_origin",
    "is_head_note",
    "open_head",
    "parse_head",
    "parse_head_origin",
    "sign_head",
]

#: First element of every head's origin line: ``provnet/<node id>/<epoch>``.
HEAD_ORIGIN_PREFIX = "provnet"
#: Largest head note accepted: sixteen 512-character endpoints and witness lines fit.
MAX_HEAD_BYTES = 16 * 1024
#: Signature lines a head may carry: the origin's and witnesses' cosignatures.
MAX_HEAD_SIGNATURES = 32
_MAX_ENDPOINTS = 16
_MAX_EPOCH = 128
_MAX_ENDPOINT = 512
# No white space, no '+' (a key name holds neither), no '/' (the origin's separator).
_EPOCH_FORBIDDEN = frozenset("/+")


# ------------------------------------------------------------------ origin line


def _epoch_problem(epoch: object) -> str | None:
    if not isinstance(epoch, str) or not epoch:
        return f"head epoch must be non-empty text, got {epoch!r:.80}"
    if len(epoch) > _MAX_EPOCH:
        return f"head epoch is {len(epoch)} characters, more than {_MAX_EPOCH}"
    if any(c.isspace() or c in _EPOCH_FORBIDDEN or ord(c) < 0x20 for c in epoch):
        return f"head epoch {epoch!r:.80} holds white space, '/', '+' or a control character"
    return None


def head_origin(node_id: str, epoch: str) -> str:
    """The origin line (and key name) of the heads of ``node_id``'s epoch ``epoch``."""
    if not is_digest(node_id):
        raise ValueError(f"head origin must be a node id (64 lower-case hex), got {node_id!r:.80}")
    problem = _epoch_problem(epoch)
    if problem is not None:
        raise ValueError(problem)
    return f"{HEAD_ORIGIN_PREFIX}/{node_id}/{epoch}"


def parse_head_origin(origin: str) -> tuple[str, str]:
    """(node id, epoch) of a head's origin line; :class:`EncodingError` if not one."""
    parts = origin.split("/")
    if len(parts) != 3 or parts[0] != HEAD_ORIGIN_PREFIX:
        raise EncodingError(
            f"head origin {origin!r:.100} is not '{HEAD_ORIGIN_PREFIX}/<node id>/<epoch>'"
        )
    _, node_id, epoch = parts
    if not is_digest(node_id):
        raise EncodingError(f"head origin {origin!r:.100}: {node_id!r:.70} is not a node id")
    problem = _epoch_problem(epoch)
    if problem is not None:
        raise EncodingError(f"head origin: {problem}")
    return node_id, epoch


def is_head_note(data: bytes) -> bool:
    """Whether ``data`` is shaped as a head note (it starts with a head's origin line
    prefix) rather than a DSSE envelope (JSON): which parser to try, nothing more."""
    return bytes(data[: len(HEAD_ORIGIN_PREFIX) + 1]) == HEAD_ORIGIN_PREFIX.encode() + b"/"


def head_log_key(node_id: str, epoch: str) -> VerifierKey:
    """The verifier key of an origin's epoch log: its node id under the origin line."""
    return VerifierKey.ed25519(head_origin(node_id, epoch), PublicKey.from_node_id(node_id))


# ---------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class _Codec:
    """How one value is spelled in an extension line."""

    encode: Callable[[Any], str]
    decode: Callable[[str, str], Any]


def _decimal(hi: int, lo: int = 0) -> _Codec:
    def decode(text: str, what: str) -> int:
        return decode_decimal(text, what, lo, hi)

    return _Codec(str, decode)


def _decode_endpoint(text: str, what: str) -> str:
    if not text or len(text) > _MAX_ENDPOINT:
        raise EncodingError(f"{what} must be 1 to {_MAX_ENDPOINT} characters")
    return text


_TIME = _decimal(MAX_TIME_MS)
_COUNT = _decimal(MAX_COUNT, lo=1)
_DURATION = _decimal(MAX_TIME_MS, lo=1)
_HASH = _Codec(encode_hash, decode_hash)
_ENDPOINT = _Codec(str, _decode_endpoint)


class Occurs(Enum):
    """How often an extension line occurs: once, once per item, or as a flag."""

    ONE = "one"
    MANY = "many"  # one line per item of a tuple field, in order (maybe none)
    FLAG = "flag"  # the bare keyword, present iff the bool field is true


@dataclass(frozen=True, slots=True)
class HeadLine:
    """One extension line of a head: ``<keyword>`` then its values, space-separated."""

    keyword: str
    fields: tuple[str, ...]
    codecs: tuple[_Codec, ...]
    occurs: Occurs = Occurs.ONE
    limit: int = 1


#: The one declaration of a head's extension lines, in the order they appear.
HEAD_LINES: tuple[HeadLine, ...] = (
    HeadLine("folds", ("size", "root"), (_COUNT, _HASH)),
    HeadLine("issued", ("issued_at",), (_TIME,)),
    HeadLine("serve", ("serve_until", "deadline_ms"), (_TIME, _DURATION)),
    HeadLine("endpoint", ("endpoints",), (_ENDPOINT,), Occurs.MANY, _MAX_ENDPOINTS),
    HeadLine("pending", ("pending",), (), Occurs.FLAG),
)


def _endpoint_problem(endpoint: str) -> str | None:
    if not endpoint or len(endpoint) > _MAX_ENDPOINT:
        return f"head endpoint must be 1 to {_MAX_ENDPOINT} characters, got {endpoint!r:.80}"
    if any(c.isspace() or ord(c) < 0x20 for c in endpoint):
        return f"head endpoint {endpoint!r:.80} holds white space or a control character"
    return None


def head_checkpoint(head: Head) -> Checkpoint:
    """The checkpoint a head is: its log (size ``seq + 1``, log root) and extension lines."""
    if len(head.endpoints) > _MAX_ENDPOINTS:
        raise ValueError(f"a head names at most {_MAX_ENDPOINTS} endpoints")
    for endpoint in head.endpoints:
        problem = _endpoint_problem(endpoint)
        if problem is not None:
            raise ValueError(problem)
    lines: list[str] = []
    for line in HEAD_LINES:
        if line.occurs is Occurs.ONE:
            pairs = zip(line.fields, line.codecs, strict=True)
            values = (codec.encode(getattr(head, field)) for field, codec in pairs)
            lines.append(" ".join((line.keyword, *values)))
        elif line.occurs is Occurs.MANY:
            (field,), (codec,) = line.fields, line.codecs
            lines.extend(f"{line.keyword} {codec.encode(v)}" for v in getattr(head, field))
        elif getattr(head, line.fields[0]):
            lines.append(line.keyword)
    return Checkpoint(
        origin=head_origin(head.origin, head.epoch),
        size=head.seq + 1,
        root=bytes.fromhex(head.log_root),
        extensions=tuple(lines),
    )


def head_from_checkpoint(checkpoint: Checkpoint) -> Head:
    """The head a checkpoint states; :class:`EncodingError` names the line that is wrong."""
    node_id, epoch = parse_head_origin(checkpoint.origin)
    if checkpoint.size < 1:
        raise EncodingError("head checkpoint: tree size 0 (a head's log holds its compaction)")
    values: dict[str, Any] = {}
    ext, at = checkpoint.extensions, 0
    for line in HEAD_LINES:
        if line.occurs is Occurs.FLAG:
            present = at < len(ext) and ext[at] == line.keyword
            values[line.fields[0]] = present
            at += present
            continue
        prefix = line.keyword + " "
        items: list[Any] = []
        while at < len(ext) and ext[at].startswith(prefix) and len(items) < line.limit:
            number = at + 4  # extension lines follow the three fixed lines
            parts = ext[at][len(prefix) :].split(" ")
            if len(parts) != len(line.codecs):
                raise EncodingError(
                    f"head line {number} ({line.keyword}): {len(parts)} values,"
                    f" not {len(line.codecs)} ({', '.join(line.fields)})"
                )
            items.append(
                tuple(
                    codec.decode(part, f"head line {number} {field}")
                    for part, field, codec in zip(parts, line.fields, line.codecs, strict=True)
                )
            )
            at += 1
        if line.occurs is Occurs.MANY:
            values[line.fields[0]] = tuple(item[0] for item in items)
            continue
        if not items:
            raise EncodingError(f"head line {at + 4}: expected the {line.keyword!r} line")
        values.update(zip(line.fields, items[0], strict=True))
    if at != len(ext):
        raise EncodingError(
            f"head line {at + 4} {ext[at]!r:.80} is unknown, repeated or out of order"
        )
    try:
        head = Head(
            origin=node_id,
            epoch=epoch,
            seq=checkpoint.size - 1,
            log_root=checkpoint.root.hex(),
            **values,
        )
    except ValueError as exc:
        raise EncodingError(f"head checkpoint: {exc}") from exc
    for endpoint in head.endpoints:
        problem = _endpoint_problem(endpoint)
        if problem is not None:
            raise EncodingError(problem)
    return head


# ---------------------------------------------------------------- signed heads


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A head and the note it travels as, byte for byte.

    ``note`` is what the origin signed and sent (with any witness lines
    appended): carry, store and cite those bytes. ``digest`` is the hex
    SHA-256 of the note text, the signed bytes.
    """

    note: bytes
    statement: Head
    digest: str
    #: The verification's result; None for a head read by :func:`parse_head`.
    verified: VerifiedCheckpoint | None = None

    @property
    def signer(self) -> str:
        return self.statement.origin

    @property
    def text(self) -> bytes:
        """The note text: the bytes the origin signed (blank line and signatures excluded)."""
        return self.note[: self.note.rfind(b"\n\n") + 1]

    def to_bytes(self) -> bytes:
        return self.note


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def head_digest(data: bytes) -> str:
    """The digest a head note would have, read **without parsing or verifying it**:
    the SHA-256 of everything before its last blank line. A key to look a verified
    head up by (:class:`contracts.heads.HeadCache`); it vouches for nothing."""
    return text_digest(data, "head note")


def sign_head(identity: Identity, head: Head) -> SignedHead:
    """Sign ``head`` as its origin (``identity`` must be it) into a checkpoint note."""
    if head.origin != identity.node_id:
        raise ValueError(
            f"head names origin {head.origin[:16]}…, not this identity {identity.node_id[:16]}…"
        )
    checkpoint = head_checkpoint(head)
    note = sign_checkpoint(checkpoint, NoteKey(checkpoint.origin, identity))
    return SignedHead(encode_note(note), head, _digest(note.text))


def _origin_line(data: bytes) -> str:
    end = data.find(b"\n", 0, 8 + 64 + 2 + _MAX_EPOCH * 4)
    if end < 0:
        raise EncodingError("head: no origin line within its bound")
    try:
        return data[:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(f"head origin line is not UTF-8 (byte {exc.start})") from exc


def claimed_origin(data: bytes) -> tuple[str, str]:
    """(node id, epoch) a head note's origin line names, read **before** any signature
    is checked (who a request says it is about); :class:`EncodingError` if not a head's."""
    return parse_head_origin(_origin_line(bytes(data)))


def open_head(
    data: bytes,
    *,
    origin: str | None = None,
    cosigners: Sequence[VerifierKey] = (),
    now: int | None = None,
) -> SignedHead:
    """Verify a head note and read its head.

    (1) bounded: at most :data:`MAX_HEAD_BYTES`; (2) the origin line names a
    node id and epoch — and, when ``origin`` (a node id) is given, that node
    (:class:`BindingMismatch`); (3) :func:`verify_checkpoint` with that
    node's key under the origin line: the note parses, the log signed it,
    every trusted cosigner's line verifies; (4) the extension lines are a
    head's (:func:`head_from_checkpoint`). Raises :class:`EncodingError`,
    :class:`BindingMismatch` or :class:`~contracts.errors.BadSignature`.
    """
    raw = bytes(data)
    # (1) bounded before anything is decoded
    if len(raw) > MAX_HEAD_BYTES:
        raise EncodingError(f"head is {len(raw)} bytes, more than {MAX_HEAD_BYTES}")
    # (2) whose head it says it is
    node_id, epoch = parse_head_origin(_origin_line(raw))
    if origin is not None and node_id != origin:
        raise BindingMismatch(f"head is by origin {node_id[:16]}…, not {origin[:16]}…")
    # (3) signed by that node's key, under that origin line
    verified = verify_checkpoint(
        raw,
        log_key=head_log_key(node_id, epoch),
        cosigners=cosigners,
        now=now,
        max_bytes=MAX_HEAD_BYTES,
        max_signatures=MAX_HEAD_SIGNATURES,
    )
    # (4) the lines a head has
    head = head_from_checkpoint(verified.checkpoint)
    return SignedHead(raw, head, _digest(verified.note.text), verified)


def parse_head(data: bytes) -> SignedHead:
    """Read a head note **without checking its signature**.

    For a head this node signed itself and stored, or to see what a note
    says before deciding whether to verify it: nothing read here may be
    cited, kept as evidence or relied on — :func:`open_head` it first.
    """
    raw = bytes(data)
    if len(raw) > MAX_HEAD_BYTES:
        raise EncodingError(f"head is {len(raw)} bytes, more than {MAX_HEAD_BYTES}")
    note = parse_note(raw, max_bytes=MAX_HEAD_BYTES, max_signatures=MAX_HEAD_SIGNATURES)
    head = head_from_checkpoint(parse_checkpoint(note.text))
    return SignedHead(raw, head, _digest(note.text))
