"""Property: every RPC, fed generated out-of-range and malformed fields, answers a proper
status — never INTERNAL or UNKNOWN — and a rejected call leaves the store as it was.

The node is a real grpc.aio server (``nodes.app.start_node``) running on its own
event loop in a thread; the generated calls come over a plain synchronous
channel, control calls signed with the test operator key (so they reach the
handlers instead of stopping at the signature check). The store is compared
with :meth:`nodes.store.HopStore.table_digest` (every row of every table).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.rules import MIN_DEADLINE_MS
from nodes._pb.provnet.v1 import (
    attest_pb2,
    common_pb2,
    deliver_pb2,
    evidence_pb2,
    hoplog_pb2,
    node_pb2,
    serve_pb2,
    witness_pb2,
)
from nodes.app import RunningNode
from tests.nodes.rpc_support import TEST_OPERATOR, grpc_node, hop_json

U64 = st.one_of(st.sampled_from([0, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1]),
                st.integers(0, 2**64 - 1))  # fmt: skip
U32 = st.one_of(st.sampled_from([0, 1, 49, 60_001, 2**32 - 1]), st.integers(0, 2**32 - 1))
TEXT = st.one_of(
    st.sampled_from(["", "v", "not an address", "127.0.0.1:1", "a" * 300, "a=b", "\x00", "é"]),
    st.text(max_size=80),
)
JSONISH = st.sampled_from(
    [
        b"",
        b"{}",
        b"[]",
        b"null",
        b'{"step": 18446744073709551615}',
        b'{"step": 1, "x": 1e400}',
        b'{"step": 1, "x": NaN}',
        b'{"step": -1}',
        b'{"a": "\\ud800"}',
        b'{"payload": "e30=", "payloadType": "x", "signatures": []}',
        b"\xff\xfe",
        b'{"step": 1, "step": 2}',
    ]
)
HOP = st.builds(lambda step: hop_json(step % 10_000), st.integers(0, 2**64 - 1))
BLOB = st.one_of(JSONISH, HOP, st.binary(max_size=200))
#: Seqs the node holds (appended by the fixture), so commits get past "missing hop".
HELD = [1, 2, 3]
SEQS = st.lists(st.one_of(st.sampled_from(HELD), U64), max_size=3)


#: method path -> (request class, strategy of field dicts)
CALLS: dict[str, tuple[Any, Any]] = {
    "/provnet.v1.HopLog/Append": (
        hoplog_pb2.AppendRequest,
        st.one_of(
            st.fixed_dictionaries({"hops": st.lists(BLOB, max_size=3), "seqs": SEQS}),
            # Well-formed hops, one seq each: the checks behind the shape checks.
            st.lists(st.tuples(HOP, U64), min_size=1, max_size=3).map(
                lambda pairs: {"hops": [h for h, _ in pairs], "seqs": [q for _, q in pairs]}
            ),
        ),
    ),
    "/provnet.v1.HopLog/CommitFold": (
        hoplog_pb2.CommitFoldRequest,
        st.fixed_dictionaries(
            {
                "value_ref": st.one_of(st.sampled_from(["v", "w"]), TEXT),
                "seqs": st.one_of(
                    st.lists(st.sampled_from(HELD), min_size=1, max_size=3, unique=True), SEQS
                ),
                "serve_for_ms": U64,
                "deadline_ms": U32,
                "value": BLOB,
            }
        ),
    ),
    "/provnet.v1.HopLog/CommitCompaction": (
        hoplog_pb2.CommitCompactionRequest,
        st.fixed_dictionaries(
            {
                "folds": st.lists(
                    st.builds(
                        hoplog_pb2.CompactionFold,
                        value_ref=st.one_of(st.sampled_from(["v", "w"]), TEXT),
                        seqs=st.one_of(
                            st.lists(st.sampled_from(HELD), min_size=1, max_size=3, unique=True),
                            SEQS,
                        ),
                        value=BLOB,
                    ),
                    max_size=2,
                ),
                "serve_for_ms": U64,
                "deadline_ms": U32,
            }
        ),
    ),
    "/provnet.v1.Serve/Demand": (
        serve_pb2.DemandRequest,
        st.fixed_dictionaries({"demands": st.lists(BLOB, max_size=3)}),
    ),
    "/provnet.v1.Deliver/Deliver": (
        deliver_pb2.DeliverRequest,
        st.fixed_dictionaries(
            {
                "sender": TEXT,
                "value": st.builds(
                    common_pb2.DeliveredValue,
                    value_ref=TEXT,
                    value=BLOB,
                    commitments=st.lists(BLOB, max_size=2),
                    obligations=st.lists(BLOB, max_size=2),
                ),
            }
        ),
    ),
    "/provnet.v1.Deliver/Rehydrate": (
        deliver_pb2.RehydrateRequest,
        st.fixed_dictionaries({"value_ref": TEXT, "witnesses": st.lists(TEXT, max_size=2)}),
    ),
    "/provnet.v1.Deliver/Forward": (
        deliver_pb2.ForwardRequest,
        st.fixed_dictionaries({"value_ref": TEXT, "peer": TEXT}),
    ),
    "/provnet.v1.Attest/Submit": (
        attest_pb2.SubmitAttestationRequest,
        st.fixed_dictionaries({"attestation": BLOB}),
    ),
    "/provnet.v1.Attest/List": (
        attest_pb2.ListAttestationsRequest,
        st.fixed_dictionaries({"value_digest": TEXT}),
    ),
    "/provnet.v1.Evidence/Report": (
        evidence_pb2.ReportRequest,
        st.fixed_dictionaries({"evidence": BLOB}),
    ),
    "/provnet.v1.Evidence/Challenge": (
        evidence_pb2.ChallengeRequest,
        st.fixed_dictionaries(
            {"commitment": BLOB, "obligation": BLOB, "demand": BLOB, "origin_address": TEXT}
        ),
    ),
    "/provnet.v1.Node/Info": (node_pb2.InfoRequest, st.just({})),
    "/provnet.v1.Node/Stats": (node_pb2.StatsRequest, st.just({})),
    "/provnet.v1.Witness/AddCheckpoint": (
        witness_pb2.AddCheckpointRequest,
        st.fixed_dictionaries(
            {
                "body": st.one_of(
                    BLOB,
                    # the body's shape, with a checkpoint of any bytes after it
                    st.builds(
                        lambda old, lines, note: b"old " + old + b"\n" + lines + b"\n" + note,
                        st.sampled_from([b"0", b"1", b"01", b"18446744073709551616", b"x"]),
                        st.sampled_from([b"", b"AAAA\n", b"A" * 43 + b"=\n", b"\xff\n"]),
                        st.one_of(BLOB, st.sampled_from([b"provnet/x/y\n1\nAA==\n\n"])),
                    ),
                )
            }
        ),
    ),
}
STREAMS: dict[str, tuple[Any, Any]] = {
    "/provnet.v1.Serve/DemandStream": (
        serve_pb2.DemandStreamRequest,
        st.fixed_dictionaries({"demand": BLOB, "max_chunk_bytes": U32}),
    ),
}
BAD_CODES = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}


@dataclass(slots=True)
class Served:
    node: RunningNode
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=30)

    def digest(self) -> str:
        digest: str = self.run(self.node.core.store.table_digest())
        return digest


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root: Path = tmp_path_factory.mktemp("fuzz")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    holder = Served(node=None, loop=loop)  # type: ignore[arg-type]
    # No reaper: it evicts folds that earlier examples committed with a serving
    # term of a few ms, and a write of its own between an example's two store
    # digests would be taken for the rejected call's.
    node = grpc_node(root, "fuzz", deadline_ms=MIN_DEADLINE_MS, reap_interval_s=0, witness_logs="*")
    holder.node = holder.run(node)
    holder.run(holder.node.core.append([hop_json(s) for s in HELD], HELD))
    try:
        yield holder
    finally:
        holder.run(holder.node.stop(0.2))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def _caller(channel: grpc.Channel, method: str, cls: Any, stream: bool) -> Callable[..., Any]:
    if stream:
        return channel.unary_stream(
            method, request_serializer=cls.SerializeToString, response_deserializer=bytes
        )
    return channel.unary_unary(
        method, request_serializer=cls.SerializeToString, response_deserializer=bytes
    )


@pytest.mark.parametrize("method", sorted({**CALLS, **STREAMS}))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_rpc_rejects_bad_fields_with_a_proper_status_and_no_write(
    served: Served, method: str, data: st.DataObject
) -> None:
    table = {**CALLS, **STREAMS}
    cls, fields = table[method]
    request = cls(**data.draw(fields, label="fields"))
    before = served.digest()
    metadata = TEST_OPERATOR.metadata(
        method, request.SerializeToString(), target=served.node.core.node_id
    )
    failed: Any = None
    with grpc.insecure_channel(served.node.address) as channel:
        call = _caller(channel, method, cls, method in STREAMS)
        try:
            reply = call(request, timeout=5, metadata=metadata)
            if method in STREAMS:
                list(reply)
        except grpc.RpcError as exc:
            failed = exc
    if failed is not None:
        code, details = failed.code(), failed.details()
        assert code not in BAD_CODES, (method, request, details)
        assert served.digest() == before, (method, request, code)
