"""A stranger's challenges cannot take a witness's room for everyone else's calls.

``Evidence.Challenge`` is open to anyone, and a stranger can sign an
obligation of its own (any key is an origin) whose endpoint is a server that
never answers: the witness then waits the promised deadline (up to 60 s) on
each challenge. Against a real ``provnet node`` process: such challenges have
a cap of their own, in all and per caller address, so they hold nothing
``Node.Info``, ``Node.Stats`` or ``Attest.List`` need, and one address
cannot hold every challenge slot the witness has for other holders.
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
from contracts.serve import build_commitment, build_demand, build_obligation
from nodes._pb.provnet.v1 import (
    attest_pb2,
    attest_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
)
from nodes.cluster import free_ports
from nodes.config import DEFAULT_MAX_CONCURRENT_RPCS
from nodes.overload import challenge_slots_per_peer
from tests.nodes.node_process import node_process

pytestmark = pytest.mark.timeout(240)

#: More challenges than the witness's whole cap on open calls.
_STRANGER_CHALLENGES = DEFAULT_MAX_CONCURRENT_RPCS + 12
#: What the stranger's obligation promises: the witness waits this long on each.
_PROMISE_MS = 30_000


@contextlib.asynccontextmanager
async def _tarpit() -> AsyncIterator[str]:
    """A serve endpoint that takes every demand and never answers it."""
    release = asyncio.Event()

    async def demand(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await release.wait()
        await context.abort(grpc.StatusCode.UNAVAILABLE, "tarpit closed")

    port = free_ports(1)[0]
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handler = grpc.method_handlers_generic_handler(
        "provnet.v1.Serve",
        {
            "Demand": grpc.unary_unary_rpc_method_handler(
                demand,
                request_deserializer=serve_pb2.DemandRequest.FromString,
                response_serializer=serve_pb2.DemandResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        release.set()
        await server.stop(0)


def _strangers_statements(endpoint: str) -> tuple[bytes, bytes, bytes]:
    """A stranger's own commitment, obligation (promising ``_PROMISE_MS`` at the
    tarpit) and a demand under it: everything a challenge needs."""
    stranger = Identity.generate()
    now = int(time.time() * 1000)
    commitment = build_commitment(
        stranger, epoch="e", value_ref="v", fold_seq=0, hops=[b"{}"], issued_at=now
    )
    obligation = build_obligation(
        stranger,
        commitment,
        serve_until=now + 3_600_000,
        deadline_ms=_PROMISE_MS,
        endpoints=[endpoint],
        issued_at=now,
    )
    demand = build_demand(Identity.generate(), obligation, now=now)
    return commitment.to_bytes(), obligation.to_bytes(), demand.to_bytes()


async def test_a_strangers_tarpit_challenges_leave_other_open_calls_served(
    tmp_path: Path,
) -> None:
    """Before, ``Evidence.Challenge`` shared one cap with ``Node.Info``, ``Node.Stats``
    and ``Attest.List``, none per caller: 128 challenges of a stranger's own
    obligation at a tarpit made every one of those RESOURCE_EXHAUSTED for the
    promised 30 s, and took every challenge slot from every other holder."""
    per_peer = challenge_slots_per_peer(DEFAULT_MAX_CONCURRENT_RPCS)
    assert 1 <= per_peer < DEFAULT_MAX_CONCURRENT_RPCS
    async with _tarpit() as endpoint:
        commitment, obligation, demand = _strangers_statements(endpoint)
        with node_process(tmp_path, "witness", PROVNET_REAP_INTERVAL_S="0") as (witness, _):
            # Each channel its own connection: a node takes 64 streams at most on one.
            options = [("grpc.use_local_subchannel_pool", 1)]
            chans = [grpc.aio.insecure_channel(witness, options=options) for _ in range(3)]
            chan = chans[0]
            try:
                request = evidence_pb2.ChallengeRequest(
                    commitment=commitment, obligation=obligation, demand=demand
                )
                stubs: list[Any] = [evidence_pb2_grpc.EvidenceStub(c) for c in chans]
                calls = [
                    stubs[k % len(stubs)].Challenge(request, timeout=60)
                    for k in range(_STRANGER_CHALLENGES)
                ]
                await asyncio.sleep(3.0)  # every challenge has reached the witness
                refused = [c for c in calls if c.done()]
                codes = {(await c.code(), await c.details()) for c in refused}
                # Beyond the per-caller cap, refused at once naming it; the rest wait.
                assert len(refused) == _STRANGER_CHALLENGES - per_peer, len(refused)
                assert {code for code, _ in codes} == {grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
                details = await refused[0].details()
                assert f"{per_peer} challenges in progress from ipv4:127.0.0.1" in details, details
                # The calls every caller needs are served meanwhile.
                info: Any = node_pb2_grpc.NodeStub(chan)
                assert (await info.Info(node_pb2.InfoRequest(), timeout=5)).node_id
                assert (await info.Stats(node_pb2.StatsRequest(), timeout=5)).counters is not None
                attest: Any = attest_pb2_grpc.AttestStub(chan)
                listed = await attest.List(
                    attest_pb2.ListAttestationsRequest(value_digest="0" * 64), timeout=5
                )
                assert not listed.attestations
                for call in calls:
                    call.cancel()
            finally:
                for c in chans:
                    await c.close(None)
