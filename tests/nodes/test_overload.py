"""Load shedding on a real grpc.aio node: bulk calls over the cap are refused before their body.

The bulk cap (``max_bulk_rpcs``) is checked when a call's headers arrive, not
after its request body has been received and parsed: a caller whose body
never comes is still refused with ``RESOURCE_EXHAUSTED``, and the serve path
answers while every bulk slot is held. An admitted call that never sends its
body gives its slot back after ``BULK_BODY_TIMEOUT_S``. With
``bulk_shed_lag_ms`` set, a late event loop admits one bulk call at a time.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from contracts.identity import Identity
from contracts.serve import build_commitment, build_demand, build_obligation, verify_served
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation
from nodes import eventloop, interceptors, overload, wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.app import RunningNode
from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv
from nodes.messages import Delivery
from tests.nodes.rpc_support import TEST_OPERATOR, grpc_node, hop_json, operator_channel

# These tests build a backlog and read how the node sheds it: another test
# process sharing the CPUs changes what they measure, so they run alone.
pytestmark = pytest.mark.serial

DELIVER = "/provnet.v1.Deliver/Deliver"


async def _silent(release: asyncio.Event) -> AsyncIterator[bytes]:
    """A request stream that sends no message until ``release``, then ends."""
    await release.wait()
    return
    yield b""  # pragma: no cover - makes this an async generator


def _pushback_ms(exc: grpc.aio.AioRpcError) -> int:
    """The ``grpc-retry-pushback-ms`` a refused call carries (it must carry one)."""
    trailers: Any = exc.trailing_metadata() or ()
    found = [v for k, v in trailers if k == interceptors.PUSHBACK_KEY]
    assert len(found) == 1, exc.trailing_metadata()
    return int(found[0])


async def _until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _four_channels(address: str) -> list[grpc.aio.Channel]:
    """Four channels to ``address``, each its own connection (a burst spread over them)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return [grpc.aio.insecure_channel(address, options=options) for _ in range(4)]


def _as_operator(chan: grpc.aio.Channel, node: RunningNode) -> Any:
    """``chan``'s ``Deliver`` as a client stream, each call signed afresh by the operator
    for ``node`` (over an empty body): admitted, it holds the operator's bulk slot and
    reservation until its body comes, as a delivery whose body is still on its way.
    An unsigned one is refused before it holds anything."""
    call = chan.stream_unary(DELIVER, None, None)
    target = node.core.node_id

    def signed(requests: Any, **kwargs: Any) -> Any:
        metadata = TEST_OPERATOR.metadata(DELIVER, b"", target=target)
        return call(requests, metadata=metadata, **kwargs)

    return signed


async def _connected_delivers(chans: list[grpc.aio.Channel], node: RunningNode) -> list[Any]:
    """Each channel's ``Deliver`` call (signed, :func:`_as_operator`), once the channel
    has connected (a ``Node/Info``)."""
    delivers = [_as_operator(chan, node) for chan in chans]
    for chan in chans:
        await chan.unary_unary("/provnet.v1.Node/Info", None, None)(b"", timeout=10)
    return delivers


async def _queue_burst(delivers: list[Any], release: asyncio.Event, n: int = 150) -> list[Any]:
    """``n`` silent deliveries over ``delivers``, queued in gRPC while this loop is blocked."""
    burst = [
        asyncio.ensure_future(delivers[k % len(delivers)](_silent(release), timeout=30))
        for k in range(n)
    ]
    for _ in range(50):
        await asyncio.sleep(0)  # every call's batch started in gRPC's core
    time.sleep(0.5)  # blocking is the point: gRPC queues what arrives meanwhile
    return burst


#: Runs of a backlog scenario before its test gives up on the machine forming one.
BACKLOG_ATTEMPTS = 5


def _shown(taken: list[bool]) -> str:
    """The bulk calls taken up, in order: ``B`` shed as from a backlog, ``.`` not."""
    return "".join("B" if t else "." for t in taken)


def _until_a_backlog_forms(
    scenario: Callable[[str], Coroutine[Any, Any, str | None]], name: str, what: str
) -> None:
    """Run ``scenario`` (given a node name) until one run forms a backlog.

    A run returns None once it formed one and checked it, or the calls it took
    up (:func:`_shown`) when none formed: on a loaded CPU the test's calls can
    reach the loop through gRPC's poller thread with the loop idle between the
    first of them (the queue judged drained, rightly), and such a run proves
    nothing either way. After :data:`BACKLOG_ATTEMPTS` of those, fail naming
    every run's calls.
    """
    runs: list[str] = []
    for attempt in range(BACKLOG_ATTEMPTS):
        seen = eventloop.run(scenario(f"{name}{attempt}"))
        if seen is None:
            return
        runs.append(seen)
    pytest.fail(f"no backlog formed {what} in {BACKLOG_ATTEMPTS} runs: {runs}")


async def _committed(node: RunningNode) -> tuple[bytes, bytes]:
    async with operator_channel(node.address) as chan:
        hoplog: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await hoplog.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=10)
        fold = await hoplog.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1]), timeout=10
        )
    return bytes(fold.commitment), bytes(fold.obligation)


async def _demand_answers(node: RunningNode, commitment: bytes, obligation: bytes) -> None:
    ob = open_statement(obligation, Obligation)
    demand = build_demand(Identity.generate(), ob, now=int(time.time() * 1000))
    async with grpc.aio.insecure_channel(node.address) as chan:
        serve: Any = serve_pb2_grpc.ServeStub(chan)
        reply = await serve.Demand(serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=10)
    _served_one_hop(reply, demand, ob, commitment)


