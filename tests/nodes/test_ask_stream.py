"""``Serve.Ask``: unsigned asks on one stream per holder and origin (nodes.ask_stream).

* the frames and replies written by hand are protobuf's own encodings, and
  frames or replies back to back are the message of all of them;
* while one message is written, what is queued goes out next as one message,
  within its byte bound;
* over a real gRPC stream: calls answered by id whatever order replies come
  in, one stream for many calls; a refused call fails alone and the stream
  serves the next; a call not answered in time fails alone and its late
  reply is dropped; calls over the in-flight cap are refused at once; an idle
  stream is ended by the origin and the transport asks on a new one; a
  stream that breaks fails its calls at once, not at their timeouts;
* on a node: many holders' concurrent asks share one stream and all are
  served; bytes that are not asks are refused by status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.identity import Identity
from nodes import ask_stream, wire
from nodes._pb.provnet.v1 import common_pb2, serve_pb2
from nodes.ask_stream import AskStream, FrameQueue, StreamEnded, serve_asks
from nodes.client import Holder
from nodes.errors import MalformedRequest
from nodes.messages import Answer
from nodes.transport import CallFailed, GrpcTransport
from tests.nodes.rpc_support import grpc_node, single, stop_all
from tests.nodes.test_unsigned_first import _ask_bytes, _head_fold

_METHOD = "/test.Ask/Ask"
_MAX = 4 << 20


def test_frames_and_replies_are_protobufs_encodings_and_concatenate() -> None:
    one = wire.encode_ask_frame(1, b"a" * 64)
    two = wire.encode_ask_frame(300, b"b" * 128)
    assert (
        one
        == serve_pb2.AskFrame(calls=[serve_pb2.AskCall(id=1, asks=b"a" * 64)]).SerializeToString()
    )
    both = serve_pb2.AskFrame.FromString(one + two)
    assert [(c.id, c.asks) for c in both.calls] == [(1, b"a" * 64), (300, b"b" * 128)]
    assert wire.ask_frame_size(b"a" * 64) == len(one)

    answers = [Answer(b"", b"", (b"hop-a", b"hop-b")), Answer(b"", b"", ())]
    encoded = wire.AnswerEncodings().response(answers)
    reply = wire.encode_ask_reply(7, encoded)
    expected = serve_pb2.AskReplies(
        replies=[
            serve_pb2.AskReply(
                id=7,
                answers=[common_pb2.Answer(hops=[b"hop-a", b"hop-b"]), common_pb2.Answer()],
            )
        ]
    ).SerializeToString()
    assert reply == expected
    assert wire.ask_reply_size(answers) == len(wire.encode_ask_reply(1, encoded))
    refusal = wire.encode_ask_refusal(8, "INVALID_ARGUMENT", "not asks")
    read = wire.ask_replies(reply + refusal)
    assert [r.id for r in read] == [7, 8]
    assert wire.ask_refusal(read[0]) is None
    got = wire.reply_answers(read[0])
    assert list(got) == answers
    assert got.wire_size == len(reply)  # each reply sized as the message carrying it alone
    assert wire.ask_refusal(read[1]) == ("INVALID_ARGUMENT", "not asks")
    big = wire.encode_ask_frame(2**40, b"z" * 70_000)  # multi-byte id and length varints
    assert (
        big
        == serve_pb2.AskFrame(
            calls=[serve_pb2.AskCall(id=2**40, asks=b"z" * 70_000)]
        ).SerializeToString()
    )


async def test_what_waits_behind_a_write_goes_out_as_one_message_within_its_bound() -> None:
    written: list[bytes] = []
    gate = asyncio.Event()

    async def write(message: bytes) -> None:
        written.append(message)
        await gate.wait()

    queue = FrameQueue(write, lambda exc: pytest.fail(f"write failed: {exc}"), max_bytes=10)
    queue.put(b"1111")
    await asyncio.sleep(0)
    assert written == [b"1111"]  # being written; what follows waits for it
    for part in (b"2222", b"3333", b"4444", b"5" * 12):
        queue.put(part)
    await asyncio.sleep(0)
    assert written == [b"1111"]
    gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    # joined up to 10 bytes; an encoding over the bound goes alone
    assert written == [b"1111", b"22223333", b"4444", b"5" * 12]


class _AskServer:
    """A gRPC server whose one stream method is ``serve_asks`` over ``answer``, or
    ``handler`` itself (an origin of the test's own making)."""

    def __init__(
        self,
        answer: Callable[[bytes], Awaitable[Sequence[Answer]]] | None = None,
        handler: Callable[[Any, Any], Awaitable[None]] | None = None,
    ) -> None:
        self.answer = answer
        self.streams = 0
        self.server = grpc.aio.server()

        async def serve(requests: Any, context: Any) -> None:
            self.streams += 1
            assert self.answer is not None
            await serve_asks(context, self.answer, wire.AnswerEncodings().response, _MAX)

        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "test.Ask",
                    {
                        "Ask": grpc.stream_stream_rpc_method_handler(
                            handler or serve,
                            request_deserializer=serve_pb2.AskFrame.FromString,
                            response_serializer=bytes,
                        )
                    },
                ),
            )
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> _AskServer:
        await self.server.start()
        self.channel = grpc.aio.insecure_channel(self.address)
        self.ended: list[AskStream] = []
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close(None)
        await self.server.stop(None)

    def stream(self) -> AskStream:
        return AskStream(
            wire.ask_stream(self.channel, _METHOD), self.address, self.ended.append, _MAX
        )


