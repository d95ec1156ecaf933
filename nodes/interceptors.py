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
the duration of the call and echoed back as trailing metadata (sent with the
status, so it costs no extra message). Contract and
store errors escaping a handler are mapped to precise status codes by
:func:`nodes.errors.status_for` — the only place that translation happens;
anything else is a bug and becomes INTERNAL with the id to find it in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import inspect
import random
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from structlog.contextvars import bind_contextvars, bound_contextvars, reset_contextvars

from contracts.entropy import random_bytes
from nodes.auth import SIGNED_METHODS, ControlAuth, request_digest
from nodes.errors import MalformedRequest, StoreFull, status_for
from nodes.logging import get_logger

__all__ = [
    "BACKLOG_BUSY_S",
    "BACKLOG_END_GAP_S",
    "BACKLOG_EVERY_S",
    "BACKLOG_GAP_S",
    "BACKLOG_RUN",
    "BACKLOG_SHED_PER_PENDING",
    "BULK_BODY_TIMEOUT_S",
    "BULK_BUDGET_WAIT_S",
    "BULK_CLASSES",
    "BULK_GC_INTERVAL_S",
    "BULK_METHODS",
    "BULK_SHED_LOG_INTERVAL_S",
    "BULK_STRANGER_BODY_TIMEOUT_S",
    "PUSHBACK_KEY",
    "REQUEST_ID_KEY",
    "UNCAPPED_UNARY",
    "WITNESS_METHODS",
    "Backlog",
    "BulkBudget",
    "LoopLag",
    "Pushback",
    "RequestContext",
    "Slots",
    "challenge_slots_per_peer",
    "peer_host",
]

#: Calls that carry or produce bulk work; shed first under overload.
BULK_METHODS = frozenset(
    {
        "/provnet.v1.Deliver/Deliver",
        "/provnet.v1.Deliver/Rehydrate",
        "/provnet.v1.Deliver/Forward",
        "/provnet.v1.HopLog/Append",
        "/provnet.v1.HopLog/CommitFold",
        "/provnet.v1.HopLog/CommitCompaction",
        "/provnet.v1.Attest/Submit",
        "/provnet.v1.Attest/Request",
        "/provnet.v1.Attest/Restore",
    }
)

#: Open unary methods no cap on calls in progress applies to: the serve path and
#: health checks must answer whatever else a caller holds open. Every other open
#: unary call (``Evidence.Challenge``, which waits on the origin, ``Node.*``,
#: ``Attest.List``) counts against ``max_concurrent_rpcs``; streams (any handler
#: that streams requests or responses, bulk calls aside) against ``max_streams``.
UNCAPPED_UNARY = frozenset(
    {
        "/provnet.v1.Serve/Demand",
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/List",
    }
)

#: Open unary methods that wait on another node for the caller (a challenge waits
#: up to the promised deadline on an endpoint the caller's obligation names, and
#: any key can sign an obligation naming a server that never answers): a cap of
#: their own, in all and per caller address, so they hold nothing the other open
#: calls need and one address cannot hold every slot other holders challenge with.
WITNESS_METHODS = frozenset({"/provnet.v1.Evidence/Challenge"})


