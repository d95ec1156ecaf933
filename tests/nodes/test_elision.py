"""Heads a receiver acknowledged travel as digests (:class:`nodes.elision.HeadElision`).

The same sequence of deliveries — two origins' heads, a second value under
each, a new head of an origin the receiver knows, a receiver that forgot its
heads — is sent once by an origin node (``NodeCore.send``) and once through a
tool's :class:`~nodes.elision.HeadElision` over the same transport to a twin
receiver: what travels is what the rule says, and the same, delivery for
delivery.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nodes.elision import HeadElision
from nodes.messages import Delivery
from nodes.services import NodeCore
from tests.nodes.rpc_support import MemCluster, hop_json

Send = Callable[[str, Delivery], Awaitable[Delivery]]


async def _compaction(core: NodeCore, refs: list[str], first: int) -> tuple[bytes, list[bytes]]:
    folds = []
    for i, ref in enumerate(refs):
        _, seqs = await core.append([hop_json(first + 2 * i), hop_json(first + 2 * i + 1)])
        folds.append((ref, list(seqs), b""))
    out = await core.commit_compaction(folds)
    return out.head, list(out.fold_proofs)


async def _sequence(cluster: MemCluster, holder: str, send: Send) -> list[Delivery]:
    o1, o2 = cluster.nodes["o1"], cluster.nodes["o2"]
    address = cluster.address(holder)
    a, a_proofs = await _compaction(o1, ["a1", "a2"], 1)
    b, b_proofs = await _compaction(o2, ["b1", "b2"], 1)
    sent = []

    def value(ref: str, proofs: tuple[bytes, ...], heads: tuple[bytes, ...]) -> Delivery:
        return Delivery(ref, ref.encode(), (), (), o1.node_id, proofs, heads)

    sent.append(await send(address, value("v1", (a_proofs[0], b_proofs[0]), (a, b))))
    sent.append(await send(address, value("v2", (a_proofs[1], b_proofs[1]), (a, b))))
    b2, b2_proofs = await _compaction(o2, ["b3"], 10)
    sent.append(await send(address, value("v3", (b2_proofs[0],), (b2,))))
    receiver = cluster.nodes[holder]
    receiver.heads = type(receiver.heads)()  # its caches are in memory: as after a restart
    sent.append(await send(address, value("v4", (a_proofs[0], b2_proofs[0]), (a, b2))))
    return sent


async def test_a_tool_sends_what_the_node_would_delivery_for_delivery(cluster: MemCluster) -> None:
    for name in ("o1", "o2", "h_node", "h_tool"):
        await cluster.add(name)
    o1 = cluster.nodes["o1"]

    async def node_send(address: str, delivery: Delivery) -> Delivery:
        return (await o1.send(address, delivery, 5.0))[1]

    elision = HeadElision()

    async def tool_send(address: str, delivery: Delivery) -> Delivery:
        return (await elision.send(o1.transport.deliver, address, delivery, 5.0))[1]

    by_node = await _sequence(cluster, "h_node", node_send)
    by_tool = await _sequence(cluster, "h_tool", tool_send)
    shapes = [len(d.heads) for d in by_tool]
    # full; both heads as digests; the new head travels; all again after NOT_FOUND
    assert shapes == [2, 0, 1, 2]
    assert [len(d.heads) for d in by_node] == shapes
    assert [len(d.fold_proofs) for d in by_tool] == [len(d.fold_proofs) for d in by_node]
