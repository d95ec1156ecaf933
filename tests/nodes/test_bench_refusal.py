"""The refusal-cost benchmark runs end to end (``-m bench``; figures in docs/security.md).

It holds a real node's byte budget with two silent deliveries and has every
further delivery refused at its headers: checks that they are the node's own
``RESOURCE_EXHAUSTED`` and that it reports the node's CPU per refusal and by
thread, as the docs quote.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_refusal.py"

pytestmark = [pytest.mark.bench, pytest.mark.timeout(180)]


def test_refusal_bench_refuses_every_delivery_and_reports_cpu_per_refusal() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--waves", "2", "--calls", "100", "--connections", "4"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    waves = re.findall(
        r"^wave \d: 100 calls \{(.*)\}, wall \d+ ms, node CPU \d+ ms = ([\d.]+) ms a call",
        out,
        re.M,
    )
    assert len(waves) == 2, out
    for codes, _ in waves:
        assert codes == "'RESOURCE_EXHAUSTED': 100", out  # every one refused by the node
    assert re.search(r"^node CPU by thread over the waves: .*event loop \(main\) \d+ ms", out, re.M)
    assert re.search(r"^per refusal: median [\d.]+ ms of node CPU", out, re.M), out
