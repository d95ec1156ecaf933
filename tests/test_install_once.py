"""Installing: no setuptools warnings, and scripts/main.sh / .ci/run install only when needed."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it() -> None:
    # A TOML table made setuptools >= 77 print its deprecation warning on every build.
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    requires = meta["build-system"]["requires"]
    assert "setuptools>=77" in requires  # the first to read an SPDX expression


def _fake_venv(root: Path) -> Path:
    """A .venv whose python logs every call and runs pip as a no-op."""
    (root / ".venv" / "bin").mkdir(parents=True)
    log = root / "calls.log"
    python = root / ".venv" / "bin" / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case "$1 $2" in "-m pip") exit 0;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    provnet = root / ".venv" / "bin" / "provnet"
    provnet.write_text("#!/bin/sh\nexit 0\n")
    provnet.chmod(0o755)
    return log


def _ensure(root: Path, extras: str) -> None:
    subprocess.run(
        ["bash", "-c", f'. scripts/_venv.sh && ensure_venv "{extras}"'],
        cwd=root,
        check=True,
        timeout=60,
    )


def _pip_calls(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("-m pip")]


def test_ensure_venv_installs_once_per_pyproject(tmp_path: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "_venv.sh", tmp_path / "scripts" / "_venv.sh")
    log = _fake_venv(tmp_path)

    _ensure(tmp_path, "")
    assert _pip_calls(log) == ["-m pip install -q --upgrade pip", "-m pip install -q -e ."]
    digest = hashlib.sha256((tmp_path / "pyproject.toml").read_bytes()).hexdigest()
    assert (tmp_path / ".venv" / ".provnet-install").read_text() == f"{digest} \n"

    log.write_text("")
    _ensure(tmp_path, "")  # nothing changed: no pip at all
    assert _pip_calls(log) == []

    _ensure(tmp_path, "[dev]")  # other extras: installed once
    assert _pip_calls(log)[-1] == "-m pip install -q -e .[dev]"
    log.write_text("")
    _ensure(tmp_path, "")  # a [dev] install serves the main job too
    _ensure(tmp_path, "[dev]")
    assert _pip_calls(log) == []

    with (tmp_path / "pyproject.toml").open("a") as fh:
        fh.write("\n# a new dependency, say\n")
    _ensure(tmp_path, "")
    assert _pip_calls(log)[-1] == "-m pip install -q -e ."


def test_main_job_and_ci_use_the_stamp() -> None:
    for script in (REPO / "scripts" / "main.sh", REPO / ".ci" / "run"):
        text = script.read_text()
        assert ". scripts/_venv.sh" in text
        assert "pip install" not in text
