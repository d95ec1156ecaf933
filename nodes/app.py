"""Run one node: ``run_node(config)``; and ``start_node`` for in-process use.

``run_node`` is what ``provnet node`` (and every Compose container) runs:

1. configure structlog (JSON lines, or console on a TTY);
2. load the node key from ``<data_dir>/node.key``, creating it (0600) on
   first start — the node id is the hex public key;
3. open the hop log (see :mod:`nodes.store`) and start the retention reaper
   (:mod:`nodes.reaper`, every ``reap_interval_s``; it also lands pending
   hops in ``provenance_pending`` mode);
4. serve the provnet services plus health and reflection on ``listen``
   (port 0 picks a free port; it is written to ``port_file`` if set), and
   start re-testing standing suspicions (:mod:`nodes.retest`);
5. on SIGTERM/SIGINT: health NOT_SERVING, ``server.stop(grace)``, close the
   store — in that order, so no acknowledged write is cut off.

``start_node`` does steps 2–4 inside an already-running event loop and
returns a :class:`RunningNode` the caller must ``await stop()`` (tests, the
benchmark, in-process drivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import grpc

from contracts.errors import KeyFileError
from contracts.identity import Identity, load_identity, save_identity
from nodes import eventloop
from nodes.auth import ControlCredentials
from nodes.config import NodeConfig
from nodes.faults import FaultPlan
from nodes.logging import configure_logging, get_logger
from nodes.reaper import Reaper
from nodes.retest import Retester
from nodes.server import NodeServer, build_server
from nodes.services import NodeCore
from nodes.store import StoreMode
from nodes.tls import TlsFiles
from nodes.transport import GrpcTransport, Transport

__all__ = [
    "KEY_FILENAME",
    "NO_OPERATOR_HINT",
    "PortBusy",
    "RunningNode",
    "check_port_free",
    "load_or_create_identity",
    "main",
    "run_node",
    "start_node",
    "warn_no_operator",
]

KEY_FILENAME = "node.key"

log = get_logger(__name__)


class PortBusy(OSError):
    """The listen address is taken (or cannot be bound at all)."""


def check_port_free(listen: str) -> None:
    """Fail with one clear error if ``listen`` cannot be bound (port 0 always can)."""
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    if port == 0:
        return
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As gRPC binds: a port left in TIME_WAIT is free, one with a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortBusy(
                f"cannot listen on {listen}: {exc.strerror or exc} (is another node running there?)"
            ) from None


def operator_key_id(path: Path) -> str:
    """The operator public key a file names: a file holding the 64-hex id, or a key file."""
    try:
        head = path.read_bytes()[:256].strip()
    except OSError as exc:
        raise KeyFileError(f"operator key file {path}: cannot read ({exc.strerror})") from None
    if len(head) == 64 and all(c in b"0123456789abcdef" for c in head):
        return head.decode()
    return load_identity(path).node_id


def load_or_create_identity(data_dir: Path) -> Identity:
    """The node's key from ``data_dir/node.key``; generated (mode 0600) on first start."""
    # Owner-only, as a cluster's data dirs: it holds the node key and the hop log.
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / KEY_FILENAME
    if path.exists():
        return load_identity(path)
    identity = Identity.generate()
    save_identity(identity, path)
    log.info("node_key_created", path=str(path), node_id=identity.node_id)
    return identity


@dataclass(slots=True)
class RunningNode:
    """A started node; ``address`` is host:port it answers on."""

    config: NodeConfig
    core: NodeCore
    server: NodeServer
    reaper: Reaper | None = None
    retester: Retester | None = None

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def node_id(self) -> str:
        return self.core.node_id

    async def stop(self, grace: float | None = None) -> None:
        await self.server.stop(self.config.shutdown_grace_s if grace is None else grace)
        if self.reaper is not None:
            await self.reaper.stop()
        if self.retester is not None:
            await self.retester.stop()
        await self.core.close()


