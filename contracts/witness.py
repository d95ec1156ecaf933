"""A witness's add-checkpoint, as a pure state machine (c2sp.org/tlog-witness).

A witness keeps, per log (origin line), the size and root of the latest
checkpoint it cosigned (:class:`WitnessState`, with the note itself: signed
material if the log later contradicts it). A log asks it to cosign a new
checkpoint with an **add-checkpoint request** (:class:`AddCheckpoint`),
whose body is, exactly as tlog-witness §add-checkpoint spells it::

    "old " <size>  "\\n"          the size the log believes the witness is at
    base64(<hash>) "\\n"           0..63 consistency proof lines (RFC 6962 §2.1.2)
    "\\n"                          an empty line
    <checkpoint note>             the signed checkpoint, as the log signed it

:func:`add_checkpoint` decides one request against the witness's state and
returns a :class:`WitnessAnswer`, checked in the spec's order (numbered as
in its body): (1) the note is a checkpoint (``malformed``, HTTP 400); (2)
its origin is a log the witness knows (``unknown_log``, 404); (3) the log's
key signed it, and no line of that key fails (``bad_signature``, 403); (4)
the old size is not above the checkpoint's (``size_regression``, 400); (5)
the old size is the witness's own, else a **conflict** answer carrying the
witness's size (409, body ``"<size>\\n"``); (6) from size 0 the proof is
empty, a size-0 checkpoint has the empty tree's root; at equal sizes the
roots are equal; otherwise the proof verifies from the witness's root to the
checkpoint's (``bad_proof`` / ``inconsistent``, 422); (7) the witness
cosigns (tlog-cosignature/v1, a non-zero timestamp) and returns the state
to persist. The caller persists that state **before** it answers, in the
same transaction that read the state it was decided on: two requests
decided on one state would otherwise roll the witness back (tlog-witness's
race of requests A and B).

A checkpoint the log signed that contradicts the witness's state — the
witness's size with another root, or a proof that reproduces the new
checkpoint's root but another root than the witness's for its size — is
returned as an :class:`Inconsistency`: the two signed notes and the path,
from which :meth:`Inconsistency.evidence` builds ``split_view`` evidence
(:func:`contracts.evidence.split_view_evidence`) when the log is a provnet
head log. A proof that fails otherwise proves nothing (``bad_proof``): with
an old size that is a power of two, RFC 6962's proof omits the old root, so
a failing proof never commits the log to another one.

Pure: no I/O and no clock (the cosignature's timestamp is an argument).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from contracts._fields import is_digest
from contracts.checkpoint import (
    ROOT_HASH_LEN,
    Checkpoint,
    cosign_checkpoint,
    parse_checkpoint,
    verify_checkpoint,
)
from contracts.errors import BadSignature, BindingMismatch, EncodingError, RootMismatch
from contracts.evidence import Evidence, split_view_evidence
from contracts.head_note import head_log_key, open_head, parse_head_origin
from contracts.identity import Identity, PublicKey
from contracts.merkle import consistency_roots, verify_consistency
from contracts.note import (
    MAX_NOTE_BYTES,
    SIG_TYPE_COSIGNATURE_V1,
    NoteKey,
    NoteSignature,
    VerifierKey,
    decode_canonical_base64,
    encode_base64,
    parse_note,
)

__all__ = [
    "EMPTY_TREE_ROOT",
    "MAX_PROOF_LINES",
    "WITNESS_KEY_PREFIX",
    "AddCheckpoint",
    "Inconsistency",
    "LogKeys",
    "Rejection",
    "WitnessAnswer",
    "WitnessOutcome",
    "WitnessState",
    "add_checkpoint",
    "encode_add_checkpoint",
    "encode_conflict",
    "parse_add_checkpoint",
    "parse_conflict",
    "provnet_head_logs",
    "witness_note_key",
    "witness_vkey",
]

#: tlog-witness: "The client MUST NOT send more than 63 consistency proof lines."
MAX_PROOF_LINES = 63
#: RFC 6962 §2.1: the hash of the empty tree is SHA-256 of the empty string.
EMPTY_TREE_ROOT = hashlib.sha256(b"").digest()
_MAX_SIZE_DIGITS = 20
_OLD = "old "
#: A provnet node cosigns as ``provnet-witness/<node id>`` with its own Ed25519 key (type 0x04).
WITNESS_KEY_PREFIX = "provnet-witness/"


def witness_note_key(identity: Identity) -> NoteKey:
    """The cosigning key of a node acting as a witness: its identity, type 0x04."""
    return NoteKey(WITNESS_KEY_PREFIX + identity.node_id, identity, SIG_TYPE_COSIGNATURE_V1)


def witness_vkey(node_id: str) -> VerifierKey:
    """The verifier key a policy file lists for the witness node ``node_id``."""
    if not is_digest(node_id):
        raise ValueError(f"a witness is named by its node id (64 hex), got {node_id!r:.80}")
    return VerifierKey.cosigner(WITNESS_KEY_PREFIX + node_id, PublicKey.from_node_id(node_id))


class WitnessOutcome(StrEnum):
    """What a witness answered: a cosignature, its own size, or a refusal."""

    COSIGNED = "cosigned"  # 200: cosignature lines
    CONFLICT = "conflict"  # 409: "<witness's size>\n" (text/x.tlog.size)
    REJECTED = "rejected"  # 400/403/404/422, with a :class:`Rejection`


class Rejection(StrEnum):
    """Why a witness refused to cosign (tlog-witness's status in brackets)."""

    MALFORMED = "malformed"  # 400: the body or the checkpoint is not well formed
    SIZE_REGRESSION = "size_regression"  # 400: old size above the checkpoint's
    UNKNOWN_LOG = "unknown_log"  # 404: no trusted key for the origin
    BAD_SIGNATURE = "bad_signature"  # 403: not signed by the log's key, or a bad line
    BAD_PROOF = "bad_proof"  # 422: the proof does not verify (proves nothing)
    INCONSISTENT = "inconsistent"  # 422: the log signed a contradiction (evidence)


_STATUS = {
    Rejection.MALFORMED: 400,
    Rejection.SIZE_REGRESSION: 400,
    Rejection.UNKNOWN_LOG: 404,
    Rejection.BAD_SIGNATURE: 403,
    Rejection.BAD_PROOF: 422,
    Rejection.INCONSISTENT: 422,
}


# ---------------------------------------------------------------- the request


def _decode_size(text: str, what: str) -> int:
    # Length first: a megabyte of digits must not reach int().
    if not text or len(text) > _MAX_SIZE_DIGITS or not text.isascii() or not text.isdigit():
        raise EncodingError(f"{what} {text!r:.40} is not a decimal number")
    if text != "0" and text.startswith("0"):
        raise EncodingError(f"{what} {text!r:.40} has a leading zero")
    size = int(text)
    if size >= 2**64:
        raise EncodingError(f"{what} {text} is not below 2^64")
    return size


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    """An add-checkpoint request: old size, RFC 6962 consistency proof, checkpoint note."""

    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: bytes

    def __post_init__(self) -> None:
        if type(self.old_size) is not int or not 0 <= self.old_size < 2**64:
            raise ValueError(f"old size must be an int in [0, 2^64), got {self.old_size!r}")
        if len(self.proof) > MAX_PROOF_LINES:
            raise ValueError(f"at most {MAX_PROOF_LINES} proof hashes, got {len(self.proof)}")
        for h in self.proof:
            if type(h) is not bytes or len(h) != ROOT_HASH_LEN:
                raise ValueError(f"a proof hash is {ROOT_HASH_LEN} bytes, got {h!r:.80}")
        if type(self.checkpoint) is not bytes:
            raise TypeError("checkpoint must be the note's bytes")

    @property
    def origin(self) -> str:
        """The checkpoint's origin line, read without verifying anything (which
        state to look up); :class:`EncodingError` if the note is not a checkpoint."""
        return parse_checkpoint(parse_note(self.checkpoint).text).origin

    def to_bytes(self) -> bytes:
        return encode_add_checkpoint(self)


def encode_add_checkpoint(request: AddCheckpoint) -> bytes:
    """``"old <n>\\n" ‖ base64(hash) "\\n"… ‖ "\\n" ‖ checkpoint`` (tlog-witness)."""
    lines = [f"{_OLD}{request.old_size}", *(encode_base64(h) for h in request.proof)]
    return "".join(f"{line}\n" for line in lines).encode("ascii") + b"\n" + request.checkpoint


def parse_add_checkpoint(body: bytes, *, max_bytes: int = MAX_NOTE_BYTES + 8192) -> AddCheckpoint:
    """Parse an add-checkpoint body; :class:`EncodingError` names the line that is wrong.

    The checkpoint after the empty line is kept as bytes (verified by
    :func:`add_checkpoint`, never rebuilt).
    """
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"an add-checkpoint body is bytes, got {type(body).__name__}")
    data = bytes(body)
    if len(data) > max_bytes:
        raise EncodingError(f"add-checkpoint body is {len(data)} bytes, more than {max_bytes}")
    split = data.find(b"\n\n")
    if split < 0:
        raise EncodingError("add-checkpoint body has no empty line before its checkpoint")
    head, checkpoint = data[:split], data[split + 2 :]
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError as exc:
        raise EncodingError(
            f"add-checkpoint body: old size and proof lines are not ASCII (byte {exc.start})"
        ) from exc
    if not lines[0].startswith(_OLD):
        raise EncodingError(f"add-checkpoint line 1: expected 'old <size>', got {lines[0]!r:.60}")
    old = _decode_size(lines[0][len(_OLD) :], "add-checkpoint line 1: old size")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise EncodingError(
            f"add-checkpoint body has {len(lines) - 1} proof lines, more than {MAX_PROOF_LINES}"
        )
    proof: list[bytes] = []
    for number, line in enumerate(lines[1:], start=2):
        raw = decode_canonical_base64(line, f"add-checkpoint line {number}: proof hash")
        if len(raw) != ROOT_HASH_LEN:
            raise EncodingError(
                f"add-checkpoint line {number}: proof hash is {len(raw)} bytes, not {ROOT_HASH_LEN}"
            )
        proof.append(raw)
    if not checkpoint:
        raise EncodingError("add-checkpoint body: no checkpoint after the empty line")
    return AddCheckpoint(old_size=old, proof=tuple(proof), checkpoint=checkpoint)


