"""The rule by which a correct origin answers a demand for one fold: serve or refuse why.

One function for both statement forms, :func:`contracts.serve.answer_demand`
(a lone demand, signed receipt) and :func:`contracts.batch.batch_receipt_item`
(an item of a receipt batch), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.merkle import merkle_root
from contracts.rules import expired
from contracts.statements import Commitment, Demand, Obligation, ReceiptStatus, RefusalReason

__all__ = ["refusal_for"]


def refusal_for(
    o: Obligation,
    c: Commitment,
    d: Demand,
    hops: Sequence[bytes] | None,
    now: int,
    hops_root: str | None = None,
) -> tuple[ReceiptStatus, RefusalReason] | None:
    """Why a correct origin does not serve demand ``d`` (status and reason), or None
    when it serves exactly ``hops``; the one rule for a lone demand and a batch item.

    In this order: EXPIRED at/after ``serve_until``; NOT_BOUND_HOLDER for a
    holder-bound obligation and another holder; BAD_DEMAND for a leaf outside
    the fold; PENDING / EVICTED when the fold cannot be read (``hops`` None);
    STORE_CORRUPTED when the bytes read no longer reproduce the committed root
    (``hops_root``: their root when the caller already has it; without it the
    root is recomputed here) — said rather than signing bytes that miss the
    origin's own root, which would be bad_data against itself.
    """
    if expired(o.serve_until, now):
        return ReceiptStatus.REFUSED, RefusalReason.EXPIRED
    if o.holder is not None and d.holder != o.holder:
        return ReceiptStatus.REFUSED, RefusalReason.NOT_BOUND_HOLDER
    if d.leaves and d.leaves[-1] >= c.leaf_count:
        return ReceiptStatus.REFUSED, RefusalReason.BAD_DEMAND
    if hops is None:
        if c.provenance_pending:
            return ReceiptStatus.PENDING, RefusalReason.PROVENANCE_PENDING
        return ReceiptStatus.ABSENT, RefusalReason.EVICTED
    if len(hops) != c.leaf_count:
        root = None
    elif hops_root is not None:
        root = hops_root
    else:
        root = merkle_root(hops).hex()
    if root != c.root:
        return ReceiptStatus.ABSENT, RefusalReason.STORE_CORRUPTED
    return None
