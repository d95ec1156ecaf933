"""Fault modes a node can be started in, for tests and experiments.

A faulty node is a real node that misbehaves in exactly one way when it is
asked to serve (``Serve.Demand``/``DemandStream``); everything else it does
faithfully, so the misbehaviour is the only thing a holder can attribute.

==============  ============================================================
mode            what the node does on a demand                 holder sees
==============  ============================================================
``none``        serves faithfully                              served
``refuse``      signs a refusal (reason ``refused``) before    refused (proof)
                ``serve_until``
``tamper``      serves the hops with one byte flipped, in a    bad_data (proof)
                receipt it signs
``equivocate``  at commit, also signs a second commitment for  equivocation
                the same fold key with another root; serves    (proof)
                that one's hops
``slow``        answers after ``fault_delay_ms``               served if within
                                                               the deadline,
                                                               else unanswered
``drop``        never answers (holds the call until the       unanswered,
                caller's deadline cancels it)                  witness-confirmed
``crash``       exits the process as soon as a demand arrives  unanswered
==============  ============================================================
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["CRASH_EXIT_CODE", "FaultMode", "FaultPlan", "tamper_bytes"]

#: Exit status of a node that crashed on purpose (``crash`` mode).
CRASH_EXIT_CODE = 70


class FaultMode(StrEnum):
    NONE = "none"
    REFUSE = "refuse"
    TAMPER = "tamper"
    EQUIVOCATE = "equivocate"
    SLOW = "slow"
    DROP = "drop"
    CRASH = "crash"


def _exit_now() -> None:
    # os._exit, not sys.exit: a crash must not run cleanup, flush or shutdown.
    os._exit(CRASH_EXIT_CODE)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The fault a node runs with; ``crash`` is injectable so in-process tests survive it."""

    mode: FaultMode = FaultMode.NONE
    delay_ms: int = 0
    crash: Callable[[], None] = field(default=_exit_now, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.delay_ms < 0:
            raise ValueError(f"fault delay must be >= 0 ms, got {self.delay_ms}")
        if self.mode is FaultMode.SLOW and self.delay_ms == 0:
            raise ValueError("fault mode 'slow' needs a delay > 0 ms")

    async def before_serving(self) -> None:
        """Apply the timing faults; returns when (and if) the node should answer."""
        if self.mode is FaultMode.CRASH:
            self.crash()
            # An injected crash hook that returns: behave as a dead peer would.
            await asyncio.Event().wait()
        elif self.mode is FaultMode.DROP:
            await asyncio.Event().wait()  # cancelled by the caller's deadline
        elif self.mode is FaultMode.SLOW:
            await asyncio.sleep(self.delay_ms / 1000.0)


def tamper_bytes(data: bytes) -> bytes:
    """The same hop with its last byte flipped: still well-formed length, wrong hash."""
    if not data:
        return b"\x00"
    return data[:-1] + bytes([data[-1] ^ 0x01])