def _served_one_hop(reply: Any, demand: Any, ob: Any, commitment: bytes) -> None:
    """The reply answers ``demand`` with the one committed hop, and the receipt verifies."""
    (answer,) = reply.answers
    served = verify_served(
        answer.receipt,
        list(answer.hops),
        demand=demand,
        obligation=ob,
        commitment=open_statement(commitment, Commitment),
    )
    assert len(served.hops) == 1


async def test_bulk_call_over_the_cap_is_shed_before_its_body_and_serving_goes_on(
    tmp_path: Path,
) -> None:
    node = await grpc_node(tmp_path, "shed", max_bulk_rpcs=2)
    # Slots 2/3 s apart, so the second refusal below falls within the first's slot
    # however slow the machine (at the default 10 ms it may come after it).
    node.server.requests.pushback.interval_s = 1.0
    release = asyncio.Event()
    try:
        commitment, obligation = await _committed(node)
        async with grpc.aio.insecure_channel(node.address) as chan:
            deliver = _as_operator(chan, node)
            # Two deliveries that open their call and never send the body hold both slots.
            holders = [
                asyncio.ensure_future(deliver(_silent(release), timeout=30)) for _ in range(2)
            ]
            await _until(lambda: node.server.requests.bulk_in_flight == 2, "2 bulk calls held")
            # The third is refused though its body never comes: shed before reading it.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await deliver(_silent(release), timeout=20)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
            assert "2 bulk calls in progress" in (refused.value.details() or "")
            assert node.server.requests.bulk_shed == 1
            # With an appointment to try again (gRPC's retry pushback), named in the details.
            first = _pushback_ms(refused.value)
            assert overload.Pushback().min_s * 1000 <= first <= 10_000
            assert f"try again in {first} ms" in (refused.value.details() or "")
            # The next one refused is given a later slot, not the same moment.
            with pytest.raises(grpc.aio.AioRpcError) as again:
                await deliver(_silent(release), timeout=20)
            assert again.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, again.value
            assert _pushback_ms(again.value) > first
            # The serve path answers while every bulk slot is taken.
            await _demand_answers(node, commitment, obligation)
            release.set()
            for held in holders:
                with pytest.raises(grpc.aio.AioRpcError) as empty:
                    await held
                assert empty.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert node.server.requests.bulk_in_flight == 0
        # Slots given back: a bulk call is admitted again (and reaches the auth check).
        async with grpc.aio.insecure_channel(node.address) as chan:
            with pytest.raises(grpc.aio.AioRpcError) as unsigned:
                await chan.unary_unary(DELIVER, None, None)(b"", timeout=10)
            assert unsigned.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        release.set()
        await node.stop(0)


