"""The holder's restoration rule inside a boundary run (Part 6, A1–A7).

:class:`AttestPlayer` is a boundary :class:`~harness.boundary.play.RunPlayer`
whose holder, for ``structural_min``, decides on the view
:meth:`AttestPlayer.holder_view` returns:

1. **Unasked attestations** (rows ``taint_discharge``, ``dishonest``) arrive
   with the value and are applied.
2. **Restoration rule.** When the value's reconstruction is below
   ``restore_below`` and a reconstruction-coupled gate would block on it,
   and the value carries commitments:

   a. attestations the holder keeps for the value (its node's Attest
      service, ``List`` by restoration digest) are applied with the
      rehydration proofs kept beside them; one that expired in run time is
      *renewed* by the same mechanism:
   b. the holder performs a **full verified rehydration**: one signed
      demand for all leaves of every commitment, one ``Serve.Demand`` per
      origin, each answer checked with
      :func:`contracts.attest.verify_rehydration` (A4);
   c. it asks the attester, sending those proofs, and applies what comes
      back; each attestation that counted is kept through the holder's
      Attest service (``Submit``) for later decisions on the same value.

Every raise goes through :func:`contracts.attest.apply_attestations` (A1),
one bundle at a time with that bundle's own proofs; what it rejects is
counted by reason. Discharged taints (A5) are removed from the view's
taints with :func:`contracts.attest.remaining_taints` — after this file's
taint grants have been checked (:class:`harness.attest.policy.ResolvedPolicy`).

Per decision the player records, for the nine gates in blind mode, the
oracle's decision, the holder's before attestations and after — from which
:mod:`harness.attest.report` computes agreement per cycle, changed decisions
and their direction, and the death cycle.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts.attest import (
    RehydrationProof,
    apply_attestations,
    remaining_taints,
    restoration_digest,
)
from contracts.errors import ContractError
from contracts.head_note import open_head
from contracts.heads import FoldProof, verify_fold
from contracts.signed import open_statement
from contracts.statements import Attestation, Axis
from harness.arms import ArmName, ValueState
from harness.attest.attester import AttestOps
from harness.attest.bundle import AttestationBundle, BundleFile, HeldFoldBytes
from harness.attest.policy import ResolvedPolicy, run_ms, taint_kind
from harness.attest.rows import TAINT_KIND, Row
from harness.axes import AXES, RECON
from harness.boundary.play import Runner, RunPlayer
from harness.boundary.wire import hop_fields
from harness.events import Event
from harness.gates import GATES, GateClass, GateView, Mode, evaluate
from harness.metrics import RunKey
from harness.replay import ReplayParams
from nodes.attester import AttestationAsk, FoldBytes
from nodes.services import HeldValue

__all__ = ["AttestContext", "AttestPlayer", "DecisionRecord", "reason_label"]

_ARM = ArmName.STRUCTURAL_MIN
_RECON_GATES = tuple(i for i, g in enumerate(GATES) if g.gate_class is GateClass.RECONSTRUCTION)
_AXES = tuple(Axis(a) for a in AXES)
_TAG = (_ARM.value, "attest")


def reason_label(reason: str) -> str:
    """A rejection reason, reduced to the rule that rejected it."""
    checks = (
        ("discharges taints outside", "taint_not_granted"),
        ("is for value", "other_value"),
        ("expired at", "expired"),
        ("not valid before", "not_yet_valid"),
        ("was revoked", "revoked"),
        ("may not raise", "axis_not_granted"),
        ("above the ceiling", "above_ceiling"),
        ("only with receipts", "no_proof"),
        ("proof does not verify", "proof_invalid"),
        ("not rehydrated", "commitments_missing"),
        ("cites receipts other", "cites_other_receipts"),
        ("signature", "bad_signature"),
    )
    for needle, label in checks:
        if needle in reason:
            return label
    return "other"


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One structural_min decision: nine gates in blind mode, as bit strings."""

    run: str
    step: int
    cycle: int
    oracle: str
    before: str
    after: str
    raised: str  # axes raised, one letter per axis in canonical order ('1' raised)
    triggered: bool
    recon_before: float
    recon_after: float


