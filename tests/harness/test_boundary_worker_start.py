"""How boundary worker processes start: forked on the in-memory transport, spawned on grpc.

A forked worker inherits every module the parent imported; a spawned one
imports them again before its first run. Forking is safe only where nothing
grpc made crosses the fork, and a forked worker must not keep the parent's
event-loop SIGINT handler (it would stop nothing in the worker).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from harness.boundary.choices import TransportKind
from harness.boundary.runner import BoundarySettings, run_boundary, worker_start_method
from harness.config import ExperimentConfig

_PROBES: list[Path] = []


def _probe_after_fork() -> None:
    if not _PROBES:
        return
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    (_PROBES[0] / f"child-{os.getpid()}").write_text("blocked" if blocked else "open")


def test_in_memory_workers_fork_and_grpc_workers_spawn() -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    assert worker_start_method(TransportKind.MEMORY) == "fork"
    assert worker_start_method(TransportKind.GRPC) == "spawn"
    assert worker_start_method(TransportKind.REMOTE) == "spawn"


def test_forked_workers_are_born_with_ctrl_c_blocked_and_decide_as_one_process(
    tmp_path: Path,
) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    cfg = ExperimentConfig()
    kw: dict[str, object] = {"seeds": (0, 1), "steps": 60, "deadline_ms": 10_000}
    one = run_boundary(cfg, BoundarySettings(**kw), progress=False)  # type: ignore[arg-type]
    probes = tmp_path / "probes"
    probes.mkdir()
    os.register_at_fork(after_in_child=_probe_after_fork)
    _PROBES.append(probes)
    try:
        two = run_boundary(
            cfg,
            BoundarySettings(**kw, workers=2),  # type: ignore[arg-type]
            progress=False,
        )
    finally:
        _PROBES.clear()
    seen = {p.name: p.read_text() for p in probes.iterdir()}
    assert len(seen) == 2, seen  # both workers forked, not spawned
    assert set(seen.values()) == {"blocked"}, seen  # no Ctrl-C before their initializer
    assert [r.boundary_fingerprint for r in two.runs] == [r.boundary_fingerprint for r in one.runs]
    assert all(r.fingerprints_equal for r in two.runs)
