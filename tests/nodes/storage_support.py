"""Real node processes on a disk a test controls: a size-limited tmpfs, a byte flipped.

:func:`small_disk` mounts a tmpfs of a few MiB (a real ENOSPC when it is
full; needs root and ``mount``, and fails the test loudly when either is
missing — CI runs as root). :func:`fill_disk` fills it to the last byte.
:class:`OriginProcess` is one ``python -m nodes.app`` on 127.0.0.1 with its
data dir wherever the test puts it and its JSON log outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes.rpc_support import TEST_OPERATOR

__all__ = ["OriginProcess", "fill_disk", "log_events", "small_disk"]

_REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def small_disk(path: Path, size: str = "8m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the test, unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.fail(
            f"this test needs root to mount a size-limited tmpfs at {path} (a real ENOSPC);"
            f" running as uid {os.geteuid()}"
        )
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"mount -t tmpfs -o size={size} at {path} failed: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill_disk(disk: Path) -> Path:
    """Fill ``disk`` to its last byte with one file; returns it (unlink it to free)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 8, 1):
            block = b"\0" * chunk
            while True:
                try:
                    if os.write(fd, block) < chunk:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def log_events(log: Path, event: str) -> list[dict[str, object]]:
    """The JSON log lines of ``log`` whose event is ``event``."""
    out: list[dict[str, object]] = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and row.get("event") == event:
                out.append(row)
    return out


class OriginProcess:
    """One ``python -m nodes.app`` node on 127.0.0.1 (port from its port file)."""

    def __init__(self, data_dir: Path, log: Path, name: str = "origin", **env: str) -> None:
        self.data_dir = data_dir
        self.log = log
        self.port_file = log.with_name(f"{name}.port")
        self.port_file.unlink(missing_ok=True)
        environ = {
            **os.environ,
            "PROVNET_NAME": name,
            "PROVNET_LISTEN": "127.0.0.1:0",
            "PROVNET_DATA_DIR": str(data_dir),
            "PROVNET_PORT_FILE": str(self.port_file),
            "PROVNET_LOG_FORMAT": "json",
            "PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id,
            "PROVNET_SHUTDOWN_GRACE_S": "1",
            **env,
        }
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nodes.app"], env=environ, stdout=out, stderr=out, cwd=_REPO
            )

    async def address(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists():
                port = self.port_file.read_text().strip()
                if port:
                    return f"127.0.0.1:{port}"
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"node exited with {self.proc.returncode}: {tail}")
            await asyncio.sleep(0.02)
        raise AssertionError(f"node did not listen within {timeout} s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
