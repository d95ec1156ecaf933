"""Static checks of docker-stack.yml: derived from docker-compose.yml, and still the same cluster.

No Docker engine is needed. The stack file is regenerated from the compose
file and must equal the committed one byte for byte (so the two cannot
drift); then each node service's environment becomes a real ``NodeConfig``
and the runner's lines are parsed by the real ``provnet`` parser, and both
are compared with the compose services they come from.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from harness.cli import build_parser
from nodes.config import NodeConfig

REPO = Path(__file__).resolve().parents[2]
NODE_SERVICES = ("a", "b", "c")


def _stack_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stack_file", REPO / "scripts" / "stack_file.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in service["environment"].items()}


def _config(service: dict[str, Any]) -> NodeConfig:
    args = build_parser().parse_args(list(service["command"]))
    return NodeConfig.from_env_and_args(args, env=_env(service))


def _provnet_lines(script: str, env: dict[str, str]) -> list[list[str]]:
    lines = []
    for line in script.replace("$$", "$").splitlines():
        if line.strip().startswith("provnet "):
            expanded = re.sub(r"\$(\w+)", lambda m: env[m[1]], line.replace('"', ""))
            lines.append(shlex.split(expanded.partition("|")[0]))
    return lines


def test_stack_file_is_regenerated_from_the_compose_file_byte_for_byte() -> None:
    text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert _stack_module().render(text) == (REPO / "docker-stack.yml").read_text(
        encoding="utf-8"
    ), "docker-stack.yml is stale: .venv/bin/python scripts/stack_file.py > docker-stack.yml"


def test_stack_file_has_none_of_what_docker_stack_rejects_or_ignores() -> None:
    stack = _load("docker-stack.yml")
    assert "name" not in stack, "docker stack config rejects a top-level name"
    for name, service in stack["services"].items():
        assert "build" not in service, name
        assert "depends_on" not in service, f"{name}: swarm ignores start order"
        # service names resolve to the tasks themselves (a VIP did not route here)
        assert service["deploy"]["endpoint_mode"] == "dnsrr", name
        assert service.get("init") is True, name


def test_stack_nodes_are_the_compose_nodes_with_the_operator_key_as_a_secret() -> None:
    compose = _load("docker-compose.yml")["services"]
    stack = _load("docker-stack.yml")
    assert set(stack["services"]) == {*NODE_SERVICES, "runner"}
    for name in NODE_SERVICES:
        ours, theirs = stack["services"][name], compose[name]
        assert set(_env(ours)) == set(_env(theirs)), name
        mine, compose_config = _config(ours), _config(theirs)
        for key in ("name", "listen", "advertised", "peers", "data_dir", "evidence_path"):
            assert getattr(mine, key) == getattr(compose_config, key), (name, key)
        assert ours["healthcheck"] == theirs["healthcheck"], name
        assert ours["volumes"] == [theirs["volumes"][0]], f"{name}: only its own data volume"
        (secret,) = ours["secrets"]
        assert mine.operator_key_file == Path("/run/secrets") / secret["target"]
        assert stack["secrets"][secret["source"]]["file"].endswith("/operator.pub")
        assert ours["deploy"]["restart_policy"]["condition"] == "on-failure"


def test_stack_runner_waits_for_every_node_then_runs_the_compose_runners_commands() -> None:
    compose = _load("docker-compose.yml")["services"]["runner"]
    runner = _load("docker-stack.yml")["services"]["runner"]
    assert set(_env(runner)) == set(_env(compose))
    (script,) = runner["command"]
    (compose_script,) = compose["command"]
    assert script.endswith(compose_script), "the compose runner's script, after the wait"
    wait = script[: -len(compose_script)]
    assert "for member in $${PROVNET_SMOKE_NODES//;/ }; do" in wait
    assert "timeout 600" in wait
    assert "until provnet node health --addr $${member#*=}" in wait
    assert _provnet_lines(script, _env(runner)) == _provnet_lines(compose_script, _env(compose))
    (secret,) = runner["secrets"]
    assert _env(runner)["PROVNET_OPERATOR_KEY_FILE"] == f"/run/secrets/{secret['target']}"
    # the key file must be the runner user's own and private
    assert (secret["uid"], secret["gid"], secret["mode"]) == (
        "${PROVNET_UID:-10001}",
        "${PROVNET_GID:-10001}",
        0o400,
    )
    assert runner["user"] == "${PROVNET_UID:-10001}:${PROVNET_GID:-10001}"
    assert runner["deploy"]["restart_policy"] == {"condition": "none"}
    assert runner["deploy"]["placement"]["constraints"] == ["node.role == manager"]
    (mount,) = runner["volumes"]
    assert mount.startswith("${PROVNET_RESULTS_DIR:?")
    assert mount.endswith(":/results")


def test_swarm_check_script_is_valid_bash_and_sources_compose_checks_steps() -> None:
    for name in ("swarm-check.sh", "compose-check.sh"):
        run = subprocess.run(
            ["bash", "-n", str(REPO / "scripts" / name)],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
    text = (REPO / "scripts" / "swarm-check.sh").read_text(encoding="utf-8")
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/compose-check.sh"' in text
    # sourcing defines the steps and runs nothing
    run = subprocess.run(
        ["bash", "-c", f"source {REPO / 'scripts' / 'compose-check.sh'}; type ensure_engine"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    assert "ensure_engine is a function" in run.stdout
    assert "compose-check:" not in run.stderr


def test_a_stack_of_five_nodes_keeps_the_keys_and_plays_three_origins_among_them() -> None:
    # Scale-out with the same configuration keys: five node services shaped like `a`
    compose_text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    names = ["a", "b", "c", "d", "e"]
    stack = yaml.safe_load(_stack_module().render(compose_text, names))
    compose = _load("docker-compose.yml")["services"]
    assert set(stack["services"]) == {*names, "runner"}
    assert set(stack["volumes"]) == {f"{n}-data" for n in names}
    for name in names:
        service = stack["services"][name]
        assert set(_env(service)) == set(_env(compose["a"])), name
        config = _config(service)
        assert config.name == name
        assert config.advertised == f"{name}:50051"
        assert {p.name: p.address for p in config.peers} == {
            n: f"{n}:50051" for n in names if n != name
        }
        assert service["volumes"] == [f"{name}-data:/data"]
    runner = stack["services"]["runner"]
    smoke, boundary = _provnet_lines(runner["command"][0], _env(runner))
    parsed = build_parser().parse_args(boundary[1:])
    assert [n for n, _ in parsed.nodes] == names
    assert parsed.origins == 3
    from harness.boundary.records import pick_running_origins

    assert pick_running_origins(names, ("a", "b"), None, 3) == ("a", "c", "d")
    assert "--nodes" in smoke
    with pytest.raises(ValueError, match="at least 3 distinct"):
        _stack_module().render(compose_text, ["a", "b"])
