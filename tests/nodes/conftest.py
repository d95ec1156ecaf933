"""Fixtures shared by the node tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.nodes.rpc_support import MemCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MemCluster]:
    """Three in-memory nodes with a 300 ms serve deadline and one re-ask.

    A test module that needs other terms defines its own ``cluster``.
    """
    mem = MemCluster(tmp_path, deadline_ms=300, reasks=1)
    try:
        yield mem
    finally:
        await mem.close()
