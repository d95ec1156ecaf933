"""Flags and handler of ``provnet experiment boundary`` (argparse only at import).

The handler imports the boundary runner — and with it grpc and aiosqlite —
only when the subcommand runs, so the rest of the CLI stays light.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.cli_common import (
    DEFAULT_CONFIG,
    add_progress_flags,
    load_experiment_config,
    positive_int,
    prepare_out,
)
from harness.cli_errors import RunFailed, UsageError
from nodes.faults import FaultMode

__all__ = ["available_cores", "configure", "default_workers", "parse_rtts"]


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_workers(runs: int) -> int:
    """``--workers`` when not given: every available core, at most one per run."""
    return max(1, min(available_cores(), runs))


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(",") if part.strip())


def _names(text: str) -> tuple[str, ...]:
    # Name and length rules are BoundarySettings.validate's (a usage error there).
    return tuple(part.strip() for part in text.split(","))


def _origins(text: str) -> int | tuple[str, ...]:
    """``N`` origins named after the chain's first, or the origins' names (``a,d``)."""
    if text.strip().isdigit():
        return positive_int(text)
    return _names(text)


def _members(text: str) -> tuple[tuple[str, str], ...]:
    """``name=host:port`` entries separated by ',', ';' or spaces."""
    from nodes.home import check_node_name

    members: list[tuple[str, str]] = []
    for entry in re.split(r"[;,\s]+", text.strip()):
        if not entry:
            continue
        name, sep, address = entry.partition("=")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"entry {entry!r}: expected name=host:port")
        try:
            members.append((check_node_name(name), address))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if len({n for n, _ in members}) != len(members):
        raise argparse.ArgumentTypeError(f"{text!r}: a node name appears twice")
    if len(members) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: an origin and a holder need 2 nodes")
    return tuple(members)


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
        default=None,
        help="how nodes reach each other (default memory; grpc with --rtt-ms)",
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
        default=None,
        help="delivery path: origin,relay…,holder (e.g. a,b,c: c demands from a directly;"
        " default origin,holder, on running nodes the first two)",
    )
    parser.add_argument(
        "--origins",
        type=_origins,
        default=1,
        help="origins sharing the values (value v owned by origin v mod N): a count, or"
        " their names (first = the chain's first); the fault is on the first",
    )
    parser.add_argument(
        "--witness",
        default=None,
        help="name of the witness node (default 'witness'; on running nodes the first"
        " node without a role)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster",
        nargs="?",
        const="",
        default=None,
        metavar="PROVNET_HOME",
        help="play on the running local cluster (provnet cluster up) under PROVNET_HOME"
        " (default $PROVNET_HOME, else ./.provnet)",
    )
    where.add_argument(
        "--nodes",
        type=_members,
        default=None,
        help="play on running nodes name=host:port[,…] (e.g. Compose services)",
    )
    from nodes.client_tls import add_tls_flags

    add_tls_flags(parser)
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes the runs are shared over (in-process nodes; results merged in"
        " run order, fingerprints as with one); default: the cores this process may"
        " use, at most one per run",
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
        "--custody-k",
        type=int,
        default=0,
        metavar="K",
        help="in-process nodes: K custodians (extra nodes, one operator each) take custody"
        " of every commit; deliveries carry their statements (default 0: none)",
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
    parser.add_argument(
        "--rtt-ms",
        default=None,
        metavar="MS[,MS…]",
        help="sweep the slice over these link round-trip times (user-space proxy per link,"
        " transport grpc): writes boundary_rtt.csv and boundary_rtt.png",
    )
    add_progress_flags(parser)
    parser.set_defaults(handler=_handler)


def parse_rtts(text: str) -> tuple[float, ...]:
    """``0,1,5,20,50`` → RTTs in ms (each a number >= 0, no repeats, at least one)."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"expected RTTs in ms such as 0,1,5,20,50, got {part!r}") from None
        if not value >= 0 or value == float("inf"):
            raise ValueError(f"an RTT must be a finite number of ms >= 0, got {part!r}")
        if value in values:
            raise ValueError(f"RTT {part} ms appears twice")
        values.append(value)
    if not values:
        raise ValueError(f"expected at least one RTT in ms, got {text!r}")
    return tuple(values)


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

    members: tuple[tuple[str, str], ...] = ()
    control_home = ""
    if args.cluster is not None:
        members = _cluster_members(args.cluster)
        from nodes.home import Home

        control_home = str(Home.resolve(args.cluster or None).root)
    elif args.nodes is not None:
        members = args.nodes
    tls_ca = _tls_ca(args) if members else ""
    if not members and args.tls_ca is not None:
        raise UsageError("--tls-ca: applies to running nodes (--cluster, --nodes)")
    if args.rtt_ms is not None:
        try:
            args.rtt_ms = parse_rtts(args.rtt_ms)
        except ValueError as exc:
            raise UsageError(f"--rtt-ms: {exc}") from None
    if args.transport is None:
        args.transport = (
            TransportKind.GRPC.value
            if args.rtt_ms is not None and not members
            else TransportKind.MEMORY.value
        )
    transport = TransportKind(args.transport)
    if members:
        if args.rtt_ms is not None:
            raise UsageError(
                "--rtt-ms starts its own nodes with a proxy per link; on running nodes put"
                " 'provnet link-proxy' between them (docs/cluster.md)"
            )
        if args.transport not in (TransportKind.MEMORY.value, TransportKind.REMOTE.value):
            raise UsageError(f"--transport {args.transport}: running nodes are reached remotely")
        transport = TransportKind.REMOTE
    elif args.rtt_ms is not None and transport is not TransportKind.GRPC:
        raise UsageError(
            f"--rtt-ms needs --transport grpc (link proxies carry TCP), got {transport.value}"
        )
    names = [n for n, _ in members]
    chain = args.chain
    if chain is None:
        chain = tuple(names[:2]) if members else ("origin", "holder")
    origin_nodes: tuple[str, ...] = ()
    origins = 1
    if isinstance(args.origins, tuple):
        origin_nodes = args.origins
        origins = len(origin_nodes)
    else:
        origins = args.origins
        if members and origins > 1:
            origin_nodes = _pick_origins(names, tuple(chain), args.witness, origins)
    witness_name = args.witness
    if witness_name is None:
        if members:
            taken = {*chain, *origin_nodes}
            free = [n for n in names if n not in taken]
            witness_name = free[0] if free else None
        else:
            witness_name = "witness"
    witness = not args.no_witness and witness_name is not None

    from harness._words import count
    from harness.boundary.remote import RemoteError
    from harness.boundary.report import conditions, cost_table, unconfirmed_text
    from harness.boundary.runner import (
        BoundaryError,
        BoundarySettings,
        overall_fingerprints,
        run_boundary,
    )
    from nodes.config import LogFormat
    from nodes.logging import configure_logging
    from nodes.refusal import ControlRefused

    settings = BoundarySettings(
        cadences=tuple(cadences),
        profiles=profiles,
        seeds=tuple(seeds),
        steps=steps,
        transport=transport,
        fault=fault,
        fault_delay_ms=args.fault_delay_ms or 0,
        chain=tuple(chain),
        origins=origins,
        origin_nodes=origin_nodes,
        deadline_ms=args.deadline_ms,
        reasks=args.reasks,
        witness=witness,
        holder_cache=args.holder_cache,
        custody_k=args.custody_k,
        witness_name=witness_name or "witness",
        nodes=members,
        workers=args.workers
        if args.workers is not None
        else 1
        if transport is TransportKind.REMOTE  # running nodes: one driver
        else default_workers(len(cadences) * len(profiles) * len(seeds)),
        control_home=control_home,
        tls_ca=tls_ca,
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

    if args.rtt_ms is not None:
        from harness.boundary.rtt import print_rtt_point, print_rtt_sweep, run_rtt_sweep

        with staged_dir(args.out) as partial:
            try:
                sweep = run_rtt_sweep(
                    cfg,
                    settings,
                    args.rtt_ms,
                    partial,
                    progress=args.progress,
                    on_point=print_rtt_point,
                )
            except BoundaryError as exc:
                raise UsageError(str(exc)) from None
            except OSError as exc:
                where = exc.filename if exc.filename is not None else args.out
                raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None
        print_rtt_sweep(sweep, args.out)
        return 0
    # written into a fresh folder renamed to --out when complete (as run/sweep)
    with staged_dir(args.out) as partial:
        try:
            outcome = run_boundary(
                cfg, settings, partial, progress=args.progress, node_dir=args.node_dir
            )
        except (BoundaryError, ControlRefused) as exc:
            raise UsageError(str(exc)) from None
        except RemoteError as exc:
            raise RunFailed(f"on running nodes: {exc}") from None
        except OSError as exc:
            where = exc.filename if exc.filename is not None else args.out
            raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None
    in_fp, b_fp = overall_fingerprints(outcome)
    same = sum(1 for r in outcome.runs if r.fingerprints_equal)
    faults = [f"{n} {f}" for n, f in outcome.node_faults.items() if f != FaultMode.NONE.value]
    print(
        f"boundary: {count(len(outcome.runs), 'run')} in {outcome.wall_seconds:.2f} s"
        f" ({settings.transport.value}, fault {', '.join(faults) or 'none'}) → {args.out}/"
    )
    print(f"fingerprint in-process {in_fp}")
    print(f"fingerprint boundary   {b_fp}")
    print(f"runs deciding exactly as in-process: {same}/{len(outcome.runs)}")
    print(f"cost table ({conditions(outcome)}):")
    print(cost_table(outcome), end="")
    kinds = outcome.evidence_by_kind
    print(
        "evidence: "
        + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) if kinds else "none")
        + f"; {unconfirmed_text(outcome)}; correct origins accused: {outcome.correct_accused}"
    )
    return 0


