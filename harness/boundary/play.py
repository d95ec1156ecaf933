"""One boundary run played out: origin commits, deliveries, the holder's gates.

:class:`Runner` holds what lasts across runs (the topology, the holder's
client, the cost accumulators, the evidence sink); :class:`RunPlayer` plays
one run's events through the in-process :class:`harness.replay.Replayer`
and adds the origin's commits, the deliveries and the holder's decisions
(the steps are described in :mod:`harness.boundary.runner`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.errors import ContractError
from contracts.evidence import verify_evidence
from contracts.head_note import SignedHead, head_digest, open_head
from contracts.heads import FoldProof, verify_fold
from contracts.hops import parse_hop
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation
from harness.arms import Arm, ArmName, ValueState
from harness.axes import RECON
from harness.boundary.records import (
    UNCONFIRMED,
    ArmCosts,
    BoundaryError,
    BoundarySettings,
    EvidenceRecord,
    RunComparison,
)
from harness.boundary.remote import RemoteOps, RemoteTopology
from harness.boundary.topology import LocalOps, NodeLost, NodeOps, NodeRef, Topology
from harness.boundary.wire import (
    HopCodec,
    decode_value,
    encode_value,
    hop_fields,
    hop_from_served,
)
from harness.events import Decision, Event, Hop, Merge, NewValue, OpEvent, Retire
from harness.fingerprint import DecisionLog
from harness.gates import GATES, Gate, GateView, Mode, evaluate, gate_modes
from harness.gates import Decision as GateDecision
from harness.lineage import HopLog, hop_bytes, merge_folded
from harness.metrics import GateCounts, RunKey
from harness.replay import Replayer, ReplayError, ReplayParams
from nodes import wire
from nodes.client import HeldFold
from nodes.custodian import statements_by_fold
from nodes.faults import FaultMode
from nodes.messages import Delivery, Outcome, RehydrationReport
from nodes.services import HeldValue
from nodes.transport import CallFailed

__all__ = ["RunPlayer", "Runner"]

_DELIVERY_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class _Fold:
    """A fold the origin committed: the exact bytes it issued.

    Head form (every fold this runner commits): ``proof`` is the fold proof
    and ``head`` the signed head of the compaction that made it; the fold is
    cumulative — it covers ``hop_ids``, every hop value ``vid`` folded so far
    at its owner — so a value carries ONE fold per origin and value it grew
    from, however many compactions it went through.
    """

    origin: str
    commitment: bytes
    obligation: bytes
    leaves: int
    proof: bytes = b""
    head: bytes = b""
    vid: int = -1
    hop_ids: tuple[str, ...] = ()
    #: custody statements for this fold (``--custody-k``; nodes.custodian)
    custody: tuple[bytes, ...] = ()

    @property
    def ident(self) -> bytes:
        return self.proof or self.commitment


@dataclass(slots=True)
class _Track:
    """The commitments a value carries and how much of its folded prefix they cover."""

    folds: tuple[_Fold, ...] = ()
    covered: int = 0


# --------------------------------------------------------------------------- views, hop logs


def _view(state: ValueState, fidelity: float | None) -> GateView:
    scores: Sequence[float] = state.vec
    if fidelity is not None:
        eff = list(state.vec)
        eff[RECON] = fidelity
        scores = eff
    return GateView(scores, state.taints, state.visible, state.folded, state.history_truncated)


class _Probe(HopLog):
    """Answers nothing; notes that a gate asked (so the holder knows it must demand)."""

    __slots__ = ("asked",)

    def __init__(self) -> None:
        super().__init__()
        self.asked = False

    def fetch(self, hop_ids: Sequence[str]) -> tuple[list[Hop], int]:
        self.asked = True
        return [], 0


class _ColdReads(HopLog):
    """The in-process cold log, read without the replay's memo (a fair in-process cost)."""

    __slots__ = ("_log",)

    def __init__(self, log: HopLog) -> None:
        super().__init__()
        self._log = log

    def fetch(self, hop_ids: Sequence[str]) -> tuple[list[Hop], int]:
        log = self._log
        return [log.get(h) for h in hop_ids], sum(log.size_of(h) for h in hop_ids)


