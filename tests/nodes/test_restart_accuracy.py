"""A correct origin that restarts is never accused (S8 across the replay floor).

A node keeps replay protection across restarts with a durable *replay floor*:
every demand it ever accepted is dated below it, and after a restart it
answers ABORTED to demands dated below it (they may be replays). The floor
runs up to a lease ahead of the clock, so a node that came straight back
would turn away even fresh demands for a moment — and a holder re-asking, or
a witness re-issuing, inside that moment would record a correct origin as
``unanswered``. These tests restart a faithful origin right after it served
and demand again at once.
"""

from __future__ import annotations

from nodes.client import Outcome
from tests.nodes.rpc_support import AUDIT, MemCluster, accusation_audit, single

__all__ = ["accusation_audit"]


async def test_origin_restarted_right_after_serving_serves_fresh_demands_unaccused(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    await cluster.add("holder")
    await cluster.add("witness")
    fold = await cluster.fold("origin", "v1", 4)
    first = await cluster.rehydrate("holder", "v1", [fold], witnesses=["witness"])
    assert single(first).outcome is Outcome.SERVED

    # Restart on the same data dir at once: the floor the first run left is ahead.
    await origin.close()
    restarted = await cluster.add("origin")
    assert restarted.node_id == origin.node_id
    # It came up only once that floor was in the past.
    assert restarted.clock() * 1000 >= restarted.origin.replay.restart_floor_ms > 0
    # A holder with an empty cache must go to the origin for the hops.
    await cluster.add("holder2")
    accused_before = len(AUDIT.correct_accused)
    second = await cluster.rehydrate("holder2", "v1", [fold], witnesses=["witness"])

    outcome = single(second)
    assert outcome.outcome is Outcome.SERVED, outcome.detail
    assert not outcome.accuses
    assert len(AUDIT.correct_accused) == accused_before
