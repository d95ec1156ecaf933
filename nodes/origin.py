"""The origin role: the hop log, the promises signed over it, and the answers owed.

What this role promises. Hops are appended to the node's log
(:class:`nodes.store.HopStore`) and folded into signed commitments and
obligations (``commit_fold``) or under one signed tree head per compaction
(``commit_compaction``) — only promises the rules allow
(:func:`contracts.rules.promise_refusal`, the same check as the node's
configuration and a remote request), and only after the hops are durable.
Every demand for a fold it signed is then answered by these rules, whatever
the route (one demand, a batch, an unsigned ask, a stream; in-process or
remote).

Serving a demand (``answer_demands``), per demand, in this order — nothing
is written before every demand of the call passed (1)-(5):

1. sizes bounded (:class:`RequestTooLarge`);
2. the demand envelope parses and is signed by the holder it names — checked
   only where it carries information (:func:`contracts.rules.holder_signature_decides`):
   a bearer demand for a fold under one of our signed heads is answered the same
   whoever signed it, so its signature is not verified on this path (whoever
   cites the demand in evidence does);
3. it is fresh (:func:`contracts.rules.demand_is_fresh`: ``time`` within
   ``DEMAND_WINDOW_S`` of now, the documented clock skew; else :class:`ClockSkew`
   → OUT_OF_RANGE naming both times);
4. it names an obligation and commitment this node issued, addressed to it;
5. the obligation has not expired (:func:`contracts.rules.expired`; ``Expired`` →
   FAILED_PRECONDITION);
6. its nonce is new in this run (ALREADY_EXISTS otherwise) and it is not
   dated below the replay floor found at start (ABORTED: a previous run may
   have answered it) — the nonce looked up as soon as the demand is parsed,
   the floors before its signature is verified, so a replay costs a lookup;
   only a demand whose signature was verified has its nonce recorded (a
   bearer demand's holder and nonce are the caller's to choose), per signer,
   in a memory no stranger can fill for others (:mod:`nodes.origin_replay`);
7. the fold is resolved from the store and the receipt signed by
   :func:`contracts.serve.answer_demand` — SERVED with the stored bytes,
   PENDING while the cold copy lags, never other bytes: bytes read back that
   miss the signed commitment's root are hashed before anything is signed
   and refused ABSENT / STORE_CORRUPTED (the node's own disk damaged them).

A fault mode's misbehaviour is not written here: the role calls its
:class:`nodes.faults.Behaviour` at the points a fault can act (before serving,
after a commit, per answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass

from contracts._answer_rule import refusal_for
from contracts._fields import is_digest
from contracts._lru import BoundedCache
from contracts.ask import ASK_BYTES, MAX_OPEN_LEAVES, FoldAsk, unpack_asks
from contracts.batch import (
    DEMAND_BATCH_TYPE,
    RECEIPT_BATCH_TYPE,
    batch_receipt_item,
    decode_demand_batch,
    receipt_batch_payload,
    receipt_item_bytes,
    served_whole_item,
)
from contracts.binary import DEMAND_BINARY_TYPE, decode_demand
from contracts.canonical import format_ms, parse_json_object
from contracts.envelope import Envelope, EnvelopeSigner
from contracts.errors import ContractError, EncodingError, Expired
from contracts.head_note import SignedHead, open_head
from contracts.heads import (
    FoldInput,
    FoldProof,
    FoldRecord,
    HeadLog,
    VerifiedFold,
    verify_fold,
)
from contracts.hops import MAX_HOP_BYTES, hop_bytes
from contracts.identity import PublicKey
from contracts.merkle import leaf_hash
from contracts.rules import (
    DEMAND_WINDOW_MS,
    demand_is_fresh,
    expired,
    holder_signature_decides,
    promise_refusal,
    serves_unsigned,
)
from contracts.serve import (
    WholeFoldReceipts,
    answer_demand,
    build_commitment,
    build_obligation,
    verify_demand,
)
from contracts.signed import Signed, open_statement, parse_statement
from contracts.statements import (
    Commitment,
    Demand,
    Head,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
)
from nodes import store as st
from nodes.client import HeldFold
from nodes.context import HeldValue, NodeContext, check_value_ref, held_fold, ms
from nodes.errors import (
    ClockSkew,
    MalformedRequest,
    PromiseOutOfRange,
    RequestTooLarge,
    UnknownCommitment,
)
from nodes.faults import Behaviour
from nodes.logging import get_logger
from nodes.messages import (
    Answer,
    CommittedCompaction,
    CommittedFold,
    Delivery,
    select_hops,
)
from nodes.origin_replay import OriginReplay

__all__ = [
    "DEMAND_VERIFICATIONS",
    "DEMAND_WINDOW_S",
    "MAX_APPEND_HOPS",
    "MAX_DEMANDS_PER_CALL",
    "MAX_FOLD_HOPS",
    "MAX_SEQ",
    "OPEN_DECLINED",
    "OPEN_SERVES",
    "Origin",
]

log = get_logger(__name__)

#: A demand is accepted only if its ``time`` is this close to now
#: (:func:`contracts.rules.demand_is_fresh`); its nonce is remembered at least
#: this long, so a replay is always caught.
DEMAND_WINDOW_S = DEMAND_WINDOW_MS / 1000
#: Promises this node signs (``CommitFold``): deadline and lifetime bounds are
#: contracts.rules' (MIN/MAX_DEADLINE_MS, MIN/MAX_SERVE_FOR_MS), the same on every route.
#: Sequence numbers are SQLite integers.
MAX_SEQ = 2**63 - 1
#: Counter: holder signatures on demands verified (one per demand, or per batch).
DEMAND_VERIFICATIONS = "demand_verifications"
MAX_DEMANDS_PER_CALL = 256
MAX_APPEND_HOPS = 10_000
MAX_FOLD_HOPS = 100_000
_OWN_CACHE = 100_000
#: The honest behaviour's hooks: a node whose behaviour does not override one
#: skips awaiting it on every demand.
_HONEST_BEFORE_SERVING = Behaviour.before_serving
_HONEST_ANSWER = Behaviour.answer
_HONEST_UNSIGNED = Behaviour.unsigned_hops
#: In-memory counters of unsigned asks (folds served, folds answered empty): kept
#: apart from the store's counters, so an ask writes nothing, not even a counter.
OPEN_SERVES = "open_serves"
OPEN_DECLINED = "open_declined"
_LEAF_CACHE_BYTES = 64 * 1024 * 1024
_DEFAULT_CHUNK_BYTES = 1024 * 1024


def _check_skew(what: str, time_ms: int, now: float) -> None:
    """Step (3): ``what``, dated ``time_ms``, is within ±DEMAND_WINDOW_S of ``now``;
    else :class:`ClockSkew` naming both times, the gap and the allowed skew."""
    if not demand_is_fresh(time_ms, now * 1000.0):
        gap_s = time_ms / 1000.0 - now
        way = "ahead of" if gap_s > 0 else "behind"
        raise ClockSkew(
            f"{what} issued_at {format_ms(time_ms)} is {abs(gap_s):.1f} s {way} this node's"
            f" clock ({format_ms(ms(now))}); allowed skew ±{DEMAND_WINDOW_S:.0f} s"
        )


def _refuse_expired(obligation: Signed[Obligation], now_ms: int) -> None:
    """Step (5): the obligation (or head) still runs at ``now_ms``, else :class:`Expired`."""
    serve_until = obligation.statement.serve_until
    if expired(serve_until, now_ms):
        raise Expired(
            f"obligation {obligation.digest[:12]}… expired at {serve_until} ms"
            f" (now {now_ms} ms)"
        )


@dataclass(frozen=True, slots=True)
class _Own:
    """An obligation this node issued, its commitment, and the commitment's stored bytes."""

    obligation: Signed[Obligation]
    commitment: Signed[Commitment]
    commitment_bytes: bytes
    fold: VerifiedFold | None = None


