"""The four arms and what compaction does to each (spec §4, Part 5).

All arms see the same events and the same (shared, immutable) hops. Per
value an arm holds a vector, ``tainted_by`` and a lineage (visible hops,
folded prefix, prose blob). They differ only at compaction:

- ``ground_truth`` never compacts: the oracle.
- ``structural_min`` (Part 4): the store's reconstruction decays by
  ``(1 − penalty)`` per compaction and is min-folded into every live value
  (and every newborn one); lineage truncates to the last K hops.
- ``structural_perhop``: same truncation, but reconstruction is carried as
  a record (n_compactions, worst single penalty) and gates read
  fidelity = 1 − worst_single_penalty.
- ``prose``: a summarize→extract round trip replaces vector and taints;
  lineage becomes a prose blob.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import assert_never

from harness.axes import AXIS_INDEX, RECON
from harness.events import Hop, Merge, NewValue, OpEvent
from harness.lineage import EMPTY_PREFIX, FoldedPrefix, merge_folded, merge_visible
from harness.prose import ProseChannel

__all__ = [
    "ARM_ORDER",
    "STRUCTURAL_ARMS",
    "Arm",
    "ArmName",
    "GroundTruthArm",
    "ProseArm",
    "StructuralMinArm",
    "StructuralPerhopArm",
    "ValueState",
    "truncate",
]


class ArmName(StrEnum):
    GROUND_TRUTH = "ground_truth"
    STRUCTURAL_MIN = "structural_min"
    STRUCTURAL_PERHOP = "structural_perhop"
    PROSE = "prose"

    @property
    def structural(self) -> bool:
        """Keeps lineage as hops (truncated, folded): its lineage gates have every mode."""
        match self:
            case ArmName.STRUCTURAL_MIN | ArmName.STRUCTURAL_PERHOP:
                return True
            case ArmName.GROUND_TRUTH | ArmName.PROSE:
                return False
            case _:
                assert_never(self)


ARM_ORDER: tuple[ArmName, ...] = (
    ArmName.GROUND_TRUTH,
    ArmName.STRUCTURAL_MIN,
    ArmName.STRUCTURAL_PERHOP,
    ArmName.PROSE,
)
#: The structural arms, in :data:`ARM_ORDER`.
STRUCTURAL_ARMS: tuple[ArmName, ...] = tuple(a for a in ARM_ORDER if a.structural)


class ValueState:
    """One value as one arm knows it. Owns its vector, taint set and hop list."""

    __slots__ = ("blob", "folded", "taints", "vec", "visible")

    def __init__(
        self,
        vec: list[float],
        taints: set[str],
        visible: list[Hop],
        folded: FoldedPrefix | None = None,
        blob: str | None = None,
    ) -> None:
        self.vec = vec
        self.taints = taints
        self.visible = visible
        self.folded = folded
        self.blob = blob

    @property
    def history_truncated(self) -> bool:
        return self.folded is not None or self.blob is not None


def apply_hop(state: ValueState, hop: Hop) -> None:
    """Degrade each axis in the hop's deltas, add its taints, append it."""
    vec = state.vec
    for axis, factor in hop.axis_deltas:
        i = AXIS_INDEX[axis]
        x = vec[i] * factor
        vec[i] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
    if hop.taints_added:
        state.taints.update(hop.taints_added)
    state.visible.append(hop)


def truncate(state: ValueState, keep: int) -> None:
    """Keep the last ``keep`` visible hops; fold the rest (Part 4's lossy step).

    tainted_by becomes the union of the remaining visible hops' taints: the
    folded taint ids are gone, only their count survives.
    """
    hops = state.visible
    if len(hops) <= keep:
        return
    cut = len(hops) - keep
    prefix = state.folded or EMPTY_PREFIX
    state.folded = prefix.absorb(hops[:cut])
    kept = hops[cut:]
    state.visible = kept
    state.taints = {t for h in kept for t in h.taints_added}


