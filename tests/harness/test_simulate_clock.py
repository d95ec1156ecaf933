"""The virtual loop jumps idle time, but never past a descriptor that is ready."""

from __future__ import annotations

import asyncio
import socket

from harness.simulate.clock import VirtualTimeLoop, run_virtual


def test_a_ready_descriptor_is_served_before_the_clock_jumps() -> None:
    async def main(loop: VirtualTimeLoop) -> tuple[float, float, int]:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        seen = loop.create_future()
        try:

            def readable() -> None:
                a.recv(16)
                if not seen.done():
                    seen.set_result(loop.time())

            loop.add_reader(a.fileno(), readable)
            b.send(b"x")
            # a timer far ahead, and a task that keeps callbacks ready for a while
            for _ in range(20):
                await asyncio.sleep(0)
            sleeper = asyncio.ensure_future(asyncio.sleep(100.0))
            when = await seen
            await sleeper
            return when, loop.time(), loop.jumps
        finally:
            loop.remove_reader(a.fileno())
            a.close()
            b.close()

    when, end, jumps = run_virtual(main)
    assert when == 0.0
    assert end == 100.0
    assert jumps == 1


def test_idle_time_with_only_timers_is_skipped() -> None:
    async def main(loop: VirtualTimeLoop) -> float:
        for delay in (0.5, 2.0, 3600.0):
            await asyncio.sleep(delay)
        return loop.time()

    assert run_virtual(main) == 3602.5
