"""Settings and result records of a boundary run (see :mod:`harness.boundary.runner`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from contracts.rules import promise_refusal
from harness.boundary.choices import BOUNDARY_FAULTS, Role, TransportKind
from harness.boundary.topology import NodeSpec
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.metrics import RunKey
from nodes.faults import FaultMode
from nodes.home import NODE_NAME_RE, NODE_NAME_RULE

__all__ = [
    "UNCONFIRMED",
    "ArmCosts",
    "BoundaryError",
    "BoundaryOutcome",
    "BoundarySettings",
    "EvidenceRecord",
    "RunComparison",
    "Setting",
    "overall_fingerprints",
    "pick_running_origins",
]

#: The origin outcome of an unanswered demand that no witness confirmed (none
#: asked, or too few answered): an unconfirmed suspicion, counted in the results
#: but neither written nor stored as evidence (silence is never proof).
UNCONFIRMED = "unanswered_unconfirmed"


class BoundaryError(ValueError):
    """Bad boundary settings, or a run that cannot be played (message names what)."""


def pick_running_origins(
    names: list[str] | tuple[str, ...],
    chain: tuple[str, ...],
    witness: str | None,
    count: int,
) -> tuple[str, ...]:
    """``count`` origins among running nodes: the chain's first and the next nodes without a role.

    Running nodes cannot be made up, so an origin count on them never names
    ``{first}2``: the origins are the chain's first node and the next
    ``count - 1`` nodes that are neither in the chain nor the witness, in the
    order the nodes were given (a cluster ``a``–``e`` with chain ``a,b`` and
    3 origins: ``a``, ``c``, ``d``, leaving ``e`` for the witness). Too few
    such nodes is a :class:`BoundaryError` naming what was there.
    """
    taken = {*chain, *((witness,) if witness else ())}
    free = [n for n in names if n not in taken]
    if len(free) < count - 1:
        raise BoundaryError(
            f"--origins {count}: needs {count} origin nodes, but besides the chain"
            f" {','.join(chain)}{f' and witness {witness}' if witness else ''} the running"
            f" nodes ({', '.join(names)}) leave {len(free)}"
            f"{': ' + ', '.join(free) if free else ''}; start more nodes or name the origins"
            " (--origins a,d)"
        )
    return (chain[0], *free[: count - 1])


class Setting(StrEnum):
    IN_PROCESS = "in_process"
    BOUNDARY = "boundary"


@dataclass(frozen=True, slots=True)
class BoundarySettings:
    """One boundary slice: which runs, on which topology, with which fault.

    ``chain`` names the delivery path: first the origin, last the holder,
    relays between. ``origins`` > 1 adds origins that own a share of the
    values: ``{chain[0]}2``, … on nodes started here, the next running nodes
    without a role on running nodes (:func:`pick_running_origins`), or the
    ones ``origin_nodes`` names. Only the
    first origin runs ``fault``. ``nodes`` (name, address) are running nodes
    to play on (transport ``remote``): roles map onto them by name, each
    runs the fault it was started with. ``workers`` > 1 plays the runs in
    that many processes (in-process nodes only).
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
    witness_name: str = "witness"
    origin_nodes: tuple[str, ...] = ()
    nodes: tuple[tuple[str, str], ...] = ()
    workers: int = 1
    #: running nodes: the cluster home whose operator key signs control calls
    #: (``$PROVNET_OPERATOR_KEY_FILE`` first, as :func:`nodes.auth.operator_credentials`)
    control_home: str = ""
    #: running nodes: the CA their TLS certificates are verified with (``--tls-ca``,
    #: a cluster's recorded CA); "": plaintext
    tls_ca: str = ""
    #: round-trip time added on every link between two nodes by a user-space proxy per
    #: directed link (:mod:`harness.boundary.links`); None: nodes reach each other directly
    rtt_ms: float | None = None
    #: in-process nodes: the fault of every origin, in origin order (empty: the first
    #: origin runs ``fault``, the others none)
    origin_faults: tuple[FaultMode, ...] = ()
    #: in-process nodes: custodians each origin asks at every commit (``--custody-k``),
    #: extra nodes of distinct operators; 0: none (every byte as without custody)
    custody_k: int = 0

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
        bad = [n for n in names if not NODE_NAME_RE.match(n)]
        if bad:
            raise BoundaryError(f"node names {', '.join(bad)}: expected {NODE_NAME_RULE}")
        if len(set(names)) != len(names):
            raise BoundaryError(f"node names must be distinct, got {', '.join(names)}")
        if self.origins < 1:
            raise BoundaryError(f"origins must be >= 1, got {self.origins}")
        if self.origin_faults:
            if len(self.origin_faults) != self.origins:
                raise BoundaryError(
                    f"origin_faults names {len(self.origin_faults)} fault(s) for"
                    f" {self.origins} origin(s)"
                )
            bad_faults = [f.value for f in self.origin_faults if f not in BOUNDARY_FAULTS]
            if bad_faults or self.origin_faults[0] is not self.fault:
                raise BoundaryError(
                    f"origin_faults {', '.join(f.value for f in self.origin_faults)}: each one of"
                    f" {', '.join(f.value for f in BOUNDARY_FAULTS)}, the first = fault"
                    f" ({self.fault.value})"
                )
        # what the origins would sign: refused here as every node refuses it
        refusal = promise_refusal(deadline_ms=self.deadline_ms)
        if refusal:
            raise BoundaryError(refusal)
        if self.reasks < 0:
            raise BoundaryError(f"reasks must be >= 0, got {self.reasks}")
        if self.workers < 1:
            raise BoundaryError(f"workers must be >= 1, got {self.workers}")
        if self.origin_nodes and self.origin_nodes[0] != self.chain[0]:
            raise BoundaryError(
                f"the first origin {self.origin_nodes[0]} must start the chain"
                f" ({','.join(self.chain)})"
            )
        remote = self.transport is TransportKind.REMOTE
        if self.rtt_ms is not None:
            if not self.rtt_ms >= 0:
                raise BoundaryError(f"rtt_ms must be >= 0, got {self.rtt_ms!r}")
            if self.transport is not TransportKind.GRPC:
                raise BoundaryError(
                    "an added RTT needs link proxies between nodes started here over gRPC"
                    f" (transport grpc), got transport {self.transport.value}"
                )
        if remote and not self.nodes:
            raise BoundaryError(
                "transport remote plays on running nodes: give them with --cluster or --nodes"
            )
        if self.nodes and not remote:
            raise BoundaryError(
                "running nodes (--cluster or --nodes) are reached with transport remote,"
                f" got transport {self.transport.value}"
            )
        if remote:
            running = {n for n, _ in self.nodes}
            missing = [n for n in names if n not in running]
            if missing:
                raise BoundaryError(
                    f"node(s) {', '.join(missing)} named by the roles are not among the"
                    f" running nodes ({', '.join(sorted(running))})"
                )
            if self.fault is not FaultMode.NONE:
                raise BoundaryError(
                    "on running nodes each node runs the fault it was started with"
                    " (provnet node --fault …); --fault applies to in-process nodes"
                )
            if self.holder_cache:
                raise BoundaryError("--holder-cache applies to in-process nodes only")

    @property
    def effective_delay_ms(self) -> int:
        """``slow`` without a delay: twice the promised deadline (always too slow)."""
        if self.fault is FaultMode.SLOW and self.fault_delay_ms <= 0:
            return 2 * self.deadline_ms
        return self.fault_delay_ms

    def origin_names(self) -> list[str]:
        if self.origin_nodes:
            return list(self.origin_nodes)
        if self.nodes and self.origins > 1:
            running = [n for n, _ in self.nodes]
            witness = self.witness_name if self.witness else None
            return list(pick_running_origins(running, self.chain, witness, self.origins))
        first = self.chain[0]
        return [first] + [f"{first}{i}" for i in range(2, self.origins + 1)]

    def node_names(self) -> list[str]:
        extra = [self.witness_name] if self.witness else []
        return [*self.origin_names(), *self.chain[1:], *extra]

    def fault_of(self, i: int) -> FaultMode:
        """The fault origin ``i`` (in :meth:`origin_names` order) runs."""
        if self.origin_faults:
            return self.origin_faults[i]
        return self.fault if i == 0 else FaultMode.NONE

    def specs(self) -> list[NodeSpec]:
        slow_ms = self.fault_delay_ms if self.fault_delay_ms > 0 else 2 * self.deadline_ms
        out = [
            NodeSpec(
                name,
                Role.ORIGIN,
                self.fault_of(i),
                self.effective_delay_ms
                if i == 0
                else (slow_ms if self.fault_of(i) is FaultMode.SLOW else 0),
            )
            for i, name in enumerate(self.origin_names())
        ]
        out += [NodeSpec(name, Role.RELAY) for name in self.chain[1:-1]]
        out.append(NodeSpec(self.chain[-1], Role.HOLDER))
        if self.witness:
            out.append(NodeSpec(self.witness_name, Role.WITNESS))
        out += [NodeSpec(f"custodian{i + 1}", Role.CUSTODIAN) for i in range(self.custody_k)]
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
            "witness_name": self.witness_name if self.witness else None,
            "nodes": {n: a for n, a in self.nodes},
            "workers": self.workers,
            "rtt_ms": self.rtt_ms,
            "tls": bool(self.tls_ca),
            **(
                {"origin_faults": [f.value for f in self.origin_faults]}
                if self.origin_faults
                else {}
            ),
        }


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
    #: verified hops the gates received per rehydration (from the wire or the holder cache)
    hops_verified: int = 0
    failed_rehydrations: int = 0
    demand_rpcs: int = 0
    inproc_rehydrations: int = 0
    inproc_latencies: list[float] = field(default_factory=list)
    origins_asked: int = 0
    #: distinct origins named by the commitments of the values rehydrated (counted here)
    origins_named: int = 0

    def add(self, other: ArmCosts) -> None:
        """Add ``other``'s counts and measurements (runs played elsewhere) to these."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            else:
                setattr(self, f.name, mine + theirs)


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


@dataclass(frozen=True, slots=True)
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
        return self.key.label


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
    #: node name → the fault it ran (for running nodes: what it reported)
    node_faults: dict[str, str] = field(default_factory=dict)
    #: Signed tree heads the origins made: one per origin per compaction.
    heads_committed: int = 0
    #: Per (cadence, arm): [decisions, value bytes, statement bytes] delivered.
    delivery_by_cadence: dict[tuple[int, str], list[int]] = field(default_factory=dict)

    @property
    def evidence_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.evidence:
            out[e.kind] = out.get(e.kind, 0) + 1
        return out

    @property
    def unconfirmed_suspicions(self) -> dict[str, int]:
        """Origin name → rehydrations it left unanswered without a witness confirming."""
        return {n: c for (n, o), c in sorted(self.outcomes.items()) if o == UNCONFIRMED}

    @property
    def correct_accused(self) -> int:
        return sum(1 for e in self.evidence if e.correct_origin)


def overall_fingerprints(outcome: BoundaryOutcome) -> tuple[str, str]:
    """(in-process, boundary) fingerprints over all runs, in run order."""
    return (
        combine((r.label, r.in_process_fingerprint) for r in outcome.runs),
        combine((r.label, r.boundary_fingerprint) for r in outcome.runs),
    )
