"""What the ``provnet experiment`` subcommands share: default paths, flag types, output checks.

``run``, ``sweep``, ``report`` (:mod:`harness.cli_experiment`) and
``boundary`` (:mod:`harness.boundary.cli`) read the same config files, the
same positive-integer flags and the same progress switch, and refuse an
unwritable results directory the same way. Importing this module costs
argparse only: configs are loaded, and their modules imported, when a
handler runs. Every failure is a :class:`harness.cli_errors.UsageError` naming the
file or flag and the bad value (``provnet: error: …``, exit 2).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli_errors import UsageError

if TYPE_CHECKING:
    from harness.config import ExperimentConfig

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_SWEEP_CONFIG",
    "add_progress_flags",
    "load_experiment_config",
    "positive_int",
    "prepare_out",
]

#: Config files the subcommands read by default (relative to the working directory).
DEFAULT_CONFIG = Path("experiments/config.yaml")
DEFAULT_SWEEP_CONFIG = Path("experiments/config-sweep.yaml")


def positive_int(text: str) -> int:
    """argparse ``type=`` for an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_progress_flags(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: bars only when stderr is a TTY)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="force progress bars (default: only when stderr is a TTY)",
    )
    group.add_argument("--no-progress", dest="progress", action="store_false")


def load_experiment_config(path: Path | None, default_path: Path, sweep: bool) -> ExperimentConfig:
    """``path`` if given, else ``default_path`` if it exists, else the built-in defaults."""
    from harness.config import ConfigError, ExperimentConfig, default_sweep_config, load_config

    try:
        if path is not None:
            cfg = load_config(path)
        elif default_path.exists():
            cfg = load_config(default_path)
        else:
            cfg = default_sweep_config() if sweep else ExperimentConfig()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return cfg


def prepare_out(out: Path) -> None:
    """Check before running that the results folder can be written (and swapped in).

    Results are written into a fresh sibling folder and renamed to ``out`` when
    complete (:func:`harness._outdir.staged_dir`), so ``out`` itself is not
    created here: its parent must be creatable and writable.
    """
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{out}: cannot create the results directory ({exc.strerror or exc})"
        ) from None
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory (expected a results folder)")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{out}: cannot create the results directory ({parent} is not writable)")
