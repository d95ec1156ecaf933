"""The suspicions role: evidence this node keeps, and suspicions it clears.

What this role promises. Evidence reported to the node is stored only if it
verifies with the accused origin's own key (:func:`contracts.evidence.verify_evidence`),
and a suspicion (``unanswered``) only with the witness confirmations this node's
policy requires (``min_witnesses``). Evidence the node's own holder client
records is stored with the path of its file. A stored suspicion against an
origin is marked cleared by a later receipt of that origin that answers it
(:func:`contracts.evidence.verify_clearing`), the receipt kept beside the record
so a third party can check the clearing; a suspicion stored after a receipt
that clears it is checked against the latest receipts at once. Nothing is read
from the store while nothing is suspected.
"""

from __future__ import annotations

import contextlib
from collections import deque
from pathlib import Path

from contracts._lru import BoundedCache
from contracts.canonical import sha256_hex
from contracts.errors import ContractError, NotEvidence
from contracts.evidence import EvidenceLevel, EvidenceStatus, verify_clearing, verify_evidence
from nodes import store as st
from nodes.context import NodeContext
from nodes.logging import get_logger

__all__ = ["Suspicions"]

log = get_logger(__name__)

#: Evidence kinds stored as suspicions (cleared by a later receipt, re-tested):
#: ``unanswered``, and ``busy``, the holder's record of an origin that answered
#: RESOURCE_EXHAUSTED (an ``unanswered`` record naming that status, nodes.noanswer).
_SUSPICION_KINDS = ("unanswered", "busy")
#: Receipts kept per origin (and origins kept) to check a suspicion stored after them.
_RECENT_RECEIPTS = 32
_RECENT_RECEIPT_ORIGINS = 256


