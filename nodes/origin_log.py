"""The origin's log: hops appended, and the promises signed over them.

What this half of the origin role promises. Hops are appended to the node's
log (:class:`nodes.store.HopStore`) and folded into a signed commitment and
obligation per value (``commit_fold``), or under ONE signed tree head per
compaction (``commit_compaction``) — only promises the rules allow
(:func:`contracts.rules.promise_refusal`, the same check as the node's
configuration and a remote request: a promise outside the bounds is
:class:`PromiseOutOfRange`, OUT_OF_RANGE), and only after the hops are durable:
the store signs inside the transaction and the statements are returned, and
served from memory (:mod:`nodes.origin_folds`), only after COMMIT. The answers
owed for them are :mod:`nodes.origin`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from contracts._lru import BoundedCache
from contracts.canonical import parse_json_object
from contracts.head_note import SignedHead, head_digest
from contracts.heads import (
    FoldInput,
    FoldProof,
    FoldRecord,
    HeadLog,
    VerifiedFold,
    verify_fold,
)
from contracts.hops import MAX_HOP_BYTES, hop_bytes
from contracts.merkle import leaf_hash
from contracts.rules import promise_refusal
from contracts.serve import build_commitment, build_obligation
from contracts.statements import Commitment, Obligation
from nodes import store as st
from nodes.client import HeldFold
from nodes.context import HeldValue, NodeContext, check_value_ref, held_fold, ms
from nodes.cosigner import Witnessing
from nodes.errors import MalformedRequest, PromiseOutOfRange, RequestTooLarge
from nodes.logging import get_logger
from nodes.messages import CommittedCompaction, CommittedFold, Delivery
from nodes.origin_folds import MAX_DEMANDS_PER_CALL, Own, OwnFolds, own_key

__all__ = ["MAX_APPEND_HOPS", "MAX_FOLD_HOPS", "MAX_SEQ", "OriginLog"]

log = get_logger(__name__)

#: Promises this node signs (``CommitFold``): deadline and lifetime bounds are
#: contracts.rules' (MIN/MAX_DEADLINE_MS, MIN/MAX_SERVE_FOR_MS), the same on every route.
#: Sequence numbers are SQLite integers.
MAX_SEQ = 2**63 - 1
MAX_APPEND_HOPS = 10_000
MAX_FOLD_HOPS = 100_000
#: Heads whose held values a later re-ask's cosignatures are carried onto, at most.
_VALUED_HEADS = 64


class OriginLog:
    """The origin's hop log and commits; see the module docstring."""

    def __init__(
        self,
        ctx: NodeContext,
        folds: OwnFolds,
        *,
        hold: Callable[[str, HeldValue], None],
        witnessing: Witnessing,
        find: Callable[[str], HeldValue | None] | None = None,
    ) -> None:
        self.ctx = ctx
        #: The witnesses this origin asks to cosign each head (nodes.cosigner).
        self._witnessing = witnessing
        self.config = ctx.config
        self.identity = ctx.identity
        self.store = ctx.store
        self.node_id = ctx.identity.node_id
        self._folds = folds
        #: Where a value committed with its bytes is held (the holder role's table).
        self._hold = hold
        self._find = find
        #: head digest → the values committed with their bytes under it (held here),
        #: re-held with the note a later re-ask cosigned
        self._valued: BoundedCache[str, tuple[str, ...]] = BoundedCache(_VALUED_HEADS)
        self._commit_lock = asyncio.Lock()
        #: This origin's log of signed heads for the current epoch (rebuilt from
        #: the store when missing).
        self._head_log: HeadLog | None = None
        witnessing.on_recosigned(self._keep_cosigned)

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
        made: list[Own] = []

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
            made.append(Own(obligation, commitment, commitment_bytes))
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
            self._folds.remember(ours)
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

    async def _keep_cosigned(self, before: bytes, after: bytes) -> None:
        """Keep ``after`` (``before`` with cosignature lines appended) as the stored head,
        and as the head of the values committed under it that are still held as then."""
        digest = head_digest(after)
        if await self.store.cosigned_head(digest, after):
            self._folds.open_own_head(after)  # verified once here, served from memory
        log.info("cosigned_head_kept", head=digest[:16], grew=len(after) - len(before))
        refs = self._valued.get(digest)
        if self._find is None or refs is None:
            return
        for ref in refs:
            held = self._find(ref)
            if held is None or held.delivery.heads != (before,):
                continue  # gone, or delivered anew since: left as it is
            self._hold(
                ref,
                HeldValue(
                    dataclasses.replace(held.delivery, heads=(after,)),
                    tuple(
                        dataclasses.replace(f, obligation_bytes=after)
                        if f.obligation_bytes == before
                        else f
                        for f in held.folds
                    ),
                    held.custody,
                ),
            )

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
        self._folds.keep_head(signed.head_note, head)
        #: each fold's proof checked once under the head; the values held reuse it
        verified_folds: dict[str, VerifiedFold] = {}
        for (ref, _, _), fold_row in zip(wanted, signed.folds, strict=True):
            verified = verified_folds[ref] = verify_fold(proofs[ref], head)
            self._folds.cache.put(
                own_key(head.digest, fold_row.leaf_hash),
                Own(verified.obligation, verified.commitment, b"", verified),
            )
            leaves = signed_leaves.get(ref)
            if leaves is not None:
                # Durable now, and exactly the bytes the root was signed over: the
                # first demand for this fold is served from memory, not read back.
                self._folds.keep_leaves(verified.commitment.digest, leaves)
        self.ctx.behaviour.after_compaction(head, [f.record for f in signed.folds], inputs)
        # The witnesses' cosignatures ride on the note delivered (same head digest),
        # and are kept in the store: a restarted origin serves what it delivered.
        note = await self._witnessing.cosign_head(signed.head_note, head_log)
        if note != signed.head_note:
            await self._keep_cosigned(signed.head_note, note)
        out = CommittedCompaction(note, tuple(f.proof for f in signed.folds), pending)
        valued = tuple(ref for ref, _, value in wanted if value)
        if valued and self._witnessing.origin.addresses:
            self._valued.put(signed.head_digest, valued)
        for (ref, _, value), fold in zip(wanted, signed.folds, strict=True):
            if value:
                verified = verified_folds[ref]
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