async def test_shed_bulk_calls_are_logged_as_one_event_per_interval_with_their_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shedding is logged (``bulk_calls_shed``, a warning), not once per shed call: the
    first shed at once, then at most one event per ``BULK_SHED_LOG_INTERVAL_S``
    counting the calls shed since the previous event."""
    node = await grpc_node(tmp_path, "shedlog", max_bulk_rpcs=1)
    release = asyncio.Event()

    def shed_events(events: list[Any]) -> list[Any]:
        return [e for e in events if e["event"] == "bulk_calls_shed"]

    async def refused(deliver: Any) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await deliver(_silent(release), timeout=20)
        assert exc.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc.value

    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            deliver = _as_operator(chan, node)
            holder = asyncio.ensure_future(deliver(_silent(release), timeout=30))
            await _until(lambda: node.server.requests.bulk_in_flight == 1, "the bulk slot held")
            with structlog.testing.capture_logs() as events:
                for _ in range(4):
                    await refused(deliver)
            assert node.server.requests.bulk_shed == 4
            (first,) = shed_events(events)
            assert first["log_level"] == "warning"
            assert first["calls"] == 1
            assert first["from_backlogs"] == 0
            assert "1 bulk calls in progress" in first["reason"]
            # Once the interval has passed, the next shed reports every call since.
            monkeypatch.setattr(overload, "BULK_SHED_LOG_INTERVAL_S", 0.0)
            with structlog.testing.capture_logs() as events:
                await refused(deliver)
            (second,) = shed_events(events)
            assert second["calls"] == 4  # three unlogged before, and this one
            release.set()
            with pytest.raises(grpc.aio.AioRpcError):
                await holder
    finally:
        release.set()
        await node.stop(0)


async def test_admitted_bulk_call_without_a_body_gives_its_slot_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overload, "BULK_BODY_TIMEOUT_S", 0.2)
    node = await grpc_node(tmp_path, "slow", max_bulk_rpcs=1)
    release = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            with pytest.raises(grpc.aio.AioRpcError) as slow:
                await _as_operator(chan, node)(_silent(release), timeout=20)
            assert slow.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED, slow.value
            assert "request body not received" in (slow.value.details() or "")
        # The status reaches the caller before the handler's own clean-up has run.
        await _until(lambda: node.server.requests.bulk_in_flight == 0, "the slot given back")
    finally:
        release.set()
        await node.stop(0)


async def test_lagging_event_loop_admits_one_bulk_call_and_sheds_the_next(
    tmp_path: Path,
) -> None:
    node = await grpc_node(tmp_path, "lag", max_bulk_rpcs=16, bulk_shed_lag_ms=1)
    release = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            deliver = _as_operator(chan, node)
            # The first bulk call is admitted however late the loop runs.
            first = asyncio.ensure_future(deliver(_silent(release), timeout=30))
            await _until(lambda: node.server.requests.bulk_in_flight == 1, "1 bulk call held")
            # Make the loop late on purpose (the node shares this event loop).
            time.sleep(0.3)  # blocking is the point here
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await deliver(_silent(release), timeout=20)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
            assert "event loop" in (refused.value.details() or "")
            assert node.server.requests.bulk_in_flight == 1
            release.set()
            with pytest.raises(grpc.aio.AioRpcError):
                await first
    finally:
        release.set()
        await node.stop(0)


def _delivery_request(value_ref: str) -> deliver_pb2.DeliverRequest:
    """A valid operator delivery of a small value (its own origin, commitment and obligation)."""
    origin = Identity.generate()
    now = int(time.time() * 1000)
    commitment = build_commitment(
        origin, epoch="e", value_ref=value_ref, fold_seq=0, hops=[b"{}"], issued_at=now
    )
    obligation = build_obligation(
        origin, commitment, serve_until=now + 3_600_000, deadline_ms=2000,
        endpoints=["127.0.0.1:1"], issued_at=now,
    )  # fmt: skip
    delivery = Delivery(value_ref, b"value", (commitment.to_bytes(),), (obligation.to_bytes(),))
    return wire.deliver_request(delivery)


async def test_bulk_body_over_the_byte_budget_is_shed_at_headers_and_nothing_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the default byte budget (two of the largest messages), a third body is refused.

    Two deliveries whose bodies never come each reserve ``max_message_bytes``;
    a third, a valid signed delivery, is refused with ``RESOURCE_EXHAUSTED``
    after its short wait and its value is not held, though only two of the 16
    bulk slots are taken. Once the two give up, the same delivery is held.
    """
    monkeypatch.setattr(overload, "BULK_BUDGET_WAIT_S", 0.05)
    node = await grpc_node(tmp_path, "budget")
    release = asyncio.Event()
    body = _delivery_request("budget")
    try:
        assert node.core.config.max_bulk_rpcs > 3
        async with operator_channel(node.address) as chan:
            holders_chan = grpc.aio.insecure_channel(node.address)
            silent = _as_operator(holders_chan, node)
            holders = [
                asyncio.ensure_future(silent(_silent(release), timeout=30)) for _ in range(2)
            ]
            await _until(lambda: node.server.requests.bulk_in_flight == 2, "2 bulk calls held")
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan).Deliver
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await deliver(body, timeout=20)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
            assert "bytes of bulk request bodies in flight" in (refused.value.details() or "")
            # Refused after its request id was read: both the id and the appointment trail it.
            got: Any = refused.value.trailing_metadata() or ()
            trailers = dict(got)
            assert trailers.get(interceptors.REQUEST_ID_KEY), trailers
            assert _pushback_ms(refused.value) > 0
            stats = await node.core.stats()
            assert stats["held_values"] == 0
            assert stats.get("rpc_Deliver", 0) == 3  # two held open, one refused
            release.set()
            for held in holders:
                with pytest.raises(grpc.aio.AioRpcError):
                    await held
            await holders_chan.close(None)
            # The budget is given back: the same delivery is now admitted and held.
            await deliver(body, timeout=20)
            assert (await node.core.stats())["held_values"] == 1
        budget = node.server.requests.bulk_budget
        assert budget is not None
        assert budget.used == 0
        assert node.server.requests.bulk_in_flight == 0
    finally:
        release.set()
        await node.stop(0)


async def test_calls_beyond_the_pending_limit_are_refused_by_grpc_before_the_node_sees_them(
    tmp_path: Path,
) -> None:
    """``max_pending_rpcs``: calls the node's event loop has not taken up are capped.

    The node shares this event loop; while it is blocked, gRPC's own threads
    still receive calls. With ``max_pending_rpcs=2`` the calls beyond the
    limit are refused by gRPC (the caller sees ``CANCELLED``) and never reach
    a handler; with gRPC's own limit (0) every call is answered.
    """
    counts: dict[int, tuple[int, set[grpc.StatusCode]]] = {}
    for limit in (2, 0):
        node = await grpc_node(tmp_path / str(limit), "pending", max_pending_rpcs=limit)
        try:
            async with grpc.aio.insecure_channel(node.address) as chan:
                info = chan.unary_unary("/provnet.v1.Node/Info", None, None)
                await info(b"", timeout=10)  # connected
                calls = [asyncio.ensure_future(info(b"", timeout=20)) for _ in range(12)]
                for _ in range(20):
                    await asyncio.sleep(0)  # every call's batch started in gRPC's core
                time.sleep(0.5)  # blocking is the point: gRPC queues what arrives meanwhile
                results = await asyncio.gather(*calls, return_exceptions=True)
            codes = {r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)}
            served = sum(not isinstance(r, BaseException) for r in results)
            counts[limit] = (served, codes)
        finally:
            await node.stop(0)
    served_capped, codes_capped = counts[2]
    assert codes_capped == {grpc.StatusCode.CANCELLED}, counts
    assert 1 <= served_capped < 12, counts
    assert counts[0] == (12, set()), counts


