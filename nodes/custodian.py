"""Custodians: the duty to serve a fold outlives the origin's box (docs/custody.md).

Three parts, one per role:

* **Custodian** (:class:`Custodian`, run by every node): ``take`` obtains an
  origin's folded hops through the holder machinery
  (:class:`nodes.client.Holder`: unsigned ask, then signed demand, evidence
  against the origin if it fails), verifies them against the origin's signed
  head, makes them durable (:func:`nodes.custody_store.hold_folds`: COMMIT,
  fsync'd) and **only then** signs one custody statement for the head — all
  the folds it took under it (:mod:`contracts.custody`) — keeps it (one more
  durable write), and returns it. It serves those folds
  to any bearer through the same serve RPCs as an origin (``Serve.Demand``,
  unsigned asks): :meth:`Custodian.fold_for` is what the serve path looks a
  fold up with when it is not one of the node's own.
* **Origin** (:func:`take_custody`): at commit, asks ``custody_k`` of its
  configured ``custodians`` to take custody of the compaction's folds,
  distinct operators first; the statements travel with the value
  (``Delivery.custody``).
* **Holder** (:func:`rehydrate_with_custody`): demands from the origin
  first; every fold the origin did not serve is demanded from the folds'
  custodians one party at a time, in the order their statements travel, until
  one serves hops that reproduce the root. The decision is exact as soon as
  one party served; every party that failed is named in the report
  (:attr:`nodes.messages.RehydrationReport.parties`) with its own evidence.
  With ``custody_hedge`` the origins and each fold's first custodian are
  demanded from at once (:func:`_hedged`).
* **Relay** (:mod:`nodes.relay_custody`, ``relay_custody_k``): a node that
  forwards a value takes custody through :meth:`Custodian.take` first.

What a custodian promises is what its statement says: the hops of the folds it
names, byte-exact, to any bearer, until its ``serve_until`` (at most the
origin head's), answering within its ``deadline_ms``, at its endpoints. It does
not vouch for the hops' content (the origin's head does), nor for folds it does
not name, nor for anything after ``serve_until``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from contracts._lru import BoundedCache
from contracts.custody import (
    MAX_CUSTODY_FOLDS,
    MAX_CUSTODY_PER_ORIGIN,
    CustodyFold,
    CustodyStatement,
    SignedCustody,
    bind_custody,
    custody_bundle,
    custody_digest,
    open_custody,
    parse_custody,
    sign_custody,
)
from contracts.errors import BindingMismatch, ContractError, Expired
from contracts.head_note import MAX_HEAD_BYTES, SignedHead, claimed_origin, open_head, parse_head
from contracts.heads import FoldProof, VerifiedFold, verify_fold
from contracts.merkle import leaf_hash, merkle_root
from contracts.rules import promise_refusal
from nodes.client import HeldFold
from nodes.custody_store import (
    HeldCustodyFold,
    custody_row,
    hold_folds,
    keep_statement,
    kept_statement,
)
from nodes.errors import MalformedRequest, PromiseOutOfRange, RequestTooLarge
from nodes.logging import get_logger
from nodes.messages import (
    CommittedCompaction,
    OriginOutcome,
    Outcome,
    RehydrationReport,
    VerifiedHop,
)
from nodes.transport import CallFailed

if TYPE_CHECKING:
    from contracts.heads import HeadCache
    from contracts.identity import Identity
    from nodes.client import Holder
    from nodes.config import NodeConfig
    from nodes.store import HopStore
    from nodes.transport import Transport


class CustodyHost(Protocol):
    """What the custodian role uses of its node (a :class:`nodes.services.NodeCore`)."""

    config: NodeConfig
    identity: Identity
    store: HopStore
    transport: Transport
    heads: HeadCache

    @property
    def node_id(self) -> str: ...

    @property
    def advertised(self) -> str: ...

    @property
    def holder(self) -> Holder: ...

    def now_ms(self) -> int: ...


__all__ = [
    "CUSTODY_TAKE_TIMEOUT_S",
    "Custodian",
    "CustodyRefused",
    "CustodyTransport",
    "custody_folds",
    "rehydrate_with_custody",
    "statements_by_fold",
    "statements_for",
    "take_custody",
]

log = get_logger("provnet.custody")

#: How long an origin waits for one custodian to fetch, store and sign.
CUSTODY_TAKE_TIMEOUT_S = 10.0
_FOLD_CACHE = 4096


@runtime_checkable
class CustodyTransport(Protocol):
    """A transport that reaches custodians (``Custody.Take``): the in-memory and
    gRPC transports of :mod:`nodes.transport`."""

    async def take_custody(
        self, address: str, head: bytes, fold_proofs: Sequence[bytes], timeout: float
    ) -> tuple[bytes, ...]: ...


class CustodyRefused(MalformedRequest):
    """A custodian will not take custody of what it was asked (the reason names why)."""


@dataclass(frozen=True, slots=True)
class _Taken:
    folds: tuple[VerifiedFold, ...]
    hops: tuple[tuple[bytes, ...], ...]


class Custodian:
    """A node's custodian role: take custody, and find held folds for the serve path."""

    def __init__(self, core: CustodyHost) -> None:
        self._core = core
        #: (head or statement digest, leaf hash) → the fold as this node promised it.
        self._folds: BoundedCache[tuple[str, str], CustodyFold] = BoundedCache(_FOLD_CACHE)
        self.taken = 0
        self.statements_signed = 0

    # ----------------------------------------------------------------- take

    async def take(
        self,
        head_note: bytes,
        fold_proofs: Sequence[bytes],
        *,
        by: str | None = None,
        deadline: float | None = None,
    ) -> tuple[bytes, ...]:
        """Take custody of ``fold_proofs``' folds under ``head_note``: ONE statement.

        (1) bounded: 1..:data:`MAX_CUSTODY_FOLDS` proofs, a head within its size;
        (2) the head verifies, unexpired, not ``pending``, not our own; ``by``
        (the control signer, when called over the wire) is its origin or an
        operator; (3) each proof is under it; (4) the hops come through the holder
        machinery, from the origin, verified against the fold roots; (5) hops and
        hold COMMIT; (6) only then is the statement signed — naming the folds, or
        none when they are every fold of the head — (7) kept (one write), returned.
        Returns the one statement (a tuple: the wire's form).
        """
        core = self._core
        now_ms = core.now_ms()
        # (1) bounded before anything is verified
        if not 1 <= len(fold_proofs) <= MAX_CUSTODY_FOLDS:
            raise RequestTooLarge(
                f"custody take: 1 to {MAX_CUSTODY_FOLDS} fold proofs, got {len(fold_proofs)}"
            )
        if len(head_note) > MAX_HEAD_BYTES:
            raise RequestTooLarge(f"custody take: head is {len(head_note)} bytes")
        # (2) who asks, from the head's origin line before any signature is checked:
        # over the wire, only the head's own origin pinned as a peer in this node's
        # configuration, or an operator — no stranger makes this node verify, fetch,
        # store or sign anything
        try:
            claimed = claimed_origin(head_note)[0]
        except ContractError as exc:
            raise CustodyRefused(f"custody take: not a head: {exc}") from exc
        if by is not None and by not in core.config.operator_keys:
            pinned = {p.node_id for p in core.config.peers if p.node_id}
            if by != claimed or by not in pinned:
                raise CustodyRefused(
                    f"custody take: asked by {by[:16]}…, which is neither the head's origin"
                    f" {claimed[:16]}… as a pinned peer nor an operator"
                )
        if claimed == core.node_id:
            raise CustodyRefused("custody take: this node is the head's origin")
        # (2') the origin's head, verified (once per head: cached by digest)
        try:
            head = core.heads.verify(head_note, now=now_ms, origin=claimed)
        except ContractError as exc:
            raise CustodyRefused(f"custody take: head does not verify: {exc}") from exc
        h = head.statement
        if h.pending:
            raise CustodyRefused(
                f"custody take: head {head.digest[:12]}… is provenance_pending; its hops"
                " are not durable at the origin yet"
            )
        serve_until = self._serve_until(head, now_ms)
        # (3) each fold under the head
        folds: list[VerifiedFold] = []
        for data in fold_proofs:
            try:
                folds.append(verify_fold(FoldProof.from_bytes(data), head))
            except ContractError as exc:
                raise CustodyRefused(f"custody take: fold proof: {exc}") from exc
        if len({f.leaf_hash for f in folds}) != len(folds):
            raise CustodyRefused("custody take: a fold is named twice")
        # already held and promised long enough: the same statement again (idempotent)
        every = len(folds) == h.size
        leaves = tuple(f.leaf_hash.hex() for f in folds)
        again = await self._kept(head, leaves, serve_until, now_ms)
        if again is not None:
            return (again,)
        # (4) the hops, through the holder machinery, verified against the roots
        taken = await self._fetch(head, folds, fold_proofs, deadline)
        # (5) durable before anything is signed (seed 000)
        await hold_folds(
            core.store,
            head_digest=head.digest,
            head_note=head.note,
            origin=h.origin,
            folds=[
                HeldCustodyFold(f.leaf_hash.hex(), f.record.root, p, hops)
                for f, p, hops in zip(taken.folds, fold_proofs, taken.hops, strict=True)
            ],
            serve_until=serve_until,
            now_ms=now_ms,
        )
        # (6) sign once for the head, (7) keep (one durable write), then return
        statement = self._statement(head, () if every else leaves, serve_until, now_ms)
        signed = sign_custody(core.identity, statement)
        await keep_statement(core.store, signed, leaves, now_ms=now_ms)
        self.statements_signed += 1
        self.taken += 1
        log.info(
            "custody_taken",
            origin=h.origin[:16],
            head=head.digest[:16],
            folds=len(folds),
            serve_until=serve_until,
        )
        return (signed.note,)

    def _serve_until(self, head: SignedHead, now_ms: int) -> int:
        """The custodian's term: the origin's, within this node's own promise bounds."""
        h = head.statement
        serve_until = min(h.serve_until, now_ms + self._core.config.serve_for_ms)
        refusal = promise_refusal(
            deadline_ms=self._core.config.deadline_ms, serve_for_ms=max(1, serve_until - now_ms)
        )
        if refusal:
            raise PromiseOutOfRange(f"custody take: {refusal}")
        return serve_until

    def _statement(
        self, head: SignedHead, folds: tuple[str, ...], serve_until: int, now_ms: int
    ) -> CustodyStatement:
        config = self._core.config
        return CustodyStatement(
            custodian=self._core.node_id,
            operator=config.operator or config.name,
            head=head.digest,
            folds=folds,
            serve_until=serve_until,
            deadline_ms=config.deadline_ms,
            endpoints=(self._core.advertised,),
            issued_at=now_ms,
        )

    async def _kept(
        self, head: SignedHead, leaves: Sequence[str], serve_until: int, now_ms: int
    ) -> bytes | None:
        """The statement already kept for this head that covers every fold of
        ``leaves`` until at least ``serve_until``, or None."""
        note = await kept_statement(
            self._core.store, head_digest=head.digest, leaf_hashes=leaves, now_ms=now_ms
        )
        if note is None or parse_custody(note).statement.serve_until < serve_until:
            return None
        return note

    async def _fetch(
        self,
        head: SignedHead,
        folds: Sequence[VerifiedFold],
        proofs: Sequence[bytes],
        deadline: float | None,
    ) -> _Taken:
        """The folds' hops from the origin, as a holder gets them (verified, or evidence)."""
        held = [
            HeldFold(f.commitment, f.obligation, p, head.note, f)
            for f, p in zip(folds, proofs, strict=True)
        ]
        ref = f"custody/{head.digest[:32]}"
        report = await self._core.holder.rehydrate(ref, held, deadline=deadline)
        by_fold: dict[str, list[tuple[int, bytes]]] = {}
        for hop in report.hops:
            by_fold.setdefault(hop.commitment, []).append((hop.leaf_index, hop.hop))
        hops: list[tuple[bytes, ...]] = []
        for fold in folds:
            got = tuple(b for _, b in sorted(by_fold.get(fold.commitment.digest, [])))
            if len(got) != fold.record.leaf_count or merkle_root(got).hex() != fold.record.root:
                outcome = report.outcomes[0] if report.outcomes else None
                why = f"{outcome.outcome.value}: {outcome.detail}" if outcome else "no answer"
                raise CustodyRefused(
                    f"custody take: the origin did not serve fold {fold.leaf_hash.hex()[:12]}…"
                    f" ({why}); nothing was signed"
                )
            hops.append(got)
        return _Taken(tuple(folds), tuple(hops))

    # ----------------------------------------------------------------- serve

    async def fold_for(self, digest: str, leaf_hash: str) -> CustodyFold | None:
        """A fold this node promised as custodian, by the origin's head digest (an
        unsigned ask) or its statement's digest (a signed demand), and the fold record's
        leaf hash; None when it promised no such fold (or the promise ran out)."""
        key = (digest, leaf_hash)
        fold = self._folds.get(key)
        now_ms = self._core.now_ms()
        if fold is not None and fold.custody.statement.serve_until > now_ms:
            return fold
        row = await custody_row(
            self._core.store, head_digest=digest, leaf_hash=leaf_hash, now_ms=now_ms
        )
        if row is None:
            return None
        # our own statement and a head we verified before storing it: read, then bound
        head = open_head(row.head_note)
        custody = open_custody(row.statement, custodian=self._core.node_id)
        fold = bind_custody(custody, verify_fold(FoldProof.from_bytes(row.proof), head))
        self._folds.put(key, fold)
        return fold