def _echo_answer(asks: bytes) -> list[Answer]:
    return [Answer(b"", b"", (asks,))]


async def test_calls_are_answered_by_id_whatever_order_the_replies_come_in() -> None:
    async def answer(asks: bytes) -> list[Answer]:
        await asyncio.sleep(0.002 * (20 - asks[0]))  # later calls answered first
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        asks = [bytes([i]) * 64 for i in range(20)]
        got = await asyncio.gather(*(stream.ask(a, 5.0) for a in asks))
        assert [list(g) for g in got] == [_echo_answer(a) for a in asks]
        assert srv.streams == 1
        await stream.close()


async def test_a_refused_call_fails_alone_and_the_stream_serves_the_next() -> None:
    async def answer(asks: bytes) -> list[Answer]:
        if asks == b"bad":
            raise MalformedRequest("demand: not asks")
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        with pytest.raises(CallFailed) as refused:
            await stream.ask(b"bad", 5.0)
        assert refused.value.code == "INVALID_ARGUMENT"
        assert "not asks" in refused.value.message
        assert list(await stream.ask(b"good", 5.0)) == _echo_answer(b"good")
        assert srv.streams == 1
        assert stream.ended is None
        await stream.close()


async def test_a_call_not_answered_in_time_fails_alone_and_its_late_reply_is_dropped() -> None:
    release = asyncio.Event()

    async def answer(asks: bytes) -> list[Answer]:
        if asks == b"slow":
            await release.wait()
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        started = time.monotonic()
        with pytest.raises(CallFailed) as late:
            await asyncio.wait_for(stream.ask(b"slow", 0.1), 5.0)
        assert late.value.code == "DEADLINE_EXCEEDED"
        assert time.monotonic() - started < 2.0
        release.set()  # its reply now comes, for a call nobody waits for
        assert list(await stream.ask(b"next", 5.0)) == _echo_answer(b"next")
        assert stream.ended is None
        await stream.close()


async def test_calls_over_the_in_flight_cap_wait_until_one_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ask_stream, "MAX_ASKS_IN_FLIGHT", 2)
    release = asyncio.Event()
    entered = 0

    async def answer(asks: bytes) -> list[Answer]:
        nonlocal entered
        entered += 1
        await release.wait()
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        held = [asyncio.ensure_future(stream.ask(bytes([i]), 5.0)) for i in range(5)]
        await asyncio.sleep(0.2)
        assert entered == 2  # the origin read no further than its cap
        release.set()
        assert [list(r) for r in await asyncio.gather(*held)] == [
            _echo_answer(bytes([i])) for i in range(5)
        ]
        await stream.close()


