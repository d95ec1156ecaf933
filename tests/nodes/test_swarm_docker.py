"""The Swarm stack for real: scripts/swarm-check.sh end to end.

Selected only with ``-m docker``. The script installs what is missing (the
Docker engine, a base image), builds the image, joins or creates a swarm,
deploys docker-stack.yml (three node services and the runner: smoke test,
then the boundary experiment) and removes the stack. When it cannot, this
test FAILS with the script's own error line: a selected test that skipped
would look like a pass.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.nodes._docker_checks import assert_over_tls, assert_smoke_and_boundary_ran, run_check

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
    run_check("swarm-check.sh", env)
    assert_smoke_and_boundary_ran(results)

    # Nothing of the stack is left: containers, networks, volumes.
    label = f"label=com.docker.stack.namespace={stack}"
    assert _docker("ps", "-a", "-q", "--filter", label) == ""
    assert _docker("network", "ls", "-q", "--filter", label) == ""
    assert _docker("volume", "ls", "-q", "--filter", label) == ""


def test_swarm_check_with_tls_runs_smoke_and_boundary_over_tls_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results-swarm"
    stack = f"provnet-test-tls-{os.getpid()}"
    env = {
        **os.environ,
        "PROVNET_SWARM_RESULTS": str(results),
        "PROVNET_SWARM_STACK": stack,
        "PROVNET_SWARM_TLS": "1",
    }
    said = run_check("swarm-check.sh", env)
    (tmp_path / "swarm-check.log").write_text(said, encoding="utf-8")
    meta = assert_smoke_and_boundary_ran(results)
    assert_over_tls(results, meta)
    label = f"label=com.docker.stack.namespace={stack}"
    assert _docker("ps", "-a", "-q", "--filter", label) == ""
    assert _docker("network", "ls", "-q", "--filter", label) == ""
    assert _docker("volume", "ls", "-q", "--filter", label) == ""
