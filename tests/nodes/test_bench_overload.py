"""The overload benchmark runs end to end (``-m bench``; figures in
docs/measurements/2026-12-01-security-overload-bench.md).

The mechanism itself (shed before the body, serving goes on) is pinned in the
default run by ``tests/nodes/test_overload.py``; this checks that the
benchmark's processes (node, serve probe, delivery probe, load) run and that it reports every
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
    num = r"[\d.]+|nan|inf"
    row = rf"\s+({num}) /\s+({num}) \(n=\s*(\d+)\)"
    serve = re.search(rf"^  serve probe{row}{row}\s+({num}) \(<= 10: (PASS|FAIL)\)", out, re.M)
    assert serve, out
    delivered = re.search(
        rf"^  admitted deliveries{row}{row}\s+({num}) \(<= 10: (PASS|FAIL)\)", out, re.M
    )
    assert delivered, out
    assert int(delivered.group(3)) == 5, out  # the probe's unloaded deliveries
    assert int(delivered.group(6)) > 0, f"no delivery was admitted under load:\n{out}"
    shed = re.search(r"^  shed (\d+) ", out, re.M)
    assert shed, out
    assert int(shed.group(1)) > 0, f"200 callers never made the node shed a call:\n{out}"
    assert re.search(r"^  node RSS peak \d+ MiB .* vs bound \d+ MiB: (PASS|FAIL)", out, re.M), out
    assert re.search(r"^round 1: load average max [\d.]+", out, re.M), out
    # The minimum promise is judged only on a real-time probe, and says which it was.
    promise = re.search(
        r"^    minimum promise\s+(slowest loaded demand ([\d.]+|inf) ms vs MIN_DEADLINE_MS"
        r" 250 ms: (PASS|FAIL)|not judged: the serve probe did not run real-time)$",
        out,
        re.M,
    )
    assert promise, out
