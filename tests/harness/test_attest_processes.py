"""Part 6 on separate OS processes: every row of the authority table, for real.

Node processes are started with :func:`nodes.cluster.start_nodes` (the code
``provnet cluster up`` uses) on loopback, each with its own key and store:
``origin``, ``holder``, ``witness`` and one attester per attester mode
(``provnet node --attest-fault MODE``). The driver plays the shortened death
spiral on them over gRPC only: hops and compactions to the origin process,
deliveries to the holder process, and for each restoration ``Attest.Restore``
on the holder process, which demands every fold from the origin process,
verifies, and sends ``Attest.Request`` to the attester process itself. Each
row's counts and decisions are compared with the same row on in-process
nodes. The cluster is started once for the module and reused by every row
(each row is a new session: value refs and hop seqs cannot meet).
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contracts.attest import RehydrationProof
from contracts.identity import Identity
from contracts.statements import Axis
from harness.attest.attester import attester_fault
from harness.attest.policy import AttestPolicy
from harness.attest.report import row_numbers
from harness.attest.rows import AUTHORITY_ROWS, Row, RowSpec
from harness.attest.runner import AttestSlice, RowResult, run_row
from harness.boundary.choices import TransportKind
from harness.config import DeathSpiralConfig, ExperimentConfig
from harness.gates import GATES
from nodes import wire
from nodes._pb.provnet.v1 import attest_pb2
from nodes.app import load_or_create_identity
from nodes.attester import AttestationAsk, AttesterFault
from nodes.auth import (
    OPERATOR_KEY_FILENAME,
    ControlCredentials,
    control_channel,
    create_operator_key,
)
from nodes.cluster import NodeRecord, NodeSpec, free_ports, peer_list, start_nodes, stop_all

pytestmark = pytest.mark.timeout(900)

#: The shortened death spiral (penalty 0.1: death at cycle 7 of C = 25), cut to
#: 200 steps: restorations start at cycle 6 (r < 0.55), so every row is played.
CFG = dataclasses.replace(
    ExperimentConfig(),
    reconstruction_penalty=0.1,
    death_spiral_run=DeathSpiralConfig(steps=200, compaction_cadence=25),
)
POLICY = AttestPolicy(lifetime_steps=50)

EXPECTED_REASON: dict[Row, set[str]] = {
    Row.OUTSIDE_POLICY: {"axis_not_granted"},
    Row.UNGRANTED_AXIS: {"axis_not_granted"},
    Row.ABOVE_CEILING: {"above_ceiling"},
    Row.NO_PROOF: {"no_proof"},
    Row.OTHER_VALUE_RECEIPTS: {"commitments_missing"},
    Row.FORGED_RECEIPTS: {"proof_invalid"},
    Row.TAMPERED_RECEIPTS: {"proof_invalid"},
    Row.PARTIAL_RECEIPTS: {"commitments_missing", "proof_invalid"},
    Row.REPLAYED: {"other_value"},
    Row.EXPIRED: {"expired"},
    Row.REVOKED: {"revoked"},
}


def _attester_name(fault: AttesterFault) -> str:
    return "att-" + fault.value.replace("_", "-")


class Cluster:
    """The node processes of the module, by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.operator = create_operator_key(root / OPERATOR_KEY_FILENAME)
        self.started: list[tuple[NodeRecord, subprocess.Popen[bytes]]] = []
        names = ["origin", "holder", "witness", *(_attester_name(f) for f in AttesterFault)]
        ports = free_ports(len(names))
        base = [
            NodeSpec(n, p, root / n, root / f"{n}.log") for n, p in zip(names, ports, strict=True)
        ]
        # The holder asks with issue times on the run clock, years ahead of the
        # attesters' clocks: only an attester's operator may (nodes.attest_log).
        holder_key = load_or_create_identity(root / "holder").node_id
        self.specs = [
            dataclasses.replace(
                s,
                peers=peer_list(base, s.name),
                operator_keys=(
                    (self.operator.key_id, holder_key)
                    if s.name.startswith("att-")
                    else (self.operator.key_id,)
                ),
                attest_fault=(
                    s.name.removeprefix("att-").replace("-", "_")
                    if s.name.startswith("att-")
                    else None
                ),
            )
            for s in base
        ]
        self.started = start_nodes(self.specs, timeout=120.0)
        self.address = {r.name: r.address for r, _ in self.started}

    def slice(self) -> AttestSlice:
        return AttestSlice(
            transport=TransportKind.REMOTE,
            nodes=tuple(self.address.items()),
            attesters=tuple((f.value, _attester_name(f)) for f in AttesterFault),
            control_home=str(self.root),
        )

    def pids(self) -> dict[str, int]:
        return {r.name: p.pid for r, p in self.started}

    def stop(self) -> None:
        stop_all(self.started, grace=2.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(tmp_path_factory.mktemp("attest-cluster"))
    try:
        yield started
    finally:
        started.stop()


_CACHE: dict[tuple[str, str], RowResult] = {}


def _row(spec: RowSpec, cluster: Cluster | None) -> RowResult:
    """The row on the node processes (``cluster``) or on in-process nodes (None)."""
    key = (spec.name, "processes" if cluster is not None else "memory")
    if key not in _CACHE:
        slice_ = cluster.slice() if cluster is not None else AttestSlice()
        _CACHE[key] = asyncio.run(run_row(CFG, spec, POLICY, slice_))
    return _CACHE[key]


def _rejected(r: RowResult) -> dict[str, int]:
    return {k[9:]: v for k, v in r.counts.items() if k.startswith("rejected_") and v}


_COUNTS = (
    "attestations_issued",
    "attestations_applied",
    "attestations_reused",
    "full_rehydrations",
)


def _same_as_in_process(spec: RowSpec, cluster: Cluster) -> RowResult:
    procs, memory = _row(spec, cluster), _row(spec, None)
    assert procs.fingerprint == memory.fingerprint
    assert _rejected(procs) == _rejected(memory)
    assert {k: procs.counts.get(k, 0) for k in _COUNTS} == {
        k: memory.counts.get(k, 0) for k in _COUNTS
    }
    assert row_numbers(procs) == row_numbers(memory)
    return procs


# --------------------------------------------------------------------------- the processes


def test_the_nodes_are_separate_os_processes(cluster: Cluster) -> None:
    import os

    pids = cluster.pids()
    assert os.getpid() not in pids.values()
    assert len(set(pids.values())) == len(pids) == 3 + len(AttesterFault)
    for name, pid in pids.items():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"node" in cmdline, name
        if name.startswith("att-"):
            i = cmdline.index(b"--attest-fault")
            assert AttesterFault(cmdline[i + 1].decode()) is not None
    # the rows below reach every mode: each runs on the attester started with it
    assert {attester_fault(r) for r in Row if r is not Row.NONE} == set(AttesterFault)


def test_without_attest_the_processes_decide_as_in_process(cluster: Cluster) -> None:
    r = _same_as_in_process(RowSpec(Row.NONE), cluster)
    assert all(i == b for _, i, b in r.runs)  # and as the in-process replay, bit for bit


def test_honest_attester_process_restores_and_its_hops_are_demanded_back(
    cluster: Cluster,
) -> None:
    r = _same_as_in_process(RowSpec(Row.HONEST), cluster)
    n = row_numbers(r)
    none = _row(RowSpec(Row.NONE), cluster)
    assert r.fingerprint != none.fingerprint
    assert n.changed == n.to_proceed > 0
    assert set(n.changed_by_class) == {"reconstruction"}
    assert r.counts["attestations_applied"] > 0
    # A6: the holder side demanded the first and last attestation hop back from
    # the attester process and verified receipt, root and the hop's name
    assert r.logged == r.counts["attestations_issued"] > 0
    assert r.a6_verified == r.a6_checked >= 1


@pytest.mark.parametrize("row", AUTHORITY_ROWS, ids=lambda r: r.value)
def test_attester_process_without_authority_changes_nothing(row: Row, cluster: Cluster) -> None:
    r = _same_as_in_process(RowSpec(row), cluster)
    n = row_numbers(r)
    rejected = _rejected(r)
    assert r.counts["attestations_issued"] > 0
    assert sum(rejected.values()) > 0
    assert set(rejected) <= EXPECTED_REASON[row]
    if row is Row.REVOKED:
        assert n.changed_after_revocation == 0
        assert r.revoked_at_step is not None
        return
    assert r.counts.get("attestations_applied", 0) == 0
    assert n.decisions_raised == 0
    assert n.changed == 0
    assert r.fingerprint == _row(RowSpec(Row.NONE), cluster).fingerprint


def test_taint_discharge_by_an_attester_process(cluster: Cluster) -> None:
    r = _same_as_in_process(RowSpec(Row.TAINT_DISCHARGE), cluster)
    n = row_numbers(r)
    assert n.changed > 0
    assert n.decisions_raised == 0
    assert set(n.changed_by_class) == {"lineage_blocklist"}
    assert n.to_block == 0
    changed = {
        GATES[gi].name
        for d in r.records
        for gi, (a, b) in enumerate(zip(d.after, d.before, strict=True))
        if a != b
    }
    assert changed <= {"summarize_no_unverified_taint", "payment_no_untrusted_taint"}


@pytest.mark.parametrize("axis", [Axis.VERIFICATION, Axis.RECONSTRUCTION])
def test_dishonest_trusted_attester_process_is_bounded_by_its_grant(
    axis: Axis, cluster: Cluster
) -> None:
    r = _same_as_in_process(RowSpec(Row.DISHONEST, axis=axis), cluster)
    n = row_numbers(r)
    granted = list(Axis).index(axis)
    assert all(c == 0 for i, c in enumerate(n.raised_by_axis) if i != granted)
    assert _rejected(r).get("axis_not_granted", 0) > 0
    if axis is Axis.RECONSTRUCTION:
        assert n.decisions_raised == 0  # A4 binds a trusted attester too
        assert n.changed == 0
        return
    assert n.raised_by_axis[granted] > 0
    assert n.to_block == 0
    assert n.false_proceed_after > n.false_proceed_before


# --------------------------------------------------------------------------- who may call what


def _ask(proofs: tuple[RehydrationProof, ...] = ()) -> attest_pb2.RequestAttestationRequest:
    return wire.attest_request(AttestationAsk("v/1", ("ab" * 32,), proofs, True, 0, 60_000))


def test_attest_request_and_restore_are_signed_calls(cluster: Cluster) -> None:
    honest = cluster.address[_attester_name(AttesterFault.NONE)]
    holder = cluster.address["holder"]
    stranger = ControlCredentials(Identity.generate())

    async def go() -> None:
        # unsigned: UNAUTHENTICATED, nothing signed or logged
        async with grpc.aio.insecure_channel(honest) as chan:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await wire.attest_stub(chan).Request(_ask(), timeout=10)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
        # Restore makes the holder demand and ask on its behalf: operator only
        async with control_channel(holder, stranger) as chan:
            request = wire.restore_request(
                AttestationAsk("v/1", (), (), True, 0, 60_000), [], honest
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await wire.attest_stub(chan).Restore(request, timeout=10)
            assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
        # the honest attester signs nothing without proofs covering the value
        async with control_channel(honest, cluster.operator) as chan:
            reply = await wire.attest_stub(chan).Request(_ask(), timeout=10)
            assert not reply.attestations
            assert "not rehydrated" in reply.refused

    asyncio.run(go())


def test_attest_request_citing_another_holders_demands_is_refused(cluster: Cluster) -> None:
    """A key that is neither an operator key nor the holder that signed the cited
    demands cannot make the attester sign (proofs taken from a real restoration)."""
    honest = _row(RowSpec(Row.HONEST), cluster)
    assert honest.bundle_files, "the honest row kept no bundle to take proofs from"
    import json

    body = json.loads(dict(honest.bundle_files)["accepted"])
    proofs = tuple(RehydrationProof.from_json(p) for p in body["proofs"])
    stranger = ControlCredentials(Identity.generate())
    address = cluster.address[_attester_name(AttesterFault.NONE)]

    async def go() -> None:
        async with control_channel(address, stranger) as chan:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await wire.attest_stub(chan).Request(_ask(proofs), timeout=10)
            assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "signed the demands" in (err.value.details() or "")

    asyncio.run(go())


# --------------------------------------------------------------------------- the CLI on them


def _cli_fingerprint(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    import structlog

    from harness.cli import main

    try:
        rc = main(["experiment", "attest", *argv, "--out", str(out), "--no-progress"])
    finally:
        structlog.reset_defaults()  # the handler configures node logging process-wide
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    (line,) = [ln for ln in printed.out.splitlines() if "fingerprint" in ln]
    return line.rsplit("fingerprint", 1)[1].strip()


def test_cli_nodes_plays_on_the_processes_as_in_process(
    cluster: Cluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``experiment attest --nodes``: the same row on the node processes decides as on
    in-process nodes (same fingerprint), and the meta names the nodes it ran on."""
    import json

    monkeypatch.setenv("PROVNET_OPERATOR_KEY_FILE", str(cluster.root / OPERATOR_KEY_FILENAME))
    row = ["--rows", "none", "--steps", "60", "--lifetimes", "5"]
    nodes = ",".join(f"{n}={cluster.address[n]}" for n in ("origin", "holder", "witness"))
    running = _cli_fingerprint(
        [*row, "--nodes", nodes, "--chain", "origin,holder"], tmp_path / "procs", capsys
    )
    local = _cli_fingerprint(row, tmp_path / "memory", capsys)
    assert running == local
    meta = json.loads((tmp_path / "procs" / "attest_meta.json").read_text())
    assert meta["transport"] == "remote"
    assert meta["nodes"] == ["origin", "holder", "witness"]
