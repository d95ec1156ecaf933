"""Fixed keys, a fixed clock and a small world of signed statements for tests.

Keys come from fixed 32-byte seeds, so every signature (Ed25519 is
deterministic) and every digest is reproducible: the golden vectors rely on
it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from contracts import (
    Commitment,
    Demand,
    FoldInput,
    HeadLog,
    Identity,
    Obligation,
    Receipt,
    Signed,
    SignedHead,
    VerifiedFold,
    answer_demand,
    build_commitment,
    build_demand,
    build_obligation,
    hop_bytes,
    sign_statement,
    verify_fold,
)
from contracts.batch import (
    batch_receipt_item,
    build_demand_batch,
    served_item,
    sign_receipt_batch,
)
from contracts.envelope import Envelope
from contracts.merkle import leaf_hash, merkle_root

__all__ = [
    "DAY",
    "EPOCH",
    "HOUR",
    "NOW",
    "BatchWorld",
    "HeadWorld",
    "World",
    "fixed_identity",
    "make_batch_world",
    "make_head_world",
    "make_hops",
    "make_world",
    "resign_receipt",
]

#: Fixed clock: 2026-11-29T10:00:00Z in ms since the Unix epoch.
NOW = 1_795_946_400_000
HOUR = 3_600_000
DAY = 24 * HOUR
EPOCH = "run-1"


def fixed_identity(name: str) -> Identity:
    """Deterministic test key: seed = SHA-256("provnet test key " + name)."""
    return Identity.from_seed(hashlib.sha256(f"provnet test key {name}".encode()).digest())


def make_hops(origin: str, n: int, *, epoch: str = EPOCH, start: int = 1) -> list[bytes]:
    """``n`` canonical hops shaped like the experiment's lineage records."""
    out = []
    for step in range(start, start + n):
        fields = {
            "hop_id": f"h{step:06d}",
            "step": step,
            "op": ("SOURCE_FETCH", "CACHE_READ", "LLM_TRANSFORM", "TOOL_CALL")[step % 4],
            "axis_deltas": {"freshness": 0.7} if step % 3 == 0 else {},
            "taints_added": [f"taint:stale_cache:{step}"] if step % 3 == 0 else [],
            "parent_hop_ids": [] if step == start else [f"h{step - 1:06d}"],
        }
        out.append(hop_bytes(fields, origin, epoch))
    return out


@dataclass(frozen=True, slots=True)
class World:
    origin: Identity
    holder: Identity
    witness: Identity
    witness2: Identity
    attester: Identity
    stranger: Identity
    hops: tuple[bytes, ...]
    commitment: Signed[Commitment]
    obligation: Signed[Obligation]
    demand: Signed[Demand]

    def answer(self, demand: Signed[Demand], *, now: int, serve: bool = True) -> Signed[Receipt]:
        """The origin answers ``demand``: all of the world's hops, or none (pending)."""
        return answer_demand(
            self.origin,
            demand,
            obligation=self.obligation,
            commitment=self.commitment,
            hops=self.hops if serve else None,
            now=now,
        )


def make_world(
    n_hops: int = 8,
    *,
    serve_until: int = NOW + DAY,
    deadline_ms: int = 2_000,
    holder_bound: bool = False,
    provenance_pending: bool = False,
    leaves: Sequence[int] | None = None,
) -> World:
    origin = fixed_identity("origin")
    holder = fixed_identity("holder")
    hops = tuple(make_hops(origin.node_id, n_hops))
    c = build_commitment(
        origin,
        epoch=EPOCH,
        value_ref="value:42",
        fold_seq=3,
        hops=hops,
        issued_at=NOW,
        provenance_pending=provenance_pending,
    )
    o = build_obligation(
        origin,
        c,
        serve_until=serve_until,
        deadline_ms=deadline_ms,
        endpoints=["127.0.0.1:50051"],
        issued_at=NOW,
        holder=holder.node_id if holder_bound else None,
    )
    d = build_demand(holder, o, now=NOW + 1_000, leaves=leaves, nonce="a1" * 16)
    return World(
        origin=origin,
        holder=holder,
        witness=fixed_identity("witness"),
        witness2=fixed_identity("witness2"),
        attester=fixed_identity("attester"),
        stranger=fixed_identity("stranger"),
        hops=hops,
        commitment=c,
        obligation=o,
        demand=d,
    )


def resign_receipt(
    signer: Identity, receipt: Signed[Receipt], served: Sequence[bytes]
) -> Signed[Receipt]:
    """The receipt an origin would sign had it served ``served`` instead."""
    if receipt.statement.leaves is None:
        statement = dataclasses.replace(receipt.statement, served_root=merkle_root(served).hex())
    else:
        statement = dataclasses.replace(
            receipt.statement, leaf_hashes=tuple(leaf_hash(h) for h in served)
        )
    return sign_statement(signer, statement)