async def test_a_message_of_too_many_calls_ends_the_stream() -> None:
    async def answer(asks: bytes) -> list[Answer]:
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        call: Any = srv.channel.stream_stream(
            _METHOD, request_serializer=bytes, response_deserializer=bytes
        )()  # type: ignore[call-arg]  # no request iterator: written with call.write
        n = ask_stream.MAX_CALLS_PER_FRAME + 1
        await call.write(b"".join(wire.encode_ask_frame(i, b"") for i in range(1, n + 1)))
        with pytest.raises(grpc.aio.AioRpcError) as over:
            await call.read()
        assert over.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "exceeds" in (over.value.details() or "")


async def test_calls_read_before_the_holder_closes_its_side_are_still_answered() -> None:
    async def answer(asks: bytes) -> list[Answer]:
        await asyncio.sleep(0.1)
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        call: Any = srv.channel.stream_stream(
            _METHOD, request_serializer=bytes, response_deserializer=wire.ask_replies
        )()  # type: ignore[call-arg]  # no request iterator: written with call.write
        await call.write(wire.encode_ask_frame(1, b"a") + wire.encode_ask_frame(2, b"b"))
        await call.done_writing()
        got = {}
        async for replies in call:
            for r in replies:
                got[r.id] = list(wire.reply_answers(r))
        assert got == {1: _echo_answer(b"a"), 2: _echo_answer(b"b")}
        assert await call.code() is grpc.StatusCode.OK


async def test_an_origin_replying_to_a_call_never_made_is_not_trusted_further() -> None:
    async def handler(requests: Any, context: Any) -> None:
        async for frame in requests:
            for c in frame.calls:
                await context.write(wire.encode_ask_reply(c.id + 1000, b""))

    async with _AskServer(handler=handler) as srv:
        stream = srv.stream()
        with pytest.raises(CallFailed) as lied:
            await asyncio.wait_for(stream.ask(b"x", 5.0), 5.0)
        assert lied.value.code == "INTERNAL"
        assert "never made" in lied.value.message
        assert srv.ended == [stream]


async def test_an_idle_stream_is_ended_ok_and_a_call_on_it_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ask_stream, "ASK_IDLE_S", 0.1)

    async def answer(asks: bytes) -> list[Answer]:
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        assert list(await stream.ask(b"one", 5.0)) == _echo_answer(b"one")
        for _ in range(100):
            if stream.ended is not None:
                break
            await asyncio.sleep(0.02)
        assert isinstance(stream.ended, StreamEnded)
        assert srv.ended == [stream]  # told its owner once
        with pytest.raises(StreamEnded):
            await stream.ask(b"two", 5.0)


async def test_a_stream_that_breaks_fails_its_calls_at_once_not_at_their_timeouts() -> None:
    entered = asyncio.Event()

    async def answer(asks: bytes) -> list[Answer]:
        entered.set()
        await asyncio.sleep(60)
        return _echo_answer(asks)

    async with _AskServer(answer) as srv:
        stream = srv.stream()
        pending = asyncio.ensure_future(stream.ask(b"x", 30.0))
        await entered.wait()
        started = time.monotonic()
        await srv.server.stop(None)  # the origin goes away with the call in flight
        with pytest.raises((CallFailed, StreamEnded)):
            await pending
        assert time.monotonic() - started < 5.0
        assert stream.ended is not None
        assert srv.ended == [stream]


async def test_the_transport_asks_again_on_a_new_stream_after_an_idle_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ask_stream, "ASK_IDLE_S", 0.1)
    origin = await grpc_node(tmp_path, "origin")
    transport = GrpcTransport()
    try:
        held = await _head_fold(origin.core)
        asks = _ask_bytes(held)
        first = await transport.ask(origin.address, asks, 5.0)
        await asyncio.sleep(0.4)  # the origin ends the idle stream
        again = await transport.ask(origin.address, asks, 5.0)
        assert [a.hops for a in again] == [a.hops for a in first]
        assert first[0].hops
        assert (await origin.core.stats())["rpc_Ask"] == 2
    finally:
        await transport.close()
        await stop_all([origin])


