"""The modelled network: WAN round trips, loss and churn, on virtual time.

:class:`SimNetwork` wraps each node's outgoing in-memory transport
(:data:`harness.boundary.topology.Network`). Every call it carries waits,
on the virtual clock, half a round trip before the callee runs and half
after; nothing about the call itself changes (the callee is the real node
core, sizes and status codes are the in-memory transport's).

- **Round trips.** Each directed pair of nodes gets one base RTT, drawn
  once from a log-normal distribution (``rtt_median_ms``, ``rtt_sigma``):
  inter-region RTTs are positive, right-skewed and spread over about an
  order of magnitude, which a log-normal with sigma ≈ 0.5–0.8 around a
  median of 60–120 ms reproduces. Each call adds a jitter, uniform in
  ±``jitter`` of the base.
- **Loss.** A call is lost with probability ``loss``; a lost call is
  retransmitted after a retransmission timeout (``rto_ms``, doubling), as
  a transport protocol would — loss shows up as delay. It is a failure
  only if the caller's deadline (the node core's own ``asyncio`` timeout,
  on the same virtual clock) passes first.
- **Pace.** With ``think_s`` > 0, each delivery an origin sends waits an
  exponentially distributed think time (that mean) before it leaves: the
  time the delegating agent spends between handing values on, which is
  what spreads a cell's decisions over simulated hours.
- **Churn.** A node given an availability schedule (:class:`Availability`)
  is unreachable — ``UNAVAILABLE``, as the in-memory transport answers for
  a node that is not listening — for serve-plane calls (``Serve.Demand``,
  ``Serve.DemandStream``, ``Evidence.Challenge``) that reach it while it is
  down. Up- and downtimes are drawn from Pareto distributions (heavy
  tailed: most sessions are short, a few very long); a node that departs
  permanently is down from its departure to the end. Deliveries are not
  subject to churn: a value is delivered while its sender and receiver are
  up, and churn matters to this protocol when a holder later needs the
  origin (rehydration, challenge).

Every draw comes from a :class:`random.Random` seeded from the cell's seed
and the node names, and the calls happen in the virtual loop's
deterministic order, so a seed gives one network.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from nodes.attester import AttestationAnswer, AttestationAsk
from nodes.messages import Acknowledgement, Answer, ChallengeResult, Delivery
from nodes.transport import CallFailed, Transport, _resume

__all__ = ["Availability", "LinkModel", "SimNetwork", "address_name", "churn_schedule"]

_R = TypeVar("_R")


def _rng(*parts: object) -> random.Random:
    seed = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


@dataclass(frozen=True, slots=True)
class LinkModel:
    """How links behave: see the module docstring."""

    rtt_median_ms: float = 80.0
    rtt_sigma: float = 0.6
    jitter: float = 0.1
    loss: float = 0.0
    rto_ms: float = 1000.0
    #: the workload's pace: mean think time (exponential) before an origin's delivery leaves
    think_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Availability:
    """When a node is down: sorted, disjoint [start, end) intervals in virtual seconds."""

    down: tuple[tuple[float, float], ...] = ()

    def is_down(self, t: float) -> bool:
        i = bisect.bisect_right(self.down, (t, math.inf)) - 1
        return i >= 0 and self.down[i][0] <= t < self.down[i][1]

    def downtime(self, until: float) -> float:
        return sum(max(0.0, min(e, until) - s) for s, e in self.down if s < until)


def churn_schedule(
    rng: random.Random,
    horizon_s: float,
    *,
    up_scale_s: float,
    down_scale_s: float,
    alpha: float,
    departure_rate_per_h: float,
) -> tuple[Availability, float | None]:
    """Alternating Pareto up- and downtimes over ``horizon_s``; a permanent
    departure at an exponential time (rate per hour; None: stays)."""
    leave: float | None = None
    if departure_rate_per_h > 0:
        t_leave = rng.expovariate(departure_rate_per_h / 3600.0)
        leave = t_leave if t_leave < horizon_s else None
    down: list[tuple[float, float]] = []
    t = up_scale_s * rng.paretovariate(alpha) if up_scale_s > 0 else horizon_s
    end = leave if leave is not None else horizon_s
    while t < end and up_scale_s > 0:
        d = down_scale_s * rng.paretovariate(alpha)
        down.append((t, min(t + d, end)))
        t += d + up_scale_s * rng.paretovariate(alpha)
    if leave is not None:
        down.append((leave, math.inf))
    return Availability(tuple(down)), leave


class SimNetwork:
    """The network model for one cell; call it as a ``Network`` to wrap a node's transport."""

    def __init__(
        self,
        seed: int,
        link: LinkModel,
        availability: dict[str, Availability] | None = None,
    ) -> None:
        self.seed = seed
        self.link = link
        self.availability = availability or {}
        self._base: dict[tuple[str, str], float] = {}
        self._rng = _rng("calls", seed)
        #: serve-plane calls refused because the callee was down, per callee
        self.churn_refusals: dict[str, int] = {}
        #: calls lost (and retransmitted) on the way
        self.losses = 0
        self.calls = 0

    def __call__(self, inner: Transport, node: str) -> Transport:
        return _SimTransport(inner, self, node)

    def base_rtt_s(self, src: str, dst: str) -> float:
        key = (src, dst)
        rtt = self._base.get(key)
        if rtt is None:
            r = _rng("link", self.seed, src, dst)
            link = self.link
            rtt = link.rtt_median_ms * math.exp(link.rtt_sigma * r.gauss(0.0, 1.0)) / 1000.0
            self._base[key] = rtt
        return rtt

    def one_way_s(self, src: str, dst: str) -> float:
        """Half a round trip with its jitter, plus the retransmissions of lost tries."""
        self.calls += 1
        link = self.link
        base = self.base_rtt_s(src, dst)
        delay = base * (1.0 + link.jitter * (2.0 * self._rng.random() - 1.0)) / 2.0
        rto = link.rto_ms / 1000.0
        while link.loss > 0 and self._rng.random() < link.loss:
            self.losses += 1
            delay += rto
            rto *= 2.0
        return delay

    def think_time_s(self, node: str) -> float:
        """The pause before ``node`` sends a delivery (origins only; relays forward at once)."""
        mean = self.link.think_s
        if mean <= 0 or not node.startswith("origin"):
            return 0.0
        return self._rng.expovariate(1.0 / mean)

    def down(self, node: str) -> bool:
        avail = self.availability.get(node)
        return avail is not None and avail.is_down(asyncio.get_running_loop().time())


