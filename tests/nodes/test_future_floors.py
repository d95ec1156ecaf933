"""Demands dated ahead of the origin's clock, inside the skew window: served as any.

A holder whose clock runs ahead of the origin's (by less than the ±30 s
window) is served every demand, however many; its demands are covered across
a restart by one durable floor of its own (``future_nonces``), not by an
entry per demand, and the file stays a few lines long. In-process nodes (the
NodeCore code the gRPC server runs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import open_statement
from contracts.statements import Receipt, ReceiptStatus
from nodes import services
from nodes.errors import DemandPredatesRestart
from nodes.services import FUTURE_NONCES_FILENAME, NodeCore
from tests.nodes.rpc_support import MemCluster

#: Inside the ±30 s window, far beyond the 500 ms slack.
AHEAD_MS = 20_000


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MemCluster]:
    mem = MemCluster(tmp_path, deadline_ms=300, reasks=0)
    try:
        yield mem
    finally:
        await mem.close()


async def _served(origin: NodeCore, demand: bytes) -> None:
    (answer,) = await origin.answer_demands([demand])
    receipt = open_statement(answer.receipt, Receipt, signer=origin.node_id).statement
    assert receipt.status is ReceiptStatus.SERVED


async def test_a_holder_ahead_of_the_clock_is_served_every_demand_and_keeps_one_entry(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "_FUTURE_FILE_SLACK_LINES", 8)
    origin = await cluster.add("origin")
    held = await cluster.fold("origin", "v", 3)
    holder = Identity.generate()
    last = 0
    for i in range(200):
        last = origin.now_ms() + AHEAD_MS + i
        await _served(origin, build_demand(holder, held.obligation, now=last).to_bytes())
    path = origin.config.data_dir / FUTURE_NONCES_FILENAME
    lines = path.read_text(encoding="ascii").splitlines()
    assert len(lines) <= 2 * 1 + 8 + 1, lines[:5]
    assert lines[-1] == f"{holder.node_id} {last}"


async def test_after_a_restart_a_holders_demands_up_to_its_floor_are_aborted_later_ones_served(
    cluster: MemCluster,
) -> None:
    origin = await cluster.add("origin")
    held = await cluster.fold("origin", "v", 3)
    holder = Identity.generate()
    at = origin.now_ms() + AHEAD_MS
    first = build_demand(holder, held.obligation, now=at).to_bytes()
    earlier = build_demand(holder, held.obligation, now=at - 1_000).to_bytes()
    await _served(origin, first)
    await origin.close()
    origin = await cluster.add("origin")  # same data dir and key
    with pytest.raises(DemandPredatesRestart, match=r"latest demand dated ahead"):
        await origin.answer_demands([first])  # a replay across the restart
    with pytest.raises(DemandPredatesRestart):
        await origin.answer_demands([earlier])  # dated before it: may have been answered
    await _served(origin, build_demand(holder, held.obligation, now=at + 1).to_bytes())
    # Nobody else's demands are touched by that holder's floor.
    await _served(origin, build_demand(Identity.generate(), held.obligation, now=at).to_bytes())
