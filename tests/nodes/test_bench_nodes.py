"""The node benchmark runs end to end: every row is served, none errs.

A short run (sub-second phases, a few samples) of ``benchmarks/bench_nodes.py``
as a real child process with its real origin child. It checks the machinery
the published ratios rest on — both floors answer correctly, the verified
path serves every demand, one Serve RPC per origin per decision, no
signature and no verification per faithful demand under a head (two
signatures for the signed re-ask of the fault path) — not the
ratios themselves, which are measured by running the script on a quiet box.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_nodes.py"
ROWS = (
    "bare unary",
    "floor: bare + 2 Ed25519 signs",
    "floor: bare + contracts calls, 5-hop",
    "verified 5-hop",
)


def test_bench_nodes_short_run_serves_every_row_without_errors() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--duration",
            "0.6",
            "--samples",
            "20",
            "--concurrency",
            "4",
            "--rounds",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    out = proc.stdout
    # 0 = all targets met, 1 = a ratio missed; anything else is a broken run.
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    steps = (
        "ask step: bare + node core, 5-hop (head)",
        "ask step: + node server, 5-hop (head)",
        "verified 5-hop (head), timed inside",
    )
    for name in (*ROWS, *steps, "verified 1-hop", "verified 50-hop", "signed 5-hop (head)"):
        assert re.search(rf"^{re.escape(name)}\s+\d+\.\d{{3}}\s", out, re.M), (name, out)
    assert re.search(r"the holder's own time \d+ µs around its call, \d+ µs before", out), out
    throughput = out[out.index("throughput") :]
    for name in ROWS:
        line = next(ln for ln in throughput.splitlines() if ln.startswith(name))
        rate, errors = re.findall(r"\d+(?:\.\d+)?", line[len(name) :])[:2]
        assert float(rate) > 0, line
        assert errors == "0", line
    # One verified ÷ bare ratio per interleaved round, and the median judged.
    rounds = re.search(
        r"^ratio verified \(head\) / bare throughput, per round: (.*); pooled", out, re.M
    )
    assert rounds is not None, out
    assert len(rounds.group(1).split(", ")) == 3, rounds.group(0)
    assert re.search(r"= \d+\.\d{3}, median of 3 rounds", out), out
    assert "Serve RPCs per decision (1 origin, folds 1+5+50 hops) = 1.00" in out
    # Both processes' Ed25519 calls counted: revision 3 signs and verifies nothing on
    # the faithful path; its signed re-ask signs twice and verifies nothing.
    assert "faithful under a head 0 signed / 0 verified (target 0 / 0) PASS" in out, out
    assert "the fault path's signed re-ask 200 signed / 0 verified" in out, out
    assert "per-fold statements 200 signed / 200 verified" in out, out
    verdict = "PASS" if proc.returncode == 0 else "FAIL"
    assert out.rstrip().endswith(f"overall {verdict}")


def test_bench_nodes_tls_rows_are_served_next_to_the_plaintext_ones() -> None:
    proc = subprocess.run(
        [
            *(sys.executable, str(BENCH), "--tls", "--duration", "0.6", "--samples", "10"),
            *("--concurrency", "2", "--rounds", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    for name in ("bare unary (TLS)", "verified 5-hop (head) (TLS)"):
        assert re.search(rf"^{re.escape(name)}\s+\d+\.\d{{3}}\s", out, re.M), (name, out)
    assert re.search(r"^verified 5-hop, under a head \(TLS\)\s+\d+\.\d\s+0\s", out, re.M), out
    assert "ratio p50 verified 5-hop (head): TLS / plaintext = " in out
    assert "TLS errors 0" in out
