"""Bounded retry of the calls a node sheds before running them.

A node under load refuses bulk calls (deliveries, forwards, rehydrations,
appends, commits) with ``RESOURCE_EXHAUSTED`` before it reads their request
body (:mod:`nodes.interceptors`: the bulk-call cap, the byte budget and its
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
raised at once. And only the methods in :data:`RETRY_SAFE` are retried,
each with the reason it is safe there: all but the two commits are
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

__all__ = ["PUSHBACK_KEY", "RETRY_SAFE", "retry_shed"]

T = TypeVar("T")

#: Trailing metadata a server may set on a refusal: when to try again (ms).
PUSHBACK_KEY = "grpc-retry-pushback-ms"

#: Methods retried after a "not run" refusal, and why a duplicate is harmless.
RETRY_SAFE: dict[str, str] = {
    "/provnet.v1.Deliver/Deliver": (
        "the receiver holds a value under its value_ref: the same delivery again"
        " replaces it with the same statements and is acknowledged the same way"
    ),
    "/provnet.v1.Deliver/Forward": (
        "a forward delivers the held value unchanged to the peer: a second one is a"
        " duplicate delivery (see Deliver)"
    ),
    "/provnet.v1.Deliver/Rehydrate": (
        "a rehydration reads: its demands carry fresh nonces, and a second run over"
        " the same value asks the origins again and verifies the same hops"
    ),
    "/provnet.v1.HopLog/Append": (
        "re-appending identical hop bytes at the same seqs (given, or each hop's"
        " step) is a no-op in the store (nodes.store.HopStore.append_hops)"
    ),
    "/provnet.v1.HopLog/CommitFold": (
        "not idempotent (a second commit signs a new commitment): retried only as"
        " every call here is, after a refusal that never ran the handler"
    ),
    "/provnet.v1.HopLog/CommitCompaction": (
        "not idempotent, as CommitFold: retried only after a refusal that never ran the handler"
    ),
}

#: First pause and the cap of the exponential backoff (s), with full jitter.
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0
#: An attempt is not started with less time than this left of the deadline.
_MIN_ATTEMPT_S = 0.05
#: What a refusal that never ran the call says (the node's shedding; gRPC's own cap).
_NOT_RUN = ("shed before reading the request", "Concurrent RPC limit exceeded")


def _pushback_s(exc: grpc.aio.AioRpcError) -> float | None:
    """The server's pushback in seconds; -1.0 if it says not to retry; None if unsent."""
    trailing: Any = exc.trailing_metadata() or ()
    for key, value in trailing:
        if key == PUSHBACK_KEY:
            try:
                ms = int(value)
            except (TypeError, ValueError):
                return -1.0  # unparseable: A6 says do not retry
            return ms / 1000.0 if ms >= 0 else -1.0
    return None


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

    ``method`` must be in :data:`RETRY_SAFE`. ``attempt`` makes one new call
    with the given timeout (signing it afresh if it is signed). The last
    refusal is raised when the next attempt would not fit in the deadline.
    """
    if method not in RETRY_SAFE:
        raise ValueError(f"{method} is not a retry-safe method (nodes.retry.RETRY_SAFE)")
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
