"""The ``provnet`` front: subcommands from every package, clean exits."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from harness.cli import build_parser


def test_every_package_contributes_its_subcommands() -> None:
    parser = build_parser()
    # The registered names, not the help text: its description mentions some of them.
    (subcommands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("experiment", "audit", "keys", "evidence", "node", "cluster", "attest"):
        assert command in subcommands.choices, f"provnet {command} is not registered"


_FLOODING_FRONT = """
import argparse, sys
from harness import cli

def flood(args: argparse.Namespace) -> int:
    for _ in range(200_000):
        print("row,row,row,row,row,row,row,row")
    return 0

parser = argparse.ArgumentParser()
parser.set_defaults(handler=flood)
cli.build_parser = lambda: parser
sys.exit(cli.main([]))
"""


def test_closed_pipe_is_not_a_traceback() -> None:
    # A reader that stops early (`provnet … | head -c 1`) closes the pipe
    # while the handler is still writing: the front exits quietly.
    proc = subprocess.run(
        ["bash", "-c", f'{sys.executable} -c "$FRONT" | head -c 1 >/dev/null'],
        env={**os.environ, "FRONT": _FLOODING_FRONT},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "BrokenPipeError" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
