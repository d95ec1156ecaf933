"""Static checks of docker-compose.yml, docker-compose.wan.yml, the Dockerfile and .dockerignore.

No Docker engine is needed: the compose files are read as YAML and every
command in them is parsed by the real ``provnet`` argument parser (the
runner's shell script line by line, with its variables expanded), every node
service's environment is turned into a real ``NodeConfig`` and every link
service's into a real ``LinkSpec``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import build_parser
from nodes.config import ENV_VARS, NodeConfig
from nodes.linkproxy import LINK_ENV_VARS, LinkSpec
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
NODE_SERVICES = ("a", "b", "c")
#: The runner script's own settings (read by its shell lines, not by provnet).
RUNNER_VARS = {"PROVNET_SMOKE_NODES", "PROVNET_BOUNDARY_ARGS"}
_DEFAULT_VAR = re.compile(r"\$\{(\w+):-([^}]*)\}")


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file, for the keys used here: mappings merge."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    return override


def _interpolate(value: Any) -> Any:
    """``${VAR:-default}`` as Compose reads it with VAR unset."""
    if isinstance(value, str):
        return _DEFAULT_VAR.sub(lambda m: m[2], value)
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    return value


def _compose(*overrides: str) -> dict[str, Any]:
    data = _load("docker-compose.yml")
    for name in overrides:
        data = _merge(data, _load(name))
    result = _interpolate(data)
    assert isinstance(result, dict)
    return result


def _services(*overrides: str) -> dict[str, dict[str, Any]]:
    services = _compose(*overrides)["services"]
    assert isinstance(services, dict)
    return services


def _runner_commands(*overrides: str) -> list[tuple[list[str], list[str]]]:
    """The runner script's lines as (provnet argv, argv after a pipe), variables expanded."""
    runner = _services(*overrides)["runner"]
    assert runner["entrypoint"][:1] == ["bash"], "runner script runs under bash"
    assert "pipefail" in runner["entrypoint"], "a failing provnet before a pipe must fail"
    (script,) = runner["command"]
    env = _env(runner)
    commands = []
    for line in script.replace("$$", "$").splitlines():
        if not line.strip():
            continue
        expanded = re.sub(r"\$(\w+)", lambda m: env[m[1]], line)
        lexer = shlex.shlex(expanded, posix=True, punctuation_chars="|")
        lexer.whitespace_split = True
        words = list(lexer)
        argv, _, piped = (
            (words[: words.index("|")], "|", words[words.index("|") + 1 :])
            if "|" in words
            else (words, "", [])
        )
        assert argv[0] == "provnet", f"runner line does not run provnet: {line!r}"
        commands.append((argv[1:], piped))
    return commands


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


def _node_config(name: str, *overrides: str) -> NodeConfig:
    """The NodeConfig a node service's container builds from its command and environment."""
    service = _services(*overrides)[name]
    return NodeConfig.from_env_and_args(_parse(list(service["command"])), env=_env(service))


def _dockerfile_instructions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^(ARG|FROM|ENTRYPOINT|CMD|USER|VOLUME|EXPOSE)\s+(.*)$", line.strip())
        if match:
            found.setdefault(match[1], []).append(match[2])
    return found


def test_compose_has_three_nodes_and_a_runner() -> None:
    assert set(_services()) == {*NODE_SERVICES, "runner", "operator-key"}


def test_nodes_and_runner_share_the_operator_key_read_only() -> None:
    # A service creates the key in the results folder (then idles); the nodes read
    # its public id (read-only mount), the runner signs with the key itself.
    results = "./results-compose"  # the default the loader interpolates
    key = _services()["operator-key"]
    assert key["volumes"] == [f"{results}:/results"]
    assert key["user"] == _services()["runner"]["user"], "the runner must own the key"
    assert "/results/operator.pub" in " ".join(key["command"])
    assert _env(_services()["runner"])["PROVNET_OPERATOR_KEY_FILE"] == "/results/operator.key"
    for name in NODE_SERVICES:
        service = _services()[name]
        assert f"{results}:/operator:ro" in service["volumes"], name
        config = _node_config(name)
        assert config.operator_key_file == Path("/operator/operator.pub"), name
        depends = service["depends_on"]
        # healthy, not completed: no container but the runner may exit under
        # `up --exit-code-from runner` (any exit aborts the project)
        assert depends["operator-key"] == {"condition": "service_healthy"}
    assert "exec sleep infinity" in " ".join(key["command"])
    assert "/results/operator.pub" in " ".join(key["healthcheck"]["test"])


def test_every_service_runs_under_an_init_process() -> None:
    for name, service in _services().items():
        assert service.get("init") is True, f"service {name}: init: true missing"


