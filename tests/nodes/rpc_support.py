"""Helpers for the node wire tests: in-memory and gRPC clusters, and the accusation audit.

Every holder outcome the wire tests produce goes through :func:`audit`,
which verifies the evidence with :func:`contracts.evidence.verify_evidence`
(nothing but the file) and counts accusations of origins that were started
faithful (fault mode ``none``). :data:`AUDIT` is session-wide; the
``accusation_audit`` fixture (imported by each wire test module) asserts at
the end of the session that no correct origin was ever accused (S8).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.evidence import verify_evidence
from contracts.identity import Identity, observe_signatures
from contracts.serve import verify_delivery
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation
from nodes.app import RunningNode, load_or_create_identity, start_node
from nodes.auth import ControlCredentials, control_channel
from nodes.client import EVIDENCE_KINDS, HeldFold, Holder, OriginOutcome, RehydrationReport
from nodes.config import NodeConfig
from nodes.faults import FaultMode, FaultPlan
from nodes.services import CommittedFold, NodeCore
from nodes.transport import GrpcTransport, InMemoryTransport, LocalNode

__all__ = [
    "AUDIT",
    "TEST_OPERATOR",
    "AccusationAudit",
    "MemCluster",
    "accusation_audit",
    "audit",
    "audit_pb",
    "ed25519_counts",
    "held_fold",
    "hop_json",
    "operator_channel",
]


#: The operator key the test nodes authorise (deterministic: a fixed seed).
TEST_OPERATOR = ControlCredentials(Identity.from_seed(b"provnet-test-operator-key-seed!!"))


def operator_channel(address: str) -> grpc.aio.Channel:
    """A channel whose control calls are signed with :data:`TEST_OPERATOR`."""
    return control_channel(address, TEST_OPERATOR)


@dataclass(slots=True)
class AccusationAudit:
    """Session-wide: accusations seen, and those against correct origins."""

    accusations: int = 0
    correct_accused: list[str] = field(default_factory=list)
    outcomes_checked: int = 0


AUDIT = AccusationAudit()


def audit(report: RehydrationReport, correct_origins: Iterable[str]) -> RehydrationReport:
    """Check every accusing outcome's evidence; count accusations of correct origins."""
    correct = set(correct_origins)
    for outcome in report.outcomes:
        AUDIT.outcomes_checked += 1
        if not outcome.accuses:
            continue
        AUDIT.accusations += 1
        verdict = verify_evidence(outcome.evidence, now=int(time.time() * 1000) + 60_000)
        assert verdict.accused == outcome.origin
        assert verdict.kind.value == outcome.outcome.value
        if outcome.origin in correct:
            AUDIT.correct_accused.append(f"{outcome.origin[:16]} {outcome.outcome}")
    return report


def audit_pb(report: Any, correct_origins: Iterable[str]) -> Any:
    """:func:`audit` for a ``RehydrateResponse`` that came over the wire."""
    correct = set(correct_origins)
    for outcome in report.outcomes:
        AUDIT.outcomes_checked += 1
        accuses = outcome.outcome in {k.value for k in EVIDENCE_KINDS} and not outcome.cleared
        if not accuses:
            continue
        AUDIT.accusations += 1
        verdict = verify_evidence(bytes(outcome.evidence), now=int(time.time() * 1000) + 60_000)
        assert verdict.accused == outcome.origin
        if outcome.origin in correct:
            AUDIT.correct_accused.append(f"{outcome.origin[:16]} {outcome.outcome}")
    return report


@pytest.fixture(scope="session", autouse=True)
def accusation_audit() -> Iterable[AccusationAudit]:
    yield AUDIT
    assert AUDIT.correct_accused == [], f"correct origins accused: {AUDIT.correct_accused}"


def hop_json(step: int, op: str = "CACHE_READ") -> bytes:
    return json.dumps(
        {
            "hop_id": f"h{step:06d}",
            "step": step,
            "op": op,
            "axis_deltas": {"freshness": 0.95},
            "taints_added": [],
            "parent_hop_ids": [f"h{step - 1:06d}"] if step > 1 else [],
        }
    ).encode()


def held_fold(fold: CommittedFold, now_ms: int | None = None) -> HeldFold:
    c = open_statement(fold.commitment, Commitment)
    o = open_statement(fold.obligation, Obligation)
    verify_delivery(c, o, now=now_ms if now_ms is not None else int(time.time() * 1000))
    return HeldFold(c, o, fold.commitment, fold.obligation)


