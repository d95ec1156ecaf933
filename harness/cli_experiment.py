"""``provnet experiment run | sweep | report`` (Part 5 experiment).

- ``run``: the main matrix plus the death-spiral run (or, with ``--trace``,
  replays of a real agent log), writing the results directory.
- ``sweep``: the cadence × penalty crossover sweep.
- ``report``: renders ``summary.md`` and figures from both directories.

Default config paths resolve against the working directory; when the file
is absent, the built-in defaults (identical to the shipped
``experiments/*.yaml``) are used so the commands work from any directory.
Bad input exits 2 with ``provnet: error: <file>: <key>: <expected>``.
"""

from __future__ import annotations

import argparse
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import assert_never

from harness.cli_common import (
    DEFAULT_CONFIG,
    DEFAULT_SWEEP_CONFIG,
    add_progress_flags,
    load_experiment_config,
    positive_int,
    prepare_out,
)
from harness.cli_errors import UsageError

__all__ = ["TraceFormat", "detect_trace_format", "register"]


class TraceFormat(StrEnum):
    """Trace schemas ``run --trace`` reads (docs/experiment.md, "Trace mode")."""

    LAB = "lab"
    PROVNET = "provnet"


#: Records :func:`detect_trace_format` looks at: the schema shows in the first ops.
_SNIFF_RECORDS = 200


def detect_trace_format(path: Path) -> TraceFormat:
    """The schema of a trace, read from its first records' ops.

    Any of the lab's ops (``SOURCE_FETCH``, …) makes it the lab's; string ops
    that are none of them make it provnet's (``fetch``, ``llm_call``, …). A file
    that cannot be read or shows no op is left to the lab's loader, whose
    errors name the file and line.
    """
    import itertools
    import json

    from harness.lab_trace import LAB_OPS

    seen_op = False
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in itertools.islice(fh, _SNIFF_RECORDS):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                op = record.get("op") if isinstance(record, dict) else None
                if not isinstance(op, str):
                    continue
                if op in LAB_OPS:
                    return TraceFormat.LAB
                seen_op = True
    except OSError:
        return TraceFormat.LAB
    return TraceFormat.PROVNET if seen_op else TraceFormat.LAB


def _default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    exp = sub.add_parser("experiment", help="the Part 5 four-arm, nine-gate experiment")
    exp_sub = exp.add_subparsers(dest="experiment_command", required=True, metavar="ACTION")

    run = exp_sub.add_parser("run", help="main matrix + death-spiral run (or --trace replay)")
    run.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"experiment YAML (default: {DEFAULT_CONFIG}, else built-in)",
    )
    run.add_argument("--out", type=Path, default=Path("results"), help="results directory")
    run.add_argument(
        "--seeds", type=positive_int, default=None, help="override the seed count (seeds 0..N-1)"
    )
    run.add_argument(
        "--workers",
        type=positive_int,
        default=_default_workers(),
        help="worker processes (results are identical for any value)",
    )
    run.add_argument(
        "--no-rehydrate",
        action="store_true",
        help="skip rehydrate-mode evaluation of lineage gates",
    )
    run.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="replay a JSONL agent trace instead of synthetic trajectories",
    )
    run.add_argument(
        "--taint-rules",
        "--rules",
        dest="rules",
        type=Path,
        default=None,
        help="YAML taint rules for --trace (default: the lab's four rules)",
    )
    run.add_argument(
        "--trace-format",
        choices=[f.value for f in TraceFormat],
        default=None,
        help="trace schema: the lab's (SOURCE_FETCH …) or provnet's (fetch, llm_call …;"
        " integer steps); default: read from the trace's ops (the lab's when none tells)",
    )
    run.add_argument(
        "--mock",
        action="store_true",
        help="the deterministic mock prose channel (the default; the lab's flag)",
    )
    from harness._llm_cli import add_llm_flags  # argparse only

    add_llm_flags(run)
    add_progress_flags(run)
    run.set_defaults(handler=_run)

    sweep = exp_sub.add_parser("sweep", help="cadence × penalty crossover sweep")
    sweep.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"sweep YAML (default: {DEFAULT_SWEEP_CONFIG}, else built-in)",
    )
    sweep.add_argument("--out", type=Path, default=Path("results-sweep"))
    sweep.add_argument(
        "--seeds", type=positive_int, default=None, help="override the seed count (seeds 0..N-1)"
    )
    sweep.add_argument("--workers", type=positive_int, default=_default_workers())
    add_progress_flags(sweep)
    sweep.set_defaults(handler=_sweep)

    report = exp_sub.add_parser("report", help="write summary.md and figures")
    report.add_argument("--out", type=Path, default=Path("results"))
    report.add_argument("--sweep-out", type=Path, default=Path("results-sweep"))
    report.set_defaults(handler=_report)

    boundary = exp_sub.add_parser(
        "boundary", help="the experiment across nodes: origin and holder are different agents"
    )
    from harness.boundary.cli import configure as configure_boundary  # argparse only

    configure_boundary(boundary)

    attest = exp_sub.add_parser(
        "attest", help="Part 6 across the boundary: restoration by attestation, and its authority"
    )
    from harness.attest.cli import configure as configure_attest  # argparse only

    configure_attest(attest)

    custody = exp_sub.add_parser(
        "custody",
        help="availability of folded hops when origins and custodians depart for good",
    )
    from harness.custody.cli import configure as configure_custody  # argparse only

    configure_custody(custody)


