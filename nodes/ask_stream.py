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
the concatenation is the message of all of them), at most
:data:`MAX_CALLS_PER_FRAME` calls to a message.

How the stream ends, and what a holder's call then sees:

* the origin ends it OK after :data:`ASK_IDLE_S` without a call (a stream
  holds one of the origin's stream slots), when the holder closes its side,
  or when the origin shuts down; calls it had read are answered first (within
  :data:`ASK_FINISH_S`). A call still in flight then fails with
  :class:`StreamEnded`, and the transport asks once more on a new stream (an
  unsigned ask moves no state on the origin);
* any error status (refused for want of a slot, a reset connection): the
  calls in flight fail with that status as :class:`nodes.noanswer.CallFailed`,
  which the holder treats as any failed unsigned ask — it demands signed;
* a call not answered within its timeout fails alone (``DEADLINE_EXCEEDED``);
  the stream stays up, a late reply for it is dropped, and if it had not
  been written yet it is not written at all.

What a peer that breaks the rules meets:

* the origin answers at most :data:`MAX_ASKS_IN_FLIGHT` calls of one stream
  at once, and reads no further until one is done; no more than
  ``max_bytes`` of replies wait to be written (a holder that does not read
  stops the origin reading it); a message of more than
  :data:`MAX_CALLS_PER_FRAME` calls, or one that is not an ``AskFrame``,
  ends the stream (``INVALID_ARGUMENT``); a message without a call does not
  keep the stream from idling out;
* the holder ends a stream (``INTERNAL``) on which the origin replies to a
  call it never made, or sends what is not an ``AskReplies``.
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
    "ASK_FINISH_S",
    "ASK_IDLE_S",
    "MAX_ASKS_IN_FLIGHT",
    "MAX_CALLS_PER_FRAME",
    "STREAM_ENDS",
    "AskStream",
    "FrameQueue",
    "StreamEnded",
    "StreamEnds",
    "serve_asks",
]

log = get_logger("nodes.ask_stream")

#: Seconds without a call after which the origin ends a stream (OK).
ASK_IDLE_S = 30.0
#: Seconds the origin gives the calls it read to be answered when a stream ends.
ASK_FINISH_S = 5.0
#: Calls of one stream the origin answers at once; it reads no further meanwhile.
MAX_ASKS_IN_FLIGHT = 256
#: Calls one message may carry (a holder joins at most this many).
MAX_CALLS_PER_FRAME = 1024


class StreamEnds:
    """The server's open stream loops, each by how to end it OK; once ``closed`` (the
    server stopping) a loop that starts ends at once."""

    __slots__ = ("closed", "ends")

    def __init__(self) -> None:
        self.closed = False
        self.ends: set[Callable[[], None]] = set()

    def end_all(self) -> None:
        self.closed = True
        for end in list(self.ends):
            end()


#: Set by the server around a stream handler (:class:`nodes.interceptors.RequestContext`):
#: where a stream loop registers how to end it, so a stopping server ends it at once.
STREAM_ENDS: ContextVar[StreamEnds | None] = ContextVar("provnet_stream_ends", default=None)


class StreamEnded(Exception):
    """The stream ended OK (idle, or the origin shutting down) before the call was answered."""


