"""The origin's answers: every demand for a fold this node signed, answered by the rules.

What this half of the origin role promises (the log, what it signs, is
:mod:`nodes.origin_log`). Every demand for a fold this node signed is answered
by the origin's rules (:mod:`contracts.rules`), whatever the route: one
demand, a batch, an unsigned ask, a stream; in-process or remote.

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

A fault mode's misbehaviour is not written here: the origin calls its
:class:`nodes.faults.Behaviour` at the points a fault can act (here before
serving and per answer; after a commit in :mod:`nodes.origin_log`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import NamedTuple

from contracts._answer_rule import refusal_for
from contracts._lru import BoundedCache
from contracts.ask import ASK_BYTES, MAX_OPEN_LEAVES, FoldAsk, read_ask, split_asks
from contracts.batch import (
    DEMAND_BATCH_TYPE,
    RECEIPT_BATCH_TYPE,
    batch_receipt_item,
    decode_demand_batch,
    receipt_batch_payload,
    receipt_item_bytes,
    served_whole_item,
)
from contracts.canonical import format_ms
from contracts.envelope import Envelope, EnvelopeSigner
from contracts.errors import ContractError, EncodingError, Expired
from contracts.identity import PublicKey
from contracts.rules import (
    DEMAND_WINDOW_MS,
    demand_is_fresh,
    expired,
    holder_signature_decides,
    serves_unsigned,
)
from contracts.serve import (
    answer_demand,
    verify_demand,
)
from contracts.signed import Signed, open_statement, parse_statement
from contracts.statements import (
    Commitment,
    Demand,
    Obligation,
    Receipt,
    ReceiptStatus,
    RefusalReason,
)
from nodes import store as st
from nodes.context import NodeContext, ms
from nodes.errors import (
    ClockSkew,
    MalformedRequest,
    RequestTooLarge,
)
from nodes.faults import Behaviour
from nodes.logging import get_logger
from nodes.messages import (
    Answer,
    select_hops,
)
from nodes.origin_folds import MAX_DEMANDS_PER_CALL, Own, OwnFolds, own_key
from nodes.origin_replay import OriginReplay

__all__ = [
    "DEMAND_VERIFICATIONS",
    "DEMAND_WINDOW_S",
    "MAX_DEMANDS_PER_CALL",
    "OPEN_ASKS",
    "OPEN_DECLINED",
    "OPEN_SERVES",
    "Origin",
]

log = get_logger(__name__)

#: A demand is accepted only if its ``time`` is this close to now
#: (:func:`contracts.rules.demand_is_fresh`); its nonce is remembered at least
#: this long, so a replay is always caught.
DEMAND_WINDOW_S = DEMAND_WINDOW_MS / 1000
#: Counter: holder signatures on demands verified (one per demand, or per batch).
DEMAND_VERIFICATIONS = "demand_verifications"
#: The honest behaviour's hooks: a node whose behaviour does not override one
#: skips awaiting it on every demand.
_HONEST_BEFORE_SERVING = Behaviour.before_serving
_HONEST_ANSWER = Behaviour.answer
_HONEST_UNSIGNED = Behaviour.unsigned_hops
#: In-memory counters of unsigned asks (calls, folds served, folds answered empty):
#: kept apart from the store's counters, so an ask writes nothing, not even a counter.
OPEN_ASKS = "open_asks"
OPEN_SERVES = "open_serves"
OPEN_DECLINED = "open_declined"
_DEFAULT_CHUNK_BYTES = 1024 * 1024
#: Receipt items of whole folds served, kept per fold.
_SERVED_CACHE = 100_000


#: Hop bytes of the unsigned answers kept by their ask (weight: the hops' length).
_OPEN_ANSWER_BYTES = 32 * 1024 * 1024
#: The answer to an ask this node does not answer unsigned now: "ask signed".
_ASK_SIGNED = Answer(b"", b"", ())


class _OpenAnswer(NamedTuple):
    """An unsigned answer that serves a whole fold, with what its reuse is checked by."""

    serve_until: int
    leaf_count: int
    answer: Answer
    #: the hops' length: the answer's share of a response's room, and its weight kept
    size: int


def _open_answer_size(entry: _OpenAnswer) -> int:
    return entry.size


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
            f"obligation {obligation.digest[:12]}… expired at {serve_until} ms (now {now_ms} ms)"
        )


def _claimed_holder(demands: Sequence[bytes]) -> str:
    """The holder the first demand names (unverified: for a log line only)."""
    try:
        envelope = Envelope.from_bytes(demands[0])
        if envelope.payload_type == DEMAND_BATCH_TYPE:
            return decode_demand_batch(envelope.payload).holder
        return parse_statement(envelope, Demand).statement.holder
    except (ContractError, ValueError, IndexError):
        return ""


def _bearer_under_own_head(own: Own) -> bool:
    """A fold under one of our own heads whose obligation names no holder."""
    return own.fold is not None and own.obligation.statement.holder is None


def _signature_decides(d: Demand, own: Own, now: float) -> bool:
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


def _named_holders(checked: Iterable[tuple[Signed[Demand], Own]]) -> frozenset[str]:
    """Holders of these demands that the obligation demanded under names (its
    holder: only an obligation this node signed, at its operator's word, names one)."""
    return frozenset(
        d.statement.holder
        for d, own in checked
        if own.obligation.statement.holder == d.statement.holder
    )


class Origin:
    """The origin's answers; see the module docstring."""

    def __init__(self, ctx: NodeContext, folds: OwnFolds, *, restart_floor_ms: int = 0) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.identity = ctx.identity
        self.store = ctx.store
        self.node_id = ctx.identity.node_id
        self._folds = folds
        #: The own-fold cache, looked up on every demand (the same object as ``folds.cache``).
        self._own = folds.cache
        self.replay = OriginReplay(ctx, restart_floor_ms=restart_floor_ms)
        self.open_counts: dict[str, int] = {OPEN_ASKS: 0, OPEN_SERVES: 0, OPEN_DECLINED: 0}
        #: Receipt batch items of whole folds served (obligation ‖ commitment digest →
        #: packed item, :func:`contracts.batch.served_whole_item`): immutable per fold.
        self._served_items: BoundedCache[str, bytes] = BoundedCache(_SERVED_CACHE)
        #: Signs receipt batches straight to envelope bytes (the bytes of
        #: :func:`contracts.batch.sign_receipt_batch`, envelope text packed once).
        self._receipt_batches = EnvelopeSigner(ctx.identity, RECEIPT_BATCH_TYPE)
        #: Unsigned answers that served a whole fold, by the ask's bytes. A fold's
        #: hops are immutable per digest, so the same ask is answered with the same
        #: answer while the promise runs (:func:`contracts.rules.serves_unsigned`,
        #: checked on every call); kept only while the node's behaviour is honest.
        self._open_answers: BoundedCache[bytes, _OpenAnswer] = BoundedCache(
            None, maxweight=_OPEN_ANSWER_BYTES, weigh=_open_answer_size
        )

    @property
    def served_items(self) -> int:
        """Packed receipt items of whole folds kept (one per fold served in a batch)."""
        return len(self._served_items)

    def _fresh_demand(self, data: bytes | Envelope, now: float) -> Signed[Demand]:
        """Steps (2)-(3) of a demand: parsed (``data``: the bytes, or the envelope
        already read from them; its signature not yet checked) and fresh."""
        demand = parse_statement(data, Demand)
        _check_skew(f"demand {demand.digest[:12]}…", demand.statement.time, now)
        return demand

    def _bound_demand(self, demand: Signed[Demand], own: Own, now: float) -> Signed[Demand]:
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

    async def _checked_own(self, demand: Signed[Demand], now: float) -> tuple[Signed[Demand], Own]:
        """Steps (2), (4)-(5) of a fresh demand not seen before."""
        d = demand.statement
        # (4) ours (a coroutine only for a fold not cached)
        own = self._own.get(own_key(d.obligation, d.commitment))
        if own is None:
            own = await self._folds.lookup(demand)
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
        if len(demands) == 1:  # nearly every call: one demand, for one fold or several
            envelope = Envelope.from_bytes(demands[0])
            if envelope.payload_type != DEMAND_BATCH_TYPE:
                raise EncodingError(
                    f"payload type {envelope.payload_type!r:.80} where {DEMAND_BATCH_TYPE!r}"
                    " was expected"
                )
            return await self._answer_batch(envelope, now)
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
        checked: list[tuple[Signed[Demand], Own]] = []
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

        A fold served is answered again from memory (the same :class:`Answer`, which
        the server sends in the encoding it made once, :class:`nodes.wire.AnswerEncodings`)
        while :func:`contracts.rules.serves_unsigned` holds — checked on every call; its
        hops are immutable per digest. Only while the node's behaviour is the honest
        one: a fault always answers itself.
        """
        self.open_counts[OPEN_ASKS] += 1
        if type(self.ctx.behaviour).before_serving is not _HONEST_BEFORE_SERVING:
            await self.ctx.behaviour.before_serving(lambda: "")  # a fault acts here
        honest = self._honest_unsigned()
        # (1) sizes, before anything is read from the bytes
        if len(asks) > MAX_DEMANDS_PER_CALL * ASK_BYTES:
            raise RequestTooLarge(
                f"demand: {len(asks)} bytes of asks exceeds {MAX_DEMANDS_PER_CALL} folds per call"
            )
        try:
            chunks = split_asks(asks, max_folds=MAX_DEMANDS_PER_CALL)
        except EncodingError as exc:
            raise MalformedRequest(f"demand: {exc}") from exc
        now_ms = self.ctx.now_ms()
        room = self.config.max_message_bytes // 2
        kept = self._open_answers
        counts = self.open_counts
        answers: list[Answer] = []
        for chunk in chunks:
            entry = kept.get(chunk) if honest else None
            if entry is None or not serves_unsigned(
                entry.serve_until, now_ms, leaf_count=entry.leaf_count, max_leaves=MAX_OPEN_LEAVES
            ):
                if entry is not None:
                    kept.pop(chunk)
                entry = await self._open_answer(read_ask(chunk), now_ms)
                # kept only if no fault acted on it (one may have been set while it was read)
                if honest and entry is not None and self._honest_unsigned():
                    kept.put(chunk, entry)
            if entry is None or entry.size > room:
                counts[OPEN_DECLINED] += 1
                answers.append(_ASK_SIGNED)
                continue
            room -= entry.size
            counts[OPEN_SERVES] += 1
            answers.append(entry.answer)
        return answers

    def _honest_unsigned(self) -> bool:
        """Whether the node's behaviour now is the honest one for unsigned answers."""
        behaviour = type(self.ctx.behaviour)
        return (
            behaviour.before_serving is _HONEST_BEFORE_SERVING
            and behaviour.unsigned_hops is _HONEST_UNSIGNED
        )

    async def _open_answer(self, ask: FoldAsk, now_ms: int) -> _OpenAnswer | None:
        """The unsigned answer to one fold's ask; None: answered "ask signed"."""
        own = self._own.get(own_key(ask.head, ask.fold))
        if own is None:
            own = await self._folds.under_head(ask.head, ask.fold)
        if own is None or not _bearer_under_own_head(own):
            return None
        commitment = own.commitment
        serve_until = own.obligation.statement.serve_until
        leaf_count = commitment.statement.leaf_count
        if not serves_unsigned(
            serve_until, now_ms, leaf_count=leaf_count, max_leaves=MAX_OPEN_LEAVES
        ):
            return None
        leaves = self._folds.cached_leaves(commitment.digest)
        if leaves is None:
            # Read as the signed path reads (FOUND: every hop, hashing to our root), but
            # counted and logged nowhere: the signed demand a failure leads to does that.
            resolution = await self.store.resolve(
                commitment.digest, now_ms=now_ms, root=commitment.statement.root, count=False
            )
            if resolution.status is not st.ResolveStatus.FOUND:
                return None  # PENDING, STORE_CORRUPTED, …: answered signed, never unsigned
            leaves = tuple(resolution.leaves)
            self._folds.keep_leaves(commitment.digest, leaves)
        if type(self.ctx.behaviour).unsigned_hops is not _HONEST_UNSIGNED:  # a fault may lie
            leaves = self.ctx.behaviour.unsigned_hops(commitment.digest, leaves)
        if not leaves:
            return None
        return _OpenAnswer(serve_until, leaf_count, Answer(b"", b"", leaves), sum(map(len, leaves)))

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
        owns: list[Own] = []
        cached = self._own.get
        for i, item in enumerate(batch.items):  # a coroutine only for a fold not cached
            d = Signed(envelope, batch.demand(i))
            demands.append(d)
            own = cached(own_key(item.obligation, item.commitment))
            if own is None:
                own = await self._folds.lookup(d)
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

    def _whole_in_memory(self, d: Demand, own: Own, now_ms: int) -> tuple[bytes, ...] | None:
        """The hops of ``own``'s whole fold when ``d`` asks all of it, its bytes are in
        memory (read back under the committed root, see :meth:`_resolve`) and the
        answer rule serves it; None otherwise (a leaf subset, a fold to read from the
        store, a refusal)."""
        if d.leaves is not None:
            return None
        leaves = self._folds.cached_leaves(own.commitment.digest)
        c = own.commitment.statement
        if leaves is None or refusal_for(own.obligation.statement, c, d, leaves, now_ms, c.root):
            return None
        return leaves

    def _served_whole(
        self, demand: Signed[Demand], own: Own, now_ms: int
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

    async def _answer_item(
        self, demand: Signed[Demand], own: Own, now_ms: int
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
            hops_root=self._folds.verified_root(commitment, leaves),
        )
        hops = self._counted(demand, commitment, item.status, item.reason, leaves)
        return item, own.commitment_bytes, hops

    async def _fault_answer(
        self, demand: Signed[Demand], own: Own, now_ms: int
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

    async def _answer(self, demand: Signed[Demand], own: Own, now: float) -> Answer:
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
            hops_root=self._folds.verified_root(commitment, leaves),
        )
        r = signed.statement
        served_hops = self._counted(demand, commitment, r.status, r.reason, leaves)
        return Answer(signed.to_bytes(), own.commitment_bytes, served_hops)

    async def _honest_leaves(
        self, commitment: Signed[Commitment], now_ms: int
    ) -> tuple[bytes, ...] | None:
        """The fold's leaves for an honest answer: a fold already read back under its
        root is in memory (see _resolve); only a miss goes to the store."""
        leaves = self._folds.cached_leaves(commitment.digest)
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
        cached = self._folds.cached_leaves(commitment.digest)
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
        self._folds.keep_leaves(commitment.digest, leaves)
        return leaves

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