async def test_a_burst_of_bulk_calls_is_refused_by_the_node_with_appointments_not_reset(
    tmp_path: Path,
) -> None:
    """With the default settings a burst of bulk calls that arrives while the node's
    event loop is busy is taken up and refused by the node, every call with
    ``RESOURCE_EXHAUSTED`` and its own retry appointment, none reset by gRPC's
    pending-call limit (``CANCELLED``, no appointment: what 64 gave).

    Two deliveries that never send their body hold the byte budget; the loop is
    blocked while 150 more arrive over four connections.
    """
    node = await grpc_node(tmp_path, "burst")
    release = asyncio.Event()
    chans = _four_channels(node.address)
    try:
        delivers = await _connected_delivers(chans, node)
        holders = [
            asyncio.ensure_future(delivers[0](_silent(release), timeout=30)) for _ in range(2)
        ]
        await _until(lambda: node.server.requests.bulk_in_flight == 2, "2 bulk calls held")
        burst = await _queue_burst(delivers, release)
        results = await asyncio.gather(*burst, return_exceptions=True)
        codes = [r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)]
        counted = {c.name: codes.count(c) for c in codes}
        assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 150, counted  # 64: CANCELLED
        appointments = [_pushback_ms(r) for r in results if isinstance(r, grpc.aio.AioRpcError)]
        # Each refusal its own later slot: the burst is spread over (at least half of)
        # 150 slots of the schedule, not sent back at once.
        pushback = node.server.requests.pushback
        slot_ms = pushback.interval_s / pushback.headroom * 1000
        assert max(appointments) - min(appointments) >= 150 * slot_ms / 2, sorted(appointments)
        assert node.server.requests.bulk_shed == 150
        release.set()
        for held in holders:
            with pytest.raises(grpc.aio.AioRpcError):
                await held
    finally:
        release.set()
        for chan in chans:
            await chan.close(None)
        await node.stop(0)


def test_a_demand_queued_behind_a_full_pending_queue_is_still_served(tmp_path: Path) -> None:
    """The serve path has its own pending-call queue: a backlog of other calls that
    the node's event loop has not taken up yet neither delays a demand behind it
    nor has it refused by the pending-call limit.

    The node runs on its own event loop in a thread, with ``max_pending_rpcs=2``.
    While that loop is blocked, twelve ``Node.Info`` calls and then one
    ``Serve.Demand`` arrive: calls beyond the limit in the shared queue are
    refused by gRPC (``CANCELLED``), the demand is answered and verifies.
    """
    import concurrent.futures
    import threading

    ready: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, RunningNode]] = (
        concurrent.futures.Future()
    )
    stop = threading.Event()

    async def serve() -> None:
        node = await grpc_node(tmp_path, "serve-queue", max_pending_rpcs=2)
        try:
            ready.set_result((asyncio.get_running_loop(), node))
            while not stop.is_set():
                await asyncio.sleep(0.01)
        finally:
            await node.stop(0)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    try:
        node_loop, node = ready.result(timeout=30)

        async def ask() -> None:
            commitment, obligation = await _committed(node)
            ob = open_statement(obligation, Obligation)
            demand = build_demand(Identity.generate(), ob, now=int(time.time() * 1000))
            async with grpc.aio.insecure_channel(node.address) as chan:
                info = chan.unary_unary("/provnet.v1.Node/Info", None, None)
                serve_stub: Any = serve_pb2_grpc.ServeStub(chan)
                await info(b"", timeout=10)  # connected
                blocked = threading.Event()

                def block() -> None:
                    blocked.set()
                    time.sleep(1.0)  # blocking is the point: gRPC queues what arrives

                node_loop.call_soon_threadsafe(block)
                assert blocked.wait(10)
                backlog = [asyncio.ensure_future(info(b"", timeout=20)) for _ in range(12)]
                await asyncio.sleep(0.2)  # the backlog reaches the node's queue first
                reply = await serve_stub.Demand(
                    serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=20
                )
                results = await asyncio.gather(*backlog, return_exceptions=True)
            codes = {r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)}
            assert codes == {grpc.StatusCode.CANCELLED}, results  # the backlog was over the limit
            _served_one_hop(reply, demand, ob, commitment)

        asyncio.run(ask())
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive(), "the node's thread did not stop"


