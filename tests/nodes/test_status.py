"""Bad requests get precise gRPC status codes and change nothing in the store.

Real grpc.aio server on port 0; every rejected call is bracketed by
``HopStore.table_digest()`` (a SHA-256 over every row of every table).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog.testing

from contracts.batch import RECEIPT_BATCH_TYPE, build_demand_batch, decode_receipt_batch
from contracts.envelope import Envelope
from contracts.identity import Identity
from contracts.serve import build_demand, new_nonce
from contracts.signed import Signed
from contracts.statements import Obligation, ReceiptStatus
from nodes._pb.provnet.v1 import (
    common_pb2,
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.app import RunningNode, start_node
from nodes.config import NodeConfig
from nodes.transport import GrpcTransport
from tests.nodes.rpc_support import (
    TEST_OPERATOR,
    accusation_audit,
    held_fold,
    hop_json,
    operator_channel,
)

__all__ = ["accusation_audit"]

MAX_MESSAGE = 64 * 1024
OPS = (TEST_OPERATOR.key_id,)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def origin(tmp_path: Path, clock: Clock) -> AsyncIterator[RunningNode]:
    config = NodeConfig(
        operator_keys=OPS,
        name="origin",
        data_dir=tmp_path / "origin",
        listen="127.0.0.1:0",
        max_message_bytes=MAX_MESSAGE,
    )
    node = await start_node(config, transport=GrpcTransport(), clock=clock)
    try:
        yield node
    finally:
        await node.stop(0.2)


@pytest.fixture
async def channel(origin: RunningNode) -> AsyncIterator[grpc.aio.Channel]:
    chan = operator_channel(origin.address)
    try:
        yield chan
    finally:
        await chan.close(None)


async def _fold(channel: grpc.aio.Channel, hops: int = 3, serve_for_ms: int = 0) -> Any:
    stub: Any = hoplog_pb2_grpc.HopLogStub(channel)
    appended = await stub.Append(
        hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(hops)]), timeout=5
    )
    return await stub.CommitFold(
        hoplog_pb2.CommitFoldRequest(
            value_ref="v1", seqs=list(appended.seqs), serve_for_ms=serve_for_ms
        ),
        timeout=5,
    )


def _obligation(fold: Any, now_ms: int) -> Signed[Obligation]:
    from nodes.services import CommittedFold

    held = held_fold(CommittedFold(bytes(fold.commitment), bytes(fold.obligation), False), now_ms)
    return held.obligation


async def _rejected(node: RunningNode, call: Callable[[], Awaitable[Any]]) -> grpc.StatusCode:
    """Run a call that must fail; return its status; assert the store did not change."""
    await node.core.flush()
    before = await node.core.store.table_digest()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call()
    await node.core.flush()
    after = await node.core.store.table_digest()
    assert before == after, "a rejected call changed the store"
    code: grpc.StatusCode = info.value.code()
    return code


def _demand_call(channel: grpc.aio.Channel, demands: list[bytes]) -> Callable[[], Awaitable[Any]]:
    stub: Any = serve_pb2_grpc.ServeStub(channel)
    return lambda: stub.Demand(serve_pb2.DemandRequest(demands=demands), timeout=5)


async def test_malformed_demand_bytes_are_invalid_argument(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    await _fold(channel)
    code = await _rejected(origin, _demand_call(channel, [b"{not json"]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT


async def test_empty_demand_call_is_invalid_argument(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    assert await _rejected(origin, _demand_call(channel, [])) is grpc.StatusCode.INVALID_ARGUMENT


async def test_demand_with_bad_signature_is_unauthenticated(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms)
    envelope = json.loads(demand.to_bytes())
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    forged = json.dumps(envelope).encode()
    code = await _rejected(origin, _demand_call(channel, [forged]))
    assert code is grpc.StatusCode.UNAUTHENTICATED


async def test_oversized_request_is_resource_exhausted(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    code = await _rejected(origin, _demand_call(channel, [b"x" * (MAX_MESSAGE + 1)]))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_too_many_demands_in_one_call_is_resource_exhausted(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    code = await _rejected(origin, _demand_call(channel, [b"{}"] * 257))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_demand_on_expired_obligation_is_failed_precondition(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel, serve_for_ms=1_000)
    obligation = _obligation(fold, int(clock.now * 1000))
    clock.now += 2.0  # past serve_until on the origin's clock
    demand = build_demand(Identity.generate(), obligation, now=int(clock.now * 1000))
    code = await _rejected(origin, _demand_call(channel, [demand.to_bytes()]))
    assert code is grpc.StatusCode.FAILED_PRECONDITION


async def test_stale_demand_is_out_of_range(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms - 600_000)
    code = await _rejected(origin, _demand_call(channel, [demand.to_bytes()]))
    assert code is grpc.StatusCode.OUT_OF_RANGE


async def test_replayed_demand_nonce_is_already_exists(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms)
    call = _demand_call(channel, [demand.to_bytes()])
    first = await call()
    assert len(first.answers) == 1
    assert await _rejected(origin, call) is grpc.StatusCode.ALREADY_EXISTS


async def test_demand_from_before_a_restart_is_aborted_and_a_fresh_one_served(
    tmp_path: Path, clock: Clock
) -> None:
    # The restarted origin cannot know whether its previous run answered a demand
    # dated below the durable replay floor: ABORTED, never served twice.
    config = NodeConfig(
        operator_keys=OPS, name="origin", data_dir=tmp_path / "o", listen="127.0.0.1:0"
    )
    holder = Identity.generate()
    node = await start_node(config, transport=GrpcTransport(), clock=clock)
    try:
        chan = operator_channel(node.address)
        fold = await _fold(chan)
        now_ms = int(clock.now * 1000)
        obligation = _obligation(fold, now_ms)
        demand = build_demand(holder, obligation, now=now_ms)
        await _demand_call(chan, [demand.to_bytes()])()
        second = build_demand(holder, obligation, now=now_ms + 10)
        await _demand_call(chan, [second.to_bytes()])()
        assert node.core.floor_writes == 1  # one durable write covers many demands
        await chan.close(None)
    finally:
        await node.stop(0.2)
    node = await start_node(config, transport=GrpcTransport(), clock=clock)
    try:
        chan = operator_channel(node.address)
        code = await _rejected(node, _demand_call(chan, [demand.to_bytes()]))
        assert code is grpc.StatusCode.ABORTED
        clock.now += 2.0  # past the floor the previous run left
        fresh = build_demand(holder, obligation, now=int(clock.now * 1000))
        reply = await _demand_call(chan, [fresh.to_bytes()])()
        assert len(reply.answers[0].hops) == 3
        await chan.close(None)
    finally:
        await node.stop(0.2)


def _batch(identity: Identity, obligation: Signed[Obligation], now_ms: int) -> bytes:
    """One demand batch (contracts.batch, version 3) naming the obligation's fold."""
    envelope, _ = build_demand_batch(
        identity,
        [(obligation.statement, obligation.digest, None)],
        origin=obligation.statement.origin,
        nonce=new_nonce(),
        now=now_ms,
    )
    return envelope.to_bytes()


