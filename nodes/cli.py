"""``provnet node`` and ``provnet cluster``: run one node, or a local cluster of them.

``provnet node [flags]`` runs a node in the foreground until SIGTERM/SIGINT;
every flag has an environment fallback (``PROVNET_NAME``, ``PROVNET_LISTEN``,
``PROVNET_DATA_DIR``, ``PROVNET_PEERS``, ``PROVNET_FAULT``,
``PROVNET_LOG_FORMAT``, …) so that local processes and Compose containers
use one entrypoint with one configuration. ``provnet node health --addr``
asks a node's gRPC health service (the Compose healthcheck).

``provnet cluster up|status|down|smoke`` manages N local node processes
under ``$PROVNET_HOME`` (see :mod:`nodes.cluster`, :mod:`nodes.smoke`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

__all__ = ["node_flags", "register"]

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]


#: What to do about an unreadable cluster.json (status and down say it).
_RECOVER = (
    "run 'provnet cluster down' to stop the nodes still running under this home"
    " (found by their data dirs) and set the file aside, then 'provnet cluster up'"
)


def _error(message: str) -> int:
    print(f"provnet: error: {message}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- node


#: Help for each NodeConfig field's flag; the flag is ``--<field>`` with '-'
#: for '_' and the variable is ``nodes.config.ENV_VARS[field]``.
_FLAG_HELP: Mapping[str, str] = {
    "name": "node label: lower-case letters, digits, '_' and '-', starting with a letter or"
    " digit, at most 32 characters (required)",
    "listen": "host:port to serve on (default 127.0.0.1:50051)",
    "data_dir": "directory for the key file and the hop log (required)",
    "peers": "known nodes: 'name=host:port[,pubkey]' entries separated by ';' or spaces",
    "fault": "fault mode for tests: {fault_modes}",
    "fault_delay_ms": "delay of the 'slow' fault mode, in ms",
    "attest_fault": "what this node signs as an attester, for tests: none (honest), no_proof,"
    " other_value_receipts, forged_receipts, tampered_receipts, partial_receipts, replayed,"
    " expired, lax",
    "log_format": "auto (console on a TTY, else JSON lines), json, console",
    "log_level": "debug, info, warning, error (default info)",
    "max_message_bytes": "largest gRPC message accepted or sent (default 4 MiB)",
    "shutdown_grace_s": "seconds in-flight calls get after SIGTERM (default 5)",
    "advertise": "address put in obligations (default: --listen); set it in containers",
    "serve_for_ms": "default obligation lifetime, in ms",
    "deadline_ms": "default promised answer time per demand, in ms",
    "reasks": "times a holder re-asks an origin before calling it unanswered",
    "evidence_dir": "where evidence files are written (default <data-dir>/evidence)",
    "provenance_pending": "true: the cold copy lags, demands are answered PENDING",
    "port_file": "write the bound port here (useful with port 0)",
    "operator_keys": "public keys (64 hex, ';'-separated) allowed to make control calls;"
    " none: control calls are refused",
    "operator_key_file": "operator key file whose public key is authorised too (read at start)",
    "min_witnesses": "witness confirmations an unanswered suspicion needs (default 1)",
    "reap_interval_s": "seconds between two sweeps of the retention reaper, which evicts hops"
    " no unexpired obligation protects (default 5, 0: off)",
    "max_concurrent_rpcs": "open calls other than demands and health checks (node info,"
    " attestation lists) handled at once, and challenges apart from them (a quarter of these"
    " per caller address); more are shed with RESOURCE_EXHAUSTED (default 128)",
    "max_streams": "long-lived streams (health watch, demand streams, reflection) open at once;"
    " more are refused with RESOURCE_EXHAUSTED (default 64 per streaming method)",
    "max_streams_per_peer": "long-lived streams one caller address may hold open, per streaming"
    " method (default 16)",
    "max_bulk_rpcs": "bulk calls (deliver, append, commit, rehydrate, forward, attest) at once;"
    " more are shed with RESOURCE_EXHAUSTED (default 16, 0: no separate limit)",
    "bulk_shed_lag_ms": "while the event loop runs this many ms late, admit one bulk call at a"
    " time and shed the rest with RESOURCE_EXHAUSTED (default 0: off)",
    "max_bulk_bytes": "bytes of bulk request bodies in flight (each call reserves"
    " --max-message-bytes until its body is read); more wait up to 0.1 s, then are shed with"
    " RESOURCE_EXHAUSTED before their body is read (default 8 MiB, 0: off)",
    "max_pending_rpcs": "calls received but not yet taken up by the node; more are refused by"
    " gRPC at once, seen as CANCELLED (default 1024, 0: gRPC's own limit of 1000)",
    "routes": "'address=via' entries separated by ';' or spaces: calls this node makes to"
    " address dial via instead (e.g. a link proxy for this node's own link)",
    "clock_offset_s": "seconds added to this node's wall clock, for tests of clock skew"
    " (default 0; within ±86400)",
    "tls_ca": "PEM file of the CA that verifies peers' TLS certificates; every call this node"
    " makes is then TLS (default: plaintext)",
    "tls_cert": "PEM file of this node's TLS certificate; the node then serves TLS only"
    " (needs --tls-key and --tls-ca)",
    "tls_key": "PEM file of the key of --tls-cert",
    "witnesses": "origin: witnesses (peer names or host:port, ';'-separated) asked to cosign"
    " each new head; their cosignatures ride on the delivered head (default: none)",
    "witness_policy": "holder: a tlog-policy file; a delivered head needs its quorum of"
    " witness cosignatures (docs/custody.md; default: no quorum required)",
    "witness_logs": "witness: '*' (every origin's heads) or origins' node ids whose heads this"
    " node cosigns (Witness.AddCheckpoint; default: not a witness)",
    "witness_fault": "what this node cosigns as a witness, for tests: none (honest), collude"
    " (cosigns every head its origin signed)",
    "custodians": "peer names (';'- or ','-separated) this node asks to take custody of its"
    " folds at commit, in order of preference (see docs/custody.md)",
    "custody_k": "custodians asked per compaction, distinct operators first (default 0: none)",
    "custody_hedge": "holder: true demands a value's folds from the origin and the first"
    " custodian at once, taking the first correct answer (default false: origin first)",
    "relay_custody_k": "relay: before forwarding, take custody of each fold carrying fewer"
    " than this many custody statements and add this node's (default 0: unchanged)",
    "operator": "this node's operator label, one failure domain for custody placement"
    " (default: the node name)",
}


def node_flags() -> dict[str, tuple[str, str]]:
    """NodeConfig field -> (flag, environment variable), for every node setting."""
    from nodes.config import ENV_VARS

    return {key: ("--" + key.replace("_", "-"), var) for key, var in ENV_VARS.items()}


def _add_node_parser(sub: _Sub) -> None:
    node = sub.add_parser(
        "node",
        help="run one provnet node (flags fall back to PROVNET_* environment variables)",
        description=(
            "Run one node in the foreground until SIGTERM/SIGINT. Keys are created in the "
            "data dir on first start. Every flag falls back to its PROVNET_* variable."
        ),
    )
    from nodes.faults import FaultMode

    modes = ", ".join(FaultMode)
    for key, (flag, var) in node_flags().items():
        text = _FLAG_HELP.get(key, key).format(fault_modes=modes)
        node.add_argument(flag, dest=key, default=None, help=f"{text} (${var})")
    node.set_defaults(handler=_node_run)
    node_sub = node.add_subparsers(dest="node_command", metavar="SUBCOMMAND")
    health = node_sub.add_parser(
        "health",
        help="exit 0 if a node's gRPC health service answers SERVING (a healthcheck)",
    )
    health.add_argument(
        "--addr",
        default=None,
        help="host:port of the node (default: $PROVNET_LISTEN, else 127.0.0.1:50051)",
    )
    health.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for the answer (default 2)"
    )
    health.add_argument(
        "--tls-ca",
        default=None,
        help="ask over TLS, verifying the node's certificate against this CA for the host of"
        " $PROVNET_ADVERTISE when set (default: $PROVNET_TLS_CA; none: plaintext)",
    )
    health.set_defaults(handler=_node_health)
    info = node_sub.add_parser(
        "info",
        help="print a node's id and its witness vkey (the line a witness policy lists)",
        description=(
            "Read the node key in the data dir (never creating one) and print the node id"
            " and its witness vkey, as a tlog-policy 'witness' line names it."
        ),
    )
    info.add_argument(
        "--data-dir",
        dest="info_data_dir",
        default=None,
        help="the node's data dir (default: $PROVNET_DATA_DIR)",
    )
    info.set_defaults(handler=_node_info)


def _node_run(args: argparse.Namespace) -> int:
    from nodes.config import ConfigError, NodeConfig

    try:
        config = NodeConfig.from_env_and_args(args)
    except ConfigError as exc:
        return _error(str(exc))
    from contracts.errors import KeyFileError
    from nodes import eventloop
    from nodes.app import PortBusy, run_node
    from nodes.errors import StoreError

    try:
        eventloop.run(run_node(config))
    except ConfigError as exc:  # a TLS file that is wrong (nodes.tls.TlsError)
        return _error(str(exc))
    except PortBusy as exc:
        return _error(f"--listen ($PROVNET_LISTEN): {exc}")
    except StoreError as exc:
        return _error(f"--data-dir ($PROVNET_DATA_DIR) {config.data_dir}: {exc}")
    except KeyFileError as exc:
        if config.operator_key_file is not None and str(config.operator_key_file) in str(exc):
            return _error(f"--operator-key-file ($PROVNET_OPERATOR_KEY_FILE): {exc}")
        return _error(f"--data-dir ($PROVNET_DATA_DIR) {config.data_dir}: {exc}")
    except RuntimeError as exc:
        if "failed to bind" not in str(exc).lower():
            raise
        return _error(f"--listen ($PROVNET_LISTEN) {config.listen}: {exc}")
    return 0


def _node_info(args: argparse.Namespace) -> int:
    from contracts.errors import KeyFileError
    from contracts.identity import load_identity
    from contracts.witness import witness_vkey
    from nodes.app import KEY_FILENAME

    data_dir = (
        args.info_data_dir or getattr(args, "data_dir", None) or os.environ.get("PROVNET_DATA_DIR")
    )
    if not data_dir:
        return _error("--data-dir ($PROVNET_DATA_DIR): required")
    path = Path(data_dir) / KEY_FILENAME
    if not path.is_file():
        return _error(f"--data-dir ($PROVNET_DATA_DIR) {data_dir}: no node key {path.name} there")
    try:
        identity = load_identity(path)
    except KeyFileError as exc:
        return _error(f"--data-dir ($PROVNET_DATA_DIR) {data_dir}: {exc}")
    print(f"node_id {identity.node_id}")
    print(f"witness_vkey {witness_vkey(identity.node_id).to_string()}")
    return 0


def _node_health(args: argparse.Namespace) -> int:
    from nodes.cluster import HealthState, probe_health

    address = args.addr or os.environ.get("PROVNET_LISTEN") or "127.0.0.1:50051"
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        return _error(f"--addr {address!r}: expected host:port")
    # A node listening on all interfaces is asked on loopback.
    if host in ("0.0.0.0", "[::]", ""):
        address = f"127.0.0.1:{port}"
    tls_ca = args.tls_ca or os.environ.get("PROVNET_TLS_CA") or None
    ca_pem = None
    if tls_ca is not None:
        try:
            ca_pem = Path(tls_ca).read_bytes()
        except OSError as exc:
            return _error(f"--tls-ca ($PROVNET_TLS_CA) {tls_ca}: cannot read ({exc.strerror})")
    # The certificate names the host callers dial (the advertised one), not loopback.
    advertised = os.environ.get("PROVNET_ADVERTISE", "").rpartition(":")[0] or None
    state = probe_health(address, timeout=args.timeout, tls_ca=ca_pem, server_name=advertised)
    print(f"{address} {state}")
    return 0 if state is HealthState.SERVING else 1


# --------------------------------------------------------------------------- cluster


def _add_cluster_parser(sub: _Sub) -> None:
    from nodes.cluster import DEFAULT_GRACE_S, DEFAULT_NAMES, DEFAULT_START_TIMEOUT_S

    cluster = sub.add_parser(
        "cluster",
        help="start, inspect, stop and smoke-test a local cluster under $PROVNET_HOME",
        description=(
            "A local cluster: N node processes on 127.0.0.1, each with its own data dir, "
            "port and log under $PROVNET_HOME (default ./.provnet)."
        ),
    )
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--home",
            default=None,
            help="cluster root (default: $PROVNET_HOME, else ./.provnet)",
        )

    up = csub.add_parser("up", help="start the nodes, health-gated")
    common(up)
    up.add_argument(
        "--nodes",
        type=int,
        default=None,
        help=f"number of nodes, named a, b, c, … (default {len(DEFAULT_NAMES)})",
    )
    up.add_argument(
        "--names",
        default=None,
        help="comma-separated node names instead of --nodes (e.g. a,b,c)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT_S,
        help=f"seconds each node has to answer SERVING (default {DEFAULT_START_TIMEOUT_S:g})",
    )
    from nodes.faults import FaultMode

    up.add_argument(
        "--fault",
        dest="faults",
        action="append",
        default=[],
        metavar="NODE=MODE",
        help="start node NODE with fault MODE (as 'provnet node --fault'; one of"
        f" {', '.join(m.value for m in FaultMode if m is not FaultMode.SLOW)});"
        " repeatable, or comma-separated: b=drop,c=tamper",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="TLS between the nodes: a cluster CA under $PROVNET_HOME/tls (made once) and a"
        " certificate per node; status, smoke and 'experiment boundary --cluster' use it",
    )
    up.set_defaults(handler=_cluster_up)

    status = csub.add_parser("status", help="health, pid, port and counters of each node")
    common(status)
    status.add_argument(
        "--json", action="store_true", help="print one JSON object per node, every counter"
    )
    status.add_argument(
        "--verbose", action="store_true", help="every counter of each node, not only the main ones"
    )
    status.set_defaults(handler=_cluster_status)

    down = csub.add_parser("down", help="stop the nodes: SIGTERM, then SIGKILL after a grace")
    common(down)
    down.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_S:g})",
    )
    down.set_defaults(handler=_cluster_down)

    smoke = csub.add_parser(
        "smoke",
        help="run the cross-agent smoke test on the running cluster (one JSON line per step)",
    )
    common(smoke)
    smoke.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT_S,
        help="seconds an extra fault node has to answer SERVING",
    )
    smoke.add_argument(
        "--nodes",
        dest="members",
        default=None,
        metavar="NAME=HOST:PORT;…",
        help="run against these nodes (A;B;C, e.g. Compose services) instead of the "
        "local cluster recorded under --home",
    )
    smoke.add_argument(
        "--extra-host",
        default=None,
        help="host name under which the nodes reach the smoke's own extra fault nodes "
        "(default 127.0.0.1; in Compose, the runner's service name)",
    )
    smoke.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr, only the JSON steps"
    )
    from nodes.client_tls import add_tls_flags

    add_tls_flags(smoke, serving=True)
    smoke.set_defaults(handler=_cluster_smoke)


def _names(args: argparse.Namespace) -> list[str]:
    names = _requested_names(args)
    if len(set(names)) != len(names):
        raise ValueError(f"node names must be distinct, got {', '.join(names)}")
    return names


def _requested_names(args: argparse.Namespace) -> list[str]:
    from nodes.cluster import DEFAULT_NAMES

    if args.names is not None and args.nodes is not None:
        raise ValueError("give either --nodes or --names, not both")
    if args.names is not None:
        names = [n.strip() for n in args.names.split(",") if n.strip()]
        if not names:
            raise ValueError(f"--names {args.names!r}: expected comma-separated node names")
        return names
    if args.nodes is None:
        return list(DEFAULT_NAMES)
    if not 1 <= args.nodes <= 26:
        raise ValueError(f"--nodes {args.nodes}: expected 1..26")
    return [chr(ord("a") + i) for i in range(args.nodes)]


def _progress(message: str) -> None:
    print(f"provnet: {message}", file=sys.stderr, flush=True)


def _faults(entries: list[str]) -> dict[str, str]:
    """``--fault NODE=MODE`` entries (repeated or comma-separated) as node → mode."""
    faults: dict[str, str] = {}
    for entry in (e.strip() for text in entries for e in text.split(",")):
        if not entry:
            continue
        name, sep, mode = entry.partition("=")
        if not sep or not name or not mode:
            raise ValueError(f"--fault {entry!r}: expected NODE=MODE, e.g. c=tamper")
        if name in faults:
            raise ValueError(f"--fault: node {name!r} given twice")
        faults[name.strip()] = mode.strip().lower()
    return faults


def _cluster_up(args: argparse.Namespace) -> int:
    from nodes.cluster import ClusterError, check_faults, cluster_up
    from nodes.home import Home, check_node_name

    try:
        names = [check_node_name(n) for n in _names(args)]
        faults = check_faults(names, _faults(args.faults))
        home = Home.resolve(args.home)
        home.ensure()  # a bad home is bad input (HomeError, a ValueError): exit 2
        state = cluster_up(
            home, names, timeout=args.timeout, progress=_progress, faults=faults, tls=args.tls
        )
    except ValueError as exc:
        return _error(str(exc))
    except ClusterError as exc:
        print(f"provnet: error: cluster up failed: {exc}", file=sys.stderr)
        return 1
    for record in state.nodes:
        fault = f"\tfault {record.fault}" if record.fault else ""
        print(f"{record.name}\t{record.address}\tpid {record.pid}\t{record.data_dir}{fault}")
    n = len(state.nodes)
    tls = f", TLS (CA {state.tls_ca})" if state.tls_ca is not None else ""
    print(f"cluster of {n} node{'' if n == 1 else 's'} up under {home.root}{tls}")
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    from nodes.cluster import ClusterError, load_state, node_status
    from nodes.home import Home

    home = Home.resolve(args.home)
    try:
        state = load_state(home)
    except ClusterError as exc:
        return _error(f"{exc}; {_RECOVER}")
    if state is None:
        print(f"no cluster recorded under {home.root}")
        return 1
    try:
        ca_pem = state.ca_pem()
    except ClusterError as exc:
        return _error(str(exc))
    rows = [node_status(r, tls_ca=ca_pem) for r in state.nodes]
    healthy = all(row["health"] == "SERVING" for row in rows)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        for row in rows:
            print(_status_line(row, verbose=args.verbose))
    return 0 if healthy else 1


#: The counters ``cluster status`` shows without --verbose: what the node served,
#: refused and recorded (evidence_* are added when not zero).
_STATUS_COUNTERS = ("serves", "refusals", "provenance_pending", "provenance_unresolvable")


def _status_line(row: dict[str, Any], *, verbose: bool = False) -> str:
    counters = row.get("counters")
    if not isinstance(counters, dict):
        shown = "counters unavailable"
    elif verbose:
        shown = " ".join(f"{k}={v}" for k, v in sorted(counters.items()))
    else:
        picked = {k: counters[k] for k in _STATUS_COUNTERS if k in counters}
        picked.update(
            {k: v for k, v in sorted(counters.items()) if k.startswith("evidence_") and v}
        )
        shown = " ".join(f"{k}={v}" for k, v in picked.items())
    alive = "alive" if row["alive"] else "dead"
    fault = f"  fault {row['fault']}" if row.get("fault") else ""
    return (
        f"{row['name']:<8} {row['health']:<12} pid {row['pid']} ({alive})  "
        f"port {row['port']}{fault}  {shown}"
    ).rstrip()


def _cluster_down(args: argparse.Namespace) -> int:
    from nodes.cluster import ClusterError, cluster_down, load_state, recover_down
    from nodes.home import Home

    home = Home.resolve(args.home)
    try:
        load_state(home)
    except ClusterError as exc:
        # unreadable state: stop the nodes found by their data dirs, set the file aside
        aside, found = recover_down(home, grace=args.grace)
        print(f"provnet: warning: {exc}", file=sys.stderr)
        for record, outcome in found:
            print(f"{record.name}\tpid {record.pid}\t{outcome}")
        print(
            f"stopped {len(found)} node process(es) found under {home.nodes_dir};"
            f" the unreadable state was moved to {aside}; 'provnet cluster up' starts afresh"
        )
        return 0
    try:
        outcomes = cluster_down(home, grace=args.grace)
    except ClusterError as exc:
        print(f"provnet: error: cluster down failed: {exc}", file=sys.stderr)
        return 1
    if not outcomes:
        print(f"no cluster recorded under {home.root}; nothing to stop")
        return 0
    for record, outcome in outcomes:
        print(f"{record.name}\tpid {record.pid}\t{outcome}")
    return 0


def _cluster_smoke(args: argparse.Namespace) -> int:
    from nodes.client_tls import ClientTls
    from nodes.cluster import LOOPBACK, ClusterError, load_state
    from nodes.config import ConfigError
    from nodes.home import Home
    from nodes.refusal import ControlRefused
    from nodes.smoke import Member, run_smoke

    home = Home.resolve(args.home)
    progress = None if args.quiet else _progress
    try:
        members = None if args.members is None else Member.parse_list(args.members)
        state = load_state(home) if members is None else None
        # a local cluster started with --tls: its own CA, unless one is given
        tls = ClientTls.from_args(
            args, default_ca=None if state is None else state.tls_ca, serving=True
        )
    except (ValueError, ClusterError, ConfigError) as exc:
        return _error(str(exc))
    try:
        results = run_smoke(
            home,
            members=members,
            extra_host=args.extra_host or LOOPBACK,
            start_timeout=args.timeout,
            progress=progress,
            out=sys.stdout,
            tls=tls,
        )
    except ClusterError as exc:
        print(f"provnet: error: cluster smoke failed: {exc}", file=sys.stderr)
        return 1
    except (ControlRefused, ConfigError) as exc:  # ConfigError: a TLS setting (TlsError)
        return _error(str(exc))
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"provnet: error: smoke steps deviating: {', '.join(failed)}", file=sys.stderr)
        return 1
    if progress is not None:
        progress(f"smoke: all {len(results)} steps ok")
    return 0


def register(sub: _Sub) -> None:
    """Add ``node`` and ``cluster`` to the ``provnet`` command."""
    _add_node_parser(sub)
    _add_cluster_parser(sub)
