"""Nodes started by hand, as README.md and docs/cluster.md show, driven by the real CLI.

Every node is a real ``provnet node`` process started with the flags the
docs give (``--name``, ``--data-dir``, ``--listen``, ``--peers``, a fault, the
operator key in ``$PROVNET_OPERATOR_KEY_FILE``); the drivers run as the
``provnet`` command. A node started without an operator key must say so once
at start, and every driver must turn the refusal into one error line naming
the node and the fix.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.cluster import HealthState, child_env, free_ports, probe_health

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    env.update(extra)
    return env


def _provnet(
    cwd: Path, *argv: str, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=cwd,
    )


class HandStarted:
    """``provnet node`` processes a, b, c started as the README shows, stopped after."""

    def __init__(self, root: Path, env: dict[str, str], faults: dict[str, str]) -> None:
        self.root = root
        ports = free_ports(3)
        self.addresses = {n: f"127.0.0.1:{p}" for n, p in zip("abc", ports, strict=True)}
        peers = ";".join(f"{n}={a}" for n, a in self.addresses.items())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        base = child_env(env)
        base.update({k: v for k, v in env.items() if k.startswith("PROVNET_")})
        for name, address in self.addresses.items():
            argv = [sys.executable, "-m", "harness", "node", "--name", name]
            argv += ["--data-dir", f"./{name}-data", "--listen", address, "--peers", peers]
            if name in faults:
                argv += ["--fault", faults[name]]
            with (root / f"{name}.log").open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=base, cwd=root
                )
        give_up = time.monotonic() + 60
        for name, address in self.addresses.items():
            while probe_health(address, timeout=0.5) is not HealthState.SERVING:
                if self.procs[name].poll() is not None or time.monotonic() > give_up:
                    self.stop()
                    pytest.fail(f"node {name} did not start: {self.log(name)[-2000:]}")
                time.sleep(0.05)

    def nodes_flag(self) -> str:
        return ",".join(f"{n}={a}" for n, a in self.addresses.items())

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HandStarted, dict[str, str]]]:
    root = tmp_path_factory.mktemp("hand-keyed")
    made = _provnet(root, "keys", "new", "operator.key", env=_env())
    assert made.returncode == 0, made.stderr
    env = _env(PROVNET_OPERATOR_KEY_FILE=str(root / "operator.key"))
    nodes = HandStarted(root, env, {"c": "tamper"})
    try:
        yield nodes, env
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def keyless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HandStarted]:
    root = tmp_path_factory.mktemp("hand-keyless")
    nodes = HandStarted(root, _env(), {})
    try:
        yield nodes
    finally:
        nodes.stop()


def test_readme_hand_started_nodes_with_a_fault_play_the_boundary_slice(
    keyed: tuple[HandStarted, dict[str, str]],
) -> None:
    nodes, env = keyed
    done = _provnet(
        nodes.root,
        "experiment",
        "boundary",
        "--nodes",
        nodes.nodes_flag(),
        "--chain",
        "c,b",
        "--witness",
        "a",
        "--seeds",
        "1",
        "--steps",
        "100",
        "--no-progress",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "(remote, fault c tamper)" in done.stdout
    assert "evidence: bad_data " in done.stdout
    assert "correct origins accused: 0" in done.stdout
    assert (nodes.root / "results-boundary" / "boundary_costs.csv").is_file()


def test_a_node_without_operator_key_says_so_once_at_start(keyless: HandStarted) -> None:
    for name in "abc":
        events = [json.loads(line) for line in keyless.log(name).splitlines() if line]
        refused = [e for e in events if e.get("event") == "control_calls_refused"]
        assert len(refused) == 1, events
        assert "--operator-key-file" in refused[0]["fix"]
        assert "PROVNET_OPERATOR_KEY_FILE" in refused[0]["fix"]


def test_hand_started_data_dir_is_owner_only(keyless: HandStarted) -> None:
    assert (keyless.root / "a-data").stat().st_mode & 0o777 == 0o700


def test_keyed_node_gives_no_refusal_warning(keyed: tuple[HandStarted, dict[str, str]]) -> None:
    nodes, _ = keyed
    assert "control_calls_refused" not in nodes.log("a")


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("provnet: error:")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def test_boundary_on_keyless_nodes_is_one_error_line_naming_node_and_fix(
    keyless: HandStarted,
) -> None:
    done = _provnet(
        keyless.root,
        "experiment",
        "boundary",
        "--nodes",
        keyless.nodes_flag(),
        "--chain",
        "c,b",
        "--witness",
        "a",
        "--no-progress",
        env=_env(),
    )
    assert done.returncode == 2
    line = _one_error_line(done)
    assert "node b at " + keyless.addresses["b"] in line
    assert "started without an operator key" in line
    assert "--operator-key-file" in line
    assert "PROVNET_OPERATOR_KEY_FILE" in line
    assert not (keyless.root / "results-boundary").exists()


def test_boundary_with_a_key_the_nodes_do_not_know_names_the_mismatch(
    keyless: HandStarted, tmp_path: Path
) -> None:
    assert _provnet(tmp_path, "keys", "new", "other.key", env=_env()).returncode == 0
    done = _provnet(
        keyless.root,
        "experiment",
        "boundary",
        "--nodes",
        keyless.nodes_flag(),
        "--no-progress",
        "--out",
        str(tmp_path / "out"),
        env=_env(PROVNET_OPERATOR_KEY_FILE=str(tmp_path / "other.key")),
    )
    assert done.returncode == 2
    line = _one_error_line(done)
    assert "node " in line
    assert "--operator-key-file" in line


def test_smoke_on_keyless_nodes_is_one_error_line(keyless: HandStarted, tmp_path: Path) -> None:
    members = ";".join(f"{n}={a}" for n, a in keyless.addresses.items())
    done = _provnet(
        keyless.root,
        "cluster",
        "smoke",
        "--home",
        str(tmp_path / "home"),
        "--nodes",
        members,
        "--quiet",
        env=_env(),
    )
    assert done.returncode == 2
    line = _one_error_line(done)
    assert "node a at " + keyless.addresses["a"] in line
    assert "started without an operator key" in line
    assert done.stdout == ""  # no step deviates: the run stops at the first refusal


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_operator_warning_is_a_plain_line_on_a_terminal_only() -> None:
    from nodes.app import warn_no_operator

    tty, pipe = _Terminal(), io.StringIO()
    warn_no_operator("a", tty)
    warn_no_operator("a", pipe)
    assert tty.getvalue().startswith("provnet: warning: node a has no operator key")
    assert tty.getvalue().count("\n") == 1
    assert pipe.getvalue() == ""


def test_boundary_on_nodes_that_do_not_answer_is_one_line_exit_1(tmp_path: Path) -> None:
    dead = ",".join(f"{n}=127.0.0.1:{p}" for n, p in zip("ab", free_ports(2), strict=True))
    done = _provnet(
        tmp_path, "experiment", "boundary", "--nodes", dead, "--no-progress", env=_env()
    )
    assert done.returncode == 1
    line = _one_error_line(done)
    assert "origin a at 127.0.0.1:" in line
    assert "does not answer" in line


def test_the_driver_waits_for_a_node_that_is_still_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from harness.boundary import remote

    # a loaded machine starts nodes slowly (raising=False: the code before had no wait)
    monkeypatch.setattr(remote, "_START_WAIT_S", 60.0, raising=False)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    argv = [sys.executable, "-m", "harness", "node", "--name", "a", "--listen", address]
    argv += ["--data-dir", str(tmp_path / "a")]

    async def connect_while_it_starts() -> str:
        task = asyncio.create_task(
            remote.connect_remote(
                [("a", address)],
                origins=["a"],
                relays=(),
                holder="a",
                witness=None,
            )
        )
        await asyncio.sleep(0.3)  # the driver asks first: connection refused
        with (tmp_path / "a.log").open("ab") as log:
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=_env()))
        topo = await task
        await topo.close()
        return topo.origins[0].node_id

    procs: list[subprocess.Popen[bytes]] = []
    try:
        node_id = asyncio.run(connect_while_it_starts())
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
    key = json.loads(
        next(x for x in (tmp_path / "a.log").read_text().splitlines() if "node_key_created" in x)
    )
    assert node_id == key["node_id"]
