"""Configuration of one node: :class:`NodeConfig`.

Every setting has a flag (``provnet node --<flag>``) and an environment
variable; resolution is flag, else variable, else default — the same for
local processes and Compose containers. :data:`ENV_VARS` maps each field to
its variable.

Peers are ``name=host:port[,pubkey]`` entries separated by ``;``, ``,`` is
reserved for the optional key (64 hex characters: the peer's node id) or by
whitespace, e.g. ``a=127.0.0.1:50051;b=127.0.0.1:50052,3f2a…``. An entry
with the node's own name is the node itself and is dropped, so one list of
all members configures every one of them (a Kubernetes ConfigMap for a
StatefulSet, a Swarm stack's shared environment): a node never asks itself
to witness.

A peer's host may be a DNS name (``node-1.provnet.default.svc.cluster.local:50051``,
a swarm service name), resolved when the node connects and again after a
connection fails; its pinned key, not its address, is its identity: a call
to a pinned address first checks the node answering there is that peer
(:attr:`NodeConfig.pins`, :mod:`nodes.transport`).

Routes are ``address=via`` entries separated the same way: a call this node
makes to ``address`` (a peer's, or an endpoint an origin signed) goes to
``via`` instead, e.g. a link proxy that stands for this node's own link to
that address. What nodes sign and advertise is unchanged; only the caller's
dial is rewritten.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

# The promise bounds are the origin's rules (contracts.rules), kept importable here.
from contracts.rules import MAX_DEADLINE_MS, MIN_DEADLINE_MS, promise_refusal
from nodes.attester import AttesterFault
from nodes.errors import PromiseOutOfRange
from nodes.faults import FaultMode
from nodes.home import NODE_NAME_RE, NODE_NAME_RULE

__all__ = [
    "DEFAULT_DEADLINE_MS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_SERVE_FOR_MS",
    "ENV_VARS",
    "MAX_CLOCK_OFFSET_S",
    "MAX_DEADLINE_MS",
    "MAX_WITNESSES",
    "MIN_DEADLINE_MS",
    "ConfigError",
    "LogFormat",
    "NodeConfig",
    "Peer",
    "PromiseSettingOutOfRange",
    "WitnessFault",
    "parse_peers",
    "parse_routes",
    "setting",
    "witness_log_entries",
]

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Witnesses an origin asks per head: each adds one cosignature line to the note
#: (a head holds at most 32 signature lines, contracts.head_note).
MAX_WITNESSES = 16
DEFAULT_SERVE_FOR_MS = 3_600_000
DEFAULT_DEADLINE_MS = 2_000
DEFAULT_MAX_CONCURRENT_RPCS = 128
DEFAULT_MAX_BULK_RPCS = 16
#: Long-lived streams (health ``Watch``, ``Serve.DemandStream``, reflection) open
#: at once, and per caller address: a cap of their own, so streams never take
#: the capacity demands, control calls and health checks need.
DEFAULT_MAX_STREAMS = 64
DEFAULT_MAX_STREAMS_PER_PEER = 16
#: Bytes of bulk request bodies in flight: two of the largest messages.
DEFAULT_MAX_BULK_BYTES = 2 * DEFAULT_MAX_MESSAGE_BYTES
#: Calls gRPC holds for the event loop. Large enough that a burst of 1 000
#: callers is taken up and refused by the node (RESOURCE_EXHAUSTED with a retry
#: appointment) rather than reset by gRPC (CANCELLED, no appointment): see
#: docs/security.md, "How a node sheds".
DEFAULT_MAX_PENDING_RPCS = 1024

#: Largest shift ``clock_offset_s`` may give a node's wall clock (a test setting).
MAX_CLOCK_OFFSET_S = 86_400.0

_HEX64_RE = re.compile(r"^[0-9a-f]{64}$")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the flag, variable and value."""


class PromiseSettingOutOfRange(ConfigError, PromiseOutOfRange):
    """A default promise (``deadline_ms``, ``serve_for_ms``) the node would refuse to
    sign on request: the :class:`nodes.errors.PromiseOutOfRange` (OUT_OF_RANGE) a
    ``CommitFold`` asking for it gets, and a :class:`ConfigError` to whoever reads
    settings. Raised however the configuration is made — flags, variables, a file, or
    a :class:`NodeConfig` built in-process — so no route signs what another refuses."""


