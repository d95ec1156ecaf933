"""Demands dated ahead of the origin's clock, inside the skew window: served as any.

A holder whose clock runs ahead of the origin's (by less than the ±30 s
window) is served every demand, however many; its demands are covered across
a restart by one durable floor of its own (``future_nonces``), not by an
entry per demand, and the file stays a few lines long. In-process nodes (the
NodeCore code the gRPC server runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import open_statement
from contracts.statements import Receipt, ReceiptStatus
from nodes import origin_replay
from nodes.errors import DemandPredatesRestart
from nodes.future_floors import FutureFloors, append_lines, read_floors
from nodes.services import FUTURE_NONCES_FILENAME, NodeCore
from tests.nodes.rpc_support import MemCluster

#: Inside the ±30 s window, far beyond the 500 ms slack.
AHEAD_MS = 20_000


#: The shared ``cluster`` fixture (tests/nodes/conftest.py) with no re-ask: a
#: failed ask is judged at once.
CLUSTER_REASKS = 0


async def _served(origin: NodeCore, demand: bytes) -> None:
    (answer,) = await origin.answer_demands([demand])
    receipt = open_statement(answer.receipt, Receipt, signer=origin.node_id).statement
    assert receipt.status is ReceiptStatus.SERVED


async def test_a_holder_ahead_of_the_clock_is_served_every_demand_and_keeps_one_entry(
    cluster: MemCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(origin_replay, "_FUTURE_FILE_SLACK_LINES", 8)
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
    assert lines == [("d", 400, ""), ("*", 100, table.run)]
    table.apply(lines, evict)
    assert table.open == {"b": 200, "c": 300, "d": 400}
    assert table.global_ms == 100
    # A holder already held is raised in place: nothing evicted.
    assert table.plan({"b": 500}, set()) == ([("b", 500, "")], [])
    # More new holders in one raise than the table holds: the lowest go to the fold.
    lines, evict = table.plan({f"n{i}": 1_000 + i for i in range(5)}, set())
    assert sorted(evict) == ["b", "c", "d"]
    assert ("*", 1_001, table.run) in lines
    assert {h for h, _, _ in lines if h != "*"} == {"n2", "n3", "n4"}


def test_reserved_floors_are_never_evicted_and_cover_the_fold_when_made() -> None:
    table = FutureFloors(capacity=3, window_ms=WINDOW_MS, known={"peer"})
    _raise(table, {"peer": 50})  # known for the run: reserved without being named
    _raise(table, {"named": 55}, {"named"})
    _raise(table, {f"s{i}": 100 + i for i in range(10)})
    assert table.reserved == {"peer": 50, "named": 55}
    assert len(table.open) == 3
    assert table.global_ms == 106
    # Named after floors were folded: its floor is at least the fold, since what
    # of its own was folded before is not known. A known holder was never folded.
    _raise(table, {"late": 60}, {"late"})
    assert table.reserved["late"] == 106
    table.prune(50 + WINDOW_MS)  # the peer's floor is stale: dropped
    assert "peer" not in table.reserved
    _raise(table, {"peer": 70})
    assert table.reserved["peer"] == 70


def test_a_restarted_node_applies_each_fold_to_the_holders_it_may_hold(tmp_path: Path) -> None:
    path = tmp_path / FUTURE_NONCES_FILENAME
    append_lines(
        path,
        [
            ("open", 900, ""),
            ("named", 800, "r"),
            ("*", 1_000, "run1"),
            ("k", 0, "run1 peer"),
            ("*", 990, "run0"),  # an earlier run's fold, which did not know the peer
        ],
    )
    with path.open("a", encoding="ascii") as fh:
        fh.write("old n0nce 950\nstale 10\n* 20 run9\ntorn 12")  # per-nonce form; stale; torn
    restart = read_floors(path, stale_ms=100)
    assert restart.floors == {"open": 900, "named": 800, "old": 950}
    assert restart.reserved == {"named"}
    assert restart.folds == {"run1": 1_000, "run0": 990}
    assert restart.known == {"run1": frozenset({"peer"})}
    assert restart.refusal("named", 801) is None  # its own floor only
    assert "previous run accepted (800 ms)" in (restart.refusal("named", 800) or "")
    assert "at or below 1000 ms" in (restart.refusal("open", 1_000) or "")
    assert "folded" in (restart.refusal("never-seen", 1_000) or "")
    assert restart.refusal("never-seen", 1_001) is None
    # The peer: exempt from the fold of the run that knew it, not from the earlier one.
    assert restart.refusal("peer", 995) is None
    assert "at or below 990 ms" in (restart.refusal("peer", 990) or "")
    table = FutureFloors.loaded(restart, capacity=8, window_ms=WINDOW_MS, known={"peer", "old"})
    assert table.reserved == {"named": 800, "old": 1_000}  # known now: covers both folds
    assert table.global_ms == 1_000
    rewritten = tmp_path / "rewritten"
    append_lines(rewritten, table.lines())
    again = read_floors(rewritten, stale_ms=100)
    assert again.folds == {"run1": 1_000, "run0": 990}
    assert again.known == {"run1": frozenset({"peer"})}  # this run's fold: none yet
    assert again.reserved == {"named", "old"}
