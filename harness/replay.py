"""Replay one event sequence through the four arms and the nine gates (spec §5–§7).

Events are processed in generation order. Each event's hop (if any) is
built once, appended to the cold hop log and applied to all four arms in the
order ground_truth, structural_min, structural_perhop, prose. Compaction
happens after a non-decision event at step s, and before a decision point
at step s, when s > 0, s % C == 0 and no compaction happened at s yet — so
a compaction at s still sees a value a Retire at s is about to remove.

At a decision point the oracle (ground_truth, blind) is computed once per
gate; every other (arm, gate, mode) is scored against it. The replay keeps
only counters, one curve row per decision and a streaming SHA-256 of the
decision log; nothing per decision survives the run otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness.arms import (
    Arm,
    ArmName,
    GroundTruthArm,
    ProseArm,
    StructuralMinArm,
    StructuralPerhopArm,
    ValueState,
)
from harness.axes import AXES, RECON
from harness.config import ProseConfig
from harness.events import Decision, Event, Hop, Merge, NewValue, OpEvent, Retire
from harness.fingerprint import DecisionLog
from harness.gates import GATES, Gate, GateClass, GateView, Mode, evaluate, gate_modes
from harness.gates import Decision as GateDecision
from harness.lineage import HopBytes, HopLog, build_hop
from harness.metrics import GateCounts
from harness.prose import MockProseChannel, ProseChannel, ProseCounters

__all__ = ["ReplayError", "ReplayParams", "Replayer", "RunResult", "replay", "replay_penalties"]


class ReplayError(ValueError):
    """An event sequence is inconsistent (e.g. an op on a value that is not live)."""


@dataclass(frozen=True, slots=True)
class ReplayParams:
    """Everything a replay needs besides the events."""

    cadence: int
    keep: int = 5
    window: int = 8
    penalty: float = 0.02
    prose: ProseConfig = field(default_factory=ProseConfig)
    prose_seed: int = 0
    #: evaluate degrade (and, with ``rehydrate``, rehydrate) on structural arms
    lineage_modes: bool = True
    rehydrate: bool = True
    record_curve: bool = True
    record_death_spiral: bool = False
    #: bytes counted per fetched hop (lab-schema trace replays: JSONL lines)
    hop_bytes: HopBytes = HopBytes.CANONICAL


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run's rows (without the run key) and its decision-log fingerprint.

    gate_rows: (arm, policy, gate_class, irreversible, mode, n, n_agree,
    n_false_proceed, n_false_stop, n_proceed, n_oracle_proceed, lookups,
    bytes_read); drift_rows: (arm, axis, n, sum_abs_err, mae); curve_rows:
    (step, cycle, n_compactions, store_reconstruction, perhop_fidelity,
    prose_reconstruction); death_rows: spec'd death-spiral decision columns.
    """

    gate_rows: list[tuple[object, ...]]
    drift_rows: list[tuple[object, ...]]
    curve_rows: list[tuple[object, ...]]
    prose: ProseCounters
    death_rows: list[tuple[object, ...]]
    fingerprint: str
    n_decisions: int


def _view(state: ValueState, fidelity: float | None) -> GateView:
    scores: Sequence[float] = state.vec
    if fidelity is not None:
        eff = list(state.vec)
        eff[RECON] = fidelity
        scores = eff
    return GateView(scores, state.taints, state.visible, state.folded, state.history_truncated)