@dataclass(frozen=True, slots=True)
class HeadWorld:
    """An origin's epoch log after a few compactions, as a holder sees value:42."""

    origin: Identity
    holder: Identity
    log: HeadLog
    hops: dict[str, tuple[bytes, ...]]
    head: SignedHead
    fold: VerifiedFold
    demand: Signed[Demand]

    def answer(
        self, demand: Signed[Demand], hops: Sequence[bytes] | None, *, now: int
    ) -> Signed[Receipt]:
        """The origin answers ``demand`` against its head fold, serving ``hops``."""
        return answer_demand(
            self.origin,
            demand,
            obligation=self.fold.obligation,
            commitment=self.fold.commitment,
            hops=hops,
            now=now,
        )


def make_head_world(
    *,
    values: int = 3,
    n_hops: int = 8,
    compactions: int = 1,
    serve_until: int = NOW + DAY,
    pending: bool = False,
    leaves: Sequence[int] | None = None,
) -> HeadWorld:
    """``compactions`` compactions, each folding ``values`` values (value:42 among them)."""
    origin = fixed_identity("origin")
    holder = fixed_identity("holder")
    log = HeadLog(origin, EPOCH)
    refs = ["value:42", *(f"value:{i}" for i in range(1, values))]
    hops: dict[str, tuple[bytes, ...]] = {}
    for c in range(compactions):
        folds = []
        for v, ref in enumerate(refs):
            fold_hops = tuple(make_hops(origin.node_id, n_hops, start=1 + 100 * (c * values + v)))
            hops[ref] = fold_hops
            folds.append(FoldInput(value_ref=ref, fold_seq=c, hops=fold_hops))
        compaction = log.compact(
            folds,
            serve_until=serve_until,
            deadline_ms=2_000,
            endpoints=["127.0.0.1:50051"],
            issued_at=NOW + c,
            pending=pending,
        )
    head = compaction.head
    fold = verify_fold(compaction.proofs["value:42"], head)
    demand = build_demand(holder, fold.obligation, now=NOW + 1_000, leaves=leaves, nonce="a1" * 16)
    return HeadWorld(origin, holder, log, hops, head, fold, demand)


@dataclass(frozen=True, slots=True)
class BatchWorld:
    """A holder's one demand batch for every fold of a head (version 3, contracts.batch)."""

    world: HeadWorld
    folds: tuple[VerifiedFold, ...]  # in the batch's item order
    hops: tuple[tuple[bytes, ...], ...]  # each fold's stored bytes, same order
    demand: Envelope
    demands: tuple[Signed[Demand], ...]  # item i read as fold i's demand

    def key(self, i: int) -> tuple[str, str]:
        """Fold ``i``'s (obligation, commitment) digests: selects its batch items."""
        return self.folds[i].obligation.digest, self.folds[i].commitment.digest

    def answer(
        self,
        served: Sequence[Sequence[bytes] | None] | None = None,
        *,
        now: int,
        leaves: Sequence[tuple[int, ...] | None] | None = None,
    ) -> Envelope:
        """The origin's one receipt batch, serving ``served[i]`` for fold ``i`` (default:
        the stored bytes; None: a refusal as ``answer_demand`` gives it)."""
        hops = self.hops if served is None else served
        items = []
        for fold, demand, fold_hops in zip(self.folds, self.demands, hops, strict=True):
            o, c = fold.obligation, fold.commitment
            if fold_hops is not None and list(fold_hops) != list(self.hops[self.folds.index(fold)]):
                items.append(
                    served_item(
                        self.world.origin.node_id,
                        demand.statement,
                        demand.digest,
                        o.digest,
                        c.digest,
                        c.statement.leaf_count,
                        fold_hops,
                        now,
                    )
                )
                continue
            items.append(
                batch_receipt_item(
                    self.world.origin.node_id,
                    demand.statement,
                    demand.digest,
                    obligation=o.statement,
                    obligation_digest=o.digest,
                    commitment=c.statement,
                    commitment_digest=c.digest,
                    hops=fold_hops,
                    now=now,
                )
            )
        return sign_receipt_batch(
            self.world.origin,
            items,
            demand=self.demand.digest,
            nonce=self.demands[0].statement.nonce,
            issued_at=now,
        )


def make_batch_world(*, values: int = 3, n_hops: int = 8, pending: bool = False) -> BatchWorld:
    """Every fold of one compaction demanded from the origin in one signed batch."""
    w = make_head_world(values=values, n_hops=n_hops, pending=pending)
    refs = ["value:42", *(f"value:{i}" for i in range(1, values))]
    by_key = {}
    for ref in refs:
        fold = verify_fold(w.log.fold_proof(ref), w.head)
        by_key[(fold.obligation.digest, fold.commitment.digest)] = (fold, w.hops[ref])
    envelope, batch = build_demand_batch(
        w.holder,
        [(f.obligation.statement, f.obligation.digest, None) for f, _ in by_key.values()],
        origin=w.origin.node_id,
        nonce="d4" * 16,
        now=NOW + 1_000,
    )
    ordered = [by_key[(it.obligation, it.commitment)] for it in batch.items]
    return BatchWorld(
        w,
        tuple(f for f, _ in ordered),
        tuple(h for _, h in ordered),
        envelope,
        tuple(Signed(envelope, batch.demand(i)) for i in range(len(batch.items))),
    )
