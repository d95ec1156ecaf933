"""The one client tools drive nodes with (:mod:`nodes.control`), against real gRPC servers.

Nodes are in-process grpc.aio servers on port 0 (:func:`tests.nodes.rpc_support.grpc_node`)
that authorise :data:`tests.nodes.rpc_support.TEST_OPERATOR`; the retry cases use a
bare server that answers exactly what the case needs. Every server is stopped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.signed import open_statement
from contracts.statements import DeliveryReceipt
from nodes import wire
from nodes._pb.provnet.v1 import hoplog_pb2, node_pb2
from nodes.control import CallRecord, NodeClient, NodeClients, RpcFailed
from nodes.messages import Delivery, Outcome
from nodes.refusal import is_refusal
from nodes.retry import PUSHBACK_KEY
from nodes.transport import CallFailed
from tests.nodes.rpc_support import TEST_OPERATOR, grpc_node, hop_json, stop_all

pytestmark = pytest.mark.timeout(120)

APPEND = "/provnet.v1.HopLog/Append"
DELIVER = "/provnet.v1.Deliver/Deliver"
INFO = "/provnet.v1.Node/Info"


async def test_the_client_commits_delivers_as_a_node_sends_and_rehydrates(
    tmp_path: Path,
) -> None:
    """Typed calls end to end; a head the holder acknowledged travels as its digest
    next time; every call reaches the metering hook with its bytes and status."""
    origin = await grpc_node(tmp_path, "origin")
    holder = await grpc_node(tmp_path, "holder")
    records: list[CallRecord] = []
    clients = NodeClients(TEST_OPERATOR, timeout=10.0, on_call=records.append)
    try:
        info = await clients.at(origin.address).info()
        assert (info.name, info.node_id) == ("origin", origin.node_id)
        log = clients.at(origin.address)
        first = await log.append([hop_json(1), hop_json(2)])
        second = await log.append([hop_json(3), hop_json(4), hop_json(5)])
        compaction = await log.commit_compaction(
            [("f1", first, b"v1"), ("f2", second, b"v2")], deadline_ms=500
        )
        assert len(compaction.fold_proofs) == 2
        assert not compaction.provenance_pending

        def value(ref: str, proof: bytes) -> Delivery:
            return Delivery(ref, ref.encode(), (), (), origin.node_id, (proof,), (compaction.head,))

        ack, sent = await clients.send(
            holder.address, value("v1", compaction.fold_proofs[0]), 5.0, signed=True
        )
        assert sent.heads == (compaction.head,)
        receipt = open_statement(ack.receipt, DeliveryReceipt, signer=holder.node_id)
        assert receipt.statement.sender == origin.node_id
        sent_all = [sent]
        ack, sent = await clients.send(holder.address, value("v2", compaction.fold_proofs[1]), 5.0)
        assert sent.heads == ()  # acknowledged by the first answer: its digest only
        assert ack.receipt == b""  # none asked for
        sent_all.append(sent)
        report = await clients.at(holder.address).rehydrate("v2", timeout=10.0)
        assert [o.outcome for o in report.outcomes] == [Outcome.SERVED]
        assert sorted(h.leaf_index for h in report.hops) == [0, 1, 2]
        # A faithful serve answers the unsigned first ask (counted in memory only).
        assert (await clients.at(origin.address).stats())["open_serves"] >= 1
    finally:
        await clients.close()
        await stop_all((origin, holder))
    delivers = [r for r in records if r.method == DELIVER]
    assert [r.code for r in delivers] == ["OK", "OK"]
    # metered as sent: the second delivery's request is that delivery, without the head
    assert [r.request_bytes for r in delivers] == [
        wire.deliver_request_size(d, signed=s) for d, s in zip(sent_all, (True, False), strict=True)
    ]
    assert all(r.code == "OK" and r.attempts == 1 and r.ms >= 0 for r in records)
    assert all(r.request_bytes >= 0 and r.response_bytes > 0 for r in records)
    assert {r.address for r in records} == {origin.address, holder.address}


async def test_a_holder_that_forgot_a_head_answers_not_found_and_gets_it_again(
    tmp_path: Path,
) -> None:
    origin = await grpc_node(tmp_path, "origin")
    holder = await grpc_node(tmp_path, "holder")
    records: list[CallRecord] = []
    clients = NodeClients(TEST_OPERATOR, timeout=10.0, on_call=records.append)
    try:
        log = clients.at(origin.address)
        folds = [(f"f{i}", await log.append([hop_json(i)]), b"") for i in (1, 2)]
        compaction = await log.commit_compaction(folds, deadline_ms=500)
        for i, proof in enumerate(compaction.fold_proofs):
            if i == 1:  # its caches are in memory: as after a restart
                holder.core.heads = type(holder.core.heads)()
            delivery = Delivery(f"v{i}", b"v", (), (), origin.node_id, (proof,), (compaction.head,))
            _, sent = await clients.send(holder.address, delivery, 5.0)
            assert sent.heads == (compaction.head,)
        assert holder.core.held("v1").delivery.heads == (compaction.head,)
    finally:
        await clients.close()
        await stop_all((origin, holder))
    assert [r.code for r in records if r.method == DELIVER] == ["OK", "NOT_FOUND", "OK"]


async def test_a_refused_call_is_a_call_failed_naming_method_node_and_status(
    tmp_path: Path,
) -> None:
    node = await grpc_node(tmp_path, "n")
    records: list[CallRecord] = []
    try:
        async with NodeClient(node.address, on_call=records.append) as unsigned:
            with pytest.raises(RpcFailed) as caught:
                await unsigned.append([hop_json(1)])
        async with NodeClient(node.address, TEST_OPERATOR) as signed:
            with pytest.raises(RpcFailed) as missing:
                await signed.rehydrate("no-such-value")
    finally:
        await stop_all((node,))
    exc = caught.value
    assert isinstance(exc, CallFailed)  # the node's own error: one except serves both
    assert (exc.method, exc.address, exc.code) == (APPEND, node.address, "UNAUTHENTICATED")
    assert is_refusal(exc)
    assert APPEND in str(exc)
    assert node.address in str(exc)
    assert exc.message in str(exc)
    assert [(r.method, r.code, r.response_bytes) for r in records] == [
        (APPEND, "UNAUTHENTICATED", 0)
    ]
    assert missing.value.code == "NOT_FOUND"
    assert not is_refusal(missing.value)


Handler = Callable[[bytes, Any], Awaitable[bytes]]


async def _bare_server(service: str, methods: dict[str, Handler]) -> tuple[grpc.aio.Server, str]:
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in methods.items()}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def test_a_shed_call_is_made_again_after_the_nodes_pushback_and_others_are_not() -> None:
    """Append (retry-safe) is made again after a RESOURCE_EXHAUSTED carrying a pushback;
    Info (not retried by the method table, nodes.methods) raises the first refusal with
    its pushback."""
    calls = {"append": 0, "info": 0}

    async def append(request: bytes, context: Any) -> bytes:
        calls["append"] += 1
        if calls["append"] == 1:
            context.set_trailing_metadata(((PUSHBACK_KEY, "20"),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy, come back")
        return hoplog_pb2.AppendResponse(seqs=[7]).SerializeToString()

    async def info(request: bytes, context: Any) -> bytes:
        calls["info"] += 1
        context.set_trailing_metadata(((PUSHBACK_KEY, "20"),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy, come back")
        return node_pb2.InfoResponse().SerializeToString()

    log_server, log_address = await _bare_server("provnet.v1.HopLog", {"Append": append})
    node_server, node_address = await _bare_server("provnet.v1.Node", {"Info": info})
    records: list[CallRecord] = []
    clients = NodeClients(timeout=5.0, on_call=records.append)
    try:
        assert await clients.at(log_address).append([b"hop"]) == (7,)
        with pytest.raises(RpcFailed) as caught:
            await clients.at(node_address).info()
    finally:
        await clients.close()
        await log_server.stop(0)
        await node_server.stop(0)
    assert calls == {"append": 2, "info": 1}
    assert [(r.method, r.code, r.attempts) for r in records] == [
        (APPEND, "OK", 2),
        (INFO, "RESOURCE_EXHAUSTED", 1),
    ]
    assert (caught.value.code, caught.value.pushback_ms) == ("RESOURCE_EXHAUSTED", 20)
