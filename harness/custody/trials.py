"""The custody trials on nodes this process starts (in-memory transport or gRPC).

One trial: a fresh epoch at the origin; it appends ``hops`` hops (random
taints), commits them as one fold under a signed head and delivers the
compacted value to the holder; with ``k`` > 0, ``k`` custodians take custody
of the fold. Then the epoch's departures: each party departs with
probability ``p`` (independently, or with its whole operator), and a party
that departs is gone for good — its node closed (its gRPC server stopped),
it is taken off the network, and its data directory (keys, hop log, store)
is removed. The holder then demands the folded hops for its lineage gates
(rehydrate mode), with a witness to confirm silence. The trial is
*available* if the holder verified every folded hop.

Trials are cheap because nodes are kept across trials: a party that did not
depart is the same node in the next trial (a new epoch in its store), and a
departed one is replaced by a new node with a new identity. ``batch`` trials
run at once, so their waits (an unanswered demand is recorded only once it
is due, its deadline after it was made) overlap.

The oracle is the in-process uncompacted decision: each lineage gate
evaluated on the full hops in this process. The holder decides on the hops
it verified, or falls back to blocking (both polarities block) when no
party served them; a flip is a holder decision the oracle did not make.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.errors import ContractError
from contracts.hops import parse_hop
from harness.boundary.choices import Role
from harness.boundary.play import FetchedLog
from harness.boundary.topology import NodeHandle, NodeSpec, RunClock, _start_one
from harness.boundary.wire import WireMeter, hop_from_served
from harness.custody.settings import CellResult, CustodyError, CustodySettings, Departures
from harness.custody.stats import GOAL_HALF_WIDTH, more_trials
from harness.events import Hop
from harness.gates import GATES, GateClass, GateView, Mode, evaluate
from harness.gates import Decision as GateDecision
from harness.lineage import FoldedPrefix, hop_bytes
from nodes import wire
from nodes.client import Holder
from nodes.config import Peer
from nodes.custodian import rehydrate_with_custody, statements_for
from nodes.custody_store import custody_counts
from nodes.messages import CommittedCompaction, Delivery, Outcome, RehydrationReport
from nodes.store import StoreMode
from nodes.transport import LocalNode

__all__ = ["LINEAGE_GATES", "TrialPool", "cell_goal", "run_cells"]

#: The gates that need the folded hops (rehydrate mode): the lineage gates.
LINEAGE_GATES = tuple(
    g for g in GATES if g.gate_class in (GateClass.LINEAGE_BLOCKLIST, GateClass.LINEAGE_ALLOWLIST)
)
#: Taints a hop may add (the lineage gates' prefixes), each with this probability.
_TAINTS = ("taint:unverified_web:t", "taint:fallback_model:t", "taint:tool_flaky:t")
_TAINT_P = 0.04
_OPS = ("tool_call", "llm_call", "transform")
_TIMEOUT_S = 30.0

ROLE_ORIGIN = "origin"
ROLE_CUSTODIAN = "custodian"


@dataclass(slots=True)
class _Party:
    handle: Any  # a NodeRef: name, node_id, address (a NodeHandle in this process)
    role: str
    operator: str
    departed: bool = False


@dataclass(slots=True)
class _Group:
    slot: int
    origin: _Party
    custodians: list[_Party] = field(default_factory=list)

    @property
    def parties(self) -> list[_Party]:
        return [self.origin, *self.custodians]


@dataclass(slots=True)
class _Trial:
    group: _Group
    hops: list[Hop]
    view: GateView
    oracle: list[bool]
    value_ref: str
    delivery: Delivery


def _make_hops(rng: random.Random, n: int) -> list[Hop]:
    hops: list[Hop] = []
    for step in range(1, n + 1):
        taints = tuple(t for t in _TAINTS if rng.random() < _TAINT_P)
        parent = (f"h{step - 1}",) if step > 1 else ()
        hops.append(Hop(f"h{step}", step, rng.choice(_OPS), (("freshness", 0.99),), taints, parent))
    return hops


def _view(hops: list[Hop]) -> GateView:
    """The compacted value as the holder sees it: every hop folded, none visible."""
    counts: dict[str, int] = {}
    for h in hops:
        counts[h.op] = counts.get(h.op, 0) + 1
    folded = FoldedPrefix(
        len(hops),
        tuple(sorted(counts.items())),
        sum(len(h.taints_added) for h in hops),
        tuple(h.hop_id for h in hops),
    )
    return GateView((1.0,) * 5, frozenset(), (), folded, True)


class TrialPool:
    """The nodes trials play on: a holder, a witness, and groups of departing parties."""

    def __init__(self, settings: CustodySettings, root: Path) -> None:
        self.settings = settings
        self.root = root
        self.meter = WireMeter()
        self.clock = RunClock()
        self.registry: dict[str, LocalNode] = {}
        self.holder: NodeHandle | None = None
        self.witness: NodeHandle | None = None
        self.client: Holder | None = None
        self._serial = 0
        #: node id → party, for every party ever started (evidence names ids)
        self.by_id: dict[str, _Party] = {}
        self._groups: dict[int, list[_Group]] = {}
        self._live: list[NodeHandle] = []

    async def _start(self, name: str, role: Role) -> NodeHandle:
        handle = await _start_one(
            self.root,
            NodeSpec(name, role),
            self.settings.transport,
            self.meter,
            self.clock,
            self.registry,
            self.settings.deadline_ms,
            self.settings.reasks,
            StoreMode.SCRATCH,
        )
        self._live.append(handle)
        return handle

    async def open(self) -> None:
        self.holder = await self._start("holder", Role.HOLDER)
        if self.settings.witness:
            self.witness = await self._start("witness", Role.WITNESS)
        core = self.holder.core
        self.client = Holder(
            core.identity,
            core.transport,
            evidence_dir=self.root / "evidence",
            reasks=self.settings.reasks,
            on_evidence=self._on_evidence,
            cache=False,
            clock=core.clock,
        )

    def _open(self) -> tuple[NodeHandle, Holder]:
        if self.holder is None or self.client is None:
            raise CustodyError("the trial nodes are not started (TrialPool.open)")
        return self.holder, self.client

    async def close(self) -> None:
        errors: list[BaseException] = []
        for handle in reversed(self._live):
            try:
                await self._stop(handle)
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        self._live.clear()
        if errors:
            raise errors[0]

    async def _stop(self, handle: NodeHandle) -> None:
        if handle.running is not None:
            await handle.running.stop(0.1)
        else:
            await handle.core.close()

    # ----------------------------------------------------------------- parties

    async def _party(self, role: str) -> _Party:
        self._serial += 1
        prefix = "o" if role == ROLE_ORIGIN else "c"
        handle = await self._new_node(f"{prefix}{self._serial}")
        party = _Party(handle, role, "")
        self.by_id[handle.node_id] = party
        return party

    def _operator(self, rng: random.Random, taken: list[str], mode: Departures) -> str:
        ops = [f"op{i}" for i in range(self.settings.operators)]
        if mode is Departures.OPERATOR_PLACED:
            free = [o for o in ops if o not in taken]
            return rng.choice(free)
        return rng.choice(ops)

    async def _groups_for(
        self, k: int, count: int, mode: Departures, rng: random.Random
    ) -> list[_Group]:
        """``count`` groups of an origin and ``k`` custodians, departed parties replaced
        by new nodes (started concurrently), operators placed as ``mode`` says."""
        groups = self._groups.setdefault(k, [])
        fresh = count - len(groups)
        if fresh > 0:
            origins = await asyncio.gather(*(self._party(ROLE_ORIGIN) for _ in range(fresh)))
            groups.extend(_Group(len(groups) + i, o) for i, o in enumerate(origins))
        wanted: list[tuple[_Group, str]] = []
        for g in groups[:count]:
            g.custodians = [c for c in g.custodians if not c.departed][:k]
            if g.origin.departed:
                wanted.append((g, ROLE_ORIGIN))
            wanted.extend((g, ROLE_CUSTODIAN) for _ in range(k - len(g.custodians)))
        started = await asyncio.gather(*(self._party(role) for _, role in wanted))
        for (g, role), party in zip(wanted, started, strict=True):
            if role == ROLE_ORIGIN:
                g.origin = party
            else:
                g.custodians.append(party)
        for g in groups[:count]:
            # Operators are labels drawn per trial (each trial has its own operators'
            # fates): placement decides only whether a group's parties share one.
            taken: list[str] = []
            for party in g.parties:
                party.operator = self._operator(rng, taken, mode)
                taken.append(party.operator)
        return groups[:count]

    async def _depart(self, party: _Party) -> None:
        party.departed = True
        await self._remove_node(party.handle)

    # ----------------------------------------------------------------- node operations
    # (in this process here; on extra node processes in harness.custody.remote)

    async def _new_node(self, name: str) -> Any:
        """A new node (new identity, empty store) that may become origin or custodian."""
        return await self._start(name, Role.ORIGIN)

    async def _remove_node(self, handle: Any) -> None:
        """Gone for good: node closed, off the network, data directory removed."""
        self._live.remove(handle)
        self.registry.pop(handle.address, None)
        await self._stop(handle)
        await asyncio.to_thread(shutil.rmtree, handle.core.config.data_dir, ignore_errors=False)

    async def _append_commit(
        self, g: _Group, hops: list[Hop], value_ref: str
    ) -> tuple[float, CommittedCompaction]:
        """The hops made durable at ``g``'s origin, then one compaction folding them
        (custody taken at commit by the group's custodians): when the compaction
        started (perf counter) and what it committed."""
        core = g.origin.handle.core
        _place(g)
        await core.store.new_epoch()  # hop ids restart every trial (seed 000)
        await core.append(
            [json.dumps(_fields(h)).encode("utf-8") for h in hops], [h.step for h in hops]
        )
        started = time.perf_counter()
        return started, await core.commit_compaction([(value_ref, [h.step for h in hops], b"")])

    async def _send(self, handle: Any, delivery: Delivery) -> Delivery:
        """Deliver to the holder; the delivery as sent (no receipt asked: none is cited)."""
        holder, _ = self._open()
        sent: Delivery
        _, sent = await handle.core.send(holder.address, delivery, _TIMEOUT_S)
        return sent

    async def _demand(self, value_ref: str) -> RehydrationReport:
        holder, client = self._open()
        held = holder.core.held(value_ref)
        witnesses = [self.witness.address] if self.witness is not None else []
        if held.custody:  # the origin first, then the custodians (nodes.custodian)
            return await rehydrate_with_custody(
                client, value_ref, held.folds, held.custody, witnesses=witnesses
            )
        report: RehydrationReport = await client.rehydrate(
            value_ref, held.folds, witnesses=witnesses
        )
        return report

    def value_ref(self, g: _Group) -> str:
        return f"g{g.slot}"

    # ----------------------------------------------------------------- one batch

    async def _commit(
        self, g: _Group, rng: random.Random, cell: CellResult, *, timed: bool = False
    ) -> _Trial:
        hops = _make_hops(rng, self.settings.hops)
        value_ref = self.value_ref(g)
        before = await self._custody_hops(g) if timed else []
        started, committed = await self._append_commit(g, hops, value_ref)
        if timed:  # a commit alone: concurrent ones would time the event loop's queue
            cell.commit_seconds.append(time.perf_counter() - started)
            after = await self._custody_hops(g)
            cell.hops_per_custodian.extend(a - b for a, b in zip(after, before, strict=True))
        # the head, then one custody statement per custodian that took the fold
        cell.commit_signatures += 1 + len(committed.custody)
        (proof,) = committed.fold_proofs
        custody = statements_for(committed.custody, proof)
        cell.custodians_taken += len(custody)
        view = _view(hops)
        log = FetchedLog()
        for h in hops:
            log.add(h, hop_bytes(h))
        oracle = [evaluate(gate, view, Mode.REHYDRATE, log).proceed for gate in LINEAGE_GATES]
        delivery = Delivery(
            value_ref,
            json.dumps({"value": g.slot, "hops": len(hops)}).encode("utf-8"),
            (),
            (),
            g.origin.handle.node_id,
            tuple(committed.fold_proofs),
            (committed.head,),
            custody=custody,
        )
        cell.custody_bytes += sum(len(s) for s in custody)
        cell.lineage_bytes += sum(hop_bytes(h) for h in hops)
        return _Trial(g, hops, view, oracle, value_ref, delivery)

    async def _deliver(self, trial: _Trial, cell: CellResult) -> None:
        delivery = trial.delivery
        sent = await self._send(trial.group.origin.handle, delivery)
        cell.value_bytes += len(delivery.value)
        cell.statement_bytes += wire.delivery_statement_size(sent)

    async def _custody_hops(self, g: _Group) -> list[int]:
        """Hops each custodian of ``g`` holds in custody now (its store's count)."""
        return [(await custody_counts(c.handle.core.store))["custody_hops"] for c in g.custodians]

    def _departures(
        self, g: _Group, mode: Departures, p: float, rng: random.Random
    ) -> list[_Party]:
        if mode is Departures.INDEPENDENT:
            return [party for party in g.parties if rng.random() < p]
        ops = sorted({party.operator for party in g.parties})
        gone = {o for o in ops if rng.random() < p}
        return [party for party in g.parties if party.operator in gone]

    async def _rehydrate(self, trial: _Trial, cell: CellResult) -> None:
        report = await self._demand(trial.value_ref)
        cell.rehydrate_rpcs += report.rpcs
        for o in (*report.outcomes, *report.parties):
            if o.outcome is Outcome.UNANSWERED and not o.evidence_path and not o.cleared:
                cell.unconfirmed += 1  # silence no witness confirmed: never evidence
            elif o.accuses and o.evidence_path:
                # What the holder recorded (its file's path): evidence by party and kind.
                party = self.by_id.get(o.origin)
                role = party.role if party is not None else "other"
                key = (role, o.outcome.value, party.departed if party is not None else False)
                cell.evidence[key] = cell.evidence.get(key, 0) + 1
        log = self._verified(report.hops)
        folded = trial.view.folded
        ok = (
            report.complete
            and log is not None
            and folded is not None
            and log.covers(folded.folded_hop_ids)
        )
        if ok:
            cell.available += 1
            for node_id in report.served_by:
                party = self.by_id.get(node_id)
                role = party.role if party is not None else "other"
                cell.served_by[role] = cell.served_by.get(role, 0) + 1
        for gate, want in zip(LINEAGE_GATES, trial.oracle, strict=True):
            if ok and log is not None:
                got = evaluate(gate, trial.view, Mode.REHYDRATE, log).proceed
            else:
                got = GateDecision(False).proceed  # no hops: both polarities block
            cell.decisions += 1
            cell.oracle_proceed += want
            cell.flips += got != want

    def _verified(self, served: tuple[Any, ...]) -> FetchedLog | None:
        log = FetchedLog()
        for h in served:
            try:
                fields = parse_hop(h.hop, origin=h.origin)
                fields.pop("origin")
                fields.pop("epoch")
                hop = hop_from_served(fields, f"hop {h.leaf_index}")
            except (ContractError, ValueError):
                return None
            log.add(hop, hop_bytes(hop))  # a hop served twice is kept once
        return log

    async def _on_evidence(self, kind: str, accused: str, body: bytes, path: str) -> None:
        holder, _ = self._open()
        await holder.core.keep_evidence(kind, accused, body, path)  # as a node's holder does

    async def play_cell(
        self,
        cell: CellResult,
        trials: int,
        rng: random.Random,
        tick: Callable[[int], None] | None = None,
    ) -> None:
        """Play ``trials`` trials of ``cell``, ``batch`` at a time."""
        started = time.perf_counter()
        done = 0
        with self.meter.tagged(("custody", f"{cell.mode.value}-k{cell.k}-p{cell.p}")):
            while done < trials:
                n = min(self.settings.batch, trials - done)
                groups = await self._groups_for(cell.k, n, cell.mode, rng)
                # Seeds drawn in order, so a batch's results do not depend on timing.
                seeds = [rng.getrandbits(64) for _ in groups]
                before = self.meter.counts().rpcs
                # The batch's first commit alone (timed), then the rest at once.
                first = await self._commit(groups[0], random.Random(seeds[0]), cell, timed=True)
                rest = await asyncio.gather(
                    *(
                        self._commit(g, random.Random(s), cell)
                        for g, s in zip(groups[1:], seeds[1:], strict=True)
                    )
                )
                batch = [first, *rest]
                cell.commit_rpcs += self.meter.counts().rpcs - before
                await asyncio.gather(*(self._deliver(t, cell) for t in batch))
                for g in groups:
                    for party in self._departures(g, cell.mode, cell.p, rng):
                        if party.role == ROLE_ORIGIN:
                            cell.departed_origins += 1
                        else:
                            cell.departed_custodians += 1
                        await self._depart(party)
                await asyncio.gather(*(self._rehydrate(t, cell) for t in batch))
                cell.trials += n
                done += n
                if tick is not None:
                    tick(n)
        cell.seconds += time.perf_counter() - started

    async def play_to_goal(
        self,
        cell: CellResult,
        planned: int,
        rng: random.Random,
        tick: Callable[[int], None] | None = None,
        *,
        goal: float | None = GOAL_HALF_WIDTH,
    ) -> None:
        """Play the ``planned`` trials of ``cell``, then (``goal`` not None) top it up
        from the same draws until its Wilson interval is within ``goal`` on either
        side (:func:`~harness.custody.stats.more_trials`)."""
        await self.play_cell(cell, planned, rng, tick)
        while goal is not None and (extra := more_trials(cell.available, cell.trials, goal)):
            await self.play_cell(cell, extra, rng, tick)


def _place(g: _Group) -> None:
    """Configure ``g``'s origin to ask exactly its custodians at commit, and each
    custodian with this trial's operator label and the origin pinned as a peer.

    A group's membership changes between trials (a departed party is replaced),
    so the configuration is set before each commit, as an operator would set it."""
    core = g.origin.handle.core
    names = tuple(c.handle.name for c in g.custodians)
    core.config = dataclasses.replace(
        core.config,
        peers=tuple(Peer(c.handle.name, c.handle.address, c.handle.node_id) for c in g.custodians),
        custodians=names,
        custody_k=len(names),
        operator=g.origin.operator,
    )
    pin = Peer(g.origin.handle.name, g.origin.handle.address, g.origin.handle.node_id)
    for c in g.custodians:
        c.handle.core.config = dataclasses.replace(
            c.handle.core.config, peers=(pin,), operator=c.operator
        )


def _fields(hop: Hop) -> dict[str, Any]:
    from harness.lineage import hop_fields

    return hop_fields(hop)


async def run_cells(
    settings: CustodySettings,
    cells: list[tuple[CellResult, int]],
    *,
    tick: Callable[[int], None] | None = None,
    node_dir: Path | None = None,
) -> None:
    """Play every (cell, trials) on one pool of nodes (closed whatever happens); with
    trials planned (``settings.trials`` 0) each cell is topped up to the goal."""
    from harness.boundary.runner import _scratch_root

    root = str(node_dir) if node_dir is not None else _scratch_root()
    with tempfile.TemporaryDirectory(prefix="provnet-custody-", dir=root) as tmp:
        pool = TrialPool(settings, Path(tmp))
        try:
            await pool.open()
            for i, (cell, trials) in enumerate(cells):
                rng = random.Random(f"{settings.seed}:{cell.mode.value}:{cell.k}:{cell.p}:{i}")
                await pool.play_to_goal(cell, trials, rng, tick, goal=cell_goal(settings))
        finally:
            await pool.close()


def cell_goal(settings: CustodySettings) -> float | None:
    """The half-width cells are topped up to: the goal when trials are planned, none
    when the settings fix the count."""
    return None if settings.trials else GOAL_HALF_WIDTH
