"""A standing suspicion is re-tested by its holder until it clears (nodes.retest).

Real node processes: an origin whose signed endpoint is a port the test
controls, a holder node and a witness node. The endpoint is first cut (a
blackholing link proxy: silence, so the suspicion is witness-confirmed) or
busy (every demand ``RESOURCE_EXHAUSTED``), the holder node rehydrates and
stores the suspicion, then the endpoint recovers (a proxy forwarding to the
origin on the same port). Nobody rehydrates again: the holder's own
re-tests must clear the suspicion within 60 s of the recovery (issue 23,
goal 5). Before, it stood until the value happened to be rehydrated again.
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

from nodes import wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
)
from nodes.cluster import free_ports
from nodes.linkproxy import LinkProxy, LinkSpec
from nodes.messages import Delivery
from nodes.retest import RETEST_MAX_S
from tests.nodes.node_process import node_process
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(240)

#: Issue 23, goal 5: a suspicion of an honest origin clears within this of the attack ending.
CLEAR_WITHIN_S = 60.0


async def _counters(address: str) -> dict[str, int]:
    async with grpc.aio.insecure_channel(address) as chan:
        stub: Any = node_pb2_grpc.NodeStub(chan)
        reply = await stub.Stats(node_pb2.StatsRequest(), timeout=5)
    return dict(reply.counters)


async def _busy_demand(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    context.set_trailing_metadata((("grpc-retry-pushback-ms", "100"),))
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "node overloaded, try again")


@contextlib.asynccontextmanager
async def _busy(endpoint: str) -> AsyncIterator[None]:
    """A server on ``endpoint`` answering every demand RESOURCE_EXHAUSTED."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handler = grpc.method_handlers_generic_handler(
        "provnet.v1.Serve",
        {
            "Demand": grpc.unary_unary_rpc_method_handler(
                _busy_demand,
                request_deserializer=serve_pb2.DemandRequest.FromString,
                response_serializer=serve_pb2.DemandResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(endpoint)
    await server.start()
    try:
        yield
    finally:
        await server.stop(0)


def _hostport(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _link(endpoint: str, origin: str, *, blackhole: bool = False) -> LinkProxy:
    return LinkProxy(
        LinkSpec(listen=_hostport(endpoint), target=_hostport(origin), blackhole=blackhole)
    )


@contextlib.asynccontextmanager
async def _cut(endpoint: str, origin: str) -> AsyncIterator[None]:
    async with _link(endpoint, origin, blackhole=True):
        yield


@pytest.mark.parametrize("attack", ["cut", "busy"])
async def test_a_suspicion_of_an_origin_that_recovers_clears_within_a_minute_unasked(
    tmp_path: Path, attack: str
) -> None:
    endpoint = f"127.0.0.1:{free_ports(1)[0]}"
    with (
        node_process(
            tmp_path,
            "origin",
            PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id,
            PROVNET_ADVERTISE=endpoint,
            PROVNET_DEADLINE_MS="500",
        ) as (origin, _),
        node_process(tmp_path, "witness") as (witness, _),
        node_process(
            tmp_path,
            "holder",
            PROVNET_OPERATOR_KEYS=TEST_OPERATOR.key_id,
            PROVNET_PEERS=f"witness={witness}",
        ) as (holder, _),
    ):
        async with operator_channel(origin) as chan:
            hoplog: Any = hoplog_pb2_grpc.HopLogStub(chan)
            await hoplog.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
            fold = await hoplog.CommitFold(
                hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1], value=b"payload"), timeout=30
            )
        async with operator_channel(holder) as chan:
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan)
            await deliver.Deliver(
                wire.deliver_request(
                    Delivery("v", b"payload", (fold.commitment,), (fold.obligation,), "")
                ),
                timeout=30,
            )
            attacked = _cut(endpoint, origin) if attack == "cut" else _busy(endpoint)
            async with attacked:
                report = await deliver.Rehydrate(
                    deliver_pb2.RehydrateRequest(value_ref="v", witnesses=["witness"]), timeout=60
                )
                (outcome,) = report.outcomes
                if attack == "cut":
                    assert outcome.outcome == "unanswered", outcome.detail
                    assert outcome.witness_confirmed, outcome.detail
                else:
                    assert outcome.outcome == "busy", outcome.detail
                    assert not outcome.witness_confirmed, outcome.detail
                # Stored as what it is: a busy record is counted as busy, not silent.
                counter = "evidence_unanswered" if attack == "cut" else "evidence_busy"
                counters = await _counters(holder)
                assert counters[counter] == 1, counters
                assert counters["evidence_total"] == 1, counters
            # The attack ends: the signed endpoint reaches the origin again.
            ended = time.monotonic()
            async with _link(endpoint, origin):
                while (await _counters(holder)).get(counter, 0) != 0:
                    assert time.monotonic() - ended < CLEAR_WITHIN_S, "suspicion still standing"
                    await asyncio.sleep(0.2)
                took = time.monotonic() - ended
    # The schedule's longest wait bounds it (plus a poll and one demand).
    assert took < RETEST_MAX_S + 5.0, took
    print(f"{attack}: suspicion cleared {took:.1f} s after the endpoint recovered")
    path = Path(outcome.evidence_path)
    assert Path(f"{path}.cleared-by").is_file()