# --------------------------------------------------------------------------- one run


class RunPlayer:
    """Plays one run: the origin's replay, commits, deliveries and the holder's gates."""

    #: True for players that override :meth:`holder_view` with the held folds.
    wants_held = False

    def __init__(
        self,
        runner: Runner,
        key: RunKey,
        events: Sequence[Event],
        params: ReplayParams,
    ) -> None:
        self.runner = runner
        self.key = key
        self.events = events
        self.params = params
        self.label = f"C{key.cadence}-{key.profile}-s{key.seed}"
        self.rep = Replayer(params)
        self.structural: tuple[Arm, ...] = (self.rep.smin, self.rep.sper)
        self.tracks: list[dict[int, _Track]] = [{}, {}]
        self.appended: dict[str, set[int]] = {}
        self.folds: dict[tuple[int, tuple[str, ...]], _Fold] = {}
        self.log = DecisionLog()
        # Served hops already parsed, by (origin, exact bytes), with their canonical
        # size: a value's folds are rehydrated again and again, and the same
        # verified bytes parse (and measure) the same.
        self.parsed: dict[tuple[str, bytes], tuple[Hop, int]] = {}
        # Each hop's JSON fragment, serialised once per run (hop ids are unique in a run).
        self.codec = HopCodec()
        self.plans: dict[ArmName, list[tuple[int, Gate, Mode, GateCounts]]] = {}
        self.decisions: dict[tuple[str, str, str], list[int]] = {}
        self._heads_seen: dict[str, SignedHead] = {}
        # (arm, gate, mode) names of each plan entry, spelled once per run
        self.plan_keys: dict[ArmName, list[tuple[str, str, str]]] = {}
        for name in (ArmName.STRUCTURAL_MIN, ArmName.STRUCTURAL_PERHOP, ArmName.PROSE):
            self.plans[name] = [
                (gi, gate, mode, GateCounts())
                for gi, gate in enumerate(GATES)
                for mode in gate_modes(gate, name.structural, params.rehydrate)
            ]
            self.plan_keys[name] = [
                (name.value, gate.name, mode.value) for _, gate, mode, _ in self.plans[name]
            ]

    def owner(self, value_id: int) -> NodeRef:
        origins: Sequence[NodeRef] = self.runner.topo.origins
        return origins[value_id % len(origins)]

    async def play(self) -> RunComparison:
        await self.runner.ops.begin_run(self.label)
        rep = self.rep
        for ev in self.events:
            before = rep.smin.n_compactions
            pre_merge: list[_Track] | None = None
            if isinstance(ev, Merge):
                pre_merge = [self._merged_track(ai, ev) for ai in range(2)]
            try:
                rep.feed(ev)
            except ReplayError as exc:
                raise BoundaryError(f"run {self.label}: {exc}") from exc
            if isinstance(ev, NewValue):
                for tracks in self.tracks:
                    tracks[ev.value_id] = _Track()
            elif isinstance(ev, Merge) and pre_merge is not None:
                for tracks, track in zip(self.tracks, pre_merge, strict=True):
                    tracks[ev.value_id] = track
            elif isinstance(ev, Retire):
                for tracks in self.tracks:
                    tracks.pop(ev.value_id, None)
            if rep.smin.n_compactions != before:
                await self._commit_new_folds()
            if isinstance(ev, Decision):
                await self._decide(ev.step, ev.value_id)
                self.runner.tick()
            elif not isinstance(ev, NewValue | OpEvent | Merge | Retire):
                raise BoundaryError(f"run {self.label}: unknown event {type(ev).__name__}")
        result = rep.result()
        rows: list[tuple[object, ...]] = [
            c.row(arm.value, gate.name, gate.gate_class.value, gate.irreversible, mode.value)
            for arm in (ArmName.STRUCTURAL_MIN, ArmName.STRUCTURAL_PERHOP, ArmName.PROSE)
            for _, gate, mode, c in self.plans[arm]
        ]
        return RunComparison(
            self.key,
            self.log.count,
            result.fingerprint,
            self.log.hexdigest(),
            result.gate_rows,
            rows,
            self.decisions,
        )

    # ----------------------------------------------------------------- origin: commits

    def _merged_track(self, ai: int, ev: Merge) -> _Track:
        """Before the merge: the inputs' commitments and the merged prefix they cover."""
        arm = self.structural[ai]
        tracks = self.tracks[ai]
        folds: dict[bytes, _Fold] = {}
        for v in ev.inputs:
            track = tracks.get(v)
            if track is None or v not in arm.values:
                raise BoundaryError(f"run {self.label}: merge input {v} at step {ev.step} unknown")
            for f in track.folds:
                folds.setdefault(f.ident, f)
        prefix = merge_folded([arm.values[v].folded for v in ev.inputs])
        return _Track(tuple(folds.values()), len(prefix.folded_hop_ids) if prefix else 0)

    async def _commit_new_folds(self) -> None:
        """Commit each value's newly folded hops (one fold per value and compaction)."""
        wanted: list[tuple[int, int, tuple[str, ...], int]] = []
        for ai, arm in enumerate(self.structural):
            tracks = self.tracks[ai]
            for vid in sorted(arm.values):
                folded = arm.values[vid].folded
                ids = folded.folded_hop_ids if folded is not None else ()
                track = tracks.get(vid)
                if track is None or len(ids) < track.covered:
                    raise BoundaryError(
                        f"run {self.label}: value {vid} lost folded hops it had committed"
                    )
                if len(ids) > track.covered:
                    wanted.append((ai, vid, ids[track.covered :], len(ids)))
        if not wanted:
            return
        runner = self.runner
        log = self.rep.log
        with runner.topo.meter.tagged(("origin", "commit")):
            # (1) hops durable at their owner first (seed 000), one append per origin
            missing: dict[str, dict[int, Hop]] = {}
            for _, vid, segment, _ in wanted:
                owner = self.owner(vid)
                have = self.appended.setdefault(owner.name, set())
                for hop_id in segment:
                    hop = log.get(hop_id)
                    if hop.step not in have:
                        missing.setdefault(owner.name, {})[hop.step] = hop
            ops = runner.ops
            for origin in runner.topo.origins:
                if origin.name in runner.lost:
                    continue
                hops = sorted(missing.get(origin.name, {}).values(), key=lambda h: h.step)
                for start in range(0, len(hops), 5000):
                    chunk = hops[start : start + 5000]
                    try:
                        await ops.append(
                            origin,
                            [json.dumps(hop_fields(h)).encode("utf-8") for h in chunk],
                            [h.step for h in chunk],
                        )
                    except NodeLost as exc:
                        runner.lose(exc.name)
                        break
                    self.appended[origin.name].update(h.step for h in chunk)
                    runner.hops_appended += len(chunk)
            # (2) then ONE compaction per origin: one signed head over the
            # (cumulative) fold of every value it compacted now
            plan: list[tuple[int, int, tuple[int, tuple[str, ...]], int]] = []
            todo: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
            for ai, vid, segment, covered in wanted:
                track = self.tracks[ai][vid]
                own = track.folds[-1] if track.folds and track.folds[-1].vid == vid else None
                key = (vid, (own.hop_ids if own is not None else ()) + segment)
                if key not in self.folds and key not in todo.get(self.owner(vid).name, []):
                    todo.setdefault(self.owner(vid).name, []).append(key)
                plan.append((ai, vid, key, covered))
            for origin in runner.topo.origins:
                # A lost origin commits nothing more: the value keeps the folds it
                # has, its new pointers stay uncovered and rehydration falls back.
                keys = todo.get(origin.name, []) if origin.name not in runner.lost else []
                while keys:
                    batch: dict[str, tuple[int, tuple[str, ...]]] = {}
                    rest: list[tuple[int, tuple[str, ...]]] = []
                    for key in keys:  # at most one fold per value ref and compaction
                        # A cumulative fold is named by its value and the hops it
                        # covers: it supersedes the value's earlier folds, so it
                        # chains to none (its record's prev is null). The seam adds
                        # what keeps runs apart where they share an epoch.
                        ref = ops.commit_ref(self.label, f"v{key[0]}.{len(key[1])}")
                        if ref in batch:
                            rest.append(key)
                        else:
                            batch[ref] = key
                    try:
                        committed = await ops.commit_compaction(
                            origin,
                            [
                                (ref, [log.get(h).step for h in key[1]], b"")
                                for ref, key in batch.items()
                            ],
                        )
                    except NodeLost as exc:
                        runner.lose(exc.name)
                        break
                    runner.heads_committed += 1
                    custody = statements_by_fold(committed.custody, committed.fold_proofs)
                    for key, proof, notes in zip(
                        batch.values(), committed.fold_proofs, custody, strict=True
                    ):
                        self.folds[key] = _Fold(
                            origin.name,
                            b"",
                            b"",
                            len(key[1]),
                            proof,
                            committed.head,
                            key[0],
                            key[1],
                            notes,
                        )
                        runner.folds_committed += 1
                    keys = rest
            for ai, vid, key, covered in plan:
                fold = self.folds.get(key)
                if fold is None:  # its origin was lost before committing it
                    continue
                track = self.tracks[ai][vid]
                kept = (
                    track.folds[:-1] if track.folds and track.folds[-1].vid == vid else track.folds
                )
                track.folds = (*kept, fold)
                track.covered = covered

    # ----------------------------------------------------------------- decision point

    async def _decide(self, step: int, vid: int) -> None:
        rep = self.rep
        window = self.params.window
        arms: list[tuple[ArmName, Arm, float | None, int]] = [
            (ArmName.GROUND_TRUTH, rep.gt, None, -1),
            (ArmName.STRUCTURAL_MIN, rep.smin, None, 0),
            (ArmName.STRUCTURAL_PERHOP, rep.sper, rep.sper.fidelity, 1),
            (ArmName.PROSE, rep.prose, None, -1),
        ]
        oracle: list[bool] = []
        line: list[str] = []
        for name, arm, fidelity, ai in arms:
            state = arm.values.get(vid)
            if state is None:
                raise BoundaryError(f"run {self.label}: decision on value {vid} that is not live")
            origin_view = _view(state, fidelity)
            folds = self.tracks[ai][vid].folds if ai >= 0 else ()
            delivery = await self._deliver(name, step, vid, origin_view, state.blob, folds)
            decoded = decode_value(delivery.value)
            if decoded.arm != name.value or decoded.value_id != vid:
                raise BoundaryError(
                    f"run {self.label}: holder received {decoded.arm}/v{decoded.value_id}"
                    f" for {name.value}/v{vid}"
                )
            if name is ArmName.GROUND_TRUTH:
                oracle = [
                    evaluate(g, decoded.view, Mode.BLIND, None, window).proceed for g in GATES
                ]
                line.append("".join("1" if o else "0" for o in oracle))
                continue
            view = decoded.view
            if self.wants_held:
                # Players that apply attestations (harness.attest) see the folds
                # the holder holds: read from its core in this process, or the
                # fold proofs and heads delivered to a node process, proven here.
                if isinstance(self.runner.topo, Topology):
                    held = self.runner.topo.holder.core.held(delivery.value_ref)
                else:
                    held = self._held_as_delivered(delivery, folds)
                view = await self.holder_view(name, step, vid, view, held)
            line.append(
                await self._judge_arm(name, step, view, origin_view, delivery, folds, oracle)
            )
        self.log.add(step, vid, "".join(line))

    def _held_as_delivered(self, delivery: Delivery, folds: tuple[_Fold, ...]) -> HeldValue:
        """What a holder process holds for ``delivery``: its folds, verified here
        (each head's signature once per run, each fold proof under its head)."""
        held: list[HeldFold] = []
        for f in folds:
            if f.proof:
                digest = head_digest(f.head)
                head = self._heads_seen.get(digest)
                if head is None:
                    head = self._heads_seen[digest] = open_head(f.head)
                vf = verify_fold(FoldProof.from_bytes(f.proof), head)
                held.append(HeldFold(vf.commitment, vf.obligation, f.proof, f.head, vf))
            else:
                c = open_statement(f.commitment, Commitment)
                o = open_statement(f.obligation, Obligation, signer=c.signer)
                held.append(HeldFold(c, o, f.commitment, f.obligation))
        return HeldValue(delivery, tuple(held))

    async def holder_view(
        self, name: ArmName, step: int, vid: int, view: GateView, held: HeldValue
    ) -> GateView:
        """The view the holder's gates decide on: the delivered one here; a
        player that applies attestations (:mod:`harness.attest`) overrides it."""
        return view

    async def _deliver(
        self,
        arm: ArmName,
        step: int,
        vid: int,
        view: GateView,
        blob: str | None,
        folds: tuple[_Fold, ...],
    ) -> Delivery:
        """Origin → (relays →) holder; returns what the holder acknowledged holding."""
        runner = self.runner
        topo = runner.topo
        owner = self.owner(vid)
        path: list[NodeRef] = [owner, *topo.relays, topo.holder]
        # One ref per (arm, value) across runs: the holder keeps the latest delivery
        # of each, so what it holds stays bounded by one run's values.
        value_ref = runner.ops.delivery_ref(arm.value, vid)
        delivery = Delivery(
            value_ref,
            encode_value(arm.value, vid, view, blob, self.codec),
            tuple(f.commitment for f in folds if not f.proof),
            tuple(f.obligation for f in folds if not f.proof),
            owner.node_id,
            tuple(f.proof for f in folds if f.proof),
            tuple(dict.fromkeys(f.head for f in folds if f.proof)),
            tuple(dict.fromkeys(n for f in folds for n in f.custody)),
        )
        costs = self.runner.costs(arm)
        with topo.meter.tagged((arm.value, "delivery")):
            start = time.perf_counter()
            try:
                # Heads the next node acknowledged before travel as their digests.
                # No receipt is asked for: nothing here cites one (design, "Sign
                # where it carries information").
                sent = await runner.ops.deliver(path, delivery, _DELIVERY_TIMEOUT_S)
            except (CallFailed, NodeLost) as exc:
                raise BoundaryError(
                    f"run {self.label}: delivering {value_ref} at step {step} failed: {exc}"
                ) from exc
            except ContractError as exc:
                raise BoundaryError(f"delivery of {value_ref} to {path[1].name}: {exc}") from exc
            costs.delivery_latencies.append(time.perf_counter() - start)
        costs.decisions += 1
        costs.value_bytes += len(delivery.value)
        # Statement bytes as they cross the wire: the protobuf fields they add.
        statement_bytes = wire.delivery_statement_size(sent)
        costs.statement_bytes += statement_bytes
        per = self.runner.delivery_by_cadence.setdefault((self.key.cadence, arm.value), [0, 0, 0])
        per[0] += 1
        per[1] += len(delivery.value)
        per[2] += statement_bytes
        costs.commitments_delivered += len(folds)
        return delivery

    async def _judge_arm(
        self,
        name: ArmName,
        step: int,
        view: GateView,
        origin_view: GateView,
        delivery: Delivery,
        folds: tuple[_Fold, ...],
        oracle: list[bool],
    ) -> str:
        window = self.params.window
        plan = self.plans[name]
        rehydrate = Mode.REHYDRATE
        # A rehydrate-mode gate is first evaluated with a probe log: if it did not
        # ask for hops, that decision is final (evaluate is pure and never read
        # the log); if it asked, the holder must demand the folds.
        probed: dict[int, GateDecision] = {}
        needs: set[int] = set()
        for gi, gate, mode, _ in plan:
            if mode is rehydrate:
                probe = _Probe()
                d = evaluate(gate, view, mode, probe, window)
                if probe.asked:
                    needs.add(gi)
                else:
                    probed[gi] = d
        costs = self.runner.costs(name)
        fetched: HopLog | None = None
        rehydrate_started = 0.0
        if needs:
            rehydrate_started = time.perf_counter()
            fetched = await self._rehydrate(name, step, view, delivery.value_ref, folds)
        tokens: list[str] = []
        boundary: list[GateDecision] = []
        for gi, gate, mode, counts in plan:
            if mode is rehydrate and gi in needs:
                if fetched is None:
                    d = GateDecision(False)  # fallback to polarity: both polarities block
                else:
                    d = evaluate(gate, view, mode, fetched, window)
            elif mode is rehydrate:
                d = probed[gi]
            else:
                d = evaluate(gate, view, mode, None, window)
            boundary.append(d)
            counts.add(d.proceed, oracle[gi], d.lookups, d.bytes_read)
            tokens.append("1" if d.proceed else "0")
            if d.lookups:
                tokens.append(f"({d.lookups},{d.bytes_read})")
        if needs:
            costs.rehydration_latencies.append(time.perf_counter() - rehydrate_started)
        # The same decisions in-process (cold log, same view), timed, for the comparison.
        cold = _ColdReads(self.rep.log)
        inproc_started = time.perf_counter()
        local = [
            evaluate(gate, origin_view, mode, cold if mode is rehydrate else None, window)
            for _, gate, mode, _ in plan
        ]
        inproc_elapsed = time.perf_counter() - inproc_started
        if needs:
            costs.inproc_rehydrations += 1
            costs.inproc_latencies.append(inproc_elapsed)
        keys = self.plan_keys[name]
        for (gi, _, mode, _), key, b, d_local in zip(plan, keys, boundary, local, strict=True):
            rec = self.decisions.get(key)
            if rec is None:
                rec = self.decisions[key] = [0, 0, 0, 0, 0]
            rec[0] += 1
            rec[1] += d_local.proceed
            rec[2] += b.proceed
            rec[3] += d_local.proceed != b.proceed
            rec[4] += mode is rehydrate and gi in needs and fetched is None
        return "".join(tokens)

    async def _rehydrate(
        self, name: ArmName, step: int, view: GateView, value_ref: str, folds: tuple[_Fold, ...]
    ) -> HopLog | None:
        """Demand the value's folds from their origins; the verified hops, or None."""
        runner = self.runner
        topo = runner.topo
        costs = runner.costs(name)
        runner.context = (self.label, step, name.value)
        with topo.meter.tagged((name.value, "rehydrate")):
            report = await runner.ops.rehydrate(value_ref)
        costs.rehydrations += 1
        costs.demand_rpcs += report.demand_rpcs
        costs.origins_asked += len(report.outcomes)
        costs.origins_named += len({f.origin for f in folds})
        for o in report.outcomes:
            label = o.outcome.value + ("_cleared" if o.cleared else "")
            if o.outcome is Outcome.UNANSWERED and not o.cleared and not o.evidence_path:
                # Silence no witness confirmed: the gate fell back, but silence is never
                # proof, so the holder wrote and stored nothing; counted here only.
                label = UNCONFIRMED
            key = (topo.name_of(o.origin), label)
            runner.outcomes[key] = runner.outcomes.get(key, 0) + 1
        costs.hops_verified += len(report.hops)
        fetched = self._verified_log(report) if report.complete else None
        folded = view.folded
        if fetched is not None and folded is not None and not fetched.covers(folded.folded_hop_ids):
            fetched = None  # served folds do not cover the pointers: cannot decide on them
        if fetched is None:
            costs.failed_rehydrations += 1
        return fetched

    def _verified_log(self, report: RehydrationReport) -> FetchedLog | None:
        log = FetchedLog()
        parsed = self.parsed
        add = log.add
        for h in report.hops:
            known = parsed.get((h.origin, h.hop))
            if known is None:
                try:
                    fields = parse_hop(h.hop, origin=h.origin)
                    fields.pop("origin")
                    fields.pop("epoch")
                    hop = hop_from_served(fields, f"hop {h.leaf_index} of {h.commitment[:12]}…")
                except (ContractError, ValueError):
                    return None
                if len(parsed) >= _PARSED_HOPS:
                    parsed.clear()
                known = parsed[(h.origin, h.hop)] = (hop, hop_bytes(hop))
            add(*known)
        return log


