"""The origin's rules, once: freshness, expiry, due time, promise bounds, and
when a holder's signature decides.

Every path that applies one of these — a lone demand and a demand batch on the
origin, a holder or witness waiting for an answer, evidence checked later, a
``CommitFold`` request and a node's own configuration — calls the function
here, so the routes cannot drift apart. Each function is pure: no I/O and no
clock; ``now`` (integer or fractional ms since the Unix epoch) is passed in.
The callers keep their own error types (``nodes`` errors are not ``contracts``
errors); these functions decide, and :func:`promise_refusal` also says why, so
every route that sets a promise refuses it in the same words.
"""

from __future__ import annotations

__all__ = [
    "DEMAND_WINDOW_MS",
    "FUTURE_SLACK_MS",
    "MAX_DEADLINE_MS",
    "MAX_SERVE_FOR_MS",
    "MIN_DEADLINE_MS",
    "MIN_SERVE_FOR_MS",
    "demand_due_ms",
    "demand_is_fresh",
    "expired",
    "holder_signature_decides",
    "promise_refusal",
    "serves_unsigned",
]

#: The documented clock skew between nodes, both ways: an origin answers a
#: demand only if its ``time`` is this close to its own clock.
DEMAND_WINDOW_MS = 30_000
#: A demand dated more than this ahead of the origin's clock raises its
#: holder's durable replay floor, so its signature always decides.
FUTURE_SLACK_MS = 500
#: The answer times (``deadline_ms``) an origin promises, on every route: its own
#: configuration and a ``CommitFold``/``CommitCompaction`` request alike. A
#: promise the node cannot keep makes an honest origin look silent, so the
#: minimum sits above the slowest answer a node gives under a flood of callers
#: (docs/security.md, "No answer"; benchmarks/bench_overload.py judges it).
MIN_DEADLINE_MS = 250
MAX_DEADLINE_MS = 60_000
#: The obligation lifetimes (``serve_until - issued_at``) an origin signs.
MIN_SERVE_FOR_MS = 1
MAX_SERVE_FOR_MS = 30 * 24 * 3_600_000


def demand_is_fresh(time_ms: int, now_ms: float) -> bool:
    """S1 (within its deadline, so only while the demand is current): a demand (or a
    demand batch) dated ``time_ms`` is answered only within ±:data:`DEMAND_WINDOW_MS`
    of the origin's clock ``now_ms``; exactly at the window's edge is still fresh."""
    return abs(time_ms - now_ms) <= DEMAND_WINDOW_MS


def expired(serve_until: int, at_ms: float) -> bool:
    """S3/S5: a signed promise (obligation or head) running until ``serve_until`` has
    expired at ``at_ms`` — at ``serve_until`` itself and after. A refusal EXPIRED is
    legitimate exactly then; before it, the origin owes the bytes."""
    return at_ms >= serve_until


def demand_due_ms(demand_time_ms: int, deadline_ms: int) -> int:
    """S4: when the answer to a demand dated ``demand_time_ms`` under an obligation
    promising ``deadline_ms`` is due; no ``unanswered`` record or witness report may
    say "no answer" before it."""
    return demand_time_ms + deadline_ms


def promise_refusal(*, deadline_ms: int | None = None, serve_for_ms: int | None = None) -> str:
    """S1 (within its deadline), S5 (hops kept while an obligation runs), S8 (never
    accuse a correct origin): why an origin does not sign a promise of ``deadline_ms``
    answer time or ``serve_for_ms`` lifetime (``serve_until - issued_at``); "" when
    every part given is within :data:`MIN_DEADLINE_MS`..:data:`MAX_DEADLINE_MS` and
    :data:`MIN_SERVE_FOR_MS`..:data:`MAX_SERVE_FOR_MS`, bounds included. A part left
    None is not part of the promise checked.

    The one check of a promise on every route: a ``CommitFold``/``CommitCompaction``
    request (remote or in-process), a node's configured defaults (flags, variables,
    files, or a ``NodeConfig`` built in-process) and an experiment's settings.
    """
    if deadline_ms is not None and not MIN_DEADLINE_MS <= deadline_ms <= MAX_DEADLINE_MS:
        return (
            f"deadline_ms {deadline_ms} is outside {MIN_DEADLINE_MS}..{MAX_DEADLINE_MS}:"
            " an origin does not promise to answer that fast or that slowly"
        )
    if serve_for_ms is not None and not MIN_SERVE_FOR_MS <= serve_for_ms <= MAX_SERVE_FOR_MS:
        return (
            f"serve_for_ms {serve_for_ms} is outside {MIN_SERVE_FOR_MS}..{MAX_SERVE_FOR_MS}"
            " (30 days): an origin does not promise to keep hops that briefly or that long"
        )
    return ""


def holder_signature_decides(time_ms: int, now_ms: int, *, bearer_under_own_head: bool) -> bool:
    """S7 (obligations are bearer instruments), design rev. 3 (sign where it carries
    information): whether the origin must verify a demand's holder signature (and so
    record its nonce).

    ``bearer_under_own_head``: every fold demanded is under one of the origin's own
    signed heads and its obligation names no holder. Such a demand is answered the
    same whoever asks, so its signature decides nothing — unless it is dated more
    than :data:`FUTURE_SLACK_MS` ahead of ``now_ms``: it would then raise the named
    holder's durable floor, which only that holder may do.
    """
    return not bearer_under_own_head or time_ms > now_ms + FUTURE_SLACK_MS


def serves_unsigned(serve_until: int, now_ms: float, *, leaf_count: int, max_leaves: int) -> bool:
    """Design rev. 3 (sign where it carries information): whether an origin answers an
    unsigned ask for a whole fold under one of its own heads with the fold's hops.

    Only while the head's promise runs (not :func:`expired`) and only for a fold of
    at most ``max_leaves`` hops, so an ask of a few bytes is answered with a bounded
    number. Anything else is answered empty, and the holder demands the fold signed,
    where the refusal or the stream it gets is signed and can decide something.
    """
    return now_ms < serve_until and 0 < leaf_count <= max_leaves  # not expired()
