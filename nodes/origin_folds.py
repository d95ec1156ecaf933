"""What one origin signed, kept in memory: the folds its demands name, and their hop bytes.

Both halves of the origin role read and fill it: the log (:mod:`nodes.origin_log`)
as it commits a fold or a compaction — kept only after COMMIT, with the exact
bytes each root was signed over — and the answers (:mod:`nodes.origin`) as they
look a demand's fold up (step (4): one this node signed, else
:class:`UnknownCommitment`) and read its hops back under the committed root.
Everything here is immutable per digest, so a hit is always the right answer;
every cache is bounded (:class:`contracts._lru.BoundedCache`).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts._fields import is_digest
from contracts._lru import BoundedCache
from contracts.head_note import SignedHead, open_head
from contracts.heads import FoldProof, VerifiedFold, verify_fold
from contracts.signed import Signed
from contracts.statements import Commitment, Demand, Head, Obligation
from nodes.context import NodeContext
from nodes.errors import UnknownCommitment

__all__ = ["MAX_DEMANDS_PER_CALL", "Own", "OwnFolds", "own_key"]

#: Demands (or folds of one compaction) in one call.
MAX_DEMANDS_PER_CALL = 256
_OWN_CACHE = 100_000
_LEAF_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Own:
    """An obligation this node issued, its commitment, and the commitment's stored bytes."""

    obligation: Signed[Obligation]
    commitment: Signed[Commitment]
    commitment_bytes: bytes
    fold: VerifiedFold | None = None


def _leaves_size(leaves: tuple[bytes, ...]) -> int:
    """The weight of a fold's hop bytes in the leaf cache: their length."""
    return sum(len(x) for x in leaves)


def own_key(head_digest: str, leaf_hash: str) -> str:
    """The own-cache key of a fold under a head: head digest ‖ leaf hash (128 hex
    characters, so never a per-fold obligation digest). Looked up on every
    demand, so a concatenation rather than the store's hashed binding."""
    return head_digest + leaf_hash


class OwnFolds:
    """One origin's signed folds and their hop bytes in memory; see the module docstring."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        #: Folds by obligation digest (per-value form) or head digest ‖ leaf hash.
        self.cache: BoundedCache[str, Own] = BoundedCache(_OWN_CACHE)
        #: Hop bytes of folds read back under their committed roots, bounded in bytes.
        self.leaves: BoundedCache[str, tuple[bytes, ...]] = BoundedCache(
            None, maxweight=_LEAF_CACHE_BYTES, weigh=_leaves_size
        )

    def keep_head(self, note: bytes, head: SignedHead) -> None:
        """One of this node's heads, signed just now: opened without a verification."""
        self.ctx.statements.put((Head.KIND.value, note), head)

    def open_own_head(self, note: bytes) -> SignedHead:
        """One of this node's heads as stored: verified once, then cached by its bytes."""
        key = (Head.KIND.value, note)
        hit = self.ctx.statements.get(key)
        if isinstance(hit, SignedHead):
            return hit
        head = open_head(note, origin=self.ctx.node_id)
        self.ctx.statements.put(key, head)
        return head

    def remember(self, own: Own) -> None:
        """Keep a fold signed per value (by its obligation digest)."""
        self.cache.put(own.obligation.digest, own)

    async def lookup(self, demand: Signed[Demand]) -> Own:
        """Step (4): the fold ``demand`` names, if this node signed it (else
        :class:`UnknownCommitment`), from memory or the store."""
        d = demand.statement
        own = self.cache.peek(own_key(d.obligation, d.commitment)) or self.cache.peek(d.obligation)
        if own is not None:
            return own
        record = await self.ctx.store.obligation(d.obligation)
        if record is None:
            own = await self._head_fold(demand)
            if own is not None:
                return own
        if record is None or not record.local:
            raise UnknownCommitment(
                f"demand {demand.digest[:12]}… names obligation {d.obligation[:12]}…,"
                " which this node did not issue"
            )
        fold = await self.ctx.store.commitment(record.commitment_digest)
        if fold is None:
            raise UnknownCommitment(
                f"obligation {d.obligation[:12]}… names commitment"
                f" {record.commitment_digest[:12]}…, which this node does not hold"
            )
        own = Own(
            self.ctx.open_cached(record.envelope, Obligation, signer=self.ctx.node_id),
            self.ctx.open_cached(fold.envelope, Commitment, signer=self.ctx.node_id),
            fold.envelope,
        )
        self.remember(own)
        return own

    async def _head_fold(self, demand: Signed[Demand]) -> Own | None:
        """A demand naming one of our heads and a fold record under it (no signature checked:
        the head is our own, opened once and cached; the fold proof is hashed)."""
        d = demand.statement
        if not (is_digest(d.obligation) and is_digest(d.commitment)):
            return None
        return await self.under_head(d.obligation, d.commitment)

    async def under_head(self, head_digest: str, leaf: str) -> Own | None:
        """One of our heads (by digest) and a fold record under it (by leaf hash), if we
        signed them; kept in the own-cache when found, never when not."""
        row = await self.ctx.store.head_fold(head_digest, leaf)
        if row is None:
            return None
        head = self.open_own_head(row.head_note)
        fold = verify_fold(FoldProof.from_bytes(row.proof), head)
        own = Own(fold.obligation, fold.commitment, b"", fold)
        self.cache.put(own_key(row.head_digest, row.leaf_hash), own)
        return own

    def verified_root(
        self, commitment: Signed[Commitment], leaves: tuple[bytes, ...] | None
    ) -> str | None:
        """The committed root when ``leaves`` are the bytes kept in memory after the
        store read them back under it (a FOUND resolution, or the bytes a commit
        signed over); None otherwise, and the answer rule hashes them before
        anything is signed over them."""
        if leaves is not None and self.leaves.peek(commitment.digest) is leaves:
            return commitment.statement.root
        return None

    def cached_leaves(self, digest: str) -> tuple[bytes, ...] | None:
        """A fold's hop bytes if kept in memory (then most recently used), else None."""
        return self.leaves.get(digest)

    def keep_leaves(self, digest: str, leaves: tuple[bytes, ...]) -> None:
        """Remember a fold's hop bytes (immutable for its digest), bounded in bytes."""
        if not self.leaves.touch(digest):
            self.leaves.put(digest, leaves)