def _leaves_size(leaves: tuple[bytes, ...]) -> int:
    """The weight of a fold's hop bytes in the leaf cache: their length."""
    return sum(len(x) for x in leaves)


def _own_key(head_digest: str, leaf_hash: str) -> str:
    """The own-cache key of a fold under a head: head digest ‖ leaf hash (128 hex
    characters, so never a per-fold obligation digest). Looked up on every
    demand, so a concatenation rather than the store's hashed binding."""
    return head_digest + leaf_hash


def _claimed_holder(demands: Sequence[bytes]) -> str:
    """The holder the first demand names (unverified: for a log line only)."""
    try:
        envelope = Envelope.from_bytes(demands[0])
        if envelope.payload_type == DEMAND_BATCH_TYPE:
            return decode_demand_batch(envelope.payload).holder
        return parse_statement(envelope, Demand).statement.holder
    except (ContractError, ValueError, IndexError):
        return ""


def _bearer_under_own_head(own: _Own) -> bool:
    """A fold under one of our own heads whose obligation names no holder."""
    return own.fold is not None and own.obligation.statement.holder is None


def _signature_decides(d: Demand, own: _Own, now: float) -> bool:
    """Whether a demand's holder signature is verified, and so its nonce recorded.

    A bearer demand for a fold under one of our own heads is answered without
    its signature (design: verify where it carries information): the answer
    does not depend on who asks, and nothing it moves is charged to the holder
    it names — not even a nonce (nodes.replay): its holder and nonce are the
    caller's to choose. Except a demand dated ahead of our clock: it raises the
    named holder's durable floor, so an unsigned one could make that holder's
    next demands ABORTED after a restart; it is verified like any other.
    """
    return holder_signature_decides(
        d.time, ms(now), bearer_under_own_head=_bearer_under_own_head(own)
    )


def _named_holders(checked: Iterable[tuple[Signed[Demand], _Own]]) -> frozenset[str]:
    """Holders of these demands that the obligation demanded under names (its
    holder: only an obligation this node signed, at its operator's word, names one)."""
    return frozenset(
        d.statement.holder
        for d, own in checked
        if own.obligation.statement.holder == d.statement.holder
    )