def encode_conflict(size: int) -> bytes:
    """A 409 body (``text/x.tlog.size``): the witness's size in decimal and a newline."""
    return b"%d\n" % size


def parse_conflict(body: bytes) -> int:
    """The witness's size from a 409 body; :class:`EncodingError` if it is not one."""
    data = bytes(body)
    if not data.endswith(b"\n"):
        raise EncodingError("conflict body does not end with a newline")
    try:
        text = data[:-1].decode("ascii")
    except UnicodeDecodeError as exc:
        raise EncodingError("conflict body is not ASCII") from exc
    return _decode_size(text, "conflict body: witness size")


# ---------------------------------------------------------------- the state machine


@dataclass(frozen=True, slots=True)
class WitnessState:
    """The latest checkpoint a witness cosigned for one log: size, root, the note."""

    origin: str
    size: int
    root: bytes
    #: the checkpoint note as the log sent it (its signature, not the witness's)
    note: bytes

    def __post_init__(self) -> None:
        if type(self.size) is not int or not 0 <= self.size < 2**64:
            raise ValueError(f"witness state size must be in [0, 2^64), got {self.size!r}")
        if type(self.root) is not bytes or len(self.root) != ROOT_HASH_LEN:
            raise ValueError(f"witness state root must be {ROOT_HASH_LEN} bytes")


