"""The main matrix and the death-spiral run: scheduling, streaming, run_meta (spec §8).

Each run is an independent task (generate → replay → rows). Tasks go to a
fork-based process pool through an *ordered* ``imap``, so rows reach the
CSV files in the canonical task order whatever the number of workers; the
death-spiral run — ten times the steps of any other, the critical path — is
submitted first on its own and written last. Rows are streamed to disk as
runs complete: memory does not grow with the number of runs.

Output files (in ``--out``): ``gate_metrics.csv``, ``drift.csv``,
``recon_curve.csv``, ``prose_channel.csv``, ``death_spiral_decisions.csv``
and ``run_meta.json`` — columns in :mod:`harness.metrics`.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from harness._workers import ctrl_c_blocked, exit_with_parent, ignore_ctrl_c
from harness.config import ExperimentConfig, Profile
from harness.events import Event
from harness.fingerprint import combine
from harness.lineage import HopBytes
from harness.metrics import (
    DEATH_SPIRAL_COLUMNS,
    DRIFT_COLUMNS,
    GATE_COLUMNS,
    PROSE_COLUMNS,
    RECON_COLUMNS,
    RunKey,
)
from harness.prose import ChannelSource, ProseChannel
from harness.replay import ReplayParams, RunResult, replay, replay_penalties
from harness.trajectory import generate

__all__ = [
    "RECON_GATE_THRESHOLDS",
    "MainOutcome",
    "RunTask",
    "death_spiral_task",
    "execute",
    "main_tasks",
    "progress_disabled",
    "replay_params",
    "run_main",
    "run_task",
    "sorted_gate_rows",
    "trace_tasks",
    "versions",
]


@dataclass(frozen=True, slots=True)
class RunTask:
    """One run (or, with ``penalties``, one run per penalty sharing a replay).

    ``params.penalty`` is used when ``penalties`` is None; otherwise the task
    yields one result per entry of ``penalties``, in that order.
    """

    key: RunKey
    steps: int
    decision_every: int
    profile: Profile | None
    params: ReplayParams
    penalties: tuple[float, ...] | None = None

    @property
    def label(self) -> str:
        return self.key.label

    @property
    def labels(self) -> list[str]:
        """One label per result: ``…/p={penalty}`` for multi-penalty tasks."""
        if self.penalties is None:
            return [self.label]
        return [f"{self.label}/p={p!r}" for p in self.penalties]

    @property
    def result_penalties(self) -> tuple[float, ...]:
        return self.penalties if self.penalties is not None else (self.params.penalty,)


#: Events for trace tasks, set in the parent before the pool forks.
_TRACE_EVENTS: list[Event] | None = None


def run_task(task: RunTask, channel: ProseChannel | None = None) -> tuple[RunTask, list[RunResult]]:
    """Worker entry point: generate (or take the trace) and replay.

    ``channel`` replaces the run's mock prose channel (single-penalty runs).
    """
    if task.profile is None:
        if _TRACE_EVENTS is None:
            raise RuntimeError("trace task without trace events")
        events: Sequence[Event] = _TRACE_EVENTS
    else:
        events = generate(task.key.seed, task.steps, task.decision_every, task.profile)
    if task.penalties is None:
        return task, [replay(events, task.params, channel)]
    if channel is not None:
        raise ValueError("a prose channel serves single-penalty runs only")
    return task, replay_penalties(events, task.params, task.penalties)


def replay_params(
    cfg: ExperimentConfig,
    cadence: int,
    prose_seed: int,
    *,
    penalty: float | None = None,
    rehydrate: bool = True,
    lineage_modes: bool = True,
    record_curve: bool = True,
    record_death_spiral: bool = False,
) -> ReplayParams:
    """A run's replay parameters: the config's K, W, penalty and prose settings."""
    return ReplayParams(
        cadence=cadence,
        keep=cfg.lineage_keep_hops,
        window=cfg.allowlist_window,
        penalty=cfg.reconstruction_penalty if penalty is None else penalty,
        prose=cfg.prose,
        prose_seed=prose_seed,
        lineage_modes=lineage_modes,
        rehydrate=rehydrate,
        record_curve=record_curve,
        record_death_spiral=record_death_spiral,
    )


def main_tasks(cfg: ExperimentConfig, rehydrate: bool = True) -> list[RunTask]:
    """The main matrix in canonical order: cadence × profile × seed."""
    return [
        RunTask(
            RunKey("main", c, name, seed),
            cfg.steps,
            cfg.decision_every,
            profile,
            replay_params(cfg, c, seed, rehydrate=rehydrate),
        )
        for c in cfg.compaction_cadence
        for name, profile in cfg.degradation_profiles.items()
        for seed in cfg.seeds
    ]


def death_spiral_task(cfg: ExperimentConfig, rehydrate: bool = True) -> RunTask | None:
    ds = cfg.death_spiral_run
    if ds is None:
        return None
    return RunTask(
        RunKey("death_spiral", ds.compaction_cadence, ds.profile, ds.seed),
        ds.steps,
        cfg.decision_every,
        cfg.degradation_profiles[ds.profile],
        replay_params(
            cfg, ds.compaction_cadence, ds.seed, rehydrate=rehydrate, record_death_spiral=True
        ),
    )


def trace_tasks(
    cfg: ExperimentConfig, rehydrate: bool = True, hop_bytes: HopBytes = HopBytes.CANONICAL
) -> list[RunTask]:
    """One replay of the loaded trace per configured cadence (prose seed 0).

    Keyed as the lab keys them (spec §9): run_type ``main``, profile
    ``trace``, seed 0.
    """
    return [
        RunTask(
            RunKey("main", c, "trace", 0),
            0,
            cfg.decision_every,
            None,
            replace(replay_params(cfg, c, 0, rehydrate=rehydrate), hop_bytes=hop_bytes),
        )
        for c in cfg.compaction_cadence
    ]


def execute(
    tasks: Sequence[RunTask],
    workers: int,
    first: RunTask | None = None,
    progress: bool | None = None,
    desc: str = "runs",
    source: ChannelSource | None = None,
) -> Iterator[tuple[RunTask, list[RunResult]]]:
    """Yield (task, results) in task order; ``first`` (if any) is yielded last.

    ``first`` is started before everything else because it is the longest
    run; its result is held back so the output order does not depend on
    which worker finishes when. With a channel ``source`` (a real prose
    channel) every run executes in this process, one after the other: the
    source's client, cache and call budget are shared by all runs.
    """
    from tqdm import tqdm

    total = len(tasks) + (1 if first is not None else 0)

    def progress_bar() -> Any:
        return tqdm(
            total=total,
            desc=desc,
            unit="run",
            file=sys.stderr,
            disable=progress_disabled(progress),
        )

    def one(task: RunTask) -> tuple[RunTask, list[RunResult]]:
        if source is None:
            return run_task(task)
        return run_task(task, source.channel(task.params.prose_seed))

    if workers <= 1 or total <= 1 or source is not None:
        bar = progress_bar()
        try:
            held = one(first) if first is not None else None
            if held is not None:
                bar.update(1)
            for task in tasks:
                out = one(task)
                bar.update(1)
                yield out
            if held is not None:
                yield held
        finally:
            bar.close()
        return
    ctx = multiprocessing.get_context("fork")
    # fork the workers before the progress bar exists (no thread crosses a fork)
    # workers ignore Ctrl-C: the parent alone handles it (one line, exit 130),
    # and leaving the pool terminates them — no traceback from each worker
    with ctrl_c_blocked():  # born deaf to Ctrl-C: no moment before _worker_init hears it
        pool = ctx.Pool(processes=workers, initializer=_worker_init, initargs=(os.getpid(),))
    with pool:
        pending = pool.apply_async(run_task, (first,)) if first is not None else None
        chunk = max(1, min(8, len(tasks) // (workers * 8)))
        bar = progress_bar()
        try:
            for out in pool.imap(run_task, tasks, chunksize=chunk):
                bar.update(1)
                yield out
            if pending is not None:
                held_out = pending.get()
                bar.update(1)
                yield held_out
        finally:
            bar.close()


def _worker_init(parent: int) -> None:
    ignore_ctrl_c()  # first: exit_with_parent's libc look-up may take a while
    exit_with_parent(parent)  # a SIGKILLed parent leaves no worker playing on


def progress_disabled(progress: bool | None) -> bool | None:
    """tqdm's ``disable``: None = auto (off when stderr is not a TTY)."""
    if progress is None:
        return None
    return not progress