def _pick_origins(
    names: list[str], chain: tuple[str, ...], witness: str | None, count: int
) -> tuple[str, ...]:
    """``--origins N`` on running nodes (:func:`~harness.boundary.records.pick_running_origins`)."""
    from harness.boundary.records import BoundaryError, pick_running_origins

    try:
        return pick_running_origins(names, chain, witness, count)
    except BoundaryError as exc:
        raise UsageError(str(exc)) from None


def _tls_ca(args: argparse.Namespace) -> str:
    """The CA running nodes are verified with: --tls-ca, $PROVNET_TLS_CA, else (--cluster)
    the CA the local cluster recorded; "" for plaintext."""
    from nodes.client_tls import ClientTls
    from nodes.cluster import ClusterError, load_state
    from nodes.home import Home

    recorded = None
    if args.cluster is not None:
        try:
            state = load_state(Home.resolve(args.cluster or None))
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
        recorded = None if state is None else state.tls_ca
    try:
        tls = ClientTls.from_args(args, default_ca=recorded)
        tls.files()
    except ValueError as exc:  # nodes.tls.TlsError: names the setting and the file
        raise UsageError(str(exc)) from None
    return "" if tls.ca is None else str(tls.ca)


def _cluster_members(home_arg: str) -> tuple[tuple[str, str], ...]:
    """The live nodes of the local cluster recorded under ``home_arg`` (or $PROVNET_HOME)."""
    from nodes.cluster import load_state, running_nodes
    from nodes.home import Home

    home = Home.resolve(home_arg or None)
    state = load_state(home)
    if state is None:
        raise UsageError(
            f"--cluster: no cluster recorded under {home.root}; run 'provnet cluster up'"
        )
    live = running_nodes(state)
    dead = [r.name for r in state.nodes if r not in live]
    if dead:
        raise UsageError(
            f"--cluster {home.root}: node(s) {', '.join(dead)} not running;"
            " see 'provnet cluster status'"
        )
    return tuple((r.name, r.address) for r in live)
