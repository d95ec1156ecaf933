"""``provnet link-proxy``: one WAN link (delay, jitter, bandwidth, drop, blackhole) as a TCP proxy.

``--from SOURCE:key=value,...`` (repeatable; ``PROVNET_LINK_FROM``, entries
separated by ``;``) sets the link from one source (host name or IP address)
into the target on its own, so one proxy in front of a node stands for every
directed link into it (:class:`nodes.linkproxy.SourceLink`).

Every flag falls back to a ``PROVNET_LINK_*`` variable (see
:data:`nodes.linkproxy.LINK_ENV_VARS`), so a Compose service configures a link
by its environment alone. Runs in the foreground until SIGTERM or SIGINT,
then resets the connections it still holds and exits 0. Bad settings, or a
listen address that cannot be bound, exit 2 with one ``provnet: error:`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

__all__ = ["register"]

if TYPE_CHECKING:
    from nodes.linkproxy import LinkSpec

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

_HELP = {
    "listen": "host:port to accept connections on (0 as port picks one)",
    "target": "host:port every connection is forwarded to",
    "delay_ms": "one-way delay per chunk, each direction, in ms (default 0)",
    "jitter_ms": "uniform ± jitter added to the delay, in ms; never reorders bytes (default 0)",
    "bandwidth": "capacity per direction in bytes/s, suffix k/M/G = ×1000 (default 0: unlimited)",
    "drop": "probability in [0,1] of resetting the connection (see --drop-mode; default 0)",
    "drop_mode": "chunk: reset before forwarding a chunk with probability --drop;"
    " connection: reset each new connection with probability --drop (default chunk)",
    "seed": "seed of the jitter and drop draws (default: random)",
}


def _error(message: str) -> int:
    # Printed here rather than raised to the front: nodes does not import harness.
    print(f"provnet: error: {message}", file=sys.stderr)
    return 2


def register(sub: _Sub) -> None:
    from nodes.linkproxy import LINK_ENV_VARS

    parser = sub.add_parser(
        "link-proxy",
        help="a WAN link as a TCP proxy: delay, jitter, bandwidth, drop, blackhole",
        description="Forward TCP connections from --listen to --target through a link with "
        "the given delay, jitter, bandwidth, drop and blackhole. Every flag falls back to "
        "its PROVNET_LINK_* variable.",
    )
    for key, help_text in _HELP.items():
        flag = "--" + key.replace("_", "-")
        parser.add_argument(
            flag,
            dest=key,
            default=None,
            metavar=key.split("_")[0].upper(),
            help=f"{help_text} [${LINK_ENV_VARS[key]}]",
        )
    parser.add_argument(
        "--blackhole",
        action="store_true",
        default=None,
        help="accept connections but never forward or answer (a partition)"
        f" [${LINK_ENV_VARS['blackhole']}]",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        action="append",
        default=None,
        metavar="SOURCE:KEY=VALUE,...",
        help="the link from one source (host name or IP address) into the target:"
        " delay_ms, jitter_ms, bandwidth, drop, drop_mode, blackhole, seed; settings not"
        " given are the proxy's own; connections from other sources get the proxy's own"
        f" (repeatable) [${LINK_ENV_VARS['sources']}, entries separated by ';']",
    )
    parser.add_argument(
        "--port-file", type=Path, default=None, help="write the bound port to this file"
    )
    parser.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    from nodes.linkproxy import LinkConfigError, LinkSpec

    try:
        spec = LinkSpec.from_env_and_args(vars(args), os.environ)
    except LinkConfigError as exc:
        return _error(str(exc))
    return asyncio.run(_serve(spec, args.port_file))


async def _serve(spec: LinkSpec, port_file: Path | None) -> int:
    from nodes.linkproxy import LinkProxy

    proxy = LinkProxy(spec)
    try:
        await proxy.start()
    except OSError as exc:
        host, port = spec.listen
        return _error(
            f"--listen ($PROVNET_LINK_LISTEN) {host}:{port}: cannot listen: {exc.strerror or exc}"
        )
    if port_file is not None:
        port_file.write_text(f"{proxy.port}\n", encoding="utf-8")
    target = f"{spec.target[0]}:{spec.target[1]}"
    print(f"link-proxy: {proxy.address} → {target} ({spec.describe()})", file=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await proxy.close()
    stats = proxy.stats
    print(
        f"link-proxy: stopped; {stats.connections} connections, {stats.resets} resets,"
        f" {stats.bytes_to_target} B to target, {stats.bytes_from_target} B back",
        file=sys.stderr,
    )
    for source, s in proxy.source_stats.items():
        print(
            f"link-proxy: from {source}: {s.connections} connections, {s.resets} resets,"
            f" {s.bytes_to_target} B to target, {s.bytes_from_target} B back",
            file=sys.stderr,
        )
    return 0
