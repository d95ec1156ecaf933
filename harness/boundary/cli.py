"""Flags and handler of ``provnet experiment boundary`` (argparse only at import).

The handler imports the boundary runner — and with it grpc and aiosqlite —
only when the subcommand runs, so the rest of the CLI stays light.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.cli import UsageError
from harness.cli_common import (
    DEFAULT_CONFIG,
    add_progress_flags,
    load_experiment_config,
    positive_int,
    prepare_out,
)
from nodes.faults import FaultMode

__all__ = ["configure"]


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(",") if part.strip())


def _names(text: str) -> tuple[str, ...]:
    # Name and length rules are BoundarySettings.validate's (a usage error there).
    return tuple(part.strip() for part in text.split(","))


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the boundary flags to ``parser`` and set its handler."""
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"experiment YAML for K, W, penalty, profiles (default: {DEFAULT_CONFIG}, "
        "else built-in)",
    )
    parser.add_argument("--out", type=Path, default=Path("results-boundary"))
    parser.add_argument("--seeds", type=positive_int, default=None, help="seeds 0..N-1 (default 2)")
    parser.add_argument(
        "--cadence", type=_int_list, default=None, help="compaction cadence(s), e.g. 25 or 10,25"
    )
    parser.add_argument("--profile", default=None, help="profile name(s), e.g. med or low,high")
    parser.add_argument("--steps", type=positive_int, default=None, help="steps per run")
    parser.add_argument(
        "--full",
        action="store_true",
        help="the config's whole main matrix (its cadences, profiles, seeds, steps)",
    )
    # Choices as strings (argparse shows them verbatim in errors), derived from the enums.
    parser.add_argument(
        "--transport",
        choices=tuple(t.value for t in TransportKind),
        default=TransportKind.MEMORY.value,
    )
    parser.add_argument(
        "--fault",
        choices=tuple(f.value for f in BOUNDARY_FAULTS),
        default=FaultMode.NONE.value,
        help="fault of the origin",
    )
    parser.add_argument(
        "--fault-delay-ms",
        type=positive_int,
        default=None,
        help="answer delay of 'slow' (default: twice --deadline-ms)",
    )
    parser.add_argument(
        "--chain",
        type=_names,
        default=("origin", "holder"),
        help="delivery path: origin,relay…,holder (e.g. a,b,c: c demands from a directly)",
    )
    parser.add_argument(
        "--origins",
        type=positive_int,
        default=1,
        help="origins sharing the values (value v owned by origin v mod N); fault on the first",
    )
    parser.add_argument(
        "--deadline-ms",
        type=positive_int,
        default=1000,
        help="answer time obligations promise (lower it for drop/slow runs)",
    )
    parser.add_argument("--reasks", type=int, default=1, help="re-asks before 'unanswered'")
    parser.add_argument(
        "--no-witness", action="store_true", help="no witness to confirm unanswered demands"
    )
    parser.add_argument(
        "--holder-cache",
        action="store_true",
        help="holder keeps verified folds between decisions (default: demand every time)",
    )
    parser.add_argument(
        "--node-dir",
        type=Path,
        default=None,
        help="keep the nodes' data directories (keys, hop logs, stores) here"
        " instead of a temporary directory",
    )
    add_progress_flags(parser)
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    cfg = load_experiment_config(args.config, DEFAULT_CONFIG, sweep=False)
    if args.reasks < 0:
        raise UsageError(f"--reasks: expected an integer >= 0, got {args.reasks}")
    fault = FaultMode(args.fault)
    if args.fault_delay_ms is not None and fault is not FaultMode.SLOW:
        raise UsageError("--fault-delay-ms applies to --fault slow only")
    if args.full:
        cadences = cfg.compaction_cadence
        profiles = tuple(cfg.degradation_profiles)
        seeds = cfg.seeds
        steps = cfg.steps
    else:
        cadences = (25,)
        profiles = ("med",)
        seeds = (0, 1)
        steps = cfg.steps
    if args.cadence is not None:
        cadences = args.cadence
    if args.profile is not None:
        profiles = tuple(p.strip() for p in args.profile.split(",") if p.strip())
    if args.seeds is not None:
        seeds = tuple(range(args.seeds))
    if args.steps is not None:
        steps = args.steps

    from harness.boundary.report import percentile
    from harness.boundary.runner import (
        BoundaryError,
        BoundarySettings,
        overall_fingerprints,
        run_boundary,
    )
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    settings = BoundarySettings(
        cadences=tuple(cadences),
        profiles=profiles,
        seeds=tuple(seeds),
        steps=steps,
        transport=TransportKind(args.transport),
        fault=fault,
        fault_delay_ms=args.fault_delay_ms or 0,
        chain=tuple(args.chain),
        origins=args.origins,
        deadline_ms=args.deadline_ms,
        reasks=args.reasks,
        witness=not args.no_witness,
        holder_cache=args.holder_cache,
    )
    try:
        settings.validate(cfg)
    except BoundaryError as exc:
        raise UsageError(str(exc)) from None
    prepare_out(args.out)
    if args.node_dir is not None:
        try:
            args.node_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"--node-dir {args.node_dir}: cannot create the node directory"
                f" ({exc.strerror or exc})"
            ) from None
    # Node events go to stderr as JSON, warnings and above only: the run's
    # own output is the summary below and the files.
    configure_logging(LogFormat.JSON, "warning")
    from harness._outdir import staged_dir

    # written into a fresh folder renamed to --out when complete (as run/sweep)
    with staged_dir(args.out) as partial:
        try:
            outcome = run_boundary(
                cfg, settings, partial, progress=args.progress, node_dir=args.node_dir
            )
        except BoundaryError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            where = exc.filename if exc.filename is not None else args.out
            raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None
    in_fp, b_fp = overall_fingerprints(outcome)
    same = sum(1 for r in outcome.runs if r.fingerprints_equal)
    print(
        f"boundary: {len(outcome.runs)} runs in {outcome.wall_seconds:.2f} s"
        f" ({settings.transport.value}, fault {settings.fault.value}) → {args.out}/"
    )
    print(f"fingerprint in-process {in_fp}")
    print(f"fingerprint boundary   {b_fp}")
    print(f"runs deciding exactly as in-process: {same}/{len(outcome.runs)}")
    arms = ("structural_min", "structural_perhop")
    rehydrations = sum(outcome.arm_costs[a].rehydrations for a in arms)
    if rehydrations:
        wire = [outcome.wire.get((a, "rehydrate"), {}) for a in arms]
        rpcs = sum(w.get("rpcs", 0) for w in wire)
        nbytes = sum(w.get("request_bytes", 0) + w.get("response_bytes", 0) for w in wire)
        across = [x for a in arms for x in outcome.arm_costs[a].rehydration_latencies]
        local = [x for a in arms for x in outcome.arm_costs[a].inproc_latencies]
        print(
            f"rehydrating decisions: {rehydrations}, {rpcs:.0f} RPCs,"
            f" {nbytes / rehydrations:,.0f} B each; p50 {1000 * percentile(across, 50):.2f} ms,"
            f" p99 {1000 * percentile(across, 99):.2f} ms"
            f" (in-process p50 {1000 * percentile(local, 50):.3f} ms)"
        )
    gt, smin = outcome.arm_costs["ground_truth"], outcome.arm_costs["structural_min"]
    if gt.decisions and smin.decisions:
        print(
            f"delivered per decision: ground_truth {gt.value_bytes / gt.decisions:,.0f} B;"
            f" structural_min {smin.value_bytes / smin.decisions:,.0f} B"
            f" + {smin.statement_bytes / smin.decisions:,.0f} B of statements (fold proofs, heads)"
        )
    kinds = outcome.evidence_by_kind
    print(
        "evidence: "
        + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) if kinds else "none")
        + f"; correct origins accused: {outcome.correct_accused}"
    )
    return 0
