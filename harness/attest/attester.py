"""The attester node of a row, and how the holder side reaches it.

The attester is a provnet node whose ``Attest.Request`` answers as its
``--attest-fault`` says (:class:`nodes.attester.AttesterFault`): the honest
attester (``none``) verifies every rehydration proof and that they cover the
value, then signs ``reconstruction ≥ 1.0`` citing exactly those receipts;
the adversarial rows run the faulty modes. Every attestation it signs is a
hop in its own log, committed as a fold (A6); the answer names that fold.

:class:`AttestOps` is how the holder side plays the restoration rule, with
two implementations that make the same calls in the same order:

* :class:`LocalAttestOps` — nodes in this process (memory or gRPC
  transport): the holder node's core restores (``NodeCore.restore``: full
  verified rehydration, then ``Attest.Request`` over the holder's
  transport), lists and keeps attestations;
* :class:`RemoteAttestOps` — node processes this process did not start:
  the same as RPCs, ``Attest.Restore`` / ``List`` / ``Submit`` on the holder
  process, which itself sends ``Attest.Request`` to the attester process.

Unasked attestations (rows ``taint_discharge`` and ``dishonest``, attester
mode ``lax``) are asked for on each decision with ``Attest.Request``
(``reconstruction`` false, the axes and taints of the row) and arrive with
the value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, assert_never

from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.hops import parse_hop
from contracts.serve import build_demand, verify_served
from contracts.signed import open_statement
from contracts.statements import Attestation, Commitment, Obligation
from harness.attest.rows import Row
from nodes.attester import (
    AttestationAnswer,
    AttestationAsk,
    AttestCarrier,
    AttesterFault,
    FoldBytes,
    RestoreResult,
)
from nodes.messages import Answer
from nodes.transport import CallFailed

if TYPE_CHECKING:
    from contracts.identity import Identity
    from harness.boundary.remote import RemoteNode, RemoteTopology
    from harness.boundary.topology import Topology
    from nodes.services import NodeCore

__all__ = [
    "AttestOps",
    "LocalAttestOps",
    "LoggedAttestation",
    "RemoteAttestOps",
    "attester_fault",
]

_TIMEOUT_S = 60.0


def attester_fault(row: Row) -> AttesterFault:
    """The attester mode a row is played with."""
    match row:
        case (
            Row.NONE
            | Row.HONEST
            | Row.OUTSIDE_POLICY
            | Row.UNGRANTED_AXIS
            | Row.ABOVE_CEILING
            | Row.REVOKED
        ):
            return AttesterFault.NONE
        case Row.NO_PROOF:
            return AttesterFault.NO_PROOF
        case Row.OTHER_VALUE_RECEIPTS:
            return AttesterFault.OTHER_VALUE_RECEIPTS
        case Row.FORGED_RECEIPTS:
            return AttesterFault.FORGED_RECEIPTS
        case Row.TAMPERED_RECEIPTS:
            return AttesterFault.TAMPERED_RECEIPTS
        case Row.PARTIAL_RECEIPTS:
            return AttesterFault.PARTIAL_RECEIPTS
        case Row.REPLAYED:
            return AttesterFault.REPLAYED
        case Row.EXPIRED:
            return AttesterFault.EXPIRED
        case Row.TAINT_DISCHARGE | Row.DISHONEST:
            return AttesterFault.LAX
        case _:
            assert_never(row)


@dataclass(frozen=True, slots=True)
class LoggedAttestation:
    """An attestation's hop in the attester's log (A6): the fold that commits it."""

    attestation: str
    commitment: bytes
    obligation: bytes


class AttestOps(Protocol):
    """The holder side's calls for the restoration rule (module docstring)."""

    attester_id: str

    async def restore(self, ask: AttestationAsk, folds: Sequence[FoldBytes]) -> RestoreResult: ...

    async def unasked(self, ask: AttestationAsk) -> AttestationAnswer: ...

    async def list_attestations(self, value_digest: str) -> tuple[bytes, ...]: ...

    async def submit(self, attestation: bytes) -> str: ...

    async def demand_back(self, logged: LoggedAttestation) -> bool: ...


@dataclass(slots=True)
class _Logged:
    entries: list[LoggedAttestation] = field(default_factory=list)

    def note(self, answer: AttestationAnswer) -> None:
        for i in answer.issued:
            if i.hop_commitment:
                digest = open_statement(i.attestation, Attestation).digest
                self.entries.append(LoggedAttestation(digest, i.hop_commitment, i.hop_obligation))


