"""A node as a real process (``python -m nodes.app``): graceful SIGTERM, crash on demand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nodes._pb.provnet.v1 import hoplog_pb2, hoplog_pb2_grpc
from nodes.client import Outcome
from nodes.faults import CRASH_EXIT_CODE
from nodes.transport import GrpcTransport
from tests.nodes.rpc_support import (
    TEST_OPERATOR,
    accusation_audit,
    audit,
    grpc_holder,
    grpc_node,
    held_fold,
    hop_json,
    operator_channel,
)

__all__ = ["accusation_audit"]


class NodeProcess:
    def __init__(self, root: Path, name: str, fault: str = "none") -> None:
        self.port_file = root / f"{name}.port"
        # A file, not a pipe: nobody reads while the node runs, and a full
        # pipe would block its logging.
        self.log_path = root / f"{name}.log"
        env = {
            **os.environ,
            "PROVNET_NAME": name,
            "PROVNET_DATA_DIR": str(root / name),
            "PROVNET_LISTEN": "127.0.0.1:0",
            "PROVNET_PORT_FILE": str(self.port_file),
            "PROVNET_FAULT": fault,
            "PROVNET_LOG_FORMAT": "json",
            "PROVNET_OPERATOR_KEYS": TEST_OPERATOR.key_id,
            "PROVNET_DEADLINE_MS": "400",
            "PROVNET_SHUTDOWN_GRACE_S": "1",
        }
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nodes.app"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def address(self, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"node did not start: {self.stderr()}")
            time.sleep(0.05)
        return f"127.0.0.1:{self.port_file.read_text().strip()}"

    def stderr(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def processes() -> Iterator[list[NodeProcess]]:
    started: list[NodeProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.stop()


async def test_sigterm_stops_the_node_gracefully_with_json_logs(
    tmp_path: Path, processes: list[NodeProcess]
) -> None:
    node = NodeProcess(tmp_path, "a")
    processes.append(node)
    address = node.address()
    async with operator_channel(address) as chan:
        health: Any = health_pb2_grpc.HealthStub(chan)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert (tmp_path / "a" / "node.key").stat().st_mode & 0o077 == 0
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(timeout=10) == 0
    events = [json.loads(line)["event"] for line in node.stderr().splitlines() if line.strip()]
    assert events[0] == "node_key_created"
    assert "node_started" in events
    assert events[-1] == "node_exited"


async def test_crash_mode_exits_on_demand_and_is_witness_confirmed_unanswered(
    tmp_path: Path, processes: list[NodeProcess]
) -> None:
    origin = NodeProcess(tmp_path, "origin", fault="crash")
    processes.append(origin)
    address = origin.address()
    async with operator_channel(address) as chan:
        stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
        appended = await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)]), timeout=5)
        fold = await stub.CommitFold(
            hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=list(appended.seqs)), timeout=5
        )
    from nodes.services import CommittedFold

    held = held_fold(CommittedFold(bytes(fold.commitment), bytes(fold.obligation), False))
    witness = await grpc_node(tmp_path, "witness")
    transport = GrpcTransport()
    try:
        holder = grpc_holder(tmp_path, transport)
        report = await holder.rehydrate("v", [held], witnesses=[witness.address])
        audit(report, correct_origins={witness.node_id, holder.node_id})
    finally:
        await transport.close()
        await witness.stop(0.2)
    assert origin.proc.wait(timeout=10) == CRASH_EXIT_CODE
    (outcome,) = report.outcomes
    assert outcome.outcome is Outcome.UNANSWERED
    assert outcome.witness_confirmed
    assert Path(outcome.evidence_path).is_file()
