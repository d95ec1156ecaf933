"""The overload benchmark runs end to end (``-m bench``; figures in docs/security.md)."""

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
        [sys.executable, str(BENCH), "--callers", "200", "--payload-mib", "1", "--duration", "5"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"^serve probe unloaded\s+n=\d+ p50 [\d.]+ ms p99 [\d.]+ ms", out, re.M), out
    assert re.search(r"^deliveries admitted \d+\s+shed (\d+)", out, re.M), out
    shed = int(re.search(r"shed (\d+)", out).group(1))  # type: ignore[union-attr]
    assert shed > 0, f"200 callers never made the node shed a call:\n{out}"
    assert re.search(r"^node RSS peak \d+ MiB", out, re.M), out
