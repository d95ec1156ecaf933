"""A holder re-tests its standing suspicions on a schedule, until each clears or expires.

A suspicion (``unanswered``, or ``busy``: :mod:`nodes.noanswer`) is cleared by
any later receipt of the origin for the same obligation
(:meth:`nodes.suspicions.Suspicions.clear_suspicions`). Without a re-test that
receipt only comes if the value happens to be rehydrated again, so an origin
that was cut off or overloaded for a minute could stay suspected for as long
as the obligation runs. The :class:`Retester` asks instead.

Schedule, per stored suspicion (the same for every node; docs/security.md,
"No answer"): the first re-test :data:`RETEST_FIRST_S` after the node first
sees the record, then the wait doubles after each re-test that brings no
receipt, up to :data:`RETEST_MAX_S`. It stops when the record is cleared or
its obligation's ``serve_until`` has passed (the origin owes no answer after
it; the record stands as it was). An origin that recovers is therefore asked
again at most :data:`RETEST_MAX_S` (plus one poll and one demand) after it
does: well inside the minute the design allows for clearing.

A re-test is the witness's own demand (:meth:`nodes.client.Holder.witness`:
a fresh demand signed by this node, sent to the endpoint the origin signed),
so it is judged by the same rule as every other demand; the receipt, if
any, is handed to ``clear_suspicions``, which clears only what it verifiably
clears (:func:`contracts.evidence.verify_clearing`). At most
:data:`RETEST_PER_PASS` re-tests run per pass, one after another: the cost
to the node is bounded however many suspicions it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.evidence import Evidence, cited_fold
from contracts.rules import expired
from nodes._periodic import PeriodicTask
from nodes.client import challenged_obligation
from nodes.errors import NodeError
from nodes.store import EvidenceRecord, StoreError

if TYPE_CHECKING:
    from nodes.services import NodeCore

__all__ = ["RETEST_FIRST_S", "RETEST_MAX_S", "RETEST_PER_PASS", "RETEST_POLL_S", "Retester"]

#: The first re-test of a suspicion, after the node first sees it.
RETEST_FIRST_S = 1.0
#: The longest wait between two re-tests of one suspicion (the wait doubles up to it).
RETEST_MAX_S = 15.0
#: How often the retester looks for re-tests that are due.
RETEST_POLL_S = 0.5
#: Re-tests per pass at most (the rest wait for the next pass).
RETEST_PER_PASS = 16

_log = structlog.get_logger("provnet.retest")


def _statements(record: EvidenceRecord) -> tuple[bytes, bytes]:
    """(commitment, obligation) as a witness is given them: a per-fold record's own
    envelopes, or (head-bound) the fold proof and the signed head."""
    e = Evidence.from_bytes(record.body)
    if e.obligation is not None and isinstance(e.commitment, Envelope):
        return e.commitment.to_bytes(), e.obligation.to_bytes()
    if e.proof is None or not isinstance(e.commitment, bytes):
        raise ContractError(f"suspicion {record.digest[:16]}… names no obligation")
    return cited_fold(e.proof).to_bytes(), e.commitment


class Retester(PeriodicTask):
    """Re-tests ``core``'s standing suspicions (module docstring) in a task of its own."""

    # A bug in one pass must not end the re-tests: standing suspicions would
    # then never clear unasked.
    survive_bugs = True
    crash_event = "suspicion_retest_pass_crashed"

    def __init__(
        self,
        core: NodeCore,
        *,
        first_s: float = RETEST_FIRST_S,
        max_s: float = RETEST_MAX_S,
        poll_s: float = RETEST_POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < first_s <= max_s or poll_s <= 0:
            raise ValueError(
                f"re-test schedule {first_s}..{max_s} s (poll {poll_s} s) must be positive,"
                " first <= max"
            )
        super().__init__("suspicion-retest", poll_s)
        self._core = core
        self.first_s = first_s
        self.max_s = max_s
        self._clock = clock
        #: Record digest → (when its next re-test is due, the wait after that one).
        self._due: dict[str, tuple[float, float]] = {}
        #: Re-tests made, and suspicions they cleared, since start.
        self.retests = 0
        self.cleared = 0

    async def run_once(self) -> int:
        """The re-tests due now (at most RETEST_PER_PASS); how many were made."""
        now = self._clock()
        records = await self._core.standing_suspicions()
        standing = {r.digest for r in records}
        for digest in [d for d in self._due if d not in standing]:
            del self._due[digest]  # cleared (or gone): its schedule with it
        made = 0
        for record in records:
            if made >= RETEST_PER_PASS:
                break
            due, wait = self._due.setdefault(record.digest, (now + self.first_s, self.first_s))
            if due > now:
                continue
            made += 1
            self.retests += 1
            if await self._retest(record):
                continue
            wait = min(wait * 2, self.max_s)
            self._due[record.digest] = (self._clock() + wait, wait)
        return made

    async def _retest(self, record: EvidenceRecord) -> bool:
        """One re-test; True if the record needs no more (cleared or expired)."""
        core = self._core
        try:
            commitment, obligation = _statements(record)
            serve_until = challenged_obligation(commitment, obligation, core.now_ms())
            if expired(serve_until, core.now_ms()):
                _log.info("suspicion_retest_ended", evidence=record.digest[:16], why="expired")
                self._due[record.digest] = (float("inf"), self.max_s)
                return True
            result = await core.holder.witness(commitment, obligation, b"", "")
        except (ContractError, ValueError, NodeError) as exc:
            _log.warning("suspicion_retest_failed", evidence=record.digest[:16], error=str(exc))
            return False
        if not result.receipt:
            _log.info("suspicion_retested", evidence=record.digest[:16], answered=False)
            return False
        cleared = await core.clear_suspicions(record.accused, result.receipt, result.witness_demand)
        self.cleared += cleared
        _log.info("suspicion_retested", evidence=record.digest[:16], answered=True, cleared=cleared)
        return cleared > 0

    def pass_failed(self, exc: StoreError) -> None:
        _log.warning("suspicion_retest_pass_failed", error=str(exc))