def setting(key: str) -> str:
    """How every message names a node setting: its flag and its variable, ``--flag ($VAR)``."""
    return f"--{key.replace('_', '-')} (${ENV_VARS[key]})"


class WitnessFault(StrEnum):
    """How a node behaves as a witness (``--witness-fault``): honest, or an adversary
    for tests and experiments."""

    NONE = "none"
    #: cosigns every head its log signed, whatever it cosigned before (colludes
    #: with a split-viewing origin)
    COLLUDE = "collude"


class LogFormat(StrEnum):
    AUTO = "auto"  # console on a TTY, JSON lines otherwise
    JSON = "json"
    CONSOLE = "console"


@dataclass(frozen=True, slots=True)
class Peer:
    """A node this node knows by name; ``node_id`` (hex public key) when pinned."""

    name: str
    address: str
    node_id: str | None = None

    def render(self) -> str:
        return f"{self.name}={self.address}" + (f",{self.node_id}" if self.node_id else "")


#: NodeConfig field → environment variable.
ENV_VARS: Mapping[str, str] = {
    "name": "PROVNET_NAME",
    "listen": "PROVNET_LISTEN",
    "data_dir": "PROVNET_DATA_DIR",
    "peers": "PROVNET_PEERS",
    "fault": "PROVNET_FAULT",
    "fault_delay_ms": "PROVNET_FAULT_DELAY_MS",
    "log_format": "PROVNET_LOG_FORMAT",
    "log_level": "PROVNET_LOG_LEVEL",
    "max_message_bytes": "PROVNET_MAX_MESSAGE_BYTES",
    "shutdown_grace_s": "PROVNET_SHUTDOWN_GRACE_S",
    "advertise": "PROVNET_ADVERTISE",
    "serve_for_ms": "PROVNET_SERVE_FOR_MS",
    "deadline_ms": "PROVNET_DEADLINE_MS",
    "reasks": "PROVNET_REASKS",
    "evidence_dir": "PROVNET_EVIDENCE_DIR",
    "provenance_pending": "PROVNET_PROVENANCE_PENDING",
    "port_file": "PROVNET_PORT_FILE",
    "reap_interval_s": "PROVNET_REAP_INTERVAL_S",
    "operator_keys": "PROVNET_OPERATOR_KEYS",
    "operator_key_file": "PROVNET_OPERATOR_KEY_FILE",
    "min_witnesses": "PROVNET_MIN_WITNESSES",
    "max_concurrent_rpcs": "PROVNET_MAX_CONCURRENT_RPCS",
    "max_bulk_rpcs": "PROVNET_MAX_BULK_RPCS",
    "max_streams": "PROVNET_MAX_STREAMS",
    "max_streams_per_peer": "PROVNET_MAX_STREAMS_PER_PEER",
    "bulk_shed_lag_ms": "PROVNET_BULK_SHED_LAG_MS",
    "max_bulk_bytes": "PROVNET_MAX_BULK_BYTES",
    "max_pending_rpcs": "PROVNET_MAX_PENDING_RPCS",
    "attest_fault": "PROVNET_ATTEST_FAULT",
    "routes": "PROVNET_ROUTES",
    "clock_offset_s": "PROVNET_CLOCK_OFFSET_S",
    "tls_ca": "PROVNET_TLS_CA",
    "tls_cert": "PROVNET_TLS_CERT",
    "tls_key": "PROVNET_TLS_KEY",
    "witnesses": "PROVNET_WITNESSES",
    "witness_policy": "PROVNET_WITNESS_POLICY",
    "witness_logs": "PROVNET_WITNESS_LOGS",
    "witness_fault": "PROVNET_WITNESS_FAULT",
    "custodians": "PROVNET_CUSTODIANS",
    "custody_k": "PROVNET_CUSTODY_K",
    "custody_hedge": "PROVNET_CUSTODY_HEDGE",
    "relay_custody_k": "PROVNET_RELAY_CUSTODY_K",
    "operator": "PROVNET_OPERATOR",
}


#: Custodians one compaction may ask (a value carries at most this many statements
#: per origin: contracts.custody.MAX_CUSTODY_PER_ORIGIN).
MAX_CUSTODY_K = 8
_OPERATOR_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def witness_log_entries(text: str) -> list[str]:
    """The entries of ``--witness-logs``: separated by commas, semicolons or white space."""
    return text.replace(",", " ").replace(";", " ").split()