class FrameQueue:
    """Messages written in order on one stream, one write at a time: what is queued
    while a write is in flight goes out next as one message (at most ``max_bytes``
    of encodings and ``max_items`` of them joined; one larger encoding alone).

    ``write``: the stream's write coroutine; ``on_error``: called with the
    exception if a write fails (the queue then drops what it holds). ``keep``:
    whether an item put with a key is still to be written (checked when its
    message is made); items of keys no longer kept are dropped.
    """

    __slots__ = (
        "_closed",
        "_drained",
        "_keep",
        "_max",
        "_max_items",
        "_on_error",
        "_queue",
        "_write",
        "_writer",
        "queued_bytes",
    )

    def __init__(
        self,
        write: Callable[[bytes], Awaitable[None]],
        on_error: Callable[[BaseException], None],
        max_bytes: int,
        *,
        max_items: int = MAX_CALLS_PER_FRAME,
        keep: Callable[[int], bool] | None = None,
    ) -> None:
        self._write = write
        self._on_error = on_error
        self._max = max_bytes
        self._max_items = max_items
        self._keep = keep
        self._queue: list[tuple[int, bytes]] = []
        #: Bytes of the encodings waiting to be written.
        self.queued_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._closed = False

    async def drained(self) -> None:
        """Wait until nothing is queued (or the queue failed or closed)."""
        if self._writer is None:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def put(self, encoding: bytes, key: int = 0) -> None:
        if self._closed:
            return
        self._queue.append((key, encoding))
        self.queued_bytes += len(encoding)
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._drain())
        elif self._keep is not None and len(self._queue) > 2 * self._max_items:
            self._prune()  # a write that does not end (a peer not yet reachable)

    def _prune(self) -> None:
        keep = self._keep
        if keep is None:
            return
        self._queue = [item for item in self._queue if not item[0] or keep(item[0])]
        self.queued_bytes = sum(len(item[1]) for item in self._queue)

    def _next_message(self) -> bytes | None:
        self._prune()
        queue = self._queue
        if not queue:
            return None
        size, n = len(queue[0][1]), 1
        limit = min(len(queue), self._max_items)
        while n < limit and size + len(queue[n][1]) <= self._max:
            size += len(queue[n][1])
            n += 1
        self._queue = queue[n:]
        self.queued_bytes -= size
        return queue[0][1] if n == 1 else b"".join([item[1] for item in queue[:n]])

    async def _drain(self) -> None:
        me = asyncio.current_task()
        try:
            while (message := self._next_message()) is not None:
                await self._write(message)
        except asyncio.CancelledError:
            self._clear()
            raise
        except Exception as exc:  # the stream broke: whoever reads it learns how
            self._clear()
            self._on_error(exc)
        finally:
            if self._writer is me:
                self._writer = None
            if self._drained is not None and self._writer is None:
                if not self._drained.done():
                    self._drained.set_result(None)
                self._drained = None

    def _clear(self) -> None:
        self._queue = []
        self.queued_bytes = 0

    def close(self) -> None:
        self._closed = True
        self._clear()
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
        self._out = FrameQueue(
            self._call.write, self._write_failed, max_bytes // 2, keep=self._pending.__contains__
        )
        #: Why calls now fail at once (set when the stream ended).
        self.ended: BaseException | None = None
        self._reader = asyncio.ensure_future(self._read())

    async def ask(self, asks: bytes, timeout: float) -> wire.SizedAnswers:
        """The answers to ``asks``; raises :class:`CallFailed` or :class:`StreamEnded`."""
        if self.ended is not None:
            raise _fresh(self.ended)
        self._next_id += 1
        call_id = self._next_id
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[wire.SizedAnswers] = loop.create_future()
        self._pending[call_id] = answered
        self._out.put(wire.encode_ask_frame(call_id, asks), call_id)
        late = loop.call_later(timeout, _expire, answered, self.address, timeout)
        try:
            return await answered
        finally:
            late.cancel()
            self._pending.pop(call_id, None)

    async def _read(self) -> None:
        ended: BaseException
        address = self.address
        try:
            async for replies in self._call:
                pending = self._pending
                for reply in replies:
                    answered = pending.get(reply.id)
                    if answered is None:
                        if not 0 < reply.id <= self._next_id:
                            raise EncodingError(f"a reply to call {reply.id}, never made")
                        continue  # timed out already: dropped
                    if answered.done():
                        continue
                    refused = wire.ask_refusal(reply)
                    if refused is not None:
                        answered.set_exception(CallFailed(*refused, address))
                    else:
                        answered.set_result(wire.reply_answers(reply))
            ended = StreamEnded(f"ask stream to {address} ended")
        except grpc.aio.AioRpcError as exc:
            ended = CallFailed(exc.code().name, exc.details() or "", address)
        except asyncio.CancelledError:
            ended = CallFailed("CANCELLED", "ask stream closed", address)
        except Exception as exc:  # what the origin sent breaks the rules: not trusted further
            ended = CallFailed("INTERNAL", f"ask stream: {exc}", address)
            self._call.cancel()
        self._end(ended)

    def _write_failed(self, exc: BaseException) -> None:
        if isinstance(exc, grpc.aio.AioRpcError):
            self._end(CallFailed(exc.code().name, exc.details() or "", self.address))
        # else the call had already finished (an OK end racing the write): the reader
        # says how it ended, and the calls not written fail with that

    def _end(self, why: BaseException) -> None:
        if self.ended is not None:
            return
        self.ended = why
        self._out.close()
        for answered in self._pending.values():
            if not answered.done():
                answered.set_exception(_fresh(why))
        self._pending.clear()
        self._on_end(self)

    def cancel(self) -> None:
        """End the stream from this side (its calls in flight fail ``CANCELLED``)."""
        self._call.cancel()

    async def close(self) -> None:
        self._call.cancel()
        await self._reader


