"""What a ``provnet`` subcommand raises for the front to turn into an exit code.

:class:`UsageError` is bad input (exit 2), :class:`RunFailed` a run that could
not complete (exit 1). They live apart from the front (:mod:`harness.cli`)
because the front loads every subcommand module: a subcommand importing the
front for them would close a loop. This module imports nothing.
"""

from __future__ import annotations

__all__ = ["RunFailed", "UsageError"]


class UsageError(Exception):
    """Bad user input: printed as ``provnet: error: <message>``, exit 2."""


class RunFailed(Exception):
    """A run could not complete (a node answered what it must not): one line, exit 1."""
