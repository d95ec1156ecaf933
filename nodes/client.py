"""The holder's client: demand folded hops, verify them, name the origin that fails.

:class:`Holder` is what a node runs when it rehydrates a value it holds (and
what the benchmark and drivers use directly). Per decision:

1. commitments/obligations of the value are grouped by origin; hops already
   verified for a commitment are taken from an immutable cache (keyed by
   commitment digest — a commitment names its bytes for good);
2. an obligation already past ``serve_until`` is not demanded (EXPIRED, no
   evidence: S3);
3. **one** ``Serve.Demand`` call per origin carries a signed demand for every
   fold of that origin, with the deadline the obligation promises (a fold of
   more than ``stream_leaves`` hops is demanded over ``Serve.DemandStream``
   instead, one call of its own, so no message nears the size bound);
4. each answer is judged by :func:`contracts.evidence.judge_answer`: served
   (hops verified: one signature + the Merkle root), legitimate non-answer
   (PENDING, EXPIRED), or a proof — ``bad_data`` / ``refused``; an answer
   naming another commitment for the same fold, signed by the origin, is
   ``equivocation``;
5. no answer by the deadline: the same demands are re-asked ``reasks``
   times; still nothing → ``unanswered`` (a suspicion). Witnesses then
   re-issue demands of their own (``Evidence.Challenge``); their signed
   reports confirm the suspicion, and any receipt the origin gives one of
   them clears it (S4). Silence is never proof.

Evidence that accuses is written as a standalone file (``provnet evidence
verify FILE``) under ``evidence_dir`` and handed to ``on_evidence``.
Unsigned error statuses from an origin are never evidence: a malformed-request
answer (``INVALID_ARGUMENT`` …) is ``rejected`` (our fault or unattributable),
``FAILED_PRECONDITION`` is the origin saying the obligation expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import assert_never

from contracts._lru import BoundedCache
from contracts.ask import MAX_OPEN_LEAVES, FoldAsk, pack_asks, reproduces_fold
from contracts.batch import (
    DEMAND_BATCH_TYPE,
    RECEIPT_BATCH_TYPE,
    decode_receipt_batch,
    sign_demand_batch,
)
from contracts.canonical import sha256_hex
from contracts.custody import CustodyFold, open_fold, split_custody_bundle
from contracts.envelope import Envelope, EnvelopeSigner
from contracts.errors import ContractError, NotEvidence
from contracts.evidence import (
    BUSY_STATUS,
    AnswerKind,
    Evidence,
    EvidenceStatus,
    cite_head,
    equivocation_evidence,
    judge_answer,
    split_view_evidence,
    unanswered_evidence,
    verify_evidence,
)
from contracts.head_note import SignedHead, is_head_note, open_head
from contracts.heads import FoldProof, HeadCache, VerifiedFold, verify_fold
from contracts.identity import Identity
from contracts.lazy import judge_fold_answer, served_batch_without_signature
from contracts.merkle import KnownRoots
from contracts.rules import demand_due_ms, expired, promise_refusal
from contracts.serve import build_demand, new_nonce, verify_delivery
from contracts.signed import Signed, open_statement, parse_statement, sign_statement
from contracts.statements import (
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    WitnessOutcome,
    WitnessReport,
)
from nodes._disk import disk_full, is_disk_full
from nodes.errors import ClockSkew, MalformedRequest, PromiseOutOfRange
from nodes.logging import get_logger
from nodes.loopclock import loop_time
from nodes.messages import (
    EVIDENCE_KINDS,
    Answer,
    ChallengeResult,
    OriginOutcome,
    Outcome,
    RehydrationReport,
    VerifiedHop,
    outcome_for,
)
from nodes.noanswer import Reply
from nodes.transport import CallFailed, Transport

__all__ = [
    "DEFAULT_STREAM_LEAVES",
    "EVIDENCE_KINDS",
    "SIGNED_FIRST_S",
    "HeldFold",
    "Holder",
    "OriginOutcome",
    "Outcome",
    "RehydrationReport",
    "VerifiedHop",
    "challenged_obligation",
    "verify_evidence_file",
]

log = get_logger(__name__)

_CACHE_FOLDS = 4096
#: Folds with more leaves than this are demanded over ``Serve.DemandStream``
#: (one call each) so no single message nears the size bound.
DEFAULT_STREAM_LEAVES = 4096
#: Time kept back from a caller's budget so a reply can still travel back.
_MARGIN_S = 0.05
#: Statuses a holder asks again after (a node restarting, a store briefly
#: unavailable); if they last, the origin answered them (nodes.noanswer: a
#: status, not silence).
_TRANSIENT = frozenset({"NOT_FOUND", "INTERNAL"})
#: How long an origin whose unsigned answer failed (other bytes, none, an error, no
#: answer in time) is asked signed first: one lying origin costs a holder one extra
#: round trip per this long, not one per demand.
SIGNED_FIRST_S = 300.0
#: Origins remembered as signed-first at once (the oldest forgotten first).
_SIGNED_FIRST_ORIGINS = 4096
#: How an origin refuses a demand dated outside its clock's skew window
#: (:class:`nodes.errors.ClockSkew`): an answer about clocks, never "unanswered".
_SKEW_CODE = "OUT_OF_RANGE"


@functools.lru_cache(maxsize=4096)
def _packed_ask(head_digest: str, leaf_hash: bytes) -> bytes:
    """One fold's unsigned ask (:data:`contracts.ask.ASK_LAYOUT`), packed once per fold."""
    return pack_asks([FoldAsk(head_digest, leaf_hash.hex())])


def _severity(outcome: Outcome) -> int:
    """How bad an outcome is; the worst fold of an origin is its outcome."""
    match outcome:
        case Outcome.SERVED:
            return 0
        case Outcome.PENDING | Outcome.EXPIRED:
            return 1
        case Outcome.REJECTED | Outcome.UNATTRIBUTABLE:
            return 2
        case Outcome.UNANSWERED | Outcome.BUSY:
            return 3
        case Outcome.REFUSED:
            return 4
        case Outcome.BAD_DATA | Outcome.EQUIVOCATION | Outcome.SPLIT_VIEW:
            return 5
        case _:
            assert_never(outcome)


def _fold_severity(fold: _Fold) -> int:
    return _severity(fold.outcome)