@dataclass(slots=True)
class AttestContext:
    """What lasts across the runs of a row: policy, attester, counters, records."""

    policy: ResolvedPolicy
    restore_below: float
    ops: AttestOps | None
    row: Row = Row.NONE
    axis: Axis | None = None
    lifetime_ms: int = 0
    proofs_by_attestation: dict[str, tuple[RehydrationProof, ...]] = field(default_factory=dict)
    records: list[DecisionRecord] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    bundle_files: list[tuple[str, bytes]] = field(default_factory=list)
    samples: set[str] = field(default_factory=set)

    def sample(
        self,
        label: str,
        bundle: AttestationBundle,
        ref: str,
        folds: Sequence[FoldBytes],
        now: int,
    ) -> None:
        """Keep the first bundle of each outcome as a file a third party can check."""
        if label in self.samples or len(self.samples) >= 8:
            return
        self.samples.add(label)
        held = tuple(
            HeldFoldBytes(f.commitment, f.obligation if f.under_head else None) for f in folds
        )
        body = BundleFile(bundle, ref, held, self.policy.trust, now).to_bytes()
        self.bundle_files.append((label, body))


def _oracle_view(state: ValueState) -> GateView:
    return GateView(state.vec, state.taints, state.visible, state.folded, state.history_truncated)


def _bits(view: GateView, window: int) -> str:
    return "".join(
        "1" if evaluate(g, view, Mode.BLIND, None, window).proceed else "0" for g in GATES
    )


