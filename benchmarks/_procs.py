"""What the node benchmarks read about their child processes, and how they end them.

Linux ``/proc`` only (the benchmarks' machine): a counter reads 0 once its
process or thread is gone, so a run that outlives a child does not fail
on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cpu_seconds", "minor_faults", "stop", "wait_serving"]


def _stat_fields(stat: int | Path) -> list[str] | None:
    """The fields after the command name of ``/proc/<pid>/stat`` (``stat``: a pid), or of
    the ``stat`` file at ``stat`` (a thread's); None when it cannot be read."""
    path = Path(f"/proc/{stat}/stat") if isinstance(stat, int) else stat
    try:
        return path.read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(stat: int | Path) -> float:
    """User + system CPU seconds of a process (a pid) or thread (its ``stat`` file)."""
    fields = _stat_fields(stat)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid: int) -> int:
    """Minor page faults a process has taken so far (fresh pages it touched)."""
    fields = _stat_fields(pid)
    return 0 if fields is None else int(fields[7])


def stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, up to ``grace`` seconds to exit, then SIGKILL; the child is reaped."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_serving(proc: subprocess.Popen[bytes], address: str, log: Path, timeout: float) -> None:
    """Until the node ``proc`` at ``address`` reports SERVING; ``SystemExit`` with the end
    of its ``log`` if it exits or ``timeout`` seconds pass first."""
    from nodes.cluster import HealthState, probe_health

    deadline = time.monotonic() + timeout
    while probe_health(address, timeout=0.5) is not HealthState.SERVING:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"node did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)


def one_node_setup(prefix: str) -> tuple[Path, str, str, dict[str, str]]:
    """A scratch folder with an operator key, a free loopback address and the
    environment for one node that authorises that key, reaps nothing and logs
    only warnings: ``(work, operator_node_id, address, env)``. The key is
    ``work / "operator.key"``."""
    import tempfile

    from contracts.identity import Identity, save_identity
    from nodes.cluster import child_env, free_ports

    work = Path(tempfile.mkdtemp(prefix=prefix))
    operator = Identity.generate()
    save_identity(operator, work / "operator.key")
    (port,) = free_ports(1)
    env = child_env()
    env.update(
        PROVNET_OPERATOR_KEYS=operator.node_id,
        PROVNET_REAP_INTERVAL_S="0",
        PROVNET_LOG_LEVEL="warning",
    )
    return work, operator.node_id, f"127.0.0.1:{port}", env


@contextlib.contextmanager
def pinned_node(
    name: str, work: Path, address: str, env: dict[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], int | None]]:
    """One ``provnet node`` serving at ``address`` with its data and JSON log in
    ``work``; with two CPUs or more it is pinned to the first and this process
    moves to the rest. Yields the process and the node's CPU (None: unpinned);
    afterwards the node is stopped and ``work`` removed."""
    import shutil

    from nodes.cluster import provnet_argv

    cpus = sorted(os.sched_getaffinity(0))
    node_cpus = {cpus[0]} if len(cpus) > 1 else None
    log = (work / "node.log").open("wb")
    node = subprocess.Popen(
        provnet_argv(
            "node", "--name", name, "--listen", address, "--data-dir", str(work / "node"),
            "--log-format", "json",
        ),
        stdout=log, stderr=subprocess.STDOUT, env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, node_cpus)) if node_cpus else None,
    )  # fmt: skip
    try:
        wait_serving(node, address, work / "node.log", 60)
        if node_cpus:
            os.sched_setaffinity(0, set(cpus[1:]))
        yield node, cpus[0] if node_cpus else None
    finally:
        stop(node, 15)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
