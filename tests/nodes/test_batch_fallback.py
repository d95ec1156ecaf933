"""A holder that demands with a batch (payload version 3) from an origin older than that.

docs/wire.md: folds under heads are demanded with one signed demand batch per
origin; an origin older than version 3 reads a batch's envelope as a single
demand of an unknown payload type and refuses the call (``INVALID_ARGUMENT``,
an unsigned error: ``rejected``, no hops). The holder must then ask the same
folds once more with one signed demand per fold (the version 2 form, which
every origin that signs heads serves) and remember that this origin takes no
batches, so its next rehydrations go per fold at once.

The older origin here is a real node whose serve path is the per-demand one
of version 2: the batch payload type is unknown to it (what a version 2 node
does with a batch is exactly what this one does with an envelope of a payload
type it does not read).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.batch import DEMAND_BATCH_TYPE
from nodes import services
from nodes.messages import Delivery, Outcome
from tests.nodes.rpc_support import MemCluster, audit, hop_json, single


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MemCluster]:
    mem = MemCluster(tmp_path, deadline_ms=300, reasks=1)
    try:
        yield mem
    finally:
        await mem.close()


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


async def test_a_holder_falls_back_to_per_fold_demands_for_an_origin_without_batches(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await _held_under_one_head(cluster, ["a", "b", "c"])
    # The origin is of version 2: the batch payload type means nothing to its serve path.
    monkeypatch.setattr(services, "DEMAND_BATCH_TYPE", DEMAND_BATCH_TYPE + "+unknown")
    folds = [f for ref in ("a", "b", "c") for f in holder.held(ref).folds]
    calls = holder.holder.demand_rpcs
    report = audit(await holder.holder.rehydrate("abc", folds), cluster.correct_ids())
    outcome = single(report)
    assert outcome.outcome is Outcome.SERVED, outcome.detail
    assert len(report.hops) == 9
    assert holder.holder.demand_rpcs - calls == 2  # the batch refused, then one per-fold call
    # Remembered: the next rehydration from that origin goes per fold at once.
    await _held_under_one_head(cluster, ["d", "e"], first=100)
    folds = [f for ref in ("d", "e") for f in holder.held(ref).folds]
    calls = holder.holder.demand_rpcs
    report = await holder.holder.rehydrate("de", folds)
    assert single(report).outcome is Outcome.SERVED
    assert holder.holder.demand_rpcs - calls == 1


async def test_an_origin_that_reads_batches_is_asked_with_one(cluster: MemCluster) -> None:
    """The fallback costs nothing where batches are read: one batch call, served."""
    await cluster.add("origin")
    holder = await cluster.add("holder")
    await _held_under_one_head(cluster, ["a", "b"])
    folds = [f for ref in ("a", "b") for f in holder.held(ref).folds]
    calls = holder.holder.demand_rpcs
    report = audit(await holder.holder.rehydrate("ab", folds), cluster.correct_ids())
    assert single(report).outcome is Outcome.SERVED
    assert holder.holder.demand_rpcs - calls == 1