class Origin:
    """The origin role of one node; see the module docstring."""

    def __init__(
        self,
        ctx: NodeContext,
        *,
        hold: Callable[[str, HeldValue], None],
        restart_floor_ms: int = 0,
    ) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.identity = ctx.identity
        self.store = ctx.store
        self.node_id = ctx.identity.node_id
        #: Where a value committed with its bytes is held (the holder role's table).
        self._hold = hold
        self.replay = OriginReplay(ctx, restart_floor_ms=restart_floor_ms)
        self._commit_lock = asyncio.Lock()
        self.open_counts: dict[str, int] = {OPEN_SERVES: 0, OPEN_DECLINED: 0}
        self._own: BoundedCache[str, _Own] = BoundedCache(_OWN_CACHE)
        #: Hop bytes of folds read back under their committed roots, bounded in bytes.
        self._leaves: BoundedCache[str, tuple[bytes, ...]] = BoundedCache(
            None, maxweight=_LEAF_CACHE_BYTES, weigh=_leaves_size
        )
        #: Receipt batch items of whole folds served (obligation ‖ commitment digest →
        #: packed item, :func:`contracts.batch.served_whole_item`): immutable per fold.
        self._served_items: BoundedCache[str, bytes] = BoundedCache(_OWN_CACHE)
        #: Receipt templates of whole folds served to lone demands (obligation ‖
        #: commitment digest → :class:`contracts.serve.WholeFoldReceipts`).
        self._served_receipts: BoundedCache[str, WholeFoldReceipts] = BoundedCache(_OWN_CACHE)
        #: Signs receipt batches straight to envelope bytes (the bytes of
        #: :func:`contracts.batch.sign_receipt_batch`, envelope text packed once).
        self._receipt_batches = EnvelopeSigner(ctx.identity, RECEIPT_BATCH_TYPE)
        #: This origin's log of signed heads for the current epoch (rebuilt from
        #: the store when missing).
        self._head_log: HeadLog | None = None

    @property
    def served_items(self) -> int:
        """Packed receipt items of whole folds kept (one per fold served in a batch)."""
        return len(self._served_items)

    def _open_own_head(self, note: bytes) -> SignedHead:
        """One of this node's heads as stored: verified once, then cached by its bytes."""
        key = (Head.KIND.value, note)
        hit = self.ctx.statements.get(key)
        if isinstance(hit, SignedHead):
            return hit
        head = open_head(note, origin=self.node_id)
        self.ctx.statements.put(key, head)
        return head

    # ----------------------------------------------------------------- hop log

    async def append(
        self, hops: Sequence[bytes], seqs: Sequence[int] = ()
    ) -> tuple[str, tuple[int, ...]]:
        """Append hops (JSON objects of hop fields); seqs explicit or each hop's ``step``."""
        if not hops:
            raise MalformedRequest("append: no hops given")
        if len(hops) > MAX_APPEND_HOPS:
            raise RequestTooLarge(f"append: {len(hops)} hops exceeds {MAX_APPEND_HOPS} per call")
        if seqs and len(seqs) != len(hops):
            raise MalformedRequest(f"append: {len(seqs)} seqs for {len(hops)} hops")
        epoch = self.store.epoch
        inputs: list[st.HopInput] = []
        for i, raw in enumerate(hops):
            if len(raw) > MAX_HOP_BYTES:
                raise RequestTooLarge(f"append: hop {i} is {len(raw)} bytes, limit {MAX_HOP_BYTES}")
            fields = parse_json_object(raw, what=f"hop {i}", max_bytes=MAX_HOP_BYTES)
            if seqs:
                seq = int(seqs[i])
                if not 0 <= seq <= MAX_SEQ:
                    raise MalformedRequest(f"append: seq {seq} of hop {i} is outside 0..2^63-1")
            else:
                step = fields.get("step")
                if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_SEQ:
                    raise MalformedRequest(
                        f"append: hop {i} has no seq and no integer 'step' in 0..2^63-1"
                    )
                seq = step
            try:
                data = hop_bytes(fields, self.node_id, epoch)
            except ValueError as exc:
                raise MalformedRequest(f"append: hop {i}: {exc}") from exc
            inputs.append(st.HopInput(seq=seq, hop_bytes=data))
        if len({h.seq for h in inputs}) != len(inputs):
            raise MalformedRequest("append: a seq appears twice in one call")
        await self.store.append_hops(epoch, inputs, now_ms=self.ctx.now_ms())
        return epoch, tuple(h.seq for h in inputs)

    async def commit_fold(
        self,
        value_ref: str,
        seqs: Sequence[int],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
        value: bytes = b"",
    ) -> CommittedFold:
        """Fold stored hops (current epoch) into a signed commitment + obligation.

        The store makes the hops durable, then calls our signer inside the
        same transaction, and returns only after COMMIT (seed 000 ordering).
        """
        check_value_ref(value_ref)
        if not seqs:
            raise MalformedRequest(f"commit {value_ref}: no hops to fold")
        if len(seqs) > MAX_FOLD_HOPS:
            raise RequestTooLarge(f"commit {value_ref}: {len(seqs)} hops exceeds {MAX_FOLD_HOPS}")
        if len(set(seqs)) != len(seqs):
            raise MalformedRequest(f"commit {value_ref}: a seq appears twice")
        bad = next((q for q in seqs if not 0 <= int(q) <= MAX_SEQ), None)
        if bad is not None:
            raise MalformedRequest(f"commit {value_ref}: seq {bad} is outside 0..2^63-1")
        self._check_promise(value_ref, serve_for_ms, deadline_ms)
        epoch = self.store.epoch
        stored = await self.store.hops(epoch, seqs)
        inputs: list[st.HopInput] = []
        for seq in seqs:
            data = stored.get(int(seq))
            if data is None:
                raise st.MissingHop(
                    f"commit {value_ref}: hop seq {seq} of epoch {epoch} is not in the log"
                )
            inputs.append(st.HopInput(seq=int(seq), hop_bytes=data))
        async with self._commit_lock:  # fold_seq is next-free per value ref
            return await self._commit(epoch, value_ref, inputs, serve_for_ms, deadline_ms, value)

    def _check_promise(self, value_ref: str, serve_for_ms: int, deadline_ms: int) -> None:
        """Sign only promises this node can keep: the promise as it would be signed (0 =
        this node's configured default), by the rule every route applies."""
        refusal = promise_refusal(
            deadline_ms=deadline_ms or self.config.deadline_ms,
            serve_for_ms=serve_for_ms or self.config.serve_for_ms,
        )
        if refusal:
            raise PromiseOutOfRange(f"commit {value_ref}: {refusal}")

    async def _commit(
        self,
        epoch: str,
        value_ref: str,
        inputs: list[st.HopInput],
        serve_for_ms: int,
        deadline_ms: int,
        value: bytes,
    ) -> CommittedFold:
        fold_seq = await self.store.next_fold_seq(self.node_id, epoch, value_ref)
        serve_for = serve_for_ms or self.config.serve_for_ms
        deadline = deadline_ms or self.config.deadline_ms
        now = self.ctx.clock()
        pending = self.store.provenance_pending
        made: list[_Own] = []

        def sign(draft: st.FoldDraft) -> st.SignedFold:
            issued = ms(now)
            commitment = build_commitment(
                self.identity,
                epoch=draft.epoch,
                value_ref=draft.value_ref,
                fold_seq=draft.fold_seq,
                hops=draft.leaves,
                issued_at=issued,
                provenance_pending=pending,
            )
            obligation = build_obligation(
                self.identity,
                commitment,
                serve_until=issued + serve_for,
                deadline_ms=deadline,
                endpoints=(self.ctx.advertised,),
                issued_at=issued,
            )
            commitment_bytes = commitment.to_bytes()
            made.append(_Own(obligation, commitment, commitment_bytes))
            return st.SignedFold(
                commitment_digest=commitment.digest,
                commitment_envelope=commitment_bytes,
                root=commitment.statement.root,
                obligation_digest=obligation.digest,
                obligation_envelope=obligation.to_bytes(),
                serve_until_ms=issued + serve_for,
            )

        signed = await self.store.commit_fold(
            epoch=epoch,
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=inputs,
            sign=sign,
            now_ms=ms(now),
        )
        # Only now, after COMMIT, may the fold be served from memory.
        ours = next((o for o in made if o.commitment.digest == signed.commitment_digest), None)
        if ours is not None:
            self._remember_own(ours)
        result = CommittedFold(signed.commitment_envelope, signed.obligation_envelope, pending)
        self.ctx.behaviour.after_commit(
            signed.commitment_digest,
            epoch=epoch,
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=[h.hop_bytes for h in inputs],
            issued_at=ms(now),
            provenance_pending=pending,
        )
        if value:
            # Statements signed just now need no second verification; a fold the
            # store already had (an identical re-commit) is opened from its bytes.
            if ours is not None:
                commitment, obligation = ours.commitment, ours.obligation
            else:
                commitment = self.ctx.open_cached(result.commitment, Commitment)
                obligation = self.ctx.open_cached(result.obligation, Obligation)
            delivery = Delivery(
                value_ref, value, (result.commitment,), (result.obligation,), self.node_id
            )
            self._hold(
                value_ref,
                HeldValue(
                    delivery,
                    (HeldFold(commitment, obligation, result.commitment, result.obligation),),
                ),
            )
        log.info(
            "fold_committed",
            value_ref=value_ref,
            fold_seq=fold_seq,
            hops=len(inputs),
            commitment=signed.commitment_digest[:16],
            pending=pending,
        )
        return result

    async def commit_compaction(
        self,
        folds: Sequence[tuple[str, Sequence[int], bytes]],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
    ) -> CommittedCompaction:
        """Fold several values' stored hops at once under ONE signed tree head.

        ``folds`` are ``(value_ref, seqs, value)``: at most one per value. The
        store makes every hop durable, then the head is signed over the fold
        records inside the same transaction (one signature, however many
        values), and only after COMMIT are head and fold proofs returned.
        """
        if not folds:
            raise MalformedRequest("commit compaction: no folds given")
        if len(folds) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"commit compaction: {len(folds)} folds exceeds {MAX_DEMANDS_PER_CALL}"
            )
        if len({ref for ref, _, _ in folds}) != len(folds):
            raise MalformedRequest("commit compaction: a value_ref appears twice")
        self._check_promise("compaction", serve_for_ms, deadline_ms)
        epoch = self.store.epoch
        for value_ref, seqs, _ in folds:
            check_value_ref(value_ref)
            if not seqs or len(seqs) > MAX_FOLD_HOPS or len(set(seqs)) != len(seqs):
                raise MalformedRequest(
                    f"commit {value_ref}: 1..{MAX_FOLD_HOPS} distinct seqs, got {len(seqs)}"
                )
            bad = next((q for q in seqs if not 0 <= int(q) <= MAX_SEQ), None)
            if bad is not None:
                raise MalformedRequest(f"commit {value_ref}: seq {bad} is outside 0..2^63-1")
        # Every fold's hops in one read (folds of one compaction share most of them).
        stored = await self.store.hops(
            epoch, list(dict.fromkeys(int(q) for _, seqs, _ in folds for q in seqs))
        )
        wanted: list[tuple[str, list[st.HopInput], bytes]] = []
        for value_ref, seqs, value in folds:
            inputs: list[st.HopInput] = []
            for seq in seqs:
                data = stored.get(int(seq))
                if data is None:
                    raise st.MissingHop(
                        f"commit {value_ref}: hop seq {seq} of epoch {epoch} is not in the log"
                    )
                inputs.append(st.HopInput(seq=int(seq), hop_bytes=data))
            wanted.append((value_ref, inputs, value))
        async with self._commit_lock:
            return await self._commit_compaction(epoch, wanted, serve_for_ms, deadline_ms)

    async def _epoch_head_log(self, epoch: str) -> HeadLog:
        """This origin's log of heads for ``epoch``, rebuilt from the store if needed."""
        log_ = self._head_log
        if log_ is not None and log_.epoch == epoch:
            return log_
        batches, last = await self.store.head_log_state(epoch)
        log_ = HeadLog(self.identity, epoch, batches=batches, last_folds=last)
        self._head_log = log_
        return log_

    async def _commit_compaction(
        self,
        epoch: str,
        wanted: list[tuple[str, list[st.HopInput], bytes]],
        serve_for_ms: int,
        deadline_ms: int,
    ) -> CommittedCompaction:
        head_log = await self._epoch_head_log(epoch)
        fold_seqs = await self.store.next_fold_seqs(
            self.node_id, epoch, [ref for ref, _, _ in wanted]
        )
        inputs = [st.CompactionInput(ref, fold_seqs[ref], tuple(hops)) for ref, hops, _ in wanted]
        serve_for = serve_for_ms or self.config.serve_for_ms
        deadline = deadline_ms or self.config.deadline_ms
        issued = ms(self.ctx.clock())
        pending = self.store.provenance_pending
        made: list[tuple[SignedHead, dict[str, FoldProof]]] = []
        #: the exact bytes each fold's root was computed over (durable folds only)
        signed_leaves: dict[str, tuple[bytes, ...]] = {}

        def sign(drafts: Sequence[st.FoldDraft]) -> st.SignedCompaction:
            compaction = head_log.compact(
                [FoldInput(d.value_ref, d.fold_seq, d.leaves) for d in drafts],
                serve_until=issued + serve_for,
                deadline_ms=deadline,
                endpoints=(self.ctx.advertised,),
                issued_at=issued,
                pending=pending,
            )
            made.append((compaction.head, dict(compaction.proofs)))
            signed_leaves.clear()
            signed_leaves.update(
                (d.value_ref, d.leaves) for d in drafts if not d.provenance_pending
            )
            folds: list[st.SignedHeadFold] = []
            for draft, record in zip(drafts, compaction.records, strict=True):
                proof = compaction.proofs[draft.value_ref]
                folds.append(
                    st.SignedHeadFold(
                        leaf_hash(record).hex(),
                        record,
                        FoldRecord.from_bytes(record).root,
                        proof.to_bytes(),
                    )
                )
            return st.SignedCompaction(
                compaction.head.digest,
                compaction.head.to_bytes(),
                compaction.head.statement.seq,
                issued + serve_for,
                tuple(folds),
            )

        try:
            signed = await self.store.commit_compaction(
                epoch=epoch, folds=inputs, sign=sign, now_ms=issued
            )
        except BaseException:
            self._head_log = None  # the in-memory log ran ahead of the store: rebuild
            raise
        head, proofs = made[-1]
        # Our own head and folds, committed just now: served from memory, no re-verification.
        self.ctx.statements.put((Head.KIND.value, signed.head_note), head)
        for (ref, _, _), fold_row in zip(wanted, signed.folds, strict=True):
            verified = verify_fold(proofs[ref], head)
            self._own.put(
                _own_key(head.digest, fold_row.leaf_hash),
                _Own(verified.obligation, verified.commitment, b"", verified),
            )
            leaves = signed_leaves.get(ref)
            if leaves is not None:
                # Durable now, and exactly the bytes the root was signed over: the
                # first demand for this fold is served from memory, not read back.
                self._keep_leaves(verified.commitment.digest, leaves)
        self.ctx.behaviour.after_compaction(head, [f.record for f in signed.folds], inputs)
        out = CommittedCompaction(signed.head_note, tuple(f.proof for f in signed.folds), pending)
        for (ref, _, value), fold in zip(wanted, signed.folds, strict=True):
            if value:
                verified = verify_fold(proofs[ref], head)
                self._hold(
                    ref,
                    HeldValue(
                        Delivery(ref, value, (), (), self.node_id, (fold.proof,), (out.head,)),
                        (held_fold(verified, fold.proof, out.head),),
                    ),
                )
        log.info(
            "compaction_committed",
            folds=len(inputs),
            head=signed.head_digest[:16],
            seq=signed.seq,
            pending=pending,
        )
        return out

    # ----------------------------------------------------------------- serve

    def _remember_own(self, own: _Own) -> None:
        self._own.put(own.obligation.digest, own)

    async def _own_statements(self, demand: Signed[Demand]) -> _Own:
        d = demand.statement
        own = self._own.peek(_own_key(d.obligation, d.commitment)) or self._own.peek(d.obligation)
        if own is not None:
            return own
        record = await self.store.obligation(d.obligation)
        if record is None:
            own = await self._own_head_fold(demand)
            if own is not None:
                return own
        if record is None or not record.local:
            raise UnknownCommitment(
                f"demand {demand.digest[:12]}… names obligation {d.obligation[:12]}…,"
                " which this node did not issue"
            )
        fold = await self.store.commitment(record.commitment_digest)
        if fold is None:
            raise UnknownCommitment(
                f"obligation {d.obligation[:12]}… names commitment"
                f" {record.commitment_digest[:12]}…, which this node does not hold"
            )
        own = _Own(
            self.ctx.open_cached(record.envelope, Obligation, signer=self.node_id),
            self.ctx.open_cached(fold.envelope, Commitment, signer=self.node_id),
            fold.envelope,
        )
        self._remember_own(own)
        return own

    async def _own_head_fold(self, demand: Signed[Demand]) -> _Own | None:
        """A demand naming one of our heads and a fold record under it (no signature checked:
        the head is our own, opened once and cached; the fold proof is hashed)."""
        d = demand.statement
        if not (is_digest(d.obligation) and is_digest(d.commitment)):
            return None
        return await self._own_under_head(d.obligation, d.commitment)

    async def _own_under_head(self, head_digest: str, leaf: str) -> _Own | None:
        """One of our heads (by digest) and a fold record under it (by leaf hash), if we
        signed them; kept in the own-cache when found, never when not."""
        row = await self.store.head_fold(head_digest, leaf)
        if row is None:
            return None
        head = self._open_own_head(row.head_note)
        fold = verify_fold(FoldProof.from_bytes(row.proof), head)
        own = _Own(fold.obligation, fold.commitment, b"", fold)
        self._own.put(_own_key(row.head_digest, row.leaf_hash), own)
        return own

    def _fresh_demand(self, data: bytes | Envelope, now: float) -> Signed[Demand]:
        """Steps (2)-(3) of a demand: parsed (``data``: the bytes, or the envelope
        already read from them; its signature not yet checked) and fresh."""
        if type(data) is Envelope and data.payload_type == DEMAND_BINARY_TYPE:
            # what parse_statement reads for this payload type, without its dispatch
            demand = Signed(data, decode_demand(data.payload))
        else:
            demand = parse_statement(data, Demand)
        _check_skew(f"demand {demand.digest[:12]}…", demand.statement.time, now)
        return demand

    def _bound_demand(self, demand: Signed[Demand], own: _Own, now: float) -> Signed[Demand]:
        """Steps (2) and (4)-(5) of a fresh demand for ``own``: signed where that carries
        information, bound to our obligation and commitment, the obligation unexpired."""
        d = demand.statement
        obligation, commitment = own.obligation, own.commitment
        if _signature_decides(d, own, now):
            # (6) a demand to be recorded: refused below a floor before its
            # signature costs anything
            self.replay.refuse_below_floors(d, demand.digest)
            self.ctx.bump(DEMAND_VERIFICATIONS)
            demand = open_statement(demand.envelope, Demand)
            self.replay.refuse_below_holder_floor(d, demand.digest)
        verify_demand(demand, obligation=obligation, commitment=commitment)
        # (5) unexpired obligation
        _refuse_expired(obligation, ms(now))
        return demand


    async def _check_demand(
        self, data: bytes | Envelope, now: float
    ) -> tuple[Signed[Demand], _Own]:
        """Steps (2)-(5) of one demand: the demand, checked, and the fold it is for."""
        demand = self._fresh_demand(data, now)
        self.replay.refuse_replay(demand.statement)
        return await self._checked_own(demand, now)

    async def _checked_own(self, demand: Signed[Demand], now: float) -> tuple[Signed[Demand], _Own]:
        """Steps (2), (4)-(5) of a fresh demand not seen before."""
        d = demand.statement
        # (4) ours (a coroutine only for a fold not cached)
        own = self._own.get(_own_key(d.obligation, d.commitment))
        if own is None:
            own = await self._own_statements(demand)
        return self._bound_demand(demand, own, now), own

    async def answer_demands(self, demands: Sequence[bytes]) -> list[Answer]:
        """Answer every demand of one call (see module docstring for the order)."""
        behaviour = type(self.ctx.behaviour)
        if behaviour.before_serving is not _HONEST_BEFORE_SERVING:  # a fault acts here
            await self.ctx.behaviour.before_serving(lambda: _claimed_holder(demands))
        if not demands:
            raise MalformedRequest("demand: no demands given")
        if len(demands) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"demand: {len(demands)} demands exceeds {MAX_DEMANDS_PER_CALL} per call"
            )
        now = self.ctx.clock()
        if len(demands) == 1:  # nearly every call: the envelope is read once
            envelope = Envelope.from_bytes(demands[0])
            if envelope.payload_type == DEMAND_BATCH_TYPE:
                return await self._answer_batch(envelope, now)
            demand, own = await self._check_demand(envelope, now)
            # (6) nonces: the only write before answering (a signed demand's only)
            if _signature_decides(demand.statement, own, now):
                await self.replay.accept_nonces((demand,), now, _named_holders(((demand, own),)))
            if type(self.ctx.behaviour).answer is _HONEST_ANSWER:
                served = self._served_alone(demand, own, ms(now))
                if served is not None:  # the hot path: no coroutine, a receipt template
                    return [served]
            return [await self._answer(demand, own, now)]
        # Plain loops, not async comprehensions: each of those is one more
        # coroutine per call, and nearly every call carries one demand.
        # Every demand parsed, fresh and not a replay before any signature is
        # checked: a replayed call is refused at its first demand, for a lookup.
        fresh: list[Signed[Demand]] = []
        seen: set[tuple[str, str]] = set()
        for data in demands:
            demand = self._fresh_demand(data, now)
            key = (demand.statement.holder, demand.statement.nonce)
            if key in seen:
                raise MalformedRequest("demand: the same nonce appears twice in one call")
            seen.add(key)
            self.replay.refuse_replay(demand.statement)
            fresh.append(demand)
        checked: list[tuple[Signed[Demand], _Own]] = []
        for demand in fresh:
            checked.append(await self._checked_own(demand, now))
        # (6) nonces: the only write before answering (signed demands' only)
        await self.replay.accept_nonces(
            [d for d, own in checked if _signature_decides(d.statement, own, now)],
            now,
            _named_holders(checked),
        )
        answers: list[Answer] = []
        for d, own in checked:
            answers.append(await self._answer(d, own, now))
        return answers

    async def answer_asks(self, asks: bytes) -> list[Answer]:
        """Unsigned first asks (:mod:`contracts.ask`; design revision 3), one answer per
        fold in order: the fold's hops when this node serves all of them now, under one
        of its own unexpired heads, from bytes read back under the committed root; an
        empty answer (no hops: "ask signed") for anything else — unknown, expired,
        pending, damaged, too large for this path.

        No signature is made or verified and nothing is written: no nonce is claimed,
        no replay floor or future-nonce floor moves (an ask names no holder, no time,
        no nonce), so a flood of asks leaves the node as it found it. Sizes are checked
        before anything is looked up; an answer is bounded like a signed one (whole
        folds of at most :data:`MAX_OPEN_LEAVES` hops, the response within half the
        message bound: the rest answered empty, to be demanded signed or streamed).
        """
        behaviour = type(self.ctx.behaviour)
        if behaviour.before_serving is not _HONEST_BEFORE_SERVING:  # a fault acts here
            await self.ctx.behaviour.before_serving(lambda: "")
        # (1) sizes, before anything is read from the bytes
        if len(asks) > MAX_DEMANDS_PER_CALL * ASK_BYTES:
            raise RequestTooLarge(
                f"demand: {len(asks)} bytes of asks exceeds {MAX_DEMANDS_PER_CALL} folds per call"
            )
        try:
            parsed = unpack_asks(asks, max_folds=MAX_DEMANDS_PER_CALL)
        except EncodingError as exc:
            raise MalformedRequest(f"demand: {exc}") from exc
        now_ms = self.ctx.now_ms()
        room = self.config.max_message_bytes // 2
        answers: list[Answer] = []
        for ask in parsed:
            hops = await self._open_hops(ask, now_ms)
            size = sum(map(len, hops))
            if size > room:
                hops, size = (), 0
            room -= size
            if hops:
                self.open_counts[OPEN_SERVES] += 1
            else:
                self.open_counts[OPEN_DECLINED] += 1
            answers.append(Answer(b"", b"", hops))
        return answers

    async def _open_hops(self, ask: FoldAsk, now_ms: int) -> tuple[bytes, ...]:
        """The hops an unsigned ask for one fold is answered with (``()``: ask signed)."""
        own = self._own.get(_own_key(ask.head, ask.fold))
        if own is None:
            own = await self._own_under_head(ask.head, ask.fold)
        if own is None or not _bearer_under_own_head(own):
            return ()
        commitment = own.commitment
        if not serves_unsigned(
            own.obligation.statement.serve_until,
            now_ms,
            leaf_count=commitment.statement.leaf_count,
            max_leaves=MAX_OPEN_LEAVES,
        ):
            return ()
        leaves = self._cached_leaves(commitment.digest)
        if leaves is None:
            # Read as the signed path reads (FOUND: every hop, hashing to our root), but
            # counted and logged nowhere: the signed demand a failure leads to does that.
            resolution = await self.store.resolve(
                commitment.digest, now_ms=now_ms, root=commitment.statement.root, count=False
            )
            if resolution.status is not st.ResolveStatus.FOUND:
                return ()  # PENDING, STORE_CORRUPTED, …: answered signed, never unsigned
            leaves = tuple(resolution.leaves)
            self._keep_leaves(commitment.digest, leaves)
        if type(self.ctx.behaviour).unsigned_hops is not _HONEST_UNSIGNED:  # a fault may lie
            return self.ctx.behaviour.unsigned_hops(commitment.digest, leaves)
        return leaves

    async def _answer_batch(self, envelope: Envelope, now: float) -> list[Answer]:
        """A demand batch (:mod:`contracts.batch`): the same checks as for one demand per
        fold, one nonce, and ONE signed receipt batch; it travels in the first answer,
        the others carry their fold's commitment bytes and hops."""
        # (2) parse; the holder's one signature is checked below unless it carries
        # no information (bearer demands for folds under our own heads)
        batch = decode_demand_batch(envelope.payload)
        if len(batch.items) > MAX_DEMANDS_PER_CALL:
            raise RequestTooLarge(
                f"demand: a batch of {len(batch.items)} folds exceeds {MAX_DEMANDS_PER_CALL}"
            )
        # (3) fresh
        _check_skew(f"demand batch {envelope.digest[:12]}…", batch.time, now)
        # (6) a replayed batch is refused here, before its signature
        if batch.items:
            self.replay.refuse_replay(batch.demand(0))
        # (4) ours, and bound correctly
        now_ms = ms(now)
        # the holder's one signature carries information unless every fold is a
        # bearer fold under one of our heads and the batch is not dated ahead
        bearer = True
        demands: list[Signed[Demand]] = []
        owns: list[_Own] = []
        cached = self._own.get
        for i, item in enumerate(batch.items):  # a coroutine only for a fold not cached
            d = Signed(envelope, batch.demand(i))
            demands.append(d)
            own = cached(_own_key(item.obligation, item.commitment))
            if own is None:
                own = await self._own_statements(d)
            owns.append(own)
            if not _bearer_under_own_head(own):
                bearer = False
        unsigned_ok = not holder_signature_decides(batch.time, now_ms, bearer_under_own_head=bearer)
        if not unsigned_ok:
            self.replay.refuse_below_floors(demands[0].statement, envelope.digest)
            self.ctx.bump(DEMAND_VERIFICATIONS)
            envelope.verify(PublicKey.from_node_id(batch.holder))
            self.replay.refuse_below_holder_floor(demands[0].statement, envelope.digest)
        honest = type(self.ctx.behaviour).answer is _HONEST_ANSWER
        # Each fold checked, and its packed answer found when the answer rule serves
        # the whole fold from bytes in memory (nothing is counted or sent before the
        # nonce is accepted below).
        packs: list[tuple[bytes, tuple[bytes, ...]] | None] = []
        for demand, own in zip(demands, owns, strict=True):
            verify_demand(demand, obligation=own.obligation, commitment=own.commitment)
            # (5) unexpired obligation
            _refuse_expired(own.obligation, now_ms)
            packs.append(self._served_whole(demand, own, now_ms) if honest else None)
        # (6) one nonce for a signed batch: the only write before answering
        if not unsigned_ok:
            named = _named_holders(zip(demands, owns, strict=True))
            await self.replay.accept_nonces(demands[:1], now, named)
        items: list[bytes] = []
        answers: list[Answer] = []
        served = 0
        for demand, own, packed in zip(demands, owns, packs, strict=True):
            if packed is not None:  # the hot path: no coroutine, no receipt built
                items.append(packed[0])
                answers.append(Answer(b"", own.commitment_bytes, packed[1]))
                served += 1
                continue
            receipt, sent, hops = await self._answer_item(demand, own, now_ms)
            items.append(receipt if isinstance(receipt, bytes) else receipt_item_bytes(receipt))
            answers.append(Answer(b"", sent, hops))
        if served:
            self.ctx.bump(st.CounterName.SERVES, served)
            if log.enabled("info"):  # the fields cost a demand's CPU even when filtered
                for demand, own, answer, packed in zip(demands, owns, answers, packs, strict=True):
                    if packed is not None:
                        log.info(
                            "demand_served",
                            peer=demand.statement.holder,
                            demand=demand.digest[:16],
                            commitment=own.commitment.digest[:16],
                            hops=len(answer.hops),
                        )
        # One signature over every item (an item's own origin, demand, nonce and
        # time are the batch's): contracts.batch.sign_receipt_batch's bytes.
        payload = receipt_batch_payload(
            items, origin=self.node_id, demand=envelope.digest, nonce=batch.nonce, issued_at=now_ms
        )
        first = answers[0]
        answers[0] = Answer(self._receipt_batches.sign(payload), first.commitment, first.hops)
        return answers

    def _whole_in_memory(self, d: Demand, own: _Own, now_ms: int) -> tuple[bytes, ...] | None:
        """The hops of ``own``'s whole fold when ``d`` asks all of it, its bytes are in
        memory (read back under the committed root, see :meth:`_resolve`) and the
        answer rule serves it; None otherwise (a leaf subset, a fold to read from the
        store, a refusal)."""
        if d.leaves is not None:
            return None
        leaves = self._cached_leaves(own.commitment.digest)
        c = own.commitment.statement
        if leaves is None or refusal_for(own.obligation.statement, c, d, leaves, now_ms, c.root):
            return None
        return leaves

    def _served_whole(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[bytes, tuple[bytes, ...]] | None:
        """An honest batch item for a whole fold whose bytes are in memory (read back
        under the committed root, see :meth:`_resolve`) and that the answer rule
        serves: its packed item and the hops, not yet counted. None: anything else
        (a leaf subset, a fold to read from the store, a refusal) takes
        :meth:`_answer_item`. The item is the same bytes for every demand for the
        fold (:func:`contracts.batch.served_whole_item`), packed once."""
        leaves = self._whole_in_memory(demand.statement, own, now_ms)
        if leaves is None:
            return None
        commitment = own.commitment
        c = commitment.statement
        key = own.obligation.digest + commitment.digest
        packed = self._served_items.peek(key)
        if packed is None:
            packed = served_whole_item(
                own.obligation.digest, commitment.digest, c.leaf_count, c.root
            )
            self._served_items.put(key, packed)
        return packed, leaves

    def _served_alone(self, demand: Signed[Demand], own: _Own, now_ms: int) -> Answer | None:
        """An honest answer to a lone binary demand for a whole fold whose bytes are in
        memory (read back under the committed root, see :meth:`_resolve`) and that the
        answer rule serves: its receipt signed from the fold's template
        (:class:`contracts.serve.WholeFoldReceipts`, the bytes :func:`answer_demand`
        signs), counted and logged. None: anything else takes :meth:`_answer`."""
        if demand.envelope.payload_type != DEMAND_BINARY_TYPE:
            return None
        leaves = self._whole_in_memory(demand.statement, own, now_ms)
        if leaves is None:
            return None
        commitment = own.commitment
        key = own.obligation.digest + commitment.digest
        receipts = self._served_receipts.peek(key)
        if receipts is None:
            receipts = WholeFoldReceipts(
                self.identity, obligation=own.obligation, commitment=commitment
            )
            self._served_receipts.put(key, receipts)
        receipt = receipts.sign(demand, now_ms)
        self._log_served(demand, commitment, leaves)
        return Answer(receipt, own.commitment_bytes, leaves)

    async def _answer_item(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[Receipt | bytes, bytes, tuple[bytes, ...]]:
        """One fold of a demand batch: its receipt item (unsigned; packed when a whole
        fold is served), the commitment bytes answered against and the hops served —
        as :meth:`_answer` decides them."""
        d = demand.statement
        obligation, commitment = own.obligation, own.commitment
        if type(self.ctx.behaviour).answer is not _HONEST_ANSWER:  # a fault may answer instead
            faulty, leaves = await self._fault_answer(demand, own, now_ms)
            if faulty is not None:
                # What the fault signed for this fold, signed again as its batch item.
                item = parse_statement(faulty.receipt, Receipt).statement
                return item, faulty.commitment, faulty.hops
        else:
            leaves = await self._honest_leaves(commitment, now_ms)
        item = batch_receipt_item(
            self.node_id,
            d,
            demand.digest,
            obligation=obligation.statement,
            obligation_digest=obligation.digest,
            commitment=commitment.statement,
            commitment_digest=commitment.digest,
            hops=leaves,
            now=now_ms,
            hops_root=self._verified_root(commitment, leaves),
        )
        hops = self._counted(demand, commitment, item.status, item.reason, leaves)
        return item, own.commitment_bytes, hops


    async def _fault_answer(
        self, demand: Signed[Demand], own: _Own, now_ms: int
    ) -> tuple[Answer | None, tuple[bytes, ...] | None]:
        """Under a fault mode: the fault's own answer (counted and logged), or None and
        the fold's leaves when the fault leaves the answer to the honest path."""
        commitment = own.commitment
        resolved: list[tuple[bytes, ...] | None] = []

        async def resolve() -> tuple[bytes, ...] | None:
            # At most once per answer, whoever asks first (a fault or the honest path).
            if not resolved:
                resolved.append(await self._resolve(commitment, now_ms))
            return resolved[0]

        faulty = await self.ctx.behaviour.answer(
            demand, own.obligation, commitment, own.commitment_bytes, resolve, now_ms
        )
        if faulty is None:
            return None, await resolve()
        self.ctx.bump(st.CounterName.SERVES if faulty.served else st.CounterName.REFUSALS)
        log.info(
            "demand_served" if faulty.served else "demand_not_served",
            peer=demand.statement.holder,
            demand=demand.digest[:16],
            commitment=commitment.digest[:16],
            fault=str(self.ctx.fault.mode),
        )
        return faulty.answer, None

    async def _answer(self, demand: Signed[Demand], own: _Own, now: float) -> Answer:
        obligation, commitment = own.obligation, own.commitment
        now_ms = ms(now)

        if type(self.ctx.behaviour).answer is not _HONEST_ANSWER:  # a fault may answer instead
            faulty, leaves = await self._fault_answer(demand, own, now_ms)
            if faulty is not None:
                return faulty
        else:
            leaves = await self._honest_leaves(commitment, now_ms)
        signed = answer_demand(
            self.identity,
            demand,
            obligation=obligation,
            commitment=commitment,
            hops=leaves,
            now=now_ms,
            hops_root=self._verified_root(commitment, leaves),
        )
        r = signed.statement
        served_hops = self._counted(demand, commitment, r.status, r.reason, leaves)
        return Answer(signed.to_bytes(), own.commitment_bytes, served_hops)

    async def _honest_leaves(
        self, commitment: Signed[Commitment], now_ms: int
    ) -> tuple[bytes, ...] | None:
        """The fold's leaves for an honest answer: a fold already read back under its
        root is in memory (see _resolve); only a miss goes to the store."""
        leaves = self._cached_leaves(commitment.digest)
        if leaves is None:
            leaves = await self._resolve(commitment, now_ms)
        return leaves

    def _counted(
        self,
        demand: Signed[Demand],
        commitment: Signed[Commitment],
        status: ReceiptStatus,
        reason: RefusalReason | None,
        leaves: tuple[bytes, ...] | None,
    ) -> tuple[bytes, ...]:
        """One fold's honest answer counted and logged (served or not, naming the
        peer); the hops it serves, none when it refuses."""
        d = demand.statement
        if status is ReceiptStatus.SERVED and leaves is not None:
            served_hops = select_hops(leaves, d.leaves)
            self._log_served(demand, commitment, served_hops)
            return served_hops
        self.ctx.bump(st.CounterName.REFUSALS)
        log.info(
            "demand_not_served",
            peer=d.holder,
            demand=demand.digest[:16],
            commitment=commitment.digest[:16],
            status=str(status),
            reason=str(reason),
        )
        return ()

    def _log_served(
        self, demand: Signed[Demand], commitment: Signed[Commitment], hops: tuple[bytes, ...]
    ) -> None:
        """One fold served: counted, and logged naming the peer."""
        self.ctx.bump(st.CounterName.SERVES)
        if log.enabled("info"):  # the fields cost a demand's CPU even when filtered
            log.info(
                "demand_served",
                peer=demand.statement.holder,
                demand=demand.digest[:16],
                commitment=commitment.digest[:16],
                hops=len(hops),
            )

    async def _resolve(
        self, commitment: Signed[Commitment], now_ms: int
    ) -> tuple[bytes, ...] | None:
        """The whole fold's stored bytes, or None (then the receipt says why not).

        A FOUND resolution (every leaf present, hashing to the committed root)
        is kept in a bounded cache: those bytes are immutable for the digest.
        Anything else is asked of the store every time, so PENDING turns into
        SERVED as soon as the cold copy lands.
        """
        cached = self._cached_leaves(commitment.digest)
        if cached is not None:
            return cached
        resolution = await self.store.resolve(
            commitment.digest, now_ms=now_ms, root=commitment.statement.root
        )
        if resolution.status is st.ResolveStatus.CORRUPTED:
            # The bytes read miss our own root: handed on (never kept) so the answer
            # rule recomputes their root and refuses STORE_CORRUPTED, signed.
            log.error(
                "store_corrupted",
                commitment=commitment.digest[:16],
                path=str(self.store.path),
                reason=resolution.reason,
            )
            return resolution.damaged
        if not resolution:
            log.info(
                "fold_not_resolved",
                commitment=commitment.digest[:16],
                status=str(resolution.status),
                reason=resolution.reason,
            )
            return None
        leaves = tuple(resolution.leaves)
        self._keep_leaves(commitment.digest, leaves)
        return leaves

    def _verified_root(
        self, commitment: Signed[Commitment], leaves: tuple[bytes, ...] | None
    ) -> str | None:
        """The committed root when ``leaves`` are the bytes kept in memory after the
        store read them back under it (see :meth:`_resolve`); None otherwise, and
        the answer rule hashes them before anything is signed over them."""
        if leaves is not None and self._leaves.peek(commitment.digest) is leaves:
            return commitment.statement.root
        return None

    def _cached_leaves(self, digest: str) -> tuple[bytes, ...] | None:
        """A fold's hop bytes if kept in memory (then most recently used), else None."""
        return self._leaves.get(digest)

    def _keep_leaves(self, digest: str, leaves: tuple[bytes, ...]) -> None:
        """Remember a fold's hop bytes (immutable for its digest), bounded in bytes."""
        if not self._leaves.touch(digest):
            self._leaves.put(digest, leaves)

    async def answer_demand_stream(
        self, demand: bytes, *, max_chunk_bytes: int = 0
    ) -> AsyncIterator[Answer]:
        """One demand, answered as chunks: the first carries receipt + commitment."""
        answers = await self.answer_demands([demand])
        if len(answers) != 1:
            raise MalformedRequest("demand stream: one demand per stream, not a batch")
        (answer,) = answers
        limit = max_chunk_bytes or min(_DEFAULT_CHUNK_BYTES, self.config.max_message_bytes // 2)
        chunk: list[bytes] = []
        size = 0
        first = True
        for hop in answer.hops:
            if chunk and size + len(hop) > limit:
                yield Answer(
                    answer.receipt if first else b"",
                    answer.commitment if first else b"",
                    tuple(chunk),
                )
                first, chunk, size = False, [], 0
            chunk.append(hop)
            size += len(hop)
        yield Answer(
            answer.receipt if first else b"", answer.commitment if first else b"", tuple(chunk)
        )

    # ----------------------------------------------------------------- deliver, hold, forward
