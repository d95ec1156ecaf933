"""Fault modes a node can be started in, for tests and experiments — and all they do.

A faulty node is a real node that misbehaves in exactly one way when it is
asked to serve (``Serve.Demand``/``DemandStream``); everything else it does
faithfully, so the misbehaviour is the only thing a holder can attribute.

==============  ============================================================
mode            what the node does on a demand                 holder sees
==============  ============================================================
``none``        serves faithfully                              served
``refuse``      signs a refusal (reason ``refused``) before    refused (proof)
                ``serve_until``
``tamper``      serves the hops with one byte flipped, in a    bad_data (proof)
                receipt it signs
``equivocate``  at commit, also signs a second commitment for  equivocation
                the same fold key with another root (for a     (proof);
                compaction: a second head of the same seq),    split_view
                serves that one's hops                         (proof)
``slow``        answers after ``fault_delay_ms``               served if within
                                                               the deadline,
                                                               else unanswered
``drop``        never answers (holds the call until the       unanswered,
                caller's deadline cancels it)                  witness-confirmed
``crash``       exits the process as soon as a demand arrives  unanswered
==============  ============================================================

Each mode is one class below (:class:`Refuse`, :class:`Tamper`, …), and
:meth:`FaultPlan.behaviour` picks it with an exhaustive ``match``: a mode
added to :class:`FaultMode` without a class fails the type check. The node's
origin role (:mod:`nodes.origin_log`, :mod:`nodes.origin`) is the honest origin; it calls a
:class:`Behaviour` at the three points a fault can act — before serving
(:meth:`~Behaviour.before_serving`), after a fold is committed
(:meth:`~Behaviour.after_commit`) and when answering one demand
(:meth:`~Behaviour.answer`, ``None`` meaning "answer honestly"; and
:meth:`~Behaviour.unsigned_hops` for an unsigned first ask, whose answer is
never evidence: a fault that lies there is caught by the holder's signed
re-ask) — and has no branch of its own on the mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, assert_never

import structlog

from contracts.head_note import SignedHead
from contracts.heads import FoldProof, FoldRecord, build_head, verify_fold
from contracts.identity import Identity
from contracts.merkle import MerkleTree, leaf_hash, merkle_root
from contracts.serve import answer_demand, build_commitment, sign_served
from contracts.signed import Signed, sign_statement
from contracts.statements import (
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
)
from nodes.messages import Answer, select_hops

# nodes.logging imports nodes.config, which imports this module: log through structlog.
log = structlog.get_logger(module=__name__)

if TYPE_CHECKING:  # the store (aiosqlite, grpc status codes) is not needed to name a mode
    from nodes.store import CompactionInput

__all__ = [
    "CRASH_EXIT_CODE",
    "Behaviour",
    "Crash",
    "Drop",
    "Equivocate",
    "FaultAnswer",
    "FaultMode",
    "FaultPlan",
    "Honest",
    "Refuse",
    "Resolve",
    "Slow",
    "Tamper",
    "tamper_bytes",
]

#: Exit status of a node that crashed on purpose (``crash`` mode).
CRASH_EXIT_CODE = 70


class FaultMode(StrEnum):
    NONE = "none"
    REFUSE = "refuse"
    TAMPER = "tamper"
    EQUIVOCATE = "equivocate"
    SLOW = "slow"
    DROP = "drop"
    CRASH = "crash"


def _exit_now() -> None:
    # os._exit, not sys.exit: a crash must not run cleanup, flush or shutdown.
    os._exit(CRASH_EXIT_CODE)


def tamper_bytes(data: bytes) -> bytes:
    """The same hop with its last byte flipped: still well-formed length, wrong hash."""
    if not data:
        return b"\x00"
    return data[:-1] + bytes([data[-1] ^ 0x01])


#: Resolves the stored bytes of the demanded fold (None: not resolvable now).
Resolve = Callable[[], Awaitable[tuple[bytes, ...] | None]]


@dataclass(frozen=True, slots=True)
class FaultAnswer:
    """A faulty answer to one demand; ``served`` says which counter it counts as."""

    answer: Answer
    served: bool


class Behaviour:
    """The honest behaviour at every point a fault can act; each fault overrides one."""

    async def before_serving(self, peer: Callable[[], str]) -> None:
        """Returns when (and if) the node should answer the call (``peer()``: the
        holder the call's first demand names, for the log)."""

    def after_commit(
        self,
        commitment_digest: str,
        *,
        epoch: str,
        value_ref: str,
        fold_seq: int,
        hops: Sequence[bytes],
        issued_at: int,
        provenance_pending: bool,
    ) -> None:
        """Called once a fold is durably committed (and before it is returned)."""

    def after_compaction(
        self,
        head: SignedHead,
        records: Sequence[bytes],
        folds: Sequence[CompactionInput],
    ) -> None:
        """Called once a compaction's head is durably committed (and before it is returned)."""

    async def answer(
        self,
        demand: Signed[Demand],
        obligation: Signed[Obligation],
        commitment: Signed[Commitment],
        commitment_bytes: bytes,
        resolve: Resolve,
        now_ms: int,
    ) -> FaultAnswer | None:
        """A faulty answer to a checked demand, or ``None`` to answer honestly."""
        return None

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        """The hops an unsigned ask for a fold whose stored bytes are ``leaves`` is
        answered with (``()``: none, "ask signed"). Whatever a fault answers here
        is never evidence: the holder re-asks signed (design revision 3)."""
        return leaves


class Honest(Behaviour):
    """``none``: serves faithfully."""


@dataclass(slots=True)
class Refuse(Behaviour):
    """``refuse``: a signed refusal before ``serve_until`` (a ``refused`` proof)."""

    identity: Identity

    async def answer(
        self,
        demand: Signed[Demand],
        obligation: Signed[Obligation],
        commitment: Signed[Commitment],
        commitment_bytes: bytes,
        resolve: Resolve,
        now_ms: int,
    ) -> FaultAnswer | None:
        receipt = sign_statement(
            self.identity,
            Receipt(
                origin=self.identity.node_id,
                obligation=obligation.digest,
                commitment=commitment.digest,
                demand=demand.digest,
                nonce=demand.statement.nonce,
                status=ReceiptStatus.REFUSED,
                reason=RefusalReason.OTHER,
                tree_size=commitment.statement.leaf_count,
                issued_at=now_ms,
            ),
        )
        return FaultAnswer(Answer(receipt.to_bytes(), commitment_bytes), served=False)

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        return ()  # the refusal comes signed, to the signed re-ask


@dataclass(slots=True)
class Tamper(Behaviour):
    """``tamper``: altered hop bytes in a receipt the origin signs.

    The holder then holds signed hashes that miss the committed root
    (``bad_data``). A fold that cannot be resolved is answered honestly.
    """

    identity: Identity

    async def answer(
        self,
        demand: Signed[Demand],
        obligation: Signed[Obligation],
        commitment: Signed[Commitment],
        commitment_bytes: bytes,
        resolve: Resolve,
        now_ms: int,
    ) -> FaultAnswer | None:
        leaves = await resolve()
        if leaves is None:
            return None
        altered = [tamper_bytes(leaf) for leaf in leaves]
        receipt = sign_served(
            self.identity,
            demand,
            obligation=obligation,
            commitment=commitment,
            hops=altered,
            now=now_ms,
        )
        served = select_hops(altered, demand.statement.leaves)
        return FaultAnswer(Answer(receipt.to_bytes(), commitment_bytes, served), served=True)

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        return tuple(tamper_bytes(leaf) for leaf in leaves)


@dataclass(frozen=True, slots=True)
class _Equivocal:
    """The second commitment signed for a fold, and its hops.

    Head form: ``commitment`` and ``obligation`` are the stand-ins of the fold
    under the second head, and ``sent`` that head's envelope.
    """

    commitment: Signed[Commitment]
    leaves: tuple[bytes, ...]
    obligation: Signed[Obligation] | None = None
    sent: bytes = b""


@dataclass(slots=True)
class Equivocate(Behaviour):
    """``equivocate``: a second commitment per fold (other root), served instead."""

    identity: Identity
    _second: dict[str, _Equivocal] = field(default_factory=dict)

    def after_commit(
        self,
        commitment_digest: str,
        *,
        epoch: str,
        value_ref: str,
        fold_seq: int,
        hops: Sequence[bytes],
        issued_at: int,
        provenance_pending: bool,
    ) -> None:
        alt_leaves = tuple(tamper_bytes(h) for h in hops)
        alt = build_commitment(
            self.identity,
            epoch=epoch,
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=alt_leaves,
            issued_at=issued_at,
            provenance_pending=provenance_pending,
        )
        self._second[commitment_digest] = _Equivocal(alt, alt_leaves)

    def after_compaction(
        self,
        head: SignedHead,
        records: Sequence[bytes],
        folds: Sequence[CompactionInput],
    ) -> None:
        # A second head for the same (epoch, seq) over records of altered hops:
        # a split view. Each fold is answered from it instead.
        h = head.statement
        alt_leaves = [tuple(tamper_bytes(x.hop_bytes) for x in f.hops) for f in folds]
        alt_records = [
            FoldRecord(
                value_ref=f.value_ref,
                fold_seq=f.fold_seq,
                leaf_count=len(leaves),
                root=merkle_root(leaves).hex(),
                prev=FoldRecord.from_bytes(r).prev,
            ).to_bytes()
            for r, f, leaves in zip(records, folds, alt_leaves, strict=True)
        ]
        alt_head = build_head(
            self.identity,
            epoch=h.epoch,
            seq=h.seq,
            records=alt_records,
            log_root=bytes.fromhex(h.log_root),
            serve_until=h.serve_until,
            deadline_ms=h.deadline_ms,
            endpoints=h.endpoints,
            issued_at=h.issued_at,
            pending=h.pending,
        )
        tree = MerkleTree.from_leaves(alt_records)
        for index, (record, alt, leaves) in enumerate(
            zip(records, alt_records, alt_leaves, strict=True)
        ):
            proof = FoldProof(alt_head.digest, index, tree.proof(index), alt)
            fold = verify_fold(proof, alt_head)
            self._second[leaf_hash(record).hex()] = _Equivocal(
                fold.commitment, leaves, fold.obligation, alt_head.to_bytes()
            )

    async def answer(
        self,
        demand: Signed[Demand],
        obligation: Signed[Obligation],
        commitment: Signed[Commitment],
        commitment_bytes: bytes,
        resolve: Resolve,
        now_ms: int,
    ) -> FaultAnswer | None:
        second = self._second.get(commitment.digest)
        if second is None:  # a fold committed before this run: served honestly
            return None
        if second.obligation is not None:
            # Head form: a receipt under the second head; the answer carries that head.
            receipt = sign_served(
                self.identity,
                demand,
                obligation=second.obligation,
                commitment=second.commitment,
                hops=second.leaves,
                now=now_ms,
            )
            served = select_hops(second.leaves, demand.statement.leaves)
            return FaultAnswer(Answer(receipt.to_bytes(), second.sent, served), served=True)
        receipt = answer_demand(
            self.identity,
            demand,
            obligation=obligation,
            commitment=second.commitment,
            hops=second.leaves,
            now=now_ms,
        )
        served = select_hops(second.leaves, demand.statement.leaves)
        return FaultAnswer(
            Answer(receipt.to_bytes(), second.commitment.to_bytes(), served), served=True
        )

    def unsigned_hops(self, commitment_digest: str, leaves: tuple[bytes, ...]) -> tuple[bytes, ...]:
        second = self._second.get(commitment_digest)
        return leaves if second is None else second.leaves


@dataclass(slots=True)
class Slow(Behaviour):
    """``slow``: answers after ``delay_ms``."""

    delay_ms: int

    async def before_serving(self, peer: Callable[[], str]) -> None:
        await asyncio.sleep(self.delay_ms / 1000.0)


class Drop(Behaviour):
    """``drop``: never answers; the caller's deadline cancels the call."""

    async def before_serving(self, peer: Callable[[], str]) -> None:
        log.info("demand_dropped", peer=peer(), fault="drop")
        await asyncio.Event().wait()


@dataclass(slots=True)
class Crash(Behaviour):
    """``crash``: exits the process as soon as a demand arrives."""

    crash: Callable[[], None]

    async def before_serving(self, peer: Callable[[], str]) -> None:
        log.warning("crash_fault", peer=peer(), fault="crash", exit_code=CRASH_EXIT_CODE)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()  # the log line, not node state: a crash still skips cleanup
        self.crash()
        # An injected crash hook that returns: behave as a dead peer would.
        await asyncio.Event().wait()


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The fault a node runs with; ``crash`` is injectable so in-process tests survive it."""

    mode: FaultMode = FaultMode.NONE
    delay_ms: int = 0
    crash: Callable[[], None] = field(default=_exit_now, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.delay_ms < 0:
            raise ValueError(f"fault delay must be >= 0 ms, got {self.delay_ms}")
        if self.mode is FaultMode.SLOW and self.delay_ms == 0:
            raise ValueError("fault mode 'slow' needs a delay > 0 ms")

    def behaviour(self, identity: Identity) -> Behaviour:
        """What a node signing as ``identity`` does under this plan."""
        match self.mode:
            case FaultMode.NONE:
                return Honest()
            case FaultMode.REFUSE:
                return Refuse(identity)
            case FaultMode.TAMPER:
                return Tamper(identity)
            case FaultMode.EQUIVOCATE:
                return Equivocate(identity)
            case FaultMode.SLOW:
                return Slow(self.delay_ms)
            case FaultMode.DROP:
                return Drop()
            case FaultMode.CRASH:
                return Crash(self.crash)
            case _:
                assert_never(self.mode)
