"""C2SP tlog-checkpoints and their tlog-cosignature/v1 cosignatures.

A checkpoint (c2sp.org/tlog-checkpoint) is a signed note
(:mod:`contracts.note`) whose text is, line by line (:data:`CHECKPOINT_LAYOUT`)::

    <origin>                  non-empty; names the log
    <tree size>               ASCII decimal, no leading zeros ("0" if empty), < 2^64
    <root hash>               standard base64 of the 32-byte RFC 6962 root
    <extension line>*         optional, each non-empty, opaque here

Each line ends in a newline; the text holds no empty line, so the blank line
before the signatures is the first one. :func:`encode_checkpoint` and
:func:`parse_checkpoint` both walk the one layout table, so the two cannot
drift apart, and ``encode_checkpoint(parse_checkpoint(t)) == t`` for every
accepted ``t``.

The log signs the text with a type 0x01 Ed25519 note key
(:func:`sign_checkpoint`). A witness cosigns it with a type 0x04 key
(:func:`cosign_checkpoint`): the signature covers
``"cosignature/v1\\ntime <t>\\n" ‖ text`` — extension lines included — and its
line carries ``key id ‖ u64_be(t) ‖ signature`` (c2sp.org/tlog-cosignature).
A cosignature states that, as of ``t``, this is the largest consistent tree
the witness has seen for the origin; it says nothing about extension lines.

:func:`verify_checkpoint` checks, numbered as in its body: (1) the note
parses within its bounds; (2) the text is a checkpoint; (3) the origin is
the one expected; (4) the log key signed it and every line of a trusted key
verifies; (5) no cosignature is dated after ``now``. Which cosigners, and how
many, a holder requires is policy, decided by the caller from the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.errors import (
    BadSignature,
    BindingMismatch,
    CheckResult,
    EncodingError,
    NotAuthorized,
    run_check,
)
from contracts.note import (
    MAX_NOTE_BYTES,
    MAX_SIGNATURES,
    SIG_TYPE_COSIGNATURE_V1,
    SIG_TYPE_ED25519,
    LineNotVerified,
    Note,
    NoteKey,
    NoteSignature,
    VerifiedSignature,
    VerifierKey,
    decode_canonical_base64,
    encode_base64,
    open_note,
    parse_note,
)

__all__ = [
    "CHECKPOINT_LAYOUT",
    "MAX_TREE_SIZE",
    "ROOT_HASH_LEN",
    "Checkpoint",
    "CheckpointLine",
    "VerifiedCheckpoint",
    "check_checkpoint",
    "cosign_checkpoint",
    "encode_checkpoint",
    "parse_checkpoint",
    "sign_checkpoint",
    "verify_checkpoint",
]

ROOT_HASH_LEN = 32
MAX_TREE_SIZE = 2**64 - 1
_MAX_SIZE_DIGITS = len(str(MAX_TREE_SIZE))
_DIGITS = frozenset("0123456789")


def _origin_problem(origin: object) -> str | None:
    if not isinstance(origin, str):
        return f"origin must be text, got {type(origin).__name__}"
    if not origin:
        return "origin line is empty"
    if "\n" in origin or any(ord(c) < 0x20 for c in origin):
        return f"origin {origin!r:.80} contains a control character"
    return None


def _decode_origin(line: str) -> str:
    problem = _origin_problem(line)
    if problem is not None:
        raise EncodingError(f"checkpoint {problem}")
    return line


def _size_problem(size: object) -> str | None:
    if type(size) is not int or not 0 <= size <= MAX_TREE_SIZE:
        return f"tree size must be an int in [0, 2^64-1], got {size!r:.40}"
    return None


def _decode_size(line: str) -> int:
    # Length first: a megabyte of digits must not reach int().
    if not line or len(line) > _MAX_SIZE_DIGITS or not set(line) <= _DIGITS:
        raise EncodingError(f"checkpoint tree size {line!r:.40} is not a decimal number")
    if line != "0" and line.startswith("0"):
        raise EncodingError(f"checkpoint tree size {line!r:.40} has a leading zero")
    size = int(line)
    if size > MAX_TREE_SIZE:
        raise EncodingError(f"checkpoint tree size {line} is not below 2^64")
    return size


def _root_problem(root: object) -> str | None:
    if type(root) is not bytes or len(root) != ROOT_HASH_LEN:
        return f"root hash must be {ROOT_HASH_LEN} bytes, got {root!r:.80}"
    return None


def _decode_root(line: str) -> bytes:
    root = decode_canonical_base64(line, "checkpoint root hash")
    if len(root) != ROOT_HASH_LEN:
        raise EncodingError(
            f"checkpoint root hash {line!r:.60} is {len(root)} bytes, not {ROOT_HASH_LEN}"
        )
    return root


@dataclass(frozen=True, slots=True)
class CheckpointLine:
    """One fixed line of a checkpoint: the field it holds and how it is spelled."""

    field: str
    encode: Callable[[Any], str]
    decode: Callable[[str], Any]
    problem: Callable[[object], str | None]


# The one declaration of the checkpoint's fixed lines, in order; extension
# lines follow them.
CHECKPOINT_LAYOUT: tuple[CheckpointLine, ...] = (
    CheckpointLine("origin", str, _decode_origin, _origin_problem),
    CheckpointLine("size", str, _decode_size, _size_problem),
    CheckpointLine("root", encode_base64, _decode_root, _root_problem),
)


def _extension_problem(line: object) -> str | None:
    if not isinstance(line, str):
        return f"extension line must be text, got {type(line).__name__}"
    if not line:
        return "extension line is empty"
    if any(ord(c) < 0x20 for c in line):
        return f"extension line {line!r:.80} contains a control character"
    return None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's tree head: origin, tree size, root hash and extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for line in CHECKPOINT_LAYOUT:
            problem = line.problem(getattr(self, line.field))
            if problem is not None:
                raise ValueError(problem)
        if not isinstance(self.extensions, tuple):
            raise TypeError("extensions must be a tuple of str")
        for ext in self.extensions:
            problem = _extension_problem(ext)
            if problem is not None:
                raise ValueError(problem)

    @property
    def text(self) -> bytes:
        """The note text: what the log signs and the witnesses cosign."""
        return encode_checkpoint(self)


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """The checkpoint's note text, one line per :data:`CHECKPOINT_LAYOUT` entry."""
    lines = [line.encode(getattr(checkpoint, line.field)) for line in CHECKPOINT_LAYOUT]
    lines.extend(checkpoint.extensions)
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def parse_checkpoint(text: bytes | str) -> Checkpoint:
    """Parse a checkpoint's note text; :class:`EncodingError` names the bad line."""
    if isinstance(text, bytes | bytearray | memoryview):
        if len(text) > MAX_NOTE_BYTES:
            raise EncodingError(f"checkpoint is {len(text)} bytes, more than {MAX_NOTE_BYTES}")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EncodingError(f"checkpoint is not UTF-8 (byte {exc.start})") from exc
    if not isinstance(text, str):
        raise TypeError(f"checkpoint text is bytes or str, got {type(text).__name__}")
    if not text.endswith("\n"):
        raise EncodingError("checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < len(CHECKPOINT_LAYOUT):
        raise EncodingError(
            f"checkpoint has {len(lines)} lines, fewer than the"
            f" {len(CHECKPOINT_LAYOUT)} of origin, tree size and root hash"
        )
    fields = {
        line.field: line.decode(value)
        for line, value in zip(CHECKPOINT_LAYOUT, lines, strict=False)
    }
    extensions = tuple(lines[len(CHECKPOINT_LAYOUT) :])
    for number, ext in enumerate(extensions, start=len(CHECKPOINT_LAYOUT) + 1):
        problem = _extension_problem(ext)
        if problem is not None:
            raise EncodingError(f"checkpoint line {number}: {problem}")
    return Checkpoint(extensions=extensions, **fields)


def sign_checkpoint(checkpoint: Checkpoint, log_key: NoteKey) -> Note:
    """The checkpoint as a note signed by the log (a type 0x01 key)."""
    if log_key.sig_type != SIG_TYPE_ED25519:
        raise ValueError(f"a log signs checkpoints with a type 0x01 key, not {log_key.name}'s")
    text = checkpoint.text.decode("utf-8")
    return Note(text=text, signatures=(log_key.sign(text),))


def cosign_checkpoint(note: Note, cosigner: NoteKey, *, timestamp: int) -> NoteSignature:
    """A tlog-cosignature/v1 line over ``note``'s text at ``timestamp`` (POSIX seconds).

    The text must be a checkpoint (:class:`EncodingError` otherwise): a witness
    states something about a tree head, never about arbitrary text. Checking
    consistency with what it cosigned before is the witness's job, not this
    function's. Append the result with :meth:`Note.with_signatures`.
    """
    if cosigner.sig_type != SIG_TYPE_COSIGNATURE_V1:
        raise ValueError(f"cosigner {cosigner.name} is not a type 0x04 key")
    parse_checkpoint(note.text)
    return cosigner.sign(note.text, timestamp=timestamp)


@dataclass(frozen=True, slots=True)
class VerifiedCheckpoint:
    """A checkpoint whose log signature verified, with the cosignatures that did.

    ``raw`` is the note exactly as received: carry and store those bytes.
    ``cosignatures`` holds one entry per trusted cosigner that signed (each
    with its ``timestamp``); ``unverified`` the lines no trusted key matched.
    """

    raw: bytes
    note: Note
    checkpoint: Checkpoint
    log_signature: VerifiedSignature
    cosignatures: tuple[VerifiedSignature, ...]
    unverified: tuple[NoteSignature, ...]

    @property
    def cosigners(self) -> frozenset[str]:
        """Key names (``name+id``) of the trusted cosigners that signed."""
        return frozenset(c.key.key for c in self.cosignatures)


def verify_checkpoint(
    data: bytes,
    *,
    log_key: VerifierKey,
    origin: str | None = None,
    cosigners: Sequence[VerifierKey] = (),
    now: int | None = None,
    max_bytes: int = MAX_NOTE_BYTES,
    max_signatures: int = MAX_SIGNATURES,
) -> VerifiedCheckpoint:
    """Verify a signed checkpoint note by ``log_key``, with any trusted cosignatures.

    ``origin`` defaults to the log key's name (tlog-checkpoint: the key name
    SHOULD be the origin); pass it where they differ. ``now`` (ms since the
    Unix epoch, as everywhere in :mod:`contracts`) refuses cosignatures dated
    later. Raises :class:`EncodingError`, :class:`BindingMismatch`,
    :class:`BadSignature` or :class:`NotAuthorized`, each naming what failed.
    """
    if log_key.sig_type != SIG_TYPE_ED25519:
        raise ValueError(f"log key {log_key.key} must be type 0x01, not 0x{log_key.sig_type:02x}")
    for trusted in cosigners:
        if trusted.sig_type != SIG_TYPE_COSIGNATURE_V1:
            raise ValueError(
                f"cosigner key {trusted.key} must be type 0x04, not 0x{trusted.sig_type:02x}"
            )
    raw = bytes(data)
    # (1) the note parses within its bounds
    note = parse_note(raw, max_bytes=max_bytes, max_signatures=max_signatures)
    # (2) its text is a checkpoint
    checkpoint = parse_checkpoint(note.text)
    # (3) the origin is the one expected
    expected = log_key.name if origin is None else origin
    if checkpoint.origin != expected:
        raise BindingMismatch(
            f"checkpoint origin {checkpoint.origin!r:.80} is not the expected {expected!r:.80}"
        )
    # (4) every line of a trusted key verifies; the log's is among them
    try:
        opened = open_note(note, (log_key, *cosigners))
    except LineNotVerified as exc:
        raise LineNotVerified(
            f"checkpoint {checkpoint.origin} at size {checkpoint.size}: {exc}", exc.key
        ) from exc
    except BadSignature as exc:
        raise BadSignature(
            f"checkpoint {checkpoint.origin} at size {checkpoint.size}: {exc}"
        ) from exc
    log_signature = opened.by(log_key)
    if log_signature is None:
        raise BadSignature(
            f"checkpoint {checkpoint.origin} at size {checkpoint.size} has no signature"
            f" by log key {log_key.key}"
        )
    cosignatures = tuple(v for v in opened.verified if v.key != log_key)
    # (5) no cosignature from the future
    if now is not None:
        for cosig in cosignatures:
            if cosig.timestamp is not None and cosig.timestamp * 1000 > now:
                raise NotAuthorized(
                    f"cosignature by {cosig.key.key} is dated {cosig.timestamp} s,"
                    f" after now ({now // 1000} s)"
                )
    return VerifiedCheckpoint(
        raw=raw,
        note=note,
        checkpoint=checkpoint,
        log_signature=log_signature,
        cosignatures=cosignatures,
        unverified=opened.unverified,
    )


def check_checkpoint(
    data: bytes,
    *,
    log_key: VerifierKey,
    origin: str | None = None,
    cosigners: Sequence[VerifierKey] = (),
    now: int | None = None,
) -> CheckResult[VerifiedCheckpoint]:
    """:func:`verify_checkpoint` as a result object: falsy on failure."""
    return run_check(
        lambda: verify_checkpoint(
            data, log_key=log_key, origin=origin, cosigners=cosigners, now=now
        )
    )