@dataclass(slots=True)
class MemCluster:
    """In-process nodes reaching each other through in-memory transports."""

    root: Path
    deadline_ms: int = 300
    reasks: int = 1
    nodes: dict[str, NodeCore] = field(default_factory=dict)
    faults: dict[str, FaultMode] = field(default_factory=dict)
    registry: dict[str, LocalNode] = field(default_factory=dict)

    @staticmethod
    def address(name: str) -> str:
        return f"{name}.mem:1"

    async def add(
        self,
        name: str,
        fault: FaultMode = FaultMode.NONE,
        delay_ms: int = 0,
        *,
        provenance_pending: bool = False,
    ) -> NodeCore:
        config = NodeConfig(
            name=name,
            data_dir=self.root / name,
            listen=self.address(name),
            deadline_ms=self.deadline_ms,
            reasks=self.reasks,
            provenance_pending=provenance_pending,
        )
        crashed: list[NodeCore] = []
        plan = FaultPlan(fault, delay_ms, crash=lambda: setattr(crashed[0], "crashed", True))
        core = await NodeCore.open(
            config,
            load_or_create_identity(config.data_dir),
            transport=InMemoryTransport(registry=self.registry),
            fault=plan,
        )
        crashed.append(core)
        self.registry[config.listen] = core
        self.nodes[name] = core
        self.faults[name] = fault
        return core

    def correct_ids(self) -> set[str]:
        return {c.node_id for n, c in self.nodes.items() if self.faults[n] is FaultMode.NONE}

    def holder(self, name: str) -> Holder:
        return self.nodes[name].holder

    async def fold(
        self,
        origin: str,
        value_ref: str,
        hops: int,
        first_step: int = 1,
        **commit: int,
    ) -> HeldFold:
        core = self.nodes[origin]
        _, seqs = await core.append([hop_json(first_step + i) for i in range(hops)])
        return held_fold(await core.commit_fold(value_ref, seqs, **commit))  # type: ignore[arg-type]

    async def rehydrate(
        self, holder: str, value_ref: str, folds: list[HeldFold], witnesses: Iterable[str] = ()
    ) -> RehydrationReport:
        report = await self.holder(holder).rehydrate(
            value_ref, folds, witnesses=[self.address(w) for w in witnesses]
        )
        return audit(report, self.correct_ids())

    async def close(self) -> None:
        for core in self.nodes.values():
            await core.close()


def single(report: RehydrationReport) -> OriginOutcome:
    assert len(report.outcomes) == 1, report.outcomes
    return report.outcomes[0]


async def grpc_node(
    root: Path,
    name: str,
    fault: FaultMode = FaultMode.NONE,
    delay_ms: int = 0,
    deadline_ms: int = 500,
    **extra: object,
) -> RunningNode:
    config = NodeConfig(
        name=name,
        data_dir=root / name,
        listen="127.0.0.1:0",
        fault=fault,
        fault_delay_ms=delay_ms,
        deadline_ms=deadline_ms,
        **{"operator_keys": (TEST_OPERATOR.key_id,), **extra},  # type: ignore[arg-type]
    )
    crash_target: list[RunningNode] = []

    def crash() -> None:
        # In-process stand-in for os._exit: the node stops answering at once.
        crash_target[0].core.crashed = True

    node = await start_node(
        config, transport=GrpcTransport(), fault=FaultPlan(fault, delay_ms, crash=crash)
    )
    crash_target.append(node)
    return node


async def stop_all(nodes: Iterable[RunningNode]) -> None:
    for node in nodes:
        await node.stop(0.2)


def grpc_holder(root: Path, transport: GrpcTransport, reasks: int = 1) -> Holder:
    identity: Identity = load_or_create_identity(root / "holder")
    return Holder(identity, transport, evidence_dir=root / "evidence", reasks=reasks)


class _Ed25519Counts:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def signed(self, seconds: float) -> None:
        self.counts["sign"] += 1

    def verified(self, seconds: float) -> None:
        self.counts["verify"] += 1


@contextmanager
def ed25519_counts() -> Iterator[dict[str, int]]:
    """Count Ed25519 signatures made and verified (every one reports to the observer)."""
    counts = {"sign": 0, "verify": 0}
    with observe_signatures(_Ed25519Counts(counts)):
        yield counts
