"""Attacks on the control plane of running nodes: re-targeted calls, replays across a
restart, strangers holding the bulk budget.

Every node is a real ``provnet node`` process (:class:`tests.nodes.test_adversary.Node`)
with :data:`tests.nodes.rpc_support.TEST_OPERATOR` as its operator key. The
attacker sits on the operator's path to one node (:class:`tests.nodes.wiretap.Wiretap`:
it relays each call and keeps its exact bytes and metadata), or is a stranger
with a fresh key, or none.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.identity import Identity
from contracts.serve import build_commitment, build_obligation
from nodes._pb.provnet.v1 import (
    attest_pb2,
    attest_pb2_grpc,
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
)
from nodes.app import load_or_create_identity
from nodes.auth import ControlCredentials, control_channel
from nodes.cluster import HealthState, probe_health
from nodes.control_replay import CONTROL_FLOOR_FILENAME, CONTROL_FUTURE_FILENAME
from nodes.messages import Delivery
from nodes.overload import BULK_STRANGER_BODY_TIMEOUT_S
from nodes.wire import deliver_request
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel
from tests.nodes.test_adversary import Node, _commit, _trio
from tests.nodes.wiretap import Wiretap

pytestmark = pytest.mark.timeout(240)

APPEND = "/provnet.v1.HopLog/Append"
DELIVER = "/provnet.v1.Deliver/Deliver"
REHYDRATE = "/provnet.v1.Deliver/Rehydrate"
ATTEST_REQUEST = "/provnet.v1.Attest/Request"
ATTEST_SUBMIT = "/provnet.v1.Attest/Submit"
BROKEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() not in BROKEN, caught.value
    return caught.value


def _node_id(node: Node) -> str:
    return load_or_create_identity(node.data_dir).node_id


async def _append_via(wiretap: Wiretap, seqs: list[int]) -> None:
    """The operator appends ``seqs`` through the tapped path (it asks the node's id there too)."""
    async with operator_channel(wiretap.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(
            hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(len(seqs))], seqs=seqs),
            timeout=10,
        )


async def _fold(node: Node, value_ref: str, seqs: list[int]) -> Any:
    async with operator_channel(node.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        return await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref=value_ref, seqs=seqs), timeout=10
        )


# --------------------------------------------------------------------------- (5) re-targeting


async def test_a_captured_operator_call_is_refused_by_every_other_node(tmp_path: Path) -> None:
    """Attack 5: calls captured on the operator's path to A, replayed byte for byte at
    B and C, are UNAUTHENTICATED there, naming both nodes; the operator's hop does not
    land in B's log. Before, the signature named no target and B appended it."""
    nodes = _trio(tmp_path / "retarget")
    for node in nodes:
        node.start()
    a, b, c = nodes
    wiretap = Wiretap(a.address)
    await wiretap.start()
    try:
        seqs = [time.time_ns() // 1000 + i for i in range(2)]
        await _append_via(wiretap, seqs)
        append = wiretap.last(APPEND)
        async with operator_channel(wiretap.address) as chan:
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan)
            at_a = await _refused(
                deliver.Rehydrate(deliver_pb2.RehydrateRequest(value_ref="nothing"), timeout=10)
            )
            attest: Any = attest_pb2_grpc.AttestStub(chan)
            # Served or refused by A's core (that is not what is tried here): signed for A.
            with contextlib.suppress(grpc.aio.AioRpcError):
                await attest.Request(
                    attest_pb2.RequestAttestationRequest(value_ref="x"), timeout=10
                )
        assert at_a.code() is grpc.StatusCode.NOT_FOUND, at_a  # A accepted the signature
        for captured in (append, wiretap.last(REHYDRATE), wiretap.last(ATTEST_REQUEST)):
            for other in (b, c):
                refused = await _refused(Wiretap.replay(captured, other.address))
                assert refused.code() is grpc.StatusCode.UNAUTHENTICATED, (captured.method, refused)
                details = refused.details() or ""
                assert _node_id(a)[:16] in details, details  # the node it was signed for
                assert _node_id(other)[:16] in details, details  # and the node it reached
        # Nothing landed: B has no such hops to fold, A has them.
        missing = await _refused(_fold(b, "landed", seqs))
        assert missing.code() is grpc.StatusCode.FAILED_PRECONDITION, missing
        assert (await _fold(a, "landed", seqs)).commitment
        for node in nodes:
            assert probe_health(node.address, timeout=2) is HealthState.SERVING
    finally:
        await wiretap.stop()
        for node in nodes:
            node.stop()


