"""A holder's signed demands under heads: one form, one call per origin, whose item is whose.

docs/wire.md: folds under heads are demanded with one signed demand per
origin naming them all (a lone fold: a demand naming one); there is no
second form to fall back to, so an origin that cannot read it refuses the
call (``INVALID_ARGUMENT``, an unsigned error: ``rejected``, no hops). A
receipt's item for a fold is the one naming that fold, in any order (last
test).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contracts.batch import (
    DEMAND_BATCH_TYPE,
    decode_demand_batch,
    served_item,
    sign_receipt_batch,
)
from contracts.envelope import Envelope
from contracts.hops import hop_bytes
from contracts.statements import Receipt, ReceiptStatus, RefusalReason
from nodes import origin as origin_role
from nodes.messages import Answer, Delivery, Outcome
from nodes.services import NodeCore
from tests.nodes.rpc_support import MemCluster, audit, hop_json, single


async def _held_under_one_head(cluster: MemCluster, refs: list[str], first: int = 1) -> None:
    """The origin commits one compaction; the holder holds each value under the head."""
    origin = cluster.nodes["origin"]
    folds: list[tuple[str, list[int], bytes]] = []
    for i, ref in enumerate(refs):
        _, seqs = await origin.append([hop_json(first + 3 * i + j) for j in range(3)])
        folds.append((ref, list(seqs), b""))
    out = await origin.commit_compaction(folds)
    for ref, proof in zip(refs, out.fold_proofs, strict=True):
        delivery = Delivery(ref, b"v", (), (), origin.node_id, (proof,), (out.head,))
        await origin.send(cluster.address("holder"), delivery, 5.0)


async def test_an_origin_that_cannot_read_the_one_demand_form_is_not_asked_another(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One signed form per demand: an origin that refuses it as unreadable gets the
    refusal recorded (``rejected``, an unsigned status, never evidence), in one call."""
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await _held_under_one_head(cluster, ["a", "b", "c"])
    # The origin reads some other payload type: the demand's means nothing to it.
    monkeypatch.setattr(origin_role, "DEMAND_BATCH_TYPE", DEMAND_BATCH_TYPE + "+unknown")
    folds = [f for ref in ("a", "b", "c") for f in holder.held(ref).folds]
    holder.holder.unsigned_first = False  # the signed demands a failed unsigned ask leads to
    calls = holder.holder.demand_rpcs
    report = await holder.holder.rehydrate("abc", folds)
    outcome = single(report)
    assert outcome.outcome is Outcome.REJECTED, outcome.detail
    assert "INVALID_ARGUMENT" in outcome.detail
    assert not report.hops
    assert holder.holder.demand_rpcs - calls == 1


async def test_a_lone_fold_under_a_head_is_demanded_as_a_demand_of_one(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A demand for one fold is the same form as for several: one fold named."""
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await _held_under_one_head(cluster, ["a"])
    sent: list[bytes] = []
    real = holder.holder.transport.demand

    async def spy(address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        sent.extend(demands)
        return await real(address, demands, timeout)

    monkeypatch.setattr(holder.holder.transport, "demand", spy)
    holder.holder.unsigned_first = False
    report = audit(
        await holder.holder.rehydrate("a", holder.held("a").folds), cluster.correct_ids()
    )
    assert single(report).outcome is Outcome.SERVED
    assert len(sent) == 1
    envelope = Envelope.from_bytes(sent[0])
    assert envelope.payload_type == DEMAND_BATCH_TYPE
    assert len(decode_demand_batch(envelope.payload).items) == 1


async def test_an_origin_that_reads_batches_is_asked_with_one(cluster: MemCluster) -> None:
    """Several folds of one origin: one demand call naming them all, served."""
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await _held_under_one_head(cluster, ["a", "b"])
    folds = [f for ref in ("a", "b") for f in holder.held(ref).folds]
    calls = holder.holder.demand_rpcs
    report = audit(await holder.holder.rehydrate("ab", folds), cluster.correct_ids())
    assert single(report).outcome is Outcome.SERVED
    assert holder.holder.demand_rpcs - calls == 1


# --------------------------------------------------------------------------- a receipt batch


class _Reordering:
    """An origin's answers to a demand batch, re-signed by the origin with one fold
    served, the other PENDING, and the items in the reverse of the demand's order."""

    def __init__(self, real: Any, origin: NodeCore, hops: dict[str, list[bytes]]) -> None:
        self.real, self.origin, self.hops = real, origin, hops

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        answers = await self.real.demand(address, demands, timeout)
        envelope = Envelope.from_bytes(demands[0])
        batch = decode_demand_batch(envelope.payload)
        first, second = batch.demand(0), batch.demand(1)
        now = self.origin.now_ms()
        served = served_item(
            self.origin.node_id, first, envelope.digest, first.obligation, first.commitment,
            len(self.hops[first.commitment]), self.hops[first.commitment], now,
        )  # fmt: skip
        pending = Receipt(
            self.origin.node_id, second.obligation, second.commitment, envelope.digest,
            second.nonce, ReceiptStatus.PENDING, now, RefusalReason.PROVENANCE_PENDING,
            len(self.hops[second.commitment]),
        )  # fmt: skip
        signed = sign_receipt_batch(
            self.origin.identity, [pending, served], demand=envelope.digest,
            nonce=batch.nonce, issued_at=now,
        )  # fmt: skip
        return [
            Answer(signed.to_bytes(), answers[0].commitment, tuple(self.hops[first.commitment])),
            Answer(b"", answers[1].commitment, ()),
        ]


async def test_each_fold_is_judged_by_the_receipt_item_that_names_it_not_by_position(
    tmp_path: Path,
) -> None:
    """A receipt batch whose items come in another order than the demand's: the item
    for a fold is the one naming it; a PENDING fold is pending, whatever item sits at
    its position (here the other fold's SERVED one)."""
    cluster = MemCluster(tmp_path, deadline_ms=300, reasks=0)
    try:
        origin = await cluster.add("origin", provenance_pending=True)
        holder = await cluster.add("holder")
        await _held_under_one_head(cluster, ["a", "b"])
        folds = [f for ref in ("a", "b") for f in holder.held(ref).folds]
        hops = {  # the hop bytes the origin stored (and committed to)
            f.commitment.digest: [
                hop_bytes(json.loads(hop_json(1 + 3 * i + j)), origin.node_id, origin.store.epoch)
                for j in range(3)
            ]
            for i, f in enumerate(folds)
        }
        holder.holder.transport = _Reordering(holder.holder.transport, origin, hops)
        report = await holder.holder.rehydrate("ab", folds)
        outcomes = {o.outcome for o in report.outcomes}
        assert len(report.hops) == 3, report.outcomes  # one fold served and verified
        assert outcomes == {Outcome.PENDING}, report.outcomes
    finally:
        await cluster.close()