async def test_bulk_traffic_runs_a_full_garbage_collection_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shed bulk calls leave grpc.aio's per-call cycles; bulk traffic collects them.

    Counted, not timed: with the interval at 0, every bulk call that ends
    (here: shed over ``max_bulk_rpcs``) runs one full collection.
    """
    monkeypatch.setattr(overload, "BULK_GC_INTERVAL_S", 0.0)
    collected: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda: collected.append(real_collect()))
    node = await grpc_node(tmp_path, "gc", max_bulk_rpcs=1)
    release = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            deliver = _as_operator(chan, node)
            holder = asyncio.ensure_future(deliver(_silent(release), timeout=30))
            await _until(lambda: node.server.requests.bulk_in_flight == 1, "1 bulk call held")
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await deliver(_silent(release), timeout=20)
                assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert node.server.requests.bulk_shed == 3
            assert len(collected) == 3
            assert node.server.requests.bulk_collections == 3
            release.set()
            with pytest.raises(grpc.aio.AioRpcError):
                await holder
    finally:
        release.set()
        await node.stop(0)


async def test_bulk_call_finding_the_budget_queue_full_is_shed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most as many calls wait for the byte budget as it holds; the next is refused at once.

    The default budget holds two of the largest bodies: two deliveries whose
    bodies never come hold it, two more wait for room (the wait made long
    here), and a fifth, a valid signed delivery, is refused with
    ``RESOURCE_EXHAUSTED`` while they still wait: it does not queue behind
    them (before, it waited its turn until its own deadline ran out).
    """
    monkeypatch.setattr(overload, "BULK_BUDGET_WAIT_S", 60.0)
    node = await grpc_node(tmp_path, "queue")
    release = asyncio.Event()
    body = _delivery_request("queue")
    budget = node.server.requests.bulk_budget
    assert budget is not None
    assert budget.max_waiters == 2
    try:
        async with operator_channel(node.address) as chan:
            holders_chan = grpc.aio.insecure_channel(node.address)
            silent = _as_operator(holders_chan, node)
            holders = [
                asyncio.ensure_future(silent(_silent(release), timeout=60)) for _ in range(2)
            ]
            await _until(lambda: node.server.requests.bulk_in_flight == 2, "2 bulk calls held")
            waiters = [
                asyncio.ensure_future(silent(_silent(release), timeout=60)) for _ in range(2)
            ]
            await _until(lambda: budget.waiting == 2, "2 calls waiting for the budget")
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan).Deliver
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await deliver(body, timeout=10)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
            assert "bytes of bulk request bodies in flight" in (refused.value.details() or "")
            assert budget.waiting == 2  # the two before it still wait their turn
            assert (await node.core.stats())["held_values"] == 0
            release.set()
            for call in (*holders, *waiters):
                with pytest.raises(grpc.aio.AioRpcError):
                    await call
            await holders_chan.close(None)
        assert budget.used == 0
        assert budget.waiting == 0
    finally:
        release.set()
        await node.stop(0)


async def test_bulk_budget_waiters_are_capped_and_served_in_arrival_order() -> None:
    """``BulkBudget``: a call finding ``max_waiters`` waiting is refused without waiting."""
    budget = overload.BulkBudget(limit=8, reserve=4)
    assert budget.max_waiters == 2
    assert await budget.acquire(0)
    assert await budget.acquire(0)
    first = asyncio.ensure_future(budget.acquire(60))
    second = asyncio.ensure_future(budget.acquire(60))
    await _until(lambda: budget.waiting == 2, "2 waiters")
    third = asyncio.ensure_future(budget.acquire(60))
    await asyncio.sleep(0)  # the refused one never waits
    assert third.done()
    assert third.result() is False
    budget.release(4)
    assert await first is True
    assert not second.done()
    budget.release(4)
    assert await second is True
    assert budget.used == 8
    assert budget.waiting == 0
    with pytest.raises(ValueError, match="waiters"):
        overload.BulkBudget(limit=8, reserve=4, max_waiters=-1)


