"""A local cluster: N ``provnet node`` processes on loopback under ``$PROVNET_HOME``.

``provnet cluster up`` starts each node as its own process (its own session,
so it outlives the command that started it) with its own data dir, log file
and port on 127.0.0.1, and waits until every node's standard gRPC health
service answers SERVING; a node that exits or stays unhealthy past the
timeout fails the start with the tail of its log, and the nodes already
started are stopped again. The state (names, pids, addresses, paths) is kept
in ``$PROVNET_HOME/cluster.json``; ``status`` and ``down`` read it, and
``down`` stops each node with SIGTERM (the node turns its health to
NOT_SERVING and stops its server with a grace) and SIGKILL after a grace.

Ports are chosen free by binding port 0 on 127.0.0.1 without SO_REUSEADDR or
SO_REUSEPORT, and every node server disables SO_REUSEPORT, so two nodes can
never silently share a port: a lost race makes the second node fail to bind,
and ``up`` then retries with fresh ports.

Before signalling a pid read from the state file, the launcher checks that
the process is still the node it started (its command line names the node's
data dir), so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodes.home import Home, HomeError, check_node_name

if TYPE_CHECKING:
    from nodes.auth import ControlCredentials

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_NAMES",
    "DEFAULT_START_TIMEOUT_S",
    "LOOPBACK",
    "ClusterError",
    "ClusterState",
    "HealthState",
    "NodeRecord",
    "NodeSpec",
    "StopOutcome",
    "check_faults",
    "child_env",
    "cluster_down",
    "cluster_up",
    "find_node_processes",
    "free_ports",
    "is_alive",
    "load_state",
    "log_tail",
    "node_argv",
    "node_status",
    "peer_list",
    "probe_health",
    "provnet_argv",
    "recover_down",
    "running_nodes",
    "start_node",
    "start_nodes",
    "stop_all",
    "stop_node",
]

DEFAULT_NAMES = ("a", "b", "c")
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_GRACE_S = 5.0
LOOPBACK = "127.0.0.1"
STATE_VERSION = 1
_POLL_S = 0.1
_START_ATTEMPTS = 3
#: Node configuration variables stripped from the environment a cluster
#: passes to its nodes, so that a stray ``PROVNET_FAULT`` in the caller's
#: shell cannot silently turn every cluster node faulty.
_NODE_ENV_PREFIX = "PROVNET_"
_KEPT_ENV = frozenset({"PROVNET_HOME"})


class ClusterError(Exception):
    """A cluster operation could not be carried out; the message says which node and why."""


class HealthState(StrEnum):
    """What a node's ``grpc.health.v1.Health/Check`` answered."""

    SERVING = "SERVING"
    NOT_SERVING = "NOT_SERVING"
    UNKNOWN = "UNKNOWN"
    UNREACHABLE = "UNREACHABLE"