class AttestPlayer(RunPlayer):
    """A boundary run whose holder applies attestations for structural_min."""

    wants_held = True

    def __init__(
        self,
        runner: Runner,
        key: RunKey,
        events: Sequence[Event],
        params: ReplayParams,
        ctx: AttestContext,
    ) -> None:
        super().__init__(runner, key, events, params)
        self.ctx = ctx
        self.restoration_folds: dict[tuple[int, tuple[str, ...]], tuple[FoldBytes, str]] = {}

    async def holder_view(
        self, name: ArmName, step: int, vid: int, view: GateView, held: HeldValue
    ) -> GateView:
        if name is not _ARM:
            return view
        ctx = self.ctx
        window = self.params.window
        before = _bits(view, window)
        oracle = _bits(_oracle_view(self.rep.gt.values[vid]), window)
        triggered = False
        after_view = view
        if ctx.ops is not None:
            started = time.perf_counter()
            with self.runner.topo.meter.tagged(_TAG):
                after_view, triggered = await self._attest(step, vid, view, held)
            if after_view is not view or triggered:
                ctx.latencies.append(time.perf_counter() - started)
        raised = "".join(
            "1" if a > b else "0" for a, b in zip(after_view.scores, view.scores, strict=True)
        )
        ctx.records.append(
            DecisionRecord(
                self.label,
                step,
                step // self.params.cadence,
                oracle,
                before,
                _bits(after_view, window),
                raised,
                triggered,
                float(view.scores[RECON]),
                float(after_view.scores[RECON]),
            )
        )
        return after_view

    # ----------------------------------------------------------------- the rule

    def _unasked(
        self, ref: str, digests: tuple[str, ...], view: GateView, now: int
    ) -> AttestationAsk | None:
        """What the row's attester attests unasked on this decision (None: nothing)."""
        ctx = self.ctx
        if ctx.row is Row.TAINT_DISCHARGE:
            mine = tuple(sorted(t for t in view.tainted_by if taint_kind(t) == TAINT_KIND))
            if not mine:
                return None
            axes: tuple[tuple[Axis, float], ...] = ((Axis.VERIFICATION, 0.0),)
            return AttestationAsk(ref, digests, (), False, now, ctx.lifetime_ms, axes, mine)
        if ctx.row is Row.DISHONEST:
            axes = tuple((a, 1.0) for a in Axis)
            return AttestationAsk(ref, digests, (), False, now, ctx.lifetime_ms, axes)
        return None

    async def _attest(
        self, step: int, vid: int, view: GateView, held: HeldValue
    ) -> tuple[GateView, bool]:
        ctx = self.ctx
        ops = ctx.ops
        if ops is None:
            raise RuntimeError("attest without an attester")
        now = run_ms(step)
        ref = f"{self.label}/{held.delivery.value_ref}"
        folds = tuple(
            FoldBytes(f.commitment_bytes, f.obligation_bytes, f.fold is not None)
            for f in held.folds
        )
        digests = tuple(f.commitment.digest for f in held.folds)
        digest = restoration_digest(ref, digests)
        scores: dict[Axis, float] = {a: float(s) for a, s in zip(_AXES, view.scores, strict=True)}
        discharged: set[str] = set()

        unasked = self._unasked(ref, digests, view, now)
        if unasked is not None:
            answer = await ops.unasked(unasked)
            for issued in answer.issued:
                ctx.counts["attestations_issued"] += 1
                bundle = AttestationBundle(issued.attestation, issued.proofs)
                scores = self._apply(scores, bundle, digest, digests, now, discharged, ref, folds)

        window = self.params.window
        blocks = any(
            not evaluate(GATES[i], view, Mode.BLIND, None, window).proceed for i in _RECON_GATES
        )
        triggered = scores[Axis.RECONSTRUCTION] < ctx.restore_below and blocks
        if triggered:
            ctx.counts["restorations_needed"] += 1
            if not folds:
                ctx.counts["restorations_unfolded"] += 1
                # nothing folded yet: no receipt to cite; the origin commits the
                # value's visible lineage under one signed head (rule 2.2)
                restoration, leaf = await self._restoration_fold(vid)
                folds, digests = (restoration,), (leaf,)
                digest = restoration_digest(ref, digests)
            scores = await self._restore(scores, digest, digests, now, discharged, ref, folds)
        if discharged:
            ctx.counts["decisions_with_discharge"] += 1
        vec = [scores[a] for a in _AXES]
        if vec == list(view.scores) and not discharged:
            return view, triggered
        taints = remaining_taints(view.tainted_by, discharged)
        return (
            GateView(vec, taints, view.visible, view.folded, view.history_truncated),
            triggered,
        )

    async def _restore(
        self,
        scores: dict[Axis, float],
        digest: str,
        digests: tuple[str, ...],
        now: int,
        discharged: set[str],
        ref: str,
        folds: tuple[FoldBytes, ...],
    ) -> dict[Axis, float]:
        ctx = self.ctx
        ops = ctx.ops
        if ops is None:
            raise RuntimeError("restoration without an attester")
        below = ctx.restore_below
        # (a) attestations kept for this value, through the holder's Attest service
        for envelope in await ops.list_attestations(digest):
            a = open_statement(envelope, Attestation).digest
            kept_proofs = ctx.proofs_by_attestation.get(a, ())
            out = apply_attestations(
                scores,
                [envelope],
                value_digest=digest,
                policy=ctx.policy.trust,
                now=now,
                rehydrations=kept_proofs,
                value_commitments=digests,
            )
            ctx.counts["attestations_verified"] += 1
            if out.applied:
                ctx.counts["attestations_reused"] += 1
                scores = dict(out.scores)
                discharged.update(out.discharged)
            else:
                ctx.counts[f"held_{reason_label(out.rejected[0][1])}"] += 1
        if scores[Axis.RECONSTRUCTION] >= below:
            return scores
        # (b) the holder rehydrates every fold in full and verifies each answer
        # (A4), then (c) asks the attester with those proofs (Attest.Request)
        ctx.counts["full_rehydrations"] += 1
        ask = AttestationAsk(ref, digests, (), True, now, ctx.lifetime_ms)
        result = await ops.restore(ask, folds)
        ctx.counts["demand_rpcs"] += result.demand_rpcs
        ctx.counts["hops_rehydrated"] += result.hops
        if not result.rehydrated:
            ctx.counts["rehydrations_failed"] += 1
            return scores
        ctx.counts["folds_rehydrated"] += len(folds)
        ctx.counts["attest_requests"] += 1
        if not result.answer.issued:
            ctx.counts["attester_refused"] += 1
        c = self.runner.topo.meter.counts()
        for issued in result.answer.issued:
            ctx.counts["attestations_issued"] += 1
            bundle = AttestationBundle(issued.attestation, issued.proofs)
            ok_before = ctx.counts["attestations_applied"]
            scores = self._apply(scores, bundle, digest, digests, now, discharged, ref, folds)
            if ctx.counts["attestations_applied"] > ok_before:
                kept = await ops.submit(bundle.attestation)
                ctx.proofs_by_attestation[kept] = bundle.proofs
                c.rpcs += 1
                c.request_bytes += len(bundle.attestation)
        return scores

    def _apply(
        self,
        scores: dict[Axis, float],
        bundle: AttestationBundle,
        digest: str,
        digests: tuple[str, ...],
        now: int,
        discharged: set[str],
        ref: str,
        folds: Sequence[FoldBytes],
    ) -> dict[Axis, float]:
        """One bundle through :func:`apply_attestations`, after the taint grants."""
        ctx = self.ctx
        ctx.counts["attestations_verified"] += 1
        reason = ""
        try:
            a = open_statement(bundle.attestation, Attestation).statement
            outside = ctx.policy.taints_allowed(a.attester, a.discharged)
            if outside:
                reason = f"discharges taints outside its grant: {outside[0]}"
        except ContractError as exc:
            reason = f"signature or encoding: {exc}"
        if not reason:
            out = apply_attestations(
                scores,
                [bundle.attestation],
                value_digest=digest,
                policy=ctx.policy.trust,
                now=now,
                rehydrations=bundle.proofs,
                value_commitments=digests,
            )
            if out.applied:
                ctx.counts["attestations_applied"] += 1
                discharged.update(out.discharged)
                ctx.sample("accepted", bundle, ref, folds, now)
                return dict(out.scores)
            reason = out.rejected[0][1]
        label = reason_label(reason)
        ctx.rejected[label] += 1
        ctx.sample(f"rejected-{label}", bundle, ref, folds, now)
        return scores

    async def _restoration_fold(self, vid: int) -> tuple[FoldBytes, str]:
        """Commit a value's visible lineage at its origin, once per distinct lineage.

        For a value with nothing folded yet: its visible hops go through the
        compaction path (hops durable first, then ONE signed head over the
        fold record), so the restoration has a receipt to cite (A4). Returns
        the fold (proof and head) and its commitment digest (the record's
        leaf hash).
        """
        state = self.rep.smin.values[vid]
        seen: set[str] = set()
        hops = []
        for h in state.visible:
            if h.hop_id not in seen:
                seen.add(h.hop_id)
                hops.append(h)
        key = (vid, tuple(h.hop_id for h in hops))
        cached = self.restoration_folds.get(key)
        if cached is not None:
            return cached
        ops = self.runner.ops
        owner = self.owner(vid)
        have = self.appended.setdefault(owner.name, set())
        missing = [h for h in hops if h.step not in have]
        if missing:
            await ops.append(
                owner,
                [json.dumps(hop_fields(h)).encode("utf-8") for h in missing],
                [h.step for h in missing],
            )
            have.update(h.step for h in missing)
        ref = ops.commit_ref(self.label, f"v{vid}/restore{len(self.restoration_folds)}")
        committed = await ops.commit_compaction(owner, [(ref, [h.step for h in hops], b"")])
        self.ctx.counts["restoration_folds_committed"] += 1
        proof = committed.fold_proofs[0]
        leaf = verify_fold(FoldProof.from_bytes(proof), open_head(committed.head)).leaf_hash.hex()
        fold = (FoldBytes(proof, committed.head, True), leaf)
        self.restoration_folds[key] = fold
        return fold


def counts_of(ctx: AttestContext) -> Mapping[str, Any]:
    return {**dict(ctx.counts), **{f"rejected_{k}": v for k, v in ctx.rejected.items()}}
