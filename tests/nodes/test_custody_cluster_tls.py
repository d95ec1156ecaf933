"""``provnet experiment custody --cluster`` on a local cluster started with ``--tls``.

The cluster's nodes serve TLS only; the experiment's extra node processes (the
departing origins and custodians) serve a certificate issued under the
cluster's CA for the run, and the cluster's holder and witness dial them over
TLS. A tiny sweep (k ∈ {0, 1}, p = 0.5, 6 trials a cell) through the real CLI;
the cluster is left as found: the same pids SERVING, no extra process left
(``long``: a cluster and a dozen node processes, 25–40 s on a loaded 2-core
machine).
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import pytest

from nodes.cluster import HealthState, load_state, probe_health
from nodes.home import Home
from nodes.tls import new_ca
from tests.nodes.cluster_home import processes_naming, provnet

pytestmark = pytest.mark.timeout(240)


@pytest.mark.long
def test_custody_on_a_tls_cluster_certifies_its_extra_nodes_and_leaves_the_cluster_as_found(
    home: Path, tmp_path: Path
) -> None:
    up = provnet(home, "cluster", "up", "--tls")
    assert up.returncode == 0, up.stderr
    state = load_state(Home(home))
    assert state is not None
    assert state.tls_ca is not None
    before = {r.name: r.pid for r in state.nodes}
    ca = state.tls_ca.read_bytes()

    out = tmp_path / "out"
    argv = ["experiment", "custody", "--cluster", str(home), "--k", "0,1", "--p", "0.5"]
    argv += ["--trials", "6", "--batch", "6", "--departures", "independent", "--no-progress"]
    run = provnet(home, *argv, "--out", str(out), timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "running nodes over TLS (holder a;" in run.stdout
    with (out / "custody_availability.csv").open() as fh:
        k0, k1 = list(csv.DictReader(fh))
    # k = 0: a value is available exactly when its origin stayed, which the
    # holder learns by dialing the origin process over TLS
    assert int(k0["available"]) + int(k0["departed_origins"]) == 6
    assert int(k0["served_by_origin"]) == int(k0["available"])
    # k = 1: each origin reached its custodian over TLS (6 statements); what survives serves
    assert k1["custody_statements"] == "6"
    assert int(k1["available"]) >= 6 - int(k1["departed_origins"])
    assert k0["honest_accused"] == k1["honest_accused"] == "0"

    # a CA the cluster's certificates do not chain to: named, before any extra node starts
    other = tmp_path / "other"
    new_ca(other, now=dt.datetime.now(dt.UTC))
    wrong = provnet(home, *argv, "--out", str(tmp_path / "o2"), "--tls-ca", str(other / "ca.pem"))
    assert wrong.returncode == 1, wrong.stdout
    assert "provnet: error: running node a at 127.0.0.1:" in wrong.stderr
    assert (
        "TLS: certificate 'CN=a' is not signed by the configured CA's key; nothing was started"
        in wrong.stderr
    )
    assert not (tmp_path / "o2").exists()

    # the cluster as found: the same pids, SERVING over TLS; nothing else left running
    after = load_state(Home(home))
    assert after is not None
    assert {r.name: r.pid for r in after.nodes} == before
    for record in after.nodes:
        assert probe_health(record.address, timeout=2.0, tls_ca=ca) is HealthState.SERVING
    assert sorted(processes_naming(home)) == sorted(before.values())
    assert list((home / "custody").iterdir()) == []
