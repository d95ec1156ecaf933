"""A holder node clears a stored suspicion by a later receipt, whatever order its calls end in.

A node rehydrates the same value more than once at a time (the crash
campaign's holder B does: a rehydration started while the origin was down
still runs when the next one, made after the restart, is served). The
suspicion of the first and the receipt of the second then race: the receipt
may be checked while the suspicion's store write is still in flight, or
before the suspicion is recorded at all. Either way the node holds a receipt
of the origin issued after the suspected demand, so the suspicion must end
cleared — a standing one accuses an honest origin.

The interleaving is forced here by holding the store's evidence write open
until the served rehydration has finished (in-memory nodes, real stores).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodes.client import HeldFold, Holder
from nodes.messages import Outcome, RehydrationReport
from tests.nodes.rpc_support import MemCluster, single


async def _rehydrate(cluster: MemCluster, value_ref: str, fold: HeldFold) -> RehydrationReport:
    """The holder node's rehydration, witness asked; not run through the session's
    accusation audit: the origin really is down for one of them (``crashed``)."""
    holder = cluster.holder("holder")
    return await holder.rehydrate(value_ref, [fold], witnesses=[cluster.address("witness")])


async def _suspicion_written_while_served(cluster: MemCluster, *, prime: bool) -> dict[str, int]:
    """A suspicion whose store write is held open while a later demand is served.

    ``prime``: the node had checked a receipt of this origin before (its cache of
    suspected origins is loaded), as a node that served anything has.
    """
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 3)
    if prime:
        # another fold of the origin: this one's hops are not in the holder's cache
        other = await cluster.fold("origin", "v0", 1, first_step=10)
        primed = await _rehydrate(cluster, "v0", other)
        assert single(primed).outcome is Outcome.SERVED

    writing, release = asyncio.Event(), asyncio.Event()
    real_add = holder.store.add_evidence

    async def held_open(**kw: Any) -> bool:
        writing.set()
        await release.wait()
        return await real_add(**kw)

    holder.store.add_evidence = held_open  # type: ignore[method-assign]
    origin.crashed = True  # down: the next demand goes unanswered, the witness confirms
    suspected = asyncio.create_task(_rehydrate(cluster, "v1", fold))
    await asyncio.wait_for(writing.wait(), 30)
    origin.crashed = False  # back: a later demand is served while the write is in flight
    served = single(await _rehydrate(cluster, "v1", fold))
    assert served.outcome is Outcome.SERVED, served
    assert served.asks == 1, served
    release.set()
    outcome = single(await suspected)
    assert outcome.outcome is Outcome.UNANSWERED, outcome.detail
    assert outcome.witness_confirmed, outcome.detail
    holder.store.add_evidence = real_add  # type: ignore[method-assign]
    return await holder.stats()


@pytest.mark.parametrize("prime", [False, True], ids=["fresh-node", "after-a-receipt"])
async def test_a_receipt_checked_before_the_suspicion_is_stored_clears_it(
    cluster: MemCluster, prime: bool
) -> None:
    stats = await _suspicion_written_while_served(cluster, prime=prime)
    assert stats.get("evidence_unanswered", 0) == 0, stats
    assert stats["evidence_cleared"] == 1, stats


async def test_a_fold_of_a_suspected_origin_is_asked_again_not_taken_from_the_cache(
    cluster: MemCluster,
) -> None:
    """The node holds the fold's hops from a served rehydration, and a suspicion from
    another one that did not use them (it started before they were cached). Its next
    rehydration must ask the origin: only an answer can clear the suspicion."""
    origin = await cluster.add("origin")
    holder = await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 3)
    assert single(await _rehydrate(cluster, "v1", fold)).outcome is Outcome.SERVED  # cached
    uncached = Holder(
        holder.identity,
        holder.transport,
        evidence_dir=cluster.root / "holder" / "evidence",
        reasks=1,
        cache=False,
        on_evidence=holder.keep_evidence,
        on_receipt=holder.clear_suspicions,
    )
    origin.crashed = True
    suspected = single(
        await uncached.rehydrate("v1", [fold], witnesses=[cluster.address("witness")])
    )
    assert suspected.outcome is Outcome.UNANSWERED, suspected.detail
    assert (await holder.stats())["evidence_unanswered"] == 1
    origin.crashed = False
    again = single(await _rehydrate(cluster, "v1", fold))
    assert again.outcome is Outcome.SERVED, again.detail
    assert again.asks == 1, again  # asked, not served from the cache
    stats = await holder.stats()
    assert stats.get("evidence_unanswered", 0) == 0, stats
    assert stats["evidence_cleared"] == 1, stats
    # cleared: the cache serves again
    assert single(await _rehydrate(cluster, "v1", fold)).asks == 0
