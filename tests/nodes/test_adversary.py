"""Attacks on running nodes: no honest origin can be accused, the control plane is closed.

Every node here is a real ``provnet node`` process on loopback (the same
command line ``provnet cluster up`` runs), configured through ``PROVNET_*``
variables, with :data:`tests.nodes.rpc_support.TEST_OPERATOR` as its
operator key. The attacker is a fresh Ed25519 identity with no credentials
(or with a key the nodes do not authorise). Each test is one attack from the
design's "Who may call what (revision 2)" and fails on a node that lets it
through.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from contracts.evidence import unanswered_evidence
from contracts.identity import Identity
from contracts.serve import build_demand
from contracts.signed import open_statement
from contracts.statements import (
    Commitment,
    Obligation,
    Receipt,
    ReceiptStatus,
    WitnessOutcome,
    WitnessReport,
)
from nodes import wire
from nodes._pb.provnet.v1 import (
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.app import KEY_FILENAME, load_or_create_identity
from nodes.auth import ControlCredentials, control_channel
from nodes.cluster import HealthState, child_env, free_ports, probe_health, provnet_argv
from nodes.messages import Delivery
from tests.nodes.rpc_support import TEST_OPERATOR, hop_json, operator_channel

pytestmark = pytest.mark.timeout(240)

DEADLINE_MS = 400
REPO = Path(__file__).resolve().parents[2]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Node:
    """One ``provnet node`` process; ``restart`` keeps its data dir and port."""

    name: str
    port: int
    root: Path
    peers: str
    operator: bool = True
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.root / self.name

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    def start(self) -> Node:
        env = child_env()
        env.update(
            PROVNET_DEADLINE_MS=str(DEADLINE_MS),
            PROVNET_REAP_INTERVAL_S="0",
            PROVNET_SHUTDOWN_GRACE_S="1",
        )
        if self.operator:
            env["PROVNET_OPERATOR_KEYS"] = TEST_OPERATOR.key_id
        argv = provnet_argv(
            "node",
            "--name",
            self.name,
            "--listen",
            self.address,
            "--data-dir",
            str(self.data_dir),
            "--log-format",
            "json",
            "--peers",
            self.peers,
        )
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO
            )
        give_up = time.monotonic() + 60
        while not self._answers_as_itself():
            if self.proc.poll() is not None or time.monotonic() > give_up:
                self.stop()
                pytest.fail(f"node {self.name} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _answers_as_itself(self) -> bool:
        """SERVING at its address *and* the answering node holds this node's key.

        Health alone is not enough on a shared machine: a port chosen by
        ``free_ports`` can be taken by another test run's node (same names,
        same test operator key), which would then answer in this node's place.
        """
        if probe_health(self.address, timeout=0.5) is not HealthState.SERVING:
            return False
        key = self.data_dir / KEY_FILENAME
        if not key.exists():
            return False
        expected = load_or_create_identity(self.data_dir).node_id
        with grpc.insecure_channel(self.address) as chan:
            try:
                info = node_pb2_grpc.NodeStub(chan).Info(node_pb2.InfoRequest(), timeout=2)
            except grpc.RpcError:
                return False
        return bool(info.node_id == expected)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


def _trio(root: Path, *, operator: bool = True) -> list[Node]:
    root.mkdir(parents=True, exist_ok=True)
    ports = free_ports(3)
    names = ("a", "b", "c")
    nodes = []
    for name, port in zip(names, ports, strict=True):
        peers = ";".join(
            f"{n}=127.0.0.1:{p}" for n, p in zip(names, ports, strict=True) if n != name
        )
        nodes.append(Node(name, port, root, peers, operator))
    return nodes


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[list[Node]]:
    nodes = _trio(tmp_path / "cluster")
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def attacker() -> Identity:
    return Identity.generate()


async def _commit(
    node: Node, value_ref: str, *, deadline_ms: int = DEADLINE_MS, value: bytes = b""
) -> tuple[bytes, bytes]:
    """As the operator: append three hops on ``node`` and fold them."""
    base = time.time_ns() // 1000
    seqs = [base + i for i in range(3)]
    async with operator_channel(node.address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        await stub.Append(
            hoplog_pb2.AppendRequest(hops=[hop_json(i + 1) for i in range(3)], seqs=seqs),
            timeout=10,
        )
        reply = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(
                value_ref=value_ref, seqs=seqs, deadline_ms=deadline_ms, value=value
            ),
            timeout=10,
        )
    return bytes(reply.commitment), bytes(reply.obligation)


async def _counters(node: Node) -> dict[str, int]:
    async with control_channel(node.address, None) as chan:
        stub: Any = node_pb2_grpc.NodeStub(chan)
        reply = await stub.Stats(node_pb2.StatsRequest(), timeout=5)
    return dict(reply.counters)


async def _demand(node: Node, demand: bytes) -> serve_pb2.DemandResponse:
    async with control_channel(node.address, None) as chan:
        stub: Any = serve_pb2_grpc.ServeStub(chan)
        reply: serve_pb2.DemandResponse = await stub.Demand(
            serve_pb2.DemandRequest(demands=[demand]), timeout=5
        )
    return reply


async def _code(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    code: grpc.StatusCode = caught.value.code()
    return code


# --------------------------------------------------------------------------- (1) accuracy


async def test_a_witness_asks_only_the_endpoint_the_origin_signed(
    trio: list[Node], attacker: Identity
) -> None:
    a, b, _ = trio
    c_bytes, o_bytes = await _commit(a, "redirect")
    o = open_statement(o_bytes, Obligation)
    demand = build_demand(attacker, o, now=now_ms()).to_bytes()
    async with control_channel(b.address, None) as chan:
        stub: Any = evidence_pb2_grpc.EvidenceStub(chan)
        # A stranger points B's witness at a dead address: refused, nothing signed.
        request = evidence_pb2.ChallengeRequest(
            commitment=c_bytes, obligation=o_bytes, demand=demand, origin_address="127.0.0.1:9"
        )
        assert await _code(stub.Challenge(request, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
        # Asked plainly, B asks A where A said it serves, and A (alive) answers.
        plain = evidence_pb2.ChallengeRequest(commitment=c_bytes, obligation=o_bytes, demand=demand)
        reply = await stub.Challenge(plain, timeout=5)
    report = open_statement(bytes(reply.witness_report), WitnessReport).statement
    assert report.outcome is WitnessOutcome.ANSWERED
    assert report.address == o.statement.endpoints[0] == a.address


async def test_a_suspicion_without_witnesses_is_not_stored_by_report(
    trio: list[Node], attacker: Identity
) -> None:
    a, _, c = trio
    c_bytes, o_bytes = await _commit(a, "made-up")
    commitment = open_statement(c_bytes, Commitment)
    obligation = open_statement(o_bytes, Obligation)
    demand = build_demand(attacker, obligation, now=now_ms() - 5_000)
    made_up = unanswered_evidence(
        demand, obligation=obligation, commitment=commitment, re_asks=1, reported_at=now_ms()
    ).to_bytes()
    request = evidence_pb2.ReportRequest(evidence=made_up)
    async with control_channel(c.address, None) as chan:
        stranger: Any = evidence_pb2_grpc.EvidenceStub(chan)
        code = await _code(stranger.Report(request, timeout=5))
        assert code is grpc.StatusCode.UNAUTHENTICATED
    # Even the operator cannot store a suspicion no witness confirmed.
    async with operator_channel(c.address) as chan:
        operator: Any = evidence_pb2_grpc.EvidenceStub(chan)
        code = await _code(operator.Report(request, timeout=5))
        assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert (await _counters(c))["evidence_total"] == 0


async def test_future_dated_demands_cannot_poison_the_replay_floor(
    tmp_path: Path, attacker: Identity
) -> None:
    (a, *_) = _trio(tmp_path / "floor")
    a.start()
    try:
        _, o_bytes = await _commit(a, "floor")
        o = open_statement(o_bytes, Obligation)
        floor_file = a.data_dir / "replay_floor"
        before = floor_file.read_bytes() if floor_file.exists() else b""
        # Outside the documented ±30 s skew: rejected, and no state moves.
        far = build_demand(attacker, o, now=now_ms() + 45_000).to_bytes()
        code = await _code(_demand(a, far))
        assert code is grpc.StatusCode.OUT_OF_RANGE
        assert (floor_file.read_bytes() if floor_file.exists() else b"") == before
        # Inside the skew but ahead of the clock: served, and the floor stays near now.
        near = build_demand(attacker, o, now=now_ms() + 25_000).to_bytes()
        reply = await _demand(a, near)
        assert open_statement(reply.answers[0].receipt, Receipt).statement.status is (
            ReceiptStatus.SERVED
        )
        floor = int(floor_file.read_text()) if floor_file.exists() else 0
        assert floor < now_ms() + 5_000
        a.restart()
        # An honest holder right after the restart is served, not ABORTED.
        honest = build_demand(Identity.generate(), o, now=now_ms()).to_bytes()
        reply = await _demand(a, honest)
        assert open_statement(reply.answers[0].receipt, Receipt).statement.status is (
            ReceiptStatus.SERVED
        )
        # The future-dated demand is still covered across the restart, by its
        # holder's own durable floor: no replay.
        assert await _code(_demand(a, near)) is grpc.StatusCode.ABORTED
        # That holder's next demand (dated later, still ahead) is served.
        later = build_demand(attacker, o, now=now_ms() + 26_000).to_bytes()
        reply = await _demand(a, later)
        assert open_statement(reply.answers[0].receipt, Receipt).statement.status is (
            ReceiptStatus.SERVED
        )
    finally:
        a.stop()


async def test_a_later_receipt_clears_a_stored_suspicion(tmp_path: Path) -> None:
    a, b, c = _trio(tmp_path / "clear")
    for node in (a, b, c):
        node.start()
    try:
        # A deadline a freshly restarted origin keeps on a loaded machine too: its
        # first answer after the restart is what clears the suspicion.
        c_bytes, o_bytes = await _commit(a, "clear", value=b"payload", deadline_ms=2_000)
        async with operator_channel(b.address) as chan:
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan)
            await deliver.Deliver(
                wire.deliver_request(Delivery("clear", b"payload", (c_bytes,), (o_bytes,), "")),
                timeout=5,
            )
            a.stop()  # the origin is down: B suspects it, C confirms
            first = await deliver.Rehydrate(
                deliver_pb2.RehydrateRequest(value_ref="clear", witnesses=["c"]), timeout=20
            )
            (outcome,) = first.outcomes
            assert outcome.outcome == "unanswered"
            assert outcome.witness_confirmed, outcome.detail
            path = Path(outcome.evidence_path)
            assert path.exists()
            assert (await _counters(b))["evidence_unanswered"] == 1
            a.start()  # back, and honest
            second = await deliver.Rehydrate(
                deliver_pb2.RehydrateRequest(value_ref="clear", witnesses=["c"]), timeout=20
            )
            assert second.outcomes[0].outcome == "served"
        counters = await _counters(b)
        assert counters.get("evidence_unanswered", 0) == 0
        assert counters["evidence_cleared"] == 1
        receipt = Path(f"{path}.cleared-by")
        assert receipt.exists()
        done = subprocess.run(
            [sys.executable, "-m", "harness", "evidence", "verify", str(path), "--json",
             "--cleared-by", str(receipt)],
            capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "cleared"
        log = b.log.read_text(encoding="utf-8").splitlines()
        cleared = [json.loads(line) for line in log if '"suspicion_cleared"' in line]
        assert len(cleared) == 1
        assert cleared[0]["peer"] == open_statement(o_bytes, Obligation).signer
    finally:
        for node in (a, b, c):
            node.stop()


# --------------------------------------------------------------------------- (2) control plane


async def test_control_calls_need_the_operator_key(trio: list[Node], attacker: Identity) -> None:
    a, b, c = trio
    c_bytes, o_bytes = await _commit(a, "ctl", value=b"v")
    before = await _counters(a)
    append = hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1])
    commit = hoplog_pb2.CommitFoldRequest(value_ref="x", seqs=[1], deadline_ms=1)
    c_id = open_statement(c_bytes, Commitment).signer  # A's id; C's id below
    async with control_channel(c.address, None) as chan:
        c_info = await node_pb2_grpc.NodeStub(chan).Info(node_pb2.InfoRequest(), timeout=5)
    as_c = wire.deliver_request(Delivery("ctl", b"v", (c_bytes,), (o_bytes,), c_info.node_id))
    stranger = ControlCredentials(attacker)
    for creds, expected in (
        (None, grpc.StatusCode.UNAUTHENTICATED),
        (stranger, grpc.StatusCode.PERMISSION_DENIED),
    ):
        async with control_channel(a.address, creds) as chan:
            hoplog: Any = hoplog_pb2_grpc.HopLogStub(chan)
            assert await _code(hoplog.Append(append, timeout=5)) is expected
            assert await _code(hoplog.CommitFold(commit, timeout=5)) is expected
            deliver: Any = deliver_pb2_grpc.DeliverStub(chan)
            forward = deliver_pb2.ForwardRequest(value_ref="ctl", peer="b")
            assert await _code(deliver.Forward(forward, timeout=5)) is expected
            rehydrate = deliver_pb2.RehydrateRequest(value_ref="ctl")
            assert await _code(deliver.Rehydrate(rehydrate, timeout=5)) is expected
        async with control_channel(b.address, creds) as chan:
            # Deliver-as-sender: B would sign a receipt naming C as the sender.
            deliver = deliver_pb2_grpc.DeliverStub(chan)
            code = await _code(deliver.Deliver(as_c, timeout=5))
            assert code is (grpc.StatusCode.UNAUTHENTICATED if creds is None else expected)
    after = await _counters(a)
    assert after["commits"] == before["commits"]
    assert c_id != c_info.node_id
    # The operator may, but only for promises the node can keep.
    async with operator_channel(a.address) as chan:
        hoplog = hoplog_pb2_grpc.HopLogStub(chan)
        await hoplog.Append(append, timeout=5)
        assert await _code(hoplog.CommitFold(commit, timeout=5)) is grpc.StatusCode.OUT_OF_RANGE


async def test_a_node_without_operator_keys_refuses_control_calls(tmp_path: Path) -> None:
    (a, *_) = _trio(tmp_path / "bare", operator=False)
    a.start()
    try:
        async with operator_channel(a.address) as chan:
            stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)]), timeout=5)
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "no operator key configured" in (caught.value.details() or "")
    finally:
        a.stop()


# --------------------------------------------------------------------------- (3) bad input


async def test_out_of_range_fields_get_a_proper_status(trio: list[Node]) -> None:
    a, b, _ = trio
    c_bytes, o_bytes = await _commit(a, "range")
    async with operator_channel(a.address) as chan:
        hoplog: Any = hoplog_pb2_grpc.HopLogStub(chan)
        huge = hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[2**64 - 1])
        assert await _code(hoplog.Append(huge, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
        fold = hoplog_pb2.CommitFoldRequest(value_ref="r", seqs=[2**64 - 1])
        assert await _code(hoplog.CommitFold(fold, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
        seqs = [time.time_ns() // 1000]
        await hoplog.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=seqs), timeout=5)
        forever = hoplog_pb2.CommitFoldRequest(value_ref="r", seqs=seqs, serve_for_ms=2**64 - 1)
        assert await _code(hoplog.CommitFold(forever, timeout=5)) is grpc.StatusCode.OUT_OF_RANGE
    async with control_channel(b.address, None) as chan:
        ev: Any = evidence_pb2_grpc.EvidenceStub(chan)
        demand = build_demand(
            Identity.generate(), open_statement(o_bytes, Obligation), now=now_ms()
        )
        bad = evidence_pb2.ChallengeRequest(
            commitment=c_bytes,
            obligation=o_bytes,
            demand=demand.to_bytes(),
            origin_address="not an address",
        )
        assert await _code(ev.Challenge(bad, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT


# --------------------------------------------------------------------------- (5) operations


async def test_health_reflection_and_the_json_log(trio: list[Node]) -> None:
    a, _, _ = trio
    _, o_bytes = await _commit(a, "ops")
    holder = Identity.generate()
    await _demand(
        a, build_demand(holder, open_statement(o_bytes, Obligation), now=now_ms()).to_bytes()
    )
    async with control_channel(a.address, None) as chan:
        health: Any = health_pb2_grpc.HealthStub(chan)
        check = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        listed = await health.List(health_pb2.HealthListRequest(), timeout=5)
        assert "provnet.v1.Serve" in listed.statuses
        watch = health.Watch(health_pb2.HealthCheckRequest(service="provnet.v1.Serve"), timeout=5)
        first = await watch.read()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        for service in ("grpc.reflection.v1alpha.ServerReflection",
                        "grpc.reflection.v1.ServerReflection"):  # fmt: skip
            call = chan.stream_stream(
                f"/{service}/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
            reply: Any = await call.read()
            names = {s.name for s in reply.list_services_response.service}
            assert "provnet.v1.Serve" in names, service
    lines = a.log.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]  # every line is JSON
    served = [e for e in events if e.get("event") == "demand_served"]
    assert [e["peer"] for e in served] == [holder.node_id]