# --------------------------------------------------------------------- origin side


def _placement(names: Sequence[str], k: int) -> list[str]:
    """Custodians to ask, in order: the configured order (operators are learned from
    their statements; :func:`take_custody` skips a second one of the same operator
    while another is left)."""
    return list(names)[: max(0, 2 * k)] if k else []


async def take_custody(core: CustodyHost, committed: CommittedCompaction) -> tuple[bytes, ...]:
    """The origin asks ``custody_k`` custodians to take custody of a compaction's folds.

    Candidates are the first ``2k`` of ``custodians``, asked ``k`` at a time in
    that order, each round at once: a statement from an operator already chosen
    is set aside while a custodian of another operator may still answer, and
    used only if fewer than ``k`` distinct operators did. A custodian that fails
    is logged and skipped: the commit stands (the origin itself still serves),
    with fewer statements.
    """
    config = core.config
    k = config.custody_k
    if not k or committed.provenance_pending:
        return ()
    transport = core.transport
    if not isinstance(transport, CustodyTransport):
        log.warning("custody_not_taken", error="this transport cannot reach custodians")
        return ()
    # our own head, just committed: read, and the folds proven under it
    head = parse_head(committed.head)
    folds = [verify_fold(FoldProof.from_bytes(p), head) for p in committed.fold_proofs]
    pinned = {p.name: p.node_id for p in config.peers if p.node_id}

    async def ask(name: str) -> tuple[str, tuple[bytes, ...]] | None:
        """(operator, statements) from one custodian, or None (logged) if it failed."""
        try:
            address = config.peer(name)
            notes = await transport.take_custody(
                address, committed.head, committed.fold_proofs, CUSTODY_TAKE_TIMEOUT_S
            )
            if len(notes) != 1:
                raise ValueError(f"{len(notes)} statements for one head (one expected)")
            # Only a statement our holders will accept travels with our values:
            # signed by the custodian asked (its pinned key, if pinned), bound to
            # our head and to every fold (a custodian cannot make deliveries fail).
            # (A statement by this node cannot bind: its custodian is never the origin.)
            statement = _verified(notes[0], custodian=pinned.get(name))
            for f in folds:
                bind_custody(statement, f)
        except (CallFailed, ContractError, ValueError) as exc:
            log.warning("custody_not_taken", custodian=name, error=str(exc))
            return None
        return statement.statement.operator, tuple(notes)

    # Asked k at a time, at once (a commit waits for one round, not k calls in a
    # row); a round's failures and operator repeats are replaced from the next
    # candidates, in configured order.
    candidates = _placement(config.custodians, k)
    chosen: list[tuple[str, tuple[bytes, ...]]] = []
    spare: list[tuple[str, tuple[bytes, ...]]] = []
    at = 0
    while len(chosen) < k and at < len(candidates):
        batch = candidates[at : at + k - len(chosen)]
        at += len(batch)
        for answer in await asyncio.gather(*(ask(name) for name in batch)):
            if answer is None:
                continue
            if answer[0] in {op for op, _ in chosen}:
                spare.append(answer)
            else:
                chosen.append(answer)
    chosen.extend(spare[: max(0, k - len(chosen))])
    return tuple(n for _, notes in chosen for n in notes)