class Replayer:
    """The replay state machine: feed events one by one, then :meth:`results`.

    ``gt``, ``smin``, ``sper``, ``prose`` (the four arms) and ``log`` (the
    cold hop log) are public so callers can inspect a state between events
    (e.g. a worked example at one decision point).

    With several ``penalties`` (the sweep), one replay serves them all:
    ground truth, the prose arm and the trajectory do not depend on the
    penalty, so they run once, and one structural_min / structural_perhop
    pair runs per penalty. :meth:`results` returns one :class:`RunResult`
    per penalty, identical to a single-penalty replay's (same rows, same
    fingerprint) — the tests check this.
    """

    def __init__(
        self,
        params: ReplayParams,
        channel: ProseChannel | None = None,
        penalties: Sequence[float] | None = None,
    ) -> None:
        self.params = params
        self.penalties = tuple(penalties) if penalties is not None else (params.penalty,)
        if not self.penalties:
            raise ValueError("a replay needs at least one penalty")
        if channel is None:
            channel = MockProseChannel(params.prose_seed, params.prose)
        self.channel = channel
        self.gt = GroundTruthArm()
        self.smins = tuple(StructuralMinArm(p, params.keep) for p in self.penalties)
        self.spers = tuple(StructuralPerhopArm(p, params.keep) for p in self.penalties)
        self.smin = self.smins[0]
        self.sper = self.spers[0]
        self.prose = ProseArm(channel)
        # spec order: ground_truth, structural_min, structural_perhop, prose (only
        # the prose arm draws random numbers, so the structural arms' order is free)
        self.arms: tuple[Arm, ...] = (self.gt, *self.smins, *self.spers, self.prose)
        self._judged: tuple[Arm, ...] = (*self.smins, *self.spers, self.prose)
        self._perhop_index = {id(a): i for i, a in enumerate(self.spers)}
        self.log = HopLog(params.hop_bytes)
        self._tips: dict[int, str] = {}
        n = len(self.penalties)
        self._decisions = [DecisionLog() for _ in range(n)]
        # Evaluation plan per judged arm: (gate index, gate, mode, counts, slot,
        # reuse). All structural arms apply the same hops, merges and
        # truncations (same K, same compaction steps) and differ only in the
        # reconstruction score, which lineage gates never read: their lineage
        # views are identical, so the first structural arm's lineage decisions
        # are reused by the others (slot) instead of recomputed.
        # tests/harness/test_replay_sharing.py checks the lineage identity at
        # every decision.
        self._plan: list[list[tuple[int, Gate, Mode, GateCounts, int, bool]]] = []
        self._arm_rows: list[list[tuple[ArmName, Gate, Mode, GateCounts]]] = []
        slots: dict[tuple[int, Mode], int] = {}
        first = self._judged[0]
        for arm in self._judged:
            entries = []
            arm_rows = []
            for gi, gate in enumerate(GATES):
                structural = arm.structural and params.lineage_modes
                for mode in gate_modes(gate, structural, params.rehydrate):
                    counts = GateCounts()
                    slot, reuse = -1, False
                    if arm.structural and gate.gate_class.is_lineage:
                        if arm is first:
                            slot = slots.setdefault((gi, mode), len(slots))
                        else:
                            slot, reuse = slots[(gi, mode)], True
                    entries.append((gi, gate, mode, counts, slot, reuse))
                    arm_rows.append((arm.name, gate, mode, counts))
            self._plan.append(entries)
            self._arm_rows.append(arm_rows)
        self._shared: list[GateDecision | None] = [None] * len(slots)
        self._drift = [[0.0] * len(AXES) for _ in self._judged]
        self._n_drift = 0
        self._curve: list[list[tuple[object, ...]]] = [[] for _ in range(n)]
        self._death: list[list[tuple[object, ...]]] = [[] for _ in range(n)]
        self._recon_gates = frozenset(
            gi for gi, g in enumerate(GATES) if g.gate_class is GateClass.RECONSTRUCTION
        )
        self._last_compaction = -1

    def _maybe_compact(self, step: int) -> None:
        cadence = self.params.cadence
        if step > 0 and step % cadence == 0 and self._last_compaction != step:
            for arm in self.arms:
                arm.compact(step)
            self._last_compaction = step

    @staticmethod
    def _live(arm: Arm, value_id: int, step: int) -> ValueState:
        state = arm.values.get(value_id)
        if state is None:
            raise ReplayError(f"event at step {step}: value {value_id} is not live")
        return state

    def feed(self, ev: Event) -> None:
        """Process one event (spec §5)."""
        if isinstance(ev, Decision):
            self._maybe_compact(ev.step)
            self._decide(ev.step, ev.value_id)
            return
        gt = self.gt
        live = self._live
        tips = self._tips
        if isinstance(ev, Retire):
            for arm in self.arms:
                live(arm, ev.value_id, ev.step)
                arm.retire(ev.value_id)
            tips.pop(ev.value_id, None)
        elif isinstance(ev, NewValue):
            _check_axis(ev.axis, ev.step)
            if ev.value_id in gt.values:
                raise ReplayError(f"event at step {ev.step}: value {ev.value_id} already exists")
            hop = build_hop(ev, ())
            _append(self.log, hop)
            tips[ev.value_id] = hop.hop_id
            for arm in self.arms:
                arm.new_value(ev, hop)
        elif isinstance(ev, OpEvent):
            _check_axis(ev.axis, ev.step)
            live(gt, ev.value_id, ev.step)
            hop = build_hop(ev, (tips[ev.value_id],))
            _append(self.log, hop)
            tips[ev.value_id] = hop.hop_id
            for arm in self.arms:
                arm.op(ev, hop)
        elif isinstance(ev, Merge):
            if ev.value_id in gt.values:
                raise ReplayError(f"event at step {ev.step}: value {ev.value_id} already exists")
            if not ev.inputs:
                raise ReplayError(
                    f"event at step {ev.step}: merge into {ev.value_id} has no inputs"
                )
            for v in ev.inputs:
                live(gt, v, ev.step)
            hop = build_hop(ev, tuple(tips[v] for v in ev.inputs))
            _append(self.log, hop)
            tips[ev.value_id] = hop.hop_id
            for arm in self.arms:
                arm.merge(ev, hop)
        else:
            raise ReplayError(f"unknown event type {type(ev).__name__}")
        self._maybe_compact(ev.step)

    def _decide(self, step: int, vid: int) -> None:
        params = self.params
        cadence = params.cadence
        window = params.window
        log = self.log
        live = self._live
        gt_state = live(self.gt, vid, step)
        oracle_view = _view(gt_state, None)
        oracle = [evaluate(g, oracle_view, Mode.BLIND, log, window).proceed for g in GATES]
        oracle_tokens = "".join(["1" if o else "0" for o in oracle])
        oracle_scores = [round(x, 6) for x in gt_state.vec]
        record_death = params.record_death_spiral
        shared = self._shared
        perhop_index = self._perhop_index
        n_compactions = self.smin.n_compactions
        arm_tokens: list[str] = []
        arm_death: list[list[tuple[object, ...]]] = []
        for ai, arm in enumerate(self._judged):
            state = live(arm, vid, step)
            k = perhop_index.get(id(arm))
            view = _view(state, self.spers[k].fidelity if k is not None else None)
            tokens: list[str] = []
            deaths: list[tuple[object, ...]] = []
            for gi, gate, mode, counts, slot, reuse in self._plan[ai]:
                if reuse:
                    d = shared[slot]
                    if d is None:
                        raise RuntimeError("a shared lineage decision was not computed first")
                else:
                    d = evaluate(gate, view, mode, log, window)
                    if slot >= 0:
                        shared[slot] = d
                counts.add(d.proceed, oracle[gi], d.lookups, d.bytes_read)
                tokens.append("1" if d.proceed else "0")
                if d.lookups:
                    tokens.append(f"({d.lookups},{d.bytes_read})")
                if record_death and mode is Mode.BLIND and gi in self._recon_gates:
                    deaths.append(
                        (
                            step,
                            step // cadence,
                            n_compactions,
                            arm.name.value,
                            gate.name,
                            gate.gate_class.value,
                            d.proceed,
                            oracle[gi],
                            view.scores[RECON],
                        )
                    )
            arm_tokens.append("".join(tokens))
            arm_death.append(deaths)
            acc = self._drift[ai]
            for j, x in enumerate(view.scores):
                acc[j] += abs(round(x, 6) - oracle_scores[j])
        self._n_drift += 1
        n = len(self.penalties)
        prose_tokens = arm_tokens[2 * n]
        prose_reconstruction = live(self.prose, vid, step).vec[RECON]
        for k in range(n):
            self._decisions[k].add(
                step, vid, oracle_tokens + arm_tokens[k] + arm_tokens[n + k] + prose_tokens
            )
            if params.record_curve:
                smin = self.smins[k]
                self._curve[k].append(
                    (
                        step,
                        step // cadence,
                        smin.n_compactions,
                        smin.store_reconstruction,
                        self.spers[k].fidelity,
                        prose_reconstruction,
                    )
                )
            if record_death:
                self._death[k].extend(arm_death[k] + arm_death[n + k] + arm_death[2 * n])

    def _rows(self, ai: int) -> list[tuple[object, ...]]:
        return [
            c.row(arm_name.value, gate.name, gate.gate_class.value, gate.irreversible, mode.value)
            for arm_name, gate, mode, c in self._arm_rows[ai]
        ]

    def _drift_rows(self, ai: int) -> list[tuple[object, ...]]:
        n = self._n_drift
        name = self._judged[ai].name.value
        return [
            (name, axis, n, total, total / n if n else 0.0)
            for axis, total in zip(AXES, self._drift[ai], strict=True)
        ]

    def results(self) -> list[RunResult]:
        """One result per penalty (call once, after the last event)."""
        n = len(self.penalties)
        out = []
        for k in range(n):
            arms = (k, n + k, 2 * n)
            out.append(
                RunResult(
                    [row for ai in arms for row in self._rows(ai)],
                    [row for ai in arms for row in self._drift_rows(ai)],
                    self._curve[k],
                    self.channel.counters,
                    self._death[k],
                    self._decisions[k].hexdigest(),
                    self._decisions[k].count,
                )
            )
        return out

    def result(self) -> RunResult:
        """The result of a single-penalty replay."""
        if len(self.penalties) != 1:
            raise ValueError("several penalties: use results()")
        return self.results()[0]


def replay(
    events: Iterable[Event],
    params: ReplayParams,
    channel: ProseChannel | None = None,
) -> RunResult:
    """Run the four arms over ``events``; see the module docstring for the order."""
    replayer = Replayer(params, channel)
    feed = replayer.feed
    for ev in events:
        feed(ev)
    return replayer.result()


def replay_penalties(
    events: Iterable[Event], params: ReplayParams, penalties: Sequence[float]
) -> list[RunResult]:
    """One replay serving several penalties; results in ``penalties`` order."""
    replayer = Replayer(params, None, penalties)
    feed = replayer.feed
    for ev in events:
        feed(ev)
    return replayer.results()


def _check_axis(axis: str | None, step: int) -> None:
    if axis is not None and axis not in AXES:
        raise ReplayError(
            f"event at step {step}: unknown axis {axis!r} (expected one of {', '.join(AXES)})"
        )


def _append(log: HopLog, hop: Hop) -> None:
    try:
        log.append(hop)
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