class Suspicions:
    """The suspicions role of one node; see the module docstring."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.store = ctx.store
        self._suspects: set[str] | None = None  # origins with stored suspicions (lazy)
        # Suspicions stored so far (a receipt check that read the store before one
        # landed must not drop its origin from ``_suspects``), and the last receipts
        # checked per origin: a suspicion stored after a receipt that clears it (two
        # rehydrations of one value, the later one served first) is checked at once.
        self._suspicions_stored = 0
        self._recent_receipts: BoundedCache[str, deque[tuple[bytes, bytes]]] = BoundedCache(
            _RECENT_RECEIPT_ORIGINS
        )

    def suspected(self, origin: str) -> bool:
        """A suspicion against ``origin`` is stored here (as far as this run knows)."""
        return self._suspects is not None and origin in self._suspects

    async def keep_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None:
        """Store an evidence record (and where its file is) in the node's log.

        A suspicion (``unanswered``) is checked right after against the origin's
        receipts this node checked lately: a rehydration of the same value may
        have been served while this one waited out the deadline, and its receipt
        (issued after the suspected demand) clears it.
        """
        log.info("evidence_recorded", peer=accused, kind=kind, path=path or None)
        await self.store.add_evidence(
            digest=sha256_hex(body),
            kind=kind,
            accused=accused,
            body=body,
            now_ms=self.ctx.now_ms(),
            file_path=path,
        )
        if kind in _SUSPICION_KINDS:
            # Suspected once stored, not before: a receipt checked while the write
            # was in flight read the store without it.
            self._suspicions_stored += 1
            if self._suspects is not None:
                self._suspects.add(accused)
            for receipt, demand in tuple(self._recent_receipts.peek(accused) or ()):
                await self.clear_suspicions(accused, receipt, demand, remember=False)

    async def report_evidence(self, data: bytes) -> tuple[str, str, str]:
        """Accept evidence only if it verifies with the accused origin's own key.

        A suspicion (``unanswered``) is accepted only with the witness
        confirmations this node's policy requires (``min_witnesses``).
        """
        verdict = verify_evidence(
            data, now=self.ctx.now_ms(), min_witnesses=self.config.min_witnesses
        )
        if not verdict.accuses:
            raise NotEvidence(
                f"evidence against {verdict.accused[:16]}… was cleared: {verdict.reason}"
            )
        if verdict.level is EvidenceLevel.SUSPICION and (
            verdict.status is not EvidenceStatus.WITNESS_CONFIRMED
        ):
            raise NotEvidence(
                f"unanswered suspicion against {verdict.accused[:16]}… has"
                f" {len(verdict.witnesses)} of {self.config.min_witnesses} witness"
                " confirmation(s) this node requires; not stored"
            )
        kind, accused = verdict.kind.value, verdict.accused
        digest = sha256_hex(data)
        await self.store.add_evidence(
            digest=digest, kind=kind, accused=accused, body=data, now_ms=self.ctx.now_ms()
        )
        if self._suspects is not None and kind == "unanswered":
            self._suspects.add(accused)
        log.info("evidence_reported", peer=accused, kind=kind, digest=digest[:16])
        return kind, accused, digest

    async def _suspected_origins(self) -> set[str]:
        """Origins any stored suspicion (cleared or not) names: read when first needed."""
        return {
            r.accused for kind in _SUSPICION_KINDS for r in await self.store.evidence(kind=kind)
        }

    async def standing_suspicions(self) -> tuple[st.EvidenceRecord, ...]:
        """Stored suspicions not cleared yet, of every origin suspected (nodes.retest);
        no store read while nothing is suspected."""
        stored = self._suspicions_stored
        suspects = self._suspects
        if suspects is None:
            suspects = await self._suspected_origins()
            if stored == self._suspicions_stored and self._suspects is None:
                self._suspects = suspects
        records: list[st.EvidenceRecord] = []
        for origin in tuple(suspects):
            records += await self.store.uncleared_suspicions(origin)
        return tuple(records)

    async def clear_suspicions(
        self, origin: str, receipt: bytes, demand: bytes = b"", *, remember: bool = True
    ) -> int:
        """Mark stored suspicions against ``origin`` cleared by a later receipt of it.

        Each stored ``unanswered`` record is checked with
        :func:`contracts.evidence.verify_clearing`: the receipt, signed by the
        origin for the same obligation, answers ``demand`` (this node's, dated at
        or after the suspected demand on this node's clock; skew between the
        two clocks does not enter), or else is issued at or after the suspected
        demand by the origin's clock. The receipt is kept beside the record (and
        beside its file, with the demand when that decided), so a third party can
        check the clearing with ``provnet evidence verify FILE --cleared-by``.
        """
        if remember:  # kept for a suspicion stored after it (keep_evidence)
            recent = self._recent_receipts.get(origin)
            if recent is None:
                recent = deque(maxlen=_RECENT_RECEIPTS)
                self._recent_receipts.put(origin, recent)
            recent.append((receipt, demand))
        # A suspicion stored while this call reads the store is not in what it
        # read; it is checked against this receipt once stored (keep_evidence).
        stored = self._suspicions_stored
        suspects = self._suspects
        if suspects is None:
            suspects = await self._suspected_origins()
            if stored == self._suspicions_stored and self._suspects is None:
                self._suspects = suspects
        if origin not in suspects:
            return 0  # the hot path: nothing suspected of this origin
        cleared = settled = 0
        records = await self.store.uncleared_suspicions(origin)
        for record in records:
            answering = _clearing_demand(
                record.body, receipt, demand, self.ctx.now_ms() + 3_600_000
            )
            if answering is None:
                continue
            settled += 1
            if not await self.store.mark_cleared(
                record.digest, receipt=receipt, now_ms=self.ctx.now_ms()
            ):
                continue  # cleared meanwhile by another receipt
            cleared += 1
            if record.file_path:
                with contextlib.suppress(OSError):
                    Path(record.file_path + ".cleared-by").write_bytes(receipt)
                    if answering:
                        Path(record.file_path + ".cleared-by-demand").write_bytes(answering)
            log.info(
                "suspicion_cleared",
                peer=origin,
                evidence=record.digest[:16],
                receipt=sha256_hex(receipt)[:16],
            )
        if settled == len(records) and stored == self._suspicions_stored:
            suspects.discard(origin)  # nothing stands against it (its folds may be cached)
        return cleared


def _clearing_demand(body: bytes, receipt: bytes, demand: bytes, now: int) -> bytes | None:
    """How ``receipt`` clears the record ``body``: the demand it answers (the rule
    that holds whatever the clocks read), ``b""`` by the receipt alone, or None if
    it does not clear it (:func:`contracts.evidence.verify_clearing`)."""
    if demand:
        with contextlib.suppress(ContractError, ValueError):
            verify_clearing(body, receipt, now=now, demand=demand)
            return demand
    try:
        verify_clearing(body, receipt, now=now)
    except (ContractError, ValueError):
        return None
    return b""
