"""The holder role: values delivered to this node, verified, held and passed on.

What this role promises. A delivery is held only once every statement it
carries verifies (commitments and obligations addressed to this node, each
head's signature once, each fold proof hashed under its head) and the
statements are kept verbatim in the store; the acknowledgement returned
says so, with a signed delivery receipt naming exactly the folds held when
the sender asks for one. Two commitments of one origin
for one fold with different roots, or two heads of one compaction slot with
different trees, are recorded as evidence (``equivocation``, ``split_view``)
naming that origin, and the delivery is still accepted. Held values are
bounded per delivering key (:mod:`nodes.held`). A held value is forwarded
unchanged, heads a peer already acknowledged sent as digests
(:class:`nodes.elision.HeadElision`), and rehydrated from its origins through
the holder client (:class:`nodes.client.Holder`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from contracts._lru import BoundedCache
from contracts.canonical import sha256_hex
from contracts.custody import CustodyFold
from contracts.errors import ContractError, EncodingError
from contracts.evidence import equivocation_evidence, split_view_evidence
from contracts.head_note import SignedHead
from contracts.heads import FoldProof, HeadCache, verify_fold
from contracts.serve import verify_delivery
from contracts.signed import Signed, StatementSigner, open_statement
from contracts.statements import Commitment, DeliveryReceipt, Obligation, StatementKind
from nodes import store as st
from nodes.client import HeldFold
from nodes.context import STATEMENT_CACHE, HeldValue, NodeContext, check_value_ref, held_fold, ms
from nodes.cosigner import Witnessing
from nodes.custodian import custody_folds, rehydrate_with_custody
from nodes.custody_elision import HeldStatements
from nodes.elision import HeadElision
from nodes.errors import (
    MalformedRequest,
    PeerUnavailable,
    RequestTooLarge,
    UnknownCommitment,
    UnknownPeer,
    UnknownValue,
)
from nodes.held import HeldValues
from nodes.logging import get_logger
from nodes.messages import Acknowledgement, Delivery, Outcome, RehydrationReport
from nodes.transport import CallFailed

__all__ = [
    "DELIVER_TIMEOUT_S",
    "MAX_COMMITMENTS_PER_VALUE",
    "MAX_HELD_BYTES",
    "MAX_HELD_VALUES",
    "Holding",
]

log = get_logger(__name__)

MAX_COMMITMENTS_PER_VALUE = 256
#: Held (delivered) values kept in memory: count and bytes; oldest evicted.
MAX_HELD_VALUES = 4096
MAX_HELD_BYTES = 256 * 1024 * 1024
#: A delivery's budget when its caller sets none (the servicer passes the call's own).
DELIVER_TIMEOUT_S = 30.0


def _held_size(value: HeldValue) -> int:
    d = value.delivery
    return (
        len(d.value)
        + sum(map(len, d.commitments))
        + sum(map(len, d.obligations))
        + sum(map(len, d.custody))
    )


class Holding:
    """The holder role of one node; see the module docstring."""

    def __init__(self, ctx: NodeContext, witnessing: Witnessing) -> None:
        self.ctx = ctx
        #: The witness quorum this holder requires of a head (nodes.cosigner).
        self._witnessing = witnessing
        self.config = ctx.config
        self.identity = ctx.identity
        self.store = ctx.store
        self.node_id = ctx.identity.node_id
        self._receipts = StatementSigner(ctx.identity, StatementKind.DELIVERY_RECEIPT)
        # the last value digested, and its digest: a relay digests what it received
        # for its receipt, then the same bytes again to check the next one's receipt
        self._last_digest: tuple[bytes | None, str] = (None, "")
        #: Relay custody (``relay_custody_k``): the statements a forward carries.
        self.relay_custody: Callable[[HeldValue], Awaitable[tuple[bytes, ...]]] | None = None
        self._held: HeldValues[HeldValue] = HeldValues(
            max_values=MAX_HELD_VALUES, max_bytes=MAX_HELD_BYTES, on_evict=self._evicted
        )
        # (commitment, obligation) digests already checked for equivocation and kept
        # in the store: delivered again (every decision re-delivers a value's
        # statements), they need neither the check nor the no-op write again.
        self._kept_pairs: BoundedCache[tuple[str, str], None] = BoundedCache(STATEMENT_CACHE)
        # Fold proofs already proved under a head this node verified, by the proof
        # bytes' digest: delivered again, the proof is not parsed and hashed again
        # (its head is still checked unexpired, which costs no signature).
        self._kept_folds: BoundedCache[str, tuple[str, HeldFold]] = BoundedCache(STATEMENT_CACHE)
        # Signed tree heads this node verified as a receiver (each signature checked
        # once), and the heads each peer acknowledged holding (sent as digests
        # after), with their origins (a peer holds their keys:
        # named by key id after).
        self.heads = HeadCache()
        self._elision = HeadElision()
        # Custody notes this node verified, by digest: later sent as digests.
        self._statements = HeldStatements()

    def _value_digest(self, value: bytes) -> str:
        last = self._last_digest
        if last[0] is value:
            return last[1]
        digest = sha256_hex(value)
        self._last_digest = (value, digest)
        return digest

    def __len__(self) -> int:
        """Values held."""
        return len(self._held)

    async def deliver(
        self,
        delivery: Delivery,
        *,
        value_digest: str | None = None,
        by: str | None = None,
        signed: bool = False,
    ) -> Acknowledgement:
        """Verify and hold a delivered value; acknowledge it, with our signed
        delivery receipt when ``signed`` (the sender cites it: ``Forward``).

        ``value_digest`` is ``sha256_hex(delivery.value)`` when the caller has
        already computed it (off the event loop, for a large value). ``by``: the
        key that signed the call (None: an in-process caller), whose account
        the value is held on (:mod:`nodes.held`).
        """
        check_value_ref(delivery.value_ref)
        if len(delivery.commitments) != len(delivery.obligations):
            raise MalformedRequest(
                f"deliver {delivery.value_ref}: {len(delivery.commitments)} commitments but"
                f" {len(delivery.obligations)} obligations"
            )
        if len(delivery.commitments) > MAX_COMMITMENTS_PER_VALUE:
            raise RequestTooLarge(
                f"deliver {delivery.value_ref}: {len(delivery.commitments)} commitments exceeds"
                f" {MAX_COMMITMENTS_PER_VALUE}"
            )
        if delivery.sender and (
            len(delivery.sender) != 64 or delivery.sender.strip("0123456789abcdef")
        ):
            raise MalformedRequest(f"deliver: sender {delivery.sender!r:.80} is not a node id")
        now = self.ctx.clock()
        pairs = [
            verify_delivery(
                self.ctx.open_cached(c, Commitment),
                self.ctx.open_cached(o, Obligation),
                now=ms(now),
                holder=self.node_id,
            )
            for c, o in zip(delivery.commitments, delivery.obligations, strict=True)
        ]
        # Verified: keep the statements verbatim (the bytes received, not re-encoded),
        # all pairs in one transaction.
        kept: list[tuple[st.KeptCommitment, st.ObligationRecord]] = []
        for (commitment, obligation), c_bytes, o_bytes in zip(
            pairs, delivery.commitments, delivery.obligations, strict=True
        ):
            if self._kept_pairs.touch((commitment.digest, obligation.digest)):
                continue
            c = commitment.statement
            await self._check_equivocation(commitment)
            kept.append(
                (
                    st.KeptCommitment(
                        commitment.digest,
                        c.origin,
                        c.epoch,
                        c.value_ref,
                        c.fold_seq,
                        c.leaf_count,
                        c.root,
                        c_bytes,
                    ),
                    st.ObligationRecord(
                        obligation.digest,
                        commitment.digest,
                        obligation.statement.serve_until,
                        o_bytes,
                        obligation.statement.origin == self.node_id,
                    ),
                )
            )
        head_folds = await self._verify_head_folds(delivery, ms(now))
        # custody: statements (those sent by digest resolved: nodes.custody_elision)
        # verified and bound to the folds (nodes.custodian)
        notes = self._statements.resolve(delivery.value_ref, delivery.custody)
        custody = custody_folds(notes, head_folds, now_ms=ms(now))
        if kept:
            await self.store.put_delivered(kept, now_ms=ms(now))
            for c_kept, o_kept in kept:
                self._kept_pairs.put((c_kept.digest, o_kept.digest), None)
        # one note per statement, however many of the value's folds it covers
        kept_notes = tuple(
            dict.fromkeys(f.fold.custody.note for f in custody if isinstance(f.fold, CustodyFold))
        )
        self._statements.keep(kept_notes)
        first_origin = (
            pairs[0][0].statement.origin
            if pairs
            else head_folds[0].commitment.statement.origin
            if head_folds
            else self.node_id
        )
        sender = delivery.sender or first_origin
        folds = (
            *(
                HeldFold(c, o, c_bytes, o_bytes)
                for (c, o), c_bytes, o_bytes in zip(
                    pairs, delivery.commitments, delivery.obligations, strict=True
                )
            ),
            *head_folds,
        )
        self.hold(
            delivery.value_ref,
            HeldValue(
                Delivery(
                    delivery.value_ref,
                    delivery.value,
                    delivery.commitments,
                    delivery.obligations,
                    sender,
                    delivery.fold_proofs,
                    tuple(dict.fromkeys(f.obligation_bytes for f in head_folds)),
                    kept_notes,
                ),
                folds,
                custody,
            ),
            by=by,
        )
        receipt = b""
        if signed:
            # For a head-form fold the obligation digest is the head digest.
            receipt = self._receipts.sign(
                DeliveryReceipt(
                    holder=self.node_id,
                    sender=sender,
                    value_digest=value_digest or self._value_digest(delivery.value),
                    commitments=tuple(f.commitment.digest for f in folds),
                    obligations=tuple(f.obligation.digest for f in folds),
                    received_at=ms(now),
                ),
            )
        log.info(
            "value_delivered",
            value_ref=delivery.value_ref,
            commitments=len(pairs),
            sender=sender[:16],
        )
        return Acknowledgement(ms(now), receipt)

    async def _verify_head_folds(self, delivery: Delivery, now_ms: int) -> tuple[HeldFold, ...]:
        """Head form: each head's signature once (cached by digest), each fold proof hashed.

        A fold proof naming a head that is neither in the delivery nor verified
        here before is ``NOT_FOUND`` (the sender then sends the head itself).
        Two heads of one (origin, epoch, seq) with different trees are a split
        view: recorded as evidence, the delivery is still accepted.
        """
        if len(delivery.fold_proofs) + len(delivery.commitments) > MAX_COMMITMENTS_PER_VALUE:
            raise RequestTooLarge(
                f"deliver {delivery.value_ref}: {len(delivery.fold_proofs)} fold proofs exceeds"
                f" {MAX_COMMITMENTS_PER_VALUE}"
            )
        if len(delivery.heads) > len(delivery.fold_proofs):
            raise MalformedRequest(
                f"deliver {delivery.value_ref}: {len(delivery.heads)} heads for"
                f" {len(delivery.fold_proofs)} fold proofs"
            )
        heads: dict[str, SignedHead] = {}
        for data in delivery.heads:
            await self._witnessing.admit_head(data, now_ms, self.heads)  # the witness quorum
            known = self.heads.verify(data, now=now_ms)
            heads[known.digest] = known
            await self._check_split_view(known)
        held: list[HeldFold] = []
        for data in delivery.fold_proofs:
            key = sha256_hex(data)
            kept = self._kept_folds.peek(key)
            kept_head = self.heads.get(kept[0]) if kept is not None else None
            if kept is not None and kept_head is not None:
                self.heads.verify(kept_head, now=now_ms)  # still unexpired
                self._kept_folds.touch(key)
                held.append(kept[1])
                continue
            proof = FoldProof.from_bytes(data)
            head = heads.get(proof.head) or self.heads.get(proof.head)
            if head is None:
                raise UnknownCommitment(
                    f"deliver {delivery.value_ref}: fold proof names head {proof.head[:12]}…,"
                    " which this node has not verified; send the head"
                )
            head = self.heads.verify(head, now=now_ms)
            fold = verify_fold(proof, head)
            proved = held_fold(fold, data, head.to_bytes())
            self._kept_folds.put(key, (head.digest, proved))
            held.append(proved)
        return tuple(held)

    async def _check_split_view(self, head: SignedHead) -> None:
        """Two heads of one compaction slot with different trees: split-view evidence."""
        other = self.heads.conflicting(head)
        if other is None:
            return
        try:
            evidence = split_view_evidence(other, head, reported_at=self.ctx.now_ms())
        except ContractError:
            return
        origin = head.statement.origin
        await self.ctx.client().record_evidence(Outcome.SPLIT_VIEW, origin, evidence.to_bytes())
        log.warning("split_view_on_delivery", origin=origin[:16], seq=head.statement.seq)

    async def _check_equivocation(self, commitment: Signed[Commitment]) -> None:
        """Two commitments by one origin for one fold, different roots: record the proof.

        The delivery itself is still accepted (the value is what it is); the
        origin is named by an ``equivocation`` evidence file.
        """
        c = commitment.statement
        for kept in await self.store.commitments_for(c.origin, c.epoch, c.value_ref, c.fold_seq):
            if kept.digest == commitment.digest:
                continue
            other = self.ctx.open_cached(kept.envelope, Commitment, signer=c.origin)
            try:
                evidence = equivocation_evidence(other, commitment, reported_at=self.ctx.now_ms())
            except ContractError:
                continue
            await self.ctx.client().record_evidence(
                Outcome.EQUIVOCATION, c.origin, evidence.to_bytes()
            )
            log.warning(
                "equivocation_on_delivery",
                origin=c.origin[:16],
                value_ref=c.value_ref,
                fold_seq=c.fold_seq,
            )
            return

    def hold(self, value_ref: str, value: HeldValue, *, by: str | None = None) -> None:
        """Keep a held value on ``by``'s account: beyond MAX_HELD_VALUES/BYTES the
        oldest of the key holding the most is evicted, strangers' first, and a
        stranger never evicts a reserved key's value (:mod:`nodes.held`)."""
        self._held.put(
            value_ref, value, _held_size(value), by=by, reserved=self._reserved_deliverer(by)
        )

    def _reserved_deliverer(self, by: str | None) -> bool:
        """In-process callers, this node, its operator keys and its pinned peers."""
        return (
            by is None
            or by == self.node_id
            or by in self.config.operator_keys
            or any(p.node_id == by for p in self.config.peers)
        )

    def _evicted(self, value_ref: str, value: HeldValue) -> None:
        self.ctx.bump("held_evicted")
        log.info("held_value_evicted", value_ref=value_ref, peer=value.delivery.sender)

    def find(self, value_ref: str) -> HeldValue | None:
        """The held value ``value_ref``, or None."""
        return self._held.get(value_ref)

    def held(self, value_ref: str) -> HeldValue:
        value = self._held.get(value_ref)
        if value is None:
            raise UnknownValue(f"no held value {value_ref!r:.80} on node {self.config.name}")
        return value

    async def forward(
        self,
        value_ref: str,
        peer: str,
        *,
        deadline: float | None = None,
        signed_receipt: bool = True,
    ) -> bytes:
        """Deliver a held value unchanged to a peer; return its verified delivery receipt.

        ``signed_receipt=False`` for a caller that cites no receipt (the
        experiment's relays): the peer is asked for none, and ``b""`` is
        returned (design, "Sign where it carries information").
        """
        held = self.held(value_ref)
        try:
            address = self.config.peer(peer)
        except ValueError as exc:
            raise UnknownPeer(f"forward {value_ref}: {exc}") from exc
        # Not the serve deadline (deadline_ms: what obligations promise for a demand):
        # a delivery costs the peer a check of every statement and a durable write.
        timeout = self.ctx.timeout(deadline, DELIVER_TIMEOUT_S)
        outgoing = Delivery(
            held.delivery.value_ref,
            held.delivery.value,
            held.delivery.commitments,
            held.delivery.obligations,
            self.node_id,
            held.delivery.fold_proofs,
            held.delivery.heads,
            held.delivery.custody,
        )
        if self.relay_custody is not None:  # the relay's own statements (nodes.relay_custody)
            outgoing = replace(outgoing, custody=await self.relay_custody(held))
        try:
            ack, _ = await self.send(address, outgoing, timeout, signed=signed_receipt)
        except CallFailed as exc:
            # The peer's failure, not ours: never INTERNAL.
            raise PeerUnavailable(f"forward {value_ref}: peer {peer}: {exc}") from exc
        if not signed_receipt:
            return b""
        # What Forward returns is the peer's word that it holds the value: checked.
        receipt = open_statement(ack.receipt, DeliveryReceipt, signer=self.config.pinned_key(peer))
        r = receipt.statement
        if (
            r.sender != self.node_id
            or r.value_digest != self._value_digest(held.delivery.value)
            or r.commitments != tuple(f.commitment.digest for f in held.folds)
            or r.obligations != tuple(f.obligation.digest for f in held.folds)
        ):
            raise EncodingError(
                f"forward {value_ref}: peer {peer} acknowledged another sender, value,"
                " commitments or obligations"
            )
        return ack.receipt

    async def send(
        self, address: str, delivery: Delivery, timeout: float, *, signed: bool = False
    ) -> tuple[Acknowledgement, Delivery]:
        """Deliver to ``address``, sending only the digests of heads it acknowledged before.

        Returns the peer's acknowledgement (with its signed delivery receipt,
        parsed by nobody yet, when ``signed``) and the delivery as sent. An
        acknowledged head is held verified there, so later deliveries to that
        address carry the fold proof (which names the head) without the head.
        A peer that no longer holds it answers ``NOT_FOUND``; the delivery is
        then repeated once with every head (:class:`nodes.elision.HeadElision`).
        """
        return await self._elision.send(
            self.ctx.transport.deliver, address, delivery, timeout, signed=signed
        )

    async def rehydrate(
        self, value_ref: str, witnesses: Sequence[str] = (), *, deadline: float | None = None
    ) -> RehydrationReport:
        """Demand the folded hops of a held value from its origins (nodes.client.Holder)."""
        held = self.held(value_ref)
        if not witnesses:
            witnesses = tuple(p.name for p in self.config.peers)
        if held.custody:  # custodians after the origins (nodes.custodian)
            return await rehydrate_with_custody(
                self.ctx.client(),
                value_ref,
                held.folds,
                held.custody,
                witnesses=witnesses,
                deadline=deadline,
                hedge=self.config.custody_hedge,
            )
        report: RehydrationReport = await self.ctx.client().rehydrate(
            value_ref, held.folds, witnesses=witnesses, deadline=deadline
        )
        return report
