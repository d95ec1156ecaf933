"""The overload controller: which calls a node admits, which it sheds, when to come back.

Apart from the per-call context (:mod:`nodes.interceptors`: request ids,
logging, authentication, statuses), this module decides, for every call
before its handler runs, whether it may hold what it asks for:

* **caps on calls in progress**, per class of call (:class:`Slots`): streams
  (per streaming method, in all and per caller address), open unary calls
  (``max_concurrent_rpcs``) and challenges (a cap of their own, a quarter per
  address); which cap an rpc sits behind is its ``open_cap`` in the method
  table (:mod:`nodes.methods`); signed calls are verified before they hold
  anything and the serve path and health checks are never capped;
* **bulk admission** (the table's ``bulk`` methods), before the body is read:
  slots per caller class (:data:`BULK_CLASSES`: the operator's and pinned
  peers', other signers', unsigned), a per-key share, the byte budget of each
  class (:class:`BulkBudget`), the event-loop-lag admission (:class:`LoopLag`)
  and backlog shedding (:class:`Backlog`);
* **pushback**: the retry appointment each shed call is given (:class:`Pushback`).

It says *why* a call is refused and *when* to try again; the edge
(:mod:`nodes.interceptors`) turns that into ``RESOURCE_EXHAUSTED`` with the
``grpc-retry-pushback-ms`` trailer. All on the node's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections import deque
from collections.abc import Callable

from nodes import methods
from nodes.logging import get_logger
from nodes.methods import OpenCap

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
    "BULK_SHED_LOG_INTERVAL_S",
    "BULK_STRANGER_BODY_TIMEOUT_S",
    "Backlog",
    "BulkBudget",
    "LoopLag",
    "Overload",
    "Pushback",
    "Slots",
    "challenge_slots_per_peer",
    "peer_host",
]

log = get_logger(__name__)


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
#: can take what another needs (:meth:`Overload.bulk_refusal`):
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


class Overload:
    """A node's overload controller: its caps, bulk admission, backlog shedding and pushback.

    ``bulk_limit`` (0: bulk admission off): bulk calls in progress at once;
    ``bulk_shed_lag_s`` (0: off): while the loop runs this late, one bulk call
    at a time; ``bulk_budget``: bytes of the operator's and pinned peers' bulk
    bodies in flight (every other class gets a budget of its own, half that
    size); ``backlog_limit``: calls shed from backlogs per window;
    ``loop_idle_at``: when the node's event loop was last idle
    (:func:`nodes.eventloop.idle_clock`); ``max_streams`` /
    ``max_streams_per_peer`` / ``max_open_calls`` (0: uncapped): the caps on
    calls in progress.
    """

    def __init__(
        self,
        bulk_limit: int = 0,
        bulk_shed_lag_s: float = 0.0,
        bulk_budget: BulkBudget | None = None,
        backlog_limit: int = 1536,
        loop_idle_at: Callable[[], float] | None = None,
        max_streams: int = 0,
        max_streams_per_peer: int = 0,
        max_open_calls: int = 0,
    ) -> None:
        #: Long-lived streams open, per streaming method (none: uncapped), each in all
        #: and per caller address: idle watches cannot take a demand stream's room.
        self._max_streams = max_streams
        self._max_streams_per_peer = max_streams_per_peer or max_streams
        self.streams: dict[str, Slots] = {}
        #: Open unary calls in progress under the shared cap (None: uncapped).
        self.open_calls = Slots("open calls", max_open_calls) if max_open_calls > 0 else None
        #: Challenges in progress (``open_cap: witness``), apart from ``open_calls``.
        self.challenges = (
            Slots("challenges", max_open_calls, challenge_slots_per_peer(max_open_calls))
            if max_open_calls > 0
            else None
        )
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
        self.bulk_limit = bulk_limit
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
        #: One backlog per class (:data:`BULK_CLASSES`): a backlog of strangers' calls
        #: sheds theirs, not the operator's (their calls are judged on their own run).
        self._backlogs = {cls: Backlog(backlog_limit, idle_at=loop_idle_at) for cls in BULK_CLASSES}

    @property
    def admits_bulk(self) -> bool:
        """Whether bulk calls go through admission (a bulk cap is set)."""
        return self.bulk_limit > 0

    def slots_for(self, rpc: str, *, unary: bool) -> Slots | None:
        """The cap calls of ``rpc`` sit behind (None: none), decided once per method.

        A stream (any handler streaming requests or responses; bulk calls have
        their own admission) behind its method's stream slots; an open unary
        call behind the cap its policy's ``open_cap`` names (a method outside
        the table and :data:`nodes.methods.FOREIGN` behind the shared one);
        signed and bulk calls, the serve path and health checks behind none.
        """
        if not unary:
            if self._max_streams <= 0:
                return None
            slots = self.streams[rpc] = Slots(
                "streams", self._max_streams, self._max_streams_per_peer
            )
            return slots
        policy = methods.lookup(rpc)
        cap = OpenCap.SHARED if policy is None else policy.open_cap
        if cap is None or cap is OpenCap.NONE:
            return None
        if cap is OpenCap.WITNESS:
            return self.challenges
        return self.open_calls

    def bulk_refusal(self, rpc: str, cls: str = "known", key: str | None = None) -> str | None:
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
    def budget_refusal(rpc: str, cls: str, budget: BulkBudget) -> str:
        share = "" if cls == "known" else f" ({cls} callers' share)"
        return (
            f"{rpc}: {budget.used} of {budget.limit} bytes of bulk request bodies in flight{share}"
        )

    def backlog_refusal(self, rpc: str, cls: str) -> str | None:
        """Why a call of class ``cls`` that got room while the node works through a
        backlog is shed after all (None: no backlog): its body would be read and
        processed between the refusals of the backlog, each step behind theirs
        (such calls, taken up early in a burst, would be the slowest admitted ones)."""
        if not self._backlogs[cls].active:
            return None
        self.bulk_backlog_shed += 1
        return f"{rpc}: node taking up a backlog of calls"

    def budget(self, cls: str) -> BulkBudget | None:
        """The byte budget of class ``cls`` (None: no byte budget)."""
        return self.class_budgets.get(cls)

    @staticmethod
    async def wait_for_room(budget: BulkBudget) -> bool:
        """Reserve a body's worth of ``budget``, waiting at most BULK_BUDGET_WAIT_S."""
        return await budget.acquire(BULK_BUDGET_WAIT_S)

    @staticmethod
    def body_timeout_s(cls: str) -> float:
        """How long an admitted call of class ``cls`` may take to send its body."""
        return BULK_BODY_TIMEOUT_S if cls == "known" else BULK_STRANGER_BODY_TIMEOUT_S

    def enter(self, cls: str, key: str | None) -> None:
        """A bulk call of class ``cls`` (of the ``signed`` class: signed by ``key``) is
        admitted to a slot."""
        self.bulk_in_flight += 1
        self.bulk_in_flight_by_class[cls] += 1
        if key is not None:
            self._signed_in_flight[key] = self._signed_in_flight.get(key, 0) + 1

    def leave(self, cls: str, key: str | None) -> None:
        """The call :meth:`enter` admitted gives its slot back."""
        self.bulk_in_flight -= 1
        self.bulk_in_flight_by_class[cls] -= 1
        if key is not None:
            left = self._signed_in_flight[key] - 1
            if left:
                self._signed_in_flight[key] = left
            else:
                del self._signed_in_flight[key]

    def finished(self, admitted_at: float | None) -> None:
        """A bulk call has ended (admitted at ``admitted_at``, None if it never was)."""
        if admitted_at is not None:
            self.pushback.completed(admitted_at)
        self.collect_now_and_then()

    def collect_now_and_then(self) -> None:
        """A full garbage collection if the last was BULK_GC_INTERVAL_S ago or more."""
        now = time.monotonic()
        if now - self._last_collection >= BULK_GC_INTERVAL_S:
            self._last_collection = now
            self.bulk_collections += 1
            gc.collect()

    def shed(self, why: str, cls: str = "known") -> int:
        """A bulk call of class ``cls`` is refused for ``why``: counted, logged now and
        then, and given its retry appointment (ms from now, see :class:`Pushback`)."""
        self.bulk_shed += 1
        self._backlogs[cls].shed()
        self.collect_now_and_then()
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
        return self.pushback.next_ms()
