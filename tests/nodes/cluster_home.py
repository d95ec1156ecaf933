"""Helpers for tests that run ``provnet cluster …`` as a user does: the command in a
child process with its own ``PROVNET_HOME``, and the processes a home left behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from nodes.cluster import is_alive


def provnet(home: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``provnet *argv`` with ``PROVNET_HOME=home`` and no other ``PROVNET_*`` setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    env["PROVNET_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def processes_naming(path: Path) -> list[int]:
    """Pids of live, non-zombie processes whose command line mentions ``path``."""
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes() and is_alive(int(entry.name)):
                found.append(int(entry.name))
    return found
