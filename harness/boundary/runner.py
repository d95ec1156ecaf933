"""The experiment played across the boundary: origin and holder are different nodes.

Part 5 measured rehydration inside one process: a gate dereferences the
folded-hop pointers into the cold hop log. Across an agent boundary those
pointers dangle; the design's fix (design.md, "Across the boundary") is that
folded hops travel as a signed **commitment** plus a **serving obligation**,
so the holder can demand them from the *named* origin, verify them, and —
when the origin does not serve — fall back and name it.

One run here is one in-process run (same events, same
:class:`harness.replay.Replayer`, spec §5) with two agents added:

- the **origin** (the agent that remembers) owns the hop log and compacts.
  After each compaction it commits every newly folded run of hops of each
  structural arm's live values as a fold on its node (hops appended and
  durable → signed commitment + obligation, seed 000). A merged value
  inherits its inputs' commitments, so it carries several — from several
  origins when ``origins > 1`` (value ``v`` is owned by origin ``v mod k``).
  The two structural arms fold identical lineage (same K, same steps), so a
  fold both produce is committed once and carried by both.
- at each decision point the value's origin **delivers** each arm's value to
  the holder (``Deliver``; through relays with ``Forward`` for a chain
  A → B → C, the obligation travelling with it, S7): ground_truth with its
  whole lineage, the structural arms compacted with their commitments and
  obligations, prose as its blob (:mod:`harness.boundary.wire`).
- the **holder** decodes the value and runs the nine gates in every mode. A
  rehydrate-mode gate that needs the folded hops gets them from one
  :meth:`nodes.client.Holder.rehydrate` per arm and decision — one
  ``Serve.Demand`` per origin (the chain's holder demands from the origin
  directly) — verified against the commitments. If any origin fails
  (refuses, tampers, equivocates, is too slow, drops), the gate falls back
  to its polarity — a blocklist blocks as in degrade, an allowlist blocks —
  and the client's evidence names that origin.

Decisions are fingerprinted with the in-process scheme
(:mod:`harness.fingerprint`); lookups and bytes read in the decision log are
the in-process quantities (pointers dereferenced, bytes of the hop JSON), so
with faithful origins the boundary fingerprint equals the in-process one and
only the costs — measured separately — differ.

Outputs (``--out``): ``boundary_costs.csv``, ``boundary_decisions.csv``,
``boundary_evidence.csv``, ``boundary_meta.json``, ``boundary.md`` and
``boundary_cost_vs_flips.png``; see ``docs/boundary.md``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from harness._workers import ctrl_c_blocked, exit_with_parent
from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.boundary.links import Links, start_links
from harness.boundary.play import Runner, RunPlayer
from harness.boundary.records import (
    ArmCosts,
    BoundaryError,
    BoundaryOutcome,
    BoundarySettings,
    EvidenceRecord,
    RunComparison,
    Setting,
    overall_fingerprints,
)
from harness.boundary.remote import RemoteTopology, connect_remote
from harness.boundary.report import prewarm_figures, write_outputs
from harness.boundary.topology import Network, NodeSpec, RunClock, Topology, start_topology
from harness.boundary.wire import CryptoMeter
from harness.config import ExperimentConfig, Profile
from harness.metrics import RunKey
from harness.replay import ReplayParams
from harness.runner import progress_disabled, replay_params
from harness.trajectory import generate
from nodes.auth import ControlCredentials
from nodes.faults import FaultMode
from nodes.services import NodeCore
from nodes.store import StoreMode
from nodes.tls import TlsFiles
from nodes.transport import LocalNode

__all__ = [
    "BOUNDARY_FAULTS",
    "ArmCosts",
    "BoundaryError",
    "BoundaryOutcome",
    "BoundarySettings",
    "EvidenceRecord",
    "RunComparison",
    "Setting",
    "overall_fingerprints",
    "run_boundary",
    "run_boundary_async",
    "slice_tasks",
    "worker_start_method",
]


_T = TypeVar("_T")


class SliceObserver(Protocol):
    """What a simulation adds around one slice played in this process: what answers
    for each node (``serve_as``), a look at the topology and runner once they stand
    (``started``: it may wrap ``runner.ops``), and one before the nodes close."""

    def serve_as(self, spec: NodeSpec, core: NodeCore) -> LocalNode: ...

    def started(self, topo: Topology, runner: Runner) -> None: ...

    async def finishing(self, topo: Topology, runner: Runner) -> None: ...


def slice_tasks(
    cfg: ExperimentConfig, settings: BoundarySettings
) -> list[tuple[RunKey, Profile, ReplayParams]]:
    """The slice's runs in play order: (key, degradation profile, replay parameters)."""
    return [
        (
            RunKey("boundary", cadence, profile_name, seed),
            cfg.degradation_profiles[profile_name],
            replay_params(cfg, cadence, seed, record_curve=False),
        )
        for cadence in settings.cadences
        for profile_name in settings.profiles
        for seed in settings.seeds
    ]