def test_node_process_keeps_its_startup_objects_out_of_full_collections(tmp_path: Path) -> None:
    """A ``provnet node`` process freezes what exists once it serves (``gc.freeze``).

    Bulk traffic runs a full collection every ``BULK_GC_INTERVAL_S``, each a
    pause of the event loop: over the start-up objects (modules, classes) it
    took 13–137 ms under the overload benchmark, over what came since 0.5–2 ms.
    ``Node.Stats`` reports the frozen count; before, nothing was frozen (0).
    """
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    argv = provnet_argv(
        "node", "--name", "frozen", "--listen", address, "--data-dir", str(tmp_path / "n"),
        "--log-format", "json",
    )  # fmt: skip
    env = child_env()
    env["PROVNET_REAP_INTERVAL_S"] = "0"
    with (tmp_path / "node.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        give_up = time.monotonic() + 60
        while probe_health(address, timeout=0.5) is not HealthState.SERVING:
            if proc.poll() is not None or time.monotonic() > give_up:
                pytest.fail(f"node did not start: {(tmp_path / 'node.log').read_text()[-2000:]}")
            time.sleep(0.05)
        with grpc.insecure_channel(address) as chan:
            counters = wire.read_counters(chan, timeout=10)
        assert counters["gc_frozen_objects"] > 1000, counters
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_pushback_spaces_refused_callers_at_the_rate_the_node_completes_bulk_calls() -> None:
    """``Pushback``: each refusal gets the next slot, ``interval / headroom`` after the last.

    With admitted calls finishing every 100 ms and headroom 2, refusals at
    the same moment are told 50, 100, 150 ms…; once the schedule reaches
    ``max_s`` further refusals get a random time in its later half; when time
    passes with no refusal the schedule starts again from ``min_s``.
    """
    now = [100.0]
    draws = iter([0.0, 1.0])
    pushback = overload.Pushback(
        min_s=0.05, max_s=0.3, headroom=2.0, first_interval_s=0.1,
        clock=lambda: now[0], rng=lambda: next(draws),
    )  # fmt: skip
    assert [pushback.next_ms() for _ in range(6)] == [50, 100, 150, 200, 250, 300]
    # Full: the later half of the schedule, at random (0.0 and 1.0 drawn).
    assert [pushback.next_ms() for _ in range(2)] == [150, 300]
    # Calls now finish every 20 ms (the moving average follows): slots 10 ms apart.
    for _ in range(60):
        now[0] += 0.02
        pushback.completed(admitted_at=now[0] - 0.03)
    assert pushback.interval_s == pytest.approx(0.02, rel=0.01)
    now[0] += 5  # nobody refused for a while: back to the nearest slot
    assert [pushback.next_ms() for _ in range(3)] == [50, 60, 70]
    # An idle gap is not an interval: counted from the call's own admission.
    now[0] += 60
    pushback.completed(admitted_at=now[0] - 0.02)
    assert pushback.interval_s == pytest.approx(0.02, rel=0.01)
    with pytest.raises(ValueError, match="pushback bounds"):
        overload.Pushback(min_s=1.0, max_s=0.5)
    with pytest.raises(ValueError, match="headroom"):
        overload.Pushback(headroom=0)


def _take_up(backlog: overload.Backlog, now: list[float], n: int, gap: float) -> list[bool]:
    """``n`` calls taken up ``gap`` s apart on the fake clock ``now``: whether each was shed."""
    out = []
    for _ in range(n):
        now[0] += gap
        out.append(backlog.taken())
    return out


def test_backlog_is_a_run_of_calls_taken_up_back_to_back_with_one_shed() -> None:
    """``Backlog`` with a fake clock: what counts as a backlog, when it ends, how much."""
    now = [100.0]
    backlog = overload.Backlog(limit=100, clock=lambda: now[0])
    step = overload.BACKLOG_GAP_S / 2
    run = overload.BACKLOG_RUN

    def take(n: int, gap: float = step) -> list[bool]:
        return _take_up(backlog, now, n, gap)

    # A burst of calls back to back that the node admits (none shed) is no backlog.
    assert not any(take(3 * run))
    # One of them shed: from the run's BACKLOG_RUN-th call on, shed every call taken up.
    take(1, gap=1.0)
    backlog.shed()
    assert take(run) == [False] * (run - 2) + [True, True]  # the run began one call before
    # A pause in a backlog (the node's other work, a lost time slice) does not end it...
    assert take(1, gap=overload.BACKLOG_END_GAP_S / 2) == [True]
    # ...a longer gap does: the queue has drained, the run is over.
    assert take(1, gap=2 * overload.BACKLOG_END_GAP_S) == [False]
    backlog.shed()
    # A backlog that lasts: ``limit`` calls shed in all (3 already), then admitted as before.
    lasting = take(200)
    assert sum(lasting) == 100 - 3
    assert not any(lasting[-50:])
    # Within BACKLOG_EVERY_S of the window opening, a new backlog is not shed again...
    take(1, gap=1.0)
    backlog.shed()
    assert not any(take(2 * run))
    # ...after it, it is.
    take(1, gap=overload.BACKLOG_EVERY_S)
    backlog.shed()
    assert take(run)[-1]


def test_backlog_on_a_loop_that_knows_when_it_was_idle_ends_only_once_it_was() -> None:
    """``Backlog`` given when the event loop was last idle: a pause of any length in
    which the loop never waited with nothing to run is the node's own work (the
    queue may still be full), not the end of the backlog; the loop idle once is."""
    now = [100.0]
    idle = [0.0]
    backlog = overload.Backlog(limit=1000, clock=lambda: now[0], idle_at=lambda: idle[0])
    step = overload.BACKLOG_GAP_S / 2
    run = overload.BACKLOG_RUN

    def take(n: int, gap: float = step) -> list[bool]:
        return _take_up(backlog, now, n, gap)

    take(1, gap=1.0)
    backlog.shed()
    assert take(run)[-2:] == [True, True]  # a backlog, as with pauses alone
    # The node busy with its own work for 5x the pause that ends a backlog without
    # this clock (a node admitting 3 MiB bodies during a burst paused 10-45 ms):
    # still the backlog.
    assert take(1, gap=5 * overload.BACKLOG_END_GAP_S) == [True]
    assert take(3, gap=3 * overload.BACKLOG_END_GAP_S) == [True] * 3
    # The loop was idle before the last call was taken up: no news since.
    idle[0] = now[0] - step
    assert take(1) == [True]
    # Idle after it: the queue has drained; the next call starts afresh.
    idle[0] = now[0] + step / 2
    assert take(1) == [False]
    assert not any(take(run - 2))  # a new run, nothing shed in it yet


def test_calls_taken_up_long_after_the_loop_was_last_idle_are_shed_however_far_apart() -> None:
    """``Backlog`` on a loop that knows when it was idle: a call taken up once the
    loop has not been idle for ``BACKLOG_BUSY_S``, with a call shed since, may
    have waited that long in gRPC's queue, so it is shed, though the calls come
    5 ms apart (a node busy with admitted bodies between them), never back to
    back; within the backlog limit; admitted again once the loop has been idle.
    With nothing shed since the loop was idle (one caller's deliveries back to
    back) none is. Without the idle clock such calls are never a backlog."""
    now = [100.0]
    idle = [100.0]
    backlog = overload.Backlog(limit=5, clock=lambda: now[0], idle_at=lambda: idle[0])
    blind = overload.Backlog(limit=5, clock=lambda: now[0])
    apart = 0.005  # > BACKLOG_GAP_S: never a run of calls back to back
    assert apart > overload.BACKLOG_GAP_S

    def take(n: int) -> list[bool]:
        out = []
        for _ in range(n):
            now[0] += apart
            out.append(backlog.taken())
            assert not blind.taken()
        return out

    busy = overload.BACKLOG_BUSY_S
    # Nothing shed since the loop was idle: however long it has been busy (one
    # caller's deliveries back to back), nothing is queued behind; none shed.
    assert not any(take(2 * int(busy / apart)))
    # A call shed (calls came faster than taken up); within BACKLOG_BUSY_S of the
    # loop's last idle wait: admitted.
    idle[0] = now[0]
    now[0] += 0.001
    backlog.shed()
    assert not any(take(int(busy / apart) - 1))
    # Past it, with the loop still not idle: shed, until the limit is spent.
    now[0] = idle[0] + busy
    assert take(7) == [True] * 5 + [False] * 2
    # The loop idle again: calls taken up after it are fresh, and the next
    # window's limit is untouched by the calls admitted meanwhile.
    idle[0] = now[0]
    now[0] += 0.001
    backlog.shed()
    assert not any(take(int(busy / apart) - 1))
    now[0] += overload.BACKLOG_EVERY_S
    assert take(1) == [True]


def test_a_node_not_yet_idle_sheds_no_call_before_it_has_shed_one() -> None:
    """``Backlog`` on a loop that has never been idle yet (its clock reads ``-inf``,
    as a fresh ``NodeEventLoop``'s does until a wait of its own): with no call
    shed at all, however long since start, nothing is queued behind; the first
    calls are admitted. (A node started in a busy process once shed its first
    bulk call as a backlog this way.) Once a call is shed, the busy rule applies."""
    now = [100.0]
    backlog = overload.Backlog(limit=5, clock=lambda: now[0], idle_at=lambda: float("-inf"))
    for _ in range(3):
        now[0] += 1.0
        assert not backlog.taken()
    backlog.shed()
    now[0] += 1.0
    assert backlog.taken()


def test_node_event_loop_notes_when_it_waited_with_nothing_to_run() -> None:
    """``NodeEventLoop`` records the end of each wait for I/O of ``IDLE_WAIT_S`` or more,
    and nothing while callbacks keep it busy, however long."""

    async def scenario() -> None:
        idle_at = eventloop.idle_clock()
        assert idle_at is not None
        await asyncio.sleep(10 * eventloop.IDLE_WAIT_S)  # nothing else to run: idle
        waited = idle_at()
        assert waited <= time.monotonic()
        assert waited > time.monotonic() - 5  # this wait, not one before the loop began
        # 50 turns of 2 ms of work each, back to back: the loop never waits.
        for _ in range(50):
            time.sleep(2 * eventloop.IDLE_WAIT_S)
            await asyncio.sleep(0)
        assert idle_at() == waited
        await asyncio.sleep(10 * eventloop.IDLE_WAIT_S)
        assert idle_at() > waited

    eventloop.run(scenario())
    # Any other loop cannot tell.
    assert asyncio.run(_idle_clock_here()) is None


async def _idle_clock_here() -> Any:
    return eventloop.idle_clock()


def test_a_wait_during_which_the_process_kept_the_cpu_busy_is_not_idle() -> None:
    """``IdleSelector`` notes a wait of ``IDLE_WAIT_S`` or more as idle only if the
    process (all its threads) used at most ``IDLE_CPU_SHARE`` of it in CPU: a real
    selector, given the wall and CPU clock readings around each wait."""
    readings: dict[str, list[float]] = {"wall": [], "cpu": []}
    selector = eventloop.IdleSelector(
        clock=lambda: readings["wall"].pop(0), cpu_clock=lambda: readings["cpu"].pop(0)
    )
    wait = 5 * eventloop.IDLE_WAIT_S
    share = eventloop.IDLE_CPU_SHARE

    def waits(at: float, cpu_used: float) -> float:
        """One wait of ``wait`` s ending at ``at``, the process using ``cpu_used`` s of CPU."""
        readings["wall"][:] = [at - wait, at]
        readings["cpu"][:] = [10.0, 10.0 + cpu_used]
        selector.select(0.001)
        assert readings == {"wall": [], "cpu": []}  # both clocks read around the wait
        return selector.idle_at

    # The process busy through the wait (its threads hashing and reading admitted
    # bodies, gRPC's handing the next call over): not idle, however long the loop waited.
    assert waits(1.0, 0.9 * wait) == float("-inf")
    assert waits(2.0, (share + 0.05) * wait) == float("-inf")
    # Mostly off the CPU: the node idle, noted at the wait's end.
    assert waits(3.0, (share - 0.05) * wait) == 3.0
    assert waits(4.0, 0.0) == 4.0
    assert waits(5.0, wait) == 4.0  # busy again: the last idle wait stays noted
    # A poll with a zero timeout (callbacks ready) is never a wait: no clock read.
    readings["wall"][:] = []
    selector.select(0)
    assert selector.idle_at == 4.0


def test_a_pause_of_the_node_amid_a_backlog_does_not_let_queued_calls_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node on its own loop (``NodeEventLoop``, as ``provnet node`` runs) keeps
    shedding a backlog through a pause in its own work: 150 deliveries queue
    while its loop is blocked (two silent ones hold the byte budget), and while
    it refuses them it stalls for 3x ``BACKLOG_END_GAP_S`` (as it did parsing
    admitted 3 MiB bodies on a loaded CPU). The call it takes up after the
    stall has waited behind the others: still refused as a backlog (judged by
    pauses alone, the stall ended the backlog and the next calls competed for
    admission again). Once the queue has drained and the loop has been idle, a
    new call is no longer taken for a backlog.

    Whether the burst forms a backlog before the stall is the machine's to say
    (:func:`_until_a_backlog_forms`).
    """
    taken: list[bool] = []
    stalled_at: list[int] = []
    real_taken = overload.Backlog.taken

    def stalling_taken(self: overload.Backlog) -> bool:
        # Three calls into the backlog, at a call taken up with the loop not idle since
        # the one before (in-process, the test's own calls can leave it idle between two).
        if sum(taken) >= 3 and self.active and not stalled_at:
            stalled_at.append(len(taken))
            time.sleep(3 * overload.BACKLOG_END_GAP_S)  # the node busy, its loop held
        taken.append(real_taken(self))
        return taken[-1]

    monkeypatch.setattr(overload.Backlog, "taken", stalling_taken)

    async def scenario(name: str) -> str | None:
        node = await grpc_node(tmp_path, name)
        release = asyncio.Event()
        chans = _four_channels(node.address)
        try:
            delivers = await _connected_delivers(chans, node)
            holders = [
                asyncio.ensure_future(delivers[0](_silent(release), timeout=30)) for _ in range(2)
            ]
            await _until(lambda: node.server.requests.bulk_in_flight == 2, "2 bulk calls held")
            taken.clear()
            burst = await _queue_burst(delivers, release)
            results = await asyncio.gather(*burst, return_exceptions=True)
            assert all(
                isinstance(r, grpc.aio.AioRpcError)
                and r.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                for r in results
            ), results
            assert len(taken) == 150
            shown = _shown(taken)
            if not stalled_at:  # no backlog to stall in: this run proves nothing
                release.set()
                await asyncio.gather(*holders, return_exceptions=True)
                return shown
            (stall,) = stalled_at
            # The call taken up right after the stall: still the backlog. (Later ones
            # may find the loop idle meanwhile: in-process, the test's own calls share
            # its gRPC poller thread, whose wake-ups can lag a millisecond.)
            assert taken[stall], (stall, shown)
            backlog_refusals = [
                r
                for r in results
                if "backlog" in (r.details() or "")  # type: ignore[union-attr]
            ]
            assert len(backlog_refusals) == node.server.requests.bulk_backlog_shed
            # Drained and idle: the next delivery is refused for the byte budget,
            # not as a backlog.
            await asyncio.sleep(0.05)
            with pytest.raises(grpc.aio.AioRpcError) as later:
                await delivers[1](_silent(release), timeout=10)
            assert "bytes of bulk request bodies in flight" in (later.value.details() or "")
            assert taken[-1] is False
            release.set()
            for held in holders:
                with pytest.raises(grpc.aio.AioRpcError):
                    await held
            return None
        finally:
            release.set()
            for chan in chans:
                await chan.close(None)
            await node.stop(0)

    _until_a_backlog_forms(scenario, "stall", "before the stall")


def test_a_call_granted_budget_room_amid_a_backlog_is_shed_not_admitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery waiting for room in the byte budget that gets it while the node
    works through a backlog is shed with an appointment (its body unread), not
    admitted to be processed between the backlog's refusals.

    The budget is held (two reservations, as two bodies in flight) and two
    deliveries wait for it; 150 queue while the node's loop is blocked; three
    calls into the backlog the two reservations are given back, which gives
    the waiters their room.

    Whether the burst forms a backlog first is the machine's to say
    (:func:`_until_a_backlog_forms`).
    """
    monkeypatch.setattr(overload, "BULK_BUDGET_WAIT_S", 30.0)  # the waiters outlast the block
    taken: list[bool] = []
    freed: list[int] = []
    budgets: list[overload.BulkBudget] = []
    real_taken = overload.Backlog.taken

    def watched_taken(self: overload.Backlog) -> bool:
        if sum(taken) >= 3 and self.active and not freed:
            freed.append(len(taken))
            budgets[0].release(2 * budgets[0].reserve)  # the two bodies in flight are done
        taken.append(real_taken(self))
        return taken[-1]

    monkeypatch.setattr(overload.Backlog, "taken", watched_taken)

    async def scenario(name: str) -> str | None:
        node = await grpc_node(tmp_path, name)
        release = asyncio.Event()
        chans = _four_channels(node.address)
        budget = node.server.requests.bulk_budget
        assert budget is not None
        budgets[:] = [budget]
        try:
            delivers = await _connected_delivers(chans, node)
            for _ in range(2):
                assert await budget.acquire(0)
            assert budget.used == budget.limit
            waiters = [
                asyncio.ensure_future(delivers[1](_silent(release), timeout=10)) for _ in range(2)
            ]
            await _until(lambda: budget.waiting == 2, "2 calls waiting for the budget")
            taken.clear()
            burst = await _queue_burst(delivers, release)
            await _until(lambda: len(taken) == 150, "every call of the burst taken up")
            if not freed:  # no backlog before the room was given: proves nothing
                budget.release(2 * budget.reserve)
                release.set()
                await asyncio.gather(*waiters, *burst, return_exceptions=True)
                return _shown(taken)
            for waiter in waiters:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await waiter
                # Admitted, it would have waited for its (silent) body: DEADLINE_EXCEEDED.
                assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
                assert "backlog" in (refused.value.details() or ""), refused.value
                assert _pushback_ms(refused.value) > 0
            assert len(freed) == 1
            release.set()  # any call admitted after the backlog ends at once
            await asyncio.gather(*burst, return_exceptions=True)
            await _until(lambda: budget.used == 0, "every reservation given back")
            return None
        finally:
            release.set()
            for chan in chans:
                await chan.close(None)
            await node.stop(0)

    _until_a_backlog_forms(scenario, "granted", "before the room was given")
