"""Flags and handler of ``provnet experiment custody`` (argparse only at import).

The quick default plays a small sweep (:data:`QUICK_TRIALS` trials per cell,
seconds); ``--full`` plans each cell's trials from its closed form so the 95%
interval is within ±2 percentage points (:mod:`harness.custody.stats`).
Bad input exits 2 with one ``provnet: error:`` line naming the flag and what
was expected.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli_common import add_progress_flags, positive_int, prepare_out
from harness.cli_errors import UsageError

__all__ = ["QUICK_TRIALS", "configure", "parse_ks", "parse_ps"]

#: Trials per cell of the quick default.
QUICK_TRIALS = 24
#: Cells of the quick default: k = 0 and 1 at two departure probabilities.
QUICK_KS = (0, 1)
QUICK_PS = (0.2, 0.5)


def parse_ks(text: str) -> tuple[int, ...]:
    """``0,1,2,3`` → custodian counts (each an integer 0..3, no repeats)."""
    from harness.custody.settings import MAX_K

    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) > MAX_K:
            raise UsageError(
                f"--k: expected custodian counts 0..{MAX_K} such as 0,1,2,3, got {part!r}"
            )
        if int(part) in values:
            raise UsageError(f"--k: custodian count {part} appears twice")
        values.append(int(part))
    if not values:
        raise UsageError(f"--k: expected at least one custodian count, got {text!r}")
    return tuple(values)


def parse_ps(text: str) -> tuple[float, ...]:
    """``0.05,0.1,0.2`` → departure probabilities (each in [0, 1), no repeats)."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise UsageError(
                f"--p: expected probabilities in [0, 1) such as 0.05,0.2, got {part!r}"
            ) from None
        if not 0.0 <= value < 1.0:
            raise UsageError(f"--p: expected a probability in [0, 1), got {part!r}")
        if value in values:
            raise UsageError(f"--p: probability {part} appears twice")
        values.append(value)
    if not values:
        raise UsageError(f"--p: expected at least one probability, got {text!r}")
    return tuple(values)


