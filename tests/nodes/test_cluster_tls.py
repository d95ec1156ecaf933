"""The local cluster with TLS (``cluster up --tls``), driven through the real CLI.

The nodes serve TLS only, with certificates from the CA ``up`` makes under
``$PROVNET_HOME/tls``; the tools (``status``, ``smoke``, ``experiment boundary
--cluster``) find that CA in ``cluster.json``. The default test starts the
cluster, checks that plaintext no longer reaches it, asks ``status``, plays a
tiny boundary slice over TLS and checks the refusals of a wrong CA and of a
smoke run that cannot certify its fault nodes (10–16 s on a loaded 2-core
machine); the smoke test itself over TLS (its fault nodes serving a
certificate made with the cluster CA's key) and the default slice are the
``long`` test (18–25 s there).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from nodes.client_tls import ClientTls
from nodes.cluster import (
    HealthState,
    load_state,
    probe_health,
)
from nodes.home import Home
from nodes.smoke import SMOKE_STEPS
from nodes.tls import TlsError, check_certificate, new_ca, new_node_certificate
from tests.nodes.cluster_home import provnet

pytestmark = pytest.mark.timeout(240)






def _up_tls(home: Path) -> list[str]:
    up = provnet(home, "cluster", "up", "--tls")
    assert up.returncode == 0, up.stderr
    assert f"TLS (CA {home / 'tls' / 'ca.pem'})" in up.stdout
    state = load_state(Home(home))
    assert state is not None
    assert state.tls_ca == home / "tls" / "ca.pem"
    # every node was started with its own certificate from that CA
    ca = state.tls_ca.read_bytes()
    now = dt.datetime.now(dt.UTC)
    for record in state.nodes:
        cert = x509.load_pem_x509_certificate((home / "tls" / f"{record.name}.pem").read_bytes())
        der = cert.public_bytes(Encoding.DER)
        assert check_certificate(der, ca, "127.0.0.1", now) is None, record.name
    return [r.address for r in state.nodes]


def test_cluster_up_tls_serves_tls_only_and_the_tools_use_its_ca(
    home: Path, tmp_path: Path
) -> None:
    addresses = _up_tls(home)
    # plaintext does not reach a TLS node; the cluster's CA does
    ca = (home / "tls" / "ca.pem").read_bytes()
    assert probe_health(addresses[0], timeout=2.0) is HealthState.UNREACHABLE
    assert probe_health(addresses[0], timeout=2.0, tls_ca=ca) is HealthState.SERVING

    # status reads the CA from cluster.json and asks over TLS
    status = provnet(home, "cluster", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    health = [(r["health"], isinstance(r["counters"], dict)) for r in rows]
    assert health == [("SERVING", True)] * 3

    # a tiny boundary slice over TLS, the CA found in cluster.json
    out = tmp_path / "boundary"
    argv = ("--cluster", str(home), "--seeds", "1", "--steps", "30", "--no-progress")
    boundary = provnet(home, "experiment", "boundary", *argv, "--out", str(out))
    assert boundary.returncode == 0, boundary.stderr[-3000:]
    assert "runs deciding exactly as in-process: 1/1" in boundary.stdout
    assert "gRPC over TLS to 3 running node processes" in boundary.stdout
    assert "correct origins accused: 0" in boundary.stdout
    meta = json.loads((out / "boundary_meta.json").read_text(encoding="utf-8"))
    assert meta["settings"]["tls"] is True

    # a CA the nodes' certificates do not chain to: named, before anything is sent
    other = tmp_path / "other"
    new_ca(other, now=dt.datetime.now(dt.UTC))
    wrong = provnet(
        home, "experiment", "boundary", *argv, "--out", str(tmp_path / "b2"),
        "--tls-ca", str(other / "ca.pem"),
    )  # fmt: skip
    assert wrong.returncode == 1, wrong.stdout
    assert "TLS: certificate 'CN=a' is not signed by the configured CA's key" in wrong.stderr
    assert not (tmp_path / "b2").exists()
    smoke = provnet(home, "cluster", "smoke", "--quiet", "--tls-ca", str(other / "ca.pem"))
    assert smoke.returncode == 1
    assert "answers UNREACHABLE: TLS: certificate 'CN=a' is not signed" in smoke.stderr
    assert smoke.stdout == "", "no step runs"

    # --nodes with the CA but no way to certify the smoke's fault nodes: said, exit 2
    alone = tmp_path / "ca-alone"
    alone.mkdir()
    shutil.copy(home / "tls" / "ca.pem", alone / "ca.pem")
    members = ";".join(f"{n}={a}" for n, a in zip("abc", addresses, strict=True))
    no_key = provnet(
        home, "cluster", "smoke", "--quiet", "--nodes", members, "--tls-ca", str(alone / "ca.pem")
    )
    assert no_key.returncode == 2, no_key.stderr
    assert "need a certificate naming '127.0.0.1'" in no_key.stderr
    assert "--tls-cert ($PROVNET_TLS_CERT) and --tls-key ($PROVNET_TLS_KEY)" in no_key.stderr
    assert no_key.stdout == ""

    down = provnet(home, "cluster", "down")
    assert down.returncode == 0, down.stderr
    assert [line.split("\t")[2] for line in down.stdout.splitlines()] == ["terminated"] * 3


@pytest.mark.long
def test_cluster_up_tls_smoke_all_steps_ok_and_the_default_slice_over_tls(
    home: Path, tmp_path: Path
) -> None:
    _up_tls(home)
    # smoke reads the CA from cluster.json; its fault nodes serve TLS too
    smoke = provnet(home, "cluster", "smoke", "--quiet", timeout=180)
    steps = [json.loads(line) for line in smoke.stdout.splitlines()]
    assert [s["name"] for s in steps] == list(SMOKE_STEPS)
    deviating = [s for s in steps if not s["ok"]]
    assert not deviating, json.dumps(deviating, indent=1) + smoke.stderr[-3000:]
    # ... with a certificate made with the cluster CA's key, for 127.0.0.1
    ca = (home / "tls" / "ca.pem").read_bytes()
    (made,) = (home / "smoke").glob("*/tls/extra.pem")
    der = x509.load_pem_x509_certificate(made.read_bytes()).public_bytes(Encoding.DER)
    assert check_certificate(der, ca, "127.0.0.1", dt.datetime.now(dt.UTC)) is None

    out = tmp_path / "boundary"
    boundary = provnet(
        home, "experiment", "boundary", "--cluster", str(home), "--no-progress", "--out", str(out)
    )
    assert boundary.returncode == 0, boundary.stderr[-3000:]
    assert "runs deciding exactly as in-process: 2/2" in boundary.stdout
    assert "gRPC over TLS to 3 running node processes" in boundary.stdout


# ------------------------------------------------------------- the tools' TLS settings


def test_client_tls_takes_the_node_flags_then_the_variables_then_the_clusters_ca(
    tmp_path: Path,
) -> None:
    import argparse

    from nodes.client_tls import add_tls_flags

    parser = argparse.ArgumentParser()
    add_tls_flags(parser, serving=True)
    ca = tmp_path / "ca.pem"
    ca.write_text("x", encoding="utf-8")
    env = {"PROVNET_TLS_CA": str(ca), "PROVNET_TLS_CERT": "c.pem", "PROVNET_TLS_KEY": "k.pem"}
    got = ClientTls.from_args(parser.parse_args([]), env, serving=True)
    assert got == ClientTls(ca, Path("c.pem"), Path("k.pem"))
    # without serving, the certificate is not the tool's concern
    assert ClientTls.from_args(parser.parse_args([]), env) == ClientTls(ca)
    flagged = parser.parse_args(["--tls-ca", str(ca)])
    assert ClientTls.from_args(flagged, {}, default_ca=tmp_path / "other.pem").ca == ca
    recorded = ClientTls.from_args(parser.parse_args([]), {}, default_ca=ca)
    assert recorded.ca == ca
    assert ClientTls.from_args(parser.parse_args([]), {}) == ClientTls()
    with pytest.raises(TlsError, match=r"--tls-ca \(\$PROVNET_TLS_CA\) .*missing.pem: cannot read"):
        ClientTls.from_args(parser.parse_args(["--tls-ca", str(tmp_path / "missing.pem")]), {})
    with pytest.raises(TlsError, match="go together"):
        ClientTls(ca, Path("c.pem"))
    with pytest.raises(TlsError, match=r"--tls-cert \(\$PROVNET_TLS_CERT\) needs --tls-ca"):
        ClientTls(None, Path("c.pem"), Path("k.pem"))


def test_the_smoke_fault_nodes_certificate_is_given_or_made_with_the_ca_key_beside_the_ca(
    tmp_path: Path,
) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_dir = tmp_path / "ca"
    ca = new_ca(ca_dir, now=now)
    given = new_node_certificate(ca_dir, "runner", ["runner"], now=now, out_dir=tmp_path / "g")
    assert ClientTls(ca, *given).serving(tmp_path / "out", "runner") == given
    cert, key = ClientTls(ca).serving(tmp_path / "out", "runner", now=now)
    assert cert.parent == tmp_path / "out"
    assert key.stat().st_mode & 0o777 == 0o600
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(Encoding.DER)
    assert check_certificate(der, ca.read_bytes(), "runner", now) is None
    assert "does not name the host" in str(check_certificate(der, ca.read_bytes(), "b", now))
    # the CA certificate alone: no key to certify with, and the message says what to give
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ca, alone / "ca.pem")
    with pytest.raises(TlsError, match="need a certificate naming 'runner'"):
        ClientTls(alone / "ca.pem").serving(tmp_path / "out", "runner")
    # a key beside a CA file of another name is not taken for that CA's
    renamed = ca_dir / "cluster-ca.pem"
    shutil.copy(ca, renamed)
    with pytest.raises(TlsError, match="belongs to"):
        ClientTls(renamed).serving(tmp_path / "out", "runner")


def test_the_attest_runner_on_running_nodes_dials_them_with_the_slices_ca(tmp_path: Path) -> None:
    from harness.attest.runner import AttestSlice, _settings
    from harness.boundary.choices import TransportKind
    from harness.boundary.runner import _tls

    ca = new_ca(tmp_path / "ca", now=dt.datetime.now(dt.UTC))
    nodes = (("a", "127.0.0.1:1"), ("b", "127.0.0.1:2"), ("c", "127.0.0.1:3"))
    remote = AttestSlice(transport=TransportKind.REMOTE, nodes=nodes, tls_ca=str(ca))
    files = _tls(_settings(remote, 25, 10))
    assert files is not None
    assert files.ca == ca
    plain = AttestSlice(transport=TransportKind.REMOTE, nodes=nodes)
    assert _tls(_settings(plain, 25, 10)) is None
    # a CA file that is not PEM fails before any node is dialled, naming the setting's file
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate", encoding="utf-8")
    with pytest.raises(TlsError, match=r"bad\.pem: not PEM certificates"):
        _tls(
            _settings(
                AttestSlice(transport=TransportKind.REMOTE, nodes=nodes, tls_ca=str(bad)), 25, 10
            )
        )