async def test_many_holders_concurrent_asks_share_one_stream_and_are_all_served(
    tmp_path: Path,
) -> None:
    origin = await grpc_node(tmp_path, "origin")
    transport = GrpcTransport()
    try:
        folds = [await _head_fold(origin.core, f"v{i}", first=10 * i + 1) for i in range(4)]
        holders = [Holder(Identity.generate(), transport, cache=False, reasks=0) for _ in range(8)]
        reports = await asyncio.gather(
            *(h.rehydrate(f"v{i % 4}", [folds[i % 4]]) for i, h in enumerate(holders * 4))
        )
        for i, report in enumerate(reports):
            outcome = single(report)
            assert outcome.outcome.name == "SERVED", outcome.detail
            assert outcome.asks == 1, i
            assert len(report.hops) == 5, i
        stats = await origin.core.stats()
        assert (stats["rpc_Ask"], stats["open_asks"]) == (1, 32)  # one stream, every call on it
    finally:
        await transport.close()
        await stop_all([origin])


async def test_bytes_that_are_not_asks_are_refused_by_status(tmp_path: Path) -> None:
    origin = await grpc_node(tmp_path, "origin")
    transport = GrpcTransport()
    try:
        with pytest.raises(CallFailed) as bad:
            await transport.ask(origin.address, b"\x00" * 63, 5.0)  # not a whole ask
        assert bad.value.code == "INVALID_ARGUMENT"
        # the stream still serves: a well-formed ask for nothing known is answered empty
        empty = await transport.ask(origin.address, b"\x00" * 64, 5.0)
        assert [a.hops for a in empty] == [()]
        # a message that is not an AskFrame ends that stream with INVALID_ARGUMENT
        channel = grpc.aio.insecure_channel(origin.address)
        call: Any = channel.stream_stream(
            wire.ASK_METHOD, request_serializer=bytes, response_deserializer=bytes
        )()  # type: ignore[call-arg]  # no request iterator: written with call.write
        await call.write(b"\xff\xff\xff")
        with pytest.raises(grpc.aio.AioRpcError) as junk:
            await call.read()
        assert junk.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        await channel.close(None)
    finally:
        await transport.close()
        await stop_all([origin])


async def test_a_holder_that_does_not_read_stops_the_origin_reading_its_calls() -> None:
    answered = 0
    hop = b"h" * 1024

    async def answer(asks: bytes) -> list[Answer]:
        nonlocal answered
        answered += 1
        return [Answer(b"", b"", (hop,))]

    calls = 20_000
    async with _AskServer(answer) as srv:
        call: Any = srv.channel.stream_stream(
            _METHOD, request_serializer=bytes, response_deserializer=bytes
        )()  # type: ignore[call-arg]  # no request iterator: written with call.write

        async def send() -> None:
            for first in range(1, calls + 1, 100):
                await call.write(
                    b"".join(wire.encode_ask_frame(i, b"x") for i in range(first, first + 100))
                )

        sending = asyncio.ensure_future(send())
        await asyncio.sleep(1.0)
        # ~20 MiB of replies owed and none read: the origin stopped reading far short
        assert answered < calls // 2, answered
        got = 0
        while got < calls:
            got += len(wire.ask_replies(await call.read()))
        await sending
        assert answered == calls
        call.cancel()


async def test_a_node_stopping_ends_its_ask_streams_without_waiting_its_grace(
    tmp_path: Path,
) -> None:
    origin = await grpc_node(tmp_path, "origin")
    transport = GrpcTransport()
    try:
        held = await _head_fold(origin.core)
        assert (await transport.ask(origin.address, _ask_bytes(held), 5.0))[0].hops
        started = time.monotonic()
        await origin.stop(10.0)
        assert time.monotonic() - started < 3.0  # the open stream did not hold the grace
        with pytest.raises(CallFailed):
            await transport.ask(origin.address, _ask_bytes(held), 0.5)
    finally:
        await transport.close()
