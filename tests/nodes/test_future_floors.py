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
from nodes.future_floors import FutureFloors, RestartFloors, append_lines, read_floors
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


# --------------------------------------------------------------- the table (nodes.future_floors)

WINDOW_MS = 30_000


def _raise(table: FutureFloors, raises: dict[str, int], reserved: set[str] | None = None) -> None:
    lines, evict = table.plan(raises, reserved or set())
    table.apply(lines, evict)


def test_a_full_open_table_folds_its_lowest_floors_into_the_global_floor() -> None:
    table = FutureFloors(capacity=3, window_ms=WINDOW_MS)
    _raise(table, {"a": 100, "b": 200, "c": 300})
    lines, evict = table.plan({"d": 400}, set())
    assert evict == ["a"]
    assert lines == [("d", 400, False), ("*", 100, False)]
    table.apply(lines, evict)
    assert table.open == {"b": 200, "c": 300, "d": 400}
    assert table.global_ms == 100
    # A holder already held is raised in place: nothing evicted.
    assert table.plan({"b": 500}, set()) == ([("b", 500, False)], [])
    # More new holders in one raise than the table holds: the lowest go to the fold.
    lines, evict = table.plan({f"n{i}": 1_000 + i for i in range(5)}, set())
    assert sorted(evict) == ["b", "c", "d"]
    assert ("*", 1_001, False) in lines
    assert {h for h, _, _ in lines if h != "*"} == {"n2", "n3", "n4"}


def test_reserved_floors_are_never_evicted_and_cover_the_fold_when_made() -> None:
    table = FutureFloors(capacity=2, window_ms=WINDOW_MS)
    _raise(table, {"peer": 50}, {"peer"})
    _raise(table, {f"s{i}": 100 + i for i in range(10)})
    assert table.reserved == {"peer": 50}
    assert len(table.open) == 2
    assert table.global_ms == 107
    # Made reserved after floors were folded: its floor is at least the fold, since
    # what of its own was folded before is not known.
    _raise(table, {"late": 60}, {"late"})
    assert table.reserved["late"] == 107
    table.prune(50 + WINDOW_MS)  # the peer's floor is stale: dropped
    assert "peer" not in table.reserved


def test_a_restarted_node_applies_the_fold_to_open_holders_only(tmp_path: Path) -> None:
    path = tmp_path / FUTURE_NONCES_FILENAME
    append_lines(path, [("open", 900, False), ("peer", 800, True), ("*", 1_000, False)])
    with path.open("a", encoding="ascii") as fh:
        fh.write("old n0nce 950\nstale 10\ntorn 12")  # earlier per-nonce form; stale; torn
    floors, reserved, global_ms = read_floors(path, stale_ms=100)
    assert floors == {"open": 900, "peer": 800, "old": 950}
    assert reserved == {"peer"}
    assert global_ms == 1_000
    restart = RestartFloors(floors, frozenset(reserved), global_ms)
    assert restart.refusal("peer", 801) is None  # its own floor only
    assert "previous run accepted (800 ms)" in (restart.refusal("peer", 800) or "")
    assert "folded" in (restart.refusal("open", 1_000) or "")
    assert "folded" in (restart.refusal("never-seen", 1_000) or "")
    assert restart.refusal("never-seen", 1_001) is None
    table = FutureFloors.loaded(restart, capacity=8, window_ms=WINDOW_MS)
    assert table.reserved == {"peer": 800}
    assert table.global_ms == 1_000
    assert sorted(table.lines()) == sorted(
        [("open", 900, False), ("old", 950, False), ("peer", 800, True), ("*", 1_000, False)]
    )
