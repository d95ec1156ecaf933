"""The Compose cluster for real: scripts/compose-check.sh end to end.

Selected only with ``-m docker``. The script installs what is missing (the
Docker engine, Compose v2, a base image), builds the image, starts the three
nodes and the runner (smoke test, then the boundary experiment) and tears the
project down. When it cannot, this test FAILS with the script's own error
line: a selected test that skipped would look like a pass.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.nodes._docker_checks import assert_over_tls, assert_smoke_and_boundary_ran, run_check

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2700)]


def test_compose_check_runs_smoke_and_boundary_and_tears_down(tmp_path: Path) -> None:
    results = tmp_path / "results-compose"
    project = f"provnet-test-{os.getpid()}"
    env = {
        **os.environ,
        "PROVNET_COMPOSE_RESULTS": str(results),
        "PROVNET_COMPOSE_PROJECT": project,
    }
    run_check("compose-check.sh", env)
    assert_smoke_and_boundary_ran(results)
    boundary = results / "boundary"
    for name in ("boundary_costs.csv", "boundary_decisions.csv", "boundary.md"):
        assert (boundary / name).stat().st_size > 0, name

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


def test_compose_check_with_tls_runs_smoke_and_boundary_over_tls(tmp_path: Path) -> None:
    results = tmp_path / "results-compose"
    project = f"provnet-test-tls-{os.getpid()}"
    env = {
        **os.environ,
        "PROVNET_COMPOSE_RESULTS": str(results),
        "PROVNET_COMPOSE_PROJECT": project,
        "PROVNET_COMPOSE_FILES": "docker-compose.tls.yml",
    }
    said = run_check("compose-check.sh", env)
    (tmp_path / "compose-check.log").write_text(said, encoding="utf-8")
    meta = assert_smoke_and_boundary_ran(results)
    assert_over_tls(results, meta)
    # every node got its own certificate from one CA, and its key is not the CA's
    for node in ("a", "b", "c"):
        assert (results / "tls" / node / f"{node}.pem").stat().st_size > 0
    assert (results / "tls" / "ca" / "ca.key").is_file()
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == "", f"containers of {project} left behind: {left.stdout}"
