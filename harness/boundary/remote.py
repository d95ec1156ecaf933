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
  way a node's ``send`` does, by the same code
  (:meth:`nodes.control.NodeClients.send`) — a head the first node
  acknowledged in an earlier delivery travels as its digest afterwards, and in
  full again after a ``NOT_FOUND`` — and each relay forwards it with
  ``Forward`` (its own ``send``). The holder verifies heads and fold proofs in its own process.
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

**Every call** goes through :class:`nodes.control.NodeClients`, the one
client the cluster tools use (this module imports no gRPC): every control
call is signed with the operator key (``$PROVNET_OPERATOR_KEY_FILE``, else
the cluster home's ``operator.key``), which the nodes authorise
(``nodes.auth``); every call has a deadline; shed calls are retried within
it; deliveries leave heads out as a node's own ``send`` does
(:class:`nodes.elision.HeadElision`); and the run's wire meter counts calls
and bytes through the client's metering hook. A node that stops answering
(``UNAVAILABLE``, deadline exceeded) is *lost*: it commits nothing more,
values keep the folds they had, and the holder's demands to it end
``unanswered`` naming it; the run completes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.boundary.choices import Role, TransportKind
from harness.boundary.topology import EvidenceSink, NodeLost, NodeRef
from harness.boundary.wire import WireMeter
from nodes.auth import ControlCredentials
from nodes.control import CallRecord, NodeClients
from nodes.faults import FaultMode
from nodes.messages import CommittedCompaction, Delivery, Outcome, RehydrationReport
from nodes.refusal import control_refused, is_refusal
from nodes.tls import TlsFiles
from nodes.transport import CallFailed

__all__ = ["RemoteNode", "RemoteOps", "RemoteTopology", "connect_remote"]

_CONTROL_TIMEOUT_S = 30.0
#: How long a node that refuses connections is given to come up before it counts as absent.
_START_WAIT_S = 5.0
#: gRPC status codes after which a node counts as lost rather than as misbehaving.
_LOST_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
#: The calls the wire meter counts: the run's own (:class:`RemoteOps`), not the driver's
#: look-ups (``Info``) nor what other players on the same clients call (attestations).
_METERED = frozenset({"Append", "CommitCompaction", "Deliver", "Forward", "Rehydrate"})


class RemoteError(Exception):
    """A remote node cannot play its role (names the node and what it answered)."""


@dataclass(frozen=True, slots=True)
class RemoteNode:
    name: str
    role: Role
    address: str
    node_id: str
    fault: FaultMode


@dataclass(slots=True)
class RemoteTopology:
    """Running nodes and the clients to them; :meth:`close` closes the clients."""

    origins: list[RemoteNode]
    relays: list[RemoteNode]
    holder: RemoteNode
    witness: RemoteNode | None
    meter: WireMeter
    #: the clients, signing control calls with the operator key (None: unsigned)
    clients: NodeClients = field(default_factory=NodeClients)
    transport: TransportKind = TransportKind.REMOTE

    @property
    def credentials(self) -> ControlCredentials | None:
        """The operator key control calls are signed with (None: plain channels)."""
        return self.clients.credentials

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

    async def close(self) -> None:
        await self.clients.close()


async def connect_remote(
    members: Sequence[tuple[str, str]],
    *,
    origins: Sequence[str],
    relays: Sequence[str],
    holder: str,
    witness: str | None,
    credentials: ControlCredentials | None = None,
    tls: TlsFiles | None = None,
) -> RemoteTopology:
    """Ask each named node for its identity and fault; map the roles onto them.

    ``tls``: every call is TLS, verifying each node's certificate against its CA.
    Raises :class:`RemoteError` naming a role whose node is not among
    ``members`` or does not answer ``Info`` (over TLS: naming the certificate
    check that failed, when that is why).
    """
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
        NodeClients(credentials, timeout=_CONTROL_TIMEOUT_S, tls=tls),
    )
    try:
        nodes: list[RemoteNode] = []
        for name, role in roles:
            address = addresses.get(name)
            if address is None:
                known = ", ".join(addresses) or "none"
                raise RemoteError(f"{role.value} {name!r} is not a node here (nodes: {known})")
            client = topo.clients.at(address)
            # A node started just before the driver may still be binding its port.
            give_up = time.monotonic() + _START_WAIT_S
            while True:
                try:
                    info = await client.info(timeout=5.0)
                    break
                except CallFailed as exc:
                    why = None if tls is None else await _tls_failure(address, tls)
                    if why is None and exc.code == "UNAVAILABLE" and time.monotonic() < give_up:
                        await asyncio.sleep(0.2)
                        continue
                    raise RemoteError(
                        f"{role.value} {name} at {address} does not answer:"
                        f" {exc.code}: {exc.message}"
                        if why is None
                        else f"{role.value} {name} at {address}: TLS: {why}; nothing was sent"
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


async def _tls_failure(address: str, tls: TlsFiles) -> str | None:
    """Why a TLS handshake with ``address`` fails (:func:`nodes.tls.diagnose`), or None."""
    from nodes.tls import diagnose

    ca_pem = tls.ca_pem()
    return None if ca_pem is None else await diagnose(address, ca_pem, timeout=2.0)


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
        #: the node a delivery leaves on behalf of (the driver sends the origin's)
        self._sender = ""
        topo.clients.on_call = self._metered

    # ----------------------------------------------------------------- helpers

    def _metered(self, call: CallRecord) -> None:
        """The client's metering hook: the run's answered calls, per node and method.

        A call counts for the node that makes it in a deployment: a delivery
        for its sender, a forward as the relay's own ``Deliver``, anything
        else for the node called. A rehydration's calls are the holder's, as
        its report counts them (:meth:`rehydrate`); only its bytes count here.
        """
        method = call.method.rsplit("/", 1)[-1]
        if call.code != "OK" or method not in _METERED:
            return
        meter = self.topo.meter
        c = meter.counts()
        if method != "Rehydrate":
            c.rpcs += 1
        c.request_bytes += call.request_bytes
        c.response_bytes += call.response_bytes
        if method == "Deliver":
            node = self._sender
        else:
            node = next((n.name for n in self.topo.nodes if n.address == call.address), "?")
            method = "Deliver" if method == "Forward" else method
        key = (node, method)
        meter.calls_by_node[key] = meter.calls_by_node.get(key, 0) + 1

    def _fail(self, node: NodeRef, what: str, exc: CallFailed) -> Exception:
        if is_refusal(exc):
            # A set-up mistake, not a fault of the run: nothing after it can succeed.
            creds = self.topo.credentials
            address = next((n.address for n in self.topo.nodes if n.name == node.name), "?")
            return control_refused(
                node.name, address, exc, signer=None if creds is None else creds.key_id
            )
        if exc.code in _LOST_CODES:
            return NodeLost(node.name, f"{what}: {exc.code}: {exc.message}")
        return RemoteError(f"{what} on node {node.name}: {exc.code}: {exc.message}")

    async def _check_alive(self, node_id: str) -> None:
        """An origin accused of not answering: does it answer anything at all?

        A node that no longer answers ``Info`` either (killed, cut off) is
        lost from here on; a faithful node that merely missed a deadline
        still answers and stays correct, so its accusation counts as false.
        """
        node = next((n for n in self.topo.nodes if n.node_id == node_id), None)
        if node is None:
            return
        try:
            await self.topo.clients.at(node.address).info(timeout=2.0)
        except CallFailed as exc:
            if exc.code in _LOST_CODES:
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
        try:
            await self.topo.clients.at(origin.address).append(hops, [self._base + s for s in steps])
        except CallFailed as exc:
            raise self._fail(origin, "append", exc) from None

    async def commit_compaction(
        self, origin: NodeRef, folds: list[tuple[str, list[int], bytes]]
    ) -> CommittedCompaction:
        try:
            return await self.topo.clients.at(origin.address).commit_compaction(
                [(ref, [self._base + s for s in steps], value) for ref, steps, value in folds],
                deadline_ms=self._deadline_ms,
            )
        except CallFailed as exc:
            refs = ", ".join(ref for ref, _, _ in folds[:3])
            raise self._fail(origin, f"commit compaction ({refs}…)", exc) from None

    async def deliver(
        self, path: Sequence[NodeRef], delivery: Delivery, timeout: float
    ) -> Delivery:
        """The origin's delivery as :meth:`nodes.holding.Holding.send` makes it.

        Heads the first node acknowledged in an earlier delivery travel as the
        digests their fold proofs name; a ``NOT_FOUND`` answer (the node no
        longer holds one) repeats the delivery once with every head
        (:meth:`nodes.control.NodeClients.send`). Relays forward with their
        own ``send``.
        """
        sender, first = path[0], path[1]
        self._sender = sender.name
        try:
            _, sent = await self.topo.clients.send(first.address, delivery, timeout)
        except CallFailed as exc:
            raise self._fail(first, f"deliver {delivery.value_ref}", exc) from None
        for relay, nxt in itertools.pairwise(path[1:]):
            # The relay's own Deliver to the next node carries the value and statements
            # (its heads as digests once the next node acknowledged them); no
            # receipt is asked for, as on in-process nodes.
            try:
                await self.topo.clients.at(relay.address).forward(
                    delivery.value_ref, nxt.name, timeout=timeout, signed_receipt=False
                )
            except CallFailed as exc:
                raise self._fail(
                    relay, f"forward {delivery.value_ref} to {nxt.name}", exc
                ) from None
        return sent

    async def rehydrate(self, value_ref: str) -> RehydrationReport:
        holder = self.topo.holder
        witness = self.topo.witness
        # ask + re-asks + a witness challenge, each bounded by the promised deadline
        timeout = (self._reasks + 3) * self._deadline_ms / 1000.0 + _CONTROL_TIMEOUT_S
        try:
            report = await self.topo.clients.at(holder.address).rehydrate(
                value_ref, [witness.name] if witness is not None else [], timeout=timeout
            )
        except CallFailed as exc:
            raise self._fail(holder, f"rehydrate {value_ref}", exc) from None
        # The holder's calls, as it counted them; the hops that crossed to it.
        c = self.topo.meter.counts()
        c.rpcs += report.rpcs
        c.hops_received += len(report.hops)
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
