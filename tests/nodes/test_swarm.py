"""Static checks of docker-stack.yml: derived from docker-compose.yml, and still the same cluster.

No Docker engine is needed. The stack file is regenerated from the compose
file and must equal the committed one byte for byte (so the two cannot
drift); then each node service's environment becomes a real ``NodeConfig``
and the runner's lines are parsed by the real ``provnet`` parser, and both
are compared with the compose services they come from.
"""

from __future__ import annotations

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
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
NODE_SERVICES = ("a", "b", "c")


def _stack_module() -> ModuleType:
    return load_script("scripts/stack_file.py", "stack_file")


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


# ------------------------------------------------------------- TLS


def _tls_override() -> str:
    return (REPO / "docker-compose.tls.yml").read_text(encoding="utf-8")


def _compose_tls() -> dict[str, Any]:
    merged = _stack_module().merge_override(
        _load("docker-compose.yml"), yaml.safe_load(_tls_override())
    )
    assert isinstance(merged, dict)
    return merged


def test_tls_stack_file_is_regenerated_from_the_compose_and_tls_files_byte_for_byte() -> None:
    text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    assert _stack_module().render(text, None, _tls_override()) == (
        REPO / "docker-stack.tls.yml"
    ).read_text(encoding="utf-8"), (
        "docker-stack.tls.yml is stale:"
        " .venv/bin/python scripts/stack_file.py --tls > docker-stack.tls.yml"
    )


def _check_tls_stack(stack: dict[str, Any], names: list[str]) -> None:
    compose = _compose_tls()["services"]
    files = {name: secret["file"] for name, secret in stack["secrets"].items()}
    results = "${PROVNET_RESULTS_DIR:?"
    assert "tls-certs" not in stack["services"], "the files are made before the stack"
    for name in names:
        ours = stack["services"][name]
        theirs = compose[name] if name in compose else compose["a"]
        # the compose node's variables, TLS ones included, and no TLS bind mount
        assert set(_env(ours)) == set(_env(theirs)), name
        assert ours["volumes"] == [f"{name}-data:/data"], name
        config = _config(ours)
        by_target = {Path("/run/secrets") / s["target"]: s for s in ours["secrets"]}
        for path in (config.tls_ca, config.tls_cert, config.tls_key):
            assert path in by_target, (name, path)
        ca, cert, key = (by_target[p] for p in (config.tls_ca, config.tls_cert, config.tls_key))
        # the files tls-certs / swarm-check.sh make: tls/ca/ca.pem, tls/<node>/<node>.*
        assert files[ca["source"]].startswith(results)
        assert files[ca["source"]].endswith("}/tls/ca/ca.pem")
        assert files[cert["source"]].endswith(f"}}/tls/{name}/{name}.pem")
        assert files[key["source"]].endswith(f"}}/tls/{name}/{name}.key")
        # the key: the node user's own, private (the image's user, 10001)
        assert (key["uid"], key["gid"], key["mode"]) == ("10001", "10001", 0o400)
        assert "uid" not in cert
        # a node's certificate is its own: no other node's key is handed to it
        others = {f"tls_{n}_key" for n in names if n != name}
        assert not others & {s["source"] for s in ours["secrets"]}, name
    runner = stack["services"]["runner"]
    assert set(_env(runner)) == set(_env(compose["runner"]))
    by_target = {s["target"]: s for s in runner["secrets"]}
    assert _env(runner)["PROVNET_TLS_CA"] == "/run/secrets/ca.pem"
    # the CA key beside the CA certificate, the runner user's own: the smoke's fault nodes
    assert files[by_target["ca.key"]["source"]].endswith("}/tls/ca/ca.key")
    assert files[by_target["ca.pem"]["source"]].endswith("}/tls/ca/ca.pem")
    assert (by_target["ca.key"]["uid"], by_target["ca.key"]["mode"]) == (
        "${PROVNET_UID:-10001}",
        0o400,
    )


def test_tls_stack_hands_each_node_its_own_certificate_and_key_as_secrets() -> None:
    _check_tls_stack(_load("docker-stack.tls.yml"), list(NODE_SERVICES))


def test_tls_stack_of_five_nodes_certifies_each_by_its_own_name() -> None:
    text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    names = ["a", "b", "c", "d", "e"]
    rendered = _stack_module().render(text, names, _tls_override())
    stack = yaml.safe_load(rendered)
    _check_tls_stack(stack, names)
    assert _config(stack["services"]["e"]).tls_cert == Path("/run/secrets/e.pem")


def test_swarm_check_makes_the_tls_files_where_the_stack_reads_them() -> None:
    text = (REPO / "scripts" / "swarm-check.sh").read_text(encoding="utf-8")
    assert '[ "$TLS" = 1 ] && STACK_FILE=$REPO/docker-stack.tls.yml' in text
    # tls new --ca /results/tls/ca ... --out /results/tls/$node: the secrets' files
    line = next(ln for ln in text.splitlines() if "provnet tls new" in ln)
    assert '--ca /results/tls/ca --node "$node" --host "$node"' in line
    assert '--out "/results/tls/$node"' in text
    assert '"${tls_flag[@]}"' in text, "a stack of other nodes is generated with --tls too"