def statements_by_fold(
    custody: Sequence[bytes], fold_proofs: Sequence[bytes]
) -> tuple[tuple[bytes, ...], ...]:
    """For each of ``fold_proofs``, the statements of ``custody`` that promise the fold it
    proves (read, not verified: the receiver verifies them), in order: what a delivery
    of that fold's value carries. Each statement and proof is read once."""
    read = [(note, parse_custody(note).statement) for note in custody]
    by_head: dict[str, list[tuple[bytes, CustodyStatement]]] = {}
    for note, s in read:
        by_head.setdefault(s.head, []).append((note, s))
    out: list[tuple[bytes, ...]] = []
    for data in fold_proofs:
        proof = FoldProof.from_bytes(data)
        leaf = leaf_hash(proof.target).hex()
        out.append(tuple(n for n, s in by_head.get(proof.head, ()) if s.covers(leaf)))
    return tuple(out)


def statements_for(custody: Sequence[bytes], fold_proof: bytes) -> tuple[bytes, ...]:
    """:func:`statements_by_fold` for one fold proof."""
    return statements_by_fold(custody, (fold_proof,))[0]


# --------------------------------------------------------------------- holder side


#: Custody notes whose signature verified, by the SHA-256 of their bytes (bounded).
_VERIFIED: BoundedCache[str, SignedCustody] = BoundedCache(_FOLD_CACHE)


