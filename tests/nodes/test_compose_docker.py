"""The Compose cluster for real: scripts/compose-check.sh end to end.

Selected only with ``-m docker``. The script installs what is missing (the
Docker engine, Compose v2, a base image), builds the image, starts the three
nodes and the runner (smoke test, then the boundary experiment) and tears the
project down. When it cannot, this test FAILS with the script's own error
line: a selected test that skipped would look like a pass.
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


def test_compose_check_runs_smoke_and_boundary_and_tears_down(tmp_path: Path) -> None:
    results = tmp_path / "results-compose"
    project = f"provnet-test-{os.getpid()}"
    env = {
        **os.environ,
        "PROVNET_COMPOSE_RESULTS": str(results),
        "PROVNET_COMPOSE_PROJECT": project,
    }
    try:
        run = subprocess.run(
            ["bash", str(REPO / "scripts" / "compose-check.sh")],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=2600,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/compose-check.sh did not finish in {exc.timeout} s")
    if run.returncode != 0:
        pytest.fail(f"scripts/compose-check.sh exited {run.returncode}:\n{run.stderr[-6000:]}")

    lines = (results / "smoke.jsonl").read_text(encoding="utf-8").splitlines()
    steps = [json.loads(line) for line in lines if line.startswith("{")]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    assert all(s["ok"] for s in steps), [s for s in steps if not s["ok"]]

    boundary = results / "boundary"
    meta = json.loads((boundary / "boundary_meta.json").read_text(encoding="utf-8"))
    assert meta["n_runs"] == 2, meta["n_runs"]
    assert meta["fingerprints_equal"] is True
    for name in ("boundary_costs.csv", "boundary_decisions.csv", "boundary.md"):
        assert (boundary / name).stat().st_size > 0, name
    runner_log = (results / "runner.log").read_text(encoding="utf-8")
    assert "runs deciding exactly as in-process: 2/2" in runner_log

    # Torn down: no container of the project is left.
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == "", f"containers of {project} left behind: {left.stdout}"
