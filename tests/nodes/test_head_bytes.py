"""``benchmarks/head_bytes.py``: the lone first delivery under shorter head spellings.

Fast (no node, no timing), so in the default run: the script's first row is
the wire vector's own first delivery, every row is a smaller delivery than the
one before, and each verdict is the size against the bound it prints.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from nodes.wire import delivery_statement_size
from tests.nodes.wire_vectors import lone_first_delivery
from tests.scripts import load_script


def _load() -> ModuleType:
    return load_script("benchmarks/head_bytes.py", "head_bytes")


def test_head_bytes_rows_start_at_the_vector_and_shrink(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load()
    first, _held = lone_first_delivery()
    assert module.first_delivery() == first
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