class StopOutcome(StrEnum):
    """How a node process ended when asked to stop."""

    TERMINATED = "terminated"  # exited within the grace after SIGTERM
    KILLED = "killed"  # needed SIGKILL
    GONE = "gone"  # was not running (or the pid is no longer the node's)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """How to start one node process."""

    name: str
    port: int
    data_dir: Path
    log_file: Path
    peers: tuple[str, ...] = ()
    fault: str | None = None
    #: Where the node writes evidence files (default: under its data dir).
    evidence_dir: Path | None = None
    #: Interface to listen on; ``0.0.0.0`` when other hosts must reach the node.
    host: str = LOOPBACK
    #: Address put in the node's obligations, when it differs from host:port.
    advertise: str | None = None
    #: Operator public keys the node accepts control calls from (:mod:`nodes.auth`).
    operator_keys: tuple[str, ...] = ()
    #: What the node signs as an attester (``--attest-fault``; None: honest).
    attest_fault: str | None = None
    #: Witness confirmations the node's suspicions need before it records them
    #: (``--min-witnesses``; None: the node's default).
    min_witnesses: int | None = None
    #: TLS (:mod:`nodes.tls`): the CA the node verifies peers with, and its own
    #: certificate and key (``--tls-ca``/``--tls-cert``/``--tls-key``); None: plaintext.
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Custody (docs/custody.md): peers this node asks at commit, how many, and its
    #: operator label (``--custodians``, ``--custody-k``, ``--operator``).
    custodians: tuple[str, ...] = ()
    custody_k: int = 0
    operator: str | None = None

    def __post_init__(self) -> None:
        check_node_name(self.name)
        if not 0 < self.port < 65536:
            raise ValueError(f"node {self.name}: port {self.port} is outside 1..65535")
        if self.min_witnesses is not None and self.min_witnesses < 1:
            raise ValueError(
                f"node {self.name}: min_witnesses must be at least 1, got {self.min_witnesses}"
            )

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def address(self) -> str:
        """Where peers reach the node: the advertised address, else the listen address."""
        return self.advertise or self.listen

    @property
    def local_address(self) -> str:
        """Where this machine reaches the node (loopback when it listens on all interfaces)."""
        host = LOOPBACK if self.host in ("0.0.0.0", "") else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A started node, as written to ``cluster.json``."""

    name: str
    pid: int
    address: str
    data_dir: Path
    log_file: Path
    fault: str | None = None
    started_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "address": self.address,
            "data_dir": str(self.data_dir),
            "log_file": str(self.log_file),
            "fault": self.fault,
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str) -> NodeRecord:
        try:
            fault = raw.get("fault")
            return cls(
                name=check_node_name(str(raw["name"])),
                pid=int(raw["pid"]),
                address=str(raw["address"]),
                data_dir=Path(str(raw["data_dir"])),
                log_file=Path(str(raw["log_file"])),
                fault=None if fault is None else str(fault),
                started_at=float(raw.get("started_at", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterError(f"{where}: node entry {dict(raw)!r} is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ClusterState:
    """The content of ``$PROVNET_HOME/cluster.json``."""

    nodes: tuple[NodeRecord, ...]
    created_at: float = field(default_factory=time.time)
    #: The CA the nodes' TLS certificates chain to (``cluster up --tls``); None: plaintext.
    tls_ca: Path | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "created_at": self.created_at,
            "nodes": [r.to_json() for r in self.nodes],
        }
        if self.tls_ca is not None:
            out["tls_ca"] = str(self.tls_ca)
        return out

    def ca_pem(self) -> bytes | None:
        """The TLS CA's certificate (None: a plaintext cluster); raises ClusterError."""
        if self.tls_ca is None:
            return None
        try:
            return self.tls_ca.read_bytes()
        except OSError as exc:
            raise ClusterError(
                f"the cluster's TLS CA {self.tls_ca}: cannot read ({exc.strerror or exc})"
            ) from None

    def save(self, path: Path) -> None:
        """Write atomically (temp file + rename), so a reader never sees half a file."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def load_state(home: Home) -> ClusterState | None:
    """The recorded cluster, or ``None`` when no cluster state file exists."""
    path = home.state_file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read the cluster state: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(
            f"{path}: line {exc.lineno}: not JSON ({exc.msg}); expected a cluster state "
            "written by 'provnet cluster up'"
        ) from exc
    if not isinstance(raw, dict) or raw.get("version") != STATE_VERSION:
        raise ClusterError(f'{path}: expected a JSON object with "version": {STATE_VERSION}')
    nodes = raw.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise ClusterError(f"{path}: key 'nodes': expected a list of objects")
    tls_ca = raw.get("tls_ca")
    if tls_ca is not None and not isinstance(tls_ca, str):
        raise ClusterError(f"{path}: key 'tls_ca': expected a path, got {tls_ca!r}")
    return ClusterState(
        nodes=tuple(NodeRecord.from_json(n, str(path)) for n in nodes),
        created_at=float(raw.get("created_at", 0.0)),
        tls_ca=None if tls_ca is None else Path(tls_ca),
    )


# --------------------------------------------------------------------------- ports


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports that were free on ``host`` a moment ago.

    All sockets stay bound until every port is chosen, so the list never
    repeats a port; neither SO_REUSEADDR nor SO_REUSEPORT is set, so a port
    still held by another process is never handed out.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


# --------------------------------------------------------------------------- processes


def provnet_argv(*args: str) -> list[str]:
    """``provnet ARGS`` as a child process of this one, running this process's code.

    ``-P`` keeps the working directory off ``sys.path`` and :func:`child_env`
    puts this code's package root first on ``PYTHONPATH``, so a child never
    picks up another checkout it happens to be started from.
    """
    return [sys.executable, "-P", "-m", "harness", *args]


def node_argv(spec: NodeSpec) -> list[str]:
    """The command line that starts ``spec`` (the same ``provnet node`` as Compose runs)."""
    argv = provnet_argv(
        "node",
        "--name",
        spec.name,
        "--listen",
        spec.listen,
        "--data-dir",
        str(spec.data_dir),
        "--log-format",
        "json",
    )
    if spec.peers:
        argv += ["--peers", ";".join(spec.peers)]
    if spec.advertise is not None:
        argv += ["--advertise", spec.advertise]
    if spec.evidence_dir is not None:
        argv += ["--evidence-dir", str(spec.evidence_dir)]
    if spec.fault:
        argv += ["--fault", spec.fault]
    if spec.operator_keys:
        argv += ["--operator-keys", ";".join(spec.operator_keys)]
    if spec.attest_fault:
        argv += ["--attest-fault", spec.attest_fault]
    if spec.min_witnesses is not None:
        argv += ["--min-witnesses", str(spec.min_witnesses)]
    for flag, path in (
        ("--tls-ca", spec.tls_ca),
        ("--tls-cert", spec.tls_cert),
        ("--tls-key", spec.tls_key),
    ):
        if path is not None:
            argv += [flag, str(path)]
    # custody hook (docs/custody.md)
    if spec.custodians:
        argv += ["--custodians", ",".join(spec.custodians), "--custody-k", str(spec.custody_k)]
    if spec.operator:
        argv += ["--operator", spec.operator]
    return argv


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for :func:`provnet_argv` children (``base`` defaults to ours).

    Node settings (``PROVNET_*`` except ``PROVNET_HOME``) are dropped: a
    cluster's nodes are configured by their flags alone.
    """
    environ = dict(os.environ if base is None else base)
    env = {k: v for k, v in environ.items() if not k.startswith(_NODE_ENV_PREFIX) or k in _KEPT_ENV}
    # The launcher's own package root first, so a node imports exactly the code
    # that started it, wherever the command was run from.
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # gRPC's C core writes plain-text lines to stderr; the node log is JSON lines only.
    env.setdefault("GRPC_VERBOSITY", "NONE")
    return env


