"""Hedged rehydration (``custody_hedge``, docs/custody.md "Hedged demands").

Clause C4 with hedging on: the origin and each fold's first custodian are
demanded from at once; the decision is exact as soon as one of them serves,
every party that failed has its own evidence, no honest party is accused, and
with no custody statement (or hedging off) nothing changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.boundary.wire import TagCounts, WireMeter
from nodes.config import ConfigError, NodeConfig
from nodes.custodian import rehydrate_with_custody
from nodes.faults import FaultMode, FaultPlan
from nodes.messages import Outcome, RehydrationReport
from tests.nodes.custody_support import CustodyCluster, accused_honest

REF = "value:7"
NAMES = ("c1", "c2", "c3")


async def _world(
    net: CustodyCluster,
    *,
    k: int = 2,
    hedge: bool = True,
    faults: dict[str, FaultMode] | None = None,
    meter: WireMeter | None = None,
) -> None:
    faults = faults or {}
    for i, name in enumerate(NAMES):
        fault = faults.get(name, FaultMode.NONE)
        await net.add(name, peers=("o",), operator=f"op-{i}", fault=fault)
    await net.add("h", peers=("o", *NAMES), custody_hedge=hedge, meter=meter)
    await net.add(
        "o",
        peers=("h", *NAMES),
        custodians=NAMES,
        custody_k=k,
        operator="op-o",
        fault=faults.get("o", FaultMode.NONE),
    )
    await net.compact("o", REF)
    await net.nodes["o"].forward(REF, "h")


async def _rehydrate(net: CustodyCluster, meter: WireMeter | None = None) -> RehydrationReport:
    h = net.nodes["h"]
    h.holder._use_cache = False  # every rehydration asks again
    if meter is None:
        return await h.rehydrate(REF)
    with meter.tagged(("rehydrate", "")):
        return await h.rehydrate(REF)


def _ids(net: CustodyCluster, *names: str) -> list[str]:
    return [net.nodes[n].node_id for n in names]


async def test_c4_hedged_origin_serving_gives_the_same_hops_and_accuses_nobody(
    net: CustodyCluster,
) -> None:
    await _world(net, k=2)
    report = await _rehydrate(net)
    assert report.complete
    o, c1 = _ids(net, "o", "c1")
    # both were asked at once and both served; nobody else is asked
    assert report.served_by == (o, c1)
    assert [p.origin for p in report.parties] == [c1]
    assert accused_honest(report, net.honest()) == []
    # exact: what the same value rehydrates to without hedging
    h = net.nodes["h"]
    held = h.held(REF)
    baseline = await rehydrate_with_custody(h.holder, REF, held.folds, held.custody, hedge=False)
    assert baseline.served_by == (o,)
    assert sorted(report.hops) == sorted(baseline.hops)
    assert len(report.hops) == 6


async def test_c4_hedged_origin_gone_the_first_custodian_serves(net: CustodyCluster) -> None:
    await _world(net, k=2)
    served = await _rehydrate(net)
    net.depart("o")
    report = await _rehydrate(net)
    assert report.complete
    o, c1 = _ids(net, "o", "c1")
    assert report.served_by == (c1,)
    # the origin's failure is named (unanswered, as without hedging)
    assert [(f.origin, f.outcome) for f in report.failed] == [(o, Outcome.UNANSWERED)]
    assert sorted(report.hops) == sorted(served.hops)
    assert accused_honest(report, net.honest() - {o}) == []


async def test_c4_hedged_every_failing_party_gets_evidence_and_the_next_custodian_serves(
    net: CustodyCluster,
) -> None:
    # the first custodian refuses; the origin, honest while custody was taken,
    # tampers from then on: both fail, both are named
    await _world(net, k=3, faults={"c1": FaultMode.REFUSE})
    origin = net.nodes["o"]
    origin.behaviour = FaultPlan(FaultMode.TAMPER).behaviour(origin.identity)
    net.faults["o"] = FaultMode.TAMPER
    report = await _rehydrate(net)
    assert report.complete
    assert report.recovered
    o, c1, c2 = _ids(net, "o", "c1", "c2")
    assert report.served_by == (c2,)
    assert {f.origin: f.outcome for f in report.failed} == {
        o: Outcome.BAD_DATA,
        c1: Outcome.REFUSED,
    }
    assert {f.origin for f in report.failed if f.accuses} == {o, c1}
    assert accused_honest(report, {c2, net.nodes["h"].node_id}) == []
    # the served hops are the origin's fold, byte-exact, under its name
    assert {h.origin for h in report.hops} == {o}
    assert len(report.hops) == 6


async def test_c5_hedge_without_custody_statements_changes_nothing(tmp_path: Path) -> None:
    reports: list[RehydrationReport] = []
    counts: list[TagCounts] = []
    for hedge in (False, True):
        cluster = CustodyCluster(tmp_path / str(hedge))
        meter = WireMeter()
        try:
            await _world(cluster, k=0, hedge=hedge, meter=meter)
            reports.append(await _rehydrate(cluster, meter))
            counts.append(meter.counts(("rehydrate", "")))
        finally:
            await cluster.close()
    off, on = reports
    assert (on.rpcs, on.demand_rpcs, on.parties, len(on.hops)) == (
        off.rpcs,
        off.demand_rpcs,
        off.parties,
        len(off.hops),
    )
    assert [o.outcome for o in on.outcomes] == [o.outcome for o in off.outcomes]
    assert counts[0] == counts[1]


def test_custody_hedge_setting_reads_from_the_mapping_and_rejects_nonsense(
    tmp_path: Path,
) -> None:
    base = {"name": "h", "data_dir": str(tmp_path)}
    assert NodeConfig.from_env_and_args(base, env={}).custody_hedge is False
    on = NodeConfig.from_env_and_args(base, env={"PROVNET_CUSTODY_HEDGE": "true"})
    assert on.custody_hedge is True
    flag = NodeConfig.from_env_and_args({**base, "custody_hedge": "on"}, env={})
    assert flag.custody_hedge is True
    with pytest.raises(ConfigError, match="PROVNET_CUSTODY_HEDGE"):
        NodeConfig.from_env_and_args({**base, "custody_hedge": "maybe"}, env={})


#: The rows of docs/measurements/2026-12-02-custody-hedge.md: (row, k, faults, departs,
#: the origin tampers after custody was taken).
PRICE_ROWS: tuple[tuple[str, int, dict[str, FaultMode], bool, bool], ...] = (
    ("origin serves", 1, {}, False, False),
    ("origin gone", 1, {}, True, False),
    ("origin tampers, c1 refuses", 2, {"c1": FaultMode.REFUSE}, False, True),
)


async def hedge_price(root: Path) -> list[tuple[str, bool, TagCounts, RehydrationReport]]:
    """Per row and hedge off/on: the holder's RPCs and bytes for one rehydration."""
    out: list[tuple[str, bool, TagCounts, RehydrationReport]] = []
    for i, (row, k, faults, departs, tampers) in enumerate(PRICE_ROWS):
        for hedge in (False, True):
            cluster = CustodyCluster(root / f"{i}-{hedge}")
            meter = WireMeter()
            try:
                await _world(cluster, k=k, hedge=hedge, faults=faults, meter=meter)
                if departs:
                    cluster.depart("o")
                if tampers:
                    o = cluster.nodes["o"]
                    o.behaviour = FaultPlan(FaultMode.TAMPER).behaviour(o.identity)
                report = await _rehydrate(cluster, meter)
                assert report.complete, (row, hedge)
                out.append((row, hedge, meter.counts(("rehydrate", "")), report))
            finally:
                await cluster.close()
    return out


async def test_c4_hedge_price_is_counted(tmp_path: Path) -> None:
    """The figures of the measurement note (``-s`` prints them): counted, not timed."""
    by = {(r, h): c for r, h, c, _ in await hedge_price(tmp_path)}
    # the origin serving: hedging adds exactly the first custodian's demand and hops
    off, on = by[("origin serves", False)], by[("origin serves", True)]
    assert on.rpcs == off.rpcs + 1
    assert on.hops_received == 2 * off.hops_received
    assert on.response_bytes > off.response_bytes
    # the origin failing: the custodian is asked either way, at no extra byte
    for row in ("origin gone", "origin tampers, c1 refuses"):
        assert by[(row, True)] == by[(row, False)], row
    for row, *_ in PRICE_ROWS:
        for hedge in (False, True):
            c = by[(row, hedge)]
            print(
                f"| {row} | {'on' if hedge else 'off'} | {c.rpcs} | {c.failed_rpcs} |"
                f" {c.request_bytes} | {c.response_bytes} | {c.hops_received} |"
            )