def address_name(address: str) -> str:
    """The node name of an in-memory address (``name.mem:1``)."""
    return address.split(".mem:", 1)[0]


#: address -> node name, for the addresses seen (a cell's few nodes per process)
_names: dict[str, str] = {}


def _name(address: str) -> str:
    name = _names[address] = address_name(address)
    return name


async def _leg(loop: asyncio.AbstractEventLoop, seconds: float, deadline: float) -> None:
    """Sleep ``seconds`` (one leg of a call) unless the call's deadline comes first:
    then wake at the deadline and raise :class:`TimeoutError`, as a timer at the
    deadline would. A timer at the deadline fires in the loop pass that ends the
    sleep whenever it is due within the loop's clock resolution of the sleep's end
    (and a tie goes to the timer), so those count as the deadline's too."""
    end = loop.time() + seconds
    if deadline < end + _resolution(loop):
        wake = loop.create_future()
        handle = loop.call_at(deadline, _wake, wake)
        try:
            await wake
        finally:
            handle.cancel()
        raise TimeoutError
    await asyncio.sleep(seconds)


def _resolution(loop: asyncio.AbstractEventLoop) -> float:
    resolution: float = getattr(loop, "_clock_resolution", 0.0)
    return resolution


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _SimTransport:
    """One node's outgoing calls through the modelled network.

    The caller's ``timeout`` bounds the whole call, network time included
    (as a gRPC deadline does): past it the call fails ``DEADLINE_EXCEEDED``.
    """

    def __init__(self, inner: Transport, net: SimNetwork, node: str) -> None:
        self.inner = inner
        self.net = net
        self.node = node

    async def _call(
        self,
        address: str,
        timeout: float,
        serve_plane: bool,
        call: Callable[[], Awaitable[_R]],
    ) -> _R:
        # What ``async with asyncio.timeout(timeout)`` around the two legs and the
        # call would do, with a timer armed only where the end is not known: a leg
        # is a sleep of a drawn length, so whether the deadline falls inside it is
        # decided when it is drawn (the task then wakes at the deadline itself, as
        # the timer would wake it); only a call that suspends runs under a timer.
        net = self.net
        dst = _names.get(address) or _name(address)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await _leg(loop, net.one_way_s(self.node, dst), deadline)
            if serve_plane and net.down(dst):
                net.churn_refusals[dst] = net.churn_refusals.get(dst, 0) + 1
                raise CallFailed("UNAVAILABLE", "no node listening (down)", address)
            coro = call()
            try:
                first = coro.send(None)  # type: ignore[attr-defined]
            except StopIteration as done:
                out: _R = done.value
            else:
                async with asyncio.timeout_at(deadline):
                    out = await _resume(coro, first)
            await _leg(loop, net.one_way_s(dst, self.node), deadline)
            return out
        except TimeoutError:
            raise CallFailed("DEADLINE_EXCEEDED", "deadline exceeded", address) from None

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        return await self._call(
            address, timeout, True, lambda: self.inner.demand(address, demands, timeout)
        )

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        return await self._call(
            address, timeout, True, lambda: self.inner.ask(address, asks, timeout)
        )

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        return await self._call(
            address, timeout, True, lambda: self.inner.demand_stream(address, demand, timeout)
        )

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        return await self._call(
            address,
            timeout,
            True,
            lambda: self.inner.challenge(
                address,
                commitment=commitment,
                obligation=obligation,
                demand=demand,
                origin_address=origin_address,
                timeout=timeout,
            ),
        )

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        think = self.net.think_time_s(self.node)
        if think > 0:
            await asyncio.sleep(think)  # before the call: not part of its deadline
        return await self._call(
            address,
            timeout,
            False,
            lambda: self.inner.deliver(address, delivery, timeout, signed),
        )

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer:
        request = getattr(self.inner, "request_attestation")  # noqa: B009 — optional method
        out: AttestationAnswer = await self._call(
            address, timeout, False, lambda: request(address, ask, timeout)
        )
        return out

    async def close(self) -> None:
        await self.inner.close()
