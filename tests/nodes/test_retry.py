"""A node's clients retry the calls a node sheds before running them (nodes.retry).

Against a real node process (``provnet node``) whose bulk byte budget is
spent by a call that holds its body: a delivery made meanwhile is shed with
RESOURCE_EXHAUSTED, and the client asks again, within the call's deadline,
until the budget has room. And, on their own: the server's pushback is
honoured, refusals that may have run the call are final, and the deadline
bounds every attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts import sha256_hex
from contracts.signed import open_statement
from contracts.statements import DeliveryReceipt
from nodes import methods, wire
from nodes._pb.provnet.v1 import deliver_pb2, hoplog_pb2, hoplog_pb2_grpc
from nodes.auth import node_id_at
from nodes.messages import Delivery
from nodes.retry import PUSHBACK_KEY, retry_shed
from nodes.transport import GrpcTransport
from tests.nodes.node_process import node_process
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(180)

_DELIVER = "/provnet.v1.Deliver/Deliver"
#: One reservation (the largest message) fills the node's byte budget.
_MAX_MESSAGE = 1024 * 1024


@pytest.fixture
def node(tmp_path: Path) -> Iterator[str]:
    """A node process whose bulk byte budget holds one call's reservation."""
    with node_process(
        tmp_path,
        "busy",
        PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id,
        PROVNET_MAX_MESSAGE_BYTES=str(_MAX_MESSAGE),
        PROVNET_MAX_BULK_BYTES=str(_MAX_MESSAGE),
        PROVNET_REAP_INTERVAL_S="0",
    ) as (address, _):
        yield address


async def _fold(address: str) -> tuple[bytes, bytes]:
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1]), timeout=30
        )
    return bytes(reply.commitment), bytes(reply.obligation)


async def _holding_the_budget(chan: grpc.aio.Channel, release: asyncio.Event) -> Any:
    """A Deliver call admitted (the budget reserved for it) that holds its body back."""

    async def body() -> AsyncIterator[deliver_pb2.DeliverRequest]:
        await release.wait()
        yield deliver_pb2.DeliverRequest()

    # Signed by the operator for this node (over the empty request it sends), so it is
    # admitted to the operator's budget before its body: an unsigned one holds nothing.
    metadata = TEST_OPERATOR.metadata(
        _DELIVER, deliver_pb2.DeliverRequest().SerializeToString(), target=await node_id_at(chan)
    )
    call = chan.stream_unary(
        _DELIVER,
        request_serializer=deliver_pb2.DeliverRequest.SerializeToString,
        response_deserializer=deliver_pb2.DeliverResponse.FromString,
    )(body(), timeout=60, metadata=metadata)
    await asyncio.wait_for(call.initial_metadata(), 30)  # admitted: the budget is spent
    return call


async def test_a_delivery_shed_by_a_node_whose_budget_is_spent_is_retried_until_admitted(
    node: str,
) -> None:
    c_bytes, o_bytes = await _fold(node)
    delivery = Delivery("v", b"the value", (c_bytes,), (o_bytes,), "")
    release = asyncio.Event()
    transport = GrpcTransport(max_message_bytes=_MAX_MESSAGE, credentials=TEST_OPERATOR)
    async with grpc.aio.insecure_channel(node) as chan:
        held = await _holding_the_budget(chan, release)
        try:
            # The budget really is spent: one call made now is shed, its body unread.
            stub: Any = wire.deliver_stub(chan)
            request = wire.deliver_request(delivery)
            signed = TEST_OPERATOR.metadata(
                _DELIVER, request.SerializeToString(), target=await node_id_at(chan)
            )
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await stub.Deliver(request, timeout=30, metadata=signed)
            assert shed.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "shed before reading the request" in (shed.value.details() or "")
            # The node's own client: shed too at first, then admitted once room is made.
            delivering = asyncio.create_task(transport.deliver(node, delivery, 30.0, True))
            await asyncio.sleep(1.0)  # four budget waits: shed at least once meanwhile
            assert not delivering.done(), delivering
            release.set()
            held.cancel()
            data = (await delivering).receipt
        finally:
            release.set()
            held.cancel()
            await transport.close()
    receipt = open_statement(data, DeliveryReceipt)
    assert receipt.statement.value_digest == sha256_hex(b"the value")


# --------------------------------------------------------------------------- the policy


def _refusal(
    details: str,
    *,
    code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED,
    pushback: str | None = None,
) -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata()
    if pushback is not None:
        trailing.add(PUSHBACK_KEY, pushback)
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details, None)


class _Calls:
    """Answers with the given refusals, then "ok"; records the time each attempt was given."""

    def __init__(self, *refusals: grpc.aio.AioRpcError) -> None:
        self.refusals = list(refusals)
        self.given: list[float] = []

    async def __call__(self, left: float) -> str:
        self.given.append(left)
        if self.refusals:
            raise self.refusals.pop(0)
        return "ok"


async def test_a_pushback_of_the_server_is_honoured() -> None:
    calls = _Calls(_refusal("busy", pushback="0"), _refusal("busy", pushback="10"))
    assert await retry_shed(_DELIVER, calls, 30.0) == "ok"
    assert len(calls.given) == 3


@pytest.mark.parametrize(
    "refusal",
    [
        _refusal("busy", pushback="-1"),  # the server says: do not retry
        _refusal("busy", pushback="soon"),  # unparseable: do not retry (gRPC A6)
        _refusal("Received message larger than max (5000000 vs. 4194304)"),
        _refusal("control nonce cache full"),
        _refusal("x: 1 bulk calls in progress; shed before reading the request",
                 code=grpc.StatusCode.UNAVAILABLE),
    ],
    ids=["negative-pushback", "bad-pushback", "too-large", "other-exhaustion", "other-code"],
)  # fmt: skip
async def test_a_refusal_that_may_have_run_the_call_is_final(
    refusal: grpc.aio.AioRpcError,
) -> None:
    calls = _Calls(refusal)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await retry_shed(_DELIVER, calls, 30.0)
    assert raised.value is refusal
    assert len(calls.given) == 1


async def test_retries_stay_within_the_calls_deadline() -> None:
    shed = [_refusal("x: shed before reading the request, try again shortly")] * 1000
    calls = _Calls(*shed)
    with pytest.raises(grpc.aio.AioRpcError):
        await retry_shed(_DELIVER, calls, 0.5)
    assert len(calls.given) > 1
    assert calls.given[0] <= 0.5
    # each attempt is given what is left of the one deadline, never more
    assert all(b < a for a, b in zip(calls.given, calls.given[1:], strict=False))
    assert calls.given[-1] >= 0.0


async def test_only_retry_safe_methods_are_retried() -> None:
    assert not methods.policy("/provnet.v1.Evidence/Report").retried
    with pytest.raises(ValueError, match="Report is not a retry-safe method"):
        await retry_shed("/provnet.v1.Evidence/Report", _Calls(), 1.0)
