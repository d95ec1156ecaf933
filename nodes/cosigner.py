"""Witness-cosigned heads on a node: the witness role, the origin's witnesses, the holder's quorum.

Three parts, each off unless configured, so a node without any of the
settings behaves exactly as before (same calls, same bytes):

* **Witness** (:class:`Cosigner`, ``--witness-logs``): answers
  ``Witness.AddCheckpoint`` with :func:`contracts.witness.add_checkpoint`.
  Its state per log (size, root, note of the latest head it cosigned) lives
  in the store's ``witness_logs`` table; the state is read, decided on and
  written in **one write transaction, committed (fsync'd) before the
  cosignature is returned** (:meth:`nodes.store.HopStore.witness_decide`),
  so no answer is ever given for a state a crash could roll back, and two
  requests can never both be decided on one state. A head the origin signed
  that contradicts that state is kept as ``split_view`` evidence against the
  origin (file and store, as a holder keeps it).
* **Origin** (:class:`OriginWitnesses`, ``--witnesses``): after a
  compaction's head is durable, it asks each witness concurrently with the
  old size it believes the witness is at (the previous head's; a conflict
  answer corrects it once) and the RFC 6962 consistency proof from there,
  verifies each returned line against the witness key its name claims, and
  appends the good ones to the note it delivers and stores in place of the
  signed one. The head's digest is its note text's, so the cosigned note is
  the same head. A witness that is down or refuses costs its cosignature,
  never the commit; it is asked again in the background (only it, at most
  ``len(REASK_DELAYS_S)`` times per head, no longer once a newer head of the
  log was asked), and the lines gained reach the stored head too.
* **Holder** (:class:`HeadGate`, ``--witness-policy``): a delivered head
  must satisfy the policy file's quorum
  (:func:`contracts.witness_policy.check_quorum`) before it is verified,
  cached or held; otherwise the delivery is refused with FAILED_PRECONDITION
  naming what is missing. A missing quorum accuses nobody: it is no signed
  misbehaviour — but a refused head the origin signed that conflicts with a
  head this holder holds is, and is kept as ``split_view`` evidence.

Bounds: a witness of every log (``*``) takes on at most :data:`MAX_ANY_LOGS`
logs; an origin keeps one line per witness reply, and has at most 16
witnesses (``nodes.config.MAX_WITNESSES``); a holder reads a head within the
head's own bounds before verifying any cosignature.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from contracts._lru import BoundedCache
from contracts.checkpoint import parse_checkpoint, verify_checkpoint
from contracts.errors import BadSignature, ContractError, EncodingError
from contracts.evidence import split_view_evidence
from contracts.head_note import (
    MAX_HEAD_BYTES,
    MAX_HEAD_SIGNATURES,
    head_log_key,
    open_head,
    parse_head_origin,
)
from contracts.heads import HeadCache, HeadLog
from contracts.identity import Identity
from contracts.note import parse_note
from contracts.witness import (
    WITNESS_KEY_PREFIX,
    AddCheckpoint,
    LogKeys,
    Rejection,
    WitnessAnswer,
    WitnessOutcome,
    WitnessState,
    add_checkpoint,
    parse_add_checkpoint,
    provnet_head_logs,
    witness_note_key,
    witness_vkey,
)
from contracts.witness_policy import WitnessPolicy, check_quorum, parse_policy
from nodes import store as st
from nodes.config import ConfigError, WitnessFault, setting, witness_log_entries
from nodes.errors import MalformedRequest, NodeError
from nodes.logging import get_logger
from nodes.messages import Outcome, WitnessReply
from nodes.transport import CallFailed

__all__ = [
    "ANY_LOG",
    "MAX_ANY_LOGS",
    "Cosigner",
    "HeadGate",
    "HeadRefused",
    "NotAWitness",
    "OriginWitnesses",
    "WitnessRefused",
    "Witnessing",
    "consistency_proof",
    "load_policy",
    "parse_witness_logs",
]

log = get_logger(__name__)

#: ``--witness-logs *``: witness every provnet head log (each head names its key).
ANY_LOG = "*"
#: Logs a ``*`` witness takes on at most: a stranger minting origin keys fills
#: no more than this many rows (a named list of origins has no such cap).
MAX_ANY_LOGS = 10_000
_ADMITTED_CACHE = 4096

_CODES = {
    Rejection.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    Rejection.SIZE_REGRESSION: grpc.StatusCode.INVALID_ARGUMENT,
    Rejection.UNKNOWN_LOG: grpc.StatusCode.NOT_FOUND,
    Rejection.BAD_SIGNATURE: grpc.StatusCode.PERMISSION_DENIED,
    Rejection.BAD_PROOF: grpc.StatusCode.FAILED_PRECONDITION,
    Rejection.INCONSISTENT: grpc.StatusCode.FAILED_PRECONDITION,
}


class WitnessRefused(NodeError):
    """The witness refused to cosign; ``reason`` is tlog-witness's, the code its status."""

    def __init__(self, reason: Rejection, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = _CODES[reason]


class NotAWitness(NodeError):
    """``Witness.AddCheckpoint`` on a node started without ``--witness-logs``."""

    code = grpc.StatusCode.UNIMPLEMENTED


class HeadRefused(NodeError):
    """A delivered head without the quorum this holder's witness policy requires."""

    code = grpc.StatusCode.FAILED_PRECONDITION


def parse_witness_logs(text: str) -> frozenset[str] | None:
    """``--witness-logs``: ``*`` (every provnet head log), or node ids; ``""``: not a witness.

    Returns None for ``*``; raises :class:`ValueError` naming a bad entry.
    """
    entries = witness_log_entries(text)
    if entries == [ANY_LOG]:
        return None
    for entry in entries:
        if len(entry) != 64 or entry.strip("0123456789abcdef"):
            raise ValueError(f"expected '*' or 64-hex node ids, got {entry!r:.80}")
    return frozenset(entries)


# ------------------------------------------------------------------ witness


class Cosigner:
    """The witness role: ``Witness.AddCheckpoint`` over the node's store (module docstring)."""

    def __init__(
        self,
        identity: Identity,
        store: st.HopStore,
        *,
        logs: LogKeys | None,
        max_logs: int | None = None,
        clock: Callable[[], float],
        keep_evidence: Callable[[str, bytes], Awaitable[None]],
        fault: WitnessFault = WitnessFault.NONE,
    ) -> None:
        self._key = witness_note_key(identity)
        self._store = store
        self._logs = logs
        self.max_logs = max_logs
        self._clock = clock
        self._keep_evidence = keep_evidence
        self.fault = fault
        self.cosigned = 0
        self.refused = 0
        # (earlier, later) note digests already kept: a log asked again (a conflict
        # answer, then its retry) leaves one record, not one per request.
        self._kept: BoundedCache[tuple[bytes, bytes], None] = BoundedCache(_ADMITTED_CACHE)

    @property
    def enabled(self) -> bool:
        return self._logs is not None

    async def add_checkpoint(self, body: bytes) -> WitnessReply:
        """Decide one add-checkpoint body; persist the new state before answering."""
        if self._logs is None:
            raise NotAWitness("this node is not a witness (no --witness-logs configured)")
        logs = self._logs
        try:
            request = parse_add_checkpoint(body)
            origin = request.origin
        except EncodingError as exc:
            raise MalformedRequest(f"Witness.AddCheckpoint: {exc}") from exc
        now = self._clock()
        timestamp = max(1, int(now))
        if self.fault is WitnessFault.COLLUDE:
            return self._collude(request, origin, logs, timestamp)

        def decide(row: st.WitnessLogRow | None) -> tuple[st.WitnessLogRow | None, WitnessAnswer]:
            state = None if row is None else WitnessState(row.origin, row.size, row.root, row.note)
            answer = add_checkpoint(
                state, request, log_key=logs, witness_key=self._key, timestamp=timestamp
            )
            new = answer.state
            written = (
                None if new is None else st.WitnessLogRow(origin, new.size, new.root, new.note)
            )
            return written, answer

        # (1)-(7) decided inside the write transaction; COMMIT before we answer
        answer = await self._store.witness_decide(
            origin, decide, now_ms=int(now * 1000), max_logs=self.max_logs
        )
        if answer.inconsistency is not None:
            await self._keep(answer, origin, int(now * 1000))
        if answer:
            self.cosigned += 1
            log.info("witness_cosigned", log=origin[:96], size=answer.size)
            return WitnessReply(cosignatures=answer.body, size=answer.size)
        if answer.outcome is WitnessOutcome.CONFLICT:
            log.info("witness_conflict", log=origin[:96], size=answer.size)
            return WitnessReply(conflict=True, size=answer.size)
        self.refused += 1
        reason = answer.reason or Rejection.MALFORMED
        log.warning("witness_refused", log=origin[:96], reason=str(reason), error=answer.message)
        raise WitnessRefused(reason, answer.message)

    def _collude(
        self, request: AddCheckpoint, origin: str, logs: LogKeys, timestamp: int
    ) -> WitnessReply:
        """An adversary witness: cosigns anything its log signed (no state, no proof)."""
        key = logs(origin)
        if key is None:
            raise WitnessRefused(Rejection.UNKNOWN_LOG, f"log {origin!r:.100} not witnessed here")
        try:
            verified = verify_checkpoint(request.checkpoint, log_key=key, origin=origin)
        except ContractError as exc:
            raise WitnessRefused(Rejection.BAD_SIGNATURE, str(exc)) from exc
        line = self._key.sign(verified.note.text, timestamp=timestamp).line.encode("utf-8")
        self.cosigned += 1
        return WitnessReply(cosignatures=line, size=verified.checkpoint.size)

    async def _keep(self, answer: WitnessAnswer, origin: str, now_ms: int) -> None:
        inconsistency = answer.inconsistency
        if inconsistency is None:
            return
        pair = (
            hashlib.sha256(inconsistency.earlier).digest(),
            hashlib.sha256(inconsistency.later).digest(),
        )
        if self._kept.touch(pair):
            return
        self._kept.put(pair, None)
        try:
            evidence = inconsistency.evidence(reported_at=now_ms)
        except ContractError as exc:
            # Not a provnet head log, or the two notes do not contradict after all.
            log.warning("witness_inconsistency_unproven", log=origin[:96], error=str(exc))
            return
        log.warning("witness_split_view", log=origin[:96], accused=evidence.accused[:16])
        await self._keep_evidence(evidence.accused, evidence.to_bytes())


# ------------------------------------------------------------------ origin


def consistency_proof(head_log: HeadLog, old: int, new: int) -> tuple[bytes, ...]:
    """RFC 6962 ``PROOF(old, D[new])`` between two sizes of ``head_log`` (tlog-witness's form).

    Empty for ``old`` 0 or ``old == new``; :meth:`HeadLog.consistency_path`
    seeds a power-of-two old size with its root, which the wire form leaves out.
    """
    if old == 0 or old == new:
        return ()
    path = head_log.consistency_path(old - 1, new - 1)
    return path[1:] if old & (old - 1) == 0 else path


#: Waits before each background re-ask of a head a witness did not cosign at
#: commit (down, slow, out of step); three re-asks per head at most.
REASK_DELAYS_S = (2.0, 10.0, 60.0)
#: Heads waiting to be re-asked at most (the oldest is dropped beyond it).
MAX_SHORT_HEADS = 64


@dataclass(slots=True)
class _Short:
    """A head some witness gave no cosignature for, and who to ask again."""

    note: bytes
    text: str
    origin: str
    size: int
    head_log: HeadLog
    missing: tuple[str, ...] = ()
    attempts: int = 0


class OriginWitnesses:
    """An origin's witnesses: ask each for a cosignature of every new head."""

    def __init__(
        self,
        addresses: Sequence[str],
        transport: Any,
        *,
        timeout_s: float,
        pins: dict[str, str] | None = None,
    ) -> None:
        self.addresses = tuple(addresses)
        self._transport = transport
        self._timeout = timeout_s
        self._pins = dict(pins or {})
        #: (address, log) → the size that witness last cosigned, as far as we know
        self._sizes: dict[tuple[str, str], int] = {}
        self.asked = 0
        self.cosignatures = 0
        #: Waits before each re-ask of a head some witness did not cosign (its length
        #: bounds the re-asks per head).
        self.reask_delays_s: tuple[float, ...] = REASK_DELAYS_S
        #: Called with (note as kept, note with the new lines) after a re-ask got lines.
        self.on_cosigned: Callable[[bytes, bytes], Awaitable[None]] | None = None
        #: head digest → a head short of some witness's cosignature (oldest first)
        self._short: BoundedCache[str, _Short] = BoundedCache(MAX_SHORT_HEADS)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reasking = asyncio.Lock()  # one re-ask at a time: one line per witness
        self.reasked = 0

    async def cosign(self, note: bytes, head_log: HeadLog) -> bytes:
        """``note`` with every valid cosignature the witnesses returned appended.

        A witness that returned no line is asked again later, in the background
        (:meth:`reask`, at most ``len(reask_delays_s)`` times per head).
        """
        if not self.addresses:
            return note
        text = parse_note(note).text
        checkpoint = parse_checkpoint(text)
        lines = await asyncio.gather(
            *(
                self._ask(a, note, text, checkpoint.origin, checkpoint.size, head_log)
                for a in self.addresses
            )
        )
        got = b"".join(lines)
        self.cosignatures += sum(1 for line in lines if line)
        out = note + got
        # A newer head of the log supersedes the older ones: a witness that cosigns
        # it will never cosign an older one (tlog-witness), so stop asking for them.
        for digest, short in list(self._short.items()):
            if short.origin == checkpoint.origin and short.size < checkpoint.size:
                self._short.pop(digest)
        missing = tuple(a for a, line in zip(self.addresses, lines, strict=True) if not line)
        if missing and self.reask_delays_s:
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            short = _Short(out, text, checkpoint.origin, checkpoint.size, head_log)
            short.missing = missing
            self._short.put(digest, short)  # beyond MAX_SHORT_HEADS the oldest goes
            task = asyncio.get_running_loop().create_task(
                self._reask_later(digest), name=f"witness-reask-{digest[:12]}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return out

    def short_heads(self) -> tuple[str, ...]:
        """Digests of heads still waiting to be re-asked."""
        return tuple(self._short)

    async def reask(self) -> int:
        """One re-ask of every head short of a witness's cosignature; the lines gained.

        Only the witnesses that gave no line are asked; a head leaves the list
        once every witness cosigned it, a newer head of its log was committed,
        or after ``len(reask_delays_s)`` re-asks.
        """
        gained = 0
        for digest in list(self._short):
            gained += await self._reask_one(digest)
        return gained

    async def _reask_later(self, digest: str) -> None:
        for delay in self.reask_delays_s:  # bounded: one pass per delay at most
            await asyncio.sleep(delay)
            if digest not in self._short:
                return
            try:
                await self._reask_one(digest)
            except Exception:  # a store error persisting it: logged, the next try goes on
                log.exception("witness_reask_failed", head=digest[:16])

    async def _reask_one(self, digest: str) -> int:
        async with self._reasking:
            return await self._reask_locked(digest)

    async def _reask_locked(self, digest: str) -> int:
        short = self._short.peek(digest)
        if short is None:
            return 0
        short.attempts += 1
        self.reasked += 1
        lines = await asyncio.gather(
            *(
                self._ask(a, short.note, short.text, short.origin, short.size, short.head_log)
                for a in short.missing
            )
        )
        got = b"".join(lines)
        gained = sum(1 for line in lines if line)
        if got:
            after = short.note + got
            if self.on_cosigned is not None:  # kept first: a failure leaves the head as it was
                await self.on_cosigned(short.note, after)
            short.note = after
            short.missing = tuple(a for a, x in zip(short.missing, lines, strict=True) if not x)
            self.cosignatures += gained
            log.info("witness_reask_cosigned", head=digest[:16], lines=gained)
        else:
            log.info("witness_reask_short", head=digest[:16], missing=len(short.missing))
        if self._short.peek(digest) is short and (
            not short.missing or short.attempts >= len(self.reask_delays_s)
        ):
            self._short.pop(digest)
        return gained

    async def settle(self) -> None:
        """Wait for the background re-asks under way (each ends after its bounded tries)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel the background re-asks."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._short = BoundedCache(MAX_SHORT_HEADS)

    async def _ask(
        self, address: str, note: bytes, text: str, origin: str, new: int, head_log: HeadLog
    ) -> bytes:
        call = getattr(self._transport, "add_checkpoint", None)
        if call is None:  # said, not silent: the head goes out without this cosignature
            log.warning("witness_not_asked", witness=address, why="transport has no AddCheckpoint")
            return b""
        old = self._sizes.get((address, origin), new - 1)
        for _ in range(2):  # once more after a conflict answer names the witness's size
            if not 0 <= old <= new:
                break
            body = AddCheckpoint(old, consistency_proof(head_log, old, new), note).to_bytes()
            self.asked += 1
            try:
                reply: WitnessReply = await call(address, body, self._timeout)
            except CallFailed as exc:  # a witness down or refusing costs its cosignature only
                log.warning("witness_unavailable", witness=address, log=origin[:96], error=str(exc))
                return b""
            if reply.conflict:
                old = reply.size
                continue
            line = self._checked(address, text, reply.cosignatures)
            if line:
                self._sizes[(address, origin)] = max(new, self._sizes.get((address, origin), 0))
            return line
        log.warning("witness_out_of_step", witness=address, log=origin[:96], size=old, head=new)
        return b""

    def _checked(self, address: str, text: str, lines: bytes) -> bytes:
        """The first returned line that is a cosignature by the witness key its name claims
        (and, for a pinned address, by the pinned node)."""
        try:
            got = parse_note(text.encode("utf-8") + b"\n" + lines).signatures
        except EncodingError as exc:
            log.warning("witness_reply_malformed", witness=address, error=str(exc))
            return b""
        for signature in got:
            node_id = signature.name.removeprefix(WITNESS_KEY_PREFIX)
            pinned = self._pins.get(address)
            try:
                if signature.name == node_id or (pinned is not None and pinned != node_id):
                    raise BadSignature(f"line by {signature.key} is not the witness at {address}")
                witness_vkey(node_id).verify(text.encode("utf-8"), signature)
            except (BadSignature, ValueError) as exc:
                log.warning("witness_reply_refused", witness=address, error=str(exc))
                continue
            # One line per witness: a reply cannot fill the head's signature lines.
            return signature.line.encode("utf-8")
        return b""


# ------------------------------------------------------------------ holder


def load_policy(path: Path) -> WitnessPolicy:
    """Read and parse a witness policy file; errors name the file and the line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"witness policy {path}: {exc.strerror or exc}") from exc
    try:
        return parse_policy(data)
    except EncodingError as exc:
        raise ValueError(f"witness policy {path}: {exc}") from exc


class HeadGate:
    """A holder's witness policy: which delivered heads it accepts (None: all, as before)."""

    def __init__(self, policy: WitnessPolicy | None) -> None:
        self.policy = policy
        # Note bytes already admitted: a head re-delivered is not re-verified.
        self._admitted: BoundedCache[bytes, None] = BoundedCache(_ADMITTED_CACHE)
        self.refused = 0

    def admit(self, note: bytes, now_ms: int) -> None:
        """Raise :class:`HeadRefused` unless ``note`` carries the policy's quorum.

        Only the quorum is decided here; the head's own checks (expiry, the
        folds under it) follow in the delivery as before.
        """
        policy = self.policy
        if policy is None:
            return
        key = hashlib.sha256(note).digest()
        if self._admitted.touch(key):
            return
        try:
            if len(note) > MAX_HEAD_BYTES:
                raise EncodingError(f"head is {len(note)} bytes, more than {MAX_HEAD_BYTES}")
            first = note[: note.index(b"\n")].decode("utf-8")
            node_id, epoch = parse_head_origin(first)
        except (ValueError, EncodingError) as exc:
            raise MalformedRequest(f"deliver: head is not a provnet head note: {exc}") from exc
        # parsed once, within a head's bounds (at most MAX_HEAD_SIGNATURES lines to verify)
        result = check_quorum(
            note,
            policy,
            now_ms,
            log_key=head_log_key(node_id, epoch),
            max_bytes=MAX_HEAD_BYTES,
            max_signatures=MAX_HEAD_SIGNATURES,
        )
        if not result:
            self.refused += 1
            raise HeadRefused(
                f"deliver: head refused by this node's witness policy: {result.message}"
            )
        self._admitted.put(key, None)


# ------------------------------------------------------------------ on a node


class _Core(Protocol):
    """What :class:`Witnessing` reads of a node (its :class:`nodes.context.NodeContext`)."""

    config: Any
    identity: Identity
    store: st.HopStore
    transport: Any

    def clock(self) -> float: ...

    def client(self) -> Any: ...


class Witnessing:
    """A node's three witness parts, built from its config (each off unless configured)."""

    def __init__(self, core: _Core) -> None:
        config = core.config
        logs_text: str = config.witness_logs
        named = parse_witness_logs(logs_text) if logs_text else frozenset()
        logs = None if not logs_text else provnet_head_logs(named)

        async def keep(accused: str, body: bytes) -> None:
            # Kept as a holder keeps split-view evidence: a file and the store.
            await core.client().record_evidence(Outcome.SPLIT_VIEW, accused, body)

        self._keep = keep

        self.cosigner = Cosigner(
            core.identity,
            core.store,
            logs=logs,
            max_logs=MAX_ANY_LOGS if logs_text and named is None else None,
            clock=lambda: core.clock(),
            keep_evidence=keep,
            fault=config.witness_fault,
        )
        self.origin = OriginWitnesses(
            [config.peer(w) for w in config.witnesses],
            core.transport,
            timeout_s=config.deadline_ms / 1000,
            pins=config.pins,
        )
        try:
            policy = None if config.witness_policy is None else load_policy(config.witness_policy)
        except ValueError as exc:
            raise ConfigError(f"{setting('witness_policy')}: {exc}") from exc
        self.gate = HeadGate(policy)

    async def cosign_head(self, note: bytes, head_log: HeadLog) -> bytes:
        """The head note with the witnesses' cosignatures (unchanged without witnesses)."""
        return await self.origin.cosign(note, head_log)

    def on_recosigned(self, keep: Callable[[bytes, bytes], Awaitable[None]]) -> None:
        """``keep(before, after)`` runs when a re-ask appended cosignatures to a head."""
        self.origin.on_cosigned = keep

    async def close(self) -> None:
        """Stop the origin's background re-asks."""
        await self.origin.close()

    async def admit_head(self, note: bytes, now_ms: int, heads: HeadCache) -> None:
        """Refuse a delivered head without the policy's quorum (no policy: admit all).

        A refused head that the origin did sign, and that conflicts with a head
        this holder holds (same compaction, another tree), is still signed
        misbehaviour: kept as ``split_view`` evidence before the refusal. A
        missing quorum alone accuses no one.
        """
        try:
            self.gate.admit(note, now_ms)
        except HeadRefused:
            await self._refused_conflict(note, heads, now_ms)
            raise

    async def _refused_conflict(self, note: bytes, heads: HeadCache, now_ms: int) -> None:
        try:
            head = open_head(note)
        except ContractError:
            return
        other = heads.conflicting(head)
        if other is None:
            return
        try:
            evidence = split_view_evidence(other, head, reported_at=now_ms)
        except ContractError:
            return
        log.warning("split_view_on_refused_head", origin=evidence.accused[:16])
        await self._keep(evidence.accused, evidence.to_bytes())