@dataclass(slots=True)
class _Partial:
    """What playing some of the slice's runs produced (picklable, merged in run order)."""

    runs: list[tuple[int, RunComparison]]
    arm_costs: dict[str, ArmCosts]
    wire: dict[tuple[str, str], dict[str, float]]
    evidence: list[EvidenceRecord]
    outcomes: dict[tuple[str, str], int]
    folds_committed: int
    hops_appended: int
    node_ids: dict[str, str]
    node_faults: dict[str, str]
    heads_committed: int
    delivery_by_cadence: dict[tuple[int, str], list[int]]


def _control_credentials(settings: BoundarySettings) -> ControlCredentials | None:
    """The operator key that signs control calls to running nodes (None: none found)."""
    from nodes.auth import operator_credentials

    return operator_credentials(Path(settings.control_home) if settings.control_home else None)


def _tls(settings: BoundarySettings) -> TlsFiles | None:
    """TLS to running nodes, verified against ``settings.tls_ca`` (None: plaintext)."""
    from nodes.client_tls import ClientTls

    return ClientTls(Path(settings.tls_ca)).files() if settings.tls_ca else None


def _scratch_root() -> str | None:
    """Where temporary node stores go: tmpfs if there is one.

    Those stores run in :class:`nodes.store.StoreMode` ``scratch`` (no
    durability claimed, statements on the event loop's thread): the same
    transactions in the same order as a deployed node's, on a medium that
    answers in microseconds, which is what makes running them inline cheap.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return str(shm)
    return None


async def _play_tasks(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    tasks: Iterable[tuple[int, RunKey, Profile, ReplayParams]],
    root: Path,
    evidence_dir: Path | None,
    tick: Callable[[], None],
    store_mode: StoreMode,
    clock: RunClock | None = None,
    network: Network | None = None,
    observer: SliceObserver | None = None,
) -> _Partial:
    """Start (or connect to) the nodes, play ``tasks`` in order, stop the nodes."""
    topo: Topology | RemoteTopology
    if settings.transport is TransportKind.REMOTE:
        topo = await connect_remote(
            settings.nodes,
            origins=settings.origin_names(),
            relays=settings.chain[1:-1],
            holder=settings.chain[-1],
            witness=settings.witness_name if settings.witness else None,
            credentials=_control_credentials(settings),
            tls=_tls(settings),
        )
    else:
        topo = await start_topology(
            root,
            settings.specs(),
            settings.transport,
            deadline_ms=settings.deadline_ms,
            reasks=settings.reasks,
            store_mode=store_mode,
            clock=clock,
            network=network,
            serve_as=observer.serve_as if observer is not None else None,
        )
    links: Links | None = None
    try:
        if settings.rtt_ms is not None and isinstance(topo, Topology):
            links = await start_links(topo, settings.rtt_ms)
        runner = Runner(topo, settings, _Ticks(tick), evidence_dir)
        if observer is not None and isinstance(topo, Topology):
            observer.started(topo, runner)
        runs: list[tuple[int, RunComparison]] = []
        with CryptoMeter(topo.meter):
            for index, key, profile, params in tasks:
                # events are generated per run, so memory stays flat over the matrix
                events = generate(key.seed, settings.steps, cfg.decision_every, profile)
                runs.append((index, await RunPlayer(runner, key, events, params).play()))
            if observer is not None and isinstance(topo, Topology):
                await observer.finishing(topo, runner)
        wire = {
            tag: {
                "rpcs": c.rpcs,
                "failed_rpcs": c.failed_rpcs,
                "hops_received": c.hops_received,
                "request_bytes": c.request_bytes,
                "response_bytes": c.response_bytes,
                "sign_ops": c.sign_ops,
                "verify_ops": c.verify_ops,
                "sig_ms": c.sig_seconds * 1000.0,
                "hash_calls": c.hash_calls,
                "hash_leaves": c.hash_leaves,
                "hash_ms": c.hash_seconds * 1000.0,
            }
            for tag, c in topo.meter.by_tag.items()
        }
        calls = {f"{n}:{m}": v for (n, m), v in topo.meter.calls_by_node.items()}
        wire[("calls", "by_node")] = {k: float(v) for k, v in calls.items()}
        node_ids = {n.name: n.node_id for n in topo.nodes}
        node_faults = {n.name: n.fault.value for n in topo.nodes}
        if links is not None:
            wire[("links", "tcp")] = _link_counts(links)
    finally:
        try:
            if links is not None:
                await links.close()
        finally:
            await topo.close()
    return _Partial(
        runs,
        runner.arm_costs,
        wire,
        runner.evidence,
        runner.outcomes,
        runner.folds_committed,
        runner.hops_appended,
        node_ids,
        node_faults,
        runner.heads_committed,
        runner.delivery_by_cadence,
    )


def _link_counts(links: Links) -> dict[str, float]:
    totals = links.stats()
    return {
        "links": float(totals.links),
        "connections": float(totals.connections),
        "bytes_to_target": float(totals.bytes_to_target),
        "bytes_from_target": float(totals.bytes_from_target),
        "resets": float(totals.resets),
    }


class _Ticks:
    """The progress 'bar' a :class:`Runner` updates: one call per decision."""

    __slots__ = ("_tick",)

    def __init__(self, tick: Callable[[], None]) -> None:
        self._tick = tick

    def update(self, n: int) -> None:
        for _ in range(n):
            self._tick()


# ----------------------------------------------------------------- worker processes

_WORKER_TICKS: Any = None
_WORKER_RUNS: Any = None
#: The cyclic collector's thresholds in a worker (CPython's default: 700, 10, 10).
#: Set only in the processes the runner owns: a run played in the caller's process
#: leaves the caller's collector as it was.
_WORKER_GC_THRESHOLDS = (50_000, 20, 100)


def _worker_init(ticks: Any, runs: Any, parent: int) -> None:
    global _WORKER_TICKS, _WORKER_RUNS
    # Ctrl-C as in a process of its own: a forked worker would keep the handler of
    # the parent's event loop (which stops nothing here), and both kinds are born
    # with SIGINT blocked (:func:`_play_parallel`).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    exit_with_parent(parent)  # a SIGKILLed parent leaves no worker playing on
    _WORKER_TICKS = ticks
    _WORKER_RUNS = runs
    # Everything imported so far lives as long as the worker: keep the cyclic
    # collector from walking it again at every full collection.
    gc.freeze()
    # A run allocates many short-lived objects per delivery and keeps few cycles:
    # collect every generation less often.
    gc.set_threshold(*_WORKER_GC_THRESHOLDS)


def _pulled(
    all_tasks: list[tuple[RunKey, Profile, ReplayParams]],
) -> Iterator[tuple[int, RunKey, Profile, ReplayParams]]:
    """The runs this worker takes from the shared queue, one at a time, until its stop mark."""
    while (index := _WORKER_RUNS.get()) is not None:
        yield (index, *all_tasks[index])


def _worker_tick(pending: list[int]) -> None:
    pending[0] += 1
    if pending[0] >= 20 and _WORKER_TICKS is not None:  # batch: one queue put per 20
        _WORKER_TICKS.put(pending[0])
        pending[0] = 0


def _worker_play(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    root: str,
    evidence_dir: str | None,
    store_mode: StoreMode,
    prewarm: bool = False,
) -> _Partial:
    """One worker: runs from the shared queue until its stop mark, on its own in-process nodes.

    With ``prewarm`` (figures will be drawn in this pool) the worker imports
    matplotlib once its runs are done, in a thread of its own, while the
    other workers finish theirs and the parent merges: the figures it is
    then given start drawing at once. The thread is not a daemon, so the
    worker never exits in the middle of that import.
    """
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    configure_logging(LogFormat.JSON, "warning")
    pending = [0]
    partial = asyncio.run(
        _play_tasks(
            cfg,
            settings,
            _pulled(slice_tasks(cfg, settings)),
            Path(root),
            Path(evidence_dir) if evidence_dir is not None else None,
            lambda: _worker_tick(pending),
            store_mode,
        )
    )
    if pending[0] and _WORKER_TICKS is not None:
        _WORKER_TICKS.put(pending[0])
    if prewarm:
        threading.Thread(target=prewarm_figures, name="prewarm-figures").start()
    return partial


def _seed_identities(root: Path, names: list[str], workers: int) -> None:
    """One key per node name, copied into every worker's node dir: same node ids everywhere."""
    from nodes.app import KEY_FILENAME, load_or_create_identity

    for name in names:
        load_or_create_identity(root / "keys" / name)
        for w in range(workers):
            target = root / f"w{w}" / name
            target.mkdir(parents=True, exist_ok=True)
            key = target / KEY_FILENAME
            if not key.exists():
                shutil.copy2(root / "keys" / name / KEY_FILENAME, key)


