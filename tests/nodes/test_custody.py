"""Custodians on in-process nodes over the memory transport (docs/custody.md).

Clauses C2-C5 (docs/contracts.md): a custodian takes custody only with the hops
durable, serves any bearer like an origin, is accused by name when it fails, and
a holder whose origin left rehydrates exactly from any one custodian that serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.custody import open_custody
from nodes.custody_store import custody_counts, reap_custody
from nodes.faults import FaultMode
from nodes.messages import Outcome
from tests.nodes.custody_support import CustodyCluster, accused_honest

REF = "value:7"


@pytest.fixture
async def net(tmp_path: Path) -> AsyncIterator[CustodyCluster]:
    cluster = CustodyCluster(tmp_path)
    try:
        yield cluster
    finally:
        await cluster.close()


async def _world(
    net: CustodyCluster,
    *,
    k: int = 2,
    faults: dict[str, FaultMode] | None = None,
    operators: tuple[str, str, str] = ("op-a", "op-b", "op-c"),
) -> None:
    faults = faults or {}
    names = ("c1", "c2", "c3")
    for name, op in zip(names, operators, strict=True):
        await net.add(name, peers=("o",), operator=op, fault=faults.get(name, FaultMode.NONE))
    await net.add("h", peers=("o", *names))
    await net.add("o", peers=("h", *names), custodians=names, custody_k=k, operator="op-o")
    await net.compact("o", REF)
    await net.nodes["o"].forward(REF, "h")


async def test_c2_origin_takes_k_custodians_at_commit_and_the_value_carries_them(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2)
    held = net.nodes["h"].held(REF)
    assert len(held.custody) == 2
    custodians = [open_custody(n).statement.custodian for n in held.delivery.custody]
    assert custodians == [net.nodes["c1"].node_id, net.nodes["c2"].node_id]
    # each custodian holds the hops durably and signed only after that
    for name in ("c1", "c2"):
        counts = await custody_counts(net.nodes[name].store)
        assert counts["custody_statements"] == 1
        assert counts["custody_hops"] == 6
    # the origin is asked first and serves: no custodian is asked
    report = await net.nodes["h"].rehydrate(REF)
    assert report.complete
    assert report.parties == ()
    assert report.served_by == (net.nodes["o"].node_id,)


async def test_c4_origin_gone_holder_rehydrates_exactly_from_the_first_custodian(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2)
    served = await net.nodes["h"].rehydrate(REF)
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False  # ask again: the origin is gone for good
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (net.nodes["c1"].node_id,)
    assert [f.origin for f in report.failed] == [net.nodes["o"].node_id]
    assert report.failed[0].outcome is Outcome.UNANSWERED
    # exact: the same hops, under the origin's name and commitment
    assert sorted(report.hops) == sorted(served.hops)
    assert accused_honest(report, net.honest() - {net.nodes["o"].node_id}) == []


async def test_c4_every_failing_custodian_gets_its_own_evidence_and_the_next_serves(
    net: CustodyCluster,
) -> None:
    await _world(net, k=3, faults={"c1": FaultMode.TAMPER, "c2": FaultMode.REFUSE})
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    assert report.complete
    c1, c2, c3 = (net.nodes[n].node_id for n in ("c1", "c2", "c3"))
    assert report.served_by == (c3,)
    kinds = {o.origin: o.outcome for o in report.parties}
    assert kinds == {c1: Outcome.BAD_DATA, c2: Outcome.REFUSED, c3: Outcome.SERVED}
    # evidence verifies standalone and names the custodian, never an honest party
    assert accused_honest(report, {c3, net.nodes["h"].node_id}) == []
    assert {o.origin for o in report.parties if o.accuses} == {c1, c2}


async def test_c2_placement_prefers_distinct_operators(net: CustodyCluster) -> None:
    # c1 and c2 share an operator: with k = 2, c1 and c3 are chosen
    await _world(net, k=2, operators=("op-a", "op-a", "op-b"))
    held = net.nodes["h"].held(REF)
    chosen = [open_custody(n).statement.custodian for n in held.delivery.custody]
    assert chosen == [net.nodes["c1"].node_id, net.nodes["c3"].node_id]


async def test_c5_k0_carries_no_statement_and_asks_no_custodian(net: CustodyCluster) -> None:
    await _world(net, k=0)
    held = net.nodes["h"].held(REF)
    assert held.custody == ()
    assert held.delivery.custody == ()
    for name in ("c1", "c2", "c3"):
        assert (await custody_counts(net.nodes[name].store))["custody_statements"] == 0


async def test_c3_custody_survives_a_restart_and_binds_the_reaper(
    net: CustodyCluster, tmp_path: Path
) -> None:
    await _world(net, k=1)
    c1 = net.nodes["c1"]
    store = c1.store
    # the reaper before serve_until: nothing of the custody goes
    assert await reap_custody(store, now_ms=c1.now_ms()) == 0
    # restart the custodian from its data directory: it still serves the fold
    await c1.close()
    del net.nodes["c1"]
    c1 = await net.add("c1", peers=("o",), operator="op-a")
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (c1.node_id,)
    # after serve_until the reaper may delete the hops: and does
    held = net.nodes["h"].held(REF)
    until = open_custody(held.delivery.custody[0]).statement.serve_until
    assert await reap_custody(c1.store, now_ms=until + 1) == 6
