"""Real grpc.aio nodes on port 0: health, reflection, request ids, S7 chains, streaming, faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from contracts.evidence import verify_evidence
from contracts.identity import Identity
from contracts.rules import MIN_DEADLINE_MS
from contracts.serve import build_demand, verify_served
from nodes import servicers
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.app import RunningNode
from nodes.auth import ControlAuth, signed_metadata
from nodes.errors import PeerUnavailable
from nodes.faults import FaultMode
from nodes.interceptors import REQUEST_ID_KEY
from nodes.messages import Acknowledgement, Outcome
from nodes.server import SERVICE_NAMES
from nodes.transport import GrpcTransport
from tests.nodes.rpc_support import (
    TEST_OPERATOR,
    accusation_audit,
    audit,
    audit_pb,
    grpc_holder,
    grpc_node,
    held_fold,
    hop_json,
    operator_channel,
    stop_all,
)

__all__ = ["accusation_audit"]


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[RunningNode]]:
    started: list[RunningNode] = []
    try:
        yield started
    finally:
        await stop_all(started)


async def _commit(node: RunningNode, hops: int, value_ref: str = "v1", value: bytes = b"") -> Any:
    async with operator_channel(node.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        appended = await stub.Append(
            hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(hops)]), timeout=5
        )
        return await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(
                value_ref=value_ref, seqs=list(appended.seqs), value=value
            ),
            timeout=5,
        )


async def _stats(node: RunningNode) -> dict[str, int]:
    async with operator_channel(node.address) as chan:
        stub: Any = node_pb2_grpc.NodeStub(chan)
        reply = await stub.Stats(node_pb2.StatsRequest(), timeout=5)
        return dict(reply.counters)


async def test_health_serves_every_service_and_reflection_lists_them(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    node = await grpc_node(tmp_path, "a")
    nodes.append(node)
    async with operator_channel(node.address) as chan:
        health: Any = health_pb2_grpc.HealthStub(chan)
        for service in ("", *SERVICE_NAMES):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
    sync_channel = grpc.insecure_channel(node.address)
    try:
        database = ProtoReflectionDescriptorDatabase(sync_channel)
        listed = set(await asyncio.to_thread(database.get_services))
        assert set(SERVICE_NAMES) <= listed
        assert "grpc.health.v1.Health" in listed
    finally:
        sync_channel.close()


async def test_request_id_is_echoed_when_sent_and_on_every_failure(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    node = await grpc_node(tmp_path, "a")
    nodes.append(node)
    async with operator_channel(node.address) as chan:
        stub: Any = node_pb2_grpc.NodeStub(chan)
        call = stub.Info(node_pb2.InfoRequest(), metadata=((REQUEST_ID_KEY, "req-42"),), timeout=5)
        info = await call
        assert dict(await call.trailing_metadata())[REQUEST_ID_KEY] == "req-42"
        assert info.node_id == node.node_id
        # A served call that sent none gets none back: nobody asked for one.
        call = stub.Info(node_pb2.InfoRequest(), timeout=5)
        await call
        assert REQUEST_ID_KEY not in dict(await call.trailing_metadata() or ())
        # A failed call gets the id its failure is logged under, sent or generated.
        serve: Any = serve_pb2_grpc.ServeStub(chan)
        echoed = []
        for metadata in (((REQUEST_ID_KEY, "req-43"),), ()):
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await serve.Demand(serve_pb2.DemandRequest(), metadata=metadata, timeout=5)
            assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            trailers: Any = failed.value.trailing_metadata() or ()
            echoed.append(dict(trailers).get(REQUEST_ID_KEY, ""))
        assert echoed[0] == "req-43"
        assert len(echoed[1]) == 16, echoed


async def test_graceful_stop_lets_an_in_flight_demand_finish(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    origin = await grpc_node(tmp_path, "origin", FaultMode.SLOW, delay_ms=300, deadline_ms=2000)
    transport = GrpcTransport()
    stopped = False
    try:
        fold = held_fold(await _commit(origin, 3))
        demand = build_demand(Identity.generate(), fold.obligation, now=origin.core.now_ms())
        in_flight = asyncio.create_task(transport.demand(origin.address, [demand.to_bytes()], 5))
        await asyncio.sleep(0.1)
        stopped = True  # the stop under test; not repeated on the way out
        await origin.stop(grace=3.0)
        (answer,) = await in_flight
        served = verify_served(
            answer.receipt,
            answer.hops,
            demand=demand,
            obligation=fold.obligation,
            commitment=fold.commitment,
        )
        assert len(served.hops) == 3
    finally:
        await transport.close()
        if not stopped:
            await origin.stop(0.2)


async def test_value_forwarded_a_b_c_is_rehydrated_by_c_from_a_directly(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    a = await grpc_node(tmp_path, "a")
    b = await grpc_node(tmp_path, "b")
    c = await grpc_node(tmp_path, "c")
    nodes.extend([a, b, c])
    await _commit(a, 5, value_ref="v1", value=b"compacted value")
    async with operator_channel(a.address) as chan:
        reply = await deliver_pb2_grpc.DeliverStub(chan).Forward(
            deliver_pb2.ForwardRequest(value_ref="v1", peer=b.address), timeout=5
        )
        assert reply.delivery_receipt
    async with operator_channel(b.address) as chan:
        stub: Any = deliver_pb2_grpc.DeliverStub(chan)
        at_b = await stub.Rehydrate(deliver_pb2.RehydrateRequest(value_ref="v1"), timeout=10)
        # A caller that cites no receipt gets none (the node asks its peer for none).
        unsigned = await stub.Forward(
            deliver_pb2.ForwardRequest(value_ref="v1", peer=c.address, without_receipt=True),
            timeout=5,
        )
        assert unsigned.delivery_receipt == b""
    demands_before = await _serve_calls(a)
    async with operator_channel(c.address) as chan:
        stub = deliver_pb2_grpc.DeliverStub(chan)
        at_c = await stub.Rehydrate(deliver_pb2.RehydrateRequest(value_ref="v1"), timeout=10)
    for report in (at_b, at_c):
        audit_pb(report, {a.node_id})
        assert report.complete
        assert [o.origin for o in report.outcomes] == [a.node_id]
        assert [o.outcome for o in report.outcomes] == ["served"]
        assert len(report.hops) == 5
    assert [h.hop for h in at_b.hops] == [h.hop for h in at_c.hops]
    # C asked A itself (one Serve call), not B: the duty travelled with the value.
    assert await _serve_calls(a) == demands_before + 1
    assert await _serve_calls(b) == 0


async def _serve_calls(node: RunningNode) -> int:
    """Calls the node answered as an origin: signed demands and unsigned asks."""
    stats = await _stats(node)
    return stats.get("rpc_Demand", 0) + stats.get("open_asks", 0)


async def test_large_fold_streams_in_chunks_and_verifies(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    origin = await grpc_node(tmp_path, "origin")
    nodes.append(origin)
    fold = held_fold(await _commit(origin, 200))
    demand = build_demand(Identity.generate(), fold.obligation, now=origin.core.now_ms())
    chunks = [
        answer
        async for answer in origin.core.answer_demand_stream(
            build_demand(Identity.generate(), fold.obligation, now=origin.core.now_ms()).to_bytes(),
            max_chunk_bytes=4096,
        )
    ]
    assert len(chunks) > 2  # cut into several messages
    transport = GrpcTransport()
    try:
        answer = await transport.demand_stream(origin.address, demand.to_bytes(), 5)
    finally:
        await transport.close()
    served = verify_served(
        answer.receipt,
        answer.hops,
        demand=demand,
        obligation=fold.obligation,
        commitment=fold.commitment,
    )
    assert len(served.hops) == 200
    transport = GrpcTransport()
    try:
        holder = grpc_holder(tmp_path, transport)
        holder.stream_leaves = 100
        report = audit(await holder.rehydrate("v1", [fold]), {origin.node_id})
    finally:
        await transport.close()
    assert report.complete
    assert [h.hop for h in report.hops] == list(served.hops)


async def test_tampering_origin_over_grpc_yields_bad_data_that_a_peer_accepts(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    origin = await grpc_node(tmp_path, "origin", FaultMode.TAMPER)
    holder = await grpc_node(tmp_path, "holder")
    peer = await grpc_node(tmp_path, "peer")
    nodes.extend([origin, holder, peer])
    await _commit(origin, 4, value=b"v")
    async with operator_channel(origin.address) as chan:
        await deliver_pb2_grpc.DeliverStub(chan).Forward(
            deliver_pb2.ForwardRequest(value_ref="v1", peer=holder.address), timeout=5
        )
    async with operator_channel(holder.address) as chan:
        report = await deliver_pb2_grpc.DeliverStub(chan).Rehydrate(
            deliver_pb2.RehydrateRequest(value_ref="v1"), timeout=10
        )
    audit_pb(report, {holder.node_id, peer.node_id})
    (outcome,) = report.outcomes
    assert outcome.outcome == "bad_data"
    assert Path(outcome.evidence_path).read_bytes() == outcome.evidence
    verdict = verify_evidence(bytes(outcome.evidence), now=holder.core.now_ms())
    assert verdict.accused == origin.node_id
    async with operator_channel(peer.address) as chan:
        stub: Any = evidence_pb2_grpc.EvidenceStub(chan)
        request = evidence_pb2.ReportRequest(evidence=outcome.evidence)
        accepted = await stub.Report(request, timeout=5)
        assert (accepted.kind, accepted.accused) == ("bad_data", origin.node_id)
        forged = bytes(outcome.evidence).replace(origin.node_id.encode(), holder.node_id.encode())
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Report(evidence_pb2.ReportRequest(evidence=forged), timeout=5)
        assert info.value.code() in {
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.INVALID_ARGUMENT,
        }
    assert (await _stats(holder))["evidence_bad_data"] == 1
    assert (await _stats(peer))["evidence_bad_data"] == 1
    assert (await _stats(origin))["serves"] == 1


async def test_dropping_origin_over_grpc_is_unanswered_and_witness_confirmed(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    origin = await grpc_node(tmp_path, "origin", FaultMode.DROP, deadline_ms=300)
    witness = await grpc_node(tmp_path, "witness")
    holder = await grpc_node(tmp_path, "holder", reasks=1)
    nodes.extend([origin, witness, holder])
    await _commit(origin, 2, value=b"v")
    async with operator_channel(origin.address) as chan:
        await deliver_pb2_grpc.DeliverStub(chan).Forward(
            deliver_pb2.ForwardRequest(value_ref="v1", peer=holder.address), timeout=5
        )
    async with operator_channel(holder.address) as chan:
        report = await deliver_pb2_grpc.DeliverStub(chan).Rehydrate(
            deliver_pb2.RehydrateRequest(value_ref="v1", witnesses=[witness.address]), timeout=10
        )
    audit_pb(report, {witness.node_id, holder.node_id})
    (outcome,) = report.outcomes
    assert outcome.outcome == "unanswered"
    assert outcome.asks == 2
    assert outcome.witness_confirmed
    assert outcome.witnesses_unanswered == 1
    assert report.rpcs == 3  # ask, re-ask, one witness challenge


async def test_node_reaper_evicts_expired_folds_and_lands_pending_ones(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    origin = await grpc_node(tmp_path, "origin", reap_interval_s=0.05)
    pending = await grpc_node(tmp_path, "pending", provenance_pending=True, reap_interval_s=0.05)
    nodes.extend([origin, pending])
    async with operator_channel(origin.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        appended = await stub.Append(
            hoplog_pb2.AppendRequest(hops=[hop_json(i) for i in range(1, 4)]), timeout=5
        )
        await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=list(appended.seqs), serve_for_ms=100),
            timeout=5,
        )
    fold = held_fold(await _commit(pending, 4))
    for _ in range(100):  # bounded: 100 × 50 ms
        if (await _stats(origin)).get("hops_evicted", 0) >= 3:
            break
        await asyncio.sleep(0.05)
    assert (await _stats(origin))["hops_evicted"] == 3
    transport = GrpcTransport()
    try:
        holder = grpc_holder(tmp_path, transport)
        report = audit(await holder.rehydrate("v1", [fold]), {pending.node_id})
    finally:
        await transport.close()
    assert report.complete  # the reaper landed the pending hops
    assert (await _stats(pending))["reconciled"] >= 1


async def test_events_logged_during_a_call_carry_its_request_id_as_json(
    tmp_path: Path, nodes: list[RunningNode], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import structlog

    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    configure_logging(LogFormat.JSON, "info", node="a")
    try:
        node = await grpc_node(tmp_path, "a")
        nodes.append(node)
        async with operator_channel(node.address) as chan:
            stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
            appended = await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)]), timeout=5)
            await stub.CommitFold(
                hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=list(appended.seqs)),
                metadata=((REQUEST_ID_KEY, "commit-7"),),
                timeout=5,
            )
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    finally:
        structlog.reset_defaults()
    (committed,) = [e for e in lines if e["event"] == "fold_committed"]
    assert committed["request_id"] == "commit-7"
    assert committed["rpc"] == "/provnet.v1.HopLog/CommitFold"
    assert committed["node"] == "a"
    assert committed["level"] == "info"


async def test_forward_accepts_only_a_receipt_for_this_sender_value_and_pinned_peer(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    from contracts import sha256_hex
    from contracts.errors import BindingMismatch, EncodingError
    from contracts.serve import build_delivery_receipt
    from nodes.config import Peer

    b = await grpc_node(tmp_path, "b")
    nodes.append(b)
    impostor = Identity.generate()
    a = await grpc_node(
        tmp_path,
        "a",
        peers=(Peer("b", b.address, b.node_id), Peer("pinned-wrong", b.address, impostor.node_id)),
    )
    nodes.append(a)
    await _commit(a, 3, value_ref="v1", value=b"compacted value")
    assert await a.core.forward("v1", "b")  # b signs, as pinned
    with pytest.raises(BindingMismatch):
        await a.core.forward("v1", "pinned-wrong")  # b's signature, another pinned key

    held = a.core.held("v1")
    transport = a.core.transport
    right = {
        "sender": a.node_id,
        "value_digest": sha256_hex(b"compacted value"),
        "commitments": [f.commitment for f in held.folds],
        "obligations": [f.obligation for f in held.folds],
        "received_at": a.core.now_ms(),
    }
    forged = {  # what the peer acknowledges instead
        "another sender": {**right, "sender": impostor.node_id},
        "another value": {**right, "value_digest": sha256_hex(b"other")},
        "no obligations": {**right, "obligations": []},
    }
    try:
        for fields in forged.values():
            receipt = build_delivery_receipt(impostor, **fields).to_bytes()  # type: ignore[arg-type]

            async def deliver(*_: object, receipt: bytes = receipt) -> Acknowledgement:
                return Acknowledgement(0, receipt)

            a.core.transport = type("Forged", (), {"deliver": staticmethod(deliver)})()
            with pytest.raises(EncodingError, match="acknowledged another"):
                await a.core.forward("v1", "127.0.0.1:1")  # no key pinned for it
        # The same forger with every field right is accepted (nothing pinned for the address).
        receipt = build_delivery_receipt(impostor, **right).to_bytes()  # type: ignore[arg-type]

        async def deliver_right(*_: object) -> Acknowledgement:
            return Acknowledgement(0, receipt)

        a.core.transport = type("Right", (), {"deliver": staticmethod(deliver_right)})()
        assert await a.core.forward("v1", "127.0.0.1:1") == receipt
    finally:
        a.core.transport = transport


async def test_forward_returns_only_a_receipt_whose_signature_verifies(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    """What Forward returns is verified: a receipt with every field right but a
    broken signature, or altered after signing, is refused, and so is an answer
    without the receipt asked for. A forward that cites no receipt asks for
    none and returns none."""
    import dataclasses

    from contracts import sha256_hex
    from contracts.envelope import Envelope, EnvelopeSignature
    from contracts.errors import BadSignature, EncodingError
    from contracts.serve import build_delivery_receipt

    a = await grpc_node(tmp_path, "a")
    nodes.append(a)
    await _commit(a, 3, value_ref="v1", value=b"compacted value")
    held = a.core.held("v1")
    peer = Identity.generate()
    now = a.core.now_ms()

    def receipt(value: bytes) -> Envelope:
        return build_delivery_receipt(
            peer,
            sender=a.node_id,
            value_digest=sha256_hex(value),
            commitments=[f.commitment for f in held.folds],
            obligations=[f.obligation for f in held.folds],
            received_at=now,
        ).envelope

    good = receipt(b"compacted value")
    (sig,) = good.signatures
    flipped = bytes([sig.sig[0] ^ 1]) + sig.sig[1:]
    later = good.payload.replace(str(now).encode(), str(now + 1).encode())
    assert later != good.payload
    forged = {
        "flipped signature": Envelope(
            good.payload, good.payload_type, (EnvelopeSignature(sig.keyid, flipped),)
        ),
        "altered after signing": dataclasses.replace(good, payload=later),
    }
    transport = a.core.transport
    try:
        for what, envelope in forged.items():
            data = envelope.to_bytes()

            asked: list[bool] = []

            async def deliver(
                *args: object, data: bytes = data, asked: list[bool] = asked
            ) -> Acknowledgement:
                asked.append(bool(args[-1]))
                return Acknowledgement(now, data if args[-1] else b"")

            a.core.transport = type("Forged", (), {"deliver": staticmethod(deliver)})()
            with pytest.raises(BadSignature, match="does not verify"):
                await a.core.forward("v1", "127.0.0.1:1")
            # A caller that cites no receipt asks for none: nothing to verify.
            assert await a.core.forward("v1", "127.0.0.1:1", signed_receipt=False) == b"", what
            assert asked == [True, False], what
        async def deliver_unsigned(*_: object) -> Acknowledgement:
            return Acknowledgement(now)  # asked for a receipt, answers without one

        a.core.transport = type("Unsigned", (), {"deliver": staticmethod(deliver_unsigned)})()
        with pytest.raises(EncodingError, match="not valid JSON"):
            await a.core.forward("v1", "127.0.0.1:1")
        good_bytes = good.to_bytes()

        async def deliver_good(*_: object) -> Acknowledgement:
            return Acknowledgement(now, good_bytes)

        a.core.transport = type("Good", (), {"deliver": staticmethod(deliver_good)})()
        assert await a.core.forward("v1", "127.0.0.1:1") == good_bytes
    finally:
        a.core.transport = transport


async def test_a_nodes_deliveries_are_signed_and_its_demands_are_not(
    tmp_path: Path, nodes: list[RunningNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's transport signs the calls that need it (here ``Deliver``, as the
    sender) in the call's own metadata; its demands travel on the same open
    channel with no control signature (and no interceptor to pay for)."""
    seen: list[tuple[str, bool]] = []
    claim = ControlAuth.claim
    demand = servicers.Serve.Demand

    def signed(metadata: Any) -> bool:
        return any(k == "x-provnet-sig" for k, _ in metadata or ())

    def recording(self: ControlAuth, method: str, metadata: Any) -> Any:
        seen.append((method, signed(metadata)))
        return claim(self, method, metadata)

    async def recording_demand(self: servicers.Serve, request: Any, context: Any) -> Any:
        # An open method: the node looks for no control signature there, so
        # what the holder sent is read from the call itself.
        seen.append(("/provnet.v1.Serve/Demand", signed(context.invocation_metadata())))
        return await demand(self, request, context)

    monkeypatch.setattr(ControlAuth, "claim", recording)
    monkeypatch.setattr(servicers.Serve, "Demand", recording_demand)
    a = await grpc_node(tmp_path, "a")
    b = await grpc_node(tmp_path, "b")
    nodes.extend([a, b])
    await _commit(a, 3, value_ref="v1", value=b"compacted value")
    assert await a.core.forward("v1", b.address)  # a's transport: Deliver to b, signed by a
    report = await b.core.rehydrate("v1")  # b's transport: Demand to a
    assert [o.outcome for o in report.outcomes] == [Outcome.SERVED]
    assert ("/provnet.v1.Deliver/Deliver", True) in seen
    assert ("/provnet.v1.Serve/Demand", False) in seen
    assert ("/provnet.v1.Serve/Demand", True) not in seen
    with pytest.raises(ValueError, match="not a signed method"):
        signed_metadata(
            TEST_OPERATOR,
            "/provnet.v1.Serve/Demand",
            deliver_pb2.ForwardRequest(),
            target=b.core.node_id,
        )