def _verified(note: bytes, *, custodian: str | None = None) -> SignedCustody:
    """:func:`open_custody`, once per note's bytes (``custodian``: the key it must be by)."""
    key = hashlib.sha256(note).hexdigest()
    signed = _VERIFIED.get(key)
    if signed is None:
        signed = open_custody(note)
        _VERIFIED.put(key, signed)
    if custodian is not None and signed.statement.custodian != custodian:
        raise BindingMismatch(
            f"custody statement is by {signed.statement.custodian[:16]}…, not {custodian[:16]}…"
        )
    return signed


def custody_folds(
    custody: Sequence[bytes], folds: Sequence[HeldFold], *, now_ms: int
) -> tuple[HeldFold, ...]:
    """A delivery's custody statements, verified and bound to its verified folds.

    Each statement must verify with its custodian's key and name a head of this
    value and at least one fold of it under that head
    (:func:`contracts.custody.bind_custody`); it stands for every fold of the
    value it covers (one :class:`HeldFold` each, in the value's fold order); at
    most :data:`MAX_CUSTODY_PER_ORIGIN` statements per head of an origin. Anything else
    rejects the delivery (:class:`MalformedRequest` naming the statement): a value
    never carries a promise nobody can hold to. An expired statement is dropped.
    """
    if not custody:
        return ()
    if len(custody) > MAX_CUSTODY_PER_ORIGIN * max(1, len(folds)):
        raise RequestTooLarge(
            f"deliver: {len(custody)} custody statements for {len(folds)} fold(s)"
        )
    by_head: dict[str, list[HeldFold]] = {}
    for f in folds:
        if f.fold is not None:
            by_head.setdefault(f.fold.head.digest, []).append(f)
    out: list[HeldFold] = []
    per_head: dict[str, int] = {}
    seen: set[str] = set()
    for note in custody:
        try:
            digest = custody_digest(note)
            if digest in seen:
                continue
            seen.add(digest)
            # (1) read, (2) bound to folds of this value — only then (3) the signature
            # (once per note bytes: a value re-delivered is not verified again)
            s = parse_custody(note).statement
            covered = [
                h
                for h in by_head.get(s.head, ())
                if h.fold is not None and s.covers(h.fold.leaf_hash.hex())
            ]
            if not covered:
                raise MalformedRequest(
                    f"deliver: custody statement {digest[:12]}… names no fold of this value"
                )
            signed = _verified(note)
            bound = [bind_custody(signed, h.fold, now=now_ms) for h in covered if h.fold]
        except Expired:
            continue  # a promise that ran out is no promise: not carried on, not asked
        except ContractError as exc:
            raise MalformedRequest(f"deliver: custody statement: {exc}") from exc
        # (a value merged from several values carries folds under several heads of
        # one origin: the bound is per head, each a compaction of that origin)
        per_head[s.head] = per_head.get(s.head, 0) + 1
        if per_head[s.head] > MAX_CUSTODY_PER_ORIGIN:
            origin = bound[0].head.statement.origin
            raise RequestTooLarge(
                f"deliver: more than {MAX_CUSTODY_PER_ORIGIN} custody statements for head"
                f" {s.head[:12]}… of origin {origin[:16]}…"
            )
        bundle = custody_bundle(bound[0].head.note, note)
        out.extend(
            HeldFold(b.commitment, b.obligation, b.proof.to_bytes(), bundle, b) for b in bound
        )
    return tuple(out)