def _departures(text: str) -> tuple[str, ...]:
    from harness.custody.settings import Departures

    known = [d.value for d in Departures]
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError(f"--departures: expected a comma list of {', '.join(known)}, got {text!r}")
    return names


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the custody flags to ``parser`` and set its handler."""
    parser.add_argument("--out", type=Path, default=Path("results-custody"))
    parser.add_argument(
        "--k", default=None, help="custodian counts (default 0,1; with --full 0,1,2,3)"
    )
    parser.add_argument(
        "--p",
        default=None,
        help="departure probabilities per epoch (default 0.2,0.5; with --full"
        " 0.05,0.1,0.2,0.3,0.5)",
    )
    parser.add_argument(
        "--departures",
        default=None,
        help="independent, operator (placement ignores operators), operator_placed"
        " (one custodian per operator); default all three",
    )
    parser.add_argument(
        "--trials",
        type=positive_int,
        default=None,
        help=f"trials per cell (default {QUICK_TRIALS}; with --full planned per cell"
        " for a 95%% interval within ±2 points)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the whole sweep, trials planned per cell from the closed form",
    )
    parser.add_argument(
        "--batch", type=positive_int, default=64, help="trials played at once (default 64)"
    )
    parser.add_argument(
        "--operators",
        type=positive_int,
        default=4,
        help="operators the parties spread over in the operator modes (default 4)",
    )
    parser.add_argument("--hops", type=positive_int, default=12, help="hops per fold")
    parser.add_argument("--seed", type=int, default=0, help="seed of departures and hops")
    parser.add_argument(
        "--transport",
        choices=("memory", "grpc"),
        default="memory",
        help="how the nodes started here reach each other (default memory)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster",
        nargs="?",
        const="",
        default=None,
        metavar="PROVNET_HOME",
        help="play on the running local cluster (provnet cluster up): its nodes hold and"
        " witness; the departing parties are extra node processes started and stopped here",
    )
    where.add_argument(
        "--nodes",
        default=None,
        help="play on running nodes name=host:port[,…] (holder first, then a witness)",
    )
    from nodes.client_tls import add_tls_flags

    add_tls_flags(parser)
    parser.add_argument(
        "--deadline-ms",
        type=positive_int,
        default=250,
        help="answer time the origins promise (default 250, the shortest allowed)",
    )
    parser.add_argument("--reasks", type=int, default=0, help="re-asks before 'unanswered'")
    parser.add_argument(
        "--no-witness", action="store_true", help="no witness to confirm unanswered demands"
    )
    parser.add_argument(
        "--node-dir",
        type=Path,
        default=None,
        help="make the nodes' data directories under this folder (default: a temporary one)",
    )
    parser.add_argument(
        "--no-rows",
        action="store_true",
        help="skip the split-view rows (an origin showing two holders two heads, for"
        " witness quorums (n, q, f)) and the death-spiral row (reconstruction restored"
        " from a custodian after the origin is gone); in-process nodes",
    )
    parser.add_argument(
        "--cost-line",
        action="store_true",
        help="print one cost-table row instead of a line per cell: availability at one"
        " (k, p) cell next to k = 0 (needs --k 0,K and one --p; the main job's row)",
    )
    add_progress_flags(parser)
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    from harness.boundary.choices import TransportKind
    from harness.custody.settings import (
        DEFAULT_KS,
        DEFAULT_PS,
        CustodyError,
        CustodySettings,
        Departures,
    )

    ks = parse_ks(args.k) if args.k is not None else DEFAULT_KS if args.full else QUICK_KS
    ps = parse_ps(args.p) if args.p is not None else DEFAULT_PS if args.full else QUICK_PS
    modes = (
        tuple(Departures(d) for d in _departures(args.departures))
        if args.departures is not None
        else tuple(Departures)
    )
    if args.reasks < 0:
        raise UsageError(f"--reasks: expected an integer >= 0, got {args.reasks}")
    trials = args.trials if args.trials is not None else 0 if args.full else QUICK_TRIALS
    settings = CustodySettings(
        ks=ks,
        ps=ps,
        departures=modes,
        trials=trials,
        batch=args.batch,
        operators=args.operators,
        hops=args.hops,
        seed=args.seed,
        transport=TransportKind(args.transport),
        deadline_ms=args.deadline_ms,
        reasks=args.reasks,
        witness=not args.no_witness,
    )
    try:
        settings.validate()
    except CustodyError as exc:
        key, _, rest = str(exc).partition(":")
        raise UsageError(f"--{key.replace('_', '-')}:{rest}") from None
    if args.cost_line and (len(ks) != 2 or 0 not in ks or len(ps) != 1 or len(modes) != 1):
        raise UsageError(
            "--cost-line: expected --k 0,K (k = 0 and one other), one --p and one --departures mode"
        )
    if args.cluster is not None or args.nodes is not None:
        from harness.custody.remote import run_on_running

        return run_on_running(args, settings)
    if args.tls_ca is not None:
        raise UsageError("--tls-ca: applies to running nodes (--cluster, --nodes)")
    prepare_out(args.out)
    if args.node_dir is not None:
        try:
            args.node_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"--node-dir {args.node_dir}: cannot create the node directory"
                f" ({exc.strerror or exc})"
            ) from None
    from nodes.config import LogFormat
    from nodes.logging import configure_logging

    configure_logging(LogFormat.JSON, "warning")
    from harness._outdir import staged_dir
    from harness.custody.report import write_results
    from harness.custody.runner import run_custody

    where = f"in-process nodes ({settings.transport.value})"
    with staged_dir(args.out) as partial:
        try:
            outcome = run_custody(
                settings,
                progress=args.progress,
                node_dir=args.node_dir,
                rows=not args.no_rows and not args.cost_line,
            )
        except CustodyError as exc:
            raise UsageError(str(exc)) from None
        try:
            write_results(
                partial,
                settings,
                outcome.cells,
                wall_seconds=outcome.wall_seconds,
                where=where,
                split_view=outcome.split_view,
                death_spiral=outcome.death_spiral,
            )
        except OSError as exc:
            target = exc.filename if exc.filename is not None else args.out
            raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from None
    from harness.custody.report import cost_line, print_outcome

    if args.cost_line:
        print(cost_line(outcome.cells, where))
    else:
        print_outcome(outcome.cells, outcome.wall_seconds, where, args.out)
        for r in outcome.split_view:
            print(
                f"  split view n={r.n} q={r.q} f={r.f}: conflicting heads accepted"
                f" {r.conflicting_accepted} ({'2q > n+f' if r.bound_holds else '2q <= n+f'}),"
                f" split_view evidence {r.witness_evidence + r.holder_evidence},"
                f" honest accused {r.honest_accused}"
            )
        for d in outcome.death_spiral:
            print(
                f"  death spiral, origin gone, k={d.k}: rehydrated {d.rehydrated}"
                f" ({d.served_by}), attestations issued {d.issued}, reconstruction"
                f" {d.reconstruction_before:g} -> {d.reconstruction_after:g}, gates blocking"
                f" {d.blocking_before} -> {d.blocking_after} of {d.gates},"
                f" attest verify exit {d.verify_exit} (no attester trusted:"
                f" {d.verify_untrusted_exit})"
            )
    return 0