def _fresh(why: BaseException) -> BaseException:
    """An exception of its own for each caller (none shares another's traceback)."""
    if isinstance(why, CallFailed):
        return CallFailed(why.code, why.message, why.address)
    return StreamEnded(*why.args)


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
    written when ready (``encode``: the answers' encoding). Ends OK after
    ``idle_s`` without a call (:data:`ASK_IDLE_S`), when the holder closes its
    side or when the server stops (:data:`STREAM_ENDS`), once the calls read
    are answered (within :data:`ASK_FINISH_S`). ``max_in_flight``: calls
    answered at once (:data:`MAX_ASKS_IN_FLIGHT`).

    A call ``answer`` refuses (an error the node maps to a status) gets a reply
    with that status; an unexpected error is logged and refused ``INTERNAL``.
    A message that is not an ``AskFrame``, or of more than
    :data:`MAX_CALLS_PER_FRAME` calls, ends the stream ``INVALID_ARGUMENT``.
    """
    idle_s = ASK_IDLE_S if idle_s is None else idle_s
    cap = MAX_ASKS_IN_FLIGHT if max_in_flight is None else max_in_flight
    registry = STREAM_ENDS.get()
    if registry is not None and registry.closed:
        return  # the server is stopping: ended OK before anything is read
    failed: list[BaseException] = []
    out = FrameQueue(context.write, failed.append, max_bytes // 2)
    tasks: set[asyncio.Task[None]] = set()
    room = asyncio.Event()  # set when a task ends: a slot free for the next call

    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        room.set()

    async def reply(call_id: int, asks: bytes) -> None:
        try:
            answers = await answer(asks)
            while out.queued_bytes > max_bytes and not failed:
                await out.drained()  # a holder that does not read holds its replies here
            encoded = wire.encode_ask_reply(call_id, encode(answers))
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
    stopping = False
    end: Callable[[], None] | None = None
    try:
        try:
            async with asyncio.timeout(idle_s) as idle:

                def end() -> None:
                    nonlocal stopping
                    stopping = True
                    if not idle.expired():
                        with contextlib.suppress(RuntimeError):  # already ending
                            idle.reschedule(loop.time())  # as if idle: ended OK at once

                if registry is not None:
                    registry.ends.add(end)
                while not failed and not stopping:
                    data = await context.read()
                    if data is grpc.aio.EOF or stopping:  # type: ignore[attr-defined]
                        break
                    try:
                        calls = wire.ask_calls(data, MAX_CALLS_PER_FRAME)
                    except EncodingError as exc:
                        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                    if calls:
                        idle.reschedule(loop.time() + idle_s)
                    for call_id, asks in calls:
                        while len(tasks) >= cap:
                            room.clear()
                            await room.wait()  # no further call read until one is done
                        task = asyncio.ensure_future(reply(call_id, asks))
                        tasks.add(task)
                        task.add_done_callback(done)
        except TimeoutError:
            pass  # idle or the server stopping: ended OK, the holder asks on a new stream
        finally:
            if registry is not None and end is not None:
                registry.ends.discard(end)
        # Ending OK: the calls read are answered first.
        try:
            async with asyncio.timeout(ASK_FINISH_S):
                if tasks:
                    await asyncio.wait(tasks)
                await out.drained()
        except TimeoutError:
            pass
    finally:
        for task in tasks:
            task.cancel()
        out.close()
