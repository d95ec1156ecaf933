"""A stranger with no key cannot lock a node, nor get a live origin called silent.

Against real node processes (``provnet node``):

* idle ``Health.Watch`` streams (and calls that never send their body) held
  by a stranger do not take what demands, control calls and health checks
  need: streams have a cap of their own (in all and per caller address), and
  no cap counts every call;
* witnesses sign ``unanswered`` only for silence at a signed endpoint by the
  deadline (:mod:`nodes.noanswer`): an origin that answers
  ``RESOURCE_EXHAUSTED`` is busy, not silent, and a challenge made while it
  is gets no ``unanswered`` report.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.evidence import EvidenceStatus, verify_evidence
from contracts.identity import Identity
from contracts.rules import promise_refusal
from contracts.serve import build_commitment, build_demand, build_obligation
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation, WitnessOutcome, WitnessReport
from nodes._pb.provnet.v1 import (
    evidence_pb2,
    evidence_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.client import HeldFold, Holder
from nodes.cluster import child_env, free_ports, provnet_argv
from nodes.config import DEFAULT_MAX_STREAMS_PER_PEER, MIN_DEADLINE_MS
from nodes.messages import Outcome
from nodes.transport import GrpcTransport
from tests.nodes.node_process import REPO, node_process
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel, single

pytestmark = pytest.mark.timeout(240)

#: More idle streams than gRPC's old cap over every call (128).
_STRANGER_STREAMS = 140
_DEMAND = "/provnet.v1.Serve/Demand"


def _channels(address: str, n: int) -> list[grpc.aio.Channel]:
    """``n`` channels to ``address``, each its own connection (64 streams at most each)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return [grpc.aio.insecure_channel(address, options=options) for _ in range(n)]


async def _fold(address: str) -> tuple[bytes, bytes]:
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1]), timeout=30
        )
    return bytes(reply.commitment), bytes(reply.obligation)


async def _open_watches(chans: list[grpc.aio.Channel], n: int) -> tuple[list[Any], dict[str, int]]:
    """``n`` health watches over ``chans``: those that stay open, and how each ended or stood."""
    calls = [
        health_pb2_grpc.HealthStub(chans[k % len(chans)]).Watch(
            health_pb2.HealthCheckRequest(service="")
        )
        for k in range(n)
    ]
    seen: dict[str, int] = {}
    held: list[Any] = []

    async def first(call: Any) -> None:
        try:
            await asyncio.wait_for(call.read(), 20)
        except grpc.aio.AioRpcError as exc:
            seen[exc.code().name] = seen.get(exc.code().name, 0) + 1
            return
        seen["OPEN"] = seen.get("OPEN", 0) + 1
        held.append(call)

    await asyncio.gather(*(first(c) for c in calls))
    return held, seen


async def _bodiless(chans: list[grpc.aio.Channel], method: str, n: int) -> list[Any]:
    """``n`` calls of unary ``method`` whose request body never comes (until cancelled)."""
    never = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        await never.wait()
        yield b""  # pragma: no cover - never reached

    calls = [chans[k % len(chans)].stream_unary(method, None, None)(body()) for k in range(n)]
    await asyncio.sleep(1.0)  # every call's headers have reached the node
    return calls


async def _demand_served(address: str, obligation: bytes) -> None:
    """An honest holder's demand is served (one receipt, the one hop)."""
    ob = open_statement(obligation, Obligation)
    demand = build_demand(Identity.generate(), ob, now=int(time.time() * 1000))
    async with grpc.aio.insecure_channel(address) as chan:
        serve: Any = serve_pb2_grpc.ServeStub(chan)
        reply = await serve.Demand(serve_pb2.DemandRequest(demands=[demand.to_bytes()]), timeout=5)
    (answer,) = reply.answers
    assert answer.receipt
    assert len(answer.hops) == 1