async def test_a_demand_batch_is_answered_with_one_receipt_batch_and_replay_is_already_exists(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    obligation = _obligation(fold, now_ms)
    call = _demand_call(channel, [_batch(Identity.generate(), obligation, now_ms)])
    first = await call()
    assert len(first.answers) == 1
    receipt = Envelope.from_bytes(bytes(first.answers[0].receipt))
    assert receipt.payload_type == RECEIPT_BATCH_TYPE
    (item,) = decode_receipt_batch(receipt.payload).items
    assert (item.obligation, item.status) == (obligation.digest, ReceiptStatus.SERVED)
    assert len(first.answers[0].hops) == 3
    assert await _rejected(origin, call) is grpc.StatusCode.ALREADY_EXISTS


async def test_a_served_demand_batch_is_one_demand_served_event_per_fold_naming_the_peer(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    obligation = _obligation(fold, now_ms)
    holder = Identity.generate()
    with structlog.testing.capture_logs() as events:
        await _demand_call(channel, [_batch(holder, obligation, now_ms)])()
    served = [e for e in events if e["event"] == "demand_served"]
    assert [(e["peer"], e["hops"]) for e in served] == [(holder.node_id, 3)]


async def test_a_demand_batch_with_a_bad_signature_or_stale_time_is_rejected(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    obligation = _obligation(fold, now_ms)
    envelope = json.loads(_batch(Identity.generate(), obligation, now_ms))
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[0] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    forged = json.dumps(envelope).encode()
    # a per-fold obligation: the batch's one signature is checked, as a single demand's
    code = await _rejected(origin, _demand_call(channel, [forged]))
    assert code is grpc.StatusCode.UNAUTHENTICATED
    stale = _batch(Identity.generate(), obligation, now_ms - 600_000)
    code = await _rejected(origin, _demand_call(channel, [stale]))
    assert code is grpc.StatusCode.OUT_OF_RANGE


async def test_demand_for_unknown_obligation_is_not_found(
    tmp_path: Path, origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    # A valid demand addressed to this origin, for an obligation it never issued.
    other = NodeConfig(
        operator_keys=OPS, name="other", data_dir=tmp_path / "other", listen="127.0.0.1:0"
    )
    elsewhere = await start_node(other, transport=GrpcTransport(), clock=clock)
    try:
        chan = operator_channel(elsewhere.address)
        fold = await _fold(chan)
        await chan.close(None)
    finally:
        await elsewhere.stop(0.2)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms)
    code = await _rejected(origin, _demand_call(channel, [demand.to_bytes()]))
    assert code is grpc.StatusCode.NOT_FOUND


async def test_append_of_malformed_hop_is_invalid_argument(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    stub: Any = hoplog_pb2_grpc.HopLogStub(channel)
    for bad in (b"[1, 2]", b'{"step": 1, "origin": "x"}', b'{"no_step": true}'):

        def append(hop: bytes = bad) -> Awaitable[Any]:
            result: Awaitable[Any] = stub.Append(hoplog_pb2.AppendRequest(hops=[hop]), timeout=5)
            return result

        code = await _rejected(origin, append)
        assert code is grpc.StatusCode.INVALID_ARGUMENT, bad


async def test_commit_of_unknown_hop_is_failed_precondition(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    stub: Any = hoplog_pb2_grpc.HopLogStub(channel)
    code = await _rejected(
        origin,
        lambda: stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[424242]), timeout=5
        ),
    )
    assert code is grpc.StatusCode.FAILED_PRECONDITION


async def test_delivery_with_forged_commitment_is_unauthenticated(
    tmp_path: Path, origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    fold = await _fold(channel)
    envelope = json.loads(bytes(fold.commitment))
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[-1] ^= 0x80
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    holder = await start_node(
        NodeConfig(
            operator_keys=OPS, name="holder", data_dir=tmp_path / "holder", listen="127.0.0.1:0"
        ),
        transport=GrpcTransport(),
    )
    try:
        chan = operator_channel(holder.address)
        stub: Any = deliver_pb2_grpc.DeliverStub(chan)
        value = common_pb2.DeliveredValue(
            value_ref="v1",
            value=b"compacted",
            commitments=[json.dumps(envelope).encode()],
            obligations=[bytes(fold.obligation)],
        )
        code = await _rejected(
            holder, lambda: stub.Deliver(deliver_pb2.DeliverRequest(value=value), timeout=5)
        )
        assert code is grpc.StatusCode.UNAUTHENTICATED
        unpaired = common_pb2.DeliveredValue(
            value_ref="v1", value=b"x", commitments=[bytes(fold.commitment)], obligations=[]
        )
        code = await _rejected(
            holder, lambda: stub.Deliver(deliver_pb2.DeliverRequest(value=unpaired), timeout=5)
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        await chan.close(None)
    finally:
        await holder.stop(0.2)


async def test_delivery_with_expired_obligation_is_failed_precondition(
    tmp_path: Path, origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    fold = await _fold(channel, serve_for_ms=1_000)
    late = Clock()
    late.now = clock.now + 5.0
    holder = await start_node(
        NodeConfig(
            operator_keys=OPS, name="holder", data_dir=tmp_path / "holder", listen="127.0.0.1:0"
        ),
        transport=GrpcTransport(),
        clock=late,
    )
    try:
        chan = operator_channel(holder.address)
        stub: Any = deliver_pb2_grpc.DeliverStub(chan)
        value = common_pb2.DeliveredValue(
            value_ref="v1",
            value=b"compacted",
            commitments=[bytes(fold.commitment)],
            obligations=[bytes(fold.obligation)],
        )
        code = await _rejected(
            holder, lambda: stub.Deliver(deliver_pb2.DeliverRequest(value=value), timeout=5)
        )
        assert code is grpc.StatusCode.FAILED_PRECONDITION
        await chan.close(None)
    finally:
        await holder.stop(0.2)


async def test_rehydrate_of_unknown_value_is_not_found(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    stub: Any = deliver_pb2_grpc.DeliverStub(channel)
    code = await _rejected(
        origin,
        lambda: stub.Rehydrate(deliver_pb2.RehydrateRequest(value_ref="nope"), timeout=5),
    )
    assert code is grpc.StatusCode.NOT_FOUND


async def test_attestations_are_kept_verbatim_and_bad_ones_rejected(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    from contracts.attest import build_attestation
    from contracts.statements import Axis
    from nodes._pb.provnet.v1 import attest_pb2, attest_pb2_grpc

    stub: Any = attest_pb2_grpc.AttestStub(channel)
    now_ms = int(clock.now * 1000)
    attester = Identity.generate()
    good = build_attestation(
        attester,
        value_digest="ab" * 32,
        axis=Axis.VERIFICATION,
        floor=0.9,
        discharged=("taint:unverified_web:3",),
        issued_at=now_ms - 1000,
        expires_at=now_ms + 60_000,
    )
    reply = await stub.Submit(attest_pb2.SubmitAttestationRequest(attestation=good.to_bytes()))
    assert reply.digest == good.digest
    listed = await stub.List(attest_pb2.ListAttestationsRequest(value_digest="ab" * 32))
    assert list(listed.attestations) == [good.to_bytes()]
    expired = build_attestation(
        attester,
        value_digest="cd" * 32,
        axis=Axis.VERIFICATION,
        floor=0.9,
        issued_at=now_ms - 10_000,
        expires_at=now_ms - 1,
    )
    code = await _rejected(
        origin,
        lambda: stub.Submit(attest_pb2.SubmitAttestationRequest(attestation=expired.to_bytes())),
    )
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    forged = json.loads(good.to_bytes())
    forged["signatures"][0]["keyid"] = Identity.generate().node_id
    code = await _rejected(
        origin,
        lambda: stub.Submit(
            attest_pb2.SubmitAttestationRequest(attestation=json.dumps(forged).encode())
        ),
    )
    assert code is grpc.StatusCode.UNAUTHENTICATED


async def test_challenge_with_malformed_statements_is_invalid_argument(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    from nodes._pb.provnet.v1 import evidence_pb2, evidence_pb2_grpc

    stub: Any = evidence_pb2_grpc.EvidenceStub(channel)
    request = evidence_pb2.ChallengeRequest(commitment=b"{}", obligation=b"[]", demand=b"")
    code = await _rejected(origin, lambda: stub.Challenge(request, timeout=5))
    assert code is grpc.StatusCode.INVALID_ARGUMENT


async def test_forward_to_unknown_peer_is_invalid_argument(
    origin: RunningNode, channel: grpc.aio.Channel
) -> None:
    stub: Any = hoplog_pb2_grpc.HopLogStub(channel)
    appended = await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)]), timeout=5)
    await stub.CommitFold(
        hoplog_pb2.CommitFoldRequest(value_ref="v1", seqs=list(appended.seqs), value=b"x"),
        timeout=5,
    )
    deliver: Any = deliver_pb2_grpc.DeliverStub(channel)
    request = deliver_pb2.ForwardRequest(value_ref="v1", peer="nobody")
    code = await _rejected(origin, lambda: deliver.Forward(request, timeout=5))
    assert code is grpc.StatusCode.INVALID_ARGUMENT


async def test_streamed_demand_errors_carry_the_same_status_codes(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    stub: Any = serve_pb2_grpc.ServeStub(channel)

    async def stream(demand: bytes) -> list[Any]:
        request = serve_pb2.DemandStreamRequest(demand=demand)
        return [chunk async for chunk in stub.DemandStream(request, timeout=5)]

    assert await _rejected(origin, lambda: stream(b"nope")) is grpc.StatusCode.INVALID_ARGUMENT
    fold = await _fold(channel, hops=4)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms)
    chunks = await stream(demand.to_bytes())
    assert chunks[-1].last
    assert sum(len(c.hops) for c in chunks) == 4
    code = await _rejected(origin, lambda: stream(demand.to_bytes()))
    assert code is grpc.StatusCode.ALREADY_EXISTS


async def test_concurrent_copies_of_one_demand_are_answered_once(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    import asyncio

    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    demand = build_demand(Identity.generate(), _obligation(fold, now_ms), now=now_ms)
    call = _demand_call(channel, [demand.to_bytes()])
    results = await asyncio.gather(*(call() for _ in range(8)), return_exceptions=True)
    answered = [r for r in results if not isinstance(r, BaseException)]
    codes = [r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(answered) == 1
    assert codes == [grpc.StatusCode.ALREADY_EXISTS] * 7


async def test_a_whole_fold_served_from_memory_signs_the_same_item_as_one_read_from_the_store(
    origin: RunningNode, channel: grpc.aio.Channel, clock: Clock
) -> None:
    # The first demand reads the fold from the store and builds its receipt item;
    # later ones serve the bytes kept in memory with the item packed once: the
    # signed items, the hops and the demand_served events must not differ.
    fold = await _fold(channel)
    now_ms = int(clock.now * 1000)
    obligation = _obligation(fold, now_ms)
    holder = Identity.generate()
    replies = []
    with structlog.testing.capture_logs() as events:
        for _ in range(3):
            replies.append(await _demand_call(channel, [_batch(holder, obligation, now_ms)])())
    items = []
    for reply in replies:
        receipt = Envelope.from_bytes(bytes(reply.answers[0].receipt))
        (item,) = decode_receipt_batch(receipt.payload).items
        fields = (item.obligation, item.commitment, item.status, item.tree_size)
        items.append((*fields, item.served_root))
        assert list(reply.answers[0].hops) == list(replies[0].answers[0].hops)
    assert items[0][2] is ReceiptStatus.SERVED
    assert items[0][4] is not None
    assert items[1] == items[0]
    assert items[2] == items[0]
    served = [e for e in events if e["event"] == "demand_served"]
    assert [(e["peer"], e["hops"]) for e in served] == [(holder.node_id, 3)] * 3
    assert origin.core.origin.served_items == 1  # the packed item, kept for the fold
