"""provnet over A2A end to end: the SDK's own client and server, both bindings.

JSON-RPC runs through ``httpx.ASGITransport`` (no socket), gRPC on 127.0.0.1;
rehydration is provnet's Serve on the origin's port in both. What is pinned:

* the example's three runs: faithful (B acts, forwards, C demands from A and
  acts), tampering (B refuses, ``bad_data`` proof naming A that
  ``provnet evidence verify`` accepts), gone (B refuses, witness-confirmed
  ``unanswered`` naming A);
* activation: a required extension not activated is
  ``ExtensionSupportRequiredError`` (JSON-RPC -32008, gRPC FAILED_PRECONDITION),
  raised by the agent — the SDK never raises it; the v0.3 header activates;
  an optional extension ignored still gets a valid answer;
* one port: the A2A service, Serve and health answer on the node's address.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2
from a2a.utils.errors import ExtensionSupportRequiredError
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.evidence import EvidenceKind, EvidenceStatus, verify_evidence
from contracts.signed import open_statement
from contracts.statements import DeliveryReceipt
from examples.a2a.scenario import Run, Scenario, compacted_value, delegate_to, run_scenario
from examples.a2a.scenario import start_agent as start
from nodes.a2a.agent import A2A_SERVICE, RESULT_ARTIFACT, Decision
from nodes.a2a.extension import (
    EXTENSION_URI,
    LEGACY_EXTENSIONS_HEADER,
    RECEIPT_MEDIA_TYPE,
    read_card_params,
)
from nodes.errors import UnknownValue

BINDINGS = ["JSONRPC", "GRPC"]


def _verify_cli(path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "evidence", "verify", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("binding", BINDINGS)
async def test_faithful_origin_b_acts_and_forwards_and_c_demands_from_a(
    tmp_path: Path, binding: str
) -> None:
    run: Run = await run_scenario(tmp_path / "run", Scenario.FAITHFUL, binding)
    assert run.b.decision == Decision.ACTED, run.b.text
    assert "8 folded hops rehydrated and verified" in run.b.reason
    # C acted on the value B forwarded: it rehydrated from A, the origin the heads name.
    assert run.b.forwarded.startswith("forwarded to c: acted"), run.b.forwarded
    # A answered both holders: B's demand and C's, the duty travelling with the value.
    assert run.origin_demand_rpcs == 2
    assert run.evidence_files == ()
    # The answer is a completed task whose result Artifact carries B's signed receipt.
    assert run.b.task is not None
    assert run.b.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    (artifact,) = run.b.task.artifacts
    assert artifact.name == RESULT_ARTIFACT
    assert list(artifact.extensions) == [EXTENSION_URI]
    assert [p.media_type for p in artifact.parts] == [RECEIPT_MEDIA_TYPE]
    receipt = open_statement(run.b.receipt, DeliveryReceipt).statement
    # Over A2A no provnet key signs the call: the receipt names the value's origin.
    assert receipt.sender == run.origin


@pytest.mark.parametrize("binding", BINDINGS)
async def test_tampering_origin_b_refuses_and_keeps_bad_data_naming_a(
    tmp_path: Path, binding: str
) -> None:
    run = await run_scenario(tmp_path / "run", Scenario.TAMPER, binding)
    assert run.b.decision == Decision.REFUSED
    assert run.b.task is not None
    assert run.b.task.status.state == a2a_pb2.TASK_STATE_REJECTED
    assert "bad_data" in run.b.reason
    assert run.b.forwarded == ""  # a refused value is not passed on
    (path,) = run.evidence_files
    verdict = verify_evidence(path.read_bytes(), now=0)
    assert verdict.kind is EvidenceKind.BAD_DATA
    assert verdict.accused == run.origin
    # The evidence travelled back in the answer as the file's bytes.
    assert run.b.evidence == (path.read_bytes(),)
    assert "VALID bad_data" in _verify_cli(path)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_origin_gone_b_refuses_and_keeps_a_witness_confirmed_unanswered(
    tmp_path: Path, binding: str
) -> None:
    run = await run_scenario(tmp_path / "run", Scenario.GONE, binding)
    assert run.b.decision == Decision.REFUSED
    (path,) = run.evidence_files
    verdict = verify_evidence(path.read_bytes(), now=2**62)
    assert verdict.kind is EvidenceKind.UNANSWERED
    assert verdict.status is EvidenceStatus.WITNESS_CONFIRMED
    assert verdict.accused == run.origin
    assert "VALID unanswered" in _verify_cli(path)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_required_extension_not_activated_is_extension_support_required(
    tmp_path: Path, binding: str
) -> None:
    async with AsyncExitStack() as stack:
        a = await start(stack, tmp_path, "a")
        b = await start(stack, tmp_path, "b")
        to_b = await stack.enter_async_context(delegate_to(b, binding, headers=()))
        value = await compacted_value(a.node, "v")
        # The SDK's client maps the JSON-RPC error (-32008) and the gRPC status
        # (FAILED_PRECONDITION, reason EXTENSION_SUPPORT_REQUIRED) back to the type.
        with pytest.raises(ExtensionSupportRequiredError, match="requires extension"):
            await to_b.delegate(value, "act")
        # Nothing was admitted: B holds no value.
        with pytest.raises(UnknownValue):
            b.node.core.held("v")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_v0_3_header_activates_the_extension(tmp_path: Path, binding: str) -> None:
    async with AsyncExitStack() as stack:
        a = await start(stack, tmp_path, "a")
        b = await start(stack, tmp_path, "b")
        to_b = await stack.enter_async_context(
            delegate_to(b, binding, headers=(LEGACY_EXTENSIONS_HEADER,))
        )
        result = await to_b.delegate(await compacted_value(a.node, "v"), "act")
        assert result.decision == Decision.ACTED, result.text


@pytest.mark.parametrize("binding", BINDINGS)
async def test_optional_extension_ignored_still_gets_a_valid_answer(
    tmp_path: Path, binding: str
) -> None:
    async with AsyncExitStack() as stack:
        a = await start(stack, tmp_path, "a")
        b = await start(stack, tmp_path, "b", required=False)
        assert read_card_params(b.card)[1] is False
        to_b = await stack.enter_async_context(delegate_to(b, binding, headers=()))
        result = await to_b.delegate(await compacted_value(a.node, "v"), "act")
        assert result.decision == Decision.NOT_READ
        assert "not activated" in result.text
        assert result.receipt == b""  # the value was not taken
        assert result.task is None  # a plain message: no task was opened


async def test_a2a_serve_and_health_share_the_nodes_one_port(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        b = await start(stack, tmp_path, "b")
        params, required = read_card_params(b.card)
        grpc_urls = [i.url for i in b.card.supported_interfaces if i.protocol_binding == "GRPC"]
        assert grpc_urls == [b.node.address] == [params.rehydration_endpoint]
        assert required
        assert params.node_id == b.node_id
        async with grpc.aio.insecure_channel(b.node.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in (A2A_SERVICE, "provnet.v1.Serve", ""):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, service


def test_the_example_command_prints_each_agents_decision_and_why(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "examples.a2a", str(tmp_path / "demo"), "--binding", "GRPC"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split("]")[0] for line in lines if line.startswith("[")] == [
        "[faithful over GRPC",
        "[tamper over GRPC",
        "[gone over GRPC",
    ]
    assert any(line.startswith("  B acted: wire-transfer") for line in lines)
    assert any(line.startswith("  B then forwarded to c: acted") for line in lines)
    assert any("B kept evidence bad_data-" in line for line in lines)
    assert any("B kept evidence unanswered-" in line for line in lines)
    assert len(list((tmp_path / "demo").glob("*/b/evidence/*.json"))) == 2