#: ``Serve.Demand`` on the attester: (demands, timeout s) -> the answers.
DemandCall = Callable[[Sequence[bytes], float], Awaitable[list[Answer]]]


async def _demand_back(
    identity: Identity, demand_call: DemandCall, attester_id: str, logged: LoggedAttestation
) -> bool:
    """A6: demand an attestation's hop from the attester and verify it names it."""
    commitment = open_statement(logged.commitment, Commitment, signer=attester_id)
    obligation = open_statement(logged.obligation, Obligation, signer=attester_id)
    demand = build_demand(identity, obligation, now=_now_ms())
    try:
        answers = await demand_call([demand.to_bytes()], obligation.statement.deadline_ms / 1000.0)
        served = verify_served(
            Envelope.from_bytes(answers[0].receipt),
            answers[0].hops,
            demand=demand,
            obligation=obligation,
            commitment=commitment,
        )
        for hop in served.hops:
            fields = parse_hop(hop, origin=attester_id)
            if fields.get("op") == "ATTEST" and fields.get("attestation") == logged.attestation:
                return True
    except (CallFailed, ContractError, IndexError, ValueError):
        return False
    return False


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


class LocalAttestOps(_Logged):
    """:class:`AttestOps` on nodes in this process."""

    def __init__(self, topo: Topology, attester: NodeCore, address: str) -> None:
        super().__init__()
        self.topo = topo
        self.attester = attester
        self.address = address
        self.attester_id = attester.node_id

    async def restore(self, ask: AttestationAsk, folds: Sequence[FoldBytes]) -> RestoreResult:
        result = await self.topo.holder.core.restore(ask, folds, self.address)
        self.note(result.answer)
        return result

    async def unasked(self, ask: AttestationAsk) -> AttestationAnswer:
        transport = self.topo.holder.core.transport
        if not isinstance(transport, AttestCarrier):
            raise TypeError("the holder's transport does not carry Attest.Request")
        answer = await transport.request_attestation(self.address, ask, _TIMEOUT_S)
        self.note(answer)
        return answer

    async def list_attestations(self, value_digest: str) -> tuple[bytes, ...]:
        return await self.topo.holder.core.list_attestations(value_digest)

    async def submit(self, attestation: bytes) -> str:
        return await self.topo.holder.core.submit_attestation(attestation)

    async def demand_back(self, logged: LoggedAttestation) -> bool:
        holder = self.topo.holder.core

        def demand_call(demands: Sequence[bytes], timeout: float) -> Awaitable[list[Answer]]:
            return holder.transport.demand(self.address, demands, timeout)

        return await _demand_back(holder.identity, demand_call, self.attester_id, logged)


class RemoteAttestOps(_Logged):
    """:class:`AttestOps` to node processes (every call a real RPC, through the
    topology's :class:`nodes.control.NodeClients`)."""

    def __init__(self, topo: RemoteTopology, attester: RemoteNode, identity: Identity) -> None:
        super().__init__()
        self.topo = topo
        self.attester = attester
        self.attester_id = attester.node_id
        self.identity = identity  # the operator's: signs the A6 demand-back

    async def restore(self, ask: AttestationAsk, folds: Sequence[FoldBytes]) -> RestoreResult:
        holder = self.topo.clients.at(self.topo.holder.address)
        result = await holder.restore(ask, folds, self.attester.address, timeout=_TIMEOUT_S)
        self.note(result.answer)
        return result

    async def unasked(self, ask: AttestationAsk) -> AttestationAnswer:
        attester = self.topo.clients.at(self.attester.address)
        answer = await attester.request_attestation(ask, timeout=_TIMEOUT_S)
        self.note(answer)
        return answer

    async def list_attestations(self, value_digest: str) -> tuple[bytes, ...]:
        holder = self.topo.clients.at(self.topo.holder.address)
        return await holder.list_attestations(value_digest, timeout=_TIMEOUT_S)

    async def submit(self, attestation: bytes) -> str:
        holder = self.topo.clients.at(self.topo.holder.address)
        return await holder.submit_attestation(attestation, timeout=_TIMEOUT_S)

    async def demand_back(self, logged: LoggedAttestation) -> bool:
        attester = self.topo.clients.at(self.attester.address)

        def demand_call(demands: Sequence[bytes], timeout: float) -> Awaitable[list[Answer]]:
            return attester.demand(demands, timeout=timeout)

        return await _demand_back(self.identity, demand_call, self.attester_id, logged)

    async def close(self) -> None:
        """Nothing of its own: the topology's clients close with the topology."""
