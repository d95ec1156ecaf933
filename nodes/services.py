"""What a node does, independent of gRPC: :class:`NodeCore`, the honest node.

``NodeCore`` is the node: one shared context (:class:`nodes.context.NodeContext`:
identity, clock, store and counters, configuration, peers, the holder client
evidence goes through) and five roles over it, each in a module of its own that
says what the role promises:

* the origin: its hop log and the promises signed over it
  (:mod:`nodes.origin_log`), the answers owed to every demand (:mod:`nodes.origin`)
  with their replay protection (:mod:`nodes.origin_replay`), and what it signed,
  kept in memory for both (:mod:`nodes.origin_folds`);
* the holder (:mod:`nodes.holding`): deliveries verified and held, forwarded,
  rehydrated;
* the witness (:mod:`nodes.witnessing`): challenges on a holder's behalf;
* the attestation pool and attester (:mod:`nodes.attestations`);
* the suspicions it keeps and clears (:mod:`nodes.suspicions`).

``NodeCore`` composes them (its public methods are the roles' own) and owns
what spans them: opening and closing, counters (``stats``) and ``info``. Every
method takes and returns bytes and plain values and raises typed errors
(``contracts`` errors, store errors, :mod:`nodes.errors`); the gRPC servicers
(:mod:`nodes.servicers`) only convert messages, and :mod:`nodes.interceptors`
maps the errors to status codes. The in-memory transport calls ``NodeCore``
directly, so both paths run the same code. This module imports no gRPC and no
generated code.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Sequence
from functools import partial

from contracts.heads import HeadCache
from contracts.identity import Identity
from contracts.rules import (
    MAX_DEADLINE_MS,
    MAX_SERVE_FOR_MS,
    MIN_DEADLINE_MS,
    MIN_SERVE_FOR_MS,
)
from nodes import store as st
from nodes._disk import reporter as disk_reporter
from nodes.attestations import (
    MAX_ATTESTATION_BYTES,
    Attestations,
)
from nodes.client import Holder
from nodes.config import NodeConfig
from nodes.context import HeldValue, NodeContext
from nodes.cosigner import Witnessing
from nodes.custodian import Custodian, custody_folds, statements_by_fold, take_custody
from nodes.custody_store import custody_counts
from nodes.faults import Behaviour, FaultPlan
from nodes.holding import Holding
from nodes.logging import get_logger
from nodes.messages import CommittedCompaction, CommittedFold, NodeInfo
from nodes.origin import DEMAND_VERIFICATIONS, DEMAND_WINDOW_S, MAX_DEMANDS_PER_CALL, Origin
from nodes.origin_folds import OwnFolds
from nodes.origin_log import OriginLog
from nodes.origin_replay import (
    FUTURE_NONCES_FILENAME,
    MAX_FUTURE_HOLDERS,
    MAX_NONCES,
    REPLAY_FLOOR_FILENAME,
    REPLAY_FLOOR_LEASE_MS,
    read_floor,
    write_floor,
)
from nodes.relay_custody import relay_statements
from nodes.suspicions import Suspicions
from nodes.transport import Transport
from nodes.witnessing import Witness

__all__ = [
    "DEMAND_VERIFICATIONS",
    "DEMAND_WINDOW_S",
    "FUTURE_NONCES_FILENAME",
    "MAX_ATTESTATION_BYTES",
    "MAX_DEADLINE_MS",
    "MAX_DEMANDS_PER_CALL",
    "MAX_FUTURE_HOLDERS",
    "MAX_NONCES",
    "MAX_SERVE_FOR_MS",
    "MIN_DEADLINE_MS",
    "MIN_SERVE_FOR_MS",
    "REPLAY_FLOOR_FILENAME",
    "REPLAY_FLOOR_LEASE_MS",
    "CommittedFold",
    "HeldValue",
    "NodeCore",
]

log = get_logger(__name__)


class NodeCore:
    """One node: its context and its roles; see the module docstring. Open with :meth:`open`."""

    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        store: st.HopStore,
        transport: Transport,
        *,
        clock: Callable[[], float] | None = None,
        fault: FaultPlan | None = None,
        restart_floor_ms: int = 0,
    ) -> None:
        self.config = config
        self.identity = identity
        self.store = store
        plan = fault if fault is not None else FaultPlan(config.fault, config.fault_delay_ms)
        self.fault = plan
        self.ctx = ctx = NodeContext(
            config,
            identity,
            store,
            transport,
            plan,
            plan.behaviour(identity),
            clock=clock if clock is not None else time.time,
            advertised=config.advertise or config.listen,
        )
        self.suspicions = suspicions = Suspicions(ctx)
        ctx.evidence = suspicions
        # Witness-cosigned heads (nodes.cosigner): this node's witness role, the
        # witnesses it asks as an origin, the quorum it requires as a holder.
        self.witnessing = witnessing = Witnessing(ctx)
        self.holding = holding = Holding(ctx, witnessing)
        folds = OwnFolds(ctx)  # what the origin signed: its log fills it, its answers read it
        self.origin_log = origin_log = OriginLog(
            ctx, folds, hold=holding.hold, witnessing=witnessing, find=holding.find
        )
        self.origin = origin = Origin(ctx, folds, restart_floor_ms=restart_floor_ms)
        self.witness = Witness(ctx)
        self.attestations = attestations = Attestations(
            ctx, append=origin_log.append, commit_fold=origin_log.commit_fold
        )
        # The custodian role (nodes.custodian): folds of other origins it keeps and
        # serves; the origin's answers find them beside its own.
        self.custodian = Custodian(self)
        folds.custody = self.custodian.fold_for
        if config.relay_custody_k:  # a relay takes custody when it forwards
            holding.relay_custody = partial(
                relay_statements, self.custodian, identity.node_id, k=config.relay_custody_k
            )
        # The roles' public methods are the node's (bound once: the hot paths —
        # answering demands, delivering — pay no extra call).
        self.now_ms = ctx.now_ms
        self.count_rpc = ctx.count_rpc
        # origin
        self.append = origin_log.append
        self.commit_fold = origin_log.commit_fold
        self.answer_demands = origin.answer_demands
        self.answer_asks = origin.answer_asks
        self.answer_demand_stream = origin.answer_demand_stream
        # holder
        self.deliver = holding.deliver
        self.held = holding.held
        self.forward = holding.forward
        self.send = holding.send
        self.rehydrate = holding.rehydrate
        # witness
        self.challenge = self.witness.challenge
        # attestations
        self.reserved_attesters = attestations.reserved_attesters
        self.submit_attestation = attestations.submit_attestation
        self.list_attestations = attestations.list_attestations
        self.request_attestation = attestations.request_attestation
        self.log_attestations = attestations.log_attestations
        self.demand_leaf0 = attestations.demand_leaf0
        self.restore = attestations.restore
        # witness cosigning (Witness.AddCheckpoint)
        self.add_checkpoint = witnessing.cosigner.add_checkpoint
        # custody (Custody.Take)
        self.take_custody = self.custodian.take
        # suspicions
        self.keep_evidence = suspicions.keep_evidence
        self.report_evidence = suspicions.report_evidence
        self.standing_suspicions = suspicions.standing_suspicions
        self.clear_suspicions = suspicions.clear_suspicions

    @classmethod
    async def open(
        cls,
        config: NodeConfig,
        identity: Identity,
        *,
        transport: Transport,
        clock: Callable[[], float] | None = None,
        fault: FaultPlan | None = None,
        store_mode: st.StoreMode = st.StoreMode.DURABLE,
    ) -> NodeCore:
        """Open the node's store and state; ``store_mode`` scratch only for a node
        whose log is not meant to outlive its process (:class:`nodes.store.StoreMode`)."""
        floor_path = config.data_dir / REPLAY_FLOOR_FILENAME
        floor = read_floor(floor_path)
        store = await st.HopStore.open(
            config.data_dir,
            identity.node_id,
            provenance_pending=config.provenance_pending,
            mode=store_mode,
        )
        try:  # a setting refused here (a bad --witness-policy file) closes the store
            core = cls(
                config, identity, store, transport, clock=clock, fault=fault, restart_floor_ms=floor
            )
        except BaseException:
            await store.close()
            raise
        try:
            # What this node would sign receipts over must be what it committed: a
            # damaged store is refused here, before any demand, naming the damage.
            checked = await store.check_stored()
        except BaseException:
            await store.close()
            raise
        log.info("store_checked", hops=checked.hops, folds=checked.folds, seconds=checked.seconds)
        if not floor_path.exists():
            # Made now, at its fixed width, so a disk that fills later still has
            # its block to overwrite (see nodes.origin_replay.write_floor).
            try:
                await asyncio.to_thread(write_floor, floor_path, 0)
            except BaseException:
                await store.close()
                raise
        core.origin.replay.load_future_floors()
        await core.origin.replay.outwait_restart_floor()
        return core

    async def flush(self) -> None:
        """Persist what is kept write-behind (counters)."""
        await self.store.flush_counters()

    async def close(self) -> None:
        await self.witnessing.close()  # background re-asks of short heads (nodes.cosigner)
        with contextlib.suppress(st.StoreError):
            await self.store.flush_counters()
        await self.store.close()
        await self.ctx.transport.close()

    # ----------------------------------------------------------------- what a test or tool swaps

    @property
    def clock(self) -> Callable[[], float]:
        return self.ctx.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.ctx.clock = clock

    @property
    def behaviour(self) -> Behaviour:
        return self.ctx.behaviour

    @behaviour.setter
    def behaviour(self, behaviour: Behaviour) -> None:
        self.ctx.behaviour = behaviour

    @property
    def transport(self) -> Transport:
        return self.ctx.transport

    @transport.setter
    def transport(self, transport: Transport) -> None:
        self.ctx.transport = transport

    @property
    def crashed(self) -> bool:
        return self.ctx.crashed

    @crashed.setter
    def crashed(self, crashed: bool) -> None:
        self.ctx.crashed = crashed

    @property
    def heads(self) -> HeadCache:
        """Heads this node verified as a receiver (the holder role's)."""
        return self.holding.heads

    @heads.setter
    def heads(self, heads: HeadCache) -> None:
        self.holding.heads = heads

    # ----------------------------------------------------------------- identity, counters

    @property
    def node_id(self) -> str:
        return self.identity.node_id

    @property
    def advertised(self) -> str:
        return self.ctx.advertised

    def set_advertised(self, address: str) -> None:
        self.ctx.advertised = address

    @property
    def holder(self) -> Holder:
        """The node's holder client (made on first use)."""
        return self.ctx.client()

    @property
    def floor_writes(self) -> int:
        """Durable replay-floor writes this run (the origin's)."""
        return self.origin.replay.floor_writes

    async def stats(self) -> dict[str, int]:
        counters = await self.store.counters()
        counters.update(self.ctx.rpc_counts)
        counters.update(self.origin.open_counts)
        counters["held_values"] = len(self.holding)
        nonces = self.origin.replay.nonces
        counters["demand_nonces"] = len(nonces)
        counters["demand_nonces_evicted"] = nonces.evicted
        # Writes this process refused for a full disk (RESOURCE_EXHAUSTED, nodes._disk).
        counters["disk_full_refusals"] = disk_reporter.refusals
        # Objects kept out of the garbage collector's full collections (a node
        # process freezes what exists once it serves: nodes.app.run_node).
        counters["gc_frozen_objects"] = gc.get_freeze_count()
        # folds, hops and statements held as custodian (nodes.custodian)
        counters.update(await custody_counts(self.store))
        return counters

    async def commit_compaction(
        self,
        folds: Sequence[tuple[str, Sequence[int], bytes]],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
    ) -> CommittedCompaction:
        """The origin's compaction (nodes.origin_log), then its custodians asked once the
        commit stands (``custody_k``; nodes.custodian)."""
        out = await self.origin_log.commit_compaction(
            folds, serve_for_ms=serve_for_ms, deadline_ms=deadline_ms
        )
        if not self.config.custody_k:
            return out
        custody = await take_custody(self, out)
        if not custody:
            return out
        now_ms = self.now_ms()
        per_fold = statements_by_fold(custody, out.fold_proofs)
        for (ref, _, value), notes in zip(folds, per_fold, strict=True):
            held = self.holding.find(ref) if value else None
            if held is not None:
                delivery = dataclasses.replace(held.delivery, custody=notes)
                extra = custody_folds(notes, held.folds, now_ms=now_ms)
                self.holding.hold(ref, HeldValue(delivery, held.folds, extra))
        return dataclasses.replace(out, custody=custody)

    def info(self) -> NodeInfo:
        return NodeInfo(
            name=self.config.name,
            node_id=self.node_id,
            public_key=self.identity.public.raw,
            epoch=self.store.epoch,
            fault=str(self.fault.mode),
            listen=self.ctx.advertised,
        )
