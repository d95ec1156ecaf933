"""The experiment played across the boundary: origin and holder are different nodes.

Part 5 measured rehydration inside one process: a gate dereferences the
folded-hop pointers into the cold hop log. Across an agent boundary those
pointers dangle; the design's fix (design.md, "Across the boundary") is that
folded hops travel as a signed **commitment** plus a **serving obligation**,
so the holder can demand them from the *named* origin, verify them, and —
when the origin does not serve — fall back and name it.

One run here is one in-process run (same events, same
:class:`harness.replay.Replayer`, spec §5) with two agents added:

- the **origin** (the agent that remembers) owns the hop log and compacts.
  After each compaction it commits every newly folded run of hops of each
  structural arm's live values as a fold on its node (hops appended and
  durable → signed commitment + obligation, seed 000). A merged value
  inherits its inputs' commitments, so it carries several — from several
  origins when ``origins > 1`` (value ``v`` is owned by origin ``v mod k``).
  The two structural arms fold identical lineage (same K, same steps), so a
  fold both produce is committed once and carried by both.
- at each decision point the value's origin **delivers** each arm's value to
  the holder (``Deliver``; through relays with ``Forward`` for a chain
  A → B → C, the obligation travelling with it, S7): ground_truth with its
  whole lineage, the structural arms compacted with their commitments and
  obligations, prose as its blob (:mod:`harness._boundary_wire`).
- the **holder** decodes the value and runs the nine gates in every mode. A
  rehydrate-mode gate that needs the folded hops gets them from one
  :meth:`nodes.client.Holder.rehydrate` per arm and decision — one
  ``Serve.Demand`` per origin (the chain's holder demands from the origin
  directly) — verified against the commitments. If any origin fails
  (refuses, tampers, equivocates, is too slow, drops), the gate falls back
  to its polarity — a blocklist blocks as in degrade, an allowlist blocks —
  and the client's evidence names that origin.

Decisions are fingerprinted with the in-process scheme
(:mod:`harness.fingerprint`); lookups and bytes read in the decision log are
the in-process quantities (pointers dereferenced, bytes of the hop JSON), so
with faithful origins the boundary fingerprint equals the in-process one and
only the costs — measured separately — differ.

Outputs (``--out``): ``boundary_costs.csv``, ``boundary_decisions.csv``,
``boundary_evidence.csv``, ``boundary_meta.json``, ``boundary.md`` and
``boundary_cost_vs_flips.png``; see ``docs/boundary.md``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from contracts.errors import ContractError
from contracts.evidence import verify_evidence
from contracts.hops import parse_hop
from contracts.signed import open_statement
from contracts.statements import DeliveryReceipt
from harness._boundary_nodes import (
    NodeHandle,
    NodeSpec,
    Role,
    Topology,
    TransportKind,
    start_topology,
)
from harness._boundary_wire import (
    CryptoMeter,
    decode_value,
    encode_value,
    hop_fields,
    hop_from_served,
)
from harness.arms import Arm, ArmName, ValueState
from harness.axes import RECON
from harness.config import ExperimentConfig
from harness.events import Decision, Event, Hop, Merge, NewValue, OpEvent, Retire
from harness.fingerprint import DecisionLog, combine
from harness.gates import GATES, Gate, GateView, Mode, evaluate, gate_modes
from harness.gates import Decision as GateDecision
from harness.lineage import HopLog, merge_folded
from harness.metrics import GateCounts, RunKey
from harness.replay import Replayer, ReplayError, ReplayParams
from harness.trajectory import generate
from nodes.client import Holder, RehydrationReport
from nodes.faults import FaultMode
from nodes.services import HeldValue
from nodes.transport import CallFailed

__all__ = [
    "BOUNDARY_FAULTS",
    "ArmCosts",
    "BoundaryError",
    "BoundaryOutcome",
    "BoundarySettings",
    "EvidenceRecord",
    "RunComparison",
    "Setting",
    "overall_fingerprints",
    "run_boundary",
    "run_boundary_async",
]

#: Fault modes a boundary run can give its first origin.
BOUNDARY_FAULTS: tuple[FaultMode, ...] = (
    FaultMode.NONE,
    FaultMode.REFUSE,
    FaultMode.TAMPER,
    FaultMode.EQUIVOCATE,
    FaultMode.SLOW,
    FaultMode.DROP,
)
_DELIVERY_TIMEOUT_S = 30.0
_NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


class BoundaryError(ValueError):
    """Bad boundary settings, or a run that cannot be played (message names what)."""


class Setting(StrEnum):
    IN_PROCESS = "in_process"
    BOUNDARY = "boundary"


@dataclass(frozen=True, slots=True)
class BoundarySettings:
    """One boundary slice: which runs, on which topology, with which fault.

    ``chain`` names the delivery path: first the origin, last the holder,
    relays between. ``origins`` > 1 adds origins ``{chain[0]}2``, … that own
    a share of the values. Only the first origin runs ``fault``.
    """

    cadences: tuple[int, ...] = (25,)
    profiles: tuple[str, ...] = ("med",)
    seeds: tuple[int, ...] = (0, 1)
    steps: int = 500
    transport: TransportKind = TransportKind.MEMORY
    fault: FaultMode = FaultMode.NONE
    fault_delay_ms: int = 0
    chain: tuple[str, ...] = ("origin", "holder")
    origins: int = 1
    deadline_ms: int = 1000
    reasks: int = 1
    witness: bool = True
    holder_cache: bool = False

    def validate(self, cfg: ExperimentConfig) -> None:
        if not self.cadences or any(c < 1 for c in self.cadences):
            raise BoundaryError(f"cadences must be positive integers, got {self.cadences}")
        unknown = [p for p in self.profiles if p not in cfg.degradation_profiles]
        if not self.profiles or unknown:
            known = ", ".join(cfg.degradation_profiles)
            raise BoundaryError(f"unknown profile(s) {unknown} (known: {known})")
        if not self.seeds:
            raise BoundaryError("at least one seed is needed")
        if self.steps < 1:
            raise BoundaryError(f"steps must be >= 1, got {self.steps}")
        if self.fault not in BOUNDARY_FAULTS:
            raise BoundaryError(
                f"fault {self.fault.value!r} is not playable here (one of "
                f"{', '.join(f.value for f in BOUNDARY_FAULTS)})"
            )
        if len(self.chain) < 2:
            raise BoundaryError(f"chain needs an origin and a holder, got {','.join(self.chain)}")
        names = self.node_names()
        bad = [n for n in names if not _NODE_NAME.match(n)]
        if bad:
            raise BoundaryError(f"node names must be lower-case [a-z0-9_-], 1-32 chars: {bad}")
        if len(set(names)) != len(names):
            raise BoundaryError(f"node names must be distinct, got {', '.join(names)}")
        if self.origins < 1:
            raise BoundaryError(f"origins must be >= 1, got {self.origins}")
        if self.deadline_ms < 1 or self.reasks < 0:
            raise BoundaryError("deadline_ms must be >= 1 and reasks >= 0")

    @property
    def effective_delay_ms(self) -> int:
        """``slow`` without a delay: twice the promised deadline (always too slow)."""
        if self.fault is FaultMode.SLOW and self.fault_delay_ms <= 0:
            return 2 * self.deadline_ms
        return self.fault_delay_ms

    def origin_names(self) -> list[str]:
        first = self.chain[0]
        return [first] + [f"{first}{i}" for i in range(2, self.origins + 1)]

    def node_names(self) -> list[str]:
        extra = ["witness"] if self.witness else []
        return [*self.origin_names(), *self.chain[1:], *extra]

    def specs(self) -> list[NodeSpec]:
        out = [
            NodeSpec(
                name,
                Role.ORIGIN,
                self.fault if i == 0 else FaultMode.NONE,
                self.effective_delay_ms if i == 0 else 0,
            )
            for i, name in enumerate(self.origin_names())
        ]
        out += [NodeSpec(name, Role.RELAY) for name in self.chain[1:-1]]
        out.append(NodeSpec(self.chain[-1], Role.HOLDER))
        if self.witness:
            out.append(NodeSpec("witness", Role.WITNESS))
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "cadences": list(self.cadences),
            "profiles": list(self.profiles),
            "seeds": list(self.seeds),
            "steps": self.steps,
            "transport": self.transport.value,
            "fault": self.fault.value,
            "fault_delay_ms": self.effective_delay_ms,
            "chain": list(self.chain),
            "origins": self.origin_names(),
            "deadline_ms": self.deadline_ms,
            "reasks": self.reasks,
            "witness": self.witness,
            "holder_cache": self.holder_cache,
        }


# --------------------------------------------------------------------------- per-run records


@dataclass(frozen=True, slots=True)
class _Fold:
    """A fold the origin committed: the exact envelope bytes it issued."""

    origin: str
    commitment: bytes
    obligation: bytes
    leaves: int


@dataclass(slots=True)
class _Track:
    """The commitments a value carries and how much of its folded prefix they cover."""

    folds: tuple[_Fold, ...] = ()
    covered: int = 0


@dataclass(slots=True)
class ArmCosts:
    """What deciding one arm across the boundary took, summed over runs."""

    decisions: int = 0
    #: bytes of the delivered values, and of the commitments + obligations riding along
    value_bytes: int = 0
    statement_bytes: int = 0
    commitments_delivered: int = 0
    delivery_latencies: list[float] = field(default_factory=list)
    rehydrations: int = 0
    rehydration_latencies: list[float] = field(default_factory=list)
    hops_fetched: int = 0
    failed_rehydrations: int = 0
    demand_rpcs: int = 0
    inproc_rehydrations: int = 0
    inproc_latencies: list[float] = field(default_factory=list)
    origins_asked: int = 0


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    run: str
    step: int
    arm: str
    kind: str
    accused: str
    accused_name: str
    verified: bool
    correct_origin: bool
    path: str


@dataclass(slots=True)
class RunComparison:
    """One run in-process and across the boundary."""

    key: RunKey
    n_decisions: int
    in_process_fingerprint: str
    boundary_fingerprint: str
    in_process_rows: list[tuple[object, ...]]
    boundary_rows: list[tuple[object, ...]]
    #: (arm, gate, mode) → [n, in-process proceeds, boundary proceeds, differ, fallbacks]
    decisions: dict[tuple[str, str, str], list[int]]

    @property
    def fingerprints_equal(self) -> bool:
        return self.in_process_fingerprint == self.boundary_fingerprint

    @property
    def rows_equal(self) -> bool:
        return self.in_process_rows == self.boundary_rows

    @property
    def label(self) -> str:
        k = self.key
        return f"{k.run_type}/C={k.cadence}/{k.profile}/seed={k.seed}"


@dataclass(slots=True)
class BoundaryOutcome:
    settings: BoundarySettings
    runs: list[RunComparison]
    arm_costs: dict[str, ArmCosts]
    wire: dict[tuple[str, str], dict[str, float]]
    evidence: list[EvidenceRecord]
    outcomes: dict[tuple[str, str], int]
    folds_committed: int
    hops_appended: int
    wall_seconds: float
    node_ids: dict[str, str]
    written: list[Path] = field(default_factory=list)

    @property
    def evidence_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.evidence:
            out[e.kind] = out.get(e.kind, 0) + 1
        return out

    @property
    def correct_accused(self) -> int:
        return sum(1 for e in self.evidence if e.correct_origin)


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


def _needs_hops(gate: Gate, view: GateView, window: int) -> bool:
    probe = _Probe()
    evaluate(gate, view, Mode.REHYDRATE, probe, window)
    return probe.asked


# --------------------------------------------------------------------------- one run


class _RunPlayer:
    """Plays one run: the origin's replay, commits, deliveries and the holder's gates."""

    def __init__(
        self,
        runner: _Runner,
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
        self.plans: dict[ArmName, list[tuple[int, Gate, Mode, GateCounts]]] = {}
        self.decisions: dict[tuple[str, str, str], list[int]] = {}
        for name, structural in (
            (ArmName.STRUCTURAL_MIN, True),
            (ArmName.STRUCTURAL_PERHOP, True),
            (ArmName.PROSE, False),
        ):
            self.plans[name] = [
                (gi, gate, mode, GateCounts())
                for gi, gate in enumerate(GATES)
                for mode in gate_modes(gate, structural, params.rehydrate)
            ]

    def owner(self, value_id: int) -> NodeHandle:
        origins = self.runner.topo.origins
        return origins[value_id % len(origins)]

    async def play(self) -> RunComparison:
        for origin in self.runner.topo.origins:
            await origin.core.store.new_epoch()  # hop ids restart every run (seed 000)
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
            (
                arm.value,
                gate.name,
                gate.gate_class.value,
                gate.irreversible,
                mode.value,
                c.n,
                c.agree,
                c.false_proceed,
                c.false_stop,
                c.proceed,
                c.oracle_proceed,
                c.lookups,
                c.bytes_read,
            )
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
                folds.setdefault(f.commitment, f)
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
            for origin in runner.topo.origins:
                hops = sorted(missing.get(origin.name, {}).values(), key=lambda h: h.step)
                for start in range(0, len(hops), 5000):
                    chunk = hops[start : start + 5000]
                    await origin.core.append(
                        [json.dumps(hop_fields(h)).encode("utf-8") for h in chunk],
                        [h.step for h in chunk],
                    )
                    self.appended[origin.name].update(h.step for h in chunk)
                    runner.hops_appended += len(chunk)
            # (2) then one signed commitment + obligation per distinct fold
            for ai, vid, segment, covered in wanted:
                fold = self.folds.get((vid, segment))
                if fold is None:
                    owner = self.owner(vid)
                    committed = await owner.core.commit_fold(
                        f"{self.label}/v{vid}", [log.get(h).step for h in segment]
                    )
                    fold = _Fold(
                        owner.name, committed.commitment, committed.obligation, len(segment)
                    )
                    self.folds[(vid, segment)] = fold
                    runner.folds_committed += 1
                track = self.tracks[ai][vid]
                track.folds = (*track.folds, fold)
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
            held = await self._deliver(name, step, vid, origin_view, state.blob, folds)
            decoded = decode_value(held.delivery.value)
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
            line.append(
                await self._judge_arm(name, step, vid, decoded.view, origin_view, held, oracle)
            )
        self.log.add(step, vid, "".join(line))

    async def _deliver(
        self,
        arm: ArmName,
        step: int,
        vid: int,
        view: GateView,
        blob: str | None,
        folds: tuple[_Fold, ...],
    ) -> HeldValue:
        """Origin → (relays →) holder; returns what the holder holds."""
        from nodes.transport import Delivery

        topo = self.runner.topo
        owner = self.owner(vid)
        path = [owner, *topo.relays, topo.holder]
        # One ref per (arm, value) across runs: the holder keeps the latest delivery
        # of each, so what it holds stays bounded by one run's values.
        value_ref = f"{arm.value}/v{vid}"
        delivery = Delivery(
            value_ref,
            encode_value(arm.value, vid, view, blob),
            tuple(f.commitment for f in folds),
            tuple(f.obligation for f in folds),
            owner.node_id,
        )
        costs = self.runner.costs(arm)
        with topo.meter.tagged((arm.value, "delivery")):
            start = time.perf_counter()
            try:
                data = await owner.core.transport.deliver(
                    path[1].address, delivery, _DELIVERY_TIMEOUT_S
                )
                for relay, nxt in itertools.pairwise(path[1:]):
                    await relay.core.forward(
                        value_ref, nxt.address, deadline=time.monotonic() + _DELIVERY_TIMEOUT_S
                    )
            except CallFailed as exc:
                raise BoundaryError(
                    f"run {self.label}: delivering {value_ref} at step {step} failed: {exc}"
                ) from exc
            try:
                receipt = open_statement(data, DeliveryReceipt, signer=path[1].node_id)
            except ContractError as exc:
                raise BoundaryError(f"delivery of {value_ref} to {path[1].name}: {exc}") from exc
            if receipt.statement.value_digest != hashlib.sha256(delivery.value).hexdigest():
                raise BoundaryError(f"{path[1].name} acknowledged another value than {value_ref}")
            costs.delivery_latencies.append(time.perf_counter() - start)
        costs.decisions += 1
        costs.value_bytes += len(delivery.value)
        costs.statement_bytes += delivery.size - len(delivery.value)
        costs.commitments_delivered += len(folds)
        return topo.holder.core.held(value_ref)

    async def _judge_arm(
        self,
        name: ArmName,
        step: int,
        vid: int,
        view: GateView,
        origin_view: GateView,
        held: HeldValue,
        oracle: list[bool],
    ) -> str:
        window = self.params.window
        plan = self.plans[name]
        needs = {
            gi
            for gi, gate, mode, _ in plan
            if mode is Mode.REHYDRATE and _needs_hops(gate, view, window)
        }
        costs = self.runner.costs(name)
        fetched: HopLog | None = None
        rehydrate_started = 0.0
        if needs:
            rehydrate_started = time.perf_counter()
            fetched = await self._rehydrate(name, step, view, held)
        tokens: list[str] = []
        boundary: list[GateDecision] = []
        for gi, gate, mode, counts in plan:
            if mode is Mode.REHYDRATE and gi in needs and fetched is None:
                d = GateDecision(False)  # fallback to polarity: both polarities block
            elif mode is Mode.REHYDRATE and gi in needs:
                d = evaluate(gate, view, mode, fetched, window)
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
            evaluate(gate, origin_view, mode, cold if mode is Mode.REHYDRATE else None, window)
            for _, gate, mode, _ in plan
        ]
        inproc_elapsed = time.perf_counter() - inproc_started
        if needs:
            costs.inproc_rehydrations += 1
            costs.inproc_latencies.append(inproc_elapsed)
        for (gi, gate, mode, _), b, d_local in zip(plan, boundary, local, strict=True):
            key = (name.value, gate.name, mode.value)
            rec = self.decisions.get(key)
            if rec is None:
                rec = self.decisions[key] = [0, 0, 0, 0, 0]
            rec[0] += 1
            rec[1] += d_local.proceed
            rec[2] += b.proceed
            rec[3] += d_local.proceed != b.proceed
            rec[4] += mode is Mode.REHYDRATE and gi in needs and fetched is None
        return "".join(tokens)

    async def _rehydrate(
        self, name: ArmName, step: int, view: GateView, held: HeldValue
    ) -> HopLog | None:
        """Demand the value's folds from their origins; the verified hops, or None."""
        runner = self.runner
        topo = runner.topo
        costs = runner.costs(name)
        witnesses = [topo.witness.address] if topo.witness is not None else []
        runner.context = (self.label, step, name.value)
        with topo.meter.tagged((name.value, "rehydrate")):
            report = await runner.client.rehydrate(
                held.delivery.value_ref, held.folds, witnesses=witnesses
            )
        costs.rehydrations += 1
        costs.demand_rpcs += report.demand_rpcs
        costs.origins_asked += len(report.outcomes)
        for o in report.outcomes:
            label = o.outcome.value + ("_cleared" if o.cleared else "")
            key = (topo.name_of(o.origin), label)
            runner.outcomes[key] = runner.outcomes.get(key, 0) + 1
        costs.hops_fetched += len(report.hops)
        fetched = self._verified_log(report) if report.complete else None
        folded = view.folded
        if (
            fetched is not None
            and folded is not None
            and any(h not in fetched for h in folded.folded_hop_ids)
        ):
            fetched = None  # served folds do not cover the pointers: cannot decide on them
        if fetched is None:
            costs.failed_rehydrations += 1
        return fetched

    def _verified_log(self, report: RehydrationReport) -> _FetchedLog | None:
        log = _FetchedLog()
        for h in report.hops:
            try:
                fields = parse_hop(h.hop, origin=h.origin)
                fields.pop("origin")
                fields.pop("epoch")
                hop = hop_from_served(fields, f"hop {h.leaf_index} of {h.commitment[:12]}…")
            except (ContractError, ValueError):
                return None
            if hop.hop_id not in log:
                log.append(hop)
        return log


