"""Every route reads the origin's rules from one place (contracts.rules), and refuses
a promise the rules refuse with the same error: :class:`nodes.errors.PromiseOutOfRange`
(OUT_OF_RANGE), in the words of :func:`contracts.rules.promise_refusal`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import grpc
import pytest

import contracts.evidence
import nodes.config
import nodes.services
from contracts import rules
from contracts.identity import Identity, save_identity
from contracts.rules import MAX_SERVE_FOR_MS, promise_refusal
from nodes._pb.provnet.v1 import hoplog_pb2, hoplog_pb2_grpc
from nodes.api import RequestRejected, connect, open_node
from nodes.config import ConfigError, NodeConfig
from nodes.errors import PromiseOutOfRange, status_for
from tests.nodes.rpc_support import MemCluster, grpc_node, hop_json, operator_channel

#: A promise no route signs: an answer within 10 ms.
TOO_FAST = 10
TOO_FAST_SAYS = promise_refusal(deadline_ms=TOO_FAST)
TOO_LONG_SAYS = promise_refusal(serve_for_ms=MAX_SERVE_FOR_MS + 1)


def test_every_route_reads_the_same_bounds_and_window() -> None:
    assert nodes.config.MIN_DEADLINE_MS is rules.MIN_DEADLINE_MS
    assert nodes.config.MAX_DEADLINE_MS is rules.MAX_DEADLINE_MS
    assert contracts.evidence.CLEARING_SKEW_MS == rules.DEMAND_WINDOW_MS


def _refused_as_a_request_is(exc: BaseException, says: str) -> None:
    assert isinstance(exc, PromiseOutOfRange)
    assert status_for(exc) is grpc.StatusCode.OUT_OF_RANGE
    assert says in str(exc)


# ------------------------------------------------------------------ requests


async def test_a_remote_commit_fold_of_a_10_ms_promise_is_refused_out_of_range(
    tmp_path: Path,
) -> None:
    node = await grpc_node(tmp_path, "origin")
    try:
        async with operator_channel(node.address) as chan:
            stub: Any = hoplog_pb2_grpc.HopLogStub(chan)
            await stub.Append(hoplog_pb2.AppendRequest(hops=[hop_json(1)], seqs=[1]), timeout=30)
            for request, says in (
                (hoplog_pb2.CommitFoldRequest(value_ref="v", seqs=[1], deadline_ms=TOO_FAST),
                 TOO_FAST_SAYS),
                (hoplog_pb2.CommitFoldRequest(
                    value_ref="v", seqs=[1], serve_for_ms=MAX_SERVE_FOR_MS + 1),
                 TOO_LONG_SAYS),
            ):  # fmt: skip
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.CommitFold(request, timeout=30)
                assert refused.value.code() is grpc.StatusCode.OUT_OF_RANGE
                assert says in (refused.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CommitCompaction(
                    hoplog_pb2.CommitCompactionRequest(
                        folds=[hoplog_pb2.CompactionFold(value_ref="v", seqs=[1])],
                        deadline_ms=TOO_FAST,
                    ),
                    timeout=30,
                )
            assert refused.value.code() is grpc.StatusCode.OUT_OF_RANGE
            assert TOO_FAST_SAYS in (refused.value.details() or "")
    finally:
        await node.stop(0.2)


async def test_an_in_process_commit_of_a_10_ms_promise_is_refused_the_same_way(
    tmp_path: Path,
) -> None:
    cluster = MemCluster(tmp_path)
    try:
        core = await cluster.add("a")
        _, seqs = await core.append([hop_json(1)])
        with pytest.raises(PromiseOutOfRange) as fold:
            await core.commit_fold("v", seqs, deadline_ms=TOO_FAST)
        _refused_as_a_request_is(fold.value, TOO_FAST_SAYS)
        with pytest.raises(PromiseOutOfRange) as compaction:
            await core.commit_compaction([("v", seqs, b"")], deadline_ms=TOO_FAST)
        _refused_as_a_request_is(compaction.value, TOO_FAST_SAYS)
        with pytest.raises(PromiseOutOfRange) as lifetime:
            await core.commit_fold("v", seqs, serve_for_ms=MAX_SERVE_FOR_MS + 1)
        _refused_as_a_request_is(lifetime.value, TOO_LONG_SAYS)
    finally:
        await cluster.close()


# ------------------------------------------------------------------ configured defaults


def test_a_node_config_built_in_process_with_a_10_ms_default_is_refused(
    tmp_path: Path,
) -> None:
    # before, accepted: every commit taking the default then signed a 10 ms promise
    with pytest.raises(PromiseOutOfRange) as refused:
        NodeConfig(name="a", data_dir=tmp_path, deadline_ms=TOO_FAST)
    _refused_as_a_request_is(refused.value, TOO_FAST_SAYS)
    assert isinstance(refused.value, ConfigError)  # and a settings error to the CLI
    assert str(refused.value).startswith("--deadline-ms ($PROVNET_DEADLINE_MS): ")
    with pytest.raises(PromiseOutOfRange) as lifetime:
        NodeConfig(name="a", data_dir=tmp_path, serve_for_ms=MAX_SERVE_FOR_MS + 1)
    _refused_as_a_request_is(lifetime.value, TOO_LONG_SAYS)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"deadline_ms": str(TOO_FAST)}, TOO_FAST_SAYS),
        ({"deadline_ms": str(rules.MAX_DEADLINE_MS + 1)},
         promise_refusal(deadline_ms=rules.MAX_DEADLINE_MS + 1)),
        ({"serve_for_ms": str(MAX_SERVE_FOR_MS + 1)}, TOO_LONG_SAYS),
    ],
)  # fmt: skip
def test_flags_and_variables_of_a_promise_no_request_gets_are_refused_the_same_way(
    tmp_path: Path, given: dict[str, str], says: str
) -> None:
    env = {"PROVNET_NAME": "a", "PROVNET_DATA_DIR": str(tmp_path)}
    with pytest.raises(PromiseOutOfRange) as flag:
        NodeConfig.from_env_and_args(given, env=env)
    _refused_as_a_request_is(flag.value, says)
    key = next(iter(given))
    variable = {**env, nodes.config.ENV_VARS[key]: given[key]}
    with pytest.raises(PromiseOutOfRange) as from_env:
        NodeConfig.from_env_and_args(None, env=variable)
    _refused_as_a_request_is(from_env.value, says)


async def test_an_in_process_cluster_promising_10_ms_is_refused_before_a_node_opens(
    tmp_path: Path,
) -> None:
    cluster = MemCluster(tmp_path, deadline_ms=TOO_FAST)
    try:
        with pytest.raises(PromiseOutOfRange) as refused:
            await cluster.add("a")
        _refused_as_a_request_is(refused.value, TOO_FAST_SAYS)
        assert cluster.nodes == {}
    finally:
        await cluster.close()


def test_the_configured_bounds_are_the_requests_bounds_at_their_edges(tmp_path: Path) -> None:
    for deadline in (rules.MIN_DEADLINE_MS, rules.MAX_DEADLINE_MS):
        assert NodeConfig(name="a", data_dir=tmp_path, deadline_ms=deadline).deadline_ms == deadline
    for lifetime in (rules.MIN_SERVE_FOR_MS, MAX_SERVE_FOR_MS):
        config = NodeConfig(name="a", data_dir=tmp_path, serve_for_ms=lifetime)
        assert config.serve_for_ms == lifetime


# ------------------------------------------------------------------ the library API (nodes.api)


async def test_the_library_api_refuses_a_10_ms_promise_configured_or_asked(
    tmp_path: Path,
) -> None:
    # configured: a node opened with a 10 ms default never opens
    with pytest.raises(ValueError, match=re.escape(TOO_FAST_SAYS)) as configured:
        async with open_node(tmp_path / "fast", name="fast", deadline_ms=TOO_FAST):
            pytest.fail("a node promising a 10 ms answer opened")
    assert isinstance(configured.value.__cause__, PromiseOutOfRange)
    operator = Identity.generate()
    key = save_identity(operator, tmp_path / "operator.key")
    async with open_node(tmp_path / "o", name="o", operator_keys=[operator.node_id]) as local:
        seqs = await local.append([{"step": 1, "op": "READ"}])
        async with await connect(local.address, key) as remote:
            # asked: the same words and code in this process and across the boundary
            for node, promise, says in (
                (local, {"deadline_ms": TOO_FAST}, TOO_FAST_SAYS),
                (remote, {"deadline_ms": TOO_FAST}, TOO_FAST_SAYS),
                (local, {"serve_for_ms": MAX_SERVE_FOR_MS + 1}, TOO_LONG_SAYS),
                (remote, {"serve_for_ms": MAX_SERVE_FOR_MS + 1}, TOO_LONG_SAYS),
            ):
                with pytest.raises(RequestRejected) as asked:
                    await node.compact("v", seqs, b"value", **promise)
                assert asked.value.code == "OUT_OF_RANGE", (node, promise)
                assert says in str(asked.value), (node, promise)
            # and a promise within the bounds is signed on both
            for node in (local, remote):
                value = await node.compact("v", seqs, b"value", deadline_ms=rules.MIN_DEADLINE_MS)
                assert value.origins == (local.node_id,)
