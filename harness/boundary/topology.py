"""The nodes a boundary run plays on: origins, relays, the holder and a witness.

Two transports, the same node code (:class:`nodes.services.NodeCore` with a
real SQLite hop log in a temporary directory and real Ed25519 keys):

- ``memory`` — every node in this process, reaching the others through
  :class:`nodes.transport.InMemoryTransport` (same deadline, size and
  status behaviour as gRPC, no sockets);
- ``grpc`` — every node a real grpc.aio server on ``127.0.0.1:0``
  (:func:`nodes.app.start_node`), reached through
  :class:`nodes.transport.GrpcTransport`; servers are stopped in
  :meth:`Topology.close`, which the runner calls in ``finally``.

Every node started here (either transport) and the holder's client read one
:class:`RunClock`, so what a run reports in bytes does not depend on the
wall-clock millisecond its statements happen to be signed in.

Every node's outgoing calls pass through a
:class:`harness.boundary.wire.MeteredTransport` so the runner can count
them. Only ``origins[0]`` runs the requested fault; every other node is
faithful — so any accusation of them would be a false one (S8).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, assert_never

from harness.boundary.choices import Role, TransportKind
from harness.boundary.wire import MeteredTransport, WireMeter
from nodes.app import RunningNode, load_or_create_identity, start_node
from nodes.auth import ControlCredentials
from nodes.client import Holder
from nodes.config import NodeConfig, Peer
from nodes.faults import FaultMode, FaultPlan
from nodes.messages import CommittedCompaction, Delivery, RehydrationReport
from nodes.services import NodeCore
from nodes.store import StoreMode
from nodes.transport import GrpcTransport, InMemoryTransport, LocalNode, Transport

__all__ = [
    "EvidenceSink",
    "LocalOps",
    "Network",
    "NodeHandle",
    "NodeLost",
    "NodeOps",
    "NodeRef",
    "NodeSpec",
    "RunClock",
    "Topology",
    "start_topology",
]

#: Called with (kind, accused node id, evidence bytes, file path) for each record.
EvidenceSink = Callable[[str, str, bytes, str], Awaitable[None]]
#: Wraps an in-memory node's outgoing transport, given the node's name.
Network = Callable[[Transport, str], Transport]
#: What answers for an in-memory node in the transport's registry, given its spec and
#: core (default: the core itself; a simulation's adversary wraps some).
ServeAs = Callable[["NodeSpec", NodeCore], LocalNode]


class RunClock:
    """The clock every node of an in-process run (and its holder) reads: wall time,
    except that a time landing on a whole second reads one millisecond later.

    Wire version 4 sends a whole-second time as seconds, one byte shorter than the
    same time in ms (:data:`nodes.wire.WIRE_VERSION`), so on the wall clock about one
    head statement in a thousand came out a byte short, and a run's byte counts
    (delivery bytes, ``boundary_costs.csv``) moved with the moment it ran. On this
    clock no time a node stamps is a whole second, and every reading is within 1 ms
    of the wall clock, so freshness and skew checks against anything that reads the
    wall clock (control-call signatures, evidence checks) hold as before. Nodes
    reached with ``--cluster``/``--nodes`` keep their own clocks.
    """

    __slots__ = ("_wall",)

    def __init__(self, wall: Callable[[], float] | None = None) -> None:
        self._wall = wall

    def now_ms(self) -> int:
        ms = int((self._wall() if self._wall is not None else time.time()) * 1000)
        return ms + 1 if ms % 1000 == 0 else ms

    def __call__(self) -> float:
        # a quarter ms past the ms, so int(clock() * 1000) reads it back exactly
        return (self.now_ms() + 0.25) / 1000


class NodeLost(Exception):
    """A node stopped answering its control calls (killed, unreachable) during a run."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"node {name} is lost: {detail}")
        self.name = name


