"""Fixtures shared by the node tests."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nodes.cluster import ClusterError, cluster_down
from nodes.home import Home
from tests.nodes.cluster_home import processes_naming
from tests.nodes.custody_support import CustodyCluster
from tests.nodes.rpc_support import MemCluster


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[MemCluster]:
    """Three in-memory nodes with a 300 ms serve deadline and one re-ask (a module's
    ``CLUSTER_REASKS`` sets another count).

    A test module that needs other terms defines its own ``cluster``.
    """
    reasks = getattr(request.module, "CLUSTER_REASKS", 1)
    mem = MemCluster(tmp_path, deadline_ms=300, reasks=reasks)
    try:
        yield mem
    finally:
        await mem.close()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A ``PROVNET_HOME`` for ``provnet cluster …`` runs; afterwards whatever a test did is
    stopped, then nothing naming the home may be left running."""
    root = tmp_path / "home"
    yield root
    with contextlib.suppress(ClusterError):
        cluster_down(Home(root), grace=2.0)
    leftovers = processes_naming(root)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes left behind: {leftovers}"


@pytest.fixture
async def net(tmp_path: Path) -> AsyncIterator[CustodyCluster]:
    """In-memory nodes for the custody tests (``tests.nodes.custody_support``)."""
    cluster = CustodyCluster(tmp_path)
    try:
        yield cluster
    finally:
        await cluster.close()
