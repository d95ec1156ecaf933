"""The local cluster with real node processes, driven through the real CLI.

Every test runs under its own ``$PROVNET_HOME`` (tmp_path) and ends by
checking that no process whose command line names that directory survives.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodes.cluster import (
    ClusterError,
    NodeSpec,
    cluster_down,
    is_alive,
    load_state,
    node_argv,
    start_node,
)
from nodes.home import Home
from nodes.smoke import SMOKE_STEPS
from tests.nodes.cluster_home import processes_naming, provnet

pytestmark = pytest.mark.timeout(240)






def test_cluster_up_smoke_twice_down_every_step_ok_and_nothing_left_running(home: Path) -> None:
    up = provnet(home, "cluster", "up")
    assert up.returncode == 0, up.stderr
    state = load_state(Home(home))
    assert state is not None
    assert [r.name for r in state.nodes] == ["a", "b", "c"]
    assert len({r.address for r in state.nodes}) == 3

    status = provnet(home, "cluster", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    assert [(r["name"], r["health"], r["alive"]) for r in rows] == [
        ("a", "SERVING", True),
        ("b", "SERVING", True),
        ("c", "SERVING", True),
    ]
    assert all(isinstance(r["counters"], dict) for r in rows)

    smoke = provnet(home, "cluster", "smoke", timeout=180)
    steps = [json.loads(line) for line in smoke.stdout.splitlines()]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    deviating = [s for s in steps if not s["ok"]]
    assert not deviating, json.dumps(deviating, indent=1) + smoke.stderr[-3000:]
    assert smoke.returncode == 0
    assert "smoke step tamper" in smoke.stderr  # progress is visible while it runs

    evidence = {s["name"]: s["observed"].get("evidence_file") for s in steps}
    bad_data = Path(str(evidence["tamper"]))
    assert bad_data.is_relative_to(home)
    verify = provnet(home, "evidence", "verify", str(bad_data))
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # A second run on the same cluster is as good as the first.
    again = provnet(home, "cluster", "smoke", "--quiet", timeout=180)
    assert again.returncode == 0, again.stdout[-3000:]
    assert again.stderr == ""

    # The cluster is as the smoke test found it.
    after = load_state(Home(home))
    assert after == state
    assert all(is_alive(r.pid) for r in state.nodes)

    down = provnet(home, "cluster", "down")
    assert down.returncode == 0, down.stderr
    assert [line.split("\t")[2] for line in down.stdout.splitlines()] == ["terminated"] * 3
    assert not any(is_alive(r.pid) for r in state.nodes)
    assert load_state(Home(home)) is None
    assert processes_naming(home) == []


def test_five_nodes_a_to_e_run_the_smoke_test_and_boundary_with_origins_picked_among_them(
    home: Path, tmp_path: Path
) -> None:
    # Scale-out with the same keys as three nodes: names a–e, `--origins 3` with
    # no names picks running nodes (a, c, d; witness e), never a made-up 'a2'.
    up = provnet(home, "cluster", "up", "--names", "a,b,c,d,e")
    assert up.returncode == 0, up.stderr
    state = load_state(Home(home))
    assert state is not None
    assert [r.name for r in state.nodes] == ["a", "b", "c", "d", "e"]

    smoke = provnet(home, "cluster", "smoke", "--quiet", timeout=180)
    steps = [json.loads(line) for line in smoke.stdout.splitlines()]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    assert smoke.returncode == 0, json.dumps([s for s in steps if not s["ok"]], indent=1)

    out = tmp_path / "boundary"
    argv = ("--cluster", str(home), "--origins", "3", "--seeds", "1", "--steps", "120")
    boundary = provnet(
        home, "experiment", "boundary", *argv, "--out", str(out), "--no-progress", timeout=180
    )
    assert boundary.returncode == 0, boundary.stderr[-3000:]
    assert "runs deciding exactly as in-process: 1/1" in boundary.stdout
    meta = json.loads((out / "boundary_meta.json").read_text(encoding="utf-8"))
    assert meta["settings"]["origins"] == ["a", "c", "d"]
    assert meta["settings"]["witness_name"] == "e"
    # every origin was sent hops and committed folds in its own process
    calls = meta["calls_by_node"]
    assert all(calls.get(f"{n}:CommitCompaction", 0) > 0 for n in ("a", "c", "d")), calls

    down = provnet(home, "cluster", "down")
    assert down.returncode == 0, down.stderr
    assert [line.split("\t")[2] for line in down.stdout.splitlines()] == ["terminated"] * 5


def test_down_sigkills_a_node_that_ignores_sigterm_and_up_recovers_from_stale_state(
    home: Path,
) -> None:
    assert provnet(home, "cluster", "up", "--nodes", "2").returncode == 0
    state = load_state(Home(home))
    assert state is not None
    stuck, other = state.nodes
    refused = provnet(home, "cluster", "up", "--nodes", "2")
    assert refused.returncode == 1
    assert "already running" in refused.stderr

    os.kill(stuck.pid, signal.SIGSTOP)  # a stopped process cannot act on SIGTERM
    down = provnet(home, "cluster", "down", "--grace", "1")
    assert down.returncode == 0, down.stderr
    outcomes = dict(line.split("\t")[0::2] for line in down.stdout.splitlines())
    assert outcomes == {stuck.name: "killed", other.name: "terminated"}

    # The key made on first start is kept: a restart is the same node.
    key = Home(home).data_dir("a") / "node.key"
    first_key = key.read_bytes()
    assert key.stat().st_mode & 0o777 == 0o600

    # A state file whose processes died without 'down' does not block a new start.
    assert provnet(home, "cluster", "up", "--nodes", "1").returncode == 0
    (record,) = load_state(Home(home)).nodes  # type: ignore[union-attr]
    os.kill(record.pid, signal.SIGKILL)
    status = provnet(home, "cluster", "status", "--json")
    assert status.returncode == 1
    row = json.loads(status.stdout)
    assert (row["alive"], row["health"], row["counters"]) == (False, "UNREACHABLE", None)
    again = provnet(home, "cluster", "up", "--nodes", "1")
    assert again.returncode == 0, again.stderr
    assert key.read_bytes() == first_key


def test_a_node_that_cannot_start_fails_fast_with_its_log_tail(home: Path) -> None:
    h = Home(home)
    spec = NodeSpec(
        name="a",
        port=1,  # never reached: the configuration is rejected first
        data_dir=h.data_dir("a"),
        log_file=h.log_file("a"),
        fault="slow",  # 'slow' without a delay is a configuration error
    )
    with pytest.raises(ClusterError) as caught:
        start_node(spec, timeout=30)
    message = str(caught.value)
    assert "exited with code 2 before serving" in message
    assert "--fault ($PROVNET_FAULT) 'slow' needs --fault-delay-ms" in message


def test_a_port_held_with_so_reuseport_is_never_shared_by_a_node(home: Path) -> None:
    # Another listener that allows port sharing: a server with SO_REUSEPORT on
    # would silently bind beside it; a node must refuse to start instead.
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = int(holder.getsockname()[1])
    h = Home(home)
    spec = NodeSpec(name="a", port=port, data_dir=h.data_dir("a"), log_file=h.log_file("a"))
    try:
        with pytest.raises(ClusterError) as caught:
            start_node(spec, timeout=30)
    finally:
        holder.close()
    assert "before serving" in str(caught.value)
    assert f"cannot listen on 127.0.0.1:{port}" in str(caught.value)
    # One `provnet: error:` line and nothing else; nothing (no key file) written first.
    lines = h.log_file("a").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("provnet: error: --listen"), lines
    assert not (h.data_dir("a") / "node.key").exists()


def test_up_retries_with_fresh_ports_when_a_chosen_port_is_taken_meanwhile(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nodes.cluster as cluster

    taker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taker.bind(("127.0.0.1", 0))
    taker.listen()
    taken = int(taker.getsockname()[1])
    real_free_ports = cluster.free_ports
    calls: list[list[int]] = []

    def racing_free_ports(count: int, host: str = cluster.LOOPBACK) -> list[int]:
        # The first choice loses the race: someone else bound it in between.
        ports = [taken] if not calls else real_free_ports(count, host)
        calls.append(ports)
        return ports

    monkeypatch.setattr(cluster, "free_ports", racing_free_ports)
    said: list[str] = []
    try:
        state = cluster.cluster_up(Home(home), ["a"], timeout=60, progress=said.append)
    finally:
        taker.close()
    assert len(calls) == 2
    assert state.nodes[0].address == f"127.0.0.1:{calls[1][0]}"
    assert any("retrying with fresh ports" in line for line in said)
    assert cluster_down(Home(home), grace=2.0)[0][1] == "terminated"


def test_nodes_of_an_up_killed_before_they_serve_are_still_stopped_by_down(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    env["PROVNET_HOME"] = str(home)
    up = subprocess.Popen(
        [sys.executable, "-m", "harness", "cluster", "up"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    state_file = Home(home).state_file
    deadline = time.monotonic() + 30
    while not state_file.exists() and time.monotonic() < deadline and up.poll() is None:
        time.sleep(0.005)
    assert up.poll() is None, "cluster up finished before it could be interrupted"
    up.kill()
    up.wait(timeout=10)
    state = load_state(Home(home))
    assert state is not None
    assert len(state.nodes) == 3
    down = provnet(home, "cluster", "down", "--grace", "2")
    assert down.returncode == 0, down.stderr
    assert not any(is_alive(r.pid) for r in state.nodes)


def test_a_spec_passes_its_min_witnesses_to_the_node_and_checks_it(tmp_path: Path) -> None:
    spec = NodeSpec("a", 7001, tmp_path / "a", tmp_path / "a.log", min_witnesses=2)
    argv = node_argv(spec)
    assert argv[argv.index("--min-witnesses") + 1] == "2"
    assert "--min-witnesses" not in node_argv(NodeSpec("a", 7001, tmp_path, tmp_path / "l"))
    with pytest.raises(ValueError, match="node a: min_witnesses must be at least 1, got 0"):
        NodeSpec("a", 7001, tmp_path / "a", tmp_path / "a.log", min_witnesses=0)
