"""Nodes addressed by name, identities pinned by key (:attr:`nodes.config.NodeConfig.pins`).

Two real nodes on loopback, advertised by the name ``localhost`` (resolved by
gRPC's own resolver), swap addresses: each is stopped and started again on the
other's port with its own key. A caller that pins each address to the key it
knew there must refuse the node it now reaches, name the address and both ids,
and accuse nobody. The same holds for the in-memory transport.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nodes.app import RunningNode, start_node
from nodes.config import NodeConfig, Peer
from nodes.messages import Delivery, Outcome
from nodes.transport import WRONG_NODE, CallFailed, GrpcTransport, InMemoryTransport
from tests.nodes.rpc_support import (
    TEST_OPERATOR,
    MemCluster,
    audit,
    grpc_holder,
    held_fold,
    hop_json,
    single,
    stop_all,
)

pytestmark = pytest.mark.timeout(120)


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


async def node_on(root: Path, name: str, port: int) -> RunningNode:
    """Node ``name`` (its key kept in ``root/name``) listening on ``port``, advertised by name."""
    config = NodeConfig(
        name=name,
        data_dir=root / name,
        listen=f"127.0.0.1:{port}",
        advertise=f"localhost:{port}",
        deadline_ms=500,
        operator_keys=(TEST_OPERATOR.key_id,),
    )
    return await start_node(config, transport=GrpcTransport())


async def test_swapped_addresses_are_refused_naming_both_ids_and_accuse_nobody(
    tmp_path: Path,
) -> None:
    port_a, port_b = free_ports(2)
    a = await node_on(tmp_path, "a", port_a)
    b = await node_on(tmp_path, "b", port_b)
    id_a, id_b = a.node_id, b.node_id
    folds = []
    for ref in ("v1", "v2"):
        _, seqs = await a.core.append([hop_json(1), hop_json(2)])
        folds.append(held_fold(await a.core.commit_fold(ref, seqs)))
    # The obligations name a by its name, as a cluster's nodes advertise themselves.
    assert folds[0].obligation.statement.endpoints == (f"localhost:{port_a}",)
    transport = GrpcTransport(pins={f"localhost:{port_a}": id_a, f"localhost:{port_b}": id_b})
    holder = grpc_holder(tmp_path, transport)
    swapped: list[RunningNode] = []
    try:
        before = single(audit(await holder.rehydrate("v1", [folds[0]]), {id_a, id_b}))
        assert before.outcome is Outcome.SERVED, before.detail

        await stop_all([a, b])
        # The same channel, reconnecting: the name now reaches b, and a is elsewhere.
        swapped += [await node_on(tmp_path, "b", port_a), await node_on(tmp_path, "a", port_b)]
        assert (swapped[0].node_id, swapped[1].node_id) == (id_b, id_a)

        after = single(audit(await holder.rehydrate("v2", [folds[1]]), {id_a, id_b}))
        assert after.outcome is Outcome.REJECTED, after.detail
        assert not after.accuses
        assert not after.evidence
        assert f"localhost:{port_a}" in after.detail
        assert id_b[:16] in after.detail
        assert id_a[:16] in after.detail
        assert "not the pinned" in after.detail
        assert not (tmp_path / "evidence").exists() or not any((tmp_path / "evidence").iterdir())
        # b was never sent a's demand or ask: nothing it could have refused or logged.
        b_stats = await swapped[0].core.stats()
        assert b_stats.get("rpc_Demand", 0) == b_stats.get("open_asks", 0) == 0

        # Deliveries too: nothing is sent to the node that is not the pinned one.
        with pytest.raises(CallFailed) as raised:
            await transport.deliver(
                f"localhost:{port_b}",
                Delivery("v9", b"x", (), (), id_a, (), ()),
                timeout=2.0,
            )
        assert raised.value.code == WRONG_NODE
        assert id_a[:16] in raised.value.message
        assert id_b[:16] in raised.value.message
    finally:
        await transport.close()
        await stop_all(swapped)


async def test_a_node_pins_the_peers_its_config_lists_with_a_key(tmp_path: Path) -> None:
    """``start_node`` gives its transport the config's pins: a call to a peer whose
    name reaches another node fails naming it, and nothing reaches the wrong node."""
    port_a, port_b, port_h = free_ports(3)
    a = await node_on(tmp_path, "a", port_a)
    b = await node_on(tmp_path, "b", port_b)
    id_a, id_b = a.node_id, b.node_id
    await stop_all([a, b])
    b = await node_on(tmp_path, "b", port_a)  # b answers where the peers file says a is
    config = NodeConfig(
        name="h",
        data_dir=tmp_path / "h",
        listen=f"127.0.0.1:{port_h}",
        peers=(Peer("a", f"localhost:{port_a}", id_a),),
        operator_keys=(TEST_OPERATOR.key_id,),
    )
    h = await start_node(config)
    try:
        transport = h.core.transport
        assert isinstance(transport, GrpcTransport)
        assert transport.pins == {f"localhost:{port_a}": id_a}
        with pytest.raises(CallFailed, match="not the pinned") as raised:
            await transport.demand(h.core.config.peer("a"), [b"x"], timeout=2.0)
        assert raised.value.code == WRONG_NODE
        assert id_b[:16] in raised.value.message
        b_stats = await b.core.stats()
        assert b_stats.get("rpc_Demand", 0) == b_stats.get("open_asks", 0) == 0
    finally:
        await stop_all([h, b])


async def test_in_memory_transport_refuses_a_node_other_than_the_pinned(tmp_path: Path) -> None:
    mem = MemCluster(tmp_path)
    try:
        a = await mem.add("a")
        b = await mem.add("b")
        transport = InMemoryTransport(registry=mem.registry, pins={mem.address("a"): b.node_id})
        with pytest.raises(CallFailed) as raised:
            await transport.demand(mem.address("a"), [b"x"], timeout=1.0)
        assert raised.value.code == WRONG_NODE
        assert a.node_id[:16] in raised.value.message
        assert b.node_id[:16] in raised.value.message
        assert raised.value.reply.value == "status"  # never silence: no suspicion, no witness
    finally:
        await mem.close()


def test_pins_cover_the_peer_address_and_its_route(tmp_path: Path) -> None:
    key = "ab" * 32
    config = NodeConfig(
        name="h",
        data_dir=tmp_path,
        peers=(Peer("a", "node-0.provnet.default.svc.cluster.local:50051", key), Peer("b", "b:1")),
        routes=(("node-0.provnet.default.svc.cluster.local:50051", "127.0.0.1:7000"),),
    )
    assert config.pins == {
        "node-0.provnet.default.svc.cluster.local:50051": key,
        "127.0.0.1:7000": key,
    }


def test_an_address_peers_of_two_keys_share_is_not_pinned(tmp_path: Path) -> None:
    config = NodeConfig(
        name="h",
        data_dir=tmp_path,
        peers=(
            Peer("a", "n:1", "ab" * 32),
            Peer("b", "n:1", "cd" * 32),
            Peer("c", "m:1", "ef" * 32),
        ),
    )
    assert config.pins == {"m:1": "ef" * 32}
