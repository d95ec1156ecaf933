"""The experiment on running nodes: every call a real gRPC call to another process.

``provnet experiment boundary --cluster [HOME]`` or ``--nodes name=host:port,…``
plays a slice on nodes this process did not start (a local cluster, Compose
services). Roles map onto them by name (``--chain origin,relay…,holder``,
``--origins`` names, ``--witness``); each node's fault is the one it was
started with (``provnet node --fault …``), read from its ``Info``.

Who does what:

- **origins** are the node processes: the driver sends them the run's hops
  (``HopLog.Append``) and asks each for one compaction per commit point
  (``HopLog.CommitCompaction``: ONE signed head over the folds of every
  value it compacted then); they sign with their own keys and serve demands
  from their own stores.
- **deliveries** leave this process: the driver sends the value with the
  origin's fold proofs and heads to the first node of the path (``Deliver``,
  sender = the origin's id; the origin signs the heads, not the value) the
  way a node's ``send`` does — a head the first node acknowledged in a signed
  receipt travels as its digest afterwards, and in full again after a
  ``NOT_FOUND`` — and each relay forwards it with ``Forward`` (its own
  ``send``). The holder verifies heads and fold proofs in its own process.
- **the holder is a node**: the driver asks it to rehydrate the held value
  (``Deliver.Rehydrate``); the holder process makes the ``Serve.Demand``
  calls to the origins named by the obligations, re-asks, challenges the
  witness and verifies, and returns the verified hops and the outcomes with
  their evidence bytes; what the holder recorded (the outcome names its
  file) the driver writes to ``--out/evidence/`` and re-verifies. Demand,
  verification and evidence are therefore measured where a deployment pays
  them (holder process → origin process); the one
  extra loopback call (driver → holder) is part of the measured latency.

**Runs are kept apart** on long-lived nodes: a node's store epoch changes
only when it restarts, so each session takes a fresh id (value refs are
``{session}/…``) and each run its own range of hop sequence numbers
(``session_ms × 10⁶ + run × (steps + 1) + step``): no run's hops, folds or
held values can meet another's, and the nodes need no reset.

**Control calls** open their channels with :func:`nodes.smoke.control_channel`,
the one construction the cluster tools use: every control call is signed
with the operator key (``$PROVNET_OPERATOR_KEY_FILE``, else the cluster
home's ``operator.key``), which the nodes authorise (``nodes.auth``).
Every call has a deadline. A node that stops answering (``UNAVAILABLE``,
deadline exceeded) is *lost*: it commits nothing more, values keep the folds
they had, and the holder's demands to it end ``unanswered`` naming it; the
run completes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.head_note import head_digest
from contracts.signed import Signed, parse_statement
from contracts.statements import DeliveryReceipt
from harness.boundary.choices import Role, TransportKind
from harness.boundary.topology import EvidenceSink, NodeLost, NodeRef
from harness.boundary.wire import WireMeter
from nodes.auth import ControlCredentials
from nodes.faults import FaultMode
from nodes.messages import CommittedCompaction, Delivery, Outcome, RehydrationReport
from nodes.refusal import control_refused, is_refusal

__all__ = ["RemoteNode", "RemoteOps", "RemoteTopology", "connect_remote"]

_CONTROL_TIMEOUT_S = 30.0
#: How long a node that refuses connections is given to come up before it counts as absent.
_START_WAIT_S = 5.0
#: gRPC status codes after which a node counts as lost rather than as misbehaving.
_LOST_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")


class RemoteError(Exception):
    """A remote node cannot play its role (names the node and what it answered)."""


class _HeadsUnknown(Exception):
    """The receiving node answered ``NOT_FOUND``: it does not hold a head the delivery names."""


@dataclass(frozen=True, slots=True)
class RemoteNode:
    name: str
    role: Role
    address: str
    node_id: str
    fault: FaultMode


@dataclass(slots=True)
class RemoteTopology:
    """Running nodes and the channels to them; :meth:`close` closes the channels."""

    origins: list[RemoteNode]
    relays: list[RemoteNode]
    holder: RemoteNode
    witness: RemoteNode | None
    meter: WireMeter
    channels: dict[str, Any] = field(default_factory=dict)
    transport: TransportKind = TransportKind.REMOTE
    #: the operator key control calls are signed with (None: plain channels)
    credentials: ControlCredentials | None = None

    @property
    def nodes(self) -> list[RemoteNode]:
        extra = [self.witness] if self.witness is not None else []
        return [*self.origins, *self.relays, self.holder, *extra]

    def correct_ids(self) -> set[str]:
        return {n.node_id for n in self.nodes if n.fault is FaultMode.NONE}

    def name_of(self, node_id: str) -> str:
        for n in self.nodes:
            if n.node_id == node_id:
                return n.name
        return node_id[:16]

    def channel(self, address: str) -> Any:
        from nodes.smoke import control_channel

        chan = self.channels.get(address)
        if chan is None:
            chan = self.channels[address] = control_channel(address, self.credentials)
        return chan

    async def close(self) -> None:
        channels, self.channels = self.channels, {}
        for chan in channels.values():
            await chan.close(None)


def _code(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    if callable(code):
        value = code()
        return str(getattr(value, "name", value))
    return ""


def _details(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    return f"{_code(exc)}: {details()}" if callable(details) else str(exc)


async def connect_remote(
    members: Sequence[tuple[str, str]],
    *,
    origins: Sequence[str],
    relays: Sequence[str],
    holder: str,
    witness: str | None,
    credentials: ControlCredentials | None = None,
) -> RemoteTopology:
    """Ask each named node for its identity and fault; map the roles onto them.

    Raises :class:`RemoteError` naming a role whose node is not among
    ``members`` or does not answer ``Info``.
    """
    import grpc

    from nodes import wire

    addresses = dict(members)
    roles: list[tuple[str, Role]] = [
        *((n, Role.ORIGIN) for n in origins),
        *((n, Role.RELAY) for n in relays),
        (holder, Role.HOLDER),
        *(((witness, Role.WITNESS),) if witness is not None else ()),
    ]
    topo = RemoteTopology(
        [],
        [],
        RemoteNode("", Role.HOLDER, "", "", FaultMode.NONE),
        None,
        WireMeter(),
        credentials=credentials,
    )
    try:
        nodes: list[RemoteNode] = []
        for name, role in roles:
            address = addresses.get(name)
            if address is None:
                known = ", ".join(addresses) or "none"
                raise RemoteError(f"{role.value} {name!r} is not a node here (nodes: {known})")
            stub = wire.node_stub(topo.channel(address))
            # A node started just before the driver may still be binding its port.
            give_up = time.monotonic() + _START_WAIT_S
            while True:
                try:
                    info = await stub.Info(wire.info_request(), timeout=5.0)
                    break
                except grpc.aio.AioRpcError as exc:
                    if _code(exc) == "UNAVAILABLE" and time.monotonic() < give_up:
                        await asyncio.sleep(0.2)
                        continue
                    raise RemoteError(
                        f"{role.value} {name} at {address} does not answer: {_details(exc)}"
                    ) from None
            if info.name and info.name != name:
                raise RemoteError(f"node at {address} is named {info.name!r}, not {name!r}")
            try:
                fault = FaultMode(info.fault or FaultMode.NONE.value)
            except ValueError:
                raise RemoteError(f"node {name} reports unknown fault {info.fault!r}") from None
            nodes.append(RemoteNode(name, role, address, info.node_id, fault))
    except BaseException:
        await topo.close()
        raise
    topo.origins = [n for n in nodes if n.role is Role.ORIGIN]
    topo.relays = [n for n in nodes if n.role is Role.RELAY]
    topo.holder = next(n for n in nodes if n.role is Role.HOLDER)
    topo.witness = next((n for n in nodes if n.role is Role.WITNESS), None)
    return topo


class RemoteOps:
    """:class:`harness.boundary.topology.NodeOps` over gRPC to running nodes."""

    def __init__(
        self,
        topo: RemoteTopology,
        *,
        steps: int,
        deadline_ms: int,
        reasks: int,
        evidence_dir: Path | None,
        sink: EvidenceSink,
        on_lost: Callable[[str], None],
    ) -> None:
        self.topo = topo
        self._sink = sink
        self._on_lost = on_lost
        self._evidence_dir = evidence_dir
        self._deadline_ms = deadline_ms
        self._reasks = reasks
        self._stride = steps + 1
        started_ms = time.time_ns() // 1_000_000
        self.session = f"s{started_ms:x}"
        self._session_base = started_ms * 1_000_000
        self._run = -1
        self._base = self._session_base
        #: (address, head digest) the node at address acknowledged holding verified
        self._acked: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------- helpers

    def _count(
        self, node: str, method: str, request: int, response: int, *, rpcs: int = 1, hops: int = 0
    ) -> None:
        meter = self.topo.meter
        c = meter.counts()
        c.rpcs += rpcs
        c.hops_received += hops
        c.request_bytes += request
        c.response_bytes += response
        key = (node, method)
        meter.calls_by_node[key] = meter.calls_by_node.get(key, 0) + 1

    def _fail(self, node: NodeRef, what: str, exc: BaseException) -> Exception:
        if is_refusal(exc):
            # A set-up mistake, not a fault of the run: nothing after it can succeed.
            creds = self.topo.credentials
            address = next((n.address for n in self.topo.nodes if n.name == node.name), "?")
            return control_refused(
                node.name, address, exc, signer=None if creds is None else creds.key_id
            )
        if _code(exc) in _LOST_CODES:
            return NodeLost(node.name, f"{what}: {_details(exc)}")
        return RemoteError(f"{what} on node {node.name}: {_details(exc)}")

    async def _check_alive(self, node_id: str) -> None:
        """An origin accused of not answering: does it answer anything at all?

        A node that no longer answers ``Info`` either (killed, cut off) is
        lost from here on; a faithful node that merely missed a deadline
        still answers and stays correct, so its accusation counts as false.
        """
        import grpc

        from nodes import wire

        node = next((n for n in self.topo.nodes if n.node_id == node_id), None)
        if node is None:
            return
        try:
            await wire.node_stub(self.topo.channel(node.address)).Info(
                wire.info_request(), timeout=2.0
            )
        except grpc.aio.AioRpcError as exc:
            if _code(exc) in _LOST_CODES:
                self._on_lost(node.name)

    # ----------------------------------------------------------------- NodeOps

    async def begin_run(self, label: str) -> None:
        self._run += 1
        self._base = self._session_base + self._run * self._stride
        if self._run * self._stride >= 1_000_000:
            raise RemoteError(
                f"run {label}: more than 10^6 hop sequence numbers in one session"
                f" ({self._run} runs of {self._stride - 1} steps)"
            )

    def commit_ref(self, label: str, name: str) -> str:
        return f"{self.session}/{label}/{name}"

    def delivery_ref(self, arm: str, value_id: int) -> str:
        return f"{self.session}/{arm}/v{value_id}"

    async def append(self, origin: NodeRef, hops: list[bytes], steps: list[int]) -> None:
        import grpc

        from nodes import wire
        from nodes.retry import retry_shed

        stub = wire.hoplog_stub(self.topo.channel(origin.address))
        request = wire.append_request(hops, [self._base + s for s in steps])
        try:
            reply = await retry_shed(
                "/provnet.v1.HopLog/Append",
                lambda left: stub.Append(request, timeout=left),
                _CONTROL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as exc:
            raise self._fail(origin, "append", exc) from None
        self._count(origin.name, "Append", request.ByteSize(), reply.ByteSize())

    async def commit_compaction(
        self, origin: NodeRef, folds: list[tuple[str, list[int], bytes]]
    ) -> CommittedCompaction:
        import grpc

        from nodes import wire
        from nodes.retry import retry_shed

        stub = wire.hoplog_stub(self.topo.channel(origin.address))
        request = wire.commit_compaction_request(
            [(ref, [self._base + s for s in steps], value) for ref, steps, value in folds],
            deadline_ms=self._deadline_ms,
        )
        try:
            reply = await retry_shed(
                "/provnet.v1.HopLog/CommitCompaction",
                lambda left: stub.CommitCompaction(request, timeout=left),
                _CONTROL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as exc:
            refs = ", ".join(ref for ref, _, _ in folds[:3])
            raise self._fail(origin, f"commit compaction ({refs}…)", exc) from None
        self._count(origin.name, "CommitCompaction", request.ByteSize(), reply.ByteSize())
        return wire.committed_compaction_from_pb(reply)

    async def _deliver_once(
        self, sender: NodeRef, first: NodeRef, delivery: Delivery, timeout: float
    ) -> bytes:
        import grpc

        from nodes import wire
        from nodes.retry import retry_shed

        request = wire.deliver_request(delivery)
        try:
            stub = wire.deliver_stub(self.topo.channel(first.address))
            reply = await retry_shed(
                "/provnet.v1.Deliver/Deliver",
                lambda left: stub.Deliver(request, timeout=left),
                timeout,
            )
        except grpc.aio.AioRpcError as exc:
            if _code(exc) == "NOT_FOUND":
                raise _HeadsUnknown(_details(exc)) from None
            raise self._fail(first, f"deliver {delivery.value_ref}", exc) from None
        self._count(sender.name, "Deliver", request.ByteSize(), reply.ByteSize())
        return bytes(reply.delivery_receipt)

    async def deliver(
        self, path: Sequence[NodeRef], delivery: Delivery, timeout: float
    ) -> tuple[Signed[DeliveryReceipt], Delivery]:
        """The origin's delivery as :meth:`nodes.services.NodeCore.send` makes it.

        Heads the first node acknowledged in an earlier signed receipt travel
        as the digests their fold proofs name; a ``NOT_FOUND`` answer (the
        node no longer holds one) repeats the delivery once with every head.
        Relays forward with their own ``send``.
        """
        import grpc

        from nodes import wire
        from nodes.retry import retry_shed

        sender, first = path[0], path[1]
        digests = {h: head_digest(h) for h in delivery.heads}
        elided = tuple(h for h in delivery.heads if (first.address, digests[h]) in self._acked)
        sent = delivery
        if elided:
            sent = replace(delivery, heads=tuple(h for h in delivery.heads if h not in elided))
        try:
            data = await self._deliver_once(sender, first, sent, timeout)
        except _HeadsUnknown as exc:
            if not elided:
                raise RemoteError(
                    f"deliver {delivery.value_ref} on node {first.name}: {exc}"
                ) from None
            for h in elided:
                self._acked.discard((first.address, digests[h]))
            sent = delivery
            try:
                data = await self._deliver_once(sender, first, sent, timeout)
            except _HeadsUnknown as again:
                raise RemoteError(
                    f"deliver {delivery.value_ref} on node {first.name}: {again}"
                ) from None
        # Parsed, bound to the node's key, not verified: it decides only which
        # heads travel as digests next time (a node without one answers NOT_FOUND).
        receipt = parse_statement(data, DeliveryReceipt, signer=first.node_id)
        for digest in receipt.statement.obligations:
            if digest in digests.values():
                self._acked.add((first.address, digest))
        for relay, nxt in itertools.pairwise(path[1:]):
            forward = wire.forward_request(delivery.value_ref, nxt.name)
            try:
                relay_stub: Any = wire.deliver_stub(self.topo.channel(relay.address))

                def forward_once(left: float, s: Any = relay_stub, f: Any = forward) -> Any:
                    return s.Forward(f, timeout=left)

                answer = await retry_shed("/provnet.v1.Deliver/Forward", forward_once, timeout)
            except grpc.aio.AioRpcError as exc:
                raise self._fail(
                    relay, f"forward {delivery.value_ref} to {nxt.name}", exc
                ) from None
            # The relay's own Deliver to the next node carries the value and statements
            # (its heads as digests once the next node acknowledged them).
            self._count(relay.name, "Deliver", forward.ByteSize(), answer.ByteSize())
        return receipt, sent

    async def rehydrate(self, value_ref: str) -> RehydrationReport:
        import grpc

        from nodes import wire
        from nodes.retry import retry_shed

        holder = self.topo.holder
        witness = self.topo.witness
        request = wire.rehydrate_request(value_ref, [witness.name] if witness is not None else [])
        # ask + re-asks + a witness challenge, each bounded by the promised deadline
        timeout = (self._reasks + 3) * self._deadline_ms / 1000.0 + _CONTROL_TIMEOUT_S
        try:
            stub = wire.deliver_stub(self.topo.channel(holder.address))
            reply = await retry_shed(
                "/provnet.v1.Deliver/Rehydrate",
                lambda left: stub.Rehydrate(request, timeout=left),
                timeout,
            )
        except grpc.aio.AioRpcError as exc:
            raise self._fail(holder, f"rehydrate {value_ref}", exc) from None
        report = wire.rehydration_report_from_pb(reply)
        self._count(
            holder.name,
            "Rehydrate",
            request.ByteSize(),
            reply.ByteSize(),
            rpcs=report.rpcs,
            hops=len(report.hops),
        )
        for o in report.outcomes:
            if not o.accuses or not o.evidence or not o.evidence_path:
                # Recorded only where the holder recorded it (its file's path): a
                # suspicion short of the holder's witness confirmations comes back
                # with its body but is not evidence, as in the in-process run.
                continue
            if o.outcome is Outcome.UNANSWERED:
                await self._check_alive(o.origin)
            path = o.evidence_path
            if self._evidence_dir is not None:
                self._evidence_dir.mkdir(parents=True, exist_ok=True)
                name = Path(o.evidence_path).name or f"{o.outcome.value}-{len(o.evidence)}.json"
                local = self._evidence_dir / name
                local.write_bytes(o.evidence)
                path = str(local)
            await self._sink(o.outcome.value, o.origin, o.evidence, path)
        return report