async def _play_parallel(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    n_tasks: int,
    root: Path,
    evidence_dir: Path | None,
    bar: Any,
    store_mode: StoreMode,
    finish: Callable[[list[_Partial], Executor | None], _T],
    prewarm: bool,
) -> _T:
    """Play the runs over the worker processes; ``finish(partials, pool)`` while
    the pool still stands (it draws the figures there)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = min(settings.workers, n_tasks)
    _seed_identities(root, [s.name for s in settings.specs()], workers)
    method = worker_start_method(settings.transport)
    ctx = multiprocessing.get_context(method)
    ticks = ctx.Queue()
    # Runs are dealt out one at a time from a shared queue, longest first (the
    # most compactions: smallest cadence), so a worker that is slower (a loaded
    # core) takes fewer and the last runs to finish are short ones. A worker
    # stops at its stop mark (None, one each); results are put back in run order.
    runs = ctx.Queue()
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_worker_init,
        initargs=(ticks, runs, os.getpid()),
    ) as pool:
        # Forked workers are made at the first submission, all at once, before the
        # pool's own thread; the run queue is filled only after them, so its feeder
        # thread (and the lock it takes) does not exist yet when they fork. SIGINT
        # stays blocked until their initializer.
        with ctrl_c_blocked():
            futures = [
                loop.run_in_executor(
                    pool,
                    _worker_play,
                    cfg,
                    settings,
                    str(root / f"w{w}"),
                    str(evidence_dir) if evidence_dir is not None else None,
                    store_mode,
                    prewarm,
                )
                for w in range(workers)
            ]
        for index in longest_first(cfg, settings):
            runs.put(index)
        for _ in range(workers):
            runs.put(None)
        gathered = asyncio.gather(*futures)
        while not gathered.done():
            done = await asyncio.to_thread(_drain, ticks, 0.2)
            if done and bar is not None:
                bar.update(done)
            await asyncio.sleep(0)
        partials = await gathered
        leftover = _drain(ticks, 0.0)
        if leftover and bar is not None:
            bar.update(leftover)
        result = finish(partials, pool)
    ticks.close()
    runs.close()
    return result


def worker_start_method(transport: TransportKind) -> str:
    """How worker processes start: forked from this process where it can be.

    A forked worker starts with every module this process imported, at no
    cost; a spawned one imports them again (the nodes, the contracts, the
    crypto bindings), once per worker before its first run. In-process nodes
    on the in-memory transport use no grpc, so nothing grpc made crosses the
    fork; nodes on grpc (whose core does not survive a fork of a process that
    used it) and platforms without fork are spawned.
    """
    import multiprocessing

    if transport is TransportKind.MEMORY and "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return "spawn"


def longest_first(cfg: ExperimentConfig, settings: BoundarySettings) -> list[int]:
    """The slice's run indices, the runs expected to take longest first.

    Every run of a slice has the same steps and decision points; what differs
    is the compactions (each appends hops, signs a head per origin and
    changes the fold proofs the values carry), ``steps / cadence``: smallest
    cadence first, ties in the slice's order.
    """
    tasks = slice_tasks(cfg, settings)
    return sorted(range(len(tasks)), key=lambda i: (tasks[i][0].cadence, i))


def _drain(queue: Any, wait: float) -> int:
    import queue as queue_mod

    total = 0
    try:
        total += queue.get(timeout=wait) if wait > 0 else queue.get_nowait()
        while True:
            total += queue.get_nowait()
    except queue_mod.Empty:
        pass
    return total


def _merge(settings: BoundarySettings, partials: list[_Partial]) -> _Partial:
    """The partials as if one process had played every run, in the slice's run order."""
    runs = sorted((r for p in partials for r in p.runs), key=lambda r: r[0])
    order = {r.label: i for i, r in runs}
    arm_costs: dict[str, ArmCosts] = {}
    wire: dict[tuple[str, str], dict[str, float]] = {}
    outcomes: dict[tuple[str, str], int] = {}
    for p in partials:
        for arm, costs in p.arm_costs.items():
            arm_costs.setdefault(arm, ArmCosts()).add(costs)
        for tag, counts in p.wire.items():
            into = wire.setdefault(tag, {})
            for k, v in counts.items():
                into[k] = into.get(k, 0.0) + v
        for key, n in p.outcomes.items():
            outcomes[key] = outcomes.get(key, 0) + n
    by_cadence: dict[tuple[int, str], list[int]] = {}
    for p in partials:
        for cadence_arm, sums in p.delivery_by_cadence.items():
            into_sums = by_cadence.setdefault(cadence_arm, [0] * len(sums))
            for i, n in enumerate(sums):
                into_sums[i] += n
    evidence = sorted(
        (e for p in partials for e in p.evidence), key=lambda e: (order.get(e.run, -1), e.step)
    )
    return _Partial(
        runs,
        arm_costs,
        wire,
        evidence,
        outcomes,
        sum(p.folds_committed for p in partials),
        sum(p.hops_appended for p in partials),
        partials[0].node_ids if partials else {},
        partials[0].node_faults if partials else {},
        sum(p.heads_committed for p in partials),
        by_cadence,
    )