async def test_a_call_signed_for_no_target_or_by_the_old_scheme_is_refused(
    tmp_path: Path,
) -> None:
    """A signature without the target field, or with it but over another node's id, is
    UNAUTHENTICATED before any body is read (it says which node this is)."""
    (a, b, _) = _trio(tmp_path / "notarget")
    a.start()
    try:
        body = hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]).SerializeToString()
        signed = TEST_OPERATOR.metadata(APPEND, body, target=_node_id(b))
        stripped = tuple((k, v) for k, v in signed if k != "x-provnet-target")
        async with grpc.aio.insecure_channel(a.address) as chan:
            call = chan.unary_unary(APPEND, None, None)
            no_target = await _refused(call(body, metadata=stripped, timeout=10))
            assert no_target.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "names no target" in (no_target.details() or "")
            # The target field rewritten to A's id: the signature (over B's id) fails.
            forged = tuple((k, _node_id(a) if k == "x-provnet-target" else v) for k, v in signed)
            bad = await _refused(call(body, metadata=forged, timeout=10))
            assert bad.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "does not verify" in (bad.details() or "")
    finally:
        a.stop()


# --------------------------------------------------------------------------- (6) restarts


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_a_call_captured_before_a_restart_is_refused_after_it(
    tmp_path: Path, how: str
) -> None:
    """Attack 6: an operator Append captured on the wire and accepted, replayed after
    the node restarts (stopped with SIGTERM, or killed), is refused, its hops not
    appended again: ABORTED, as a demand from before a restart (the caller
    signs afresh); a call signed after the restart is accepted at once.
    Before, control nonces lived in memory only and the replay was accepted."""
    (a, *_) = _trio(tmp_path / "restart")
    a.start()
    wiretap = Wiretap(a.address)
    await wiretap.start()
    try:
        seqs = [time.time_ns() // 1000]
        await _append_via(wiretap, seqs)
        captured = wiretap.last(APPEND)
        assert (a.data_dir / CONTROL_FLOOR_FILENAME).exists()
        if how == "SIGKILL":
            assert a.proc is not None
            a.proc.kill()
            a.proc.wait(timeout=10)
        else:
            a.stop()
        a.start()
        refused = await _refused(Wiretap.replay(captured, a.address))
        assert refused.code() is grpc.StatusCode.ABORTED, refused
        assert "before this node's restart" in (refused.details() or ""), refused
        # The operator, signing afresh right after the restart, is served.
        async with operator_channel(a.address) as chan:
            stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
            await stub.Append(
                hoplog_pb2.AppendRequest(hops=[hop_json(7)], seqs=[seqs[0] + 1]), timeout=10
            )
        assert probe_health(a.address, timeout=2) is HealthState.SERVING
    finally:
        await wiretap.stop()
        a.stop()


async def test_a_future_dated_call_is_remembered_by_nonce_across_a_kill(tmp_path: Path) -> None:
    """A call dated ahead of the node's clock (within the skew) does not push the floor
    ahead (a restarted node would refuse everyone's calls until then): its nonce is
    kept durably, and the same call replayed after a SIGKILL is refused as a replay."""
    (a, *_) = _trio(tmp_path / "future")
    a.start()
    try:
        body = hoplog_pb2.AppendRequest(
            hops=[hop_json(1)], seqs=[time.time_ns() // 1000]
        ).SerializeToString()
        ahead = TEST_OPERATOR.metadata(APPEND, body, target=_node_id(a), now=time.time() + 20)
        async with grpc.aio.insecure_channel(a.address) as chan:
            await chan.unary_unary(APPEND, None, None)(body, metadata=ahead, timeout=10)
        floor = (
            int((a.data_dir / CONTROL_FLOOR_FILENAME).read_text() or "0")
            if (a.data_dir / CONTROL_FLOOR_FILENAME).exists()
            else 0
        )
        assert floor < time.time() * 1000 + 5_000, floor  # the floor stayed near the clock
        assert (a.data_dir / CONTROL_FUTURE_FILENAME).read_text().count("\n") == 1
        assert a.proc is not None
        a.proc.kill()
        a.proc.wait(timeout=10)
        a.start()
        async with grpc.aio.insecure_channel(a.address) as chan:
            refused = await _refused(
                chan.unary_unary(APPEND, None, None)(body, metadata=ahead, timeout=10)
            )
        assert refused.code() is grpc.StatusCode.UNAUTHENTICATED, refused
        assert "replayed" in (refused.details() or ""), refused
    finally:
        a.stop()


# --------------------------------------------------------------------------- (7) bulk budget


async def _bodiless(release: asyncio.Event) -> AsyncIterator[bytes]:
    await release.wait()
    return
    yield b""  # pragma: no cover - makes this an async generator


async def _held_open(call: Any) -> str:
    """``admitted`` once the node sent headers (it holds a slot for the call), else its code."""
    try:
        if await call.initial_metadata():
            return "admitted"
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "answered"


async def test_strangers_bodiless_bulk_calls_hold_nothing_the_operator_or_a_pinned_peer_needs(
    tmp_path: Path,
) -> None:
    """Attack 7: a stranger opens bodiless ``Attest.Submit`` streams (unsigned), bodiless
    ``Deliver`` streams signed with its own fresh keys, and bodiless ``Deliver`` streams
    that claim the operator's key with a forged signature. Meanwhile the operator's
    Append, CommitFold and Rehydrate and a pinned peer's delivery as itself are served;
    the forged claims are UNAUTHENTICATED at once; the stranger's streams that were
    admitted end after the short body timeout. Before, two bodiless Submit streams
    held the whole byte budget for 30 s and every one of those calls was
    RESOURCE_EXHAUSTED."""
    root = tmp_path / "budget"
    root.mkdir()
    nodes = _trio(root)
    a, b, _ = nodes
    b_key = load_or_create_identity(b.data_dir)  # B's key, pinned in A's peer list
    a.peers = a.peers.replace(f"b={b.address}", f"b={b.address},{b_key.node_id}")
    a.start()
    release = asyncio.Event()
    chans = [grpc.aio.insecure_channel(a.address) for _ in range(3)]
    try:
        c_bytes, o_bytes = await _commit(a, "held", value=b"the value")
        target = _node_id(a)
        submit = chans[0].stream_unary(ATTEST_SUBMIT, None, None)
        deliver = chans[1].stream_unary(DELIVER, None, None)
        open_calls = [submit(_bodiless(release), timeout=60) for _ in range(8)]
        strangers = [ControlCredentials(Identity.generate()) for _ in range(4)]
        signed_calls = [
            deliver(
                _bodiless(release),
                metadata=s.metadata(DELIVER, b"", target=target),
                timeout=60,
            )
            for s in strangers
            for _ in range(4)
        ]
        opened = await asyncio.gather(*(_held_open(c) for c in open_calls + signed_calls))
        assert "admitted" in opened, opened  # the stranger does hold what strangers may
        assert not set(opened) & {c.name for c in BROKEN}, opened
        # Claiming the operator's key without it: refused before it holds anything.
        forged = tuple(
            (k, TEST_OPERATOR.key_id if k == "x-provnet-key" else v)
            for k, v in strangers[0].metadata(DELIVER, b"", target=target)
        )
        claim = await _refused(deliver(_bodiless(release), metadata=forged, timeout=10))
        assert claim.code() is grpc.StatusCode.UNAUTHENTICATED, claim
        # The operator's calls and a pinned peer's delivery are served meanwhile.
        started = time.monotonic()
        async with operator_channel(a.address) as chan:
            hoplog: Any = hoplog_pb2_grpc.HopLogStub(chan)
            seqs = [time.time_ns() // 1000]
            await hoplog.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=seqs), timeout=10)
            await hoplog.CommitFold(
                hoplog_pb2.CommitFoldRequest(value_ref="during", seqs=seqs), timeout=10
            )
            operator_deliver: Any = deliver_pb2_grpc.DeliverStub(chan)
            await operator_deliver.Deliver(
                deliver_request(Delivery("v-op", b"x", (c_bytes,), (o_bytes,), "")), timeout=10
            )
            rehydrated = await operator_deliver.Rehydrate(
                deliver_pb2.RehydrateRequest(value_ref="v-op"), timeout=10
            )
            assert rehydrated is not None
        async with control_channel(a.address, ControlCredentials(b_key)) as chan:
            peer: Any = deliver_pb2_grpc.DeliverStub(chan)
            receipt = await peer.Deliver(
                deliver_request(
                    Delivery("v-peer", b"y", (c_bytes,), (o_bytes,), ""), signed=True
                ),
                timeout=10,
            )
            assert receipt.delivery_receipt
        assert time.monotonic() - started < BULK_STRANGER_BODY_TIMEOUT_S  # not after they gave up
        # The stranger's admitted streams end after the short body timeout, not 30 s.
        ended = await asyncio.wait_for(
            asyncio.gather(*open_calls, *signed_calls, return_exceptions=True),
            BULK_STRANGER_BODY_TIMEOUT_S + 10,
        )
        codes = {e.code() for e in ended if isinstance(e, grpc.aio.AioRpcError)}
        assert grpc.StatusCode.DEADLINE_EXCEEDED in codes, codes
        assert not codes & BROKEN, codes
        assert probe_health(a.address, timeout=2) is HealthState.SERVING
    finally:
        release.set()
        for chan in chans:
            await chan.close(None)
        a.stop()


def test_a_cluster_pins_every_peer_by_its_node_id(tmp_path: Path) -> None:
    """``provnet cluster up`` makes each node's key first and pins it in every other
    node's peer list, so a node serves its peers' deliveries from the share of its
    caps strangers cannot take (see the attack above)."""
    from nodes.cluster import _specs
    from nodes.home import Home

    specs = _specs(Home(tmp_path / "home"), ["a", "b", "c"])
    ids = {s.name: load_or_create_identity(s.data_dir).node_id for s in specs}
    for spec in specs:
        assert sorted(spec.peers) == sorted(
            f"{s.name}={s.address},{ids[s.name]}" for s in specs if s.name != spec.name
        )


async def test_a_backlog_of_strangers_calls_does_not_shed_the_operators(tmp_path: Path) -> None:
    """Backlog shedding is judged per class: while the node sheds a stranger's calls as a
    backlog (made so here: every call of that class is "taken up amid a backlog"), the
    operator's delivery taken up meanwhile is admitted and held. Before, one backlog
    judged every bulk call, and a stranger's flood of deliveries shed the operator's
    calls with its own (the framing benchmark's attack 8: 1 operator call in 14)."""
    from tests.nodes.rpc_support import grpc_node

    node = await grpc_node(tmp_path, "classes")
    overload: Any = node.server.requests.overload
    overload._backlogs["signed"].taken = lambda: True  # the stranger's class only
    origin = Identity.generate()
    now = int(time.time() * 1000)
    commitment = build_commitment(
        origin, epoch="e", value_ref="v", fold_seq=0, hops=[b"{}"], issued_at=now
    )
    obligation = build_obligation(
        origin, commitment, serve_until=now + 3_600_000, deadline_ms=2000,
        endpoints=["127.0.0.1:1"], issued_at=now,
    )  # fmt: skip
    body = deliver_request(
        Delivery("v", b"value", (commitment.to_bytes(),), (obligation.to_bytes(),), "")
    ).SerializeToString()
    stranger = ControlCredentials(Identity.generate())
    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            call = chan.unary_unary(DELIVER, None, None)
            shed = await _refused(
                call(body, metadata=stranger.metadata(DELIVER, body, target=node.core.node_id),
                     timeout=10)
            )  # fmt: skip
            assert shed.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, shed
            assert "backlog" in (shed.details() or ""), shed
            signed = TEST_OPERATOR.metadata(DELIVER, body, target=node.core.node_id)
            assert await call(body, metadata=signed, timeout=10)
        assert (await node.core.stats())["held_values"] == 1
    finally:
        await node.stop(0)