def _check_custody(config: NodeConfig) -> None:
    if not 0 <= config.custody_k <= MAX_CUSTODY_K:
        raise ConfigError(
            f"{setting('custody_k')}: must be 0..{MAX_CUSTODY_K}, got {config.custody_k}"
        )
    if not 0 <= config.relay_custody_k <= MAX_CUSTODY_K:
        raise ConfigError(
            f"{setting('relay_custody_k')}: must be 0..{MAX_CUSTODY_K},"
            f" got {config.relay_custody_k}"
        )
    if config.custody_k > len(config.custodians):
        raise ConfigError(
            f"{setting('custody_k')}: {config.custody_k} custodians asked, but"
            f" {setting('custodians')} names {len(config.custodians)}"
        )
    for name in config.custodians:
        if not NODE_NAME_RE.match(name) or name == config.name:
            raise ConfigError(f"{setting('custodians')}: {name!r:.40} is not another node's name")
    if config.operator and not _OPERATOR_RE.match(config.operator):
        raise ConfigError(
            f"{setting('operator')}: expected 1-64 of a-z 0-9 _ . - (starting with a letter"
            f" or digit), got {config.operator!r:.80}"
        )


def _check_address(key: str, value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{key}: expected host:port, got {value!r}")
    return value


def parse_peers(text: str, key: str = "peers") -> tuple[Peer, ...]:
    """Parse ``name=host:port[,pubkey]`` entries separated by ``;`` or whitespace."""
    peers: list[Peer] = []
    seen: set[str] = set()
    for entry in re.split(r"[;\s]+", text.strip()):
        if not entry:
            continue
        name, sep, rest = entry.partition("=")
        if not sep or not NODE_NAME_RE.match(name):
            raise ConfigError(f"{key}: expected name=host:port[,pubkey], got {entry!r}")
        address, _, node_id = rest.partition(",")
        _check_address(f"{key} entry {name!r}", address)
        if node_id and not _HEX64_RE.match(node_id):
            raise ConfigError(f"{key} entry {name!r}: pubkey must be 64 hex chars, got {node_id!r}")
        if name in seen:
            raise ConfigError(f"{key}: peer {name!r} listed twice")
        seen.add(name)
        peers.append(Peer(name=name, address=address, node_id=node_id or None))
    return tuple(peers)


def parse_routes(text: str, key: str = "routes") -> tuple[tuple[str, str], ...]:
    """Parse ``address=via`` entries (both host:port) separated by ``;`` or whitespace."""
    routes: dict[str, str] = {}
    for entry in re.split(r"[;\s]+", text.strip()):
        if not entry:
            continue
        address, sep, via = entry.partition("=")
        if not sep:
            raise ConfigError(f"{key}: expected address=via (both host:port), got {entry!r}")
        _check_address(f"{key} entry {entry!r}: address", address)
        _check_address(f"{key} entry {entry!r}: via", via)
        if address in routes:
            raise ConfigError(f"{key}: address {address!r} routed twice")
        routes[address] = via
    return tuple(routes.items())


def _as_int(key: str, value: object, minimum: int | None = 0) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {number}")
    return number


def _as_bool(key: str, value: object) -> bool:
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(f"{key}: expected true/false, got {value!r}")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything :func:`nodes.app.run_node` needs to run one node.

    ``listen`` may use port 0 (tests); the bound port is then written to
    ``port_file`` when given. ``advertise`` is the address put in obligations
    (defaults to ``listen``; set it when listening on 0.0.0.0 in a container).
    """

    name: str
    data_dir: Path
    listen: str = "127.0.0.1:50051"
    peers: tuple[Peer, ...] = ()
    fault: FaultMode = FaultMode.NONE
    fault_delay_ms: int = 0
    log_format: LogFormat = LogFormat.AUTO
    log_level: str = "info"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    shutdown_grace_s: float = 5.0
    advertise: str | None = None
    serve_for_ms: int = DEFAULT_SERVE_FOR_MS
    deadline_ms: int = DEFAULT_DEADLINE_MS
    reasks: int = 1
    evidence_dir: Path | None = None
    provenance_pending: bool = False
    port_file: Path | None = None
    reap_interval_s: float = 5.0
    #: Public keys (64 hex) whose signed control calls this node accepts
    #: (:mod:`nodes.auth`); none: every control call is refused.
    operator_keys: tuple[str, ...] = ()
    #: An operator key file whose public key is authorised too (read at start;
    #: the same variable the clients sign with, e.g. on a shared Compose volume).
    operator_key_file: Path | None = None
    #: Witness confirmations an ``unanswered`` suspicion needs to be stored.
    min_witnesses: int = 1
    #: Open calls other than the serve path and health checks (``Evidence.Challenge``,
    #: ``Node.*``, ``Attest.List``) in progress at once; beyond it such a call is
    #: shed at once with RESOURCE_EXHAUSTED. Counted by the node itself, not by
    #: gRPC: a cap over every call would let a stranger's calls take what
    #: demands and control calls need.
    max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS
    #: Long-lived streams open at once (all callers), and per caller address;
    #: beyond either the stream is refused with RESOURCE_EXHAUSTED.
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_peer: int = DEFAULT_MAX_STREAMS_PER_PEER
    #: Bulk calls (deliver, append, commit, rehydrate, forward, attest) at once;
    #: beyond it they are shed with RESOURCE_EXHAUSTED (0: no separate limit).
    max_bulk_rpcs: int = DEFAULT_MAX_BULK_RPCS
    #: While the event loop runs more than this many ms late and a bulk call is
    #: already in progress, further bulk calls are shed (0: off). Adaptive
    #: admission for overload: admitted bulk work never starves the serve path.
    bulk_shed_lag_ms: int = 0
    #: Bytes of bulk request bodies in flight (0: no byte budget). A bulk call
    #: reserves ``max_message_bytes`` when its headers arrive and holds its
    #: body's real size once read; when they do not fit it waits briefly, then
    #: is shed with RESOURCE_EXHAUSTED before its body is read. Bounds the
    #: memory and the queueing of large bodies (two 3 MiB deliveries at once
    #: with the defaults) while small bulk calls still run many at once.
    max_bulk_bytes: int = DEFAULT_MAX_BULK_BYTES
    #: Calls received but not yet taken up by the node's event loop (0: gRPC's
    #: own soft limit of 1 000). Beyond it gRPC refuses new calls at once,
    #: before any Python runs (the caller sees CANCELLED): the queue in front
    #: of admission, and so an admitted caller's wait, stays bounded.
    max_pending_rpcs: int = DEFAULT_MAX_PENDING_RPCS
    #: What this node signs as an attester (``Attest.Request``): ``none`` is
    #: the honest attester; the others are adversaries for tests
    #: (:class:`nodes.attester.AttesterFault`).
    attest_fault: AttesterFault = AttesterFault.NONE
    #: ``(address, via)`` pairs: a call this node makes to ``address`` dials
    #: ``via`` (see the module docstring); the last step of :meth:`peer`.
    routes: tuple[tuple[str, str], ...] = ()
    #: Seconds added to this node's wall clock, read once at start: a test
    #: setting that makes a node's clock run ahead (or behind, negative) of its
    #: peers' by a known skew. Every time the node signs or checks uses it.
    clock_offset_s: float = 0.0
    #: Custody (docs/custody.md): peer names this node, as an origin, asks to take
    #: custody of its folds at commit, in order of preference; ``custody_k`` of
    #: them are asked per compaction, distinct operators first (0: none, as before).
    custodians: tuple[str, ...] = ()
    custody_k: int = 0
    #: Holder: for a value with custody statements, demand from the origin and the
    #: fold's first custodian at once and take the first correct answer (False:
    #: the origin first, custodians only after it failed, as before).
    custody_hedge: bool = False
    #: Relay: before forwarding a value, this node takes custody of its folds that
    #: carry fewer than this many custody statements and adds its own (0: forwards
    #: the value unchanged, as before).
    relay_custody_k: int = 0
    #: This node's operator label (one failure domain), signed into the custody
    #: statements it makes; placement counts operators, not keys ("": its name).
    operator: str = ""
    #: TLS (:mod:`nodes.tls`): the CA that verifies peers' certificates (every
    #: call this node makes is then TLS), and this node's own certificate and
    #: key (it then serves TLS only). All three, or the CA alone; none: plaintext.
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Origin: witnesses (peer names or host:port) asked to cosign each new head
    #: (``Witness.AddCheckpoint``); the cosignatures ride on the delivered note.
    witnesses: tuple[str, ...] = ()
    #: Holder: a tlog-policy file (docs/custody.md); a delivered head must carry its
    #: quorum of witness cosignatures. None: every verified head, as before.
    witness_policy: Path | None = None
    #: Witness role: ``*`` (every provnet head log) or the origins' node ids whose
    #: heads this node cosigns; empty: not a witness (``Witness.AddCheckpoint`` is
    #: UNIMPLEMENTED).
    witness_logs: str = ""
    #: What this node cosigns as a witness: ``none`` (honest) or an adversary.
    witness_fault: WitnessFault = WitnessFault.NONE

    def __post_init__(self) -> None:
        if not NODE_NAME_RE.match(self.name):
            raise ConfigError(f"{setting('name')}: expected {NODE_NAME_RULE}, got {self.name!r}")
        _check_address(setting("listen"), self.listen)
        if self.advertise is not None:
            _check_address(setting("advertise"), self.advertise)
        if self.fault is FaultMode.SLOW and self.fault_delay_ms <= 0:
            raise ConfigError(
                f"{setting('fault')} 'slow' needs {setting('fault_delay_ms')} > 0,"
                f" got {self.fault_delay_ms}"
            )
        if self.max_message_bytes < 1024:
            raise ConfigError(
                f"{setting('max_message_bytes')}: must be >= 1024, got {self.max_message_bytes}"
            )
        for key, refusal in (
            ("deadline_ms", promise_refusal(deadline_ms=self.deadline_ms)),
            ("serve_for_ms", promise_refusal(serve_for_ms=self.serve_for_ms)),
        ):
            if refusal:
                raise PromiseSettingOutOfRange(f"{setting(key)}: {refusal}")
        for key in self.operator_keys:
            if not _HEX64_RE.match(key):
                raise ConfigError(
                    f"{setting('operator_keys')}: expected 64 hex chars"
                    f" (an Ed25519 public key), got {key!r:.80}"
                )
        if self.max_concurrent_rpcs < 1:
            raise ConfigError(
                f"{setting('max_concurrent_rpcs')}: must be >= 1, got {self.max_concurrent_rpcs}"
            )
        if not 1 <= self.max_streams_per_peer <= self.max_streams:
            raise ConfigError(
                f"{setting('max_streams_per_peer')}: must be 1..max_streams ({self.max_streams}),"
                f" got {self.max_streams_per_peer}"
            )
        if self.max_bulk_bytes and self.max_bulk_bytes < 1024:
            raise ConfigError(
                f"{setting('max_bulk_bytes')}: must be 0 (off) or >= 1024,"
                f" got {self.max_bulk_bytes}"
            )
        if self.max_pending_rpcs < 0:
            raise ConfigError(
                f"{setting('max_pending_rpcs')}: must be >= 0, got {self.max_pending_rpcs}"
            )
        if self.min_witnesses < 1:
            raise ConfigError(f"{setting('min_witnesses')}: must be >= 1, got {self.min_witnesses}")
        _check_custody(self)
        if self.reap_interval_s < 0:
            raise ConfigError(
                f"{setting('reap_interval_s')}: must be >= 0 (0: off), got {self.reap_interval_s}"
            )
        if not abs(self.clock_offset_s) <= MAX_CLOCK_OFFSET_S:
            raise ConfigError(
                f"{setting('clock_offset_s')}: must be within"
                f" ±{MAX_CLOCK_OFFSET_S:.0f} s, got {self.clock_offset_s}"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError(
                f"{setting('tls_cert')} and {setting('tls_key')} go together: got only"
                f" {'the certificate' if self.tls_key is None else 'the key'}"
            )
        if self.tls_cert is not None and self.tls_ca is None:
            raise ConfigError(
                f"{setting('tls_cert')} needs {setting('tls_ca')}: a node that serves TLS"
                " dials its TLS peers with TLS, verified against that CA"
            )
        if self.witness_logs:
            entries = witness_log_entries(self.witness_logs)
            if not entries:
                raise ConfigError(
                    f"{setting('witness_logs')}: blank; give '*' or origins' node ids"
                    " (64 hex), or leave it unset (not a witness)"
                )
            if entries != ["*"] and not all(_HEX64_RE.match(e) for e in entries):
                raise ConfigError(
                    f"{setting('witness_logs')}: expected '*' or origins' node ids (64 hex),"
                    f" got {self.witness_logs!r:.80}"
                )
        if len(self.witnesses) > MAX_WITNESSES:
            raise ConfigError(
                f"{setting('witnesses')}: at most {MAX_WITNESSES} witnesses (a head carries"
                f" their cosignatures), got {len(self.witnesses)}"
            )
        for witness in self.witnesses:
            if ":" in witness:
                _check_address(f"{setting('witnesses')} entry", witness)
            elif witness not in {p.name for p in self.peers}:
                raise ConfigError(
                    f"{setting('witnesses')}: {witness!r:.80} is neither host:port nor a peer name"
                )
        if self.log_level not in {"debug", "info", "warning", "error"}:
            raise ConfigError(
                f"{setting('log_level')}: expected debug/info/warning/error, got {self.log_level!r}"
            )

    @property
    def evidence_path(self) -> Path:
        """Where evidence files this node produces are written."""
        return self.evidence_dir if self.evidence_dir is not None else self.data_dir / "evidence"

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    def pinned_key(self, name_or_address: str) -> str | None:
        """The node id pinned for a peer (by name or address), if the config gives one."""
        for peer in self.peers:
            if name_or_address in (peer.name, peer.address):
                return peer.node_id
        return None

    def peer(self, name_or_address: str) -> str:
        """Resolve a peer name to its address (anything with a ':' is already one),
        then through ``routes``: the address this node dials."""
        for peer in self.peers:
            if peer.name == name_or_address:
                return self._routed(peer.address)
        if ":" in name_or_address:
            return self._routed(_check_address("peer", name_or_address))
        known = [p.name for p in self.peers]
        raise ConfigError(f"unknown peer {name_or_address!r}; known: {known}")

    @property
    def pins(self) -> dict[str, str]:
        """Dialed address → the node id pinned for it (peers listed with a key).

        Keyed by the address this node dials (after ``routes``) and by the
        peer's own address (an endpoint an origin signed is that address,
        then routed): a call to either checks the node there is that peer
        (:mod:`nodes.transport`). A peer's host may be a DNS name.

        An address that peers of different keys share is left out: no one node
        can be expected there, and what each such peer signs is still checked
        against its own key by name (a forward's receipt, say).
        """
        pins: dict[str, str] = {}
        shared: set[str] = set()
        for peer in self.peers:
            if peer.node_id is None:
                continue
            for address in dict.fromkeys((peer.address, self._routed(peer.address))):
                if pins.setdefault(address, peer.node_id) != peer.node_id:
                    shared.add(address)
        return {address: key for address, key in pins.items() if address not in shared}

    def _routed(self, address: str) -> str:
        for routed, via in self.routes:
            if routed == address:
                return via
        return address

    @classmethod
    def from_env_and_args(
        cls,
        args: argparse.Namespace | Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> NodeConfig:
        """Build from parsed flags (dest names = field names), else ``PROVNET_*``, else defaults.

        Raises :class:`ConfigError` naming the flag, the variable and the bad value.
        """
        import os

        given: Mapping[str, object]
        if args is None:
            given = {}
        elif isinstance(args, argparse.Namespace):
            given = vars(args)
        else:
            given = args
        environ = os.environ if env is None else env
        raw: dict[str, object] = {}
        for key, var in ENV_VARS.items():
            value = given.get(key)
            if value is None or value == "":
                value = environ.get(var) or None
            if value is not None:
                raw[key] = value
        for required in ("name", "data_dir"):
            if required not in raw:
                raise ConfigError(f"{setting(required)}: is required")
        return cls._from_raw(raw)

    @classmethod
    def _from_raw(cls, raw: Mapping[str, object]) -> NodeConfig:
        where = setting

        kwargs: dict[str, object] = {
            "name": str(raw["name"]),
            "data_dir": Path(str(raw["data_dir"])),
        }
        for key in ("listen", "advertise", "log_level", "witness_logs", "operator"):
            if key in raw:
                kwargs[key] = str(raw[key])
        if "witness_logs" in raw and str(raw["witness_logs"]).strip():
            # padding and separators go: the entries, comma-separated
            kwargs["witness_logs"] = ",".join(witness_log_entries(str(raw["witness_logs"])))
        if "peers" in raw:
            value = raw["peers"]
            peers = value if isinstance(value, tuple) else parse_peers(str(value), where("peers"))
            # the node's own entry in a list shared by all members is the node itself
            kwargs["peers"] = tuple(p for p in peers if p.name != kwargs["name"])
        if "fault" in raw:
            try:
                kwargs["fault"] = FaultMode(str(raw["fault"]).lower())
            except ValueError:
                choices = ", ".join(m.value for m in FaultMode)
                raise ConfigError(
                    f"{where('fault')}: expected one of {choices}, got {raw['fault']!r}"
                ) from None
        if "attest_fault" in raw:
            try:
                kwargs["attest_fault"] = AttesterFault(str(raw["attest_fault"]).lower())
            except ValueError:
                choices = ", ".join(m.value for m in AttesterFault)
                raise ConfigError(
                    f"{where('attest_fault')}: expected one of {choices},"
                    f" got {raw['attest_fault']!r}"
                ) from None
        if "witness_fault" in raw:
            try:
                kwargs["witness_fault"] = WitnessFault(str(raw["witness_fault"]).lower())
            except ValueError:
                choices = ", ".join(m.value for m in WitnessFault)
                raise ConfigError(
                    f"{where('witness_fault')}: expected one of {choices},"
                    f" got {raw['witness_fault']!r}"
                ) from None
        if "log_format" in raw:
            try:
                kwargs["log_format"] = LogFormat(str(raw["log_format"]).lower())
            except ValueError:
                raise ConfigError(
                    f"{where('log_format')}: expected auto/json/console, got {raw['log_format']!r}"
                ) from None
        for key, minimum in (
            ("fault_delay_ms", 0),
            ("max_message_bytes", 1024),
            # bounded by NodeConfig itself, as on every route (contracts.rules)
            ("serve_for_ms", None),
            ("deadline_ms", None),
            ("reasks", 0),
            ("min_witnesses", 1),
            ("max_concurrent_rpcs", 1),
            ("max_bulk_rpcs", 0),
            ("max_streams", 1),
            ("max_streams_per_peer", 1),
            ("bulk_shed_lag_ms", 0),
            ("max_bulk_bytes", 0),
            ("max_pending_rpcs", 0),
            ("custody_k", 0),
            ("relay_custody_k", 0),
        ):
            if key in raw:
                kwargs[key] = _as_int(where(key), raw[key], minimum)
        if "custodians" in raw:
            value = raw["custodians"]
            kwargs["custodians"] = (
                value
                if isinstance(value, tuple)
                else tuple(n for n in re.split(r"[;,\s]+", str(value).strip()) if n)
            )
        if "routes" in raw:
            value = raw["routes"]
            if isinstance(value, tuple):
                kwargs["routes"] = value
            else:
                kwargs["routes"] = parse_routes(str(value), where("routes"))
        for key in ("shutdown_grace_s", "reap_interval_s", "clock_offset_s"):
            if key in raw:
                try:
                    kwargs[key] = float(str(raw[key]))
                except ValueError:
                    raise ConfigError(f"{where(key)}: expected seconds, got {raw[key]!r}") from None
        for key in (
            "evidence_dir",
            "port_file",
            "operator_key_file",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "witness_policy",
        ):
            if key in raw:
                kwargs[key] = Path(str(raw[key]))
        if "witnesses" in raw:
            value = raw["witnesses"]
            kwargs["witnesses"] = (
                value
                if isinstance(value, tuple)
                else tuple(w for w in re.split(r"[;,\s]+", str(value).strip()) if w)
            )
        if "operator_keys" in raw:
            value = raw["operator_keys"]
            if isinstance(value, tuple):
                kwargs["operator_keys"] = value
            else:
                keys = tuple(k for k in re.split(r"[;,\s]+", str(value).strip()) if k)
                for key in keys:
                    if not _HEX64_RE.match(key):
                        raise ConfigError(
                            f"{where('operator_keys')}: expected 64 hex chars per key,"
                            f" got {key!r:.80}"
                        )
                kwargs["operator_keys"] = keys
        if "provenance_pending" in raw:
            kwargs["provenance_pending"] = _as_bool(
                where("provenance_pending"), raw["provenance_pending"]
            )
        if "custody_hedge" in raw:
            kwargs["custody_hedge"] = _as_bool(where("custody_hedge"), raw["custody_hedge"])
        return cls(**kwargs)  # type: ignore[arg-type]