async def run_boundary_async(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    *,
    work_dir: Path | None = None,
    evidence_dir: Path | None = None,
    progress: bool | None = None,
    on_decision: Callable[[], None] | None = None,
    out: Path | None = None,
    clock: RunClock | None = None,
    network: Network | None = None,
    observer: SliceObserver | None = None,
) -> BoundaryOutcome:
    """Play every run of the slice across the boundary.

    Node data lives in ``work_dir`` (default: a temporary directory removed
    afterwards, on tmpfs where there is one); evidence files the holder
    writes go to ``evidence_dir`` (default: the holder's data directory).
    ``on_decision`` is called after each decision point (one process only).
    With ``settings.workers`` > 1 the runs are shared out over that many
    processes, each with its own in-process nodes under the same keys; the
    results are merged in run order, so the outputs and fingerprints are
    those of one process. With ``out`` the result files are written there
    (:func:`harness.boundary.report.write_outputs`; with workers, the
    figures are drawn in the worker processes before they end). ``clock`` and
    ``network`` go to :func:`harness.boundary.topology.start_topology` (one
    process only: a simulation's virtual clock and network model), ``observer``
    to :func:`_play_tasks` (one process only: what a simulation adds around the slice).
    """
    from tqdm import tqdm

    settings.validate(cfg)
    tasks = slice_tasks(cfg, settings)
    total = len(tasks) * (settings.steps // cfg.decision_every)  # decisions at step % D == 0
    start = time.perf_counter()
    parallel = settings.workers > 1 and settings.transport is not TransportKind.REMOTE
    if parallel and (clock is not None or network is not None or observer is not None):
        raise BoundaryError("a clock or network model is for runs in one process (workers 1)")

    def finish(partials: list[_Partial], pool: Executor | None) -> BoundaryOutcome:
        outcome = _outcome(settings, partials, time.perf_counter() - start)
        if out is not None:
            outcome.written = write_outputs(outcome, out, pool)
        return outcome

    with tempfile.TemporaryDirectory(prefix="provnet-boundary-", dir=_scratch_root()) as tmp:
        root = work_dir if work_dir is not None else Path(tmp)
        # Stores in a directory removed after the run claim no durability; a
        # kept --node-dir gets the deployed (durable) stores.
        store_mode = StoreMode.DURABLE if work_dir is not None else StoreMode.SCRATCH
        bar = tqdm(
            total=total,
            desc="boundary",
            unit="decision",
            file=sys.stderr,
            disable=progress_disabled(progress),
        )
        try:
            if parallel:
                return await _play_parallel(
                    cfg,
                    settings,
                    len(tasks),
                    root,
                    evidence_dir,
                    bar,
                    store_mode,
                    finish,
                    prewarm=out is not None,
                )

            def tick() -> None:
                bar.update(1)
                if on_decision is not None:
                    on_decision()

            indexed = [(i, *t) for i, t in enumerate(tasks)]
            partials = [
                await _play_tasks(
                    cfg,
                    settings,
                    indexed,
                    root,
                    evidence_dir,
                    tick,
                    store_mode,
                    clock,
                    network,
                    observer,
                )
            ]
        finally:
            bar.close()
    return finish(partials, None)


def _outcome(
    settings: BoundarySettings, partials: list[_Partial], wall_seconds: float
) -> BoundaryOutcome:
    """The merged partials as the slice's outcome."""
    merged = _merge(settings, partials)
    if settings.transport is TransportKind.REMOTE:
        # each running node runs the fault it was started with; the first origin's is the run's
        first = merged.node_faults.get(settings.origin_names()[0], FaultMode.NONE.value)
        # and a node's holder keeps the folds it verified (as deployed)
        settings = replace(settings, fault=FaultMode(first), holder_cache=True)
    return BoundaryOutcome(
        settings,
        [r for _, r in merged.runs],
        merged.arm_costs,
        merged.wire,
        merged.evidence,
        merged.outcomes,
        merged.folds_committed,
        merged.hops_appended,
        wall_seconds,
        merged.node_ids,
        node_faults=merged.node_faults,
        heads_committed=merged.heads_committed,
        delivery_by_cadence=merged.delivery_by_cadence,
    )


def run_boundary(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    out: Path | None = None,
    *,
    progress: bool | None = None,
    node_dir: Path | None = None,
    on_decision: Callable[[], None] | None = None,
) -> BoundaryOutcome:
    """Play the slice and (with ``out``) write the result files; see the module docstring.

    Evidence files are kept in ``out/evidence/``; the nodes' data directories
    in ``node_dir`` if given (else a temporary directory, removed).
    """
    evidence_dir = out / "evidence" if out is not None else None
    return asyncio.run(
        run_boundary_async(
            cfg,
            settings,
            work_dir=node_dir,
            evidence_dir=evidence_dir,
            progress=progress,
            on_decision=on_decision,
            out=out,
        )
    )