def _run(args: argparse.Namespace) -> int:
    from harness.replay import ReplayError
    from harness.runner import run_main

    cfg = load_experiment_config(args.config, DEFAULT_CONFIG, sweep=False)
    if args.seeds is not None:
        cfg = cfg.with_seed_count(args.seeds)
    from harness.lineage import HopBytes

    if args.rules is not None and args.trace is None:
        raise UsageError("--taint-rules needs --trace FILE.jsonl")
    events = None
    summary: dict[str, object] | None = None
    coverage: dict[str, object] | None = None
    hop_bytes = HopBytes.CANONICAL
    if args.trace is not None:
        if args.trace_format is None:
            fmt = detect_trace_format(args.trace)
            if fmt is not TraceFormat.LAB:
                print(
                    f"provnet: {args.trace}: provnet's trace schema (its ops are not the"
                    " lab's); --trace-format lab to read it as the lab's",
                    file=sys.stderr,
                )
        else:
            fmt = TraceFormat(args.trace_format)
        match fmt:
            case TraceFormat.LAB:
                from harness.lab_trace import load_lab_trace
                from harness.trace_rules import TraceError

                try:
                    loaded = load_lab_trace(
                        args.trace, args.rules, decision_every=cfg.decision_every
                    )
                except TraceError as exc:
                    if detect_trace_format(args.trace) is TraceFormat.PROVNET:
                        raise UsageError(
                            f"{exc}; its ops are provnet's schema: --trace-format provnet"
                        ) from None
                    raise
                coverage = dict(loaded.summary)
                summary = {
                    "format": fmt.value,
                    "trace": str(args.trace),
                    "rules": None if args.rules is None else str(args.rules),
                    "decision_every": cfg.decision_every,
                }
                hop_bytes = HopBytes.JSONL_LINE
            case TraceFormat.PROVNET:
                from harness.trace import load_trace

                loaded = load_trace(args.trace, args.rules, decision_every=cfg.decision_every)
                summary = {"format": fmt.value, **loaded.summary}
            case _:
                assert_never(fmt)
        events = list(loaded.events)
    prepare_out(args.out)
    if args.mock and args.llm is not None:
        raise UsageError("--mock and --llm exclude each other: --mock is the mock prose channel")
    from harness._llm_cli import open_llm_source
    from harness.llm_errors import LLMError

    try:
        source = open_llm_source(args, cfg)
    except LLMError as exc:
        raise UsageError(str(exc)) from None
    try:
        outcome = run_main(
            cfg,
            args.out,
            workers=args.workers,
            rehydrate=not args.no_rehydrate,
            progress=args.progress,
            trace_events=events,
            trace_summary=summary,
            prose_source=source,
            trace_coverage=coverage,
            hop_bytes=hop_bytes,
        )
    except LLMError as exc:
        raise UsageError(str(exc)) from None
    except ReplayError as exc:
        where = f"{args.trace}: " if args.trace is not None else ""
        raise UsageError(f"{where}{exc}") from None
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write results: {exc}") from None
    finally:
        if source is not None:
            source.close()
    if source is not None:
        llm = source.meta()
        print(
            f"llm: {llm['provider']} {llm['model']}: {llm['calls']} calls, "
            f"{llm['cache_hits']} cache hits, {llm['parse_failures']} parse failures "
            f"({llm['refusals']} refusals) in {llm['extractions']} round trips"
        )
    print(
        f"experiment: {outcome.n_runs} runs in {outcome.wall_seconds:.2f} s "
        f"({args.workers if source is None else 1} workers) → {outcome.out}/"
    )
    print(f"fingerprint: {outcome.fingerprint}")
    if coverage is not None:
        _print_coverage(coverage)
    elif summary is not None:
        print(
            f"trace: {summary.get('records_read')} records, {summary.get('records_mapped')} "
            f"mapped, {summary.get('records_skipped')} skipped"
        )
    _print_headlines(outcome.out)
    return 0