class _FetchedLog(HopLog):
    """Hops the holder received and verified, as a hop log its gates can read."""

    __slots__ = ()

    def __contains__(self, hop_id: object) -> bool:
        try:
            self.get(str(hop_id))
        except KeyError:
            return False
        return True


# --------------------------------------------------------------------------- the runner


class _Runner:
    def __init__(
        self,
        topo: Topology,
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
        self.hops_appended = 0
        self.context: tuple[str, int, str] = ("", 0, "")
        holder = topo.holder.core
        self.client = Holder(
            holder.identity,
            holder.transport,
            evidence_dir=evidence_dir if evidence_dir is not None else holder.config.evidence_path,
            reasks=settings.reasks,
            on_evidence=self._on_evidence,
            cache=settings.holder_cache,
        )

    def costs(self, arm: ArmName) -> ArmCosts:
        return self.arm_costs[arm.value]

    def tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    async def _on_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None:
        holder = self.topo.holder.core
        now = holder.now_ms()
        await holder.store.add_evidence(
            digest=hashlib.sha256(body).hexdigest(),
            kind=kind,
            accused=accused,
            body=body,
            now_ms=now,
            file_path=path,
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
                accused in self.topo.correct_ids(),
                path,
            )
        )


def _tasks(
    cfg: ExperimentConfig, settings: BoundarySettings
) -> list[tuple[RunKey, list[Event], ReplayParams]]:
    out = []
    for cadence in settings.cadences:
        for profile_name in settings.profiles:
            profile = cfg.degradation_profiles[profile_name]
            for seed in settings.seeds:
                params = ReplayParams(
                    cadence=cadence,
                    keep=cfg.lineage_keep_hops,
                    window=cfg.allowlist_window,
                    penalty=cfg.reconstruction_penalty,
                    prose=cfg.prose,
                    prose_seed=seed,
                    record_curve=False,
                )
                events = generate(seed, settings.steps, cfg.decision_every, profile)
                out.append((RunKey("boundary", cadence, profile_name, seed), events, params))
    return out


