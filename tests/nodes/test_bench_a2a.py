"""The A2A cost benchmark runs end to end (``-m bench``; figures in docs/a2a.md).

Two rounds per mode: the three modes' rows are printed, every delegation was
acted on (the script exits otherwise), and A2A carries more bytes than
Deliver for the same value (it adds the part's framing, the URI and hints).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_a2a.py"

pytestmark = [pytest.mark.bench, pytest.mark.timeout(180)]


def test_a2a_bench_prints_each_mode_next_to_deliver() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[2:]}
    assert set(rows) == {"deliver", "a2a-grpc", "a2a-jsonrpc"}
    assert float(rows["deliver"][3]) == 1.0
    assert float(rows["a2a-grpc"][3]) > 1.0
    assert float(rows["a2a-jsonrpc"][3]) > float(rows["a2a-grpc"][3])
