"""``provnet node`` / ``provnet cluster`` front: flags, environment, errors, paths.

Fast tests, no node processes (those are in test_cluster.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from harness.cli import build_parser, main
from nodes.cli import node_flags
from nodes.cluster import (
    ClusterState,
    NodeRecord,
    NodeSpec,
    StopOutcome,
    child_env,
    free_ports,
    node_argv,
    stop_node,
)
from nodes.config import ENV_VARS, NodeConfig
from nodes.home import DEFAULT_HOME, Home
from nodes.smoke import Member, StepResult


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [*ENV_VARS.values(), "PROVNET_HOME"]:
        monkeypatch.delenv(var, raising=False)


def test_every_node_config_setting_has_a_flag_with_the_field_as_dest() -> None:
    flags = node_flags()
    assert set(flags) == set(ENV_VARS)
    parser = build_parser()
    for key, (flag, var) in flags.items():
        assert var == ENV_VARS[key]
        args = parser.parse_args(["node", flag, "x"])
        assert getattr(args, key) == "x", flag


def test_node_flag_wins_over_variable_and_variable_over_default(clean_env: None) -> None:
    env = {"PROVNET_NAME": "envname", "PROVNET_DATA_DIR": "/tmp/d", "PROVNET_FAULT": "refuse"}
    args = build_parser().parse_args(["node", "--name", "flagname"])
    config = NodeConfig.from_env_and_args(args, env=env)
    assert config.name == "flagname"
    assert str(config.fault) == "refuse"
    assert config.listen == "127.0.0.1:50051"


def test_node_without_name_exits_2_naming_flag_and_variable(
    clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["node", "--data-dir", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "provnet: error: --name ($PROVNET_NAME): is required" in err
    assert "Traceback" not in err


def test_witness_logs_padding_goes_and_a_blank_value_exits_2_naming_the_flag(
    clean_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = "ab" * 32, "cd" * 32
    env = {"PROVNET_NAME": "n", "PROVNET_DATA_DIR": str(tmp_path)}
    padded = NodeConfig.from_env_and_args(None, {**env, "PROVNET_WITNESS_LOGS": f"  {a} ,\t{b} "})
    assert padded.witness_logs == f"{a},{b}"
    args = build_parser().parse_args(["node", "--witness-logs", " * "])
    assert NodeConfig.from_env_and_args(args, env).witness_logs == "*"
    blank = ["node", "--name", "n", "--data-dir", str(tmp_path), "--witness-logs", " \t "]
    assert main(blank) == 2
    err = capsys.readouterr().err
    assert "provnet: error: --witness-logs ($PROVNET_WITNESS_LOGS): blank" in err
    assert "Traceback" not in err


def test_node_with_bad_fault_exits_2_naming_the_value(
    clean_env: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc = main(["node", "--name", "a", "--data-dir", str(tmp_path), "--fault", "explode"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "explode" in err
    assert "PROVNET_FAULT" in err


def test_node_health_on_a_closed_port_is_unreachable_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (port,) = free_ports(1)
    assert main(["node", "health", "--addr", f"127.0.0.1:{port}", "--timeout", "0.5"]) == 1
    assert capsys.readouterr().out.strip() == f"127.0.0.1:{port} UNREACHABLE"


async def test_node_health_follows_the_servers_health_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        argv = ["node", "health", "--addr", f"0.0.0.0:{port}"]
        assert await asyncio.to_thread(main, argv) == 0
        await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await asyncio.to_thread(main, argv) == 1
    finally:
        await server.stop(None)
    # A listen address on all interfaces is asked on loopback.
    out = capsys.readouterr().out.splitlines()
    assert out == [f"127.0.0.1:{port} SERVING", f"127.0.0.1:{port} NOT_SERVING"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--names", "a,B"], "node name 'B' is not usable"),
        (["--names", "a,a"], "must be distinct"),
        (["--nodes", "0"], "--nodes 0: expected 1..26"),
        (["--nodes", "2", "--names", "a,b"], "either --nodes or --names"),
    ],
)
def test_cluster_up_rejects_bad_node_lists_with_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "up", "--home", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not Home(tmp_path).state_file.exists()


def test_cluster_status_and_smoke_without_a_cluster_say_so_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status", "--home", str(tmp_path)]) == 1
    assert f"no cluster recorded under {tmp_path}" in capsys.readouterr().out
    assert main(["cluster", "smoke", "--home", str(tmp_path), "--quiet"]) == 1
    assert "run 'provnet cluster up'" in capsys.readouterr().err
    assert main(["cluster", "down", "--home", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_corrupt_cluster_state_is_named_by_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = Home(tmp_path)
    home.state_file.write_text('{"version": 1,\n "nodes": [oops]}\n', encoding="utf-8")
    for command in ("status", "smoke"):
        assert main(["cluster", command, "--home", str(tmp_path)]) == 2, command
        err = capsys.readouterr().err
        assert f"provnet: error: {home.state_file}: line 2: not JSON" in err, command
    # down recovers instead: it stops the nodes it finds and sets the file aside
    assert main(["cluster", "down", "--home", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"provnet: warning: {home.state_file}: line 2: not JSON" in err


def test_smoke_rejects_a_malformed_node_list_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cluster", "smoke", "--home", str(tmp_path), "--nodes", "a=a:1;b=b"]
    assert main(argv) == 2
    assert "--nodes entry 'b=b': expected name=host:port" in capsys.readouterr().err


def test_smoke_node_list_needs_three_nodes() -> None:
    with pytest.raises(ValueError, match="needs 3 nodes"):
        Member.parse_list("a=a:1,b=b:2")
    members = Member.parse_list("a=a:50051; b=b:50051 c=10.0.0.3:7")
    assert [(m.name, m.address, m.pid) for m in members] == [
        ("a", "a:50051", None),
        ("b", "b:50051", None),
        ("c", "10.0.0.3:7", None),
    ]


def test_home_is_flag_then_variable_then_dot_provnet_made_absolute(tmp_path: Path) -> None:
    assert Home.resolve(tmp_path / "x", env={"PROVNET_HOME": "/elsewhere"}).root == tmp_path / "x"
    assert Home.resolve(None, env={"PROVNET_HOME": str(tmp_path)}).root == tmp_path
    assert Home.resolve(None, env={}).root == Path.cwd() / DEFAULT_HOME
    home = Home(tmp_path)
    assert home.data_dir("a") == tmp_path / "nodes" / "a"
    assert home.log_file("a") == tmp_path / "logs" / "a.log"
    with pytest.raises(ValueError, match="not usable"):
        home.data_dir("../a")


def test_launcher_argv_parses_back_into_the_node_config_it_describes(
    clean_env: None, tmp_path: Path
) -> None:
    spec = NodeSpec(
        name="b",
        port=4242,
        data_dir=tmp_path / "nodes" / "b",
        log_file=tmp_path / "logs" / "b.log",
        peers=("a=127.0.0.1:4241", "c=127.0.0.1:4243"),
        evidence_dir=tmp_path / "evidence" / "b",
        fault="tamper",
    )
    argv = node_argv(spec)
    assert argv[:5] == [sys.executable, "-P", "-m", "harness", "node"]
    config = NodeConfig.from_env_and_args(build_parser().parse_args(argv[4:]), env={})
    assert config.name == "b"
    assert config.listen == "127.0.0.1:4242"
    assert config.data_dir == spec.data_dir
    assert config.evidence_path == spec.evidence_dir
    assert [p.render() for p in config.peers] == list(spec.peers)
    assert str(config.fault) == "tamper"
    assert str(config.log_format) == "json"


def test_launcher_custody_settings_parse_back(clean_env: None, tmp_path: Path) -> None:
    """An extra node the custody experiment starts: custodians, k and operator label."""
    spec = NodeSpec(
        name="o1",
        port=4242,
        data_dir=tmp_path / "o1",
        log_file=tmp_path / "o1.log",
        peers=("c2=127.0.0.1:4243", "c3=127.0.0.1:4244"),
        custodians=("c2", "c3"),
        custody_k=2,
        operator="op1",
    )
    argv = node_argv(spec)
    config = NodeConfig.from_env_and_args(build_parser().parse_args(argv[4:]), env={})
    assert (config.custodians, config.custody_k, config.operator) == (("c2", "c3"), 2, "op1")
    plain = node_argv(NodeSpec(name="a", port=1, data_dir=Path("/d"), log_file=Path("/l")))
    assert "--custodians" not in plain
    assert "--operator" not in plain


def test_cluster_nodes_do_not_inherit_node_settings_from_the_callers_shell() -> None:
    env = child_env({"PROVNET_FAULT": "drop", "PROVNET_HOME": "/h", "PATH": "/bin"})
    assert "PROVNET_FAULT" not in env
    assert env["PROVNET_HOME"] == "/h"
    assert env["PATH"] == "/bin"


def test_cluster_nodes_import_the_launchers_code_not_the_working_directorys() -> None:
    import nodes

    env = child_env({"PYTHONPATH": "/extra"})
    root = str(Path(nodes.__file__).resolve().parents[1])
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/extra"]
    assert "-P" in node_argv(NodeSpec(name="a", port=1, data_dir=Path("/d"), log_file=Path("/l")))


def test_free_ports_are_distinct_and_bindable_without_reuse() -> None:
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_stop_never_signals_a_pid_that_is_no_longer_the_node(tmp_path: Path) -> None:
    # A live process that is not a node of this data dir, e.g. a recycled pid.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record = NodeRecord(
            name="a",
            pid=other.pid,
            address="127.0.0.1:1",
            data_dir=tmp_path / "nodes" / "a",
            log_file=tmp_path / "a.log",
        )
        assert stop_node(record, grace=0.5) is StopOutcome.GONE
        time.sleep(0.2)
        assert other.poll() is None, "the unrelated process was signalled"
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=10)


def test_cluster_state_round_trips_through_its_file(tmp_path: Path) -> None:
    record = NodeRecord("a", 123, "127.0.0.1:5", tmp_path / "a", tmp_path / "a.log", "tamper", 1.5)
    state = ClusterState(nodes=(record,), created_at=2.0)
    home = Home(tmp_path)
    state.save(home.state_file)
    from nodes.cluster import load_state

    assert load_state(home) == state
    assert not list(tmp_path.glob("*.tmp"))


def test_step_result_prints_the_documented_keys() -> None:
    result = StepResult("commit", True, "x", {"k": 1}, {"step_ms": 1.23456})
    assert result.to_json() == {
        "name": "commit",
        "ok": True,
        "expected": "x",
        "observed": {"k": 1},
        "timings": {"step_ms": 1.23},
    }


def test_provnet_help_for_node_and_cluster_runs_without_traceback() -> None:
    for argv in (["node", "--help"], ["cluster", "--help"], ["cluster", "smoke", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "harness", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "COLUMNS": "100"},
        )
        assert done.returncode == 0, done.stderr
        assert "usage: provnet" in done.stdout


def test_node_health_rejects_an_address_without_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "health", "--addr", "localhost"]) == 2
    assert "--addr 'localhost': expected host:port" in capsys.readouterr().err


def test_node_refuses_a_key_file_others_can_read_with_exit_2(tmp_path: Path) -> None:
    key = tmp_path / "node.key"
    key.write_text("not a key\n", encoding="utf-8")
    key.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    (port,) = free_ports(1)
    argv = ["node", "--name", "a", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{port}"]
    done = subprocess.run(
        [sys.executable, "-m", "harness", *argv, "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert f"provnet: error: --data-dir ($PROVNET_DATA_DIR) {tmp_path}:" in done.stderr
    assert "Traceback" not in done.stderr


def test_node_info_prints_the_witness_vkey_a_policy_lists_and_creates_no_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from contracts.witness import witness_vkey
    from contracts.witness_policy import parse_policy
    from nodes.app import load_or_create_identity

    missing = tmp_path / "none"
    assert main(["node", "info", "--data-dir", str(missing)]) == 2
    assert "no node key node.key" in capsys.readouterr().err
    assert not missing.exists()  # info never creates a key
    identity = load_or_create_identity(tmp_path / "w1")
    capsys.readouterr()
    assert main(["node", "info", "--data-dir", str(tmp_path / "w1")]) == 0
    lines = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["node_id"] == identity.node_id
    assert lines["witness_vkey"] == witness_vkey(identity.node_id).to_string()
    # the printed vkey is what a policy's witness line takes
    policy = parse_policy(f"witness w1 {lines['witness_vkey']}\nquorum w1\n".encode())
    assert policy is not None