def test_one_service_builds_the_repository_image_and_all_run_it() -> None:
    images = {service.get("image") for service in _services().values()}
    assert len(images) == 1, f"one image for all services, got {images}"
    builders = [name for name, service in _services().items() if "build" in service]
    # Built once: several services building one tag would build it several times.
    assert builders == ["runner"], f"services that build: {builders}"
    build = _services()["runner"]["build"]
    assert build["context"] == ".", "build context must be the repository"
    # Unset, the base is the official image the Dockerfile defaults to.
    assert build["args"]["BASE_IMAGE"] == "python:3.11-slim"
    assert set(build["args"]) <= set(_dockerfile_args()), "unknown build args"


def _dockerfile_args() -> dict[str, str]:
    args = {}
    for text in _dockerfile_instructions()["ARG"]:
        key, _, default = text.partition("=")
        args[key] = default
    return args


def test_dockerfile_takes_the_base_image_as_a_build_argument() -> None:
    found = _dockerfile_instructions()
    assert _dockerfile_args()["BASE_IMAGE"] == "python:3.11-slim"
    assert found["FROM"] == ["${BASE_IMAGE}"]
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    # A distribution python is externally managed: install into a venv on PATH.
    assert "python3 -m venv /opt/venv" in text
    assert re.search(r"PATH=/opt/venv/bin:", text)


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
    known = set(ENV_VARS.values()) | {"PROVNET_HOME"} | RUNNER_VARS
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
    (smoke, piped), _ = _runner_commands()
    args = _parse(smoke)
    assert (args.command, args.cluster_command) == ("cluster", "smoke")
    from nodes.smoke import Member

    members = Member.parse_list(args.members)
    assert [m.name for m in members] == list(NODE_SERVICES)
    assert [m.address for m in members] == [f"{n}:50051" for n in NODE_SERVICES]
    assert args.extra_host == "runner"
    # The step lines stay in the runner's log and land in the results folder.
    assert piped == ["tee", "/results/smoke.jsonl"]


def test_runner_then_plays_the_boundary_experiment_into_the_results_folder() -> None:
    runner = _services()["runner"]
    _, (boundary, piped) = _runner_commands()
    args = _parse(boundary)
    assert (args.command, args.experiment_command) == ("experiment", "boundary")
    assert not piped
    # played on the node containers, not on nodes inside the runner's process
    assert [name for name, _ in args.nodes] == list(NODE_SERVICES)
    assert [address for _, address in args.nodes] == [f"{n}:50051" for n in NODE_SERVICES]
    (mount,) = runner["volumes"]
    source, _, target = str(mount).partition(":")
    assert source == "./results-compose", "results go to a folder the user can read"
    assert Path(args.out).is_relative_to(target)
    assert Path(_env(runner)["PROVNET_HOME"]).is_relative_to(target)


def test_each_node_keeps_its_data_on_its_own_named_volume() -> None:
    declared = set(_compose()["volumes"])
    mounts: dict[str, str] = {}
    for name in NODE_SERVICES:
        service = _services()[name]
        volume, *shared = service["volumes"]
        assert shared == ["./results-compose:/operator:ro"], name
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


# ------------------------------------------------------------- WAN override

WAN = "docker-compose.wan.yml"


#: Who calls a node in the Compose cluster: the other nodes and the runner.
CALLERS = (*NODE_SERVICES, "runner")


def _link_spec(node: str) -> tuple[LinkSpec, dict[str, Any]]:
    link = _services(WAN)[f"link-{node}"]
    args = _parse(list(link["command"]))
    assert args.command == "link-proxy"
    env = _env(link)
    assert set(env) <= set(LINK_ENV_VARS.values()), f"link-{node}: unknown variables {env}"
    return LinkSpec.from_env_and_args(vars(args), env), link


@pytest.mark.parametrize("node", NODE_SERVICES)
def test_wan_puts_a_link_proxy_in_front_of_every_node_with_a_link_per_caller(node: str) -> None:
    spec, link = _link_spec(node)
    assert link["image"] == _services()[node]["image"]
    assert link.get("init") is True
    port = int(_node_config(node).listen.rpartition(":")[2])
    assert spec.target == (node, port)
    assert link["depends_on"] == {node: {"condition": "service_healthy"}}
    health = _parse(list(link["healthcheck"]["test"][2:]))
    assert health.addr == f"127.0.0.1:{spec.listen[1]}", "healthcheck asks the node via the proxy"
    # one directed link per caller, each with its own settings; every caller is
    # delayed by default, none partitioned (the runner waits for the links)
    callers = {s.source: spec.for_source(s) for s in spec.sources}
    assert set(callers) == set(CALLERS) - {node}
    for caller, own in callers.items():
        assert own.delay_ms > 0, f"{caller} → {node}"
        assert not own.blackhole, f"{caller} → {node}"
    # the proxy's own link (its healthcheck, unknown sources): no conditions
    assert (spec.delay_ms, spec.blackhole, spec.drop) == (0, False, 0)