async def test_a_forward_without_a_caller_deadline_is_not_bound_by_the_serve_deadline(
    tmp_path: Path, nodes: list[RunningNode]
) -> None:
    """The node's ``deadline_ms`` is what its obligations promise for answering a
    demand; a delivery to a peer (the peer checks every statement and writes its
    store durably) is another call. A forward with no deadline of its own must not
    fail because the peer took longer than the serve deadline (a loaded machine)."""
    a = await grpc_node(tmp_path, "a", deadline_ms=MIN_DEADLINE_MS)
    b = await grpc_node(tmp_path, "b")
    nodes.extend([a, b])
    await _commit(a, 2, value_ref="v1", value=b"compacted value")
    real = b.core.deliver

    async def slow(*args: Any, **kw: Any) -> Acknowledgement:
        await asyncio.sleep(3 * MIN_DEADLINE_MS / 1000)  # three serve deadlines of a: a busy peer
        return await real(*args, **kw)

    b.core.deliver = slow
    assert await a.core.forward("v1", b.address)
    assert b.core.held("v1").delivery.value == b"compacted value"
    # A caller's own deadline still bounds the call.
    with pytest.raises(PeerUnavailable, match="DEADLINE_EXCEEDED"):
        await a.core.forward("v1", b.address, deadline=time.monotonic() + 0.2)