def challenge_slots_per_peer(limit: int) -> int:
    """Challenges one caller address may have in progress at once, of ``limit``: a
    quarter, so three quarters stay for other holders whatever one address holds
    (an honest holder challenges a witness once per silent origin of a rehydration)."""
    return max(1, limit // 4)


#: An admitted bulk call must deliver its request body within this time, so a
#: caller that opens calls and never sends cannot hold the bulk slots.
BULK_BODY_TIMEOUT_S = 30.0
#: The same for a call from anyone but the operator and pinned peers (an open
#: call, or one signed by a key the node does not know): its slots and bytes
#: are a pool strangers share, so a call that sends no body gives them back
#: soon. Long enough for the largest message over a slow link (4 MiB at
#: 10 Mbit/s takes ~3.4 s).
BULK_STRANGER_BODY_TIMEOUT_S = 5.0

#: Who a bulk call is from, each with slots and bytes of its own, so no class
#: can take what another needs (:meth:`RequestContext._bulk_refusal`):
#: ``known``: signed (verified before the body is read) by an operator key or a
#: pinned peer; ``signed``: signed by any other key (a node delivering as
#: itself, a holder asking for an attestation); ``open``: unsigned (``Attest.Submit``).
BULK_CLASSES = ("known", "signed", "open")

#: A bulk call that finds the byte budget spent waits this long for room (in
#: arrival order) before it is shed: the reservations of small bodies shrink
#: as soon as they are read, so a burst of small calls is admitted, not shed.
#: Every millisecond of it is in the latency of a call admitted after waiting, so
#: it is kept short (figures: docs/measurements/2026-12-01-node-overload-constants.md).
BULK_BUDGET_WAIT_S = 0.1

#: While bulk calls come and go (admitted or shed), a full garbage collection
#: at most this often. grpc.aio leaves small reference cycles per call that
#: keep the call's gRPC objects alive until a full collection, which Python
#: runs rarely once a process holds many long-lived objects: under a flood of
#: bulk calls, most of them shed, the resident memory then grows with every
#: admitted delivery. Collecting on an interval bounds it without costing
#: throughput or latency (figures: docs/measurements/2026-12-01-node-overload-constants.md).
BULK_GC_INTERVAL_S = 0.5

#: While bulk calls are shed, one log event (``bulk_calls_shed``) at most this
#: often, counting the calls shed since the previous one; the first shed after a
#: quiet interval is logged at once. Not one event per shed call: a flood sheds
#: calls by the hundred, a refusal is cheap (nearly all of it gRPC's per-call
#: work) and a JSON event per call would add a sizeable share to it, with a
#: line per call that says nothing the count does not. A shed call is not a
#: refused demand (the serve path is never shed): ``demand_not_served`` stays
#: one event per refusal.
BULK_SHED_LOG_INTERVAL_S = 10.0

#: Bulk calls taken up by the node at most this far apart are back to back: the
#: node is working through calls that queued in gRPC while it was busy (a call
#: arriving to an idle node is taken up within microseconds; queued calls are
#: taken up well under this apart, callers spread out by their appointments
#: arrive further apart; figures: docs/measurements/2026-12-01-node-overload-constants.md).
BACKLOG_GAP_S = 0.002
#: This many bulk calls back to back, at least one of them shed: a backlog.
BACKLOG_RUN = 16
#: Without a loop that knows when it was idle (a node run in another program's
#: event loop, not on :class:`nodes.eventloop.NodeEventLoop`), a backlog has
#: drained once no bulk call has been taken up for this long: a node working
#: through a queue pauses between calls for its other work (a large body
#: parsed, a garbage collection) and when it loses its CPU to another process
#: for a time slice, without the queue having drained. On a node's own loop a
#: backlog drains only once the loop has been idle (see :class:`Backlog`): a
#: node admitting large bodies during a burst pauses between calls with many
#: still queued, and a gap alone would let the next queued call in after a
#: long wait.
BACKLOG_END_GAP_S = 0.01
#: While the node works through a backlog it sheds every bulk call: each has
#: waited in gRPC's queue behind the backlog, so admitting it would give its
#: caller the whole wait (the calls admitted during a burst would set the
#: admitted calls' tail latency). A burst is at most
#: what gRPC's queue holds (``max_pending_rpcs``) and what comes back while it
#: drains, so a node sheds at most ``BACKLOG_SHED_PER_PENDING`` times its
#: pending cap of calls from backlogs in any ``BACKLOG_EVERY_S``: a flood that
#: goes on (callers ignoring the appointments) is a backlog that never drains,
#: and shedding all of it would admit nobody. Counted in calls, not seconds: a
#: node short of CPU drains the same burst more slowly.
BACKLOG_SHED_PER_PENDING = 1.5
BACKLOG_EVERY_S = 10.0
#: On a loop that knows when it was idle, a bulk call taken up after the loop
#: has not been idle for this long is shed as a backlog too, however far apart
#: the calls come: the queue was empty when the loop was last idle, so the
#: call may have waited that long. A node admitting large bodies takes queued
#: calls up with its own work between them, not back to back, so such a slow
#: drain after a burst would otherwise admit calls that waited in the queue
#: for most of its length. Only once a call has been shed since the
#: loop was idle: a node that sheds nothing is not behind (one caller's
#: deliveries back to back keep a node from idling, with nothing queued).
BACKLOG_BUSY_S = 0.15

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


def _request_id(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _SANE_ID.match(value):
            return value
    # 16 hex characters, as uuid4().hex[:16] gave; from a block of OS randomness
    # read once per 512 ids, not one system call per call (contracts.entropy)
    return random_bytes(8).hex()


async def _abort_for(exc: Exception, context: grpc.aio.ServicerContext[Any, Any], rpc: str) -> None:
    code = status_for(exc)
    if code is None:
        log.exception("rpc_failed_unexpectedly", rpc=rpc)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {rpc}")
    if not isinstance(exc, StoreFull):  # a full disk is logged once per interval (nodes._disk)
        log.info("rpc_rejected", rpc=rpc, code=code.name, reason=str(exc))
    await context.abort(code, f"{type(exc).__name__}: {exc}")


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


class LoopLag:
    """How late the event loop runs: a task sleeps ``interval_s`` and measures the overshoot.

    ``late_s`` is the latest overshoot, decaying by half per tick once the
    loop catches up, so one slow tick sheds for a few ticks, not for good.
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.late_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval_s)
            late = loop.time() - start - self.interval_s
            self.late_s = max(late, self.late_s / 2)


class Pushback:
    """When a shed bulk caller should try again: each refusal gets its own later slot.

    Under overload most bulk calls are refused; callers that all retry after
    their own short backoff keep arriving at many times the rate the node can
    admit, and every refusal costs both sides (and queues in front of the
    calls the node does admit). So each refusal carries a ``grpc-retry-pushback-ms``
    appointment: the next free slot of a schedule whose slots are
    ``1 / (headroom × rate)`` apart, ``rate`` being how fast the node has been
    finishing admitted bulk calls (a moving average of the time between
    completions, counted from the later of the previous completion and the
    call's own admission, so idle time is not counted). Callers
    that honour it (as gRPC's retry policy does) come back spread out at about
    ``headroom`` times what the node admits, not all at once. The schedule is
    bounded (``min_s`` to ``max_s`` ahead; once full, a refusal is given a
    random time in the later half, so callers beyond it do not all come
    back at once) and is worth nothing to a caller that ignores it: it only
    advises, admission is decided as before. Until a first call completes
    the node assumes ``first_interval_s`` between completions.
    """

    def __init__(
        self,
        min_s: float = 0.05,
        max_s: float = 10.0,
        headroom: float = 1.5,
        first_interval_s: float = 0.01,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not 0 < min_s <= max_s or headroom <= 0:
            raise ValueError(
                f"pushback bounds {min_s}..{max_s} s and headroom {headroom} must be positive,"
                " min <= max"
            )
        self.min_s = min_s
        self.max_s = max_s
        self.headroom = headroom
        self._clock = clock
        self._rng = rng
        #: Moving average of the seconds between admitted bulk calls finishing.
        self.interval_s = first_interval_s
        self._last_done = clock()
        #: The next free slot (clock time).
        self._next = 0.0

    def completed(self, admitted_at: float) -> None:
        """A bulk call admitted at ``admitted_at`` (clock time) has finished."""
        now = self._clock()
        sample = min(now - max(self._last_done, admitted_at), self.max_s)
        self.interval_s += 0.1 * (sample - self.interval_s)
        self._last_done = now

    def next_ms(self) -> int:
        """The appointment for a call refused now: milliseconds from now.

        Refusals faster than completions push the schedule out (each takes
        the next slot), up to ``max_s``; once refusals stop it falls back to
        ``min_s`` as time passes.
        """
        now = self._clock()
        slot = max(self._next, now + self.min_s)
        if slot > now + self.max_s:  # the schedule is full: somewhere in its later half
            return round(self.max_s * (0.5 + self._rng() / 2) * 1000)
        self._next = slot + self.interval_s / self.headroom
        return round((slot - now) * 1000)


class Backlog:
    """Whether the node is working through bulk calls that queued while it was busy.

    gRPC hands the node one call per event-loop turn; calls that arrive faster
    wait in gRPC's queue, where nothing the node decides can reach them. Once
    the node takes :data:`BACKLOG_RUN` bulk calls up back to back (each at most
    :data:`BACKLOG_GAP_S` after the one before) and has shed one of them, every
    call it takes up until the queue has drained has waited behind the others:
    :meth:`taken` says to shed it, for at most ``limit`` calls in a window that
    opens at most once every :data:`BACKLOG_EVERY_S`.
    A burst of small bulk calls that the node admits (none shed) is never a backlog.

    The queue has drained once the node's event loop has been idle since the
    last call was taken up (``idle_at``: when the loop last waited for I/O
    with nothing to run, on ``clock``'s time; see :mod:`nodes.eventloop`): a
    call still queued would have been handed over instead. A pause alone
    does not end a backlog, however long: the node may have spent it on its
    own work with the queue still full. Without ``idle_at`` a pause of
    :data:`BACKLOG_END_GAP_S` does.

    With ``idle_at``, a call taken up when the loop has not been idle for
    :data:`BACKLOG_BUSY_S`, and a call has been shed since it was, is shed as
    from a backlog too (within the same limit), however far apart the calls
    come: the queue was empty when the loop was last idle, so the time since
    is what the call may have waited, and a call shed since says calls came
    faster than the node took them. A node busy with the bodies it admitted
    takes queued calls up 5-10 ms apart, never back to back, and would
    otherwise admit them one by one. Without a shed, a node busy that long
    is working through calls it admitted, one caller's back-to-back
    deliveries say, with nothing queued: they are not shed.
    """

    def __init__(
        self,
        limit: int,
        clock: Callable[[], float] = time.monotonic,
        idle_at: Callable[[], float] | None = None,
    ) -> None:
        if limit < 0:
            raise ValueError(f"backlog shedding limit {limit} must be >= 0")
        self.limit = limit
        self._clock = clock
        self._idle_at = idle_at
        self._last = -1e9
        self._run = 0
        self._run_shed = False
        self._window_start = -1e9
        #: Calls still to shed from backlogs in the current window.
        self._left = 0
        #: When (``clock`` time) a bulk call was last shed; ``-inf`` until one is, so
        #: a loop that has not been idle yet (``idle_at`` also ``-inf``) has not
        #: "shed a call since it was idle" (:meth:`_busy`).
        self._shed_at = float("-inf")

    def shed(self) -> None:
        """A bulk call of the current run was shed."""
        self._run_shed = True
        self._shed_at = self._clock()

    @property
    def active(self) -> bool:
        """Whether the node is working through a backlog now: the calls it takes up
        are being shed and the queue has not been seen to drain since."""
        if self._run < BACKLOG_RUN or not self._run_shed or self._left <= 0:
            return False
        if self._idle_at is None:
            return self._clock() - self._last <= BACKLOG_END_GAP_S
        return self._idle_at() <= self._last

    def taken(self) -> bool:
        """A bulk call is being taken up now: True if it comes from a backlog (shed it)."""
        now = self._clock()
        gap = now - self._last
        drained = gap > BACKLOG_END_GAP_S if self._idle_at is None else self._idle_at() > self._last
        self._last = now
        if drained or (gap > BACKLOG_GAP_S and self._run < BACKLOG_RUN):
            self._run, self._run_shed = 1, False
            return self._busy(now)
        self._run += 1
        if self._run < BACKLOG_RUN or not self._run_shed:
            return self._busy(now)
        return self._spend(now)

    def _busy(self, now: float) -> bool:
        """Whether the loop, with a clock that knows, has not been idle for BACKLOG_BUSY_S
        and a call has been shed since it was: a call taken up now may have waited that
        long behind others (spends the window as a backlog)."""
        if self._idle_at is None:
            return False
        idle = self._idle_at()
        if now - idle <= BACKLOG_BUSY_S or self._shed_at <= idle:
            return False
        return self._spend(now)

    def _spend(self, now: float) -> bool:
        """One call of the window's backlog limit: True while any is left."""
        if now - self._window_start >= BACKLOG_EVERY_S:
            self._window_start, self._left = now, self.limit
        if self._left <= 0:
            return False
        self._left -= 1
        return True


def peer_host(peer: str) -> str:
    """The caller's address without its port (``ipv4:127.0.0.1:5000`` → ``ipv4:127.0.0.1``):
    what a per-caller cap counts by, since one caller opens as many ports as it likes."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer


class Slots:
    """Calls of one class in progress: at most ``limit`` in all and ``per_peer`` per caller.

    A refused call is told which cap it met (:meth:`take` returns why). Each caller
    address counted holds at least one slot, so the per-caller table never holds
    more than ``limit`` entries. All on the node's event loop: no locks.
    """

    def __init__(self, what: str, limit: int, per_peer: int | None = None) -> None:
        if limit < 1 or (per_peer is not None and not 1 <= per_peer <= limit):
            raise ValueError(f"{what}: cap {limit} (per caller {per_peer}) must be >= 1")
        self.what = what
        self.limit = limit
        self.per_peer = per_peer
        #: Slots taken right now, and the calls refused since start.
        self.in_use = 0
        self.refused = 0
        self._by_peer: dict[str, int] = {}

    def take(self, peer: str) -> str | None:
        """Take a slot for a call from ``peer`` (its host); None if taken, else why not."""
        if self.in_use >= self.limit:
            self.refused += 1
            return f"{self.limit} {self.what} in progress on this node"
        if self.per_peer is not None:
            held = self._by_peer.get(peer, 0)
            if held >= self.per_peer:
                self.refused += 1
                return f"{self.per_peer} {self.what} in progress from {peer[:80]}"
            self._by_peer[peer] = held + 1
        self.in_use += 1
        return None

    def give(self, peer: str) -> None:
        self.in_use -= 1
        if self.per_peer is not None:
            held = self._by_peer.get(peer, 0) - 1
            if held > 0:
                self._by_peer[peer] = held
            else:
                self._by_peer.pop(peer, None)


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


class BulkBudget:
    """Bytes of bulk request bodies in flight, reserved when a call's headers arrive.

    A body's size is unknown until it is read, so an admitted call first
    reserves ``reserve`` bytes (the largest message the node accepts); once
    its body has arrived the reservation shrinks to the body's real size and
    is held until the call ends. A call is admitted while the reservations fit
    in ``limit`` (or none is held: one call, however large, always fits).
    Otherwise it waits, in arrival order, for room, at most the time it is
    given; then it is refused. At most ``max_waiters`` calls wait at once
    (default: as many as the budget holds, ``limit // reserve``): a call that
    finds that many waiting is refused at once, so an admitted call never
    queues behind more than about one budget's worth of bodies. All on the
    node's event loop: no locks.
    """

    def __init__(self, limit: int, reserve: int, max_waiters: int | None = None) -> None:
        if limit < 1 or reserve < 1:
            raise ValueError(f"bulk budget {limit} and reservation {reserve} must be >= 1")
        if max_waiters is None:
            max_waiters = max(1, limit // reserve)
        if max_waiters < 0:
            raise ValueError(f"bulk budget waiters {max_waiters} must be >= 0")
        self.limit = limit
        self.reserve = reserve
        self.max_waiters = max_waiters
        #: Bytes reserved or held right now.
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        #: Calls waiting for room now.
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Calls waiting for room right now."""
        return self._waiting

    def _fits(self, n: int) -> bool:
        return self.used == 0 or self.used + n <= self.limit

    def refuses_now(self) -> bool:
        """Whether :meth:`acquire` would refuse a call at once (no room, the queue full)."""
        if not self._waiters and self._fits(self.reserve):
            return False
        return self._waiting >= self.max_waiters

    async def acquire(self, wait_s: float) -> bool:
        """Reserve ``reserve`` bytes, waiting at most ``wait_s`` for room; False: refused."""
        n = self.reserve
        if not self._waiters and self._fits(n):
            self.used += n
            return True
        if wait_s <= 0 or self._waiting >= self.max_waiters:
            return False
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, granted))
        self._waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(granted), wait_s)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(n)  # granted as the call went away: give it back
            granted.cancel()
            raise
        finally:
            self._waiting -= 1
        if granted.done() and not granted.cancelled():
            return True
        granted.cancel()  # no longer waiting; _grant skips it
        return False

    def shrink(self, held: int, actual: int) -> int:
        """The body has arrived: hold its ``actual`` size instead of ``held``; the new hold."""
        actual = min(actual, held)
        self.release(held - actual)
        return actual

    def release(self, n: int) -> None:
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            n, granted = self._waiters[0]
            if granted.done():
                self._waiters.popleft()
                continue
            if not self._fits(n):
                return
            self._waiters.popleft()
            self.used += n
            granted.set_result(None)


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
    control calls authenticated, bulk calls admitted or shed, errors mapped to status codes.

    Each handler is wrapped once (:meth:`handler` at build time); the per-call
    work is reading the request id from the call's metadata and binding it.
    An open unary method (not in :data:`nodes.auth.SIGNED_METHODS`: ``Serve.*``,
    ``Evidence.Challenge``, ``Node.*``, …; bulk calls aside, which keep their
    bytes for the byte budget) is served without keeping its raw request
    bytes or looking for a control signature: nobody's signature is needed
    for it and none is read there (``auth.caller()`` is None in it).
    """

    def __init__(
        self,
        counters: Callable[[str], None] | None = None,
        auth: ControlAuth | None = None,
        bulk_limit: int = 0,
        bulk_shed_lag_s: float = 0.0,
        bulk_budget: BulkBudget | None = None,
        backlog_limit: int = 1536,
        loop_idle_at: Callable[[], float] | None = None,
        max_streams: int = 0,
        max_streams_per_peer: int = 0,
        max_open_calls: int = 0,
    ) -> None:
        self._count = counters
        #: Long-lived streams open, per streaming method (none: uncapped), each in all
        #: and per caller address: idle watches cannot take a demand stream's room.
        self._max_streams = max_streams
        self._max_streams_per_peer = max_streams_per_peer or max_streams
        self.streams: dict[str, Slots] = {}
        #: Open unary calls in progress other than UNCAPPED_UNARY (None: uncapped).
        self.open_calls = Slots("open calls", max_open_calls) if max_open_calls > 0 else None
        #: Challenges in progress (:data:`WITNESS_METHODS`), apart from ``open_calls``.
        self.challenges = (
            Slots("challenges", max_open_calls, challenge_slots_per_peer(max_open_calls))
            if max_open_calls > 0
            else None
        )
        self._auth = auth
        #: Bulk calls in progress per class (:data:`BULK_CLASSES`) and per signing
        #: key of the ``signed`` class; ``bulk_in_flight`` is their sum.
        self.bulk_in_flight_by_class = dict.fromkeys(BULK_CLASSES, 0)
        self._signed_in_flight: dict[str, int] = {}
        # Slots of the classes outside ``known``: half the cap for keys the node
        # does not know (a quarter for any one of them), a quarter for unsigned calls.
        self._class_limits = {
            "known": bulk_limit,
            "signed": max(1, bulk_limit // 2),
            "open": max(1, bulk_limit // 4),
        }
        self._per_key_limit = max(1, bulk_limit // 4)
        # Load shedding: at most ``bulk_limit`` bulk calls (deliveries, appends,
        # commits, rehydrations, forwards, attestations) at once; more are
        # RESOURCE_EXHAUSTED at once, so demands keep their latency.
        self._bulk_limit = bulk_limit
        self.bulk_in_flight = 0
        #: Bulk calls refused (before their body was read) since start.
        self.bulk_shed = 0
        #: Adaptive admission (0: off): while the loop runs this late, one bulk call at a time.
        self.loop_lag = LoopLag() if bulk_shed_lag_s > 0 else None
        self._shed_lag_s = bulk_shed_lag_s
        #: Bytes of bulk request bodies in flight (None: no byte budget): the operator's
        #: and pinned peers' calls. Every other caller's come from budgets of their
        #: own, half that size each (at least one reservation).
        self.bulk_budget = bulk_budget
        self.class_budgets: dict[str, BulkBudget | None] = {"known": bulk_budget}
        for cls in ("signed", "open"):
            self.class_budgets[cls] = (
                None
                if bulk_budget is None
                else BulkBudget(
                    max(bulk_budget.reserve, bulk_budget.limit // 2), bulk_budget.reserve
                )
            )
        #: Full garbage collections run because of bulk traffic (see BULK_GC_INTERVAL_S).
        self.bulk_collections = 0
        self._last_collection = time.monotonic()
        #: When a shed bulk caller should try again (``grpc-retry-pushback-ms``).
        self.pushback = Pushback()
        #: Bulk calls shed because they were taken up from a backlog (see BACKLOG_RUN).
        self.bulk_backlog_shed = 0
        # The last ``bulk_calls_shed`` event: when, and the counters it had counted to.
        self._shed_logged_at = -float("inf")
        self._shed_logged_count = 0
        self._shed_logged_backlog = 0
        #: ``loop_idle_at``: when the node's event loop was last idle (``time.monotonic``
        #: time; :func:`nodes.eventloop.idle_clock`), which tells a backlog has drained.
        #: One per class (:data:`BULK_CLASSES`): a backlog of strangers' calls sheds
        #: theirs, not the operator's (their calls are judged on their own run).
        self._backlogs = {cls: Backlog(backlog_limit, idle_at=loop_idle_at) for cls in BULK_CLASSES}

    def handler(self, collected: MethodCollector) -> _MethodTable:
        """One generic handler serving every collected method, each wrapped once, now."""
        methods = {rpc: self.wrap(rpc, h) for rpc, h in collected.methods.items()}
        return _MethodTable(self, methods, list(collected.generic))

    def _bulk_refusal(self, rpc: str, cls: str = "known", key: str | None = None) -> str | None:
        """Why a bulk call of class ``cls`` (signed by ``key``) starting now is shed,
        or None to admit it."""
        if self._backlogs[cls].taken():
            self.bulk_backlog_shed += 1
            return f"{rpc}: node taking up a backlog of calls"
        limit = self._class_limits[cls]
        if self.bulk_in_flight_by_class[cls] >= limit:
            if cls == "known":
                return f"{rpc}: {limit} bulk calls in progress"
            whose = "unsigned" if cls == "open" else "signed by keys this node does not pin"
            return f"{rpc}: {limit} bulk calls {whose} in progress"
        if key is not None and self._signed_in_flight.get(key, 0) >= self._per_key_limit:
            return f"{rpc}: {self._per_key_limit} bulk calls signed by key {key[:16]}… in progress"
        lag = self.loop_lag
        if lag is not None and self.bulk_in_flight > 0 and lag.late_s > self._shed_lag_s:
            return (
                f"{rpc}: node overloaded (event loop {lag.late_s * 1e3:.0f} ms late,"
                f" over {self._shed_lag_s * 1e3:.0f} ms)"
            )
        return None

    @staticmethod
    def _budget_refusal(rpc: str, cls: str, budget: BulkBudget) -> str:
        share = "" if cls == "known" else f" ({cls} callers' share)"
        return (
            f"{rpc}: {budget.used} of {budget.limit} bytes of bulk request bodies in flight{share}"
        )

    def wrap(self, rpc: str, handler: Any) -> Any:
        """``handler`` (grpc's stubs type it for the sync server; here its functions
        are coroutines) wrapped for method ``rpc``, behind the cap of its class: a
        stream (any handler streaming requests or responses; bulk calls have their
        own admission) behind ``streams``, a challenge behind ``challenges``, any
        other open unary call not in :data:`UNCAPPED_UNARY` behind ``open_calls``;
        signed calls, demands and health checks behind neither."""
        wrapped = self._wrap(rpc, handler)
        slots: Slots | None
        if handler.unary_unary is None:
            slots = None
            if self._max_streams > 0:
                slots = self.streams[rpc] = Slots(
                    "streams", self._max_streams, self._max_streams_per_peer
                )
        elif rpc in UNCAPPED_UNARY or rpc in SIGNED_METHODS or rpc in BULK_METHODS:
            slots = None
        elif rpc in WITNESS_METHODS:
            slots = self.challenges
        else:
            slots = self.open_calls
        return wrapped if slots is None else _capped(rpc, wrapped, slots)

    def _wrap(self, rpc: str, handler: Any) -> Any:
        count = self._count
        auth = self._auth
        inner_deserialize: Any = _tolerant(rpc, handler.request_deserializer)

        def keep_raw(raw: bytes) -> Any:
            # Keep the exact bytes received: the control signature covers them.
            return (raw, inner_deserialize(raw) if inner_deserialize else raw)

        if self._bulk_limit > 0 and rpc in BULK_METHODS and handler.unary_unary is not None:
            # Bulk calls always keep the raw bytes: their size is what the byte budget holds.
            return self._wrap_bulk(rpc, handler, keep_raw)

        if auth is None or rpc not in SIGNED_METHODS:
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

        if handler.unary_unary is not None:
            inner_uu: Any = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                metadata = context.invocation_metadata()  # read once: ids and auth both need it
                request_id = _request_id(metadata)
                # Bound for this call and restored after (tokens: no scan of the context).
                tokens = bind_contextvars(request_id=request_id, rpc=rpc)
                start = time.perf_counter()
                context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
                if count is not None:
                    count(rpc)
                try:
                    return await inner_uu(await admit(request, context, metadata), context)
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    await _abort_for(exc, context, rpc)
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
                request_id = _request_id(context.invocation_metadata())
                with bound_contextvars(request_id=request_id, rpc=rpc):
                    if count is not None:
                        count(rpc)
                    try:
                        await inner_uw(await admit(request, context), context)
                    except Exception as exc:
                        if isinstance(exc, grpc.aio.AbortError):
                            raise
                        await _abort_for(exc, context, rpc)

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
                request_id = _request_id(context.invocation_metadata())
                with bound_contextvars(request_id=request_id, rpc=rpc):
                    context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
                    if count is not None:
                        count(rpc)
                    try:
                        async for item in inner_us(await admit(request, context), context):
                            yield item
                    except Exception as exc:
                        if isinstance(exc, grpc.aio.AbortError):
                            raise
                        await _abort_for(exc, context, rpc)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
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
            request_id = _request_id(context.invocation_metadata())
            # Bound for this call and restored after (tokens: no scan of the context).
            id_token = _REQUEST_ID_VAR.set(request_id)
            rpc_token = _RPC_VAR.set(rpc)
            # timed only when the time is logged (debug), as below
            start = time.perf_counter() if log.enabled("debug") else None
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            if count is not None:
                count(rpc)
            try:
                if type(request) is _Unreadable:
                    raise request.error
                return await inner(request, context)
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                await _abort_for(exc, context, rpc)
            finally:
                if start is not None:
                    log.debug("rpc_done", ms=round((time.perf_counter() - start) * 1e3, 3))
                _RPC_VAR.reset(rpc_token)
                _REQUEST_ID_VAR.reset(id_token)

        return grpc.unary_unary_rpc_method_handler(
            open_unary,
            request_deserializer=_tolerant(rpc, handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _collect_now_and_then(self) -> None:
        """A full garbage collection if the last was BULK_GC_INTERVAL_S ago or more."""
        now = time.monotonic()
        if now - self._last_collection >= BULK_GC_INTERVAL_S:
            self._last_collection = now
            self.bulk_collections += 1
            gc.collect()

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
        self.bulk_shed += 1
        self._backlogs[cls].shed()
        self._collect_now_and_then()
        now = time.monotonic()
        if now - self._shed_logged_at >= BULK_SHED_LOG_INTERVAL_S:
            log.warning(
                "bulk_calls_shed",
                calls=self.bulk_shed - self._shed_logged_count,
                from_backlogs=self.bulk_backlog_shed - self._shed_logged_backlog,
                reason=why,
                interval_s=BULK_SHED_LOG_INTERVAL_S,
            )
            self._shed_logged_at = now
            self._shed_logged_count = self.bulk_shed
            self._shed_logged_backlog = self.bulk_backlog_shed
        after = str(self.pushback.next_ms())
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
        (at most :data:`BULK_BODY_TIMEOUT_S`, so a caller that never sends its
        body cannot keep the slot) and runs the handler. On the wire a unary
        call and a one-message client stream are the same, so callers see no
        difference. With a :class:`BulkBudget`, an admitted call also reserves
        its share of the bytes of bulk bodies in flight before reading its
        body (waiting at most :data:`BULK_BUDGET_WAIT_S` for room, else
        ``RESOURCE_EXHAUSTED``, the body still unread).

        Who may hold what (:data:`BULK_CLASSES`): a signed method's control
        signature is verified in full when the headers arrive (it covers the
        digest the body must have, sent with it), before the call takes a slot
        or a byte, so a caller without the key it names holds nothing. Calls
        signed by an operator key or a pinned peer take the configured slots
        and budget; calls signed by any other key, and unsigned calls
        (``Attest.Submit``), take slots and budgets of their own (half and a
        quarter of the slots, half the bytes each) and must send their body
        within :data:`BULK_STRANGER_BODY_TIMEOUT_S`: a stranger's streams that
        send nothing cannot take what the operator or a peer needs. The
        SHA-256 over the body is computed in a worker thread (hashlib releases
        the GIL), so a 3 MiB body does not hold the event loop that serves
        demands; the raw bytes are dropped once it is checked against the
        digest signed.
        """
        count = self._count
        auth = self._auth
        inner: Any = handler.unary_unary

        async def bulk_unary(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            metadata = context.invocation_metadata()
            # Whose call it claims to be picks the slots it may take; the claim is
            # verified below, before any slot, byte or await is spent on it.
            signed = auth is not None and rpc in SIGNED_METHODS
            claimed = auth.claimed_signer(metadata) if auth is not None and signed else None
            cls = (
                "known"
                if auth is None or auth.is_known(claimed)
                else ("open" if claimed is None else "signed")
            )
            # Decided first, with as little work as possible: under overload most
            # calls end here, and each costs the loop the serve path needs.
            refusal = self._bulk_refusal(rpc, cls, claimed if cls == "signed" else None)
            if refusal is not None:
                return self._shed(context, refusal, cls=cls)
            request_id = _request_id(metadata)
            with bound_contextvars(request_id=request_id, rpc=rpc):
                start = time.perf_counter()
                context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
                if count is not None:
                    count(rpc)
                budget = self.class_budgets.get(cls)
                if budget is not None and budget.refuses_now():
                    # No room and the queue for it full: refused as it would be after
                    # the signature, without spending the verification on it.
                    return self._shed(
                        context, self._budget_refusal(rpc, cls, budget), request_id, cls
                    )
                claim = None
                if auth is not None:
                    # The whole signature, over the digest the body must have, before the
                    # call may hold anything: a caller without the key it names holds no
                    # slot and no byte of the budget (a refusal costs one verification).
                    try:
                        claim = auth.claim(rpc, metadata)
                    except Exception as exc:
                        await _abort_for(exc, context, rpc)
                key = claim.signer if claim is not None and cls == "signed" else None
                self.bulk_in_flight += 1
                self.bulk_in_flight_by_class[cls] += 1
                if key is not None:
                    self._signed_in_flight[key] = self._signed_in_flight.get(key, 0) + 1
                body_timeout_s = (
                    BULK_BODY_TIMEOUT_S if cls == "known" else BULK_STRANGER_BODY_TIMEOUT_S
                )
                held = 0
                admitted_at = time.monotonic() if budget is None else None
                try:
                    if budget is not None:
                        if not await budget.acquire(BULK_BUDGET_WAIT_S):
                            return self._shed(
                                context, self._budget_refusal(rpc, cls, budget), request_id, cls
                            )
                        held = budget.reserve
                        if self._backlogs[cls].active:
                            # Room came while the node works through a backlog: its
                            # body would be read and processed between the refusals of
                            # the backlog, each step behind theirs (such calls, taken
                            # up early in a burst, would be the slowest admitted ones).
                            # Shed with an appointment instead.
                            budget.release(held)
                            held = 0
                            self.bulk_backlog_shed += 1
                            return self._shed(
                                context,
                                f"{rpc}: node taking up a backlog of calls",
                                request_id,
                                cls,
                            )
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
                            grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: no request message"
                        )
                    except TimeoutError:
                        await context.abort(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"{rpc}: request body not received within {body_timeout_s:g} s",
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
                    await _abort_for(exc, context, rpc)
                finally:
                    self.bulk_in_flight -= 1
                    self.bulk_in_flight_by_class[cls] -= 1
                    if key is not None:
                        left = self._signed_in_flight[key] - 1
                        if left:
                            self._signed_in_flight[key] = left
                        else:
                            del self._signed_in_flight[key]
                    if budget is not None and held:
                        budget.release(held)
                    if admitted_at is not None:
                        self.pushback.completed(admitted_at)
                    self._collect_now_and_then()
                    log.debug("rpc_done", ms=round((time.perf_counter() - start) * 1e3, 3))

        return grpc.stream_unary_rpc_method_handler(
            bulk_unary,
            request_deserializer=deserialize,
            response_serializer=handler.response_serializer,
        )