async def rehydrate_with_custody(
    holder: Holder,
    value_ref: str,
    folds: Sequence[HeldFold],
    custody: Sequence[HeldFold],
    *,
    witnesses: Sequence[str] = (),
    deadline: float | None = None,
    hedge: bool = False,
) -> RehydrationReport:
    """Origins first; then, for every fold its origin did not serve, its custodians.

    Order: the origin (as today, with witnesses for ``unanswered``), then each
    custodian of the fold in the order its statement travels with the value, one
    at a time, until one serves hops reproducing the fold root. Each custodian asked
    gets its own outcome (and evidence, built by the same holder machinery,
    naming it). Served hops are reported under the fold's origin and commitment,
    so what the gates see is what the origin would have served.

    ``hedge`` (``custody_hedge``): the origins and each fold's first custodian
    are demanded from at once (:func:`_hedged`); the rest of the order is as
    above, for the folds neither served.
    """
    if hedge and custody:
        return await _hedged(holder, value_ref, folds, custody, witnesses, deadline)
    report = await holder.rehydrate(value_ref, folds, witnesses=witnesses, deadline=deadline)
    if not custody or report.complete:
        return report
    served_origins = {o.origin for o in report.outcomes if o.outcome is Outcome.SERVED}
    served_folds = {h.commitment for h in report.hops}
    missing = [
        f
        for f in folds
        if f.commitment.statement.origin not in served_origins
        and f.commitment.digest not in served_folds
    ]
    if not missing:
        return report
    return await _fall_back(holder, value_ref, report, missing, custody, witnesses, deadline)