#: Parsed served hops a run keeps (then it starts over): bounds the cache's memory.
_PARSED_HOPS = 65_536


class FetchedLog(HopLog):
    """Hops the holder received and verified, as a hop log its gates can read."""

    __slots__ = ()

    def add(self, hop: Hop, size: int) -> None:
        """Append ``hop`` with its canonical size (:func:`harness.lineage.hop_bytes`),
        known from when it was first parsed: a fresh log per rehydration would
        otherwise serialise every hop a gate reads again. A hop already held
        (the same hop served under two folds) is kept once."""
        hop_id = hop.hop_id
        if hop_id not in self._hops:
            self._hops[hop_id] = hop
            self._bytes[hop_id] = size + self._framing

    def __contains__(self, hop_id: object) -> bool:
        return str(hop_id) in self._hops

    def covers(self, hop_ids: Iterable[str]) -> bool:
        """Whether every one of ``hop_ids`` is held (one set comparison, not a lookup each)."""
        return self._hops.keys() >= set(hop_ids)


# --------------------------------------------------------------------------- the runner


class Runner:
    """What lasts across the runs of a slice: nodes, the calls on them, costs, evidence."""

    def __init__(
        self,
        topo: Topology | RemoteTopology,
        settings: BoundarySettings,
        bar: Any,
        evidence_dir: Path | None = None,
    ) -> None:
        self.topo = topo
        self.settings = settings
        self.bar = bar
        self.arm_costs: dict[str, ArmCosts] = {a.value: ArmCosts() for a in ArmName}
        self.evidence: list[EvidenceRecord] = []
        self.outcomes: dict[tuple[str, str], int] = {}
        self.folds_committed = 0
        self.heads_committed = 0
        self.delivery_by_cadence: dict[tuple[int, str], list[int]] = {}
        self.hops_appended = 0
        self.context: tuple[str, int, str] = ("", 0, "")
        #: nodes that stopped answering during the slice (no longer counted as correct)
        self.lost: set[str] = set()
        self.ops: NodeOps
        if isinstance(topo, RemoteTopology):
            self.ops = RemoteOps(
                topo,
                steps=settings.steps,
                deadline_ms=settings.deadline_ms,
                reasks=settings.reasks,
                evidence_dir=evidence_dir,
                sink=self._on_evidence,
                on_lost=self.lose,
            )
        else:
            self.ops = LocalOps(
                topo,
                reasks=settings.reasks,
                cache=settings.holder_cache,
                evidence_dir=evidence_dir,
                sink=self._on_evidence,
            )

    def costs(self, arm: ArmName) -> ArmCosts:
        return self.arm_costs[arm.value]

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def lose(self, name: str) -> None:
        """``name`` stopped answering: it commits nothing more and is no longer correct."""
        if name in self.lost:
            return
        self.lost.add(name)
        key = (name, "lost")
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def correct_ids(self) -> set[str]:
        return {
            n.node_id
            for n in self.topo.nodes
            if n.fault is FaultMode.NONE and n.name not in self.lost
        }

    async def _on_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None:
        # the run's clock (a simulation's virtual one) where the holder is in this process
        now = (
            self.topo.holder.core.now_ms()
            if isinstance(self.topo, Topology)
            else int(time.time() * 1000)
        )
        verified = False
        try:
            verdict = verify_evidence(body, now=now + 60_000)
            verified = verdict.accused == accused and verdict.kind.value == kind
        except ContractError:
            verified = False
        run, step, arm = self.context
        self.evidence.append(
            EvidenceRecord(
                run,
                step,
                arm,
                kind,
                accused,
                self.topo.name_of(accused),
                verified,
                accused in self.correct_ids(),
                path,
            )
        )