@dataclass(frozen=True, slots=True)
class HeldFold:
    """A verified commitment + obligation pair, with the exact bytes it arrived as.

    Head form (``fold`` set): ``commitment`` and ``obligation`` are the fold's
    stand-ins (:attr:`contracts.heads.VerifiedFold.commitment`, ``.obligation``:
    digests = record leaf hash and head digest), ``commitment_bytes`` the fold
    proof and ``obligation_bytes`` the signed head. Answers are then judged
    lazily (:func:`contracts.lazy.judge_fold_answer`).
    """

    commitment: Signed[Commitment]
    obligation: Signed[Obligation]
    commitment_bytes: bytes
    obligation_bytes: bytes
    fold: VerifiedFold | None = None


@dataclass(slots=True)
class _Fold:
    """One commitment + obligation of a value, and what happened to it this decision."""

    held: HeldFold
    demand: Signed[Demand] | None = None
    #: ``demand``'s envelope bytes when they were made with it (b"": ask ``demand``).
    demand_bytes: bytes = b""
    outcome: Outcome = Outcome.UNANSWERED
    detail: str = ""
    #: The served hops and their leaf indices (``range`` for a whole fold).
    hops: tuple[bytes, ...] = ()
    leaves: Sequence[int] = ()
    evidence: Evidence | None = None


@dataclass(slots=True)
class _OriginRun:
    origin: str
    folds: list[_Fold]
    asks: int = 0
    rpcs: int = 0
    witnesses_asked: int = 0
    witnesses_unanswered: int = 0
    witness_confirmed: bool = False
    cleared: bool = False
    extra: list[str] = field(default_factory=list)
    #: (receipt, the demand envelope it answers) for every attributable answer.
    receipts: list[tuple[bytes, bytes]] = field(default_factory=list)


def _demand_bytes(fold: _Fold, *, batch: bool = False) -> bytes:
    """The demand envelope asked for ``fold`` (the batch's, for a fold of a batch)."""
    if fold.demand_bytes and not batch:
        return fold.demand_bytes
    return fold.demand.to_bytes() if fold.demand is not None else b""


EvidenceSink = Callable[[str, str, bytes, str], Awaitable[None]]
#: Called with (origin, receipt bytes, the demand envelope it answers) for every
#: receipt the origin signed.
ReceiptSink = Callable[[str, bytes, bytes], Awaitable[int]]


def verify_evidence_file(data: bytes, *, now_ms: int) -> tuple[str, str]:
    """(kind, accused) of evidence that verifies and accuses; ``NotEvidence`` otherwise."""
    verdict = verify_evidence(data, now=now_ms)
    if not verdict.accuses:
        raise NotEvidence(f"evidence against {verdict.accused[:16]}… was cleared: {verdict.reason}")
    return verdict.kind.value, verdict.accused


