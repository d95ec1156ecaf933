"""One simulation: every (N, seed) of a workload played, measured per cell.

For each N in ``agents`` and each seed, :func:`harness.simulate.workload.build_cells`
draws the cells and :func:`harness.simulate.engine.play_cells` plays them;
each cell becomes one :class:`CellRow` of measured quantities. Nothing here
decides anything about the protocol: proofs and suspicions are the evidence
the holder's real client produced, and an accused node is *honest* when the
cell ran it faithful.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.evidence import EvidenceKind
from harness.boundary.records import UNCONFIRMED, BoundaryError, BoundaryOutcome
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.simulate.adversary import CellLedger
from harness.simulate.engine import CellResult, play_cells
from harness.simulate.workload import Cell, Workload, build_cells

__all__ = [
    "PROOF_KINDS",
    "AgentRow",
    "CellRow",
    "SimResult",
    "SimulationFailed",
    "run_simulation",
]


class SimulationFailed(Exception):
    """A cell could not be played to its end (the message names N, seed and cell)."""


#: Evidence kinds that prove a fault (a suspicion is ``unanswered``).
PROOF_KINDS = frozenset(
    {
        EvidenceKind.BAD_DATA,
        EvidenceKind.REFUSED,
        EvidenceKind.EQUIVOCATION,
        EvidenceKind.SPLIT_VIEW,
    }
)


@dataclass(frozen=True, slots=True)
class CellRow:
    agents_total: int
    seed: int
    cell: int
    agents: int
    origins: int
    relays: int
    #: the cell's faulty agents, "name:fault" separated by spaces ("" when none)
    faults: str
    faulty_agents: int
    departed: int
    decisions: int
    virtual_s: float
    #: evidence the holder kept against the cell's faulty agents: proofs, confirmed suspicions
    proofs_faulty: int
    suspicions_faulty: int
    #: evidence against agents the cell ran faithful (accuracy): the holder's own, plus
    #: the liars' forgeries a verifier accepted (a proof among them would be a false proof)
    proofs_honest: int
    suspicions_honest: int
    #: rehydrations a faithful origin left unanswered with no witness confirming
    unconfirmed_honest: int
    #: records the cell's liars filed, and how many a verifier rejected
    forgeries: int
    forgeries_rejected: int
    #: first virtual time at which any faulty agent was named by the holder (-1: never)
    time_to_evidence_s: float
    rpcs: int
    bytes: int
    sign_ops: int
    verify_ops: int
    rehydrations: int
    failed_rehydrations: int
    churn_refusals: int
    losses: int
    #: storage at the cell's end, summed over its nodes
    stored_hops: int
    stored_statements: int
    stored_evidence: int
    stored_evidence_bytes: int
    #: the cell's decision fingerprint (harness.fingerprint over its runs)
    fingerprint: str

    def per_decision(self, field_name: str) -> float:
        value: float = getattr(self, field_name)
        return value / self.decisions if self.decisions else 0.0


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent whose exposure is measured: a faulty origin, or a faithful origin
    that departed for good (both should end up named), or a faithful agent a
    record accused (its suspicion should clear)."""

    agents_total: int
    seed: int
    cell: int
    name: str
    #: the fault class: an origin's fault mode, "departed" (a faithful origin that
    #: left), or "honest" (a faithful agent accused by a suspicion)
    fault: str
    #: rehydrations that asked it (for "departed": after it left)
    asked: int
    #: of those, the ones that could expose it: begun while it was up (for
    #: "departed": every one after it left)
    exercised: int
    #: named by a proof / by a witness-confirmed suspicion
    proven: bool
    confirmed: bool
    #: virtual seconds from the cell's start ("departed": from its departure) to the
    #: first record naming it; for "honest", from the suspicion to the origin's next
    #: served answer (its time to clear); -1: never
    time_s: float


@dataclass(slots=True)
class SimResult:
    workload: Workload
    rows: list[CellRow]
    agents: list[AgentRow] = field(default_factory=list)


_PROOF_OUTCOMES = frozenset(k.value for k in PROOF_KINDS)