def _candidates(fold: HeldFold, custody: Sequence[HeldFold]) -> list[HeldFold]:
    """The custodians of ``fold``, in the order their statements travel."""
    if fold.fold is None:
        return []
    key = (fold.fold.head.digest, fold.fold.leaf_hash.hex())
    return [
        c
        for c in custody
        if c.fold is not None and (c.fold.head.digest, c.fold.leaf_hash.hex()) == key
    ]


async def _fall_back(
    holder: Holder,
    value_ref: str,
    report: RehydrationReport,
    missing: Sequence[HeldFold],
    custody: Sequence[HeldFold],
    witnesses: Sequence[str],
    deadline: float | None,
    *,
    parties: Sequence[OriginOutcome] = (),
    skip: Sequence[HeldFold] = (),
) -> RehydrationReport:
    """Each fold of ``missing`` from its custodians (not those in ``skip``), one at a
    time, until one serves; ``report`` (the origins') with the parties asked."""
    asked: list[OriginOutcome] = list(parties)
    hops = list(report.hops)
    rpcs, demand_rpcs = report.rpcs, report.demand_rpcs
    recovered = 0
    for fold in missing:
        for candidate in _candidates(fold, custody):
            if any(candidate is s for s in skip):
                continue
            sub = await holder.rehydrate(
                value_ref, [candidate], witnesses=witnesses, deadline=deadline
            )
            rpcs += sub.rpcs
            demand_rpcs += sub.demand_rpcs
            asked.extend(sub.outcomes)
            if sub.complete:
                origin = fold.commitment.statement.origin
                hops.extend(
                    VerifiedHop(origin, h.commitment, h.leaf_index, h.hop) for h in sub.hops
                )
                recovered += 1
                break
    return RehydrationReport(
        value_ref,
        report.outcomes,
        tuple(hops),
        rpcs,
        demand_rpcs,
        parties=tuple(asked),
        recovered=recovered == len(missing),
    )


