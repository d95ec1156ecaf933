"""The node's method handlers, wrapped: request ids, call logging, auth, limits, statuses.

Not a grpc.aio server interceptor: every method handler of a node is wrapped
once, when the server is built (:meth:`RequestContext.handler`), and the
server looks a call's wrapped handler up in one table. A grpc.aio
interceptor costs every call an extra coroutine chain before the handler is
even found, and handlers registered per method (``add_registered_method_handlers``,
as the generated ``add_*Servicer_to_server`` do) make grpc.aio's serving loop
wait on one pending future per method for every call it takes up (about 20
here): both were measurable shares of a demand's CPU.

Every call gets a request id (the caller's ``x-request-id`` metadata if it
sent a sane one, else a fresh one), bound into structlog's contextvars for
the duration of the call. It is echoed back as trailing metadata (sent with
the status, so it costs no extra message) when the caller sent it, and on
every failed call, so a caller can find a failure in the node's log. A
successful call without one carries no trailer: an id the caller never
asked for, minted afresh per call, is a header gRPC encodes on one side and
parses into a Python tuple on the other for every call of the serve path,
and nothing reads it. Contract and
store errors escaping a handler are mapped to precise status codes by
:func:`nodes.errors.status_for` — the only place that translation happens;
anything else is a bug and becomes INTERNAL with the id to find it in the log.

What each method needs is its row of the method table (:mod:`nodes.methods`):
a signed method's control signature is checked here (:mod:`nodes.auth`)
before its handler runs; which calls may hold a slot or bytes, and when a
shed caller should come back, is the overload controller's decision
(:mod:`nodes.overload`), which this edge turns into ``RESOURCE_EXHAUSTED``
and the ``grpc-retry-pushback-ms`` trailer.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from structlog.contextvars import bind_contextvars, bound_contextvars, reset_contextvars

from contracts.entropy import random_bytes
from nodes.ask_stream import STREAM_ENDS, StreamEnds
from nodes.auth import ControlAuth, request_digest
from nodes.errors import MalformedRequest, StoreFull, status_for
from nodes.logging import get_logger
from nodes.methods import BULK, SIGNED
from nodes.overload import BulkBudget, LoopLag, Overload, Pushback, Slots, peer_host

__all__ = [
    "PUSHBACK_KEY",
    "REQUEST_ID_KEY",
    "MethodCollector",
    "RequestContext",
]

#: Trailing metadata on a shed bulk call: when to try again, in milliseconds
#: (gRPC's retry pushback, honoured by gRPC's own retry policy).
PUSHBACK_KEY = "grpc-retry-pushback-ms"

#: Bodies at least this large are hashed in a worker thread, off the event loop.
_OFFLOAD_HASH_BYTES = 256 * 1024

REQUEST_ID_KEY = "x-request-id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

log = get_logger(__name__)


def _structlog_var(key: str) -> contextvars.ContextVar[Any]:
    """The context variable structlog's ``bind_contextvars(key=…)`` sets (and its
    ``merge_contextvars`` reads): set directly per call, without the name lookups."""
    token = bind_contextvars(**{key: ...})[key]
    var: contextvars.ContextVar[Any] = token.var
    var.reset(token)
    return var


_REQUEST_ID_VAR = _structlog_var("request_id")
_RPC_VAR = _structlog_var("rpc")


def _sent_id(metadata: Any) -> str | None:
    """The request id the caller sent (``x-request-id``), if it sent a sane one."""
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _SANE_ID.match(value):
            return value
    return None


def _fresh_id() -> str:
    # 16 hex characters, as uuid4().hex[:16] gave; from a block of OS randomness
    # read once per 512 ids, not one system call per call (contracts.entropy)
    return random_bytes(8).hex()


def _call_id(context: grpc.aio.ServicerContext[Any, Any], metadata: Any) -> str:
    """The call's request id: the caller's, echoed back as trailing metadata, or a
    fresh one, not echoed (a failed call carries its id either way: :func:`_abort_for`)."""
    sent = _sent_id(metadata)
    if sent is None:
        return _fresh_id()
    context.set_trailing_metadata(((REQUEST_ID_KEY, sent),))
    return sent


async def _abort_for(
    exc: Exception, context: grpc.aio.ServicerContext[Any, Any], rpc: str, request_id: str
) -> None:
    """End the call with the status ``exc`` maps to, its request id in the trailers."""
    code = status_for(exc)
    trailers = ((REQUEST_ID_KEY, request_id),)
    if code is None:
        log.exception("rpc_failed_unexpectedly", rpc=rpc)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {rpc}", trailers)
    if not isinstance(exc, StoreFull):  # a full disk is logged once per interval (nodes._disk)
        log.info("rpc_rejected", rpc=rpc, code=code.name, reason=str(exc))
    await context.abort(code, f"{type(exc).__name__}: {exc}", trailers)


def _encoded_or(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends a response given as its encoding (bytes) as it
    is: an open method's handler may answer with bytes it encoded once
    (:class:`nodes.wire.AnswerEncodings`)."""

    def respond(response: Any) -> bytes:
        return response if response.__class__ is bytes else serialize(response)

    return respond