def test_wan_links_are_set_per_directed_pair() -> None:
    # links into a node differ by caller, and a → b is not b → a
    a, _ = _link_spec("a")
    b, _ = _link_spec("b")
    into_a = {s.source: a.for_source(s).delay_ms for s in a.sources}
    into_b = {s.source: b.for_source(s).delay_ms for s in b.sources}
    assert into_a["b"] != into_a["c"]
    assert into_b["c"] != into_a["c"]
    # each directed link has its own variable, LINK_<CALLER>_<NODE>
    raw = _load(WAN)["services"]
    for node in NODE_SERVICES:
        text = raw[f"link-{node}"]["environment"][LINK_ENV_VARS["sources"]]
        for caller in set(CALLERS) - {node}:
            var = f"LINK_{caller.upper()}_{node.upper()}"
            assert f"{caller}:${{{var}:-" in text, f"{caller} → {node}: no {var}"


def test_wan_override_routes_every_path_to_a_node_through_its_proxy() -> None:
    via = {n: f"link-{n}:{_link_spec(n)[0].listen[1]}" for n in NODE_SERVICES}
    for name in NODE_SERVICES:
        # a node advertises its proxy, so obligations and heads send demands through it
        assert _node_config(name, WAN).advertised == via[name]
        peers = {p.name: p.address for p in _node_config(name, WAN).peers}
        assert peers == {n: via[n] for n in NODE_SERVICES if n != name}, name
    (smoke, _), (boundary, _) = _runner_commands(WAN)
    from nodes.smoke import Member

    members = {m.name: m.address for m in Member.parse_list(_parse(smoke).members)}
    assert members == via
    # the boundary slice reaches the nodes through their proxies as well
    assert dict(_parse(boundary).nodes) == via
    depends = _services(WAN)["runner"]["depends_on"]
    for name in NODE_SERVICES:
        assert depends[f"link-{name}"] == {"condition": "service_healthy"}


def test_compose_check_script_is_valid_bash() -> None:
    script = REPO / "scripts" / "compose-check.sh"
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False, timeout=30
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------- TLS override

TLS = "docker-compose.tls.yml"
RESULTS = "./results-compose"  # the results folder with PROVNET_RESULTS_DIR unset


def _tls_new_argv(node: str) -> list[str]:
    """The ``provnet tls new`` command tls-certs runs for ``node``, as the shell sees it."""
    (script,) = _services(TLS)["tls-certs"]["command"]
    text = script.replace("$$", "$").replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if "provnet tls new" in ln]
    words = shlex.split(line.replace('"$node"', node).replace("$node", node))
    start = words.index("provnet")
    return words[start + 1 : words.index(">/dev/null")]


def test_tls_certs_makes_one_ca_and_a_certificate_per_node_naming_its_advertised_host() -> None:
    certs = _services(TLS)["tls-certs"]
    assert certs["volumes"] == [f"{RESULTS}:/results"]
    assert certs["image"] == _services()["runner"]["image"]
    assert certs.get("init") is True
    assert _env(certs)["PROVNET_TLS_NODES"].split() == list(NODE_SERVICES)
    for node in NODE_SERVICES:
        args = _parse(_tls_new_argv(node))
        assert (args.command, args.tls_command) == ("tls", "new")
        assert args.ca == Path("/results/tls/ca"), "one CA for every node"
        assert args.out == Path(f"/results/tls/{node}")
        assert args.node == node
        # what the node is dialled by: its advertised host (and its WAN proxy's)
        advertised = _node_config(node, TLS).advertised.rpartition(":")[0]
        wan_advertised = _node_config(node, WAN).advertised.rpartition(":")[0]
        assert {advertised, wan_advertised} <= set(args.host), node
    (script,) = certs["command"]
    # the node user gets its key; it stays up, healthy once every file is there
    assert 'chown 10001:10001 "/results/tls/$$node/$$node.key"' in script
    assert script.rstrip().endswith("exec sleep infinity")
    assert script.index("touch /results/tls/.done") > script.rindex("chown")
    assert "/results/tls/.done" in " ".join(certs["healthcheck"]["test"])
    runner_owner = _services()["runner"]["user"]
    assert _env(certs)["PROVNET_TLS_OWNER"] == runner_owner, "the runner reads the CA key"