async def _hedged(
    holder: Holder,
    value_ref: str,
    folds: Sequence[HeldFold],
    custody: Sequence[HeldFold],
    witnesses: Sequence[str],
    deadline: float | None,
) -> RehydrationReport:
    """The origins and every fold's first custodian, demanded from at once.

    Every hedged demand runs to its answer or its deadline (none is cancelled):
    a party that failed has its outcome and its evidence even when the other
    served, and the price is exact (counted, not raced). Each fold is decided by
    the first correct answer in the fixed order origin, then custodian — both
    reproduce the same fold root, so the hops are the same bytes whichever
    decides. Folds neither served go on to their next custodians in order
    (:func:`_fall_back`).
    """
    firsts: list[tuple[HeldFold, HeldFold]] = []
    for fold in folds:
        candidates = _candidates(fold, custody)
        if candidates:
            firsts.append((fold, candidates[0]))
    origin_report, *subs = await asyncio.gather(
        holder.rehydrate(value_ref, folds, witnesses=witnesses, deadline=deadline),
        *(
            holder.rehydrate(value_ref, [first], witnesses=witnesses, deadline=deadline)
            for _, first in firsts
        ),
    )
    ok = {o.origin for o in origin_report.outcomes if o.outcome is Outcome.SERVED}
    served = {f.commitment.digest for f in folds if f.commitment.statement.origin in ok}
    served.update(h.commitment for h in origin_report.hops)
    hops = list(origin_report.hops)
    rpcs, demand_rpcs = origin_report.rpcs, origin_report.demand_rpcs
    parties: list[OriginOutcome] = []
    for (fold, _), sub in zip(firsts, subs, strict=True):
        rpcs += sub.rpcs
        demand_rpcs += sub.demand_rpcs
        parties.extend(sub.outcomes)
        if sub.complete and fold.commitment.digest not in served:
            origin = fold.commitment.statement.origin
            hops.extend(VerifiedHop(origin, h.commitment, h.leaf_index, h.hop) for h in sub.hops)
            served.add(fold.commitment.digest)
    base = RehydrationReport(
        value_ref, origin_report.outcomes, tuple(hops), rpcs, demand_rpcs, parties=tuple(parties)
    )
    if origin_report.complete:
        return base
    missing = [f for f in folds if f.commitment.digest not in served]
    if not missing:
        return dataclasses.replace(base, recovered=True)
    return await _fall_back(
        holder,
        value_ref,
        base,
        missing,
        custody,
        witnesses,
        deadline,
        parties=parties,
        skip=[first for _, first in firsts],
    )
