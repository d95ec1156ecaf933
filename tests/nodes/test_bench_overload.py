"""The overload benchmark runs end to end (``-m bench``; figures in docs/security.md).

The mechanism itself (shed before the body, serving goes on) is pinned in the
default run by ``tests/nodes/test_overload.py``; this checks that the
benchmark's three processes (node, probe, load) run and that it reports every
figure the docs quote.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_overload.py"

pytestmark = [pytest.mark.bench, pytest.mark.timeout(300)]


def test_overload_bench_sheds_and_reports_rss_and_p99() -> None:
    proc = subprocess.run(
        [
            sys.executable, str(BENCH), "--callers", "200", "--payload-mib", "1",
            "--duration", "5", "--unloaded", "3", "--pool", "16", "--solo", "5",
            "--max-bulk", "4",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^serve probe unloaded\s+n=\d+ p50 [\d.]+ ms p99 [\d.]+ ms", out, re.M), out
    assert re.search(r"^serve probe loaded\s+n=\d+ p50 [\d.]+ ms p99 [\d.]+ ms", out, re.M), out
    assert re.search(r"^deliveries unloaded\s+n=5 p50 [\d.]+ ms", out, re.M), out
    found = re.search(r"^deliveries admitted (\d+) .*shed (\d+)", out, re.M)
    assert found, out
    assert int(found.group(1)) > 0, f"no delivery was admitted under load:\n{out}"
    assert int(found.group(2)) > 0, f"200 callers never made the node shed a call:\n{out}"
    assert re.search(r"^node RSS peak \d+ MiB", out, re.M), out
    assert re.search(r"^load average during the run: max [\d.]+", out, re.M), out
