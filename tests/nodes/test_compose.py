"""Static checks of docker-compose.yml, the Dockerfile and .dockerignore.

No Docker engine is needed: the compose file is read as YAML and every command
in it is parsed by the real ``provnet`` argument parser, and every node
service's environment is turned into a real ``NodeConfig``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import build_parser
from nodes.config import ENV_VARS, NodeConfig

REPO = Path(__file__).resolve().parents[2]
NODE_SERVICES = ("a", "b", "c")


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


def _env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment", {})
    assert isinstance(raw, dict), "environment must be a mapping"
    return {str(k): str(v) for k, v in raw.items()}


def _parse(argv: list[str]) -> argparse.Namespace:
    """Parse like the container would: argparse errors become a failed test, not an exit."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse rejects unknown commands/flags this way
        pytest.fail(f"provnet {shlex.join(argv)} is not a valid command (exit {exc.code})")


def _node_config(name: str) -> NodeConfig:
    """The NodeConfig a node service's container builds from its command and environment."""
    service = _services()[name]
    return NodeConfig.from_env_and_args(_parse(list(service["command"])), env=_env(service))


def _dockerfile_instructions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^(FROM|ENTRYPOINT|CMD|USER|VOLUME|EXPOSE)\s+(.*)$", line.strip())
        if match:
            found.setdefault(match[1], []).append(match[2])
    return found


def test_compose_has_three_nodes_and_a_runner() -> None:
    assert set(_services()) == {*NODE_SERVICES, "runner", "operator-key"}


def test_nodes_and_runner_share_the_operator_key_read_only() -> None:
    # The one-shot service creates the key; nodes authorise it, the runner signs with it.
    key = _services()["operator-key"]
    assert key["volumes"] == ["operator:/operator"]
    assert "/operator/operator.key" in " ".join(key["command"])
    for name in (*NODE_SERVICES, "runner"):
        service = _services()[name]
        assert "operator:/operator:ro" in service["volumes"], name
        assert _env(service)["PROVNET_OPERATOR_KEY_FILE"] == "/operator/operator.key", name
    for name in NODE_SERVICES:
        config = _node_config(name)
        assert config.operator_key_file == Path("/operator/operator.key"), name
        depends = _services()[name]["depends_on"]
        assert depends["operator-key"] == {"condition": "service_completed_successfully"}


def test_every_service_runs_under_an_init_process() -> None:
    for name, service in _services().items():
        assert service.get("init") is True, f"service {name}: init: true missing"


def test_every_service_builds_the_repository_image() -> None:
    images = {service.get("image") for service in _services().values()}
    assert len(images) == 1, f"one image for all services, got {images}"
    for name, service in _services().items():
        assert service.get("build") == ".", f"service {name}: build context must be the repo"


def test_node_commands_parse_as_provnet_node_and_build_a_node_config() -> None:
    for name in NODE_SERVICES:
        service = _services()[name]
        args = _parse(list(service["command"]))
        assert (args.command, args.node_command) == ("node", None), name
        config = NodeConfig.from_env_and_args(args, env=_env(service))
        assert config.name == name
        assert config.listen.startswith("0.0.0.0:"), f"{name} must listen beyond loopback"
        assert config.advertised == f"{name}:{config.listen.rpartition(':')[2]}"


def test_node_environment_uses_only_node_config_variables() -> None:
    known = set(ENV_VARS.values())
    for name in NODE_SERVICES:
        unknown = {k for k in _env(_services()[name]) if k not in known}
        assert not unknown, f"service {name}: variables NodeConfig does not read: {unknown}"


def test_runner_environment_uses_only_known_variables() -> None:
    known = set(ENV_VARS.values()) | {"PROVNET_HOME"}
    unknown = {k for k in _env(_services()["runner"]) if k not in known}
    assert not unknown, f"runner: unknown variables {unknown}"


def test_peers_name_the_other_node_services_at_their_listen_ports() -> None:
    ports = {}
    configs = {}
    for name in NODE_SERVICES:
        configs[name] = _node_config(name)
        ports[name] = configs[name].listen.rpartition(":")[2]
    for name, config in configs.items():
        peers = {p.name: p.address for p in config.peers}
        expected = {other: f"{other}:{ports[other]}" for other in NODE_SERVICES if other != name}
        assert peers == expected, f"service {name}: peers {peers}"


def test_healthchecks_ask_the_grpc_health_service_through_provnet() -> None:
    for name in NODE_SERVICES:
        service = _services()[name]
        test = service["healthcheck"]["test"]
        assert test[:2] == ["CMD", "provnet"], f"{name}: healthcheck must exec provnet"
        args = _parse(list(test[2:]))
        assert (args.command, args.node_command) == ("node", "health")
        port = _node_config(name).listen.rpartition(":")[2]
        assert args.addr == f"127.0.0.1:{port}", f"{name}: healthcheck asks {args.addr}"


def test_runner_waits_for_healthy_nodes_and_runs_the_smoke_test_on_them() -> None:
    runner = _services()["runner"]
    depends = runner["depends_on"]
    assert set(depends) == set(NODE_SERVICES)
    for name in NODE_SERVICES:
        assert depends[name] == {"condition": "service_healthy"}, name
    args = _parse(list(runner["command"]))
    assert (args.command, args.cluster_command) == ("cluster", "smoke")
    from nodes.smoke import Member

    members = Member.parse_list(args.members)
    assert [m.name for m in members] == list(NODE_SERVICES)
    assert [m.address for m in members] == [f"{n}:50051" for n in NODE_SERVICES]
    assert args.extra_host == "runner"


def test_each_node_keeps_its_data_on_its_own_named_volume() -> None:
    declared = set(_compose()["volumes"])
    mounts: dict[str, str] = {}
    for name in NODE_SERVICES:
        service = _services()[name]
        volume, *shared = service["volumes"]
        assert shared == ["operator:/operator:ro"], f"{name}: only the operator key is shared"
        source, _, target = str(volume).partition(":")
        assert source in declared, f"{name}: volume {source} is not a declared named volume"
        assert source not in mounts.values(), f"{name} shares volume {source}"
        mounts[name] = source
        config = _node_config(name)
        assert config.data_dir.is_relative_to(target), f"{name}: data dir outside the volume"
        assert config.evidence_path.is_relative_to(target), f"{name}: evidence outside the volume"


def test_dockerfile_entrypoint_is_the_provnet_console_script() -> None:
    found = _dockerfile_instructions()
    assert found["ENTRYPOINT"] == ['["provnet"]']
    assert found["CMD"] == ['["node"]']
    assert found["USER"][-1] != "root"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["provnet"] == "harness.cli:main"


def test_dockerfile_copies_every_package_the_console_script_needs() -> None:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    for package in ("contracts", "nodes", "harness"):
        assert re.search(rf"^COPY {package} \./{package}$", text, re.M), package
    assert re.search(r"^COPY pyproject\.toml README\.md \./$", text, re.M)


def test_dockerignore_keeps_the_environment_and_history_out_of_the_image() -> None:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    ignored = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", ".provnet"} <= ignored
    assert not {"contracts", "nodes", "harness", "pyproject.toml", "README.md"} & ignored