@dataclass(frozen=True, slots=True)
class Inconsistency:
    """Two checkpoints the log signed that no append-only log has: split-view material.

    ``earlier`` is the note the witness cosigned, ``later`` the contradicting
    one; ``path`` is empty for equal sizes, else the consistency path in the
    seeded form of :meth:`contracts.heads.HeadLog.consistency_path` (what
    ``split_view`` evidence carries).
    """

    earlier: bytes
    later: bytes
    path: tuple[bytes, ...]
    reason: str

    def evidence(self, *, reported_at: int) -> Evidence:
        """``split_view`` evidence from the two notes (provnet head logs only).

        Raises :class:`EncodingError` when the notes are not provnet heads,
        :class:`~contracts.errors.NotEvidence` when they do not contradict.
        """
        return split_view_evidence(
            open_head(self.earlier), open_head(self.later), reported_at=reported_at, path=self.path
        )


@dataclass(frozen=True, slots=True)
class WitnessAnswer:
    """One add-checkpoint decision. Truthy only when the witness cosigned.

    ``state`` is what to persist before answering (cosigned only); ``size``
    the witness's size after the call (what a conflict answer carries).
    """

    outcome: WitnessOutcome
    message: str
    size: int
    cosignature: NoteSignature | None = None
    state: WitnessState | None = None
    reason: Rejection | None = None
    inconsistency: Inconsistency | None = None

    def __bool__(self) -> bool:
        return self.outcome is WitnessOutcome.COSIGNED

    @property
    def http_status(self) -> int:
        """The tlog-witness HTTP status this answer is (200, 409, 400, 403, 404, 422)."""
        if self.outcome is WitnessOutcome.COSIGNED:
            return 200
        if self.outcome is WitnessOutcome.CONFLICT:
            return 409
        return 400 if self.reason is None else _STATUS[self.reason]

    @property
    def body(self) -> bytes:
        """The response body: the cosignature line (200) or the witness's size (409)."""
        if self.cosignature is not None:
            return self.cosignature.line.encode("utf-8")
        if self.outcome is WitnessOutcome.CONFLICT:
            return encode_conflict(self.size)
        return self.message.encode("utf-8")