def _spawn(spec: NodeSpec) -> subprocess.Popen[bytes]:
    spec.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    spec.log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with spec.log_file.open("ab") as log:
        # A new session: the node outlives 'provnet cluster up' and a Ctrl-C
        # in the starting terminal does not reach it.
        return subprocess.Popen(
            node_argv(spec),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
            close_fds=True,
        )


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def probe_health(
    address: str,
    timeout: float = 1.0,
    *,
    tls_ca: bytes | None = None,
    server_name: str | None = None,
) -> HealthState:
    """Ask ``address``'s standard health service for the overall status ('').

    ``tls_ca``: over TLS, verifying the node's certificate against that CA and
    for ``server_name`` (default: the host dialed), e.g. its advertised name
    when it is asked on loopback.
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    options: list[tuple[str, Any]] = [("grpc.enable_http_proxy", 0)]
    if tls_ca is None:
        channel = grpc.insecure_channel(address, options=options)
    else:
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        credentials = grpc.ssl_channel_credentials(root_certificates=tls_ca)
        channel = grpc.secure_channel(address, credentials, options=options)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return HealthState.UNREACHABLE
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    try:
        return HealthState(status)
    except ValueError:
        return HealthState.UNKNOWN


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None if unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces.
    return stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else None


def is_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _proc_state(pid) != "Z"


def _is_node_process(record: NodeRecord) -> bool:
    """Whether ``record.pid`` is still the node we started (not a recycled pid)."""
    if not is_alive(record.pid):
        return False
    try:
        cmdline = Path(f"/proc/{record.pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc to look at: trust the live pid
    return str(record.data_dir).encode() in cmdline.split(b"\0")


def _wait_exit(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    if proc is not None:
        try:
            proc.wait(timeout=max(0.0, timeout))
            return True
        except subprocess.TimeoutExpired:
            return False
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def stop_node(
    record: NodeRecord,
    *,
    grace: float = DEFAULT_GRACE_S,
    proc: subprocess.Popen[bytes] | None = None,
) -> StopOutcome:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; pass ``proc`` to reap a child."""
    if proc is not None and proc.poll() is not None:
        return StopOutcome.GONE
    if proc is None and not _is_node_process(record):
        return StopOutcome.GONE
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    if _wait_exit(record.pid, proc, grace):
        return StopOutcome.TERMINATED
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    if not _wait_exit(record.pid, proc, 5.0):
        raise ClusterError(f"node {record.name}: pid {record.pid} survived SIGKILL for 5 s")
    return StopOutcome.KILLED


def _server_name(spec: NodeSpec) -> str | None:
    """The host a TLS node's certificate names when it is asked on loopback: the advertised."""
    if spec.tls_ca is None or spec.advertise is None:
        return None
    return spec.advertise.rpartition(":")[0].strip("[]") or None


