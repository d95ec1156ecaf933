"""``provnet tls new``: a cluster CA and a server certificate per node (:mod:`nodes.tls`).

``provnet tls new --ca DIR --node NAME [--host H ...] [--days N]`` makes the
CA in ``DIR`` (``ca.pem``, ``ca.key``) when it is not there yet, then a
certificate for node ``NAME`` naming every ``--host`` (DNS names or IP
addresses; default: ``NAME``), written as ``DIR/NAME.pem`` and
``DIR/NAME.key`` (or under ``--out``). Give each node ``PROVNET_TLS_CA``,
``PROVNET_TLS_CERT`` and ``PROVNET_TLS_KEY``; keep ``ca.key`` off the nodes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

__all__ = ["register"]

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: _Sub) -> None:
    tls = sub.add_parser("tls", help="TLS certificates for nodes (a cluster CA, one per node)")
    tsub = tls.add_subparsers(dest="tls_command", metavar="SUBCOMMAND", required=True)
    new = tsub.add_parser(
        "new",
        help="make the CA in --ca if absent, then a server certificate for --node",
    )
    new.add_argument("--ca", type=Path, required=True, help="directory of ca.pem and ca.key")
    new.add_argument("--node", required=True, help="the node's name (file names, subject)")
    new.add_argument(
        "--host",
        action="append",
        default=None,
        help="a DNS name or IP address callers dial the node by (repeatable; default: --node)",
    )
    new.add_argument("--days", type=int, default=None, help="validity in days (default 365)")
    new.add_argument("--out", type=Path, default=None, help="where to write (default: --ca)")
    new.set_defaults(handler=_new)


def _new(args: argparse.Namespace) -> int:
    from nodes.tls import CA_CERT, DEFAULT_DAYS, TlsError, new_ca, new_node_certificate

    days = DEFAULT_DAYS if args.days is None else args.days
    if days < 1:
        print(f"provnet: error: --days: must be >= 1, got {days}", file=sys.stderr)
        return 2
    now = dt.datetime.now(dt.UTC)
    ca_dir: Path = args.ca
    try:
        if not (ca_dir / CA_CERT).exists():
            print(f"created CA {new_ca(ca_dir, now=now, days=days)}")
        cert, key = new_node_certificate(
            ca_dir, args.node, args.host or [args.node], now=now, days=days, out_dir=args.out
        )
    except (TlsError, OSError, ValueError) as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2
    print(f"created {cert} and {key}")
    return 0
