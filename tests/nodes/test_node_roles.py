"""``NodeCore`` is a composition: roles over one shared context (nodes.context).

What a test, the in-memory transport or an operator tool swaps on a node (its
clock, fault behaviour, transport, crash switch, verified heads) must reach
every role at once, and the node's public methods must be its roles' own, so a
caller of ``NodeCore`` and a caller of the role run the same code.
"""

from __future__ import annotations

from contracts.heads import HeadCache
from nodes.context import NodeContext
from nodes.faults import Behaviour
from nodes.services import NodeCore
from tests.nodes.rpc_support import MemCluster


def _contexts(core: NodeCore) -> list[NodeContext]:
    return [
        core.origin.ctx,
        core.origin_log.ctx,
        core.origin.replay.ctx,
        core.holding.ctx,
        core.witness.ctx,
        core.attestations.ctx,
        core.suspicions.ctx,
    ]


async def test_what_is_swapped_on_the_node_reaches_every_role(cluster: MemCluster) -> None:
    core = await cluster.add("a")
    assert all(ctx is core.ctx for ctx in _contexts(core))
    core.clock = lambda: 1_234.5
    assert core.now_ms() == 1_234_500
    assert {ctx.now_ms() for ctx in _contexts(core)} == {1_234_500}
    behaviour = type("Quiet", (Behaviour,), {})()
    core.behaviour = behaviour
    assert core.ctx.behaviour is behaviour
    transport = core.transport
    core.transport = transport
    assert core.ctx.transport is transport
    core.crashed = True
    assert core.ctx.crashed
    core.crashed = False
    heads = HeadCache()
    core.heads = heads
    assert core.holding.heads is heads


async def test_the_nodes_methods_are_its_roles_own(cluster: MemCluster) -> None:
    core = await cluster.add("a")
    owners = {
        "append": core.origin_log,
        "commit_fold": core.origin_log,
        "commit_compaction": core.origin_log,
        "answer_demands": core.origin,
        "answer_asks": core.origin,
        "answer_demand_stream": core.origin,
        "deliver": core.holding,
        "held": core.holding,
        "forward": core.holding,
        "send": core.holding,
        "rehydrate": core.holding,
        "challenge": core.witness,
        "submit_attestation": core.attestations,
        "list_attestations": core.attestations,
        "request_attestation": core.attestations,
        "log_attestations": core.attestations,
        "demand_leaf0": core.attestations,
        "restore": core.attestations,
        "reserved_attesters": core.attestations,
        "keep_evidence": core.suspicions,
        "report_evidence": core.suspicions,
        "standing_suspicions": core.suspicions,
        "clear_suspicions": core.suspicions,
    }
    for name, role in owners.items():
        assert getattr(core, name) == getattr(role, name), name
    assert core.holder is core.holder  # the holder client is made once
