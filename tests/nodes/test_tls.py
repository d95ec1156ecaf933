"""TLS between nodes (:mod:`nodes.tls`), on loopback with certificates each test makes.

A node serving a certificate from the cluster CA is reached by a holder that
trusts that CA; one serving a certificate from another CA, an expired one or
one that does not name the host dialed is refused with a status that says
which check failed, and nobody is accused. Control calls over TLS still need
their per-call signature; the serve plane stays open to any bearer.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

from harness.cli import main as provnet
from nodes.app import RunningNode, start_node
from nodes.config import ConfigError, NodeConfig
from nodes.control import NodeClient, RpcFailed
from nodes.messages import Outcome
from nodes.tls import TLS_FAILED, TlsFiles, new_ca, new_node_certificate
from nodes.transport import CallFailed, GrpcTransport
from tests.nodes.rpc_support import (
    TEST_OPERATOR,
    audit,
    grpc_holder,
    held_fold,
    hop_json,
    single,
    stop_all,
)

pytestmark = pytest.mark.timeout(120)

NOW = dt.datetime.now(dt.UTC)


def node_config(root: Path, name: str, tls: TlsFiles) -> NodeConfig:
    return NodeConfig(
        name=name,
        data_dir=root / name,
        listen="127.0.0.1:0",
        deadline_ms=500,
        operator_keys=(TEST_OPERATOR.key_id,),
        tls_ca=tls.ca,
        tls_cert=tls.cert,
        tls_key=tls.key,
    )


async def tls_node(root: Path, name: str, ca_dir: Path, cert_dir: Path) -> RunningNode:
    """Node ``name`` serving ``cert_dir/<name>.pem``, trusting the CA in ``ca_dir``."""
    tls = TlsFiles(ca_dir / "ca.pem", cert_dir / f"{name}.pem", cert_dir / f"{name}.key")
    config = node_config(root, name, tls)
    return await start_node(config, transport=GrpcTransport(tls=tls))


async def rehydrate_from(root: Path, origin: RunningNode, ca_dir: Path) -> tuple[Outcome, str]:
    _, seqs = await origin.core.append([hop_json(1), hop_json(2)])
    fold = held_fold(await origin.core.commit_fold("v1", seqs))
    transport = GrpcTransport(tls=TlsFiles(ca=ca_dir / "ca.pem"))
    try:
        report = await grpc_holder(root, transport).rehydrate("v1", [fold])
    finally:
        await transport.close()
    outcome = single(audit(report, {origin.node_id}))
    assert not outcome.accuses
    assert not outcome.evidence
    assert not (root / "evidence").exists() or not any((root / "evidence").iterdir())
    return outcome.outcome, outcome.detail


async def test_a_holder_trusting_the_cluster_ca_is_served_over_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    new_ca(ca, now=NOW)
    new_node_certificate(ca, "a", ["127.0.0.1"], now=NOW)
    a = await tls_node(tmp_path, "a", ca, ca)
    try:
        outcome, detail = await rehydrate_from(tmp_path, a, ca)
        assert outcome is Outcome.SERVED, detail
        # A plaintext caller cannot talk to a TLS node at all.
        plain = GrpcTransport()
        try:
            with pytest.raises(CallFailed) as raised:
                await plain.demand(a.address, [b"x"], timeout=0.5)
            assert raised.value.no_answer
        finally:
            await plain.close()
    finally:
        await stop_all([a])


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("other_ca", "not signed by the configured CA"),
        ("expired", "expired at"),
        ("wrong_host", "does not name the host '127.0.0.1'"),
    ],
)
async def test_a_bad_certificate_is_refused_naming_the_check_and_accuses_nobody(
    tmp_path: Path, case: str, expected: str
) -> None:
    ca, other = tmp_path / "ca", tmp_path / "other"
    new_ca(ca, now=NOW)
    if case == "other_ca":
        new_ca(other, now=NOW)
        new_node_certificate(other, "a", ["127.0.0.1"], now=NOW)
    elif case == "expired":
        new_node_certificate(ca, "a", ["127.0.0.1"], now=NOW - dt.timedelta(days=3), days=1)
    else:
        new_node_certificate(ca, "a", ["node-a.example"], now=NOW)
    a = await tls_node(tmp_path, "a", ca, other if case == "other_ca" else ca)
    try:
        outcome, detail = await rehydrate_from(tmp_path, a, ca)
        assert outcome is Outcome.REJECTED, detail
        assert detail.startswith(f"{TLS_FAILED}: TLS: certificate 'CN=a'"), detail
        assert expected in detail
        # A fail-fast call names it the same way.
        transport = GrpcTransport(tls=TlsFiles(ca=ca / "ca.pem"))
        try:
            with pytest.raises(CallFailed, match=expected) as raised:
                await transport.challenge(
                    a.address,
                    commitment=b"",
                    obligation=b"",
                    demand=b"",
                    origin_address=a.address,
                    timeout=2.0,
                )
            assert raised.value.code == TLS_FAILED
            assert not raised.value.no_answer
        finally:
            await transport.close()
    finally:
        await stop_all([a])


async def test_control_calls_over_tls_still_need_their_signature(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    new_ca(ca, now=NOW)
    new_node_certificate(ca, "a", ["localhost"], now=NOW)
    a = await tls_node(tmp_path, "a", ca, ca)
    address = f"localhost:{a.server.port}"
    tls = TlsFiles(ca=ca / "ca.pem")
    try:
        async with NodeClient(address, TEST_OPERATOR, tls=tls, node_id=a.node_id) as client:
            assert (await client.info()).node_id == a.node_id
            assert len(await client.append([hop_json(1)])) == 1
        async with NodeClient(address, None, tls=tls) as stranger:
            assert (await stranger.info()).node_id == a.node_id  # the open plane: anyone
            with pytest.raises(RpcFailed) as raised:
                await stranger.append([hop_json(2)])
            assert raised.value.code == "UNAUTHENTICATED"
    finally:
        await stop_all([a])


def test_tls_settings_go_together(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="go together"):
        NodeConfig(name="a", data_dir=tmp_path, tls_cert=tmp_path / "a.pem", tls_ca=tmp_path)
    with pytest.raises(ConfigError, match=r"--tls-cert \(\$PROVNET_TLS_CERT\) needs --tls-ca"):
        NodeConfig(name="a", data_dir=tmp_path, tls_cert=tmp_path / "a", tls_key=tmp_path / "k")
    config = NodeConfig.from_env_and_args(
        {"name": "a", "data_dir": str(tmp_path)},
        env={"PROVNET_TLS_CA": "/c/ca.pem", "PROVNET_TLS_CERT": "/c/a.pem", "PROVNET_TLS_KEY": "k"},
    )
    assert (config.tls_ca, config.tls_cert, config.tls_key) == (
        Path("/c/ca.pem"),
        Path("/c/a.pem"),
        Path("k"),
    )


async def test_a_missing_tls_file_fails_the_start_naming_it(tmp_path: Path) -> None:
    tls = TlsFiles(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key")
    with pytest.raises(ConfigError, match=r"TLS certificate .*a\.pem: cannot read"):
        await start_node(node_config(tmp_path, "a", tls))


def test_provnet_tls_new_makes_a_ca_once_and_a_certificate_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography import x509

    ca = tmp_path / "ca"
    assert provnet(["tls", "new", "--ca", str(ca), "--node", "a", "--host", "10.0.0.1"]) == 0
    first = (ca / "ca.pem").read_bytes()
    assert provnet(["tls", "new", "--ca", str(ca), "--node", "b"]) == 0
    assert (ca / "ca.pem").read_bytes() == first  # one CA for the cluster
    out = capsys.readouterr().out
    assert out.count("created CA") == 1
    cert = x509.load_pem_x509_certificate((ca / "b.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["b"]
    assert (ca / "b.key").stat().st_mode & 0o077 == 0


async def test_node_health_asks_a_tls_node_over_tls_for_its_advertised_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Compose healthcheck: loopback dialed, the certificate checked for the
    advertised host; plaintext gets no answer from a TLS node."""
    ca = tmp_path / "ca"
    new_ca(ca, now=NOW)
    new_node_certificate(ca, "a", ["a.cluster.example"], now=NOW)
    a = await tls_node(tmp_path, "a", ca, ca)
    monkeypatch.delenv("PROVNET_TLS_CA", raising=False)
    try:
        health = ["node", "health", "--addr", a.address, "--timeout", "2"]
        monkeypatch.setenv("PROVNET_ADVERTISE", "a.cluster.example:50051")
        assert await asyncio.to_thread(provnet, [*health, "--tls-ca", str(ca / "ca.pem")]) == 0
        assert await asyncio.to_thread(provnet, health) != 0
        monkeypatch.setenv("PROVNET_ADVERTISE", "b.cluster.example:50051")
        assert await asyncio.to_thread(provnet, [*health, "--tls-ca", str(ca / "ca.pem")]) != 0
    finally:
        await stop_all([a])