@dataclass(slots=True)
class CompactionRecord:
    """structural_perhop's carried reconstruction: data, not a folded score."""

    n_compactions: int = 0
    penalties: list[float] = field(default_factory=list)
    worst_single_penalty: float = 0.0


class Arm:
    """Common event handling (spec §4); subclasses define compaction."""

    name: ArmName = ArmName.GROUND_TRUTH
    structural = name.structural

    def __init__(self) -> None:
        self.values: dict[int, ValueState] = {}

    def initial_reconstruction(self) -> float:
        return 1.0

    def new_value(self, event: NewValue, hop: Hop) -> None:
        vec = [1.0, 1.0, 1.0, 1.0, 1.0]
        r = self.initial_reconstruction()
        if r < vec[RECON]:
            vec[RECON] = r
        state = ValueState(vec, set(), [])
        apply_hop(state, hop)
        self.values[event.value_id] = state

    def op(self, event: OpEvent, hop: Hop) -> None:
        apply_hop(self.values[event.value_id], hop)

    def merge(self, event: Merge, hop: Hop) -> None:
        inputs = [self.values[v] for v in event.inputs]
        vec = list(inputs[0].vec)
        for other in inputs[1:]:
            ov = other.vec
            for i in range(5):
                if ov[i] < vec[i]:
                    vec[i] = ov[i]
        taints: set[str] = set()
        for s in inputs:
            taints |= s.taints
        blobs = [s.blob for s in inputs if s.blob is not None]
        state = ValueState(
            vec,
            taints,
            merge_visible([s.visible for s in inputs]),
            merge_folded([s.folded for s in inputs]),
            " | ".join(blobs) if blobs else None,
        )
        apply_hop(state, hop)
        self.values[event.value_id] = state

    def retire(self, value_id: int) -> None:
        del self.values[value_id]

    def compact(self, step: int) -> None:
        """Ground truth never compacts."""

    def reconstruction_scalar(self, state: ValueState) -> float:
        """The ``r`` reconstruction-coupled gates read."""
        return state.vec[RECON]


class GroundTruthArm(Arm):
    name = ArmName.GROUND_TRUTH


class StructuralMinArm(Arm):
    name = ArmName.STRUCTURAL_MIN
    structural = name.structural

    def __init__(self, penalty: float, keep: int) -> None:
        super().__init__()
        self.penalty = penalty
        self.keep = keep
        self.n_compactions = 0
        self.store_reconstruction = 1.0

    def initial_reconstruction(self) -> float:
        return self.store_reconstruction

    def compact(self, step: int) -> None:
        self.n_compactions += 1
        self.store_reconstruction *= 1.0 - self.penalty
        floor = self.store_reconstruction
        for value_id in sorted(self.values):
            state = self.values[value_id]
            if floor < state.vec[RECON]:
                state.vec[RECON] = floor
            truncate(state, self.keep)


class StructuralPerhopArm(Arm):
    name = ArmName.STRUCTURAL_PERHOP
    structural = name.structural

    def __init__(self, penalty: float, keep: int) -> None:
        super().__init__()
        self.penalty = penalty
        self.keep = keep
        self.record = CompactionRecord()

    @property
    def fidelity(self) -> float:
        return 1.0 - self.record.worst_single_penalty

    def compact(self, step: int) -> None:
        rec = self.record
        rec.n_compactions += 1
        rec.penalties.append(self.penalty)
        rec.worst_single_penalty = max(rec.worst_single_penalty, self.penalty)
        for value_id in sorted(self.values):
            truncate(self.values[value_id], self.keep)

    def reconstruction_scalar(self, state: ValueState) -> float:
        return self.fidelity


class ProseArm(Arm):
    name = ArmName.PROSE

    def __init__(self, channel: ProseChannel) -> None:
        super().__init__()
        self.channel = channel

    def compact(self, step: int) -> None:
        for value_id in sorted(self.values):
            state = self.values[value_id]
            ext = self.channel.round_trip(state.vec, state.taints, step)
            state.vec = list(ext.scores)
            state.taints = set(ext.taints)
            state.visible = []
            state.folded = None
            state.blob = ext.blob