def _row(
    w: Workload, n: int, seed: int, cell: Cell, result: CellResult, ledger: CellLedger
) -> tuple[CellRow, list[AgentRow]]:
    o: BoundaryOutcome = result.outcome
    faulty = dict(cell.faulty)
    proofs_f = susp_f = proofs_h = susp_h = 0
    for e in o.evidence:
        proof = e.kind in PROOF_KINDS
        if e.accused_name in faulty:
            proofs_f += proof
            susp_f += not proof
        else:
            proofs_h += proof
            susp_h += not proof
    forged_proofs = sum(f.verdict == "proof" for f in ledger.forgeries)
    forged_susp = sum(f.verdict == "suspicion" for f in ledger.forgeries)
    unconfirmed = sum(
        c for (name, label), c in o.outcomes.items() if label == UNCONFIRMED and name not in faulty
    )
    wire = [
        c
        for (tag, kind), c in o.wire.items()
        if (tag, kind) != ("calls", "by_node") and tag != "liar"
    ]
    decisions = sum(r.n_decisions for r in o.runs)
    structural = [o.arm_costs[a] for a in ("structural_min", "structural_perhop")]
    named = [
        s.t
        for s in ledger.stamps
        if s.origin in faulty and (s.outcome in _PROOF_OUTCOMES or s.recorded)
    ]
    stored = [sum(v[i] for v in ledger.storage.values()) for i in range(4)]
    row = CellRow(
        agents_total=n,
        seed=seed,
        cell=cell.index,
        agents=cell.agents,
        origins=cell.settings.origins,
        relays=len(cell.settings.chain) - 2,
        faults=" ".join(f"{k}:{v}" for k, v in cell.faulty),
        faulty_agents=len(faulty),
        departed=len(cell.departed),
        decisions=decisions,
        virtual_s=round(result.virtual_seconds, 6),
        proofs_faulty=proofs_f,
        suspicions_faulty=susp_f,
        proofs_honest=proofs_h + forged_proofs,
        suspicions_honest=susp_h + forged_susp,
        unconfirmed_honest=unconfirmed,
        forgeries=len(ledger.forgeries),
        forgeries_rejected=sum(f.verdict == "rejected" for f in ledger.forgeries),
        time_to_evidence_s=round(min(named), 6) if named else -1.0,
        rpcs=int(sum(c.get("rpcs", 0.0) for c in wire)),
        bytes=int(sum(c.get("request_bytes", 0.0) + c.get("response_bytes", 0.0) for c in wire)),
        sign_ops=int(sum(c.get("sign_ops", 0.0) for c in wire)),
        verify_ops=int(sum(c.get("verify_ops", 0.0) for c in wire)),
        rehydrations=sum(c.rehydrations for c in structural),
        failed_rehydrations=sum(c.failed_rehydrations for c in structural),
        churn_refusals=sum(cell.network.churn_refusals.values()),
        losses=cell.network.losses,
        stored_hops=stored[0],
        stored_statements=stored[1],
        stored_evidence=stored[2],
        stored_evidence_bytes=stored[3],
        fingerprint=combine((r.label, r.boundary_fingerprint) for r in o.runs),
    )
    return row, _agent_rows(n, seed, cell, ledger)


def _agent_rows(n: int, seed: int, cell: Cell, ledger: CellLedger) -> list[AgentRow]:
    faulty = dict(cell.faulty)
    out: list[AgentRow] = []

    def first(name: str, fault: str, since: float) -> AgentRow:
        seen = [s for s in ledger.stamps if s.origin == name and s.t >= since]
        exercised = len(seen) if fault == "departed" else sum(s.up for s in seen)
        proofs = [s.t for s in seen if s.outcome in _PROOF_OUTCOMES]
        confirmed = [s.t for s in seen if s.recorded and s.outcome not in _PROOF_OUTCOMES]
        times = proofs + confirmed
        t = round(min(times) - since, 6) if times else -1.0
        return AgentRow(
            n, seed, cell.index, name, fault, len(seen), exercised, bool(proofs),
            bool(confirmed), t,
        )  # fmt: skip

    for name in cell.settings.origin_names():
        fault = faulty.get(name)
        if fault is not None:
            out.append(first(name, fault, 0.0))
    for name, leave in cell.departures:
        if name in faulty or not name.startswith("origin"):
            continue
        out.append(first(name, "departed", leave))
    # suspicions against faithful agents (the holder's confirmed ones, the liars'
    # accepted ones) and the time until the origin next served: when a retest clears it
    accused = [(s.t, s.origin) for s in ledger.stamps if s.origin not in faulty and s.recorded]
    accused += [(f.t, f.accused) for f in ledger.forgeries if f.verdict == "suspicion"]
    for t, name in sorted(accused):
        later = [
            s.t for s in ledger.stamps if s.origin == name and s.t > t and s.outcome == "served"
        ]
        clear = (min(later) - t) if later else -1.0
        out.append(
            AgentRow(n, seed, cell.index, name, "honest", 1, 1, False, True, round(clear, 6))
        )
    return out


