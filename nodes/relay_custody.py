"""A relay takes custody when it forwards (``relay_custody_k``; docs/custody.md).

Before a node forwards a held value, it takes custody of the value's folds
itself — :meth:`nodes.custodian.Custodian.take`, the same steps as for an
origin's ask (head verified, hops fetched from the origin and verified against
the fold roots, durable, only then signed), with no RPC to itself — and the
forwarded delivery carries its statements after the ones the value already
had. Bounded: a fold that already carries ``relay_custody_k`` statements gets
none more, and no origin more than
:data:`contracts.custody.MAX_CUSTODY_PER_ORIGIN` in one delivery (what a
receiver accepts). A fold of this node's own, a pending head, or an origin
that does not serve: no statement, logged; the forward goes on unchanged.
"""

from __future__ import annotations

from contracts.custody import MAX_CUSTODY_PER_ORIGIN, CustodyFold
from contracts.errors import ContractError
from nodes.context import HeldValue
from nodes.custodian import Custodian
from nodes.errors import NodeError
from nodes.logging import get_logger
from nodes.transport import CallFailed

__all__ = ["relay_statements"]

log = get_logger("provnet.custody")


async def relay_statements(
    custodian: Custodian, node_id: str, held: HeldValue, k: int
) -> tuple[bytes, ...]:
    """The custody statements a forward of ``held`` carries: the value's own, then
    this node's for every fold with fewer than ``k`` (0: the value's own, unchanged)."""
    carried = tuple(held.delivery.custody)
    if k <= 0:
        return carried
    per_fold: dict[tuple[str, str], int] = {}
    per_origin: dict[str, int] = {}
    mine: set[tuple[str, str]] = set()
    for c in held.custody:
        fold = c.fold
        if not isinstance(fold, CustodyFold) or fold.custody is None:
            continue
        key = (fold.head.digest, fold.leaf_hash.hex())
        per_fold[key] = per_fold.get(key, 0) + 1
        origin = fold.head.statement.origin
        per_origin[origin] = per_origin.get(origin, 0) + 1
        if fold.custody.statement.custodian == node_id:
            mine.add(key)
    # the folds to take, grouped by head (one take per head, its folds at once)
    by_head: dict[str, tuple[bytes, list[bytes]]] = {}
    for f in held.folds:
        fold = f.fold
        if fold is None:
            continue
        origin = fold.head.statement.origin
        key = (fold.head.digest, fold.leaf_hash.hex())
        if origin == node_id or key in mine or per_fold.get(key, 0) >= k:
            continue
        if per_origin.get(origin, 0) >= MAX_CUSTODY_PER_ORIGIN:
            continue
        per_origin[origin] = per_origin.get(origin, 0) + 1
        by_head.setdefault(fold.head.digest, (f.obligation_bytes, []))[1].append(f.commitment_bytes)
    added: list[bytes] = []
    for digest, (head_note, proofs) in by_head.items():
        try:
            added.extend(await custodian.take(head_note, proofs))
        except (NodeError, CallFailed, ContractError) as exc:
            log.warning("relay_custody_not_taken", head=digest[:16], error=str(exc))
    return carried + tuple(added)
