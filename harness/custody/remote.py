"""``provnet experiment custody --cluster`` / ``--nodes``: the sweep on running nodes.

The running nodes hold and witness (the first given is the holder, the next
the witness); the parties that depart are extra node processes this command
starts and stops itself, so the running nodes are left as they were found.
"""

from __future__ import annotations

import argparse

from harness.cli_errors import UsageError
from harness.custody.settings import CustodySettings

__all__ = ["run_on_running"]


def run_on_running(args: argparse.Namespace, settings: CustodySettings) -> int:
    """Play ``settings`` with the running nodes as holder and witness."""
    raise UsageError(
        "--cluster/--nodes: the custody sweep on running nodes is not available in this"
        " build; run it on in-process nodes (--transport memory or grpc)"
    )