def _quiet() -> None:
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    configure_logging(LogFormat.JSON, "warning")  # nodes' info lines would drown the bar


def _play_one(
    cfg: ExperimentConfig,
    w: Workload,
    n: int,
    seed: int,
    cell: Cell,
    on_decision: Callable[[], None] | None = None,
) -> tuple[CellRow, list[AgentRow]]:
    """One cell played and measured (in this process or a worker's)."""
    ledger = CellLedger(dict(cell.faulty), dict(cell.network.availability))
    try:
        (result,) = play_cells(
            cfg, [(cell.settings, cell.network)], on_decision=on_decision, observers=[ledger]
        )
    except BoundaryError as exc:
        raise SimulationFailed(f"N={n} seed={seed} cell {cell.index}: {exc}") from None
    return _row(w, n, seed, cell, result, ledger)


def _freeze_heap() -> None:
    """Move what is alive now (the imported modules, their classes and constants)
    out of the collector's generations: the cycle collector then walks only what
    the cells allocate, not the whole program on every full collection."""
    import gc

    gc.collect()
    gc.freeze()


def _worker_init(parent: int) -> None:
    from harness._workers import exit_with_parent

    exit_with_parent(parent)  # a SIGKILLed parent leaves no worker playing on
    _quiet()
    import harness.simulate.engine  # noqa: F401 — what every cell runs, imported before freezing

    _freeze_heap()


def run_simulation(
    cfg: ExperimentConfig,
    w: Workload,
    *,
    progress: bool | None = None,
    workers: int = 1,
) -> SimResult:
    """Play every (N, seed) of ``w``; rows in (N, seed, cell) order.

    With ``workers`` > 1 the cells are shared out over that many processes.
    A cell depends on its own settings and seed alone (its own nodes, its own
    virtual-time loop), so the rows are those of one process, in the same
    order; only the progress bar moves a cell at a time instead of a
    decision at a time."""
    from tqdm import tqdm

    from harness.runner import progress_disabled

    _quiet()
    plan = [
        (n, seed, cell) for n in w.agents for seed in w.seeds for cell in build_cells(w, n, seed)
    ]
    per_cell = w.runs_per_cell * (w.steps // cfg.decision_every)
    bar = tqdm(
        total=len(plan) * per_cell, desc="simulate", unit="decision", file=sys.stderr,
        disable=progress_disabled(progress),
    )  # fmt: skip
    try:
        if workers <= 1:
            _freeze_heap()
            played = [
                _play_one(cfg, w, n, seed, cell, lambda: bar.update(1)) for n, seed, cell in plan
            ]
        else:
            played = _play_parallel(cfg, w, plan, workers, lambda: bar.update(per_cell))
    finally:
        bar.close()
    return SimResult(w, [r for r, _ in played], [a for _, agents in played for a in agents])


def _play_parallel(
    cfg: ExperimentConfig,
    w: Workload,
    plan: list[tuple[int, int, Cell]],
    workers: int,
    tick: Callable[[], None],
) -> list[tuple[CellRow, list[AgentRow]]]:
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: grpc's core does not survive a fork of a process that uses it
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(plan)) or 1,
        mp_context=ctx,
        initializer=_worker_init,
        initargs=(os.getpid(),),
    )
    try:
        futures = [pool.submit(_play_one, cfg, w, n, seed, cell) for n, seed, cell in plan]
        for f in futures:
            f.add_done_callback(lambda _: tick())
        rows = [f.result() for f in futures]
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return rows
