"""The Kubernetes manifests (deploy/kubernetes): rendered, schema-valid, and in step with Compose.

No cluster is needed. Each kustomization is rendered by ``kubectl kustomize``
(kubectl's built-in kustomize) from a copy of deploy/kubernetes with a fresh
operator key made as docs/kubernetes.md says; every object it renders is
validated against the Kubernetes schemas (``kubernetes-validate``, strict:
unknown fields are errors), and what the objects configure is read back the
way a pod would see it: each node pod's environment (field references,
ConfigMap keys and ``$(VAR)`` expansion resolved) becomes a real
``NodeConfig``, the link sidecar's a real ``LinkSpec``, the runner's script
lines are parsed by the real ``provnet`` parser -- and compared with
docker-compose.yml, so the two cannot drift apart.

kubectl missing is a failure naming what to install, not a skip: a skipped
render would look like a pass.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from harness.cli import build_parser
from nodes.auth import OPERATOR_KEY_FILENAME, create_operator_key
from nodes.config import ENV_VARS, NodeConfig
from nodes.linkproxy import LINK_ENV_VARS, LinkSpec
from nodes.smoke import Member
from nodes.tls import check_certificate, new_ca, new_node_certificate

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"
KUSTOMIZATIONS = ("base", "overlays/five", "overlays/wan", "overlays/tls")
#: The oldest Kubernetes with gRPC probes GA (1.27 is not in the schema set: 1.29),
#: and the newest schemas kubernetes-validate ships.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
RUNNER_VARS = {"PROVNET_SMOKE_NODES", "PROVNET_BOUNDARY_ARGS"}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl is not on PATH: the Kubernetes manifests cannot be rendered here;"
            " install kubectl (its built-in kustomize renders them offline)"
        )
    return kubectl


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every kustomization rendered, from a copy with an operator key made for it."""
    root = tmp_path_factory.mktemp("kube") / "kubernetes"
    shutil.copytree(
        KUBE, root, ignore=shutil.ignore_patterns("operator.key", "operator.pub", "*.pem", "*.key")
    )
    operator = root / "base" / "operator"
    key = create_operator_key(operator / OPERATOR_KEY_FILENAME)
    (operator / "operator.pub").write_text(key.key_id + "\n", encoding="utf-8")
    # the TLS overlay's files, made as docs/kubernetes.md says
    now = dt.datetime.now(dt.UTC)
    certs = root / "overlays" / "tls" / "certs"
    new_ca(certs, now=now)
    for i in range(3):
        new_node_certificate(certs, f"node-{i}", [f"node-{i}.provnet"], now=now)
    out: dict[str, list[dict[str, Any]]] = {}
    for name in KUSTOMIZATIONS:
        run = subprocess.run(
            [_kubectl(), "kustomize", str(root / name)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, f"kubectl kustomize {name}: {run.stderr}"
        out[name] = [d for d in yaml.safe_load_all(run.stdout) if d]
    return out


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o
        for o in objects
        if o["kind"] == kind and (name is None or o["metadata"]["name"].startswith(name))
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def _container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name}: {len(found)}"
    return found[0]


def _pod_env(objects: list[dict[str, Any]], container: dict[str, Any], pod: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it to pod ``pod``."""
    maps = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            # $(VAR) names a variable defined earlier in the list
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], item["value"])
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.name", source
            env[item["name"]] = pod
        else:
            ref = source["configMapKeyRef"]
            env[item["name"]] = maps[ref["name"]][ref["key"]]
    return env


def _parse(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"provnet {shlex.join(argv)} is not a valid command (exit {exc.code})")


def _nodes(objects: list[dict[str, Any]]) -> Iterator[tuple[str, NodeConfig, dict[str, str]]]:
    """(pod name, its NodeConfig, its environment) for every pod of the StatefulSet."""
    sts = _one(objects, "StatefulSet", "node")
    node = _container(sts["spec"]["template"]["spec"], "node")
    for i in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{i}"
        env = _pod_env(objects, node, pod)
        yield pod, NodeConfig.from_env_and_args(_parse(list(node["args"])), env=env), env


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _compose_env(service: str, *, tls: bool = False) -> dict[str, str]:
    raw = dict(_compose()["services"][service]["environment"])
    if tls:
        override = yaml.safe_load((REPO / "docker-compose.tls.yml").read_text(encoding="utf-8"))
        raw.update(override["services"][service]["environment"])
    return {str(k): str(v) for k, v in raw.items()}


def _provnet_lines(script: str, env: dict[str, str]) -> list[list[str]]:
    """The script's provnet command lines (before any pipe), variables expanded."""
    lines = []
    for line in script.replace("$$", "$").splitlines():
        if not line.strip().startswith("provnet "):
            continue
        expanded = re.sub(r"\$(\w+)", lambda m: env[m[1]], line.replace('"', ""))
        lines.append(shlex.split(expanded.partition("|")[0]))
    return lines


# ------------------------------------------------------------- schemas


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    kinds = sorted(o["kind"] for o in rendered[name])
    secrets = ["Secret"] * (4 if name == "overlays/tls" else 2)
    assert kinds == [
        "ConfigMap",
        "Job",
        "PersistentVolumeClaim",
        *secrets,
        "Service",
        "StatefulSet",
    ], kinds
    for version in VERSIONS:
        for obj in rendered[name]:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {obj['kind']} {obj['metadata']['name']} ({version}): {exc}")


def test_the_validator_rejects_a_named_port_in_a_grpc_probe(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    # not vacuous: the schemas the validation above passed do reject this
    sts = _one(rendered["base"], "StatefulSet")
    node = _container(sts["spec"]["template"]["spec"], "node")
    node["readinessProbe"] = {"grpc": {"port": "grpc"}}
    try:
        with pytest.raises(kubernetes_validate.ValidationError, match="not of type 'integer'"):
            kubernetes_validate.validate(sts, VERSIONS[-1], strict=True)
    finally:
        node["readinessProbe"] = {"grpc": {"port": 50051}}


# ------------------------------------------------------------- nodes


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_each_pod_is_a_node_named_after_its_stable_dns_name_with_the_others_as_peers(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    objects = rendered[name]
    service = _one(objects, "Service")
    sts = _one(objects, "StatefulSet")
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    configs = {pod: config for pod, config, _ in _nodes(objects)}
    assert len(configs) == sts["spec"]["replicas"] == (5 if name == "overlays/five" else 3)
    port = int(_compose_env("a")["PROVNET_LISTEN"].rpartition(":")[2])
    domain = service["metadata"]["name"]
    for pod, config in configs.items():
        assert config.name == pod
        assert config.advertised == f"{pod}.{domain}:{port}"
        peers = {p.name: p.address for p in config.peers}
        assert peers == {other: f"{other}.{domain}:{port}" for other in configs if other != pod}


def test_node_pods_set_the_same_variables_as_the_compose_nodes(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    compose = _compose_env("a")
    compose_config = NodeConfig.from_env_and_args(None, compose)
    for _, config, env in _nodes(rendered["base"]):
        assert set(env) == set(compose), set(env) ^ set(compose)
        assert set(env) <= set(ENV_VARS.values())
        for key in ("listen", "data_dir", "evidence_dir", "operator_key_file", "log_format"):
            assert getattr(config, key) == getattr(compose_config, key), key


def test_probes_ask_the_nodes_grpc_health_service_on_the_port_compose_checks(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    compose_check = _compose()["services"]["a"]["healthcheck"]["test"]
    health = _parse(list(compose_check[2:]))
    assert (health.command, health.node_command) == ("node", "health")
    port = int(health.addr.rpartition(":")[2])
    for name in KUSTOMIZATIONS:
        sts = _one(rendered[name], "StatefulSet")
        node = _container(sts["spec"]["template"]["spec"], "node")
        for probe in ("readinessProbe", "livenessProbe"):
            if name == "overlays/tls":
                # native gRPC probes cannot speak TLS: the Compose healthcheck's command
                assert "grpc" not in node[probe], (name, probe)
                assert node[probe]["exec"]["command"] == compose_check[1:], (name, probe)
                continue
            grpc = node[probe]["grpc"]
            # the whole server's status (service ""), as `provnet node health` asks
            assert grpc == {"port": port}, (name, probe, grpc)


def test_service_is_headless_and_publishes_pods_before_they_are_ready(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    service = _one(objects, "Service")["spec"]
    assert service["clusterIP"] == "None"
    assert service["publishNotReadyAddresses"] is True
    selector = service["selector"].items()
    sts = _one(objects, "StatefulSet")["spec"]
    job = _one(objects, "Job")["spec"]
    # the node pods and the runner pod both get their names from it
    assert selector <= sts["template"]["metadata"]["labels"].items()
    assert selector <= job["template"]["metadata"]["labels"].items()
    assert sts["selector"]["matchLabels"].items() <= sts["template"]["metadata"]["labels"].items()


def test_each_node_keeps_its_key_and_hop_log_on_a_claim_of_its_own(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    sts = _one(rendered["base"], "StatefulSet")["spec"]
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    node = _container(sts["template"]["spec"], "node")
    (mount,) = [m for m in node["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    for _, config, _ in _nodes(rendered["base"]):
        assert config.data_dir.is_relative_to(mount["mountPath"])
        assert config.evidence_path.is_relative_to(mount["mountPath"])
    # the node user owns the claim (fsGroup), as the image's /data
    assert sts["template"]["spec"]["securityContext"]["fsGroup"] == 10001


def test_nodes_read_the_operator_public_key_and_only_the_runner_the_private_key(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    sts = _one(objects, "StatefulSet")["spec"]["template"]["spec"]
    job = _one(objects, "Job")["spec"]["template"]["spec"]
    node_secrets = {v["secret"]["secretName"] for v in sts["volumes"] if "secret" in v}
    job_secrets = {v["secret"]["secretName"] for v in job["volumes"] if "secret" in v}
    (pub,) = node_secrets
    (key,) = job_secrets
    assert set(secrets[pub]["data"]) == {"operator.pub"}
    assert set(secrets[key]["data"]) == {"operator.key"}
    _, config, _ = next(_nodes(objects))
    assert config.operator_key_file is not None
    assert config.operator_key_file.name == "operator.pub"


# ------------------------------------------------------------- runner


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_runner_job_plays_the_compose_runners_commands_on_the_node_pods(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    objects = rendered[name]
    job = _one(objects, "Job")["spec"]["template"]["spec"]
    runner = _container(job, "runner")
    env = _pod_env(objects, runner, "runner")
    compose_runner = _compose()["services"]["runner"]
    compose_env = _compose_env("runner", tls=name == "overlays/tls")
    assert set(env) == set(compose_env), set(env) ^ set(compose_env)
    assert runner["command"][:2] == compose_runner["entrypoint"][:2] == ["bash", "-euo"]
    ours = _provnet_lines(runner["args"][0], env)
    theirs = _provnet_lines(compose_runner["command"][0], compose_env)
    # first a bounded wait for every member's health (Kubernetes has no start
    # order), then the same two commands as the compose runner
    script = runner["args"][0]
    wait = script.index("for member in ${PROVNET_SMOKE_NODES//;/ }; do")
    assert "timeout 600 bash -c" in script[wait:]
    assert "until provnet node health --addr ${member#*=}" in script[wait:]
    assert wait < script.index("provnet cluster smoke")
    assert [line[:3] for line in ours] == [line[:3] for line in theirs]
    assert ours[0][:3] == ["provnet", "cluster", "smoke"]
    assert len(ours) == 2
    smoke, boundary = (_parse(line[1:]) for line in ours)
    pods = {pod: config for pod, config, _ in _nodes(objects)}
    members = Member.parse_list(smoke.members)
    assert len(members) >= 3
    assert {m.name: m.address for m in members}.items() <= {
        p: c.advertised for p, c in pods.items()
    }.items()
    assert dict(boundary.nodes) == {p: c.advertised for p, c in pods.items()}
    assert boundary.out == _parse(theirs[1][1:]).out
    # the runner pod is reachable by the name it gives its fault nodes
    assert smoke.extra_host == f"{job['hostname']}.{job['subdomain']}"
    assert job["subdomain"] == _one(objects, "Service")["metadata"]["name"]
    assert job["restartPolicy"] == "Never"


def test_five_nodes_play_three_origins_picked_among_the_pods(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["overlays/five"]
    runner = _container(_one(objects, "Job")["spec"]["template"]["spec"], "runner")
    env = _pod_env(objects, runner, "runner")
    (boundary,) = [line for line in _provnet_lines(runner["args"][0], env) if "boundary" in line]
    args = _parse(boundary[1:])
    assert args.origins == 3
    from harness.boundary.records import pick_running_origins

    names = [n for n, _ in args.nodes]
    assert pick_running_origins(names, tuple(names[:2]), None, 3) == ("node-0", "node-2", "node-3")


# ------------------------------------------------------------- WAN overlay


def test_wan_overlay_puts_a_link_proxy_in_every_node_pod_in_front_of_the_node(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["overlays/wan"]
    spec = _one(objects, "StatefulSet")["spec"]["template"]["spec"]
    link = _container(spec, "link")
    node = _container(spec, "node")
    args = _parse(list(link["args"]))
    assert args.command == "link-proxy"
    env = _pod_env(objects, link, "node-0")
    assert set(env) <= set(LINK_ENV_VARS.values())
    proxy = LinkSpec.from_env_and_args(vars(args), env)
    for pod, config, _ in _nodes(objects):
        # the node serves behind the proxy; what it advertises is the proxy's port
        host, _, port = config.listen.rpartition(":")
        assert proxy.target == (host, int(port)), pod
        assert host == "127.0.0.1", pod
        assert int(config.advertised.rpartition(":")[2]) == proxy.listen[1]
    assert node["readinessProbe"]["grpc"]["port"] == proxy.listen[1], "probes cross the proxy"
    assert node.get("ports") == [], "the pod's port is the proxy's"
    sources = {s.source: proxy.for_source(s) for s in proxy.sources}
    pods = [pod for pod, _, _ in _nodes(objects)]
    assert set(sources) == {f"{p}.provnet" for p in pods} | {"runner.provnet"}
    assert all(s.delay_ms > 0 and not s.blackhole for s in sources.values())
    assert (proxy.delay_ms, proxy.blackhole) == (0, False), "the kubelet's probes: no conditions"


# ------------------------------------------------------------- TLS overlay


def _secret_files(objects: list[dict[str, Any]], name: str) -> dict[str, bytes]:
    secret = _one(objects, "Secret", name)
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _mounted(pod_spec: dict[str, Any], container: dict[str, Any], path: Path) -> tuple[str, str]:
    """(Secret name, key) a file path of ``container`` comes from."""
    for mount in container["volumeMounts"]:
        if path.parent == Path(mount["mountPath"]):
            (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
            assert mount.get("readOnly") is True, path
            return volume["secret"]["secretName"], path.name
    raise AssertionError(f"{path}: not on a mounted Secret")


def test_tls_pods_set_the_compose_tls_variables_and_each_serves_its_own_certificate(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["overlays/tls"]
    sts = _one(objects, "StatefulSet")["spec"]["template"]["spec"]
    node = _container(sts, "node")
    compose = _compose_env("a", tls=True)
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    now = dt.datetime.now(dt.UTC)
    pods = list(_nodes(objects))
    assert len(pods) == 3
    for pod, config, env in pods:
        assert set(env) == set(compose), set(env) ^ set(compose)
        assert config.tls_ca is not None
        assert config.tls_cert is not None
        assert config.tls_key is not None
        sources = {_mounted(sts, node, p) for p in (config.tls_ca, config.tls_cert, config.tls_key)}
        (secret,) = {s for s, _ in sources}
        files = _secret_files(objects, secret)
        assert {k for _, k in sources} == {"ca.pem", f"{pod}.pem", f"{pod}.key"}, pod
        assert "ca.key" not in files, "the CA's key is on no node"
        assert secrets[secret]["metadata"]["name"].startswith("provnet-tls")
        # the certificate chains to the CA and names the host the pod is dialled by
        der = x509.load_pem_x509_certificate(files[f"{pod}.pem"]).public_bytes(Encoding.DER)
        host = config.advertised.rpartition(":")[0]
        assert check_certificate(der, files["ca.pem"], host, now) is None, pod


def test_tls_runner_verifies_the_nodes_with_the_ca_and_certifies_its_fault_nodes_with_its_key(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["overlays/tls"]
    job = _one(objects, "Job")["spec"]["template"]["spec"]
    runner = _container(job, "runner")
    env = _pod_env(objects, runner, "runner")
    ca = Path(env["PROVNET_TLS_CA"])
    secret, key = _mounted(job, runner, ca)
    files = _secret_files(objects, secret)
    assert key == "ca.pem"
    # ca.key beside ca.pem: what the smoke test looks for (nodes.client_tls)
    assert set(files) == {"ca.pem", "ca.key"}
    nodes_ca = _secret_files(objects, "provnet-tls-ca")["ca.pem"]
    node_secret = next(
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Secret" and "node-0.pem" in o.get("data", {})
    )
    assert _secret_files(objects, node_secret)["ca.pem"] == nodes_ca == files["ca.pem"]
