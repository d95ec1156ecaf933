"""A relay takes custody when it forwards (``relay_custody_k``, docs/custody.md).

Clauses C2/C4: the relay's statement is made through the custodian's own steps
(hops fetched from the origin, verified, durable, then signed), travels with
the forwarded value, is bounded per fold, and lets the next holder rehydrate
exactly after the origin left; with ``relay_custody_k`` 0 a forward is the
value as held, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.custody import open_custody
from nodes.config import ConfigError, NodeConfig
from nodes.custody_store import custody_counts
from tests.nodes.custody_support import CustodyCluster, accused_honest

REF = "value:7"


async def _chain(net: CustodyCluster, *, relay_k: int, origin_k: int = 0) -> None:
    """o (custodian c1 when origin_k) → relay r → holder h."""
    await net.add("c1", peers=("o",), operator="op-c")
    await net.add("h", peers=("o", "r", "c1"))
    await net.add("r", peers=("o", "h", "c1"), relay_custody_k=relay_k, operator="op-r")
    await net.add(
        "o",
        peers=("r", "h", "c1"),
        custodians=("c1",) if origin_k else (),
        custody_k=origin_k,
        operator="op-o",
    )
    await net.compact("o", REF)
    await net.nodes["o"].forward(REF, "r")
    await net.nodes["r"].forward(REF, "h")


def _custodians(net: CustodyCluster, holder: str) -> list[str]:
    held = net.nodes[holder].held(REF)
    return [open_custody(n).statement.custodian for n in held.delivery.custody]


async def test_c2_relay_takes_custody_and_the_next_holder_rehydrates_from_it(
    net: CustodyCluster,
) -> None:
    await _chain(net, relay_k=1)
    r, o = net.nodes["r"], net.nodes["o"]
    # the relay holds the hops durably and signed one statement, carried on
    counts = await custody_counts(r.store)
    assert counts["custody_statements"] == 1
    assert counts["custody_hops"] == 6
    assert _custodians(net, "r") == []  # what it holds is the value as delivered
    assert _custodians(net, "h") == [r.node_id]
    served = await net.nodes["h"].rehydrate(REF)
    assert served.served_by == (o.node_id,)
    # the origin leaves: the relay serves, exactly
    net.depart("o")
    h = net.nodes["h"]
    h.holder._use_cache = False
    report = await h.rehydrate(REF)
    assert report.complete
    assert report.served_by == (r.node_id,)
    assert sorted(report.hops) == sorted(served.hops)
    assert accused_honest(report, net.honest() - {o.node_id}) == []


async def test_c2_relay_adds_nothing_to_a_fold_that_carries_k_statements(
    net: CustodyCluster,
) -> None:
    await _chain(net, relay_k=1, origin_k=1)
    c1 = net.nodes["c1"].node_id
    assert _custodians(net, "r") == [c1]
    assert _custodians(net, "h") == [c1]  # bounded: k = 1 already met
    assert (await custody_counts(net.nodes["r"].store))["custody_statements"] == 0


async def test_c2_relay_k2_adds_its_statement_after_the_origins(net: CustodyCluster) -> None:
    await _chain(net, relay_k=2, origin_k=1)
    assert _custodians(net, "h") == [net.nodes["c1"].node_id, net.nodes["r"].node_id]
    # forwarded again, the relay's own statement is not added twice
    await net.nodes["r"].forward(REF, "h")
    assert _custodians(net, "h") == [net.nodes["c1"].node_id, net.nodes["r"].node_id]


async def test_c5_relay_k0_forwards_the_value_as_held(net: CustodyCluster) -> None:
    await _chain(net, relay_k=0, origin_k=1)
    r, h = net.nodes["r"].held(REF), net.nodes["h"].held(REF)
    assert h.delivery.custody == r.delivery.custody
    assert (h.delivery.value, h.delivery.fold_proofs) == (r.delivery.value, r.delivery.fold_proofs)
    assert (await custody_counts(net.nodes["r"].store))["custody_statements"] == 0
    assert net.nodes["r"].holding.relay_custody is None


def test_relay_custody_k_setting_is_bounded(tmp_path: Path) -> None:
    base = {"name": "r", "data_dir": str(tmp_path)}
    assert NodeConfig.from_env_and_args(base, env={}).relay_custody_k == 0
    got = NodeConfig.from_env_and_args(base, env={"PROVNET_RELAY_CUSTODY_K": "2"})
    assert got.relay_custody_k == 2
    with pytest.raises(ConfigError, match="PROVNET_RELAY_CUSTODY_K"):
        NodeConfig.from_env_and_args({**base, "relay_custody_k": "9"}, env={})


async def test_c2_relay_that_cannot_fetch_the_hops_signs_nothing_and_still_forwards(
    net: CustodyCluster,
) -> None:
    await net.add("h", peers=("o", "r"))
    await net.add("r", peers=("o", "h"), relay_custody_k=1, operator="op-r")
    await net.add("o", peers=("r", "h"), operator="op-o")
    await net.compact("o", REF)
    await net.nodes["o"].forward(REF, "r")
    net.depart("o")  # gone before the relay forwards: no hops to hold
    await net.nodes["r"].forward(REF, "h")
    assert _custodians(net, "h") == []
    counts = await custody_counts(net.nodes["r"].store)
    assert (counts["custody_statements"], counts["custody_hops"]) == (0, 0)
