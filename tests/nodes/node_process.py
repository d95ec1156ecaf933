"""One real ``provnet node`` process on loopback, for tests that need the real thing."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def node_process(root: Path, name: str, **env_extra: str) -> Iterator[tuple[str, Path]]:
    """Start ``provnet node --name NAME`` under ROOT, wait until SERVING, stop it after.

    Yields its address and data dir; ``env_extra`` is added to its environment
    (with a 1 s shutdown grace). The node's output goes to ``ROOT/NAME.log``,
    whose tail is in the failure if the node does not start within 60 s.
    """
    address = f"127.0.0.1:{free_ports(1)[0]}"
    data_dir = root / name
    env = child_env()
    env.update(PROVNET_SHUTDOWN_GRACE_S="1", **env_extra)
    argv = provnet_argv("node", "--name", name, "--listen", address, "--data-dir", str(data_dir))
    log = root / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        give_up = time.monotonic() + 60
        while probe_health(address, timeout=0.5) is not HealthState.SERVING:
            if proc.poll() is not None or time.monotonic() > give_up:
                pytest.fail(f"node did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield address, data_dir
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