async def start_node(
    config: NodeConfig,
    *,
    transport: Transport | None = None,
    clock: Callable[[], float] | None = None,
    fault: FaultPlan | None = None,
    store_mode: StoreMode = StoreMode.DURABLE,
    extra_services: Callable[[NodeCore, grpc.aio.Server], None] | None = None,
) -> RunningNode:
    """Open key and store and start serving; the caller stops the returned node.

    ``store_mode`` scratch (no durability claimed, :class:`nodes.store.StoreMode`)
    only for a node whose log dies with the process, e.g. an experiment's.
    ``extra_services`` adds services to the same server before it starts (one
    port, one health service): the A2A service of :mod:`nodes.a2a`."""
    check_port_free(config.listen)  # before anything (the key file) is written
    # TLS files are read now: one that is wrong fails the start, naming it.
    tls = TlsFiles(config.tls_ca, config.tls_cert, config.tls_key)
    server_tls = tls.server_credentials()
    tls.channel_credentials()
    if config.operator_key_file is not None:
        operator = operator_key_id(config.operator_key_file)
        if operator not in config.operator_keys:
            config = replace(config, operator_keys=(*config.operator_keys, operator))
    identity = load_or_create_identity(config.data_dir)
    if clock is None and config.clock_offset_s:
        clock = _offset_clock(config.clock_offset_s)
        log.warning("clock_offset", offset_s=config.clock_offset_s)
    if transport is None:
        # Peers listed with a key are checked to be that node at every new connection.
        transport = GrpcTransport(
            config.max_message_bytes, pins=config.pins, tls=tls if tls.ca else None
        )
    if isinstance(transport, GrpcTransport) and transport.credentials is None:
        # Deliveries this node makes (Forward) are signed with its own key.
        transport.credentials = ControlCredentials(identity)
    core = await NodeCore.open(
        config,
        identity,
        transport=transport,
        clock=clock,
        fault=fault,
        store_mode=store_mode,
    )
    server = build_server(core, config.listen, config.max_message_bytes, server_tls)
    if extra_services is not None:
        extra_services(core, server.server)
    try:
        port = await server.start()
    except BaseException:
        await core.close()
        raise
    core.set_advertised(config.advertise or server.address)
    if config.port_file is not None:
        tmp = config.port_file.with_name(config.port_file.name + ".tmp")
        tmp.write_text(f"{port}\n", encoding="utf-8")
        os.replace(tmp, config.port_file)
    reaper = None
    if config.reap_interval_s > 0:
        # S5: the reaper evicts only through the store's obligation-reading delete.
        reaper = Reaper(core.store, interval_s=config.reap_interval_s, clock=core.now_ms)
        reaper.start()
    # Standing suspicions are asked again on a schedule until they clear (nodes.retest).
    retester = Retester(core)
    retester.start()
    return RunningNode(config=config, core=core, server=server, reaper=reaper, retester=retester)


def _offset_clock(offset_s: float) -> Callable[[], float]:
    """The wall clock shifted by ``offset_s`` (``clock_offset_s``, fixed at start)."""

    def clock() -> float:
        return time.time() + offset_s

    return clock


#: Said once at start by a node that has no operator key (nodes.auth).
NO_OPERATOR_HINT = (
    "node {name} has no operator key: it will refuse every control call (append, commit,"
    " deliver, rehydrate, forward), so no driver can play on it; to authorise an operator,"
    " make a key with 'provnet keys new operator.key' and start the node with"
    " --operator-key-file operator.key (or --operator-keys HEX), then run the driver with"
    " PROVNET_OPERATOR_KEY_FILE=operator.key"
)


def warn_no_operator(name: str, stream: TextIO | None = None) -> None:
    """Say that node ``name`` refuses control calls: a log warning, and a plain line on a TTY."""
    hint = NO_OPERATOR_HINT.format(name=name)
    log.warning("control_calls_refused", reason="no operator key configured", fix=hint)
    out = sys.stderr if stream is None else stream
    if out.isatty():
        print(f"provnet: warning: {hint}", file=out, flush=True)


async def run_node(config: NodeConfig) -> None:
    """Run a node until SIGTERM/SIGINT, then shut down gracefully."""
    configure_logging(config.log_format, config.log_level, node=config.name)
    node = await start_node(config)
    # What exists now (modules, classes, the node's own long-lived objects) lives
    # as long as the process: moved out of the collector's sight, the full
    # collections that bulk traffic runs now and then (nodes.overload,
    # BULK_GC_INTERVAL_S) scan only what came since, not every object at each
    # pause of the event loop.
    gc.collect()
    gc.freeze()
    log.info(
        "node_started",
        node_id=node.node_id,
        address=node.address,
        fault=str(config.fault),
        data_dir=str(config.data_dir),
    )
    if not node.config.operator_keys:
        warn_no_operator(config.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("node_stopping", grace_s=config.shutdown_grace_s)
    finally:
        await node.stop()
        log.info("node_exited")


def main() -> int:
    """``python -m nodes.app``: run a node configured by ``PROVNET_*`` variables only."""

    from nodes.config import ConfigError
    from nodes.errors import StoreError
    from nodes.tls import TlsError

    try:
        config = NodeConfig.from_env_and_args(None)
    except ConfigError as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2
    try:
        eventloop.run(run_node(config))
    except TlsError as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2
    except PortBusy as exc:
        print(f"provnet: error: --listen ($PROVNET_LISTEN): {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"provnet: error: $PROVNET_DATA_DIR {config.data_dir}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
