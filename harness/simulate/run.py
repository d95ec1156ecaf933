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
from dataclasses import dataclass

from contracts.evidence import EvidenceKind
from harness.boundary.records import UNCONFIRMED, BoundaryError, BoundaryOutcome
from harness.config import ExperimentConfig
from harness.fingerprint import combine
from harness.simulate.engine import CellResult, play_cells
from harness.simulate.workload import Cell, Workload, build_cells

__all__ = ["PROOF_KINDS", "CellRow", "SimResult", "SimulationFailed", "run_simulation"]


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
    fault: str
    departed: int
    decisions: int
    virtual_s: float
    #: evidence against the cell's faulty origin: proofs, witness-confirmed suspicions
    proofs_faulty: int
    suspicions_faulty: int
    #: evidence against nodes the cell ran faithful (accuracy)
    proofs_honest: int
    suspicions_honest: int
    #: rehydrations a faithful origin left unanswered with no witness confirming
    unconfirmed_honest: int
    #: first step at which the faulty origin was named (-1: never), and its virtual time
    first_evidence_step: int
    time_to_evidence_s: float
    rpcs: int
    bytes: int
    sign_ops: int
    verify_ops: int
    rehydrations: int
    failed_rehydrations: int
    churn_refusals: int
    losses: int
    #: the cell's decision fingerprint (harness.fingerprint over its runs)
    fingerprint: str

    def per_decision(self, field_name: str) -> float:
        value: float = getattr(self, field_name)
        return value / self.decisions if self.decisions else 0.0


@dataclass(slots=True)
class SimResult:
    workload: Workload
    rows: list[CellRow]


def _row(w: Workload, n: int, seed: int, cell: Cell, result: CellResult) -> CellRow:
    o: BoundaryOutcome = result.outcome
    faulty_name = cell.settings.chain[0] if cell.fault.value != "none" else None
    proofs_f = susp_f = proofs_h = susp_h = 0
    first_step = -1
    for e in o.evidence:
        proof = e.kind in PROOF_KINDS
        if faulty_name is not None and e.accused_name == faulty_name:
            proofs_f += proof
            susp_f += not proof
            if first_step < 0 or e.step < first_step:
                first_step = e.step
        else:
            proofs_h += proof
            susp_h += not proof
    unconfirmed = sum(
        c for (name, label), c in o.outcomes.items() if label == UNCONFIRMED and name != faulty_name
    )
    wire = [c for (tag, kind), c in o.wire.items() if (tag, kind) != ("calls", "by_node")]
    decisions = sum(r.n_decisions for r in o.runs)
    structural = [o.arm_costs[a] for a in ("structural_min", "structural_perhop")]
    steps = w.steps
    return CellRow(
        agents_total=n,
        seed=seed,
        cell=cell.index,
        agents=cell.agents,
        origins=cell.settings.origins,
        relays=len(cell.settings.chain) - 2,
        fault=cell.fault.value,
        departed=len(cell.departed),
        decisions=decisions,
        virtual_s=round(result.virtual_seconds, 6),
        proofs_faulty=proofs_f,
        suspicions_faulty=susp_f,
        proofs_honest=proofs_h,
        suspicions_honest=susp_h,
        unconfirmed_honest=unconfirmed,
        first_evidence_step=first_step,
        # the step's share of the cell's virtual time (decisions are evenly spaced in steps)
        time_to_evidence_s=(
            round(result.virtual_seconds * first_step / steps, 6) if first_step >= 0 else -1.0
        ),
        rpcs=int(sum(c.get("rpcs", 0.0) for c in wire)),
        bytes=int(sum(c.get("request_bytes", 0.0) + c.get("response_bytes", 0.0) for c in wire)),
        sign_ops=int(sum(c.get("sign_ops", 0.0) for c in wire)),
        verify_ops=int(sum(c.get("verify_ops", 0.0) for c in wire)),
        rehydrations=sum(c.rehydrations for c in structural),
        failed_rehydrations=sum(c.failed_rehydrations for c in structural),
        churn_refusals=sum(cell.network.churn_refusals.values()),
        losses=cell.network.losses,
        fingerprint=combine((r.label, r.boundary_fingerprint) for r in o.runs),
    )


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
) -> CellRow:
    """One cell played and measured (in this process or a worker's)."""
    try:
        (result,) = play_cells(cfg, [(cell.settings, cell.network)], on_decision=on_decision)
    except BoundaryError as exc:
        raise SimulationFailed(f"N={n} seed={seed} cell {cell.index}: {exc}") from None
    return _row(w, n, seed, cell, result)


def _worker_init(parent: int) -> None:
    from harness._workers import exit_with_parent

    exit_with_parent(parent)  # a SIGKILLed parent leaves no worker playing on
    _quiet()


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
    per_cell = w.steps // cfg.decision_every
    bar = tqdm(
        total=len(plan) * per_cell, desc="simulate", unit="decision", file=sys.stderr,
        disable=progress_disabled(progress),
    )  # fmt: skip
    try:
        if workers <= 1:
            rows = [
                _play_one(cfg, w, n, seed, cell, lambda: bar.update(1)) for n, seed, cell in plan
            ]
        else:
            rows = _play_parallel(cfg, w, plan, workers, lambda: bar.update(per_cell))
    finally:
        bar.close()
    return SimResult(w, rows)


def _play_parallel(
    cfg: ExperimentConfig,
    w: Workload,
    plan: list[tuple[int, int, Cell]],
    workers: int,
    tick: Callable[[], None],
) -> list[CellRow]:
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
