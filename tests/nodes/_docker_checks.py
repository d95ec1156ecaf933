"""What the Docker end-to-end tests share: run a check script, read what its runner wrote.

``scripts/compose-check.sh`` and ``scripts/swarm-check.sh`` both leave the
runner's smoke lines, the boundary results and its log in one results
directory; a script that fails (or cannot set up Docker) FAILS the test with
its own error lines, never skips it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodes.smoke import SMOKE_STEPS

REPO = Path(__file__).resolve().parents[2]


def run_check(script: str, env: dict[str, str], timeout: float = 2600) -> str:
    """Run ``scripts/<script>`` from the repository; fail the test with its stderr if it
    fails, else return what it printed on stderr (its progress lines)."""
    try:
        run = subprocess.run(
            ["bash", str(REPO / "scripts" / script)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/{script} did not finish in {exc.timeout} s")
    if run.returncode != 0:
        pytest.fail(f"scripts/{script} exited {run.returncode}:\n{run.stderr[-6000:]}")
    return run.stderr


def assert_over_tls(results: Path, meta: dict[str, Any]) -> None:
    """The runner's smoke test and boundary slice reached the nodes over TLS."""
    assert meta["settings"]["tls"] is True
    runner_log = (results / "runner.log").read_text(encoding="utf-8")
    assert "gRPC over TLS to" in runner_log
    # the smoke's fault nodes served a certificate made with the CA key beside the CA
    assert list((results / "home" / "smoke").glob("*/tls/extra.pem")), "no fault-node certificate"


def assert_smoke_and_boundary_ran(results: Path) -> dict[str, Any]:
    """Every smoke step ok, and two boundary runs deciding exactly as in-process;
    returns the boundary's meta."""
    lines = (results / "smoke.jsonl").read_text(encoding="utf-8").splitlines()
    steps = [json.loads(line) for line in lines if line.startswith("{")]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    assert all(s["ok"] for s in steps), [s for s in steps if not s["ok"]]
    meta: dict[str, Any] = json.loads(
        (results / "boundary" / "boundary_meta.json").read_text(encoding="utf-8")
    )
    assert meta["n_runs"] == 2, meta["n_runs"]
    assert meta["fingerprints_equal"] is True
    runner_log = (results / "runner.log").read_text(encoding="utf-8")
    assert "runs deciding exactly as in-process: 2/2" in runner_log
    return meta
