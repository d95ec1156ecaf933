"""The modelled network's call legs against the deadline: the same outcome, at the
same virtual time, as ``asyncio.timeout`` around the whole call."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

from harness.simulate.clock import VirtualTimeLoop, run_virtual
from harness.simulate.network import LinkModel, SimNetwork
from nodes.messages import Acknowledgement, Delivery
from nodes.transport import CallFailed, Transport


class _FixedLegs(SimNetwork):
    """A network whose legs last what the test says, in turn."""

    def __init__(self, legs: list[float]) -> None:
        super().__init__(0, LinkModel())
        self._legs = legs

    def one_way_s(self, src: str, dst: str) -> float:
        return self._legs.pop(0)


class _Inner:
    """A receiver that answers after ``call_s`` virtual seconds (0: without waiting)."""

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        if self.call_s:
            await asyncio.sleep(self.call_s)
        return Acknowledgement(0, b"receipt")


async def _reference(
    net: SimNetwork,
    address: str,
    timeout: float,
    call: Callable[[], Awaitable[Acknowledgement]],
) -> Acknowledgement:
    # the whole call under one timer, as a gRPC deadline bounds it
    try:
        async with asyncio.timeout(timeout):
            await asyncio.sleep(net.one_way_s("a", "b"))
            out = await call()
            await asyncio.sleep(net.one_way_s("b", "a"))
            return out
    except TimeoutError:
        raise CallFailed("DEADLINE_EXCEEDED", "deadline exceeded", address) from None


def _play(
    timeout: float, d1: float, call_s: float, d2: float, reference: bool
) -> tuple[str, float]:
    async def main(loop: VirtualTimeLoop) -> tuple[str, float]:
        net = _FixedLegs([d1, d2])
        inner = _Inner(call_s)
        delivery = Delivery("v", b"x", (), (), "")
        try:
            if reference:
                out = await _reference(
                    net, "b.mem:1", timeout, lambda: inner.deliver("b.mem:1", delivery, timeout)
                )
            else:
                transport: Transport = net(inner, "a")  # type: ignore[arg-type]
                out = await transport.deliver("b.mem:1", delivery, timeout)
            outcome = out.receipt.decode()
        except CallFailed as exc:
            outcome = exc.code
        # a sleeper that wakes later shows nothing overran the loop's clock
        return outcome, loop.time()

    return run_virtual(main)


def test_legs_and_call_meet_the_deadline_as_one_timer_around_the_call_would() -> None:
    timeout = 1.0
    cases = list(itertools.product((0.1, 0.5, 1.0, 1.5), (0.0, 0.2, 0.5, 0.9), (0.05, 0.5, 0.9)))
    cases += [(0.5, 0.0, 0.5), (0.3, 0.0, 0.7), (0.25, 0.5, 0.25)]  # deadline at a leg's end
    outcomes = set()
    for d1, call_s, d2 in cases:
        got = _play(timeout, d1, call_s, d2, reference=False)
        want = _play(timeout, d1, call_s, d2, reference=True)
        assert got == want, (d1, call_s, d2)
        outcomes.add(got[0])
    assert outcomes == {"receipt", "DEADLINE_EXCEEDED"}