class NodeRef(Protocol):
    """What the player needs to know of a node, wherever it runs."""

    @property
    def name(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def address(self) -> str: ...


class NodeOps(Protocol):
    """The calls a run makes on its nodes: in this process (:class:`LocalOps`) or remote.

    ``begin_run`` keeps runs apart on the origins; ``commit_ref`` names a
    fold's value ref (``name`` is unique within a run); ``commit_compaction``
    has an origin fold several values' hops under ONE signed head;
    ``deliver`` sends ``delivery`` along ``path`` (origin, relays…, holder)
    the way :meth:`nodes.holding.Holding.send` does — heads the next node
    acknowledged before travel as their digests, resent in full on
    ``NOT_FOUND`` — and returns the first receiver's receipt, opened under
    its key, and the delivery as sent; ``rehydrate`` has the holder demand a
    held value's folds.
    """

    async def begin_run(self, label: str) -> None: ...
    def commit_ref(self, label: str, name: str) -> str: ...
    def delivery_ref(self, arm: str, value_id: int) -> str: ...
    async def append(self, origin: NodeRef, hops: list[bytes], steps: list[int]) -> None: ...
    async def commit_compaction(
        self, origin: NodeRef, folds: list[tuple[str, list[int], bytes]]
    ) -> CommittedCompaction: ...
    async def deliver(
        self, path: Sequence[NodeRef], delivery: Delivery, timeout: float
    ) -> Delivery:
        """Deliver along ``path``; the delivery as the first hop sent it. No
        receipt is asked for: nothing in the experiment cites one."""
        ...

    async def rehydrate(self, value_ref: str) -> RehydrationReport: ...


@dataclass(slots=True)
class NodeHandle:
    name: str
    role: Role
    core: NodeCore
    address: str
    fault: FaultMode
    running: RunningNode | None = None

    @property
    def node_id(self) -> str:
        return self.core.node_id


@dataclass(slots=True)
class Topology:
    """The started nodes; close them with :meth:`close` (idempotent)."""

    transport: TransportKind
    origins: list[NodeHandle]
    relays: list[NodeHandle]
    holder: NodeHandle
    witness: NodeHandle | None
    meter: WireMeter
    _closed: bool = field(default=False)
    #: custodians the origins ask at each commit (``--custody-k``)
    custodians: list[NodeHandle] = field(default_factory=list)

    @property
    def nodes(self) -> list[NodeHandle]:
        extra = [self.witness] if self.witness is not None else []
        return [*self.origins, *self.relays, self.holder, *extra, *self.custodians]

    def correct_ids(self) -> set[str]:
        return {n.node_id for n in self.nodes if n.fault is FaultMode.NONE}

    def name_of(self, node_id: str) -> str:
        for n in self.nodes:
            if n.node_id == node_id:
                return n.name
        return node_id[:16]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await _stop_all(self.nodes, grace=0.5)


async def _stop_all(handles: list[NodeHandle], *, grace: float) -> None:
    """Stop nodes in reverse start order; keep going past a failure, then raise the first."""
    errors: list[BaseException] = []
    for node in reversed(handles):
        try:
            if node.running is not None:
                await node.running.stop(grace)
            else:
                await node.core.close()
        except Exception as exc:  # keep stopping the others
            errors.append(exc)
    if errors:
        raise errors[0]


class LocalOps:
    """:class:`NodeOps` on nodes this process started: direct calls into their cores.

    Deliveries leave from the origin's own transport; the holder's demands
    go through a :class:`nodes.client.Holder` on the holder's identity and
    transport, whose evidence is kept in the holder's store, then handed to
    ``sink``.
    """

    def __init__(
        self,
        topo: Topology,
        *,
        reasks: int,
        cache: bool,
        evidence_dir: Path | None,
        sink: EvidenceSink,
    ) -> None:
        self.topo = topo
        self._sink = sink
        holder = topo.holder.core
        self.client = Holder(
            holder.identity,
            holder.transport,
            evidence_dir=evidence_dir if evidence_dir is not None else holder.config.evidence_path,
            reasks=reasks,
            on_evidence=self._keep,
            cache=cache,
            clock=holder.clock,  # the run's clock, as every node of the run
        )

    async def _keep(self, kind: str, accused: str, body: bytes, path: str) -> None:
        await self.topo.holder.core.keep_evidence(kind, accused, body, path)
        await self._sink(kind, accused, body, path)

    def _core(self, node: NodeRef) -> NodeCore:
        for handle in self.topo.nodes:
            if handle.name == node.name:
                return handle.core
        raise KeyError(node.name)

    async def begin_run(self, label: str) -> None:
        for origin in self.topo.origins:
            await origin.core.store.new_epoch()  # hop ids restart every run (seed 000)

    def commit_ref(self, label: str, name: str) -> str:
        return name  # every run is a new epoch here: names cannot meet across runs

    def delivery_ref(self, arm: str, value_id: int) -> str:
        return f"{arm}/v{value_id}"

    async def append(self, origin: NodeRef, hops: list[bytes], steps: list[int]) -> None:
        await self._core(origin).append(hops, steps)

    async def commit_compaction(
        self, origin: NodeRef, folds: list[tuple[str, list[int], bytes]]
    ) -> CommittedCompaction:
        return await self._core(origin).commit_compaction(folds)

    async def deliver(
        self, path: Sequence[NodeRef], delivery: Delivery, timeout: float
    ) -> Delivery:
        _, sent = await self._core(path[0]).send(path[1].address, delivery, timeout)
        for relay, nxt in itertools.pairwise(path[1:]):
            await self._core(relay).forward(
                delivery.value_ref,
                nxt.address,
                deadline=time.monotonic() + timeout,
                signed_receipt=False,
            )
        return sent

    async def rehydrate(self, value_ref: str) -> RehydrationReport:
        topo = self.topo
        held = topo.holder.core.held(value_ref)
        witnesses = [topo.witness.address] if topo.witness is not None else []
        report: RehydrationReport = await self.client.rehydrate(
            value_ref, held.folds, witnesses=witnesses
        )
        return report


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    role: Role
    fault: FaultMode = FaultMode.NONE
    fault_delay_ms: int = 0


async def start_topology(
    root: Path,
    specs: list[NodeSpec],
    transport: TransportKind,
    *,
    deadline_ms: int,
    reasks: int,
    store_mode: StoreMode = StoreMode.DURABLE,
    clock: RunClock | None = None,
    network: Network | None = None,
    serve_as: ServeAs | None = None,
) -> Topology:
    """Start every node of ``specs`` (data dirs under ``root``); stop them all on failure.

    ``store_mode`` scratch when ``root`` is a temporary directory removed
    after the run: the nodes' logs then claim no durability
    (:class:`nodes.store.StoreMode`). ``clock`` is the clock every node and
    the holder read (default: a :class:`RunClock` on the wall clock; a
    simulation passes one on its virtual clock). ``network`` wraps each
    in-memory node's outgoing transport (called with the transport and the
    node's name): a simulation's model of WAN delay, loss and churn. ``serve_as``
    says what answers for an in-memory node (a simulation's lying witness)."""
    meter = WireMeter()
    clock = clock if clock is not None else RunClock()
    registry: dict[str, LocalNode] = {}
    handles: list[NodeHandle] = []
    try:
        for spec in specs:
            handles.append(
                await _start_one(
                    root,
                    spec,
                    transport,
                    meter,
                    clock,
                    registry,
                    deadline_ms,
                    reasks,
                    store_mode,
                    network,
                    serve_as,
                )
            )
    except BaseException:
        await _stop_all(handles, grace=0.1)
        raise
    origins = [h for h in handles if h.role is Role.ORIGIN]
    relays = [h for h in handles if h.role is Role.RELAY]
    holders = [h for h in handles if h.role is Role.HOLDER]
    witnesses = [h for h in handles if h.role is Role.WITNESS]
    if not origins or len(holders) != 1:
        raise ValueError("a topology needs at least one origin and exactly one holder")
    custodians = [h for h in handles if h.role is Role.CUSTODIAN]
    if custodians:
        _place_custody(origins, custodians)
    return Topology(
        transport,
        origins,
        relays,
        holders[0],
        witnesses[0] if witnesses else None,
        meter,
        custodians=custodians,
    )


def _place_custody(origins: list[NodeHandle], custodians: list[NodeHandle]) -> None:
    """Every origin asks every custodian at each commit (k = their number); each
    custodian is its own operator (its name) and pins the origins as peers."""
    pins = tuple(Peer(o.name, o.address, o.node_id) for o in origins)
    for o in origins:
        o.core.config = dataclasses.replace(
            o.core.config,
            peers=(
                *o.core.config.peers,
                *(Peer(c.name, c.address, c.node_id) for c in custodians),
            ),
            custodians=tuple(c.name for c in custodians),
            custody_k=len(custodians),
        )
    for c in custodians:
        c.core.config = dataclasses.replace(
            c.core.config, peers=(*c.core.config.peers, *pins), operator=c.name
        )


async def _start_one(
    root: Path,
    spec: NodeSpec,
    transport: TransportKind,
    meter: WireMeter,
    clock: RunClock,
    registry: dict[str, LocalNode],
    deadline_ms: int,
    reasks: int,
    store_mode: StoreMode,
    network: Network | None = None,
    serve_as: ServeAs | None = None,
) -> NodeHandle:
    data_dir = root / spec.name
    if transport is TransportKind.MEMORY:
        address = f"{spec.name}.mem:1"
        config = NodeConfig(
            name=spec.name,
            data_dir=data_dir,
            listen=address,
            fault=spec.fault,
            fault_delay_ms=spec.fault_delay_ms,
            deadline_ms=deadline_ms,
            reasks=reasks,
        )
        core_ref: list[NodeCore] = []

        def crash() -> None:  # never os._exit inside the runner's process
            core_ref[0].crashed = True

        inner: Transport = InMemoryTransport(registry=registry)
        if network is not None:
            inner = network(inner, spec.name)
        core = await NodeCore.open(
            config,
            load_or_create_identity(data_dir),
            transport=MeteredTransport(inner, meter, spec.name),
            fault=FaultPlan(spec.fault, spec.fault_delay_ms, crash=crash),
            store_mode=store_mode,
            clock=clock,
        )
        core_ref.append(core)
        registry[address] = serve_as(spec, core) if serve_as is not None else core
        return NodeHandle(spec.name, spec.role, core, address, spec.fault)
    if transport is TransportKind.REMOTE:
        raise ValueError(f"node {spec.name}: remote nodes are connected to, not started here")
    if transport is not TransportKind.GRPC:
        assert_never(transport)
    config = NodeConfig(
        name=spec.name,
        data_dir=data_dir,
        listen="127.0.0.1:0",
        fault=spec.fault,
        fault_delay_ms=spec.fault_delay_ms,
        deadline_ms=deadline_ms,
        reasks=reasks,
        shutdown_grace_s=0.5,
    )
    # The node signs what it delivers with its own key (nodes.auth: deliver-as-sender).
    signer = ControlCredentials(load_or_create_identity(data_dir))
    running = await start_node(
        config,
        transport=MeteredTransport(
            GrpcTransport(config.max_message_bytes, credentials=signer), meter, spec.name
        ),
        store_mode=store_mode,
        clock=clock,
    )
    return NodeHandle(spec.name, spec.role, running.core, running.address, spec.fault, running)
