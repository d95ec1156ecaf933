"""Bounded retry of the calls a node sheds before running them.

A node under load refuses bulk calls (deliveries, forwards, rehydrations,
appends, commits) with ``RESOURCE_EXHAUSTED`` before it reads their request
body (:mod:`nodes.overload`: the bulk-call cap, the byte budget and its
waiter cap, the event-loop-lag admission), and gRPC refuses calls beyond the
server's ``maximum_concurrent_rpcs`` the same way, before any handler runs.
Such a refusal means "not now", and the call had no effect: its handler
never ran. :func:`retry_shed` makes the call again after a pause — the
server's ``grpc-retry-pushback-ms`` trailing metadata if it sends one
(negative: do not retry, as gRPC's retry design A6 says), else an
exponential backoff with full jitter — until it is admitted, refused
otherwise, or the call's deadline would pass (every attempt gets what is
left of the one deadline; the total never exceeds it).

Only refusals that say the call never ran are retried: the pushback
metadata, the node's "shed before reading the request" and gRPC's
"Concurrent RPC limit exceeded". Other ``RESOURCE_EXHAUSTED`` answers
(a request over a size bound, the control-nonce cache full) are final and
raised at once. And only the methods whose policy says they may be are
retried (``retry`` in the method table, :mod:`nodes.methods`, declared in
the ``.proto`` with the reason it is safe there): all but the two commits are
idempotent, so even a mistaken "not run" costs nothing but a duplicate.

Every attempt is a new call: a signed call is signed afresh (new time and
nonce), so the node's replay check never sees the same signature twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from nodes import methods

__all__ = ["PUSHBACK_KEY", "appointment_ms", "pushback_ms", "retry_shed"]

T = TypeVar("T")

#: Trailing metadata a server may set on a refusal: when to try again (ms).
PUSHBACK_KEY = "grpc-retry-pushback-ms"

#: First pause and the cap of the exponential backoff (s), with full jitter.
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
#: An attempt is not started with less time than this left of the deadline.
_MIN_ATTEMPT_S = 0.05
#: What a refusal that never ran the call says (the node's shedding; gRPC's own cap).
_NOT_RUN = ("shed before reading the request", "Concurrent RPC limit exceeded")


def pushback_ms(exc: grpc.aio.AioRpcError) -> int | None:
    """The retry appointment a refusal carries (ms); None when it carries none; -1 when
    it carries one that is not a number >= 0 (gRPC's A6: do not retry)."""
    trailing: Any = exc.trailing_metadata() or ()
    for key, value in trailing:
        if key == PUSHBACK_KEY:
            try:
                ms = int(value)
            except (TypeError, ValueError):
                return -1
            return ms if ms >= 0 else -1
    return None


def appointment_ms(exc: grpc.aio.AioRpcError) -> int | None:
    """The appointment a refusal carries, if it is a valid one (ms), else None."""
    ms = pushback_ms(exc)
    return None if ms is None or ms < 0 else ms


def _pushback_s(exc: grpc.aio.AioRpcError) -> float | None:
    """The server's pushback in seconds; -1.0 if it says not to retry; None if unsent."""
    ms = pushback_ms(exc)
    return None if ms is None else (-1.0 if ms < 0 else ms / 1000.0)


def _pause_s(exc: grpc.aio.AioRpcError, backoff_s: float) -> float | None:
    """How long to wait before the next attempt; None: the refusal is final."""
    if exc.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    pushback = _pushback_s(exc)
    if pushback is not None:
        return None if pushback < 0 else pushback
    details = exc.details() or ""
    if not any(marker in details for marker in _NOT_RUN):
        return None
    return random.uniform(0.0, backoff_s)


async def retry_shed(method: str, attempt: Callable[[float], Awaitable[T]], timeout: float) -> T:
    """``await attempt(time_left)`` until it is not shed, within ``timeout`` seconds in all.

    ``method`` must be one the method table retries (:attr:`nodes.methods.MethodPolicy.retried`;
    ``ValueError`` otherwise). ``attempt`` makes one new call
    with the given timeout (signing it afresh if it is signed). The last
    refusal is raised when the next attempt would not fit in the deadline.
    """
    found = methods.lookup(method)
    if found is None or not found.retried:
        said = "has no policy" if found is None else f"policy says retry: {found.retry}"
        raise ValueError(f"{method} is not a retry-safe method ({said}; nodes.methods)")
    give_up = time.monotonic() + timeout
    backoff = _FIRST_BACKOFF_S
    while True:
        left = give_up - time.monotonic()
        try:
            return await attempt(max(left, 0.0))
        except grpc.aio.AioRpcError as exc:
            pause = _pause_s(exc, backoff)
            if pause is None or time.monotonic() + pause + _MIN_ATTEMPT_S > give_up:
                raise
        await asyncio.sleep(pause)
        backoff = min(backoff * 2, _MAX_BACKOFF_S)