def _print_coverage(coverage: dict[str, object]) -> None:
    print(
        f"trace: {coverage['n_records']} records, {coverage['n_mapped']} mapped, "
        f"{coverage['n_skipped']} skipped → trace_coverage.json"
    )
    for title, key in (("skipped", "skipped_by_reason"), ("warnings", "warnings")):
        entries = coverage.get(key)
        if isinstance(entries, dict) and entries:
            print(f"  {title}: " + "; ".join(f"{k} ×{v}" for k, v in entries.items()))
    hits = coverage.get("rule_hits")
    if isinstance(hits, dict):
        print("  rule hits: " + (", ".join(f"{k} {v}" for k, v in hits.items()) or "none"))


def _print_headlines(out: Path) -> None:
    from harness.analysis import AnalysisError, analyze

    try:
        f = analyze(out)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    for line in f.headline_lines():
        print(line)


def _sweep(args: argparse.Namespace) -> int:
    from harness.analysis import AnalysisError, analyze_sweep
    from harness.config import ConfigError
    from harness.sweep import run_sweep

    cfg = load_experiment_config(args.config, DEFAULT_SWEEP_CONFIG, sweep=True)
    if args.seeds is not None:
        cfg = cfg.with_seed_count(args.seeds)
    prepare_out(args.out)
    try:
        outcome = run_sweep(cfg, args.out, workers=args.workers, progress=args.progress)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write results: {exc}") from None
    print(
        f"sweep: {outcome.n_runs} runs in {outcome.wall_seconds:.2f} s "
        f"({args.workers} workers) → {outcome.out}/"
    )
    print(f"fingerprint: {outcome.fingerprint}")
    try:
        lines = analyze_sweep(outcome.out).lines()
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    for line in lines:
        print(line)
    return 0


def _report(args: argparse.Namespace) -> int:
    from harness.report import write_report

    sweep_out: Path | None = args.sweep_out
    skipped = sweep_out is not None and not (sweep_out / "sweep_metrics.csv").exists()
    # Said once the report is written: a missing results folder fails first, alone.
    written = write_report(args.out, None if skipped else sweep_out)
    if skipped:
        print(
            f"report: no sweep results in {sweep_out}/ — crossover section skipped", file=sys.stderr
        )
    for path in written:
        print(path)
    return 0
