"""``benchmarks/head_bytes.py``: the lone first delivery under shorter head spellings.

Fast (no node, no timing), so in the default run: the script's first row is
the wire vector's own first delivery, every row is a smaller delivery than the
one before, and each verdict is the size against the bound it prints.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from nodes.wire import delivery_statement_size
from tests.nodes.wire_vectors import lone_first_delivery

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "head_bytes.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("head_bytes", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["head_bytes"] = module
    spec.loader.exec_module(module)
    return module


def test_head_bytes_rows_start_at_the_vector_and_shrink(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load()
    first, _held = lone_first_delivery()
    assert module.first_delivery(module.Identity.from_seed(bytes(32))) == first
    assert module.main() == 0
    rows = [
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r" (\d+) B  (PASS|FAIL)$", capsys.readouterr().out, re.MULTILINE)
    ]
    assert len(rows) == 6, rows
    assert rows[0][0] == delivery_statement_size(first)
    sizes = [size for size, _ in rows]
    assert sizes == sorted(sizes, reverse=True), sizes
    assert len(set(sizes)) == len(sizes), sizes
    for size, verdict in rows:
        assert verdict == ("PASS" if size <= module.TARGET_BYTES else "FAIL"), (size, verdict)
