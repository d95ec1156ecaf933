"""Rows of ``provnet experiment attest``: each one boundary run set with an attester.

A row (:class:`harness.attest.rows.RowSpec`) is played on its own topology —
origin, holder, witness as in ``experiment boundary``, plus the attester
node — over the death-spiral run (or, with ``matrix``, the main matrix).
Rows are independent, so ``workers`` > 1 plays them in separate processes;
every number a row yields is a function of the row and the config alone
(the run clock is :func:`harness.attest.policy.run_ms`, keys do not enter
any decision), so results are identical for any ``workers``.

After the runs the holder demands back, from the attester, the hop of the
first and the last attestation the attester logged, verifies each against
the attester's commitment and checks it names the attestation (A6).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.envelope import Envelope
from contracts.errors import ContractError
from contracts.hops import parse_hop
from contracts.serve import build_demand, verify_served
from contracts.signed import open_statement
from contracts.statements import Commitment, Obligation
from harness.attest.attester import AttesterNode, LoggedAttestation
from harness.attest.play import AttestContext, AttestPlayer, DecisionRecord, counts_of
from harness.attest.policy import AttestPolicy
from harness.attest.rows import ATTESTER, Row, RowSpec
from harness.boundary.choices import TransportKind
from harness.boundary.play import Runner
from harness.boundary.records import BoundarySettings
from harness.boundary.topology import Topology, start_topology
from harness.boundary.wire import CryptoMeter, MeteredTransport
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.metrics import RunKey
from harness.runner import replay_params
from harness.trajectory import generate
from nodes.app import RunningNode, load_or_create_identity, start_node
from nodes.config import NodeConfig
from nodes.services import NodeCore
from nodes.transport import CallFailed, GrpcTransport, InMemoryTransport

__all__ = ["AttestSlice", "RowResult", "play_rows", "run_row"]

_DEADLINE_MS = 10_000


@dataclass(frozen=True, slots=True)
class AttestSlice:
    """Which runs every row plays, and on which transport."""

    matrix: bool = False
    steps: int | None = None  # death-spiral steps (default: the config's)
    transport: TransportKind = TransportKind.MEMORY

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
    topo: Topology, root: Path, deadline_ms: int
) -> tuple[NodeCore, RunningNode | None]:
    data_dir = root / ATTESTER
    meter = topo.meter
    if topo.transport is TransportKind.MEMORY:
        holder_transport = topo.holder.core.transport
        inner = holder_transport.inner if isinstance(holder_transport, MeteredTransport) else None
        if not isinstance(inner, InMemoryTransport):
            raise RuntimeError("memory topology without an in-memory transport")
        address = f"{ATTESTER}.mem:1"
        config = NodeConfig(
            name=ATTESTER, data_dir=data_dir, listen=address, deadline_ms=deadline_ms
        )
        core = await NodeCore.open(
            config,
            load_or_create_identity(data_dir),
            transport=MeteredTransport(inner, meter, ATTESTER),
        )
        inner.register(address, core)
        return core, None
    config = NodeConfig(
        name=ATTESTER,
        data_dir=data_dir,
        listen="127.0.0.1:0",
        deadline_ms=deadline_ms,
        shutdown_grace_s=0.5,
    )
    running = await start_node(
        config, transport=MeteredTransport(GrpcTransport(config.max_message_bytes), meter, ATTESTER)
    )
    return running.core, running


async def _demand_back(
    topo: Topology, attester: NodeCore, address: str, logged: LoggedAttestation
) -> bool:
    """A6: the holder demands an attestation's hop from the attester and verifies it."""
    holder = topo.holder.core
    commitment = open_statement(logged.commitment, Commitment, signer=attester.node_id)
    obligation = open_statement(logged.obligation, Obligation, signer=attester.node_id)
    demand = build_demand(holder.identity, obligation, now=holder.now_ms())
    try:
        answers = await holder.transport.demand(
            address, [demand.to_bytes()], obligation.statement.deadline_ms / 1000.0
        )
        served = verify_served(
            Envelope.from_bytes(answers[0].receipt),
            answers[0].hops,
            demand=demand,
            obligation=obligation,
            commitment=commitment,
        )
        for hop in served.hops:
            fields = parse_hop(hop, origin=attester.node_id)
            if fields.get("op") == "ATTEST" and fields.get("attestation") == logged.attestation:
                return True
    except (CallFailed, ContractError, IndexError, ValueError):
        return False
    return False


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
    # A 10 s answer deadline: a faithful origin on a loaded machine must not miss
    # it, or a fallback would make the decisions depend on the machine's load.
    settings = BoundarySettings(
        cadences=(tasks[0][0].cadence,),
        steps=steps,
        transport=slice_.transport,
        deadline_ms=_DEADLINE_MS,
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="provnet-attest-") as tmp:
        root = work_dir if work_dir is not None else Path(tmp)
        topo = await start_topology(
            root,
            settings.specs(),
            settings.transport,
            deadline_ms=settings.deadline_ms,
            reasks=settings.reasks,
        )
        running: RunningNode | None = None
        core: NodeCore | None = None
        try:
            attester: AttesterNode | None = None
            ids = {n.name: n.node_id for n in topo.nodes}
            if spec.row is not Row.NONE:
                core, running = await _start_attester(topo, root, settings.deadline_ms)
                ids[ATTESTER] = core.node_id
                attester = AttesterNode(
                    core, spec, policy.lifetime_steps, topo.holder.core.transport
                )
            resolved = (
                policy.resolve(ids)
                if spec.row is not Row.NONE
                else policy.resolve({**ids, ATTESTER: "0" * 64})
            )
            ctx = AttestContext(resolved, policy.restore_below, attester)
            runner = Runner(topo, settings, None, root / "evidence")
            runs = []
            with CryptoMeter(topo.meter):
                for key, profile, params, n_steps in tasks:
                    events = generate(key.seed, n_steps, cfg.decision_every, profile)
                    runs.append(await AttestPlayer(runner, key, events, params, ctx).play())
            a6_checked = a6_ok = 0
            if attester is not None and attester.logged and core is not None:
                address = running.address if running is not None else attester.address
                for logged in {
                    attester.logged[0].attestation: attester.logged[0],
                    attester.logged[-1].attestation: attester.logged[-1],
                }.values():
                    a6_checked += 1
                    a6_ok += await _demand_back(topo, core, address, logged)
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
        len(attester.logged) if attester is not None else 0,
        a6_checked,
        a6_ok,
        policy.revocations.get(ATTESTER),
        time.perf_counter() - start,
        {"plain_latencies": plain_lat, "policy": json.dumps(policy.to_json(), sort_keys=True)},
    )


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
        max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        return list(pool.map(_run_row_sync, jobs))
