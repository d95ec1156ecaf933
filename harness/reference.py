"""A deliberately straightforward implementation of the experiment spec.

This is the baseline of ``benchmarks/bench_harness.py`` and a cross-check
of the engine: it follows the spec's wording literally, with none of the
engine's shortcuts —

- the op draw is ``rng.choice(5, p=weights)`` (the engine bisects a cdf),
- the prose channel draws every score noise and taint coin with a scalar
  call (the engine batches them),
- values are records of dicts and lists, and a merge deep-copies its
  inputs' state before combining it (the engine shares immutable hops),
- the oracle is re-evaluated for every comparison, and every decision is
  kept as a record until the run ends, then aggregated.

It shares only the event and hop types, the gate rules
(:func:`harness.gates.evaluate`) and the hop log. For the same inputs it
must produce the same decision-log fingerprint and the same rows as
:func:`harness.replay.replay`; the tests check that.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.config import Profile, ProseConfig
from harness.events import AXES, Decision, Event, Hop, Merge, NewValue, Op, OpEvent, Retire
from harness.gates import GATES, GateClass, GateView, Mode, evaluate
from harness.lineage import FoldedPrefix, HopLog, build_hop
from harness.prose import FAB_FAMILIES, PROSE_SEED_OFFSET

__all__ = ["reference_generate", "reference_run"]

_OPS = [Op.SOURCE_FETCH, Op.CACHE_READ, Op.LLM_TRANSFORM, Op.TOOL_CALL, Op.MERGE]
_WEIGHTS = [0.18, 0.22, 0.30, 0.22, 0.08]


def reference_generate(seed: int, steps: int, decision_every: int, profile: Profile) -> list[Event]:
    """Spec §2, line by line."""
    rng = np.random.default_rng(seed)
    events: list[Event] = [NewValue(0, 0, False)]
    working = 0
    recents: list[int] = []
    next_id = 1
    for step in range(1, steps + 1):
        op = _OPS[rng.choice(5, p=_WEIGHTS)]
        new_working = None
        if op == Op.SOURCE_FETCH:
            unverified = bool(rng.random() < profile.p_unverified)
            events.append(NewValue(step, next_id, unverified))
            new_working = next_id
            next_id += 1
        elif op == Op.CACHE_READ:
            stale = rng.random() < profile.p_stale
            events.append(
                OpEvent(
                    step,
                    working,
                    op,
                    "freshness",
                    0.70 if stale else 0.95,
                    f"taint:stale_cache:{step}" if stale else None,
                )
            )
        elif op == Op.LLM_TRANSFORM:
            if rng.random() < profile.p_fallback:
                events.append(
                    OpEvent(step, working, op, "capability", 0.65, f"taint:fallback_model:{step}")
                )
            else:
                events.append(OpEvent(step, working, op, None, 1.0, None))
        elif op == Op.TOOL_CALL:
            if rng.random() < profile.p_flaky:
                events.append(
                    OpEvent(step, working, op, "tool_integrity", 0.65, f"taint:tool_flaky:{step}")
                )
            else:
                events.append(OpEvent(step, working, op, None, 1.0, None))
        elif not recents:
            events.append(OpEvent(step, working, op, None, 1.0, None))
        else:
            k = rng.integers(1, min(3, len(recents)) + 1)
            idx = rng.choice(len(recents), size=k, replace=False)
            picked = [recents[i] for i in sorted(idx)]
            events.append(Merge(step, next_id, (working, *picked)))
            new_working = next_id
            next_id += 1
        if new_working is not None:
            recents.append(working)
            working = new_working
            if len(recents) > 6:
                events.append(Retire(step, recents.pop(0)))
        if step % decision_every == 0:
            events.append(Decision(step, working))
    return events


@dataclass
class _Prefix:
    n_hops_folded: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)
    n_taints_folded: int = 0
    folded_hop_ids: list[str] = field(default_factory=list)


@dataclass
class _Value:
    vector: dict[str, float]
    tainted_by: set[str]
    hops: list[Hop]
    folded: _Prefix | None = None
    blob: str | None = None


@dataclass
class _Arm:
    name: str
    values: dict[int, _Value] = field(default_factory=dict)
    store_reconstruction: float = 1.0
    n_compactions: int = 0
    penalties: list[float] = field(default_factory=list)


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _apply(v: _Value, hop: Hop) -> None:
    for axis, factor in hop.axis_deltas:
        v.vector[axis] = _clip(v.vector[axis] * factor)
    for t in hop.taints_added:
        v.tainted_by.add(t)
    v.hops.append(hop)


def _truncate(v: _Value, keep: int) -> None:
    if len(v.hops) <= keep:
        return
    folded_now = v.hops[: len(v.hops) - keep]
    kept = v.hops[len(v.hops) - keep :]
    prefix = v.folded or _Prefix()
    for hop in folded_now:
        prefix.n_hops_folded += 1
        prefix.op_counts[hop.op] = prefix.op_counts.get(hop.op, 0) + 1
        prefix.n_taints_folded += len(hop.taints_added)
        prefix.folded_hop_ids.append(hop.hop_id)
    v.hops = list(kept)
    v.folded = prefix
    v.tainted_by = set().union(*(set(h.taints_added) for h in kept)) if kept else set()


def _prose_round_trip(
    rng: np.random.Generator, cfg: ProseConfig, v: _Value, step: int, counters: dict[str, int]
) -> None:
    counters["extractions"] += 1
    counters["true_taints"] += len(v.tainted_by)
    if cfg.parse_failure_rate > 0 and rng.random() < cfg.parse_failure_rate:
        counters["parse_failures"] += 1
        v.vector = dict.fromkeys(AXES, 0.0)
        v.tainted_by = set()
    else:
        v.vector = {a: _clip(v.vector[a] + rng.normal(0, cfg.sigma)) for a in AXES}
        kept = [t for t in sorted(v.tainted_by) if rng.random() < cfg.taint_recall]
        fabricated = []
        if kept:
            n_fab = rng.binomial(len(kept), min((1 - cfg.taint_precision) / cfg.taint_precision, 1))
            for i in range(n_fab):
                family = FAB_FAMILIES[rng.integers(4)]
                fabricated.append(f"taint:{family}:{step}~fab{i}")
        counters["kept"] += len(kept)
        counters["fabricated"] += len(fabricated)
        v.tainted_by = set(kept) | set(fabricated)
    v.hops = []
    v.folded = None
    v.blob = f"[prose summary of state at step {step}]"


@dataclass
class _Record:
    step: int
    value_id: int
    arm: str
    gate: str
    mode: str
    proceed: bool
    oracle: bool
    lookups: int
    bytes_read: int


def reference_run(
    events: Sequence[Event],
    cadence: int,
    *,
    keep: int = 5,
    window: int = 8,
    penalty: float = 0.02,
    prose: ProseConfig | None = None,
    prose_seed: int = 0,
    rehydrate: bool = True,
    lineage_modes: bool = True,
) -> tuple[str, list[tuple[object, ...]]]:
    """The run's fingerprint and gate rows, computed the slow, literal way."""
    cfg = prose or ProseConfig()
    prose_rng = np.random.default_rng(prose_seed + PROSE_SEED_OFFSET)
    counters = dict.fromkeys(
        ("extractions", "parse_failures", "true_taints", "kept", "fabricated"), 0
    )
    arms = [_Arm(n) for n in ("ground_truth", "structural_min", "structural_perhop", "prose")]
    log = HopLog()
    tips: dict[int, str] = {}
    records: list[_Record] = []
    compacted_at = -1

    def compact(step: int) -> None:
        nonlocal compacted_at
        if step > 0 and step % cadence == 0 and compacted_at != step:
            compacted_at = step
            for arm in arms:
                if arm.name == "structural_min":
                    arm.n_compactions += 1
                    arm.store_reconstruction *= 1 - penalty
                    for vid in sorted(arm.values):
                        v = arm.values[vid]
                        v.vector["reconstruction"] = min(
                            v.vector["reconstruction"], _clip(arm.store_reconstruction)
                        )
                        _truncate(v, keep)
                elif arm.name == "structural_perhop":
                    arm.n_compactions += 1
                    arm.penalties.append(penalty)
                    for vid in sorted(arm.values):
                        _truncate(arm.values[vid], keep)
                elif arm.name == "prose":
                    for vid in sorted(arm.values):
                        _prose_round_trip(prose_rng, cfg, arm.values[vid], step, counters)

    def view(arm: _Arm, v: _Value) -> GateView:
        scores = [v.vector[a] for a in AXES]
        if arm.name == "structural_perhop":
            scores[-1] = 1 - (max(arm.penalties) if arm.penalties else 0.0)
        folded = None
        if v.folded is not None:
            folded = FoldedPrefix(
                v.folded.n_hops_folded,
                tuple(sorted(v.folded.op_counts.items())),
                v.folded.n_taints_folded,
                tuple(v.folded.folded_hop_ids),
            )
        truncated = v.folded is not None or v.blob is not None
        return GateView(scores, v.tainted_by, v.hops, folded, truncated)

    for ev in events:
        if isinstance(ev, Decision):
            compact(ev.step)
            gt = arms[0]
            for arm in arms[1:]:
                for gate in GATES:
                    modes = [Mode.BLIND]
                    lineage = gate.gate_class in (
                        GateClass.LINEAGE_BLOCKLIST,
                        GateClass.LINEAGE_ALLOWLIST,
                    )
                    if arm.name != "prose" and lineage and lineage_modes:
                        modes.append(Mode.DEGRADE)
                        if rehydrate:
                            modes.append(Mode.REHYDRATE)
                    for mode in modes:
                        oracle = evaluate(
                            gate, view(gt, gt.values[ev.value_id]), Mode.BLIND, log, window
                        )
                        d = evaluate(gate, view(arm, arm.values[ev.value_id]), mode, log, window)
                        records.append(
                            _Record(
                                ev.step,
                                ev.value_id,
                                arm.name,
                                gate.name,
                                mode.value,
                                d.proceed,
                                oracle.proceed,
                                d.lookups,
                                d.bytes_read,
                            )
                        )
            continue
        if isinstance(ev, Retire):
            for arm in arms:
                del arm.values[ev.value_id]
        elif isinstance(ev, NewValue):
            hop = build_hop(ev, ())
            log.append(hop)
            tips[ev.value_id] = hop.hop_id
            for arm in arms:
                v = _Value(dict.fromkeys(AXES, 1.0), set(), [])
                if arm.name == "structural_min":
                    v.vector["reconstruction"] = min(1.0, arm.store_reconstruction)
                _apply(v, hop)
                arm.values[ev.value_id] = v
        elif isinstance(ev, OpEvent):
            hop = build_hop(ev, (tips[ev.value_id],))
            log.append(hop)
            tips[ev.value_id] = hop.hop_id
            for arm in arms:
                _apply(arm.values[ev.value_id], hop)
        elif isinstance(ev, Merge):
            hop = build_hop(ev, tuple(tips[i] for i in ev.inputs))
            log.append(hop)
            tips[ev.value_id] = hop.hop_id
            for arm in arms:
                inputs = [copy.deepcopy(arm.values[i]) for i in ev.inputs]
                vector = {a: min(v.vector[a] for v in inputs) for a in AXES}
                tainted: set[str] = set().union(*(v.tainted_by for v in inputs))
                by_id: dict[str, Hop] = {}
                for v in inputs:
                    for h in v.hops:
                        by_id.setdefault(h.hop_id, h)
                hops = sorted(by_id.values(), key=lambda h: (h.step, h.hop_id))
                folded = None
                prefixes = [v.folded for v in inputs if v.folded is not None]
                if len(prefixes) == 1:
                    # a lone prefix is carried over as it is (duplicates and all)
                    folded = prefixes[0]
                elif prefixes:
                    folded = _Prefix()
                    for p in prefixes:
                        folded.n_hops_folded += p.n_hops_folded
                        folded.n_taints_folded += p.n_taints_folded
                        for k, n in p.op_counts.items():
                            folded.op_counts[k] = folded.op_counts.get(k, 0) + n
                        for i in p.folded_hop_ids:
                            if i not in folded.folded_hop_ids:
                                folded.folded_hop_ids.append(i)
                blobs = [v.blob for v in inputs if v.blob is not None]
                merged = _Value(vector, tainted, hops, folded, " | ".join(blobs) if blobs else None)
                _apply(merged, hop)
                arm.values[ev.value_id] = merged
        compact(ev.step)

    # aggregate and fingerprint only now, from the kept records
    digest = hashlib.sha256()
    by_decision: dict[tuple[int, int], list[_Record]] = {}
    for r in records:
        by_decision.setdefault((r.step, r.value_id), []).append(r)
    for (step, vid), recs in by_decision.items():
        oracle_tokens = ""
        seen: set[str] = set()
        for r in recs:
            if r.gate not in seen:
                seen.add(r.gate)
                oracle_tokens += "1" if r.oracle else "0"
        tokens = "".join(
            ("1" if r.proceed else "0") + (f"({r.lookups},{r.bytes_read})" if r.lookups else "")
            for r in recs
        )
        digest.update(f"{step} {vid} {oracle_tokens}{tokens}\n".encode())
    rows: dict[tuple[str, str, str], list[int]] = {}
    for r in records:
        c = rows.setdefault((r.arm, r.gate, r.mode), [0] * 8)
        c[0] += 1
        c[1] += r.proceed == r.oracle
        c[2] += r.proceed and not r.oracle
        c[3] += r.oracle and not r.proceed
        c[4] += r.proceed
        c[5] += r.oracle
        c[6] += r.lookups
        c[7] += r.bytes_read
    gates = {g.name: g for g in GATES}
    out: list[tuple[object, ...]] = [
        (
            arm,
            gate,
            gates[gate].gate_class.value,
            gates[gate].irreversible,
            mode,
            *c,
        )
        for (arm, gate, mode), c in rows.items()
    ]
    return digest.hexdigest(), out
