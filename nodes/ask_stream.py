"""``Serve.Ask``: unsigned first asks on one long-lived stream per holder and origin.

An unsigned ask (:mod:`contracts.ask`; design revision 3) decides nothing by
itself: the holder keeps the hops answered only if they reproduce a root
proven under a head it verified, and any other outcome sends it to the signed
path (``Serve.Demand``). So the ask needs none of what a unary call carries —
no metadata, no per-call deadline on the wire, no status trailers — and rides
a stream the holder's transport keeps open to the origin (:class:`AskStream`):
each call is a message with an id of the holder's, answered by a reply of
the same id in whatever order replies are ready (:func:`serve_asks`).

Both ends write through a :class:`FrameQueue`: while one message is being
written, the next calls (or replies) wait and go out together as one
message, the encodings back to back (a repeated field's items appended, so
the concatenation is the message of all of them).

How the stream ends, and what a holder's call then sees:

* the origin ends it OK after :data:`ASK_IDLE_S` without a call (a stream
  holds one of the origin's stream slots), or when it shuts down: calls in
  flight then fail with :class:`StreamEnded`, and the transport asks once
  more on a new stream (an unsigned ask moves no state on the origin);
* any error status (refused for want of a slot, a reset connection): the
  calls in flight fail with that status as :class:`nodes.noanswer.CallFailed`,
  which the holder treats as any failed unsigned ask — it demands signed;
* a call not answered within its timeout fails alone (``DEADLINE_EXCEEDED``);
  the stream stays up, and a late reply for it is dropped.

The origin answers at most :data:`MAX_ASKS_IN_FLIGHT` calls of one stream at
once; a call beyond that is refused with ``RESOURCE_EXHAUSTED`` at once, as a
unary call over a cap would be.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any

import grpc

from contracts.errors import EncodingError
from nodes import wire
from nodes.errors import status_for
from nodes.logging import get_logger
from nodes.messages import Answer
from nodes.noanswer import CallFailed

__all__ = [
    "ASK_IDLE_S",
    "MAX_ASKS_IN_FLIGHT",
    "STREAM_ENDS",
    "AskStream",
    "FrameQueue",
    "StreamEnded",
    "serve_asks",
]

log = get_logger("nodes.ask_stream")

#: Seconds without a call after which the origin ends a stream (OK).
ASK_IDLE_S = 30.0
#: Calls of one stream the origin answers at once; beyond them, refused at once.
MAX_ASKS_IN_FLIGHT = 256


#: Set by the server around a stream handler (:class:`nodes.interceptors.RequestContext`):
#: where a stream loop keeps how to end it OK, so a stopping server ends it at once.
STREAM_ENDS: ContextVar[set[Callable[[], None]] | None] = ContextVar(
    "provnet_stream_ends", default=None
)


class StreamEnded(Exception):
    """The stream ended OK (idle, or the origin shutting down) before the call was answered."""


class FrameQueue:
    """Messages written in order on one stream, one write at a time: what is queued
    while a write is in flight goes out next as one message (at most ``max_bytes``
    of encodings joined; one larger encoding alone).

    ``write``: the stream's write coroutine; ``on_error``: called with the
    exception if a write fails (the queue then drops what it holds)."""

    __slots__ = ("_drained", "_max", "_on_error", "_queue", "_write", "_writer")

    def __init__(
        self,
        write: Callable[[bytes], Awaitable[None]],
        on_error: Callable[[BaseException], None],
        max_bytes: int,
    ) -> None:
        self._write = write
        self._on_error = on_error
        self._max = max_bytes
        self._queue: list[bytes] = []
        self._writer: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    @property
    def backlog(self) -> int:
        """Encodings queued behind the write in flight."""
        return len(self._queue)

    async def drained(self) -> None:
        """Wait until nothing is queued (or the queue failed or closed)."""
        if self._writer is None:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def put(self, encoding: bytes) -> None:
        self._queue.append(encoding)
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue:
                queue = self._queue
                if len(queue) == 1:
                    message = queue[0]
                    self._queue = []
                else:
                    size, n = len(queue[0]), 1
                    while n < len(queue) and size + len(queue[n]) <= self._max:
                        size += len(queue[n])
                        n += 1
                    message = b"".join(queue[:n])
                    self._queue = queue[n:]
                await self._write(message)
        except asyncio.CancelledError:
            self._queue = []
            raise
        except Exception as exc:  # the stream broke: whoever reads it learns how
            self._queue = []
            self._on_error(exc)
        finally:
            self._writer = None
            if self._drained is not None:
                if not self._drained.done():
                    self._drained.set_result(None)
                self._drained = None

    def close(self) -> None:
        self._queue = []
        if self._writer is not None:
            self._writer.cancel()


class AskStream:
    """The holder's end of one ``Serve.Ask`` stream to ``address``.

    Opened on first use by the transport, kept while it lasts; ``on_end`` is
    called once when it ended (the transport then opens another on the next
    ask). ``max_bytes``: the channel's message bound.
    """

    def __init__(
        self,
        call: wire.AskStreamCall,
        address: str,
        on_end: Callable[[AskStream], None],
        max_bytes: int,
    ) -> None:
        self.address = address
        self._on_end = on_end
        self._call: Any = call(wait_for_ready=True)  # type: ignore[call-arg]
        self._pending: dict[int, asyncio.Future[wire.SizedAnswers]] = {}
        self._next_id = 0
        self._out = FrameQueue(self._call.write, self._write_failed, max_bytes // 2)
        #: Why calls now fail at once (set when the stream ended).
        self.ended: BaseException | None = None
        self._reader = asyncio.ensure_future(self._read())

    async def ask(self, asks: bytes, timeout: float) -> wire.SizedAnswers:
        """The answers to ``asks``; raises :class:`CallFailed` or :class:`StreamEnded`."""
        if self.ended is not None:
            raise self.ended
        self._next_id += 1
        call_id = self._next_id
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[wire.SizedAnswers] = loop.create_future()
        self._pending[call_id] = answered
        self._out.put(wire.encode_ask_frame(call_id, asks))
        late = loop.call_later(timeout, _expire, answered, self.address, timeout)
        try:
            return await answered
        finally:
            late.cancel()
            self._pending.pop(call_id, None)

    async def _read(self) -> None:
        ended: BaseException
        try:
            async for replies in self._call:
                pending = self._pending
                for call_id, result in replies:
                    answered = pending.get(call_id)
                    if answered is None or answered.done():
                        continue  # timed out already: dropped
                    if type(result) is tuple:
                        code, details = result
                        answered.set_exception(CallFailed(code, details, self.address))
                    else:
                        answered.set_result(result)
            ended = StreamEnded(f"ask stream to {self.address} ended")
        except grpc.aio.AioRpcError as exc:
            ended = CallFailed(exc.code().name, exc.details() or "", self.address)
        except asyncio.CancelledError:
            ended = CallFailed("CANCELLED", "ask stream closed", self.address)
        except Exception as exc:  # an unreadable message: the stream is not trusted further
            ended = CallFailed("INTERNAL", f"ask stream: {exc}", self.address)
            self._call.cancel()
        self._end(ended)

    def _write_failed(self, exc: BaseException) -> None:
        if isinstance(exc, grpc.aio.AioRpcError):
            self._end(CallFailed(exc.code().name, exc.details() or "", self.address))
        else:  # the call already finished: the reader says how
            self._end(CallFailed("UNAVAILABLE", f"ask stream: {exc}", self.address))

    def _end(self, why: BaseException) -> None:
        if self.ended is not None:
            return
        self.ended = why
        self._out.close()
        for answered in self._pending.values():
            if not answered.done():
                answered.set_exception(why)
        self._pending.clear()
        self._on_end(self)

    def cancel(self) -> None:
        """End the stream from this side (its calls in flight fail ``CANCELLED``)."""
        self._call.cancel()

    async def close(self) -> None:
        self._call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def _expire(answered: asyncio.Future[Any], address: str, timeout: float) -> None:
    if not answered.done():
        answered.set_exception(
            CallFailed("DEADLINE_EXCEEDED", f"no answer to an ask within {timeout:.3f} s", address)
        )


async def serve_asks(
    context: grpc.aio.ServicerContext[Any, Any],
    answer: Callable[[bytes], Awaitable[Sequence[Answer]]],
    encode: Callable[[Sequence[Answer]], bytes],
    max_bytes: int,
    *,
    idle_s: float | None = None,
    max_in_flight: int | None = None,
) -> None:
    """The origin's end of one ``Serve.Ask`` stream: each call answered by
    ``answer`` (the origin's unsigned answers) in a task of its own, its reply
    written when ready (``encode``: the answers' encoding); ends OK after
    ``idle_s`` without a call (:data:`ASK_IDLE_S`) or when the holder closes its
    side. ``max_in_flight``: calls answered at once (:data:`MAX_ASKS_IN_FLIGHT`).

    A call ``answer`` refuses (an error the node maps to a status) gets a reply
    with that status; an unexpected error is logged and refused ``INTERNAL``.
    A message that is not an ``AskFrame`` ends the stream ``INVALID_ARGUMENT``.
    """
    idle_s = ASK_IDLE_S if idle_s is None else idle_s
    max_in_flight = MAX_ASKS_IN_FLIGHT if max_in_flight is None else max_in_flight
    failed: list[BaseException] = []
    out = FrameQueue(context.write, failed.append, max_bytes // 2)
    tasks: set[asyncio.Task[None]] = set()

    async def reply(call_id: int, asks: bytes) -> None:
        try:
            encoded = wire.encode_ask_reply(call_id, encode(await answer(asks)))
        except Exception as exc:
            code = status_for(exc)
            if code is None:
                log.exception("ask_failed_unexpectedly")
                encoded = wire.encode_ask_refusal(call_id, "INTERNAL", "internal error in Ask")
            else:
                encoded = wire.encode_ask_refusal(
                    call_id, code.name, f"{type(exc).__name__}: {exc}"
                )
        out.put(encoded)

    loop = asyncio.get_running_loop()
    ends = STREAM_ENDS.get()
    end: Callable[[], None] | None = None
    try:
        async with asyncio.timeout(idle_s) as idle:

            def end() -> None:
                idle.reschedule(loop.time())  # as if idle: ended OK at once

            if ends is not None:
                ends.add(end)
            while not failed:
                data = await context.read()
                if data is grpc.aio.EOF:  # type: ignore[attr-defined]
                    break
                idle.reschedule(loop.time() + idle_s)
                try:
                    calls = wire.ask_calls(data)
                except EncodingError as exc:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                for call_id, asks in calls:
                    if len(tasks) >= max_in_flight:
                        out.put(
                            wire.encode_ask_refusal(
                                call_id,
                                "RESOURCE_EXHAUSTED",
                                f"{max_in_flight} asks in flight on this stream",
                            )
                        )
                        continue
                    task = asyncio.ensure_future(reply(call_id, asks))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if out.backlog > max_in_flight:
                    # A holder that sends faster than it reads: no more is read
                    # until what is owed to it has been written.
                    await out.drained()
    except TimeoutError:
        pass  # idle or the server stopping: ended OK, the holder asks on a new stream
    finally:
        if ends is not None and end is not None:
            ends.discard(end)
        for task in tasks:
            task.cancel()
        out.close()