def _health_cli(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        provnet_argv("node", "health", "--addr", address),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[str]:
    with node_process(
        tmp_path, "origin", PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id, PROVNET_REAP_INTERVAL_S="0"
    ) as (address, _):
        yield address


async def test_idle_health_watches_of_a_stranger_leave_demands_and_health_checks_served(
    origin: str,
) -> None:
    _, obligation = await _fold(origin)
    chans = _channels(origin, 3)
    try:
        held, seen = await _open_watches(chans, _STRANGER_STREAMS)
        # Refused beyond the per-caller cap (every stream here comes from 127.0.0.1),
        # with a status naming the cap; before, all 140 were open, 128 of them idle.
        assert seen.get("OPEN", 0) == DEFAULT_MAX_STREAMS_PER_PEER, seen
        assert seen.get("RESOURCE_EXHAUSTED", 0) == _STRANGER_STREAMS - len(held), seen
        await _demand_served(origin, obligation)
        async with grpc.aio.insecure_channel(origin) as chan:
            info: Any = node_pb2_grpc.NodeStub(chan)
            assert (await info.Info(node_pb2.InfoRequest(), timeout=5)).node_id
            # Each streaming method has its own room: a demand stream from the same
            # address is served while the watches hold theirs.
            ob = open_statement(obligation, Obligation)
            demand = build_demand(Identity.generate(), ob, now=int(time.time() * 1000))
            serve: Any = serve_pb2_grpc.ServeStub(chan)
            chunks = [
                c
                async for c in serve.DemandStream(
                    serve_pb2.DemandStreamRequest(demand=demand.to_bytes()), timeout=5
                )
            ]
            assert chunks
            assert chunks[-1].last
        cli = await asyncio.to_thread(_health_cli, origin)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        # A stream given back is a slot free again.
        for call in held:
            call.cancel()
        await asyncio.sleep(0.5)
        again, seen = await _open_watches(chans, 1)
        assert len(again) == 1, seen
        for call in again:
            call.cancel()
    finally:
        for chan in chans:
            await chan.close(None)


async def test_calls_that_never_send_their_body_leave_demands_served(origin: str) -> None:
    """No cap counts every call, so calls held open before their body (which no handler
    sees) lock nothing: before, 140 of them made every call RESOURCE_EXHAUSTED."""
    _, obligation = await _fold(origin)
    chans = _channels(origin, 3)
    try:
        calls = await _bodiless(chans, _DEMAND, _STRANGER_STREAMS)
        await _demand_served(origin, obligation)
        cli = await asyncio.to_thread(_health_cli, origin)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        for call in calls:
            call.cancel()
    finally:
        for chan in chans:
            await chan.close(None)


async def _challenge(witness: str, commitment: bytes, obligation: bytes) -> Any:
    """A stranger's challenge: a demand it built (never sent) for an obligation it holds."""
    ob = open_statement(obligation, Obligation)
    demand = build_demand(Identity.generate(), ob, now=int(time.time() * 1000))
    async with grpc.aio.insecure_channel(witness) as chan:
        stub: Any = evidence_pb2_grpc.EvidenceStub(chan)
        return await stub.Challenge(
            evidence_pb2.ChallengeRequest(
                commitment=commitment, obligation=obligation, demand=demand.to_bytes()
            ),
            timeout=30,
        )


def _outcomes(replies: list[Any]) -> list[str]:
    """Each witness's signed outcome ("" for an inconclusive challenge, no report)."""
    return [
        open_statement(r.witness_report, WitnessReport).statement.outcome.value
        if r.witness_report
        else ""
        for r in replies
    ]


async def test_witnesses_challenged_while_a_stranger_holds_watch_streams_confirm_nothing(
    tmp_path: Path, origin: str
) -> None:
    """Attack 1 of issue 23 whole: the stranger holds the origin's streams, then
    challenges two witnesses with a demand of its own; no witness signs unanswered."""
    commitment, obligation = await _fold(origin)
    with (
        node_process(tmp_path, "w1") as (w1, _),
        node_process(tmp_path, "w2") as (w2, _),
    ):
        chans = _channels(origin, 3)
        try:
            await _open_watches(chans, _STRANGER_STREAMS)
            replies = await asyncio.gather(
                _challenge(w1, commitment, obligation), _challenge(w2, commitment, obligation)
            )
        finally:
            for chan in chans:
                await chan.close(None)
    outcomes = _outcomes(list(replies))
    assert WitnessOutcome.UNANSWERED.value not in outcomes, outcomes
    assert outcomes == [WitnessOutcome.ANSWERED.value] * 2, outcomes


class _BusyServe:
    """A signed endpoint that answers every demand RESOURCE_EXHAUSTED, with a pushback."""

    def __init__(self) -> None:
        self.demands = 0

    async def Demand(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.demands += 1
        context.set_trailing_metadata((("grpc-retry-pushback-ms", "200"),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "node overloaded, try again")


@contextlib.asynccontextmanager
async def _busy_endpoint() -> AsyncIterator[tuple[str, _BusyServe]]:
    port = free_ports(1)[0]
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    busy = _BusyServe()
    handler = grpc.method_handlers_generic_handler(
        "provnet.v1.Serve",
        {
            "Demand": grpc.unary_unary_rpc_method_handler(
                busy.Demand,
                request_deserializer=serve_pb2.DemandRequest.FromString,
                response_serializer=serve_pb2.DemandResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", busy
    finally:
        await server.stop(0)


async def test_a_witness_told_resource_exhausted_at_the_signed_endpoint_signs_no_unanswered(
    tmp_path: Path,
) -> None:
    """The origin's signed endpoint answers RESOURCE_EXHAUSTED to every demand: busy,
    an explicit status, not silence. Before, both witnesses signed UNANSWERED."""
    async with _busy_endpoint() as (endpoint, busy):
        with (
            node_process(
                tmp_path,
                "origin",
                PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id,
                PROVNET_ADVERTISE=endpoint,
                PROVNET_DEADLINE_MS="500",
            ) as (origin, _),
            node_process(tmp_path, "w1") as (w1, _),
            node_process(tmp_path, "w2") as (w2, _),
        ):
            commitment, obligation = await _fold(origin)
            assert open_statement(obligation, Obligation).statement.endpoints == (endpoint,)
            replies = await asyncio.gather(
                _challenge(w1, commitment, obligation), _challenge(w2, commitment, obligation)
            )
    assert busy.demands >= 2  # each witness did ask the signed endpoint
    outcomes = _outcomes(list(replies))
    assert WitnessOutcome.UNANSWERED.value not in outcomes, outcomes
    assert not any(r.answered for r in replies)


async def test_a_holder_told_busy_until_the_deadline_records_busy_not_unanswered(
    tmp_path: Path,
) -> None:
    """The holder's side of the same rule: every ask answered RESOURCE_EXHAUSTED (re-asked at
    the pushback) ends ``busy``, no accusation, and the evidence file says busy; before,
    the holder's outcome was ``rejected`` with nothing recorded, while witnesses signed
    UNANSWERED."""
    evidence_dir = tmp_path / "evidence"
    async with _busy_endpoint() as (endpoint, busy):
        with (
            node_process(
                tmp_path,
                "origin",
                PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id,
                PROVNET_ADVERTISE=endpoint,
                PROVNET_DEADLINE_MS="1000",
            ) as (origin, _),
            node_process(tmp_path, "w1") as (w1, _),
            node_process(tmp_path, "w2") as (w2, _),
        ):
            commitment, obligation = await _fold(origin)
            held = HeldFold(
                open_statement(commitment, Commitment),
                open_statement(obligation, Obligation),
                commitment,
                obligation,
            )
            transport = GrpcTransport()
            holder = Holder(Identity.generate(), transport, evidence_dir=evidence_dir)
            try:
                report = await holder.rehydrate("v", [held], witnesses=[w1, w2])
            finally:
                await transport.close()
    outcome = single(report)
    assert outcome.outcome is Outcome.BUSY, outcome
    assert "RESOURCE_EXHAUSTED" in outcome.detail
    assert not outcome.accuses
    assert not outcome.witness_confirmed
    assert outcome.witnesses_unanswered == 0
    assert outcome.asks == 2  # asked again at the 200 ms appointment, within the deadline
    assert "2 of 2 witness(es) signed no report" in outcome.detail
    assert busy.demands >= 4  # the holder twice, each witness once
    (path,) = evidence_dir.glob("busy-*.json")
    assert path == Path(outcome.evidence_path)
    verdict = verify_evidence(path.read_bytes(), now=int(time.time() * 1000))
    assert verdict.status is EvidenceStatus.BUSY
    cli = subprocess.run(
        provnet_argv("evidence", "verify", str(path)),
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "VALID unanswered (suspicion, busy)" in cli.stdout


async def test_the_smallest_promise_is_the_same_bound_on_a_request_and_in_the_config(
    tmp_path: Path, origin: str
) -> None:
    """A node signs no deadline below MIN_DEADLINE_MS, asked by a CommitFold or configured:
    before, 50 ms was signed, a promise the node broke under load (issue 23, attack 4)."""
    async with operator_channel(origin) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CommitFold(
                hoplog_pb2.CommitFoldRequest(
                    value_ref="v", seqs=[1], deadline_ms=MIN_DEADLINE_MS - 1
                ),
                timeout=30,
            )
        assert refused.value.code() is grpc.StatusCode.OUT_OF_RANGE
        assert f"deadline_ms {MIN_DEADLINE_MS - 1}" in (refused.value.details() or "")
        kept = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1], deadline_ms=MIN_DEADLINE_MS),
            timeout=30,
        )
    signed = open_statement(bytes(kept.obligation), Obligation).statement
    assert signed.deadline_ms == MIN_DEADLINE_MS
    env = child_env()
    env["PROVNET_DEADLINE_MS"] = str(MIN_DEADLINE_MS - 1)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = subprocess.run(
        provnet_argv("node", "--name", "low", "--listen", address, "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert started.returncode != 0
    assert f"deadline_ms {MIN_DEADLINE_MS - 1} is outside {MIN_DEADLINE_MS}.." in started.stderr


async def test_a_challenge_of_a_promise_no_node_signs_is_refused_at_once(tmp_path: Path) -> None:
    """A stranger's own obligation promising hours would hold a witness's challenge (and
    its room for challenges) that long; before, the call waited out the caller's deadline.
    A promise below the fastest a node signs is refused by the same rule every route
    applies (contracts.rules.promise_refusal)."""
    stranger = Identity.generate()
    now = int(time.time() * 1000)
    commitment = build_commitment(
        stranger, epoch="e", value_ref="v", fold_seq=0, hops=[b"{}"], issued_at=now
    )

    def promising(deadline_ms: int) -> bytes:
        return build_obligation(
            stranger,
            commitment,
            serve_until=now + 3_600_000,
            deadline_ms=deadline_ms,
            endpoints=[f"127.0.0.1:{free_ports(1)[0]}"],
            issued_at=now,
        ).to_bytes()

    with node_process(tmp_path, "w1") as (w1, _):
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as slow:
            await _challenge(w1, commitment.to_bytes(), promising(10_000_000))
        with pytest.raises(grpc.aio.AioRpcError) as fast:
            await _challenge(w1, commitment.to_bytes(), promising(MIN_DEADLINE_MS - 1))
    for refused, deadline in ((slow, 10_000_000), (fast, MIN_DEADLINE_MS - 1)):
        assert refused.value.code() is grpc.StatusCode.OUT_OF_RANGE, refused.value
        expected = promise_refusal(deadline_ms=deadline)
        assert expected
        assert expected in (refused.value.details() or ""), refused.value
    assert time.monotonic() - started < 10