def _rejected(
    reason: Rejection, message: str, size: int, inconsistency: Inconsistency | None = None
) -> WitnessAnswer:
    return WitnessAnswer(
        WitnessOutcome.REJECTED, message, size, reason=reason, inconsistency=inconsistency
    )


#: Which key the witness trusts for a log, by origin line (None: not a log it witnesses).
LogKeys = Callable[[str], VerifierKey | None]


def provnet_head_logs(origins: frozenset[str] | None = None) -> LogKeys:
    """Log keys of provnet head logs: a head's origin line names its node id (the key).

    ``origins``: the node ids whose logs are witnessed (None: every provnet head log).
    """

    def lookup(origin: str) -> VerifierKey | None:
        try:
            node_id, epoch = parse_head_origin(origin)
        except EncodingError:
            return None
        if origins is not None and node_id not in origins:
            return None
        return head_log_key(node_id, epoch)

    return lookup


def _seeded(old: int, proof: tuple[bytes, ...], old_root: bytes) -> tuple[bytes, ...]:
    # RFC 9162 §2.1.4.2 step 2: for a power-of-two old size the verifier's own
    # root starts the path (HeadLog.consistency_path's seeded form).
    return (old_root, *proof) if old & (old - 1) == 0 else proof


def add_checkpoint(
    state: WitnessState | None,
    request: AddCheckpoint,
    *,
    log_key: LogKeys,
    witness_key: NoteKey,
    timestamp: int,
) -> WitnessAnswer:
    """Decide one add-checkpoint request against ``state`` (None: never cosigned this log).

    ``log_key`` maps an origin line to the log key the witness trusts for it;
    ``witness_key`` is the witness's type 0x04 key; ``timestamp`` (POSIX
    seconds, > 0) dates the cosignature. See the module docstring for the
    checks; nothing here raises for untrusted input — every refusal is an
    answer naming its reason.
    """
    if type(timestamp) is not int or timestamp <= 0:
        raise ValueError(f"a cosignature's timestamp must be a positive int, got {timestamp!r}")
    size = 0 if state is None else state.size
    # (1) the checkpoint is one
    try:
        note = parse_note(request.checkpoint)
        checkpoint: Checkpoint = parse_checkpoint(note.text)
    except EncodingError as exc:
        return _rejected(Rejection.MALFORMED, f"add-checkpoint: {exc}", size)
    origin = checkpoint.origin
    if state is not None and state.origin != origin:
        raise ValueError(f"state of log {state.origin!r:.80} given for {origin!r:.80}")
    # (2) a log this witness knows
    key = log_key(origin)
    if key is None:
        return _rejected(
            Rejection.UNKNOWN_LOG,
            f"add-checkpoint: log {origin!r:.100} is not witnessed here",
            size,
        )
    # (3) signed by the log's key; a bad line by that key rejects the note
    try:
        verify_checkpoint(request.checkpoint, log_key=key, origin=origin)
    except (BadSignature, BindingMismatch) as exc:
        return _rejected(Rejection.BAD_SIGNATURE, f"add-checkpoint: {exc}", size)
    except EncodingError as exc:
        return _rejected(Rejection.MALFORMED, f"add-checkpoint: {exc}", size)
    old, new = request.old_size, checkpoint.size
    where = f"log {origin!r:.100}"
    # (4) no regression below the old size the log names
    if old > new:
        return _rejected(
            Rejection.SIZE_REGRESSION,
            f"add-checkpoint {where}: old size {old} exceeds the checkpoint's size {new}",
            size,
        )
    # The witness's size with another root is a contradiction, whatever old
    # size the log claims: kept as material even on a conflict answer.
    same_size_fork = state is not None and new == state.size and checkpoint.root != state.root
    fork = (
        Inconsistency(
            state.note,
            request.checkpoint,
            (),
            f"{where} signed two roots for size {new}: {state.root.hex()[:12]}…"
            f" (cosigned here) and {checkpoint.root.hex()[:12]}…",
        )
        if same_size_fork and state is not None
        else None
    )
    # (5) the old size is the witness's own
    if old != size:
        return WitnessAnswer(
            WitnessOutcome.CONFLICT,
            f"add-checkpoint {where}: old size {old}, but this witness is at size {size}",
            size,
            inconsistency=fork,
        )
    # (6) consistent with what the witness cosigned
    if new == 0 and checkpoint.root != EMPTY_TREE_ROOT:
        return _rejected(
            Rejection.BAD_PROOF, f"add-checkpoint {where}: size 0 with a non-empty root", size
        )
    if old == 0:
        if request.proof:
            return _rejected(
                Rejection.BAD_PROOF,
                f"add-checkpoint {where}: {len(request.proof)} proof lines from size 0, none due",
                size,
            )
    elif old == new:
        if fork is not None:
            return _rejected(Rejection.INCONSISTENT, f"add-checkpoint: {fork.reason}", size, fork)
        if request.proof:
            return _rejected(
                Rejection.BAD_PROOF,
                f"add-checkpoint {where}: {len(request.proof)} proof lines between equal sizes",
                size,
            )
    elif state is not None:  # 0 < old == size < new
        try:
            verify_consistency(old, new, request.proof, state.root, checkpoint.root)
        except (EncodingError, RootMismatch) as exc:
            found = _contradiction(state, request, checkpoint)
            if found is not None:
                return _rejected(
                    Rejection.INCONSISTENT, f"add-checkpoint: {found.reason}", size, found
                )
            return _rejected(Rejection.BAD_PROOF, f"add-checkpoint {where}: {exc}", size)
    # (7) cosign; the caller persists ``state`` before answering
    cosignature = cosign_checkpoint(note, witness_key, timestamp=timestamp)
    return WitnessAnswer(
        WitnessOutcome.COSIGNED,
        f"cosigned {where} at size {new}",
        new,
        cosignature=cosignature,
        state=WitnessState(origin, new, checkpoint.root, request.checkpoint),
    )


def _contradiction(
    state: WitnessState, request: AddCheckpoint, checkpoint: Checkpoint
) -> Inconsistency | None:
    """A failing proof that the new checkpoint's root authenticates, yet yields
    another root for the witness's size: the log signed a fork."""
    old, new = request.old_size, checkpoint.size
    path = _seeded(old, request.proof, state.root)
    try:
        first_root, second_root = consistency_roots(old, new, path)
    except EncodingError:
        return None
    if second_root != checkpoint.root or first_root == state.root:
        return None
    return Inconsistency(
        state.note,
        request.checkpoint,
        path,
        f"log {checkpoint.origin!r:.100} signed size {new}, whose proof gives root"
        f" {first_root.hex()[:12]}… for size {old}; this witness cosigned"
        f" {state.root.hex()[:12]}… for it",
    )
