"""In-process nodes configured with custodians (nodes.custodian), over the memory transport."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from contracts.evidence import verify_evidence
from harness.boundary.wire import MeteredTransport, WireMeter
from nodes.app import load_or_create_identity
from nodes.config import NodeConfig, Peer
from nodes.faults import FaultMode, FaultPlan
from nodes.messages import RehydrationReport
from nodes.services import NodeCore
from nodes.transport import InMemoryTransport, LocalNode, Transport
from tests.nodes.rpc_support import hop_json

__all__ = ["CustodyCluster", "accused_honest"]


@dataclass
class CustodyCluster:
    """Nodes that know each other by name; ``origin`` asks ``custodians`` at commit."""

    root: Path
    deadline_ms: int = 300
    nodes: dict[str, NodeCore] = field(default_factory=dict)
    faults: dict[str, FaultMode] = field(default_factory=dict)
    registry: dict[str, LocalNode] = field(default_factory=dict)

    @staticmethod
    def address(name: str) -> str:
        return f"{name}.mem:1"

    async def add(
        self,
        name: str,
        *,
        peers: tuple[str, ...] = (),
        custodians: tuple[str, ...] = (),
        custody_k: int = 0,
        operator: str = "",
        fault: FaultMode = FaultMode.NONE,
        custody_hedge: bool = False,
        relay_custody_k: int = 0,
        meter: WireMeter | None = None,
    ) -> NodeCore:
        config = NodeConfig(
            name=name,
            data_dir=self.root / name,
            listen=self.address(name),
            deadline_ms=self.deadline_ms,
            reasks=0,
            peers=tuple(Peer(p, self.address(p)) for p in peers),
            custodians=custodians,
            custody_k=custody_k,
            operator=operator,
            custody_hedge=custody_hedge,
            relay_custody_k=relay_custody_k,
        )
        transport: Transport = InMemoryTransport(registry=self.registry)
        if meter is not None:  # every call this node makes, counted (harness.boundary.wire)
            transport = MeteredTransport(transport, meter, name)
        core = await NodeCore.open(
            config,
            load_or_create_identity(config.data_dir),
            transport=transport,
            fault=FaultPlan(fault, 0),
        )
        self.registry[config.listen] = core
        self.nodes[name] = core
        self.faults[name] = fault
        return core

    def depart(self, name: str) -> None:
        """The node leaves for good: its address answers nothing any more."""
        self.registry.pop(self.address(name), None)

    async def compact(self, origin: str, ref: str, hops: int = 6) -> None:
        core = self.nodes[origin]
        _, seqs = await core.append([hop_json(1 + i) for i in range(hops)])
        await core.commit_compaction([(ref, list(seqs), b"value:" + ref.encode())])

    def honest(self) -> set[str]:
        return {c.node_id for n, c in self.nodes.items() if self.faults[n] is FaultMode.NONE}

    async def close(self) -> None:
        for core in self.nodes.values():
            await core.close()


def accused_honest(report: RehydrationReport, honest: set[str]) -> list[str]:
    """Parties accused by verified evidence that are honest (must be empty), after
    checking that every accusing outcome's evidence verifies and names that party."""
    out: list[str] = []
    for o in (*report.outcomes, *report.parties):
        if not o.accuses:
            continue
        verdict = verify_evidence(o.evidence, now=int(time.time() * 1000) + 60_000)
        assert verdict.accused == o.origin
        if o.origin in honest:
            out.append(o.origin)
    return out