@pytest.mark.parametrize("node", NODE_SERVICES)
def test_tls_nodes_read_their_own_certificate_and_key_and_the_ca_read_only(node: str) -> None:
    service = _services(TLS)[node]
    config = _node_config(node, TLS)
    args = _parse(_tls_new_argv(node))
    mount = f"{RESULTS}/tls/{node}:/tls:ro"
    # only its own folder (not the CA's key, not another node's key)
    assert [v for v in service["volumes"] if ":/tls" in v] == [mount]
    assert args.out == Path("/results" + mount.split(":")[0].removeprefix(RESULTS))
    assert (config.tls_ca, config.tls_cert, config.tls_key) == (
        Path("/tls/ca.pem"),
        Path(f"/tls/{node}.pem"),
        Path(f"/tls/{node}.key"),
    )
    # what the base mounts is still mounted (the override repeats it)
    assert set(_services()[node]["volumes"]) < set(service["volumes"])
    assert set(_env(_services()[node])) | {
        "PROVNET_TLS_CA",
        "PROVNET_TLS_CERT",
        "PROVNET_TLS_KEY",
    } == set(_env(service))
    assert service["depends_on"]["tls-certs"] == {"condition": "service_healthy"}
    assert service["depends_on"]["operator-key"] == {"condition": "service_healthy"}
    # the healthcheck is unchanged: `provnet node health` reads PROVNET_TLS_CA and
    # checks the certificate for the host of PROVNET_ADVERTISE
    assert service["healthcheck"] == _services()[node]["healthcheck"]


def test_tls_runner_verifies_the_nodes_with_the_ca_whose_key_lies_beside_it() -> None:
    runner = _services(TLS)["runner"]
    env = _env(runner)
    assert set(env) - set(_env(_services()["runner"])) == {"PROVNET_TLS_CA"}
    ca = Path(env["PROVNET_TLS_CA"])
    # the CA folder tls new writes (ca.pem, ca.key), inside the runner's /results
    assert ca == _parse(_tls_new_argv("a")).ca / "ca.pem"
    assert f"{RESULTS}:/results" in runner["volumes"]
    # the smoke test and the boundary experiment both take it (--tls-ca's variable)
    from nodes.client_tls import ClientTls

    for argv, _ in _runner_commands(TLS):
        args = _parse(argv)
        assert args.tls_ca is None, "from the variable, not a flag"
        assert ClientTls.from_args(args, {"PROVNET_TLS_CA": "/dev/null"}).ca == Path("/dev/null")


# ------------------------------------------------------------- N node services


def _generated(names: list[str], *, tls: bool) -> dict[str, Any]:
    """scripts/stack_file.py --as-compose --names …: the compose file of these nodes."""
    module = load_script("scripts/stack_file.py", "stack_file")
    text = (REPO / "docker-compose.yml").read_text(encoding="utf-8")
    tls_text = (REPO / TLS).read_text(encoding="utf-8") if tls else None
    data = yaml.safe_load(module.render_compose(text, names, tls_text))
    assert isinstance(data, dict)
    result = _interpolate(data)
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize("tls", [False, True])
def test_a_compose_file_of_five_nodes_has_the_same_keys_and_plays_on_all_of_them(
    tls: bool,
) -> None:
    names = ["a", "b", "c", "d", "e"]
    services = _generated(names, tls=tls)["services"]
    base = _services(TLS) if tls else _services()
    assert set(services) == set(names) | (set(base) - set(NODE_SERVICES))
    for name in names:
        service = services[name]
        assert set(_env(service)) == set(_env(base["a"])), name
        config = NodeConfig.from_env_and_args(_parse(list(service["command"])), env=_env(service))
        assert config.name == name
        assert config.advertised == f"{name}:50051"
        assert {p.name for p in config.peers} == set(names) - {name}
        assert service["volumes"][0] == f"{name}-data:/data"
        if tls:
            assert config.tls_cert == Path(f"/tls/{name}.pem")
            assert f"{RESULTS}/tls/{name}:/tls:ro" in service["volumes"]
    runner = services["runner"]
    assert runner["depends_on"] == {n: {"condition": "service_healthy"} for n in names}
    if tls:
        assert _env(services["tls-certs"])["PROVNET_TLS_NODES"].split() == names
    env = _env(runner)
    from nodes.smoke import Member

    assert [m.name for m in Member.parse_list(env["PROVNET_SMOKE_NODES"])] == names
    boundary = _parse(["experiment", "boundary", *shlex.split(env["PROVNET_BOUNDARY_ARGS"])])
    assert [n for n, _ in boundary.nodes] == names
    assert boundary.origins == 3


def test_compose_check_makes_the_compose_file_of_other_nodes_in_the_image() -> None:
    text = (REPO / "scripts" / "compose-check.sh").read_text(encoding="utf-8")
    assert "/scripts/stack_file.py --as-compose" in text
    assert '--names "$PROVNET_COMPOSE_NODES" "${tls_flag[@]}"' in text
    # the generated file's relative paths (build context) are the repository's
    assert (
        'COMPOSE=(docker compose -p "$PROJECT" --project-directory "$REPO" -f "$generated")' in text
    )
