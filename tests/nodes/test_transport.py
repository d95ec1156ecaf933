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
from nodes.messages import Acknowledgement, Answer
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
    assert (
        seen["memory"]
        == seen["grpc"]
        == [
            "INVALID_ARGUMENT",
            "RESOURCE_EXHAUSTED",
            "RESOURCE_EXHAUSTED",
            "DEADLINE_EXCEEDED",
            "UNAVAILABLE",
        ]
    )


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


class _Handler:
    """A node whose deliver handler waits ``waits`` times (0: never), blocks the
    thread ``block_s`` first, then returns ``b"receipt"`` or raises ``raises``."""

    crashed = False

    def __init__(
        self,
        waits: int = 0,
        wait_s: float = 0.0,
        block_s: float = 0.0,
        raises: Exception | None = None,
    ) -> None:
        self.waits, self.wait_s, self.block_s, self.raises = waits, wait_s, block_s, raises
        self.cancelled = False

    async def deliver(self, delivery: object, *, signed: bool = False) -> Acknowledgement:
        import asyncio
        import time

        time.sleep(self.block_s)
        try:
            for _ in range(self.waits):
                await asyncio.sleep(self.wait_s)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.raises is not None:
            raise self.raises
        return Acknowledgement(0, b"receipt")


async def _deliver(handler: _Handler, timeout: float) -> bytes:
    from nodes.messages import Delivery

    transport = InMemoryTransport(registry={"n.mem:1": handler})  # type: ignore[dict-item]
    ack = await transport.deliver("n.mem:1", Delivery("v", b"x", (), ()), timeout, True)
    return ack.receipt


async def test_in_memory_calls_keep_the_deadline_results_and_errors_when_they_wait() -> None:
    """Handlers that wait run to their result under the deadline; one that outlives
    it is DEADLINE_EXCEEDED (and sees its cancellation); the deadline counts from
    the call's start, also when the handler blocked before its first wait; an
    error after a wait keeps its status code."""
    import asyncio

    from nodes.errors import MalformedRequest

    assert await _deliver(_Handler(), 1.0) == b"receipt"
    assert await _deliver(_Handler(waits=3), 1.0) == b"receipt"
    assert await _deliver(_Handler(waits=2, wait_s=0.01), 1.0) == b"receipt"
    slow = _Handler(waits=1, wait_s=5.0)
    assert await _code(_deliver(slow, 0.05)) == "DEADLINE_EXCEEDED"
    assert slow.cancelled
    blocked = _Handler(waits=1, wait_s=0.02, block_s=0.1)
    assert await _code(_deliver(blocked, 0.05)) == "DEADLINE_EXCEEDED"
    failing = _Handler(waits=1, raises=MalformedRequest("bad"))
    assert await _code(_deliver(failing, 1.0)) == "INVALID_ARGUMENT"
    # the caller's own cancellation reaches the waiting handler and the caller
    waiting = _Handler(waits=1, wait_s=5.0)
    task = asyncio.ensure_future(_deliver(waiting, 10.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waiting.cancelled


async def test_an_in_memory_call_that_never_waits_arms_no_timer() -> None:
    """No timer per call for a handler that completes without waiting (the usual
    in-process call): a deadline could not fire for it anyway."""
    import asyncio

    loop = asyncio.get_running_loop()
    armed: list[float] = []
    original = loop.call_at

    def call_at(when: float, *args: object, **kwargs: object) -> asyncio.TimerHandle:
        armed.append(when)
        return original(when, *args, **kwargs)  # type: ignore[arg-type]

    loop.call_at = call_at  # type: ignore[method-assign]
    try:
        for _ in range(5):
            assert await _deliver(_Handler(), 30.0) == b"receipt"
        assert armed == []
        assert await _deliver(_Handler(waits=1), 30.0) == b"receipt"
        assert len(armed) == 1  # one that waits runs under its deadline
    finally:
        loop.call_at = original  # type: ignore[method-assign]


async def test_a_grpc_demand_answer_is_sized_as_the_response_crossed_the_wire() -> None:
    """The size the meter counts for a gRPC demand is the response message's length as
    received (a field this version does not know included), read with the answers."""
    import grpc

    answers = [Answer(b"r" * 300, b"c" * 130, tuple(b"h" * n for n in (0, 127, 128, 400)))]
    known = wire.demand_response(answers).SerializeToString()
    unknown_field = b"\xfa\x01\x03new"  # field 31, bytes: kept by protobuf, not by us
    sent = known + unknown_field

    async def demand(request: bytes, context: object) -> bytes:
        return sent

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "provnet.v1.Serve",
                {"Demand": grpc.unary_unary_rpc_method_handler(demand, bytes, bytes)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    transport = GrpcTransport()
    try:
        got = await transport.demand(f"127.0.0.1:{port}", [b"demand"], 5.0)
    finally:
        await transport.close()
        await server.stop(None)
    assert got == answers
    assert wire.demand_response_size(answers) == len(known)
    assert wire.demand_response_size(got) == len(sent)
