"""The Swarm stack for real: scripts/swarm-check.sh end to end.

Selected only with ``-m docker``. The script installs what is missing (the
Docker engine, a base image), builds the image, joins or creates a swarm,
deploys docker-stack.yml (three node services and the runner: smoke test,
then the boundary experiment) and removes the stack. When it cannot, this
test FAILS with the script's own error line: a selected test that skipped
would look like a pass.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nodes.smoke import SMOKE_STEPS

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(2700)]


def _docker(*argv: str) -> str:
    run = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_swarm_check_runs_smoke_and_boundary_on_a_stack_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results-swarm"
    stack = f"provnet-test-{os.getpid()}"
    env = {**os.environ, "PROVNET_SWARM_RESULTS": str(results), "PROVNET_SWARM_STACK": stack}
    try:
        run = subprocess.run(
            ["bash", str(REPO / "scripts" / "swarm-check.sh")],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=2600,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/swarm-check.sh did not finish in {exc.timeout} s")
    if run.returncode != 0:
        pytest.fail(f"scripts/swarm-check.sh exited {run.returncode}:\n{run.stderr[-6000:]}")

    lines = (results / "smoke.jsonl").read_text(encoding="utf-8").splitlines()
    steps = [json.loads(line) for line in lines if line.startswith("{")]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    assert all(s["ok"] for s in steps), [s for s in steps if not s["ok"]]
    meta = json.loads((results / "boundary" / "boundary_meta.json").read_text(encoding="utf-8"))
    assert meta["n_runs"] == 2
    assert meta["fingerprints_equal"] is True
    assert "runs deciding exactly as in-process: 2/2" in (results / "runner.log").read_text(
        encoding="utf-8"
    )

    # Nothing of the stack is left: containers, networks, volumes.
    label = f"label=com.docker.stack.namespace={stack}"
    assert _docker("ps", "-a", "-q", "--filter", label) == ""
    assert _docker("network", "ls", "-q", "--filter", label) == ""
    assert _docker("volume", "ls", "-q", "--filter", label) == ""
