"""The ``provnet`` console script: one front for every package.

Each package contributes a ``register(subparsers)`` function in its own
``cli`` module; handlers import their heavy dependencies lazily so that
``provnet experiment …`` never imports grpc or aiosqlite.

Exit codes: 0 success, 1 a check failed (e.g. invalid evidence, a smoke step
deviated), 2 bad input or usage (file, line/key and what was expected are
printed; never a traceback).

The front is the top of the import graph: it loads the ``cli`` modules of
``harness``, ``contracts`` and ``nodes`` (by name, below) and no module of
any package imports it back. ``harness`` is its home because ``harness``
already depends on the other two and they never on it. What subcommands
raise for it (:class:`UsageError`, :class:`RunFailed`) lives in
:mod:`harness.cli_errors`, which imports nothing; both are re-exported here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from harness.cli_errors import RunFailed, UsageError

__all__ = ["RunFailed", "UsageError", "build_parser", "main"]

#: Modules that provide ``register(subparsers) -> None``.
_SUBCOMMAND_MODULES = (
    "harness.cli_experiment",
    "harness.cli_audit",
    "harness.simulate.cli",
    "harness.attest.cli",
    "contracts.cli",
    "nodes.cli",
    "nodes.cli_link",
    "nodes.cli_tls",
)


def _version() -> str:
    """The installed distribution's version (``pyproject.toml``'s when installed from it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("provnet")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provnet",
        description="Cross-agent provenance testbed: experiment, contracts, nodes.",
    )
    parser.add_argument("--version", action="version", version=f"provnet {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        module = importlib.import_module(name)
        register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
        register = module.register
        register(sub)
    return parser


def _mark_subparsers(parser: argparse.ArgumentParser) -> None:
    """Let every (sub)command's namespace name the parser that read it, for its usage."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_usage_parser=child)
                _mark_subparsers(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _mark_subparsers(parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # An unknown flag belongs to the subcommand it was given to: its usage, not the top's.
        owner: argparse.ArgumentParser = getattr(args, "_usage_parser", parser)
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("provnet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``provnet … | head``): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