class Holder:
    """Rehydrates held values from their origins (see module docstring)."""

    def __init__(
        self,
        identity: Identity,
        transport: Transport,
        *,
        evidence_dir: Path | None = None,
        clock: Callable[[], float] | None = None,
        reasks: int = 1,
        resolve_address: Callable[[str], str] | None = None,
        on_evidence: EvidenceSink | None = None,
        on_receipt: ReceiptSink | None = None,
        cache: bool = True,
        stream_leaves: int = DEFAULT_STREAM_LEAVES,
        min_witnesses: int = 1,
        batch: bool = True,
        suspected: Callable[[str], bool] | None = None,
        unsigned_first: bool = True,
    ) -> None:
        if reasks < 0:
            raise ValueError(f"reasks must be >= 0, got {reasks}")
        if min_witnesses < 1:
            raise ValueError(f"min_witnesses must be >= 1, got {min_witnesses}")
        self.min_witnesses = min_witnesses
        self.identity = identity
        self.transport = transport
        self.evidence_dir = evidence_dir
        self.clock: Callable[[], float] = clock if clock is not None else time.time
        self.reasks = reasks
        self._resolve = resolve_address if resolve_address is not None else (lambda a: a)
        self._on_evidence = on_evidence
        self._on_receipt = on_receipt
        self._use_cache = cache
        #: Origins with a standing suspicion here: their folds are asked again, not
        #: taken from the cache, so the origin's answer can clear it (a cached copy
        #: never would).
        self._suspected = suspected
        self.stream_leaves = stream_leaves
        #: Demand folds under heads with one signed demand naming them all, per origin;
        #: False: one signed demand per fold (several demands in one call).
        self.batch = batch
        self._cache: BoundedCache[str, tuple[bytes, ...]] = BoundedCache(_CACHE_FOLDS)
        #: Roots whole folds were seen to reproduce, with their bytes: a fold served
        #: again in the same bytes is compared with them, not hashed again (the
        #: outcome is the same; with or without ``cache``).
        self._known_roots = KnownRoots()
        #: Signs this holder's demands from a template (made on first use).
        self._batch_signer: EnvelopeSigner | None = None
        self.demand_rpcs = 0
        #: Ask folds under verified heads unsigned first (design revision 3); False:
        #: every demand signed (what an origin that cannot read an ask gets anyway,
        #: after its first refusal of one).
        self.unsigned_first = unsigned_first
        #: Origins whose unsigned answer failed → until when (holder clock, s) they
        #: are asked signed first (bounded, oldest forgotten).
        # origin -> until when it is asked signed first (the oldest forgotten first)
        self._signed_first: BoundedCache[str, float] = BoundedCache(_SIGNED_FIRST_ORIGINS)
        self.unsigned_asks = 0

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ----------------------------------------------------------------- rehydrate

    async def rehydrate(
        self,
        value_ref: str,
        folds: Sequence[HeldFold],
        *,
        witnesses: Sequence[str] = (),
        deadline: float | None = None,
    ) -> RehydrationReport:
        """Demand every fold of a value from its origins; one Serve RPC per origin."""
        runs: dict[str, _OriginRun] = {}
        for held in folds:
            origin = held.commitment.statement.origin
            run = runs.get(origin)
            if run is None:
                run = runs[origin] = _OriginRun(origin, [])
            run.folds.append(_Fold(held))
        if len(runs) == 1:  # the common case: one origin, no task needed
            (run,) = runs.values()
            outcome, served = await self._run_origin(run, witnesses, deadline)
            return RehydrationReport(value_ref, (outcome,), tuple(served), run.rpcs, run.asks)
        results = await asyncio.gather(
            *(self._run_origin(run, witnesses, deadline) for run in runs.values())
        )
        outcomes = tuple(r[0] for r in results)
        hops = tuple(h for r in results for h in r[1])
        rpcs = sum(run.rpcs for run in runs.values())
        demand_rpcs = sum(run.asks for run in runs.values())
        return RehydrationReport(value_ref, outcomes, hops, rpcs, demand_rpcs)

    async def _run_origin(
        self, run: _OriginRun, witnesses: Sequence[str], deadline: float | None
    ) -> tuple[OriginOutcome, list[VerifiedHop]]:
        now_ms = self.now_ms()
        to_ask: list[_Fold] = []
        use_cache = self._use_cache and not (
            self._suspected is not None and self._suspected(run.origin)
        )
        for fold in run.folds:
            cached = self._cache.get(fold.held.commitment.digest) if use_cache else None
            if cached is not None:
                fold.outcome, fold.detail = Outcome.SERVED, "verified earlier (cache)"
                fold.hops, fold.leaves = cached, range(len(cached))
            elif expired(fold.held.obligation.statement.serve_until, now_ms):
                fold.outcome = Outcome.EXPIRED
                fold.detail = f"obligation {fold.held.obligation.digest[:12]}… past serve_until"
            else:
                to_ask.append(fold)
        if to_ask:
            await self._ask(run, to_ask, deadline)
            unanswered = [f for f in to_ask if f.outcome is Outcome.UNANSWERED]
            busy = [f for f in to_ask if f.outcome is Outcome.BUSY]
            if unanswered or busy:
                # Silence if any fold met it; a busy record only if the origin was
                # busy and nothing else (nodes.noanswer).
                first = unanswered[0] if unanswered else busy[0]
                status = "" if unanswered else BUSY_STATUS
                await self._suspect(run, first, witnesses, deadline, status=status)
                for other in (*unanswered, *busy):
                    if other is not first:
                        other.evidence = None  # one suspicion per origin per decision
        if self._on_receipt is not None:
            # A later signed receipt of the origin clears what we suspected it of.
            for receipt, demand in run.receipts:
                await self._on_receipt(run.origin, receipt, demand)
        worst = run.folds[0] if len(run.folds) == 1 else max(run.folds, key=_fold_severity)
        evidence, record = self._evidence(run, worst)
        path = ""
        if record:
            path = await self.record_evidence(worst.outcome, run.origin, evidence)
        # The summary itself waits for nothing: a plain call, not one more coroutine.
        return self._summarise(run, worst, evidence, path)

    def _address(self, obligation: Signed[Obligation]) -> str:
        endpoints = obligation.statement.endpoints
        if not endpoints:
            raise CallFailed("UNAVAILABLE", "obligation lists no endpoint", "")
        try:
            return self._resolve(endpoints[0])
        except ValueError as exc:
            reason = f"cannot resolve endpoint: {exc}"
            raise CallFailed("UNAVAILABLE", reason, endpoints[0]) from exc

    @staticmethod
    def _promised(folds: Sequence[_Fold]) -> float:
        """Seconds the origin promised to answer ``folds`` in (the longest deadline)."""
        if len(folds) == 1:
            return folds[0].held.obligation.statement.deadline_ms / 1000.0
        return max(f.held.obligation.statement.deadline_ms for f in folds) / 1000.0

    @staticmethod
    def _bounded(promised: float, deadline: float | None) -> float:
        """``promised`` seconds, but never past the caller's ``deadline``."""
        if deadline is None:
            return promised
        return max(0.001, min(promised, deadline - loop_time() - _MARGIN_S))

    async def _ask(self, run: _OriginRun, folds: list[_Fold], deadline: float | None) -> None:
        """Unsigned first where it may end the rehydration, then signed for the rest.

        Folds under verified heads, small enough not to stream, of an origin not
        asked signed-first, are asked unsigned (:meth:`_ask_unsigned`); whatever that
        leaves unserved is demanded signed (:meth:`_ask_signed`), exactly as if no
        unsigned ask had been made: the signed demand's own time, nonce and deadline.
        """
        if self.unsigned_first and not self._signed_first_now(run.origin):
            # packed ask -> its fold, in order: a fold held twice is asked once, the copy
            # signed; the keys are the ask's bytes, packed once per fold
            asked: dict[bytes, _Fold] = {}
            most = min(self.stream_leaves, MAX_OPEN_LEAVES)
            for f in folds:
                vf = f.held.fold
                if vf is None or vf.record.leaf_count > most:
                    continue
                asked.setdefault(_packed_ask(vf.head.digest, vf.leaf_hash), f)
            if asked:
                open_folds = list(asked.values())
                left = await self._ask_unsigned(run, open_folds, b"".join(asked), deadline)
                if left or len(open_folds) != len(folds):
                    served = {id(f) for f in open_folds} - {id(f) for f in left}
                    folds = [f for f in folds if id(f) not in served]
                else:
                    return
                if not folds:
                    return
        await self._ask_signed(run, folds, deadline)

    def _signed_first_now(self, origin: str) -> bool:
        """Whether ``origin`` is asked signed first: its unsigned answer failed within the
        last :data:`SIGNED_FIRST_S`, or a suspicion of it stands (only a signed receipt
        can clear one)."""
        if self._suspected is not None and self._suspected(origin):
            return True
        until = self._signed_first.peek(origin)
        if until is None:
            return False
        if self.clock() < until:
            return True
        self._signed_first.pop(origin)
        return False

    def _ask_signed_first(self, origin: str, why: str) -> None:
        """Remember that ``origin``'s unsigned answer failed (bounded: the oldest forgotten)."""
        self._signed_first.put(origin, self.clock() + SIGNED_FIRST_S)
        log.info(
            "unsigned_answer_failed", origin=origin[:16], why=why, signed_first_s=SIGNED_FIRST_S
        )

    async def _ask_unsigned(
        self, run: _OriginRun, folds: list[_Fold], asks: bytes, deadline: float | None
    ) -> list[_Fold]:
        """One unsigned ask (:mod:`contracts.ask`) for ``folds``, whose packed asks are
        ``asks`` (in order); the folds it left unserved.

        A fold is served when the hops answered reproduce the root proven under the
        head this holder verified (:func:`contracts.ask.reproduces_fold`): the
        committed bytes, whoever sent them, so no signature decides anything. Any
        other answer — other bytes, none, an error status, no answer in time — is
        never evidence and accuses nobody: the fold is demanded signed, and the
        origin is asked signed first for a while (:meth:`_ask_signed_first`).
        """
        try:
            address = self._address(folds[0].held.obligation)
        except CallFailed:
            return folds  # the signed path says why, as it would have
        run.asks += 1
        run.rpcs += 1
        self.demand_rpcs += 1
        self.unsigned_asks += 1
        timeout = self._bounded(self._promised(folds), deadline)
        if deadline is not None:
            # At most half of what the caller left: the signed demand any failure here
            # leads to must still get its own ask in time.
            timeout = min(timeout, max(0.001, (deadline - loop_time() - _MARGIN_S) / 2))
        try:
            answers = await self.transport.ask(address, asks, timeout)
        except CallFailed as exc:
            self._ask_signed_first(run.origin, f"{exc.code}: {exc.message[:200]}")
            return folds
        if len(answers) != len(folds):
            self._ask_signed_first(run.origin, f"{len(answers)} answers for {len(folds)} folds")
            return folds
        left: list[_Fold] = []
        for fold, answer in zip(folds, answers, strict=True):
            vf = fold.held.fold
            if vf is not None and reproduces_fold(answer.hops, vf, self._known_roots):
                hops = tuple(answer.hops)
                fold.outcome, fold.hops, fold.leaves = Outcome.SERVED, hops, range(len(hops))
                fold.detail = (
                    f"served {len(hops)} hop(s) unsigned, reproducing the root under head"
                    f" {vf.head.digest[:12]}…"
                )
                self._remember(fold.held.commitment.digest, hops)
            else:
                left.append(fold)
        if left:
            self._ask_signed_first(
                run.origin, f"{len(left)} of {len(folds)} unsigned answer(s) do not reproduce"
            )
        return left

    async def _ask_signed(
        self, run: _OriginRun, folds: list[_Fold], deadline: float | None
    ) -> None:
        """One ``Serve.Demand`` for every ordinary fold; a huge fold streams on its own.

        Folds under signed heads that need no stream are demanded with ONE
        signed demand naming them all (:mod:`contracts.batch`) and answered with
        one signed receipt; any other fold with a demand of its own.
        """
        if (
            self.batch
            and all(
                f.held.fold is not None
                and f.held.commitment.statement.leaf_count <= self.stream_leaves
                for f in folds
            )
            # a batch names each fold once; the same fold held twice is asked per fold
            and len({(f.held.obligation.digest, f.held.commitment.digest) for f in folds})
            == len(folds)
        ):
            await self._ask_batch(run, folds, deadline)
            return
        self._new_demands(folds)
        try:
            address = self._address(folds[0].held.obligation)
        except CallFailed as exc:
            for fold in folds:
                fold.outcome, fold.detail = Outcome.UNANSWERED, str(exc)
            return
        small = [f for f in folds if f.held.commitment.statement.leaf_count <= self.stream_leaves]
        large = [f for f in folds if f.held.commitment.statement.leaf_count > self.stream_leaves]
        groups: list[tuple[list[_Fold], bool]] = [(small, False)] if small else []
        groups += [([fold], True) for fold in large]
        if len(groups) == 1:  # the common case: no task needed
            await self._ask_group(run, address, groups[0][0], groups[0][1], deadline)
            return
        await asyncio.gather(
            *(self._ask_group(run, address, group, stream, deadline) for group, stream in groups)
        )

    def _new_demands(self, folds: list[_Fold]) -> None:
        """A fresh signed demand for every fold on its own (the whole fold), and its bytes."""
        now_ms = self.now_ms()
        for fold in folds:
            obligation = fold.held.obligation
            envelope, batch, fold.demand_bytes = sign_demand_batch(
                self._signer(),
                [(obligation.statement, obligation.digest, None)],
                origin=obligation.statement.origin,
                nonce=new_nonce(),
                now=now_ms,
            )
            fold.demand = Signed(envelope, batch.demand(0))

    def _signer(self) -> EnvelopeSigner:
        signer = self._batch_signer
        if signer is None or signer.signs_as[0] != self.identity.node_id:
            signer = self._batch_signer = EnvelopeSigner(self.identity, DEMAND_BATCH_TYPE)
        return signer

    def _sign_batch(self, run: _OriginRun, folds: list[_Fold]) -> bytes:
        """One signed demand for ``folds`` (put in its order); each fold's ``demand``
        is its item, read as a demand inside the one envelope."""
        envelope, batch, data = sign_demand_batch(
            self._signer(),
            [(f.held.obligation.statement, f.held.obligation.digest, None) for f in folds],
            origin=run.origin,
            nonce=new_nonce(),
            now=self.now_ms(),
        )
        folds.sort(key=lambda f: (f.held.obligation.digest, f.held.commitment.digest))
        for index, fold in enumerate(folds):
            fold.demand = Signed(envelope, batch.demand(index))
        return data

    async def _ask_batch(self, run: _OriginRun, folds: list[_Fold], deadline: float | None) -> None:
        try:
            address = self._address(folds[0].held.obligation)
        except CallFailed as exc:
            for fold in folds:
                fold.outcome, fold.detail = Outcome.UNANSWERED, str(exc)
            return
        await self._ask_group(run, address, list(folds), False, deadline, batch=True)

    async def _ask_group(
        self,
        run: _OriginRun,
        address: str,
        folds: list[_Fold],
        stream: bool,
        deadline: float | None,
        *,
        batch: bool = False,
    ) -> None:
        if batch:
            demands = [self._sign_batch(run, folds)]
        else:
            demands = [f.demand_bytes or f.demand.to_bytes() for f in folds if f.demand is not None]
        answers: list[Answer] | None = None
        last_error = ""
        last_reply = Reply.SILENT  # no ask made (the caller's deadline): nothing came back
        # The origin has until this instant (the obligation's deadline) to answer;
        # re-asks after a fast failure are spread over that time.
        promised = self._promised(folds)
        due = loop_time() + promised
        asks = self.reasks + 1
        restarted = False
        only_aborted = True  # every reply so far ABORTED (or no ask made yet)
        for attempt in itertools.count():
            if attempt >= asks:
                break
            if deadline is not None and deadline - loop_time() <= _MARGIN_S:
                last_error = "caller's deadline reached before asking"
                break
            run.asks += 1
            run.rpcs += 1
            self.demand_rpcs += 1
            timeout = self._bounded(promised, deadline)
            try:
                if stream:
                    answers = [await self.transport.demand_stream(address, demands[0], timeout)]
                else:
                    answers = await self.transport.demand(address, demands, timeout)
                break
            except CallFailed as exc:
                last_error = f"{exc.code}: {exc.message}"
                if exc.code == "FAILED_PRECONDITION":
                    for fold in folds:
                        fold.outcome, fold.detail = Outcome.EXPIRED, last_error
                    return
                previous, last_reply = last_reply, exc.reply
                only_aborted = only_aborted and exc.code == "ABORTED"
                if last_reply is Reply.BUSY:
                    # Said it is overloaded: asked again at its appointment if that
                    # comes before the demand is due, else busy (never "silent").
                    log.info(
                        "demand_busy",
                        origin=run.origin[:16],
                        attempt=attempt,
                        error=last_error,
                        pushback_ms=exc.pushback_ms,
                    )
                    wait = (exc.pushback_ms or 0) / 1000.0
                    if attempt < asks - 1 and loop_time() + wait < due:
                        await self._pause(wait, deadline)
                        continue
                    break
                if last_reply is Reply.SILENT or exc.code in _TRANSIENT:
                    log.info(
                        "demand_unanswered",
                        origin=run.origin[:16],
                        attempt=attempt,
                        error=last_error,
                    )
                    left = asks - 1 - attempt
                    if left > 0:
                        await self._pause((due - loop_time()) / (left + 1), deadline)
                    continue
                if exc.code == "ALREADY_EXISTS" and attempt > 0:
                    # Our earlier ask arrived late; still no receipt in time: that ask's
                    # reply (silence, most often) is what the origin gave.
                    last_reply = previous
                    continue
                if exc.code == "ABORTED":
                    # The origin restarted after our demand was made: issue fresh ones.
                    # Its refusal says nothing of the demand, so what the origin gave
                    # before stays the reply; one restart buys one more ask (a second
                    # ABORTED for fresh demands needs a second restart meanwhile).
                    # With nothing before but ABORTED, that refusal is the reply: a
                    # status (the origin answered every ask), never silence.
                    last_reply = Reply.STATUS if only_aborted else previous
                    if not restarted:
                        restarted = True
                        asks += 1
                    if batch:
                        demands = [self._sign_batch(run, folds)]
                        continue
                    self._new_demands(folds)
                    demands = [f.demand_bytes for f in folds]
                    continue
                for fold in folds:
                    fold.outcome, fold.detail = Outcome.REJECTED, last_error
                return
        if answers is None:
            if (
                last_reply is Reply.STATUS
                and last_error.startswith("NOT_FOUND")
                and all(isinstance(f.held.fold, CustodyFold) for f in folds)
            ):
                # A custodian that says it does not know the statement its own key
                # signed (verified, unexpired) holds nothing it promised: no receipt
                # by the deadline, a suspicion like silence (docs/custody.md).
                last_reply = Reply.SILENT
            # One rule (nodes.noanswer): only silence is unanswered; an origin still
            # busy is busy; one that kept answering another status answered it.
            outcome = {
                Reply.SILENT: Outcome.UNANSWERED,
                Reply.BUSY: Outcome.BUSY,
                Reply.STATUS: Outcome.REJECTED,
            }[last_reply]
            for fold in folds:
                fold.outcome, fold.detail = outcome, last_error
            return
        if len(answers) != len(folds):
            for fold in folds:
                fold.outcome = Outcome.UNATTRIBUTABLE
                fold.detail = f"{len(answers)} answers for {len(folds)} demands"
            return
        reported_at = self.now_ms()
        if batch:
            self._judge_batch(run, folds, answers, reported_at)
            return
        for fold, answer in zip(folds, answers, strict=True):
            self._judge(fold, answer, reported_at)
            if fold.outcome is not Outcome.UNATTRIBUTABLE and answer.receipt:
                run.receipts.append((answer.receipt, _demand_bytes(fold)))

    def _judge_batch(
        self, run: _OriginRun, folds: list[_Fold], answers: list[Answer], reported_at: int
    ) -> None:
        """Answers to a demand batch: the first carries the one receipt batch, read once
        (its signature only where it decides, as for a single receipt); a fold's item
        is the one naming it (obligation, commitment), wherever it sits in the batch."""
        data = answers[0].receipt
        receipts: list[Signed[Receipt] | bytes] = [data] * len(folds)
        with contextlib.suppress(ContractError, ValueError):
            envelope = Envelope.from_bytes(data)
            if envelope.payload_type == RECEIPT_BATCH_TYPE:
                if self._served_batch(run, folds, answers, envelope.payload):
                    run.receipts.append((data, _demand_bytes(folds[0], batch=True)))
                    return
                items = {
                    (r.obligation, r.commitment): r
                    for r in decode_receipt_batch(envelope.payload).items
                }
                for i, fold in enumerate(folds):
                    d = fold.demand.statement if fold.demand is not None else None
                    item = None if d is None else items.get((d.obligation, d.commitment))
                    if item is not None:
                        receipts[i] = Signed(envelope, item)
        attributable = False
        for fold, answer, receipt in zip(folds, answers, receipts, strict=True):
            self._judge(fold, answer, reported_at, receipt)
            attributable = attributable or fold.outcome is not Outcome.UNATTRIBUTABLE
        if attributable and data:
            run.receipts.append((data, _demand_bytes(folds[0], batch=True)))

    def _served_batch(
        self, run: _OriginRun, folds: list[_Fold], answers: list[Answer], payload: bytes
    ) -> bool:
        """The hot path of a demand batch for whole folds under verified heads: the receipt
        batch is exactly the faithful one and every fold's hops reproduce its root
        (:func:`contracts.lazy.served_batch_without_signature`); then every fold is
        served, as :meth:`_judge` would find one by one. False: judge them one by one."""
        verified: list[VerifiedFold] = []
        for fold in folds:
            if (
                fold.held.fold is None
                or fold.demand is None
                or fold.demand.statement.leaves is not None
            ):
                return False
            verified.append(fold.held.fold)
        first = folds[0].demand
        if first is None or not served_batch_without_signature(
            payload,
            [a.hops for a in answers],
            origin=run.origin,
            demand=first.digest,
            nonce=first.statement.nonce,
            folds=verified,
            known=self._known_roots,
        ):
            return False
        for fold, answer, vf in zip(folds, answers, verified, strict=True):
            hops = tuple(answer.hops)
            fold.outcome = Outcome.SERVED
            fold.detail = (
                f"served {len(hops)} hop(s) reproducing the root under head {vf.head.digest[:12]}…"
            )
            fold.hops, fold.leaves = hops, range(len(hops))
            self._remember(fold.held.commitment.digest, hops)
        return True

    def _served_alone(self, answer: Answer, demand: Signed[Demand], fold: VerifiedFold) -> bool:
        """The hot path of a demand for one whole fold under a verified head: the receipt
        is exactly the faithful one and the hops reproduce the fold's root
        (:func:`contracts.lazy.served_batch_without_signature`, one fold)."""
        try:
            envelope = Envelope.from_bytes(answer.receipt)
        except (ContractError, ValueError):
            return False
        return envelope.payload_type == RECEIPT_BATCH_TYPE and served_batch_without_signature(
            envelope.payload,
            [answer.hops],
            origin=demand.statement.origin,
            demand=demand.digest,
            nonce=demand.statement.nonce,
            folds=[fold],
            known=self._known_roots,
        )

    def _judge(
        self,
        fold: _Fold,
        answer: Answer,
        reported_at: int,
        receipt: Signed[Receipt] | bytes | None = None,
    ) -> None:
        demand = fold.demand
        if demand is None:
            raise RuntimeError("judging an answer to a demand never made")
        if fold.held.fold is not None:
            # Head form: served bytes reproducing the root under the verified
            # head need no signature; the receipt is verified only when it decides.
            if (
                receipt is None
                and demand.statement.leaves is None
                and self._served_alone(answer, demand, fold.held.fold)
            ):
                # The faithful receipt, byte for byte (nothing to parse): served.
                hops = answer.hops
                fold.outcome, fold.hops, fold.leaves = Outcome.SERVED, hops, range(len(hops))
                fold.detail = (
                    f"served {len(hops)} hop(s) reproducing the root under head"
                    f" {fold.held.fold.head.digest[:12]}…"
                )
                self._remember(fold.held.commitment.digest, hops)
                return
            verdict = judge_fold_answer(
                answer.receipt if receipt is None else receipt,
                answer.hops,
                demand=demand,
                fold=fold.held.fold,
                reported_at=reported_at,
                known=self._known_roots,
            )
        else:
            verdict = judge_answer(
                answer.receipt,
                answer.hops,
                demand=demand,
                obligation=fold.held.obligation,
                commitment=fold.held.commitment,
                reported_at=reported_at,
            )
        fold.detail = verdict.reason
        if verdict.kind is AnswerKind.SERVED and verdict.served is not None:
            fold.outcome = Outcome.SERVED
            fold.hops, fold.leaves = verdict.served.hops, verdict.served.leaves
            if demand.statement.leaves is None:
                self._remember(fold.held.commitment.digest, verdict.served.hops)
            return
        if verdict.kind is AnswerKind.EVIDENCE and verdict.evidence is not None:
            fold.evidence = verdict.evidence
            fold.outcome = outcome_for(verdict.evidence.kind)
            return
        if verdict.kind is AnswerKind.LEGITIMATE:
            fold.outcome = self._legitimate(answer.receipt if receipt is None else receipt)
            return
        # Unattributable: maybe the origin answered against another commitment
        # for the same fold — two signed roots for one fold is equivocation —
        # or, for a head-form fold, under a second head of the same compaction
        # (a split view).
        if fold.held.fold is not None:
            split = self._split_view(fold.held.fold.head, answer.commitment, reported_at)
            if split is not None:
                fold.evidence, fold.outcome = split, Outcome.SPLIT_VIEW
                fold.detail = "origin signed a second head for the same compaction"
                return
        equivocation = self._equivocation(fold.held.commitment, answer.commitment, reported_at)
        if equivocation is not None:
            fold.evidence, fold.outcome = equivocation, Outcome.EQUIVOCATION
            fold.detail = "origin signed a second commitment for the same fold"
            return
        fold.outcome = Outcome.UNATTRIBUTABLE

    @staticmethod
    def _legitimate(data: Signed[Receipt] | bytes) -> Outcome:
        try:
            receipt = (
                data.statement
                if isinstance(data, Signed)
                else parse_statement(data, Receipt).statement
            )
        except (ContractError, ValueError, TypeError):
            return Outcome.EXPIRED
        if receipt.status is ReceiptStatus.PENDING:
            return Outcome.PENDING
        return Outcome.EXPIRED

    @staticmethod
    def _split_view(ours: SignedHead, theirs: bytes, reported_at: int) -> Evidence | None:
        if not theirs:
            return None
        try:
            other = open_head(theirs, origin=ours.statement.origin)
        except ContractError:
            return None
        if other.digest == ours.digest or other.statement.log_key != ours.statement.log_key:
            return None
        try:
            return split_view_evidence(ours, other, reported_at=reported_at)
        except ContractError:
            return None

    @staticmethod
    def _equivocation(ours: Signed[Commitment], theirs: bytes, reported_at: int) -> Evidence | None:
        if not theirs:
            return None
        try:
            other = open_statement(theirs, Commitment, signer=ours.statement.origin)
        except ContractError:
            return None
        if other.digest == ours.digest or other.statement.fold_key != ours.statement.fold_key:
            return None
        try:
            return equivocation_evidence(ours, other, reported_at=reported_at)
        except ContractError:
            return None

    def _remember(self, digest: str, hops: tuple[bytes, ...]) -> None:
        if not self._use_cache:
            return
        self._cache.put(digest, hops)

    # ----------------------------------------------------------------- suspicion, witnesses

    async def _suspect(
        self,
        run: _OriginRun,
        fold: _Fold,
        witnesses: Sequence[str],
        deadline: float | None,
        *,
        status: str = "",
    ) -> None:
        """An unanswered demand: ask witnesses, then build the suspicion record.

        A suspicion is recorded only once the demand is due (its time plus the
        promised deadline): an origin that failed fast still had until then.
        ``status``: :data:`contracts.evidence.BUSY_STATUS` if the origin said it
        was busy (the record says so; witnesses can clear it, never confirm it).
        """
        if fold.demand is None:
            return
        origin_address = ""
        with contextlib.suppress(CallFailed):
            origin_address = self._address(fold.held.obligation)
        promised = fold.held.obligation.statement.deadline_ms / 1000.0
        budget = promised * 2 + 0.5
        if deadline is not None:
            budget = min(budget, deadline - loop_time() - _MARGIN_S)
        addresses: list[str] = []
        for w in witnesses:
            try:
                address = self._resolve(w)
            except ValueError:
                continue
            if address not in addresses and address != origin_address:
                addresses.append(address)
        results: list[ChallengeResult | BaseException] = []
        if addresses and budget > promised:
            run.witnesses_asked = len(addresses)
            run.rpcs += len(addresses)
            results = list(
                await asyncio.gather(
                    *(
                        self.transport.challenge(
                            a,
                            commitment=fold.held.commitment_bytes,
                            obligation=fold.held.obligation_bytes,
                            demand=fold.demand.to_bytes(),
                            origin_address="",
                            timeout=budget,
                        )
                        for a in addresses
                    ),
                    return_exceptions=True,
                )
            )
        witness_demands: list[Signed[Demand]] = []
        witness_reports: list[Signed[WitnessReport]] = []
        answers: list[Signed[Receipt]] = []
        inconclusive = 0
        for result in results:
            if isinstance(result, BaseException) or not result.witness_report:
                # No report: the origin answered the witness a status (busy, say;
                # nodes.noanswer), or the witness's time ran out first.
                inconclusive += 1
                continue
            try:
                report = open_statement(result.witness_report, WitnessReport)
                wdemand = open_statement(result.witness_demand, Demand)
            except ContractError as exc:
                run.extra.append(f"witness report rejected: {exc}")
                continue
            if report.statement.demand != wdemand.digest:
                continue
            witness_demands.append(wdemand)
            witness_reports.append(report)
            if report.statement.outcome is WitnessOutcome.UNANSWERED:
                run.witnesses_unanswered += 1
            elif result.receipt:
                try:
                    answers.append(open_statement(result.receipt, Receipt, signer=run.origin))
                except ContractError:
                    continue
        if inconclusive:
            run.extra.append(
                f"{inconclusive} of {len(results)} witness(es) signed no report (the origin"
                " answered them a status, or their time ran out)"
            )
        due_ms = demand_due_ms(
            fold.demand.statement.time, fold.held.obligation.statement.deadline_ms
        )
        await self._pause((due_ms - self.now_ms()) / 1000.0 + 0.001, deadline)
        evidence = unanswered_evidence(
            fold.demand,
            obligation=fold.held.obligation,
            commitment=fold.held.commitment,
            re_asks=self.reasks,
            reported_at=self.now_ms(),
            witness_demands=witness_demands,
            witness_reports=witness_reports,
            status=status,
        )
        if fold.held.fold is not None:
            evidence = cite_head(evidence, fold.held.fold)  # the head, not its stand-ins
        for receipt in answers:
            evidence = evidence.with_answer(receipt)
        try:
            verdict = verify_evidence(evidence, now=self.now_ms())
        except ContractError as exc:
            # Our own record does not hold up (e.g. the deadline not yet past): no accusation.
            fold.outcome = Outcome.BUSY if status else Outcome.UNANSWERED
            fold.detail = f"suspicion not recordable: {exc}"
            run.cleared = True
            return
        fold.detail = verdict.reason
        fold.evidence = evidence
        run.witness_confirmed = verdict.status is EvidenceStatus.WITNESS_CONFIRMED
        run.cleared = verdict.status is EvidenceStatus.CLEARED

    @staticmethod
    async def _pause(seconds: float, deadline: float | None) -> None:
        """Sleep ``seconds`` (never past the caller's deadline)."""
        if deadline is not None:
            seconds = min(seconds, deadline - loop_time() - _MARGIN_S)
        if seconds > 0:
            await asyncio.sleep(seconds)

    # ----------------------------------------------------------------- summary, files

    def _evidence(self, run: _OriginRun, worst: _Fold) -> tuple[bytes, bool]:
        """The evidence the origin's worst fold leaves (b"": none) and whether to record
        it: a suspicion only with the witness confirmations the policy asks for (else
        the outcome says why it was not)."""
        if worst.evidence is None or run.cleared:
            return b"", False
        if worst.outcome is Outcome.BUSY:
            # The holder's own record of what it was told, kept to be re-tested and
            # cleared; it accuses nobody (never confirmed, Evidence.Report refuses it).
            return worst.evidence.to_bytes(), True
        if worst.outcome not in EVIDENCE_KINDS:
            return b"", False
        body = worst.evidence.to_bytes()
        if worst.outcome is Outcome.UNANSWERED and (
            run.witnesses_unanswered < self.min_witnesses or not run.witness_confirmed
        ):
            run.extra.append(
                f"suspicion not recorded: {run.witnesses_unanswered} of"
                f" {self.min_witnesses} witness confirmation(s)"
            )
            return body, False
        return body, True

    def _summarise(
        self, run: _OriginRun, worst: _Fold, evidence_bytes: bytes, path: str
    ) -> tuple[OriginOutcome, list[VerifiedHop]]:
        """The origin's outcome (its worst fold's, with its evidence; ``path``: where
        that was recorded, if it was) and the hops it served."""
        folds = run.folds
        origin = run.origin
        # tuple.__new__ directly: the named tuple's own __new__ is one more Python
        # call per served hop (~36 per rehydration), for the same tuple; mapped
        # over the fold's (origin, digest, leaf, bytes) in C, a fold's digest once.
        hops: list[VerifiedHop] = []
        for f in folds:
            if f.outcome is Outcome.SERVED:
                hops += map(
                    tuple.__new__,
                    repeat(VerifiedHop),
                    zip(repeat(origin), repeat(f.held.commitment.digest), f.leaves, f.hops),
                )
        detail = worst.detail if not run.extra else f"{worst.detail}; {'; '.join(run.extra)}"
        # Positional, in field order: keyword arguments make a frozen dataclass's
        # constructor markedly slower, and this runs once per origin per decision.
        outcome = OriginOutcome(
            run.origin,  # origin
            worst.outcome,  # outcome
            detail,
            evidence_bytes,  # evidence
            path,  # evidence_path
            run.asks,
            run.witnesses_asked,
            run.witnesses_unanswered,
            run.witness_confirmed,
            run.cleared and worst.outcome in (Outcome.UNANSWERED, Outcome.BUSY),  # cleared
        )
        if log.enabled("info"):  # the fields cost a demand's CPU even when filtered
            log.info(
                "rehydrated_from_origin",
                origin=run.origin[:16],
                outcome=str(outcome.outcome),
                hops=len(hops),
                asks=run.asks,
                witness_confirmed=run.witness_confirmed,
                evidence=path or None,
            )
        return outcome, hops

    async def record_evidence(self, kind: Outcome, accused: str, body: bytes) -> str:
        """Write an evidence file (if an evidence dir is set) and hand it to the sink."""
        path = ""
        if self.evidence_dir is not None:
            self.evidence_dir.mkdir(parents=True, exist_ok=True)
            digest = sha256_hex(body)
            target = self.evidence_dir / f"{kind.value}-{accused[:16]}-{digest[:16]}.json"
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            try:
                tmp.write_bytes(body)
                os.replace(tmp, target)
            except OSError as exc:
                # No half-written file left behind; a full disk is said as such
                # (RESOURCE_EXHAUSTED naming the directory), the rest as before.
                with contextlib.suppress(OSError):
                    tmp.unlink()
                if is_disk_full(exc):
                    raise disk_full(exc, f"write {kind.value} evidence file", target) from exc
                raise
            path = str(target)
        if self._on_evidence is not None:
            await self._on_evidence(kind.value, accused, body, path)
        return path

    # ----------------------------------------------------------------- witness side

    async def witness(
        self,
        commitment: bytes,
        obligation: bytes,
        holder_demand: bytes,
        origin_address: str,
        *,
        deadline: float | None = None,
    ) -> ChallengeResult:
        """Re-issue a demand of our own for the same obligation; sign what happened.

        ANSWERED names the origin's receipt (any signed answer clears a
        suspicion); UNANSWERED is signed only after the origin's promised
        deadline for our demand has passed. If the caller's budget ends first,
        the result is inconclusive (empty report).
        """
        now_ms = self.now_ms()
        c, o = _challenged(commitment, obligation, now_ms)
        if holder_demand:
            held = open_statement(holder_demand, Demand, fold=(o.digest, c.digest))
            if held.statement.obligation != o.digest:
                raise NotEvidence(
                    f"challenge: demand {held.digest[:12]}… is not for obligation {o.digest[:12]}…"
                )
        refusal = promise_refusal(deadline_ms=o.statement.deadline_ms)
        if refusal:
            # No node signs such a promise (the bounds every route checks); a stranger's
            # own obligation with a long one would hold this witness's call (and its
            # room for challenges) that long.
            raise PromiseOutOfRange(
                f"challenge: obligation {o.digest[:12]}… is no promise a node signs: {refusal}"
            )
        # Only an endpoint the origin itself signed into the obligation is ever asked:
        # a caller cannot point the witness at an address of its choosing.
        endpoints = o.statement.endpoints
        if origin_address and origin_address not in endpoints:
            raise MalformedRequest(
                f"challenge: origin_address {origin_address[:80]!r} is not an endpoint of"
                f" obligation {o.digest[:12]}… ({', '.join(endpoints)[:200]}); a witness asks"
                " only the endpoints the origin signed"
            )
        if not endpoints:
            raise MalformedRequest(f"challenge: obligation {o.digest[:12]}… lists no endpoint")
        asked = origin_address or endpoints[0]
        try:
            address = self._resolve(asked)
        except ValueError as exc:
            raise MalformedRequest(f"challenge: endpoint {asked[:80]!r}: {exc}") from exc
        demand = build_demand(self.identity, o, now=now_ms)
        promised = o.statement.deadline_ms / 1000.0
        remaining = None if deadline is None else deadline - loop_time() - _MARGIN_S
        timeout = promised if remaining is None else max(0.001, min(promised, remaining))
        answered: Signed[Receipt] | None = None
        receipt_bytes = b""  # verbatim, as the origin sent them
        try:
            self.demand_rpcs += 1
            (answer,) = await self.transport.demand(address, [demand.to_bytes()], timeout)
            # Opened (and its signature verified) once, then judged.
            receipt = open_statement(answer.receipt, Receipt, signer=o.statement.origin)
            verdict = judge_answer(
                receipt,
                answer.hops,
                demand=demand,
                obligation=o,
                commitment=c,
                reported_at=self.now_ms(),
            )
            if verdict.kind is not AnswerKind.UNATTRIBUTABLE:
                answered, receipt_bytes = receipt, answer.receipt
        except CallFailed as exc:
            if exc.code == _SKEW_CODE:
                # The origin answered: our demand's time is outside its clock's skew
                # window. A refusal about clocks, not silence: nothing is signed.
                raise ClockSkew(
                    f"challenge: origin {o.statement.origin[:16]}… at {asked[:80]} refused this"
                    f" witness's demand: {exc.message[:300]}"
                ) from None
            if exc.reply is not Reply.SILENT:
                # The endpoint said something (busy, or another status): not silence,
                # so nothing is signed (nodes.noanswer); the holder's record says busy.
                log.info(
                    "witness_demand_not_silent",
                    origin=o.statement.origin[:16],
                    reply=exc.reply.value,
                    error=str(exc),
                    pushback_ms=exc.pushback_ms,
                )
                return ChallengeResult(b"", False, demand.to_bytes(), b"")
            log.info("witness_demand_unanswered", origin=o.statement.origin[:16], error=str(exc))
        except (ContractError, ValueError):
            pass  # no answer attributable to the origin: as if unanswered
        if answered is not None:
            receipt = answered
            report = WitnessReport(
                witness=self.node_id,
                origin=o.statement.origin,
                obligation=o.digest,
                demand=demand.digest,
                outcome=WitnessOutcome.ANSWERED,
                at=self.now_ms(),
                receipt=receipt.digest,
                address=asked,
            )
            signed = sign_statement(self.identity, report)
            return ChallengeResult(signed.to_bytes(), True, demand.to_bytes(), receipt_bytes)
        # UNANSWERED may only be signed once our demand is due (never early).
        due_ms = demand_due_ms(demand.statement.time, o.statement.deadline_ms)
        for _ in range(100):
            wait = (due_ms - self.now_ms()) / 1000.0
            if wait <= 0:
                break
            if deadline is not None and deadline - loop_time() - _MARGIN_S < wait:
                return ChallengeResult(b"", False, demand.to_bytes(), b"")
            await asyncio.sleep(wait + 0.001)
        else:
            return ChallengeResult(b"", False, demand.to_bytes(), b"")
        report = WitnessReport(
            witness=self.node_id,
            origin=o.statement.origin,
            obligation=o.digest,
            demand=demand.digest,
            outcome=WitnessOutcome.UNANSWERED,
            at=self.now_ms(),
            address=asked,
        )
        signed = sign_statement(self.identity, report)
        log.info(
            "witness_reported_unanswered",
            origin=o.statement.origin[:16],
            address=asked,
            obligation=o.digest[:16],
        )
        return ChallengeResult(signed.to_bytes(), False, demand.to_bytes(), b"")


def challenged_obligation(commitment: bytes, obligation: bytes, now_ms: int) -> int:
    """``serve_until`` of what a challenge with these statements names (both verified)."""
    return _challenged(commitment, obligation, now_ms)[1].statement.serve_until


def _challenged(
    commitment: bytes, obligation: bytes, now_ms: int
) -> tuple[Signed[Commitment], Signed[Obligation]]:
    """The statements a challenge names: a commitment + obligation pair, or (head form)
    a fold proof + the signed head, read as the fold's stand-ins."""
    if is_head_note(obligation):
        head_note, custody = split_custody_bundle(obligation)
        if custody:
            # a custodian's promise (nodes.custodian): its statement, bound to the fold
            bound = open_fold(obligation, FoldProof.from_bytes(commitment), now=now_ms)
            return bound.commitment, bound.obligation
        head = HeadCache().verify(head_note, now=now_ms)
        fold = verify_fold(FoldProof.from_bytes(commitment), head)
        return fold.commitment, fold.obligation
    return verify_delivery(commitment, obligation, now=now_ms)
