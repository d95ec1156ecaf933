"""The transport seam: in-memory and gRPC report failures with the same status names."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts.identity import Identity
from contracts.serve import build_demand
from nodes import wire
from nodes.app import RunningNode
from nodes.faults import FaultMode
from nodes.messages import Answer
from nodes.services import NodeCore
from nodes.transport import CallFailed, GrpcTransport, InMemoryTransport, Transport
from tests.nodes.rpc_support import accusation_audit, grpc_node, held_fold, hop_json

__all__ = ["accusation_audit"]


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[RunningNode, RunningNode]]:
    good = await grpc_node(tmp_path, "good")
    dropping = await grpc_node(tmp_path, "dropping", FaultMode.DROP)
    try:
        yield good, dropping
    finally:
        await good.stop(0.2)
        await dropping.stop(0.2)


def _transports(
    pair: tuple[RunningNode, RunningNode],
) -> list[tuple[str, Transport, str, str]]:
    good, dropping = pair
    memory = InMemoryTransport(max_message_bytes=64 * 1024)
    memory.register("good.mem:1", good.core)
    memory.register("dropping.mem:1", dropping.core)
    grpc_transport = GrpcTransport(max_message_bytes=64 * 1024)
    return [
        ("memory", memory, "good.mem:1", "dropping.mem:1"),
        ("grpc", grpc_transport, good.address, dropping.address),
    ]


async def _code(call: object) -> str:
    with pytest.raises(CallFailed) as info:
        await call  # type: ignore[misc]
    return info.value.code


async def test_both_transports_name_failures_with_the_same_status(
    pair: tuple[RunningNode, RunningNode],
) -> None:
    seen: dict[str, list[str]] = {}
    for name, transport, good_addr, drop_addr in _transports(pair):
        try:
            seen[name] = [
                await _code(transport.demand(good_addr, [b"not an envelope"], 2.0)),
                await _code(transport.demand(good_addr, [b"x" * 70_000], 2.0)),
                # Fits the bound as raw bytes, not as the encoded message: the
                # bound is on the message (nodes.wire.message_size) for both.
                await _code(transport.demand(good_addr, [b"x" * (64 * 1024 - 2)], 2.0)),
                await _code(transport.demand(drop_addr, [b"{}"], 0.2)),
                await _code(transport.demand("127.0.0.1:1", [b"{}"], 1.0)),
            ]
        finally:
            await transport.close()
    assert seen["memory"] == seen["grpc"] == [
        "INVALID_ARGUMENT",
        "RESOURCE_EXHAUSTED",
        "RESOURCE_EXHAUSTED",
        "DEADLINE_EXCEEDED",
        "UNAVAILABLE",
    ]


async def test_both_transports_carry_the_same_verified_answer(
    pair: tuple[RunningNode, RunningNode],
) -> None:
    good, _ = pair
    core: NodeCore = good.core
    _, seqs = await core.append([hop_json(i) for i in range(1, 6)])
    fold = held_fold(await core.commit_fold("v", seqs))
    holder = Identity.generate()
    hops: dict[str, tuple[bytes, ...]] = {}
    for name, transport, good_addr, _ in _transports(pair):
        try:
            demand = build_demand(holder, fold.obligation, now=core.now_ms())
            (answer,) = await transport.demand(good_addr, [demand.to_bytes()], 2.0)
            hops[name] = answer.hops
            assert answer.commitment == fold.commitment_bytes
        finally:
            await transport.close()
    assert hops["memory"] == hops["grpc"]
    assert len(hops["grpc"]) == 5


@pytest.mark.parametrize("seed", range(3))
def test_demand_sizes_from_lengths_equal_the_encoded_messages(seed: int) -> None:
    """The sizes the transports bound and the meter counts are the protobuf encodings."""
    rng = random.Random(seed)
    lengths = (0, 1, 127, 128, 400, 16_383, 16_384, 70_000)
    for _ in range(200):
        demands = [b"d" * rng.choice(lengths) for _ in range(rng.randrange(0, 5))]
        assert wire.demand_request_size(demands) == wire.demand_request(demands).ByteSize()
        answers = [
            Answer(
                b"r" * rng.choice(lengths),
                b"c" * rng.choice((0, 1, 130)),
                tuple(b"h" * rng.choice(lengths) for _ in range(rng.randrange(0, 40))),
            )
            for _ in range(rng.randrange(0, 4))
        ]
        assert wire.demand_response_size(answers) == wire.demand_response(answers).ByteSize()