async def run_boundary_async(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    *,
    work_dir: Path | None = None,
    evidence_dir: Path | None = None,
    progress: bool | None = None,
) -> BoundaryOutcome:
    """Play every run of the slice across the boundary.

    Node data lives in ``work_dir`` (default: a temporary directory removed
    afterwards); evidence files the holder writes go to ``evidence_dir``
    (default: the holder's data directory).
    """
    from tqdm import tqdm

    settings.validate(cfg)
    tasks = _tasks(cfg, settings)
    total = sum(1 for _, events, _ in tasks for e in events if isinstance(e, Decision))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="provnet-boundary-") as tmp:
        root = work_dir if work_dir is not None else Path(tmp)
        topo = await start_topology(
            root,
            settings.specs(),
            settings.transport,
            deadline_ms=settings.deadline_ms,
            reasks=settings.reasks,
        )
        bar = tqdm(
            total=total,
            desc="boundary",
            unit="decision",
            file=sys.stderr,
            disable=None if progress is None else not progress,
        )
        try:
            runner = _Runner(topo, settings, bar, evidence_dir)
            runs: list[RunComparison] = []
            with CryptoMeter(topo.meter):
                for key, events, params in tasks:
                    runs.append(await _RunPlayer(runner, key, events, params).play())
            wire = {
                tag: {
                    "rpcs": c.rpcs,
                    "failed_rpcs": c.failed_rpcs,
                    "request_bytes": c.request_bytes,
                    "response_bytes": c.response_bytes,
                    "sign_ops": c.sign_ops,
                    "verify_ops": c.verify_ops,
                    "sig_ms": c.sig_seconds * 1000.0,
                    "hash_calls": c.hash_calls,
                    "hash_leaves": c.hash_leaves,
                    "hash_ms": c.hash_seconds * 1000.0,
                }
                for tag, c in topo.meter.by_tag.items()
            }
            calls = {f"{n}:{m}": v for (n, m), v in topo.meter.calls_by_node.items()}
            wire[("calls", "by_node")] = {k: float(v) for k, v in calls.items()}
            node_ids = {n.name: n.node_id for n in topo.nodes}
        finally:
            bar.close()
            await topo.close()
    return BoundaryOutcome(
        settings,
        runs,
        runner.arm_costs,
        wire,
        runner.evidence,
        runner.outcomes,
        runner.folds_committed,
        runner.hops_appended,
        time.perf_counter() - start,
        node_ids,
    )


def run_boundary(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    out: Path | None = None,
    *,
    progress: bool | None = None,
) -> BoundaryOutcome:
    """Play the slice and (with ``out``) write the result files; see the module docstring.

    Evidence files are kept in ``out/evidence/``.
    """
    evidence_dir = out / "evidence" if out is not None else None
    outcome = asyncio.run(
        run_boundary_async(cfg, settings, evidence_dir=evidence_dir, progress=progress)
    )
    if out is not None:
        from harness._boundary_report import write_outputs

        outcome.written = write_outputs(outcome, out)
    return outcome


def overall_fingerprints(outcome: BoundaryOutcome) -> tuple[str, str]:
    """(in-process, boundary) fingerprints over all runs, in run order."""
    return (
        combine((r.label, r.in_process_fingerprint) for r in outcome.runs),
        combine((r.label, r.boundary_fingerprint) for r in outcome.runs),
    )