def _wait_serving(
    spec: NodeSpec, proc: subprocess.Popen[bytes], timeout: float
) -> tuple[bool, str]:
    """Poll health until SERVING; (False, why) if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    last = HealthState.UNREACHABLE
    ca_pem = None if spec.tls_ca is None else spec.tls_ca.read_bytes()
    while True:
        code = proc.poll()
        if code is not None:
            return False, f"exited with code {code} before serving"
        last = probe_health(
            spec.local_address,
            timeout=min(1.0, max(0.1, deadline - time.monotonic())),
            tls_ca=ca_pem,
            server_name=_server_name(spec),
        )
        if last is HealthState.SERVING:
            return True, ""
        if time.monotonic() >= deadline:
            return False, f"health still {last} after {timeout:g} s"
        time.sleep(_POLL_S)


def start_nodes(
    specs: Sequence[NodeSpec],
    *,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    on_spawned: Callable[[Sequence[NodeRecord]], None] | None = None,
) -> list[tuple[NodeRecord, subprocess.Popen[bytes]]]:
    """Start every spec at once and return when all answer SERVING.

    ``on_spawned`` sees the records as soon as every process exists (before
    the health gate), so they can be written down before anything can go
    wrong. If any node exits or is not SERVING within ``timeout``, every node
    of the call is stopped and ``ClusterError`` names the failed node(s) with
    the tail of each one's log.
    """
    started: list[tuple[NodeRecord, subprocess.Popen[bytes]]] = []
    try:
        for spec in specs:
            proc = _spawn(spec)
            record = NodeRecord(
                name=spec.name,
                pid=proc.pid,
                address=spec.address,
                data_dir=spec.data_dir,
                log_file=spec.log_file,
                fault=spec.fault,
                started_at=time.time(),
            )
            started.append((record, proc))
        if on_spawned is not None:
            on_spawned([record for record, _ in started])
        deadline = time.monotonic() + timeout
        failures = []
        for spec, (record, proc) in zip(specs, started, strict=True):
            ok, why = _wait_serving(spec, proc, max(0.0, deadline - time.monotonic()))
            if not ok:
                failures.append(
                    f"node {spec.name} at {spec.listen} (pid {record.pid}) {why}; "
                    f"last lines of {spec.log_file}:\n{log_tail(spec.log_file)}"
                )
    except BaseException:
        stop_all(started, grace=2.0)
        raise
    if failures:
        stop_all(started, grace=2.0)
        raise ClusterError("\n".join(failures))
    return started


def start_node(
    spec: NodeSpec, *, timeout: float = DEFAULT_START_TIMEOUT_S
) -> tuple[NodeRecord, subprocess.Popen[bytes]]:
    """Start ``spec`` and return once its health service answers SERVING (see start_nodes)."""
    return start_nodes([spec], timeout=timeout)[0]


# --------------------------------------------------------------------------- cluster


def peer_list(
    specs: Sequence[NodeSpec], name: str, node_ids: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """``name=address`` entries for every node in ``specs`` except ``name``; with
    ``node_ids`` (name → node id), ``name=address,node_id``: pinned peers, whose
    control calls (a delivery as themselves) a node serves from the operator's
    share of its caps, not the share every other key competes for."""
    ids = node_ids or {}
    return tuple(
        f"{s.name}={s.address}" + (f",{ids[s.name]}" if s.name in ids else "")
        for s in specs
        if s.name != name
    )


def operator_key(home: Home) -> ControlCredentials:
    """The cluster's operator key (``<home>/operator.key``), created on first use.

    Every node the cluster starts accepts control calls signed with it; the
    cluster tools, smoke test and boundary runner sign with it (through
    :func:`nodes.auth.control_channel`).
    """
    from nodes.auth import OPERATOR_KEY_FILENAME, create_operator_key

    home.ensure()
    return create_operator_key(home.root / OPERATOR_KEY_FILENAME)


def check_faults(names: Sequence[str], faults: Mapping[str, str]) -> dict[str, str]:
    """``--fault NODE=MODE`` choices checked against the node names; raises ``ValueError``."""
    from nodes.faults import FaultMode

    checked: dict[str, str] = {}
    for name, mode in faults.items():
        if name not in names:
            raise ValueError(
                f"--fault {name}={mode}: no node {name!r} in this cluster ({', '.join(names)})"
            )
        try:
            fault = FaultMode(mode)
        except ValueError:
            choices = ", ".join(m.value for m in FaultMode)
            raise ValueError(f"--fault {name}={mode}: expected one of {choices}") from None
        if fault is FaultMode.SLOW:
            raise ValueError(
                f"--fault {name}=slow: 'slow' needs a delay; start that node by hand with"
                " --fault slow --fault-delay-ms MS (docs/cluster.md)"
            )
        if fault is not FaultMode.NONE:
            checked[name] = fault.value
    return checked


def _specs(
    home: Home,
    names: Sequence[str],
    faults: Mapping[str, str] | None = None,
    tls: tuple[Path, Mapping[str, tuple[Path, Path]]] | None = None,
) -> list[NodeSpec]:
    ports = free_ports(len(names))
    operator = operator_key(home).key_id
    chosen = faults or {}
    base = [
        NodeSpec(
            name=n,
            port=p,
            data_dir=home.data_dir(n),
            log_file=home.log_file(n),
            evidence_dir=home.evidence_dir / n,
            operator_keys=(operator,),
            fault=chosen.get(n),
            tls_ca=None if tls is None else tls[0],
            tls_cert=None if tls is None else tls[1][n][0],
            tls_key=None if tls is None else tls[1][n][1],
        )
        for n, p in zip(names, ports, strict=True)
    ]
    from nodes.app import load_or_create_identity  # the node's own key, as it will load it

    # Every node's key made now (each node loads its own at start), so peers are pinned.
    ids = {s.name: load_or_create_identity(s.data_dir).node_id for s in base}
    return [replace(s, peers=peer_list(base, s.name, ids)) for s in base]


def running_nodes(state: ClusterState) -> list[NodeRecord]:
    """The recorded nodes whose process is still the node that was started."""
    return [r for r in state.nodes if _is_node_process(r)]


def cluster_up(
    home: Home,
    names: Sequence[str] = DEFAULT_NAMES,
    *,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
    faults: Mapping[str, str] | None = None,
    tls: bool = False,
) -> ClusterState:
    """Start one node per name, health-gated, and record the cluster in ``home``.

    ``progress`` (optional) is called with one line of text per event.
    ``faults`` maps node names to the fault mode each is started with
    (``provnet node --fault``; the others are faithful). ``tls``: every node
    serves TLS with a certificate from the cluster CA under ``home/tls``
    (:func:`nodes.client_tls.cluster_certificates`) and dials its peers with
    TLS; the CA is recorded in ``cluster.json`` for the tools.
    Refuses if a recorded cluster still has live nodes.
    """
    say = progress or (lambda _msg: None)
    names = [check_node_name(n) for n in names]
    if len(set(names)) != len(names):
        raise ClusterError(f"node names must be distinct, got {', '.join(names)}")
    if not names:
        raise ClusterError("a cluster needs at least one node name")
    try:
        chosen = check_faults(names, faults or {})
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    try:
        home.ensure()
    except HomeError as exc:
        raise ClusterError(str(exc)) from None
    previous = load_state(home)
    if previous is not None:
        live = running_nodes(previous)
        if live:
            listing = ", ".join(f"{r.name} (pid {r.pid}, {r.address})" for r in live)
            raise ClusterError(
                f"a cluster is already running under {home.root}: {listing}; "
                "run 'provnet cluster down' first"
            )
        home.state_file.unlink(missing_ok=True)

    certificates = None
    if tls:
        from nodes.client_tls import CLUSTER_TLS_DIR, cluster_certificates

        certificates = cluster_certificates(home.root / CLUSTER_TLS_DIR, names)
        say(f"TLS: CA {certificates[0]}, a certificate per node")
    tls_ca = None if certificates is None else certificates[0]

    # Recorded before the health gate: if this command is killed while
    # waiting, 'provnet cluster down' still finds the processes.
    def write_state(records: Sequence[NodeRecord]) -> None:
        ClusterState(nodes=tuple(records), tls_ca=tls_ca).save(home.state_file)

    for attempt in range(1, _START_ATTEMPTS + 1):
        specs = _specs(home, names, chosen, certificates)
        for spec in specs:
            fault = f" (fault {spec.fault})" if spec.fault else ""
            say(f"starting node {spec.name} on {spec.address}{fault}")
        try:
            started = start_nodes(specs, timeout=timeout, on_spawned=write_state)
        except BaseException as exc:
            home.state_file.unlink(missing_ok=True)
            if not isinstance(exc, ClusterError):
                raise
            # Only a lost port race is worth another attempt with fresh ports.
            lost = any(m in str(exc).lower() for m in ("failed to bind", "cannot listen on"))
            if not lost or attempt == _START_ATTEMPTS:
                raise
            say(f"a port was taken meanwhile; retrying with fresh ports (attempt {attempt + 1})")
            continue
        for node, _ in started:
            say(f"node {node.name} SERVING (pid {node.pid})")
        state = ClusterState(nodes=tuple(r for r, _ in started), tls_ca=tls_ca)
        state.save(home.state_file)
        return state
    raise AssertionError("unreachable: the last attempt returns or raises")


def cluster_down(
    home: Home, *, grace: float = DEFAULT_GRACE_S
) -> list[tuple[NodeRecord, StopOutcome]]:
    """Stop every recorded node (SIGTERM, then SIGKILL after ``grace``); forget the state.

    Returns each node with how it ended; an empty list when no cluster is recorded.
    """
    state = load_state(home)
    if state is None:
        return []
    outcomes = [(r, stop_node(r, grace=grace)) for r in state.nodes]
    home.state_file.unlink(missing_ok=True)
    return outcomes


def find_node_processes(home: Home) -> list[NodeRecord]:
    """Node processes running on a data dir under ``home`` — found without the state file.

    Used when ``cluster.json`` is unreadable: a cluster node's command line
    names its data dir (``home/nodes/<name>``), which is what
    :func:`_is_node_process` checks before any pid is signalled.
    """
    nodes_dir = home.nodes_dir.absolute()
    found: list[NodeRecord] = []
    for entry in sorted(Path("/proc").glob("[0-9]*"), key=lambda p: int(p.name)):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for arg in argv:
            path = Path(os.fsdecode(arg)) if arg else None
            if path is not None and path.parent == nodes_dir:
                found.append(
                    NodeRecord(
                        name=path.name,
                        pid=int(entry.name),
                        address="unknown",
                        data_dir=path,
                        log_file=home.logs_dir / f"{path.name}.log",
                    )
                )
                break
    return found


def recover_down(
    home: Home, *, grace: float = DEFAULT_GRACE_S
) -> tuple[Path, list[tuple[NodeRecord, StopOutcome]]]:
    """``down`` when ``cluster.json`` is unreadable: stop what can be found, set the file aside.

    Returns where the unreadable state file was moved and each node stopped.
    """
    outcomes = [(r, stop_node(r, grace=grace)) for r in find_node_processes(home)]
    aside = home.state_file.with_name(f"{home.state_file.name}.unreadable-{int(time.time())}")
    with contextlib.suppress(FileNotFoundError):
        os.replace(home.state_file, aside)
    return aside, outcomes


def stop_all(
    started: Iterable[tuple[NodeRecord, subprocess.Popen[bytes]]], *, grace: float
) -> None:
    """Stop child nodes started with :func:`start_node`, newest first."""
    for record, proc in reversed(list(started)):
        stop_node(record, grace=grace, proc=proc)


def node_status(
    record: NodeRecord, *, timeout: float = 1.0, tls_ca: bytes | None = None
) -> dict[str, Any]:
    """One node's health, pid, port and counters, as printed by ``cluster status``
    (over TLS verified against ``tls_ca`` when given)."""
    alive = _is_node_process(record)
    health = (
        probe_health(record.address, timeout=timeout, tls_ca=tls_ca)
        if alive
        else HealthState.UNREACHABLE
    )
    counters = (
        _fetch_counters(record.address, timeout, tls_ca) if health is HealthState.SERVING else None
    )
    return {
        "name": record.name,
        "pid": record.pid,
        "alive": alive,
        "address": record.address,
        "port": int(record.address.rpartition(":")[2]),
        "health": str(health),
        "fault": record.fault,
        "counters": counters,
        "log_file": str(record.log_file),
    }


def _fetch_counters(
    address: str, timeout: float, tls_ca: bytes | None = None
) -> dict[str, int] | None:
    """The node's counters from ``provnet.v1.Node/Stats``; None if it does not answer."""
    import grpc

    from nodes import wire

    options = [("grpc.enable_http_proxy", 0)]
    channel = (
        grpc.insecure_channel(address, options=options)
        if tls_ca is None
        else grpc.secure_channel(
            address, grpc.ssl_channel_credentials(root_certificates=tls_ca), options=options
        )
    )
    with channel:
        try:
            return wire.read_counters(channel, timeout)
        except grpc.RpcError:
            return None
