"""Fixtures shared by the node tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
