"""Rows of ``provnet experiment attest``: each one boundary run set with an attester.

A row (:class:`harness.attest.rows.RowSpec`) is played on its own topology —
origin, holder, witness as in ``experiment boundary``, plus the attester
node — over the death-spiral run (or, with ``matrix``, the main matrix).
Rows are independent, so ``workers`` > 1 plays them in separate processes;
every number a row yields is a function of the row and the config alone
(the run clock is :func:`harness.attest.policy.run_ms`, keys do not enter
any decision), so results are identical for any ``workers``.

The attester is a node started with the row's attester mode
(:func:`harness.attest.attester.attester_fault`): in this process (memory or
gRPC transport), or — transport ``remote`` — a running node process, with
the origin, holder and witness processes named in the slice
(:class:`AttestSlice`); the holder side then reaches every node over gRPC
only (:class:`harness.attest.attester.RemoteAttestOps`).

After the runs the holder side demands back, from the attester, the hop of
the first and the last attestation the attester logged, verifies each
against the attester's commitment and checks it names the attestation (A6).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness._workers import exit_with_parent
from harness.attest.attester import LocalAttestOps, RemoteAttestOps, attester_fault
from harness.attest.play import AttestContext, AttestPlayer, DecisionRecord, counts_of
from harness.attest.policy import STEP_MS, AttestPolicy
from harness.attest.rows import ATTESTER, Row, RowSpec
from harness.boundary.choices import Role, TransportKind
from harness.boundary.play import Runner
from harness.boundary.records import BoundarySettings
from harness.boundary.remote import RemoteNode, RemoteTopology, connect_remote
from harness.boundary.topology import Topology, start_topology
from harness.boundary.wire import CryptoMeter, MeteredTransport
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.metrics import RunKey
from harness.runner import replay_params
from harness.trajectory import generate
from nodes.app import RunningNode, load_or_create_identity, start_node
from nodes.attester import AttesterFault
from nodes.config import NodeConfig
from nodes.faults import FaultMode
from nodes.services import NodeCore
from nodes.store import StoreMode
from nodes.transport import GrpcTransport, InMemoryTransport

__all__ = ["AttestSlice", "RowResult", "node_names", "play_rows", "run_row"]

_DEADLINE_MS = 10_000


@dataclass(frozen=True, slots=True)
class AttestSlice:
    """Which runs every row plays, and on which transport.

    ``transport`` ``remote`` plays on running node processes: ``nodes`` are
    (name, host:port), ``chain`` names the origin and the holder among them
    and ``witness_name`` the witness ("" for none), and ``attesters``
    (attester mode, node name) the attester node of each mode (``provnet node
    --attest-fault MODE``); control calls are signed with the operator key of
    ``control_home`` (or ``$PROVNET_OPERATOR_KEY_FILE``).
    """

    matrix: bool = False
    steps: int | None = None  # death-spiral steps (default: the config's)
    transport: TransportKind = TransportKind.MEMORY
    nodes: tuple[tuple[str, str], ...] = ()
    attesters: tuple[tuple[str, str], ...] = ()
    control_home: str = ""
    #: running nodes: the CA their TLS certificates are verified with ("": plaintext)
    tls_ca: str = ""
    #: running nodes: the origin and the holder by name, and the witness ("": none)
    chain: tuple[str, ...] = ("origin", "holder")
    witness_name: str = "witness"

    def tasks(self, cfg: ExperimentConfig) -> list[tuple[RunKey, Any, Any, int]]:
        if self.matrix:
            return [
                (
                    RunKey("main", c, p, s),
                    cfg.degradation_profiles[p],
                    replay_params(cfg, c, s, record_curve=False),
                    cfg.steps,
                )
                for c in cfg.compaction_cadence
                for p in cfg.degradation_profiles
                for s in cfg.seeds
            ]
        ds = cfg.death_spiral_run
        if ds is None:
            raise ValueError("the config has no death_spiral_run")
        return [
            (
                RunKey("death_spiral", ds.compaction_cadence, ds.profile, ds.seed),
                cfg.degradation_profiles[ds.profile],
                replay_params(cfg, ds.compaction_cadence, ds.seed, record_curve=False),
                ds.steps if self.steps is None else self.steps,
            )
        ]


@dataclass(slots=True)
class RowResult:
    """Everything one row yields (picklable: rows run in worker processes)."""

    name: str
    row: str
    axis: str
    lifetime_steps: int
    steps: int
    cadence: int
    runs: list[tuple[str, str, str]]  # (label, in-process fingerprint, boundary fingerprint)
    records: list[DecisionRecord]
    counts: dict[str, Any]
    latencies: list[float]
    wire: dict[str, dict[str, float]]
    plain: dict[str, float]
    bundle_files: list[tuple[str, bytes]]
    logged: int
    a6_checked: int
    a6_verified: int
    revoked_at_step: int | None
    wall_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return combine((label, b) for label, _, b in self.runs)

    @property
    def in_process_fingerprint(self) -> str:
        return combine((label, i) for label, i, _ in self.runs)


async def _start_attester(
    topo: Topology,
    root: Path,
    deadline_ms: int,
    fault: AttesterFault,
    store_mode: StoreMode = StoreMode.DURABLE,
) -> tuple[NodeCore, str, RunningNode | None]:
    data_dir = root / ATTESTER
    meter = topo.meter
    if topo.transport is TransportKind.MEMORY:
        holder_transport = topo.holder.core.transport
        inner = holder_transport.inner if isinstance(holder_transport, MeteredTransport) else None
        if not isinstance(inner, InMemoryTransport):
            raise RuntimeError("memory topology without an in-memory transport")
        address = f"{ATTESTER}.mem:1"
        config = NodeConfig(
            name=ATTESTER,
            data_dir=data_dir,
            listen=address,
            deadline_ms=deadline_ms,
            attest_fault=fault,
        )
        core = await NodeCore.open(
            config,
            load_or_create_identity(data_dir),
            transport=MeteredTransport(inner, meter, ATTESTER),
            store_mode=store_mode,
        )
        inner.register(address, core)
        return core, address, None
    # The holder asks with issue times on the run clock, which lies years ahead
    # of the attester's; only an attester's operator may date an attestation
    # so (nodes.attest_log), and in a run the holder speaks for the experiment.
    config = NodeConfig(
        name=ATTESTER,
        data_dir=data_dir,
        listen="127.0.0.1:0",
        deadline_ms=deadline_ms,
        shutdown_grace_s=0.5,
        attest_fault=fault,
        operator_keys=(topo.holder.core.node_id,),
    )
    running = await start_node(
        config,
        transport=MeteredTransport(GrpcTransport(config.max_message_bytes), meter, ATTESTER),
        store_mode=store_mode,
    )
    return running.core, running.address, running


def _settings(slice_: AttestSlice, cadence: int, steps: int) -> BoundarySettings:
    # A 10 s answer deadline: a faithful origin on a loaded machine must not miss
    # it, or a fallback would make the decisions depend on the machine's load.
    if slice_.transport is TransportKind.REMOTE:
        return BoundarySettings(
            cadences=(cadence,),
            steps=steps,
            transport=slice_.transport,
            deadline_ms=_DEADLINE_MS,
            nodes=slice_.nodes,
            control_home=slice_.control_home,
            tls_ca=slice_.tls_ca,
            chain=slice_.chain,
            witness=bool(slice_.witness_name),
            witness_name=slice_.witness_name or "witness",
        )
    return BoundarySettings(
        cadences=(cadence,), steps=steps, transport=slice_.transport, deadline_ms=_DEADLINE_MS
    )


def node_names(slice_: AttestSlice) -> list[str]:
    """The node names every row of ``slice_`` runs: the names a policy may use."""
    if slice_.transport is TransportKind.REMOTE:
        return sorted({*(n for n, _ in slice_.nodes), ATTESTER})
    return sorted({*_settings(slice_, 1, 1).node_names(), ATTESTER})


async def run_row(
    cfg: ExperimentConfig,
    spec: RowSpec,
    base_policy: AttestPolicy,
    slice_: AttestSlice,
    *,
    work_dir: Path | None = None,
) -> RowResult:
    """Play one row (module docstring)."""
    tasks = slice_.tasks(cfg)
    steps = tasks[0][3]
    policy = spec.policy(base_policy, steps)
    settings = _settings(slice_, tasks[0][0].cadence, steps)
    fault = attester_fault(spec.row)
    from harness.boundary.runner import _scratch_root

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="provnet-attest-", dir=_scratch_root()) as tmp:
        root = work_dir if work_dir is not None else Path(tmp)
        # As the boundary runner: the nodes this run starts keep their logs in a
        # directory removed after it, so they claim no durability (scratch); a
        # kept work_dir gets deployed (durable) stores. Running nodes (--nodes)
        # are the user's and keep their own mode.
        store_mode = StoreMode.DURABLE if work_dir is not None else StoreMode.SCRATCH
        topo: Topology | RemoteTopology
        attester_node: RemoteNode | None = None
        if settings.transport is TransportKind.REMOTE:
            from harness.boundary.runner import _control_credentials, _tls

            by_fault = dict(slice_.attesters)
            attester_name = by_fault.get(fault.value)
            if attester_name is None and spec.row is not Row.NONE:
                raise ValueError(f"row {spec.name}: no attester node with --attest-fault {fault}")
            witness = (
                settings.witness_name
                if settings.witness and settings.witness_name in dict(settings.nodes)
                else None
            )
            topo = await connect_remote(
                settings.nodes,
                origins=settings.origin_names(),
                relays=(),
                holder=settings.chain[-1],
                witness=witness,
                credentials=_control_credentials(settings),
                tls=_tls(settings),
            )
            if attester_name is not None:
                attester_node = await _remote_attester(
                    topo, attester_name, dict(settings.nodes).get(attester_name)
                )
        else:
            topo = await start_topology(
                root,
                settings.specs(),
                settings.transport,
                deadline_ms=settings.deadline_ms,
                reasks=settings.reasks,
                store_mode=store_mode,
            )
        running: RunningNode | None = None
        core: NodeCore | None = None
        ops: LocalAttestOps | RemoteAttestOps | None = None
        try:
            ids = {n.name: n.node_id for n in topo.nodes}
            if spec.row is not Row.NONE:
                if isinstance(topo, Topology):
                    core, address, running = await _start_attester(
                        topo, root, settings.deadline_ms, fault, store_mode
                    )
                    ops = LocalAttestOps(topo, core, address)
                else:
                    if attester_node is None or topo.credentials is None:
                        raise ValueError("running nodes need an attester and an operator key")
                    ops = RemoteAttestOps(topo, attester_node, topo.credentials.identity)
                ids[ATTESTER] = ops.attester_id
            resolved = (
                policy.resolve(ids)
                if spec.row is not Row.NONE
                else policy.resolve({**ids, ATTESTER: "0" * 64})
            )
            ctx = AttestContext(
                resolved,
                policy.restore_below,
                ops,
                spec.row,
                spec.axis,
                policy.lifetime_steps * STEP_MS,
            )
            runner = Runner(topo, settings, None, root / "evidence")
            runs = []
            with CryptoMeter(topo.meter):
                for key, profile, params, n_steps in tasks:
                    events = generate(key.seed, n_steps, cfg.decision_every, profile)
                    runs.append(await AttestPlayer(runner, key, events, params, ctx).play())
            a6_checked = a6_ok = 0
            logged = ops.entries if ops is not None else []
            if ops is not None and logged:
                ends = {logged[0].attestation: logged[0], logged[-1].attestation: logged[-1]}
                for entry in ends.values():
                    a6_checked += 1
                    a6_ok += await ops.demand_back(entry)
            smin = runner.arm_costs["structural_min"]
            rehydrate_wire = topo.meter.by_tag.get(("structural_min", "rehydrate"))
            plain = {
                "decisions": float(smin.decisions),
                "rehydrations": float(smin.rehydrations),
                "demand_rpcs": float(smin.demand_rpcs),
                "rpcs": float(rehydrate_wire.rpcs if rehydrate_wire else 0),
                "bytes": float(
                    rehydrate_wire.request_bytes + rehydrate_wire.response_bytes
                    if rehydrate_wire
                    else 0
                ),
                "sign_ops": float(rehydrate_wire.sign_ops if rehydrate_wire else 0),
                "verify_ops": float(rehydrate_wire.verify_ops if rehydrate_wire else 0),
            }
            plain_lat = list(smin.rehydration_latencies)
            wire = {
                f"{a}/{p}": {
                    "rpcs": float(c.rpcs),
                    "bytes": float(c.request_bytes + c.response_bytes),
                    "sign_ops": float(c.sign_ops),
                    "verify_ops": float(c.verify_ops),
                    "crypto_ms": 1000.0 * (c.sig_seconds + c.hash_seconds),
                }
                for (a, p), c in topo.meter.by_tag.items()
            }
        finally:
            if isinstance(ops, RemoteAttestOps):
                await ops.close()
            if running is not None:
                await running.stop(0.5)
            elif core is not None:
                await core.close()
            await topo.close()
    return RowResult(
        spec.name,
        spec.row.value,
        spec.axis.value if spec.axis is not None else "",
        policy.lifetime_steps,
        steps,
        tasks[0][0].cadence,
        [(r.key.label, r.in_process_fingerprint, r.boundary_fingerprint) for r in runs],
        ctx.records,
        dict(counts_of(ctx)),
        ctx.latencies,
        wire,
        plain,
        ctx.bundle_files,
        len(logged),
        a6_checked,
        a6_ok,
        policy.revocations.get(ATTESTER),
        time.perf_counter() - start,
        {"plain_latencies": plain_lat, "policy": json.dumps(policy.to_json(), sort_keys=True)},
    )


async def _remote_attester(topo: RemoteTopology, name: str, address: str | None) -> RemoteNode:
    """The running attester node ``name`` (its identity from its ``Info``)."""
    if address is None:
        raise ValueError(f"attester {name!r} is not among the running nodes")
    info = await topo.clients.at(address).info(timeout=5.0)
    return RemoteNode(name, Role.WITNESS, address, info.node_id, FaultMode.NONE)


def _run_row_sync(args: tuple[ExperimentConfig, RowSpec, AttestPolicy, AttestSlice]) -> RowResult:
    cfg, spec, policy, slice_ = args
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    configure_logging(LogFormat.JSON, "error")
    return asyncio.run(run_row(cfg, spec, policy, slice_))


def play_rows(
    cfg: ExperimentConfig,
    specs: Sequence[RowSpec],
    policy: AttestPolicy,
    slice_: AttestSlice,
    *,
    workers: int = 1,
) -> list[RowResult]:
    """Play every row; results in ``specs`` order whatever ``workers`` is."""
    jobs = [(cfg, spec, policy, slice_) for spec in specs]
    if workers <= 1 or len(jobs) <= 1:
        return [_run_row_sync(j) for j in jobs]
    import multiprocessing

    with ProcessPoolExecutor(
        max_workers=min(workers, len(jobs)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exit_with_parent,  # a SIGKILLed parent leaves no worker playing on
        initargs=(os.getpid(),),
    ) as pool:
        return list(pool.map(_run_row_sync, jobs))