def _gate_order(row: tuple[object, ...]) -> tuple[str, str, str]:
    # (arm, policy, mode): the lab's row order within a run
    return (str(row[0]), str(row[1]), str(row[4]))


def sorted_gate_rows(rows: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """One run's gate rows in the lab's order: arm, then policy, then mode."""
    return sorted(rows, key=_gate_order)


class _Writers:
    """The five CSV streams of a results directory, in the lab's columns (spec §10)."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self._files: list[IO[str]] = []
        self.gate = self._open(out / "gate_metrics.csv", GATE_COLUMNS)
        self.drift = self._open(out / "drift.csv", DRIFT_COLUMNS)
        self.curve = self._open(out / "recon_curve.csv", RECON_COLUMNS)
        self.prose = self._open(out / "prose_channel.csv", PROSE_COLUMNS)
        self.death = self._open(out / "death_spiral_decisions.csv", DEATH_SPIRAL_COLUMNS)

    def _open(self, path: Path, columns: list[str]) -> Any:
        fh = path.open("w", newline="", encoding="utf-8")
        self._files.append(fh)
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        return writer

    def write(self, task: RunTask, result: RunResult) -> None:
        key = task.key.row()
        self.gate.writerows([*key, *row] for row in sorted_gate_rows(result.gate_rows))
        # drift rows: (arm, axis, n, sum_abs_err, mae)
        self.drift.writerows(
            [*key, arm, axis, mae, n, total] for arm, axis, n, total, mae in result.drift_rows
        )
        # curve rows: (step, cycle, n_compactions, store_reconstruction, fidelity, prose)
        self.curve.writerows(
            [*key, step, n_comp, recon_min, fidelity, recon_prose, cycle]
            for step, cycle, n_comp, recon_min, fidelity, recon_prose in result.curve_rows
        )
        p = result.prose
        self.prose.writerow(
            [
                *key,
                p.extractions,
                p.parse_failures,
                p.parse_failures / p.extractions if p.extractions else 0.0,
                p.true_taints,
                p.kept,
                p.fabricated,
                p.realized_recall,
                p.realized_precision,
                p.llm_calls,
                p.cache_hits,
                p.refusals,
            ]
        )
        # death rows: (step, cycle, n_compactions, arm, policy, gate_class, proceed,
        # oracle_proceed, reconstruction)
        self.death.writerows(
            [*key, step, arm, policy, proceed, oracle, cycle, n_comp, gate_class, recon]
            for step, cycle, n_comp, arm, policy, gate_class, proceed, oracle, recon in (
                result.death_rows
            )
        )

    def close(self) -> None:
        for fh in self._files:
            fh.close()


def versions() -> dict[str, str]:
    import importlib.metadata

    import numpy

    try:
        provnet = importlib.metadata.version("provnet")
    except importlib.metadata.PackageNotFoundError:
        provnet = "unknown"
    return {"provnet": provnet, "python": platform.python_version(), "numpy": numpy.__version__}


@dataclass(frozen=True, slots=True)
class MainOutcome:
    out: Path
    n_runs: int
    wall_seconds: float
    fingerprint: str
    run_fingerprints: dict[str, str]


#: The reconstruction-coupled gates' thresholds θ (spec §6), as run_meta records them.
RECON_GATE_THRESHOLDS: dict[str, float] = {
    "archive_all_axes_floor": 0.50,
    "publish_discounted_thresholds": 0.55,
}

_RUN_FILES = (
    "gate_metrics.csv",
    "drift.csv",
    "recon_curve.csv",
    "prose_channel.csv",
    "death_spiral_decisions.csv",
)


def run_main(
    cfg: ExperimentConfig,
    out: Path,
    *,
    workers: int = 2,
    rehydrate: bool = True,
    progress: bool | None = None,
    trace_events: list[Event] | None = None,
    trace_summary: dict[str, object] | None = None,
    trace_coverage: dict[str, object] | None = None,
    hop_bytes: HopBytes = HopBytes.CANONICAL,
    on_result: Callable[[RunTask, RunResult], None] | None = None,
    prose_source: ChannelSource | None = None,
) -> MainOutcome:
    """Run the matrix (or the trace replays) and write every output file.

    ``prose_source`` (a real prose channel) replaces the mock channel of
    every run; runs then execute serially in this process and
    ``run_meta.json`` records the source under ``llm_channel``.

    Files are written into a fresh folder renamed to ``out`` when complete
    (:func:`harness._outdir.staged_dir`): an interrupted run leaves the
    previous results untouched. ``trace_coverage`` (lab-schema traces) is
    written as ``trace_coverage.json``.
    """
    from harness._outdir import file_digests, staged_dir
    from harness.lab_trace import coverage_json

    global _TRACE_EVENTS
    start = time.perf_counter()
    if trace_events is not None:
        _TRACE_EVENTS = trace_events
        tasks = trace_tasks(cfg, rehydrate, hop_bytes)
        first = None
    else:
        tasks = main_tasks(cfg, rehydrate)
        first = death_spiral_task(cfg, rehydrate)
    fingerprints: dict[str, str] = {}
    with staged_dir(out) as partial:
        writers = _Writers(partial)
        try:
            for task, results in execute(
                tasks, workers, first, progress, desc="experiment", source=prose_source
            ):
                for label, result in zip(task.labels, results, strict=True):
                    writers.write(task, result)
                    fingerprints[label] = result.fingerprint
                    if on_result is not None:
                        on_result(task, result)
        finally:
            writers.close()
            _TRACE_EVENTS = None
        files = list(_RUN_FILES)
        if trace_coverage is not None:
            (partial / "trace_coverage.json").write_text(
                coverage_json(trace_coverage), encoding="utf-8"
            )
            files.append("trace_coverage.json")
        wall = time.perf_counter() - start
        overall = combine(fingerprints.items())
        ds = cfg.death_spiral_run if trace_events is None else None
        llm_channel = None if prose_source is None else prose_source.meta()
        meta: dict[str, object] = {
            # the lab's keys, in the lab's order (spec §10)
            "config": cfg.to_json(),
            "llm": None if llm_channel is None else llm_channel["provider"],
            "rehydrate": rehydrate,
            "seeds": [0] if trace_events is not None else list(cfg.seeds),
            "runs": len(fingerprints),
            "steps": cfg.steps,
            "reconstruction_penalty": cfg.reconstruction_penalty,
            "recon_gate_thresholds": dict(RECON_GATE_THRESHOLDS),
            "death_spiral_cadence": None if ds is None else ds.compaction_cadence,
            "wall_seconds": round(wall, 3),
            "decision_log_sha256_last_run": next(reversed(fingerprints.values()), None),
            # provnet's
            "prose_channel": "mock" if prose_source is None else "llm",
            "versions": versions(),
            "workers": workers if prose_source is None else 1,
            "n_runs": len(fingerprints),
            "fingerprint": overall,
            "run_fingerprints": fingerprints,
            "fingerprint_scheme": "sha256 over canonical decision log (harness.fingerprint)",
            "hop_bytes_encoding": 'json.dumps(hop, sort_keys=True, separators=(",", ":")), UTF-8'
            + (" + 1 (newline of a JSONL line)" if hop_bytes is HopBytes.JSONL_LINE else ""),
        }
        if trace_summary is not None:
            meta["trace"] = trace_summary
        if llm_channel is not None:
            meta["llm_channel"] = llm_channel
        meta["files"] = file_digests(partial, files)
        (partial / "run_meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return MainOutcome(out, len(fingerprints), wall, overall, fingerprints)