class _Unreadable:
    """A request body that is not the method's protobuf message (grpc would answer UNKNOWN
    for a deserializer that raises): the handler refuses it as ``INVALID_ARGUMENT``,
    after the control signature over the raw bytes was checked."""

    __slots__ = ("error",)

    def __init__(self, error: MalformedRequest) -> None:
        self.error = error


def _tolerant(rpc: str, deserialize: Any) -> Any:
    """``deserialize`` returning :class:`_Unreadable` instead of raising on bad bytes."""
    if deserialize is None:
        return None

    def read(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except Exception as exc:  # protobuf's DecodeError, or any parser's refusal
            return _Unreadable(
                MalformedRequest(f"{rpc}: the request is not a valid message ({exc})")
            )

    return read


def _readable(request: Any) -> Any:
    """``request`` if it was read; raises its MalformedRequest if it could not be."""
    if type(request) is _Unreadable:
        raise request.error
    return request


if TYPE_CHECKING:  # the stubs make it generic; the runtime class is not subscriptable
    _GenericRpcHandler = grpc.GenericRpcHandler[Any, Any]
else:
    _GenericRpcHandler = grpc.GenericRpcHandler


def _refuse(context: grpc.aio.ServicerContext[Any, Any], rpc: str, why: str) -> None:
    """End a call with RESOURCE_EXHAUSTED before its handler ran (by status: see ``_shed``)."""
    context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
    context.set_details(f"{rpc}: {why}; refused before running it")


def _capped(rpc: str, handler: Any, slots: Slots) -> Any:
    """``handler`` (already wrapped) behind ``slots``: a slot is taken when the call
    reaches the node and given back when it ends, however it ends; a call that
    finds none is refused (RESOURCE_EXHAUSTED naming the cap) before it runs."""
    for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        inner: Any = getattr(handler, kind)
        if inner is not None:
            break
    else:  # pragma: no cover - grpc's handlers always have one behaviour
        return handler
    make = {
        "unary_unary": grpc.unary_unary_rpc_method_handler,
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }[kind]
    if inspect.isasyncgenfunction(inner):

        async def capped_stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            peer = peer_host(context.peer())
            why = slots.take(peer)
            if why is not None:
                _refuse(context, rpc, why)
                return
            try:
                async for item in inner(request, context):
                    yield item
            finally:
                slots.give(peer)

        behaviour: Any = capped_stream
    else:

        async def capped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            peer = peer_host(context.peer())
            why = slots.take(peer)
            if why is not None:
                return _refuse(context, rpc, why)
            try:
                return await inner(request, context)
            finally:
                slots.give(peer)

        behaviour = capped
    return make(
        behaviour,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class _MethodTable(_GenericRpcHandler):
    """Every wrapped method handler of a node, found by full method name: one dict lookup.

    Handlers that reached the server only as generic handlers (code generated
    without per-method registration) are asked on first use, wrapped then and
    kept: a handler is never served unwrapped.
    """

    def __init__(self, context: RequestContext, methods: dict[str, Any], generic: list[Any]):
        self._context = context
        self._methods = methods
        self._generic = generic

    def of_service(self, service: str) -> dict[str, Any]:
        """Method name → wrapped handler, for every method of ``service`` in the table."""
        prefix = f"/{service}/"
        return {
            rpc[len(prefix) :]: handler
            for rpc, handler in self._methods.items()
            if rpc.startswith(prefix)
        }

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        rpc = handler_call_details.method
        wrapped = self._methods.get(rpc)
        if wrapped is not None or not self._generic:
            return wrapped
        for generic in self._generic:
            handler = generic.service(handler_call_details)
            if handler is not None:
                wrapped = self._context.wrap(rpc, handler)
                self._methods[rpc] = wrapped  # only names a handler exists for: bounded
                return wrapped
        return None


class MethodCollector:
    """Stands in for a grpc.aio server while services register: keeps their handlers.

    The generated ``add_*Servicer_to_server`` functions call both
    ``add_generic_rpc_handlers`` and ``add_registered_method_handlers``;
    :meth:`RequestContext.handler` wraps what is collected here into the one
    table the real server is given.
    """

    def __init__(self) -> None:
        #: Full method name → handler, as registered per method.
        self.methods: dict[str, Any] = {}
        #: Generic handlers, asked for any method not registered per method.
        self.generic: list[Any] = []

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        for name, handler in handlers.items():
            self.methods[f"/{service}/{name}"] = handler

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)


class RequestContext:
    """Wraps a node's method handlers: ``request_id``/``rpc`` bound to the log context,
    control calls authenticated, bulk calls admitted or shed (as its :class:`Overload`
    decides), errors mapped to status codes.

    Each handler is wrapped once (:meth:`handler` at build time); the per-call
    work is reading the request id from the call's metadata and binding it.
    An open unary method (``access: open`` in the method table,
    :mod:`nodes.methods`: ``Serve.*``, ``Evidence.Challenge``, ``Node.*``, …;
    bulk calls aside, which keep their bytes for the byte budget) is served
    without keeping its raw request bytes or looking for a control signature:
    nobody's signature is needed for it and none is read there
    (``auth.caller()`` is None in it).
    """

    def __init__(
        self,
        counters: Callable[[str], None] | None = None,
        auth: ControlAuth | None = None,
        overload: Overload | None = None,
    ) -> None:
        self._count = counters
        self._auth = auth
        #: Admission, shedding and pushback (:mod:`nodes.overload`); by default no caps.
        self.overload = overload if overload is not None else Overload()
        #: The open stream loops (``Serve.Ask``, :data:`nodes.ask_stream.STREAM_ENDS`):
        #: long-lived, so the server's graceful stop ends them (:meth:`end_streams`)
        #: instead of waiting its whole grace for them.
        self._stream_ends = StreamEnds()

    def end_streams(self) -> None:
        """End every open stream loop now, OK (its holder asks on a new stream), and
        any that starts from now on at once."""
        self._stream_ends.end_all()

    # The overload controller's counters and parts, as the node reports them.

    @property
    def bulk_in_flight(self) -> int:
        return self.overload.bulk_in_flight

    @property
    def bulk_shed(self) -> int:
        return self.overload.bulk_shed

    @property
    def bulk_backlog_shed(self) -> int:
        return self.overload.bulk_backlog_shed

    @property
    def bulk_collections(self) -> int:
        return self.overload.bulk_collections

    @property
    def pushback(self) -> Pushback:
        return self.overload.pushback

    @property
    def loop_lag(self) -> LoopLag | None:
        return self.overload.loop_lag

    @property
    def bulk_budget(self) -> BulkBudget | None:
        return self.overload.bulk_budget

    def handler(self, collected: MethodCollector) -> _MethodTable:
        """One generic handler serving every collected method, each wrapped once, now."""
        methods = {rpc: self.wrap(rpc, h) for rpc, h in collected.methods.items()}
        return _MethodTable(self, methods, list(collected.generic))

    def wrap(self, rpc: str, handler: Any) -> Any:
        """``handler`` (grpc's stubs type it for the sync server; here its functions
        are coroutines) wrapped for method ``rpc``, behind the cap of its class: a
        stream (any handler streaming requests or responses; bulk calls have their
        own admission) behind ``streams``, a challenge behind ``challenges``, any
        other open unary call not in :data:`UNCAPPED_UNARY` behind ``open_calls``;
        signed calls, demands and health checks behind neither."""
        wrapped = self._wrap(rpc, handler)
        slots = self.overload.slots_for(rpc, unary=handler.unary_unary is not None)
        return wrapped if slots is None else _capped(rpc, wrapped, slots)

    def _wrap(self, rpc: str, handler: Any) -> Any:
        count = self._count
        auth = self._auth
        inner_deserialize: Any = _tolerant(rpc, handler.request_deserializer)

        def keep_raw(raw: bytes) -> Any:
            # Keep the exact bytes received: the control signature covers them.
            return (raw, inner_deserialize(raw) if inner_deserialize else raw)

        if self.overload.admits_bulk and rpc in BULK and handler.unary_unary is not None:
            # Bulk calls always keep the raw bytes: their size is what the byte budget holds.
            return self._wrap_bulk(rpc, handler, keep_raw)

        if auth is None or rpc not in SIGNED:
            # Open method (or a server that checks no signatures): the request as parsed.
            if handler.unary_unary is not None:
                return self._wrap_open_unary(rpc, handler)
            auth = None
        deserialize: Any = keep_raw if auth is not None else inner_deserialize

        async def admit(
            request: Any, context: grpc.aio.ServicerContext[Any, Any], metadata: Any = None
        ) -> Any:
            """Verify the control signature (if this server checks them) and make its replay
            record durable; the parsed request.

            ``metadata``: the call's invocation metadata if the caller already read it.
            """
            if auth is None:
                return _readable(request)
            raw, parsed = request
            if metadata is None:
                metadata = context.invocation_metadata()
            ControlAuth.bind(await auth.authenticate(rpc, raw, metadata))
            return _readable(parsed)

        stream_ends = self._stream_ends

        async def writing(
            context: grpc.aio.ServicerContext[Any, Any], run: Callable[[], Awaitable[None]]
        ) -> None:
            """A handler that writes with the context (health Watch, ``Serve.Ask``): request
            id, log context, counter, status mapping; a long-lived one registers how
            the server's stop ends it (:data:`nodes.ask_stream.STREAM_ENDS`)."""
            request_id = _call_id(context, context.invocation_metadata())
            ends = STREAM_ENDS.set(stream_ends)
            with bound_contextvars(request_id=request_id, rpc=rpc):
                if count is not None:
                    count(rpc)
                try:
                    await run()
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort_for(exc, context, rpc, request_id)
                finally:
                    STREAM_ENDS.reset(ends)

        if handler.unary_unary is not None:
            inner_uu: Any = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                metadata = context.invocation_metadata()  # read once: ids and auth both need it
                request_id = _call_id(context, metadata)
                # Bound for this call and restored after (tokens: no scan of the context).
                tokens = bind_contextvars(request_id=request_id, rpc=rpc)
                start = time.perf_counter()
                if count is not None:
                    count(rpc)
                try:
                    return await inner_uu(await admit(request, context, metadata), context)
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort_for(exc, context, rpc, request_id)
                finally:
                    if log.enabled("debug"):
                        log.debug("rpc_done", ms=round((time.perf_counter() - start) * 1e3, 3))
                    reset_contextvars(**tokens)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and not inspect.isasyncgenfunction(
            handler.unary_stream
        ):
            # A streaming handler that writes with ``context.write`` (health Watch).
            inner_uw: Any = handler.unary_stream

            async def unary_write(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> None:
                async def admitted() -> None:
                    await inner_uw(await admit(request, context), context)

                await writing(context, admitted)

            return grpc.unary_stream_rpc_method_handler(
                unary_write,
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner_us: Any = handler.unary_stream

            async def unary_stream(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                request_id = _call_id(context, context.invocation_metadata())
                with bound_contextvars(request_id=request_id, rpc=rpc):
                    if count is not None:
                        count(rpc)
                    try:
                        async for item in inner_us(await admit(request, context), context):
                            yield item
                    except Exception as exc:
                        if isinstance(exc, grpc.aio.AbortError):
                            raise
                        await _abort_for(exc, context, rpc, request_id)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        if (
            handler.stream_stream is not None
            and auth is None
            and not inspect.isasyncgenfunction(handler.stream_stream)
        ):
            # An open stream that reads and writes with the context (Serve.Ask): each
            # message it reads as parsed (or unreadable), each it writes as bytes if
            # it encoded them itself.
            inner_ss: Any = handler.stream_stream

            async def stream_stream(
                requests: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> None:
                await writing(context, lambda: inner_ss(requests, context))

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=deserialize,
                response_serializer=_encoded_or(handler.response_serializer),
            )
        return handler

    def _wrap_open_unary(self, rpc: str, handler: Any) -> Any:
        """A unary call of an open method: request id, log context, counter, status mapping.

        The hot path of a node (``Serve.Demand``): no raw bytes kept, no
        control signature looked for, the call's metadata read once.
        """
        count = self._count
        inner: Any = handler.unary_unary

        async def open_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            request_id = _call_id(context, context.invocation_metadata())
            # Bound for this call and restored after (tokens: no scan of the context).
            id_token = _REQUEST_ID_VAR.set(request_id)
            rpc_token = _RPC_VAR.set(rpc)
            # timed only when the time is logged (debug), as below
            start = time.perf_counter() if log.enabled("debug") else None
            if count is not None:
                count(rpc)
            try:
                if type(request) is _Unreadable:
                    raise request.error
                return await inner(request, context)
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                await _abort_for(exc, context, rpc, request_id)
            finally:
                if start is not None:
                    log.debug("rpc_done", ms=round((time.perf_counter() - start) * 1e3, 3))
                _RPC_VAR.reset(rpc_token)
                _REQUEST_ID_VAR.reset(id_token)

        return grpc.unary_unary_rpc_method_handler(
            open_unary,
            request_deserializer=_tolerant(rpc, handler.request_deserializer),
            response_serializer=_encoded_or(handler.response_serializer),
        )

    def _shed(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        why: str,
        request_id: str | None = None,
        cls: str = "known",
    ) -> None:
        """Refuse a bulk call with RESOURCE_EXHAUSTED, its body unread, and a retry appointment
        (``grpc-retry-pushback-ms``, see :class:`Pushback`) in its trailing metadata.

        By status, not ``context.abort``: grpc.aio keeps an abort's exception
        on the call, whose traceback holds the handler's frame and so the call
        again, a reference cycle that only the cyclic garbage collector frees.
        Shed calls by the thousand then held their gRPC calls, and their
        memory, until a full collection.
        """
        after = str(self.overload.shed(why, cls))
        context.set_trailing_metadata(
            ((PUSHBACK_KEY, after),)
            if request_id is None
            else ((REQUEST_ID_KEY, request_id), (PUSHBACK_KEY, after))
        )
        context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
        context.set_details(f"{why}; shed before reading the request, try again in {after} ms")

    def _wrap_bulk(
        self,
        rpc: str,
        handler: Any,
        deserialize: Any,
    ) -> Any:
        """A bulk unary call, admitted or shed BEFORE its request body is read.

        grpc.aio reads and deserialises a unary request before the handler
        runs, so a limit checked there costs the whole body (3 MiB each) per
        shed call. Served as a client-streaming handler instead, the call runs
        as soon as its headers arrive: over the limit it is refused at once
        (``RESOURCE_EXHAUSTED``, the body never read past the HTTP/2 flow
        window); admitted, it holds its slot while it reads the one request
        (at most :data:`nodes.overload.BULK_BODY_TIMEOUT_S`, so a caller that never sends its
        body cannot keep the slot) and runs the handler. On the wire a unary
        call and a one-message client stream are the same, so callers see no
        difference. With a :class:`nodes.overload.BulkBudget`, an admitted call also reserves
        its share of the bytes of bulk bodies in flight before reading its
        body (waiting at most :data:`nodes.overload.BULK_BUDGET_WAIT_S` for room, else
        ``RESOURCE_EXHAUSTED``, the body still unread).

        Who may hold what (:data:`nodes.overload.BULK_CLASSES`): a signed method's control
        signature is verified in full when the headers arrive (it covers the
        digest the body must have, sent with it), before the call takes a slot
        or a byte, so a caller without the key it names holds nothing. Calls
        signed by an operator key or a pinned peer take the configured slots
        and budget; calls signed by any other key, and unsigned calls
        (``Attest.Submit``), take slots and budgets of their own (half and a
        quarter of the slots, half the bytes each) and must send their body
        within :data:`nodes.overload.BULK_STRANGER_BODY_TIMEOUT_S`: a stranger's streams that
        send nothing cannot take what the operator or a peer needs. The
        SHA-256 over the body is computed in a worker thread (hashlib releases
        the GIL), so a 3 MiB body does not hold the event loop that serves
        demands; the raw bytes are dropped once it is checked against the
        digest signed.
        """
        count = self._count
        auth = self._auth
        overload = self.overload
        inner: Any = handler.unary_unary

        async def bulk_unary(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            metadata = context.invocation_metadata()
            # Whose call it claims to be picks the slots it may take; the claim is
            # verified below, before any slot, byte or await is spent on it.
            signed = auth is not None and rpc in SIGNED
            claimed = auth.claimed_signer(metadata) if auth is not None and signed else None
            cls = (
                "known"
                if auth is None or auth.is_known(claimed)
                else ("open" if claimed is None else "signed")
            )
            # Decided first, with as little work as possible: under overload most
            # calls end here, and each costs the loop the serve path needs.
            refusal = overload.bulk_refusal(rpc, cls, claimed if cls == "signed" else None)
            if refusal is not None:
                return self._shed(context, refusal, cls=cls)
            request_id = _call_id(context, metadata)
            with bound_contextvars(request_id=request_id, rpc=rpc):
                start = time.perf_counter()
                if count is not None:
                    count(rpc)
                budget = overload.budget(cls)
                if budget is not None and budget.refuses_now():
                    # No room and the queue for it full: refused as it would be after
                    # the signature, without spending the verification on it.
                    return self._shed(
                        context, overload.budget_refusal(rpc, cls, budget), request_id, cls
                    )
                claim = None
                if auth is not None:
                    # The whole signature, over the digest the body must have, before the
                    # call may hold anything: a caller without the key it names holds no
                    # slot and no byte of the budget (a refusal costs one verification).
                    try:
                        claim = auth.claim(rpc, metadata)
                    except Exception as exc:
                        await _abort_for(exc, context, rpc, request_id)
                key = claim.signer if claim is not None and cls == "signed" else None
                overload.enter(cls, key)
                body_timeout_s = overload.body_timeout_s(cls)
                held = 0
                admitted_at = time.monotonic() if budget is None else None
                try:
                    if budget is not None:
                        if not await overload.wait_for_room(budget):
                            return self._shed(
                                context, overload.budget_refusal(rpc, cls, budget), request_id, cls
                            )
                        held = budget.reserve
                        backlog = overload.backlog_refusal(rpc, cls)
                        if backlog is not None:
                            # Room came while the node works through a backlog: shed
                            # with an appointment instead (Overload.backlog_refusal).
                            budget.release(held)
                            held = 0
                            return self._shed(context, backlog, request_id, cls)
                    admitted_at = time.monotonic()
                    # Admitted: say so at once (response headers with the request id)
                    # before reading the body, so a caller may hold its body until then
                    # (as HTTP's "Expect: 100-continue"): a refused call, answered with
                    # a status and no headers, then costs neither side the body.
                    # Callers that send the body at once are served the same.
                    await context.send_initial_metadata(((REQUEST_ID_KEY, request_id),))
                    try:
                        request = await asyncio.wait_for(anext(aiter(requests)), body_timeout_s)
                    except StopAsyncIteration:
                        await context.abort(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            f"{rpc}: no request message",
                            ((REQUEST_ID_KEY, request_id),),
                        )
                    except TimeoutError:
                        await context.abort(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"{rpc}: request body not received within {body_timeout_s:g} s",
                            ((REQUEST_ID_KEY, request_id),),
                        )
                    raw, request = request
                    if budget is not None:
                        held = budget.shrink(held, len(raw))
                    if auth is not None:
                        if claim is not None:
                            digest = (
                                await asyncio.to_thread(request_digest, raw)
                                if len(raw) >= _OFFLOAD_HASH_BYTES
                                else None
                            )
                            auth.check_body(claim, raw, digest=digest)
                            await auth.settle(claim)
                        ControlAuth.bind(None if claim is None else claim.signer)
                    request = _readable(request)
                    # Only the signature needs the bytes received; and the handler gets
                    # the only reference to the parsed request, so it can drop it early.
                    del raw
                    handed = [request]
                    del request
                    return await inner(handed.pop(), context)
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError) or context.done():
                        raise  # aborted on purpose, or the caller has gone
                    await _abort_for(exc, context, rpc, request_id)
                finally:
                    overload.leave(cls, key)
                    if budget is not None and held:
                        budget.release(held)
                    overload.finished(admitted_at)
                    log.debug("rpc_done", ms=round((time.perf_counter() - start) * 1e3, 3))

        return grpc.stream_unary_rpc_method_handler(
            bulk_unary,
            request_deserializer=deserialize,
            response_serializer=handler.response_serializer,
        )
