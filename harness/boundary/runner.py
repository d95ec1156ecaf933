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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.boundary.choices import BOUNDARY_FAULTS
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
from harness.boundary.report import write_outputs
from harness.boundary.topology import start_topology
from harness.boundary.wire import CryptoMeter
from harness.config import ExperimentConfig, Profile
from harness.metrics import RunKey
from harness.replay import ReplayParams
from harness.runner import progress_disabled, replay_params
from harness.trajectory import generate

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
]


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


async def run_boundary_async(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    *,
    work_dir: Path | None = None,
    evidence_dir: Path | None = None,
    progress: bool | None = None,
) -> BoundaryOutcome:
    """Play every run of the slice across the boundary.

    Node data lives in ``work_dir`` (default: a temporary directory removed
    afterwards); evidence files the holder writes go to ``evidence_dir``
    (default: the holder's data directory).
    """
    from tqdm import tqdm

    settings.validate(cfg)
    tasks = slice_tasks(cfg, settings)
    total = len(tasks) * (settings.steps // cfg.decision_every)  # decisions at step % D == 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="provnet-boundary-") as tmp:
        root = work_dir if work_dir is not None else Path(tmp)
        topo = await start_topology(
            root,
            settings.specs(),
            settings.transport,
            deadline_ms=settings.deadline_ms,
            reasks=settings.reasks,
        )
        bar: Any = None
        try:
            bar = tqdm(
                total=total,
                desc="boundary",
                unit="decision",
                file=sys.stderr,
                disable=progress_disabled(progress),
            )
            runner = Runner(topo, settings, bar, evidence_dir)
            runs: list[RunComparison] = []
            with CryptoMeter(topo.meter):
                for key, profile, params in tasks:
                    # events are generated per run, so memory stays flat over the matrix
                    events = generate(key.seed, settings.steps, cfg.decision_every, profile)
                    runs.append(await RunPlayer(runner, key, events, params).play())
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
        finally:
            if bar is not None:
                bar.close()
            await topo.close()
    return BoundaryOutcome(
        settings,
        runs,
        runner.arm_costs,
        wire,
        runner.evidence,
        runner.outcomes,
        runner.folds_committed,
        runner.hops_appended,
        time.perf_counter() - start,
        node_ids,
        heads_committed=runner.heads_committed,
        delivery_by_cadence=runner.delivery_by_cadence,
    )


def run_boundary(
    cfg: ExperimentConfig,
    settings: BoundarySettings,
    out: Path | None = None,
    *,
    progress: bool | None = None,
    node_dir: Path | None = None,
) -> BoundaryOutcome:
    """Play the slice and (with ``out``) write the result files; see the module docstring.

    Evidence files are kept in ``out/evidence/``; the nodes' data directories
    in ``node_dir`` if given (else a temporary directory, removed).
    """
    evidence_dir = out / "evidence" if out is not None else None
    outcome = asyncio.run(
        run_boundary_async(
            cfg, settings, work_dir=node_dir, evidence_dir=evidence_dir, progress=progress
        )
    )
    if out is not None:
        outcome.written = write_outputs(outcome, out)
    return outcome
