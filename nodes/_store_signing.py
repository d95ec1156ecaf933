"""The fold signer the store calls inside its commit transaction.

:func:`fold_signer` closes over a node identity and the obligation terms and
returns a :data:`nodes.store.FoldSigner`: given the exact hop bytes the store
has just written, it builds and signs the ``Commitment`` (Merkle root over
those bytes) and the ``Obligation`` naming it, all through ``contracts`` —
the store itself never touches keys, hashing rules or statement encoding.

:func:`synthetic_hop` builds canonical bytes of a lineage hop shaped like the
experiment's (spec §3), for the crash driver and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from contracts.hops import hop_bytes
from contracts.identity import Identity
from contracts.serve import build_commitment, build_obligation
from nodes.store import FoldDraft, FoldSigner, SignedFold

__all__ = ["fold_signer", "synthetic_hop"]

_OPS = ("SOURCE_FETCH", "CACHE_READ", "LLM_TRANSFORM", "TOOL_CALL", "MERGE")


def fold_signer(
    identity: Identity,
    *,
    serve_until_ms: int | Callable[[FoldDraft], int],
    issued_at_ms: int,
    deadline_ms: int = 2_000,
    endpoints: Sequence[str] = (),
    holder: str | None = None,
) -> FoldSigner:
    """A signer for :meth:`nodes.store.HopStore.commit_fold`.

    ``serve_until_ms`` is a fixed time or a function of the draft (so one
    signer can give different folds different retention).
    """

    def sign(draft: FoldDraft) -> SignedFold:
        if draft.origin != identity.node_id:
            raise ValueError(
                f"fold of origin {draft.origin[:16]}… cannot be signed by {identity.node_id[:16]}…"
            )
        commitment = build_commitment(
            identity,
            epoch=draft.epoch,
            value_ref=draft.value_ref,
            fold_seq=draft.fold_seq,
            hops=draft.leaves,
            issued_at=issued_at_ms,
            provenance_pending=draft.provenance_pending,
        )
        until = serve_until_ms(draft) if callable(serve_until_ms) else serve_until_ms
        obligation = build_obligation(
            identity,
            commitment,
            serve_until=until,
            deadline_ms=deadline_ms,
            endpoints=endpoints,
            issued_at=issued_at_ms,
            holder=holder,
        )
        return SignedFold(
            commitment_digest=commitment.digest,
            commitment_envelope=commitment.to_bytes(),
            root=commitment.statement.root,
            obligation_digest=obligation.digest,
            obligation_envelope=obligation.to_bytes(),
            serve_until_ms=until,
        )

    return sign


def synthetic_hop(origin: str, epoch: str, seq: int, *, tag: str = "") -> bytes:
    """Canonical bytes of a hop ``h{seq:06d}`` (spec §3 shape) in ``epoch``.

    Deterministic in (origin, epoch, seq, tag); ``tag`` lets a test build a
    different hop at the same key.
    """
    op = _OPS[seq % len(_OPS)]
    fields = {
        "hop_id": f"h{seq:06d}",
        "step": seq,
        "op": op,
        "axis_deltas": {"freshness": 0.9} if seq % 3 == 0 else {},
        "taints_added": [f"taint:{op.lower()}:{seq}"] if seq % 4 == 0 else [],
        "parent_hop_ids": [f"h{seq - 1:06d}"] if seq > 1 else [],
    }
    if tag:
        fields["note"] = tag
    return hop_bytes(fields, origin, epoch)
