"""Every method a node serves is either a signed (control) method or a listed open one.

Against a real node server (its one method table, bulk admission on, as a
node runs): every method of every provnet service in the served table is
enumerated from the protobuf descriptors, so a method added to a ``.proto``
without deciding who may call it fails here.

* a signed method (:data:`nodes.auth.SIGNED_METHODS`) called without a
  control signature is ``UNAUTHENTICATED``; a control method signed by a key
  the node does not authorise is ``PERMISSION_DENIED`` (a sender's or
  requester's own key passes to the core, which judges the request); and
  none of it moves the node's store;
* an open method is one of :data:`OPEN` (with why nobody's signature is
  needed there), and called unsigned with an empty or garbage request it
  answers a proper status (never ``INTERNAL``/``UNKNOWN``) and moves nothing
  in the store but what :data:`OPEN` says it may.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from contracts.identity import Identity
from nodes.app import RunningNode
from nodes.auth import CONTROL_METHODS, SIGNED_METHODS, ControlCredentials
from nodes.servicers import SERVICES
from tests.nodes.rpc_support import grpc_node

#: The open methods and why no signature is needed (docs/security.md, "Who may call what").
OPEN: dict[str, str] = {
    "/provnet.v1.Serve/Demand": "a bearer's demand is itself signed and checked by the core",
    "/provnet.v1.Serve/DemandStream": "the same demand, answered in chunks",
    "/provnet.v1.Evidence/Challenge": "a witness re-asks the origin at an address it signed",
    "/provnet.v1.Attest/Submit": "a self-verifying attestation (its attester's signature)",
    "/provnet.v1.Attest/List": "reads attestations",
    "/provnet.v1.Node/Info": "reads the node's id and endpoints",
    "/provnet.v1.Node/Stats": "reads counters",
}


def _served_methods() -> dict[str, Any]:
    """Full method name → its method descriptor, for every provnet service a node adds."""
    from nodes._pb.provnet.v1 import (
        attest_pb2,
        deliver_pb2,
        evidence_pb2,
        hoplog_pb2,
        node_pb2,
        serve_pb2,
    )

    out: dict[str, Any] = {}
    names = {s.name for s in SERVICES}
    for module in (attest_pb2, deliver_pb2, evidence_pb2, hoplog_pb2, node_pb2, serve_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            if service.full_name in names:
                for method in service.methods:
                    out[f"/{service.full_name}/{method.name}"] = method
    return out


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[RunningNode]:
    running = await grpc_node(tmp_path, "table")
    try:
        yield running
    finally:
        await running.stop(0.2)


def _call(chan: grpc.aio.Channel, name: str, method: Any) -> Any:
    """A raw-bytes call of ``name`` (the body is sent as given, the answer read as bytes)."""
    make: Any = chan.unary_stream if method.server_streaming else chan.unary_unary
    return make(name, request_serializer=None, response_deserializer=None)


async def _code(chan: grpc.aio.Channel, name: str, method: Any, body: bytes, md: Any) -> str:
    call = _call(chan, name, method)(body, metadata=md, timeout=10)
    try:
        if method.server_streaming:
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name)
    return "OK"


def test_every_served_method_is_signed_or_listed_open() -> None:
    served = set(_served_methods())
    assert served, "no provnet methods found"
    assert served >= SIGNED_METHODS, sorted(SIGNED_METHODS - served)
    unclassified = served - SIGNED_METHODS - set(OPEN)
    assert not unclassified, f"methods nobody decided who may call: {sorted(unclassified)}"
    assert not (SIGNED_METHODS & set(OPEN)), sorted(SIGNED_METHODS & set(OPEN))


async def test_signed_methods_refuse_the_unsigned_and_the_unauthorised_and_write_nothing(
    node: RunningNode,
) -> None:
    stranger = ControlCredentials(Identity.generate())
    before = await node.core.store.table_digest()
    methods = _served_methods()
    async with grpc.aio.insecure_channel(node.address) as chan:
        for name in sorted(SIGNED_METHODS):
            method = methods[name]
            for body in (b"", b"\x0a\x03abc", b"\xff\xff\xff"):
                code = await _code(chan, name, method, body, ())
                assert code == "UNAUTHENTICATED", (name, body, code)
                signed = stranger.metadata(name, body, target=node.core.node_id)
                code = await _code(chan, name, method, body, signed)
                if name in CONTROL_METHODS:
                    assert code == "PERMISSION_DENIED", (name, body, code)
                else:  # a sender or requester signs as itself: the core judges the request
                    assert code not in {"INTERNAL", "UNKNOWN"}, (name, body, code)
    assert await node.core.store.table_digest() == before


async def test_open_methods_answer_garbage_properly_and_write_nothing(node: RunningNode) -> None:
    before = await node.core.store.table_digest()
    methods = _served_methods()
    async with grpc.aio.insecure_channel(node.address) as chan:
        for name in sorted(OPEN):
            for body in (b"", b"\x0a\x03abc", b"\xff\xff\xff"):
                code = await _code(chan, name, methods[name], body, ())
                assert code not in {"INTERNAL", "UNKNOWN", "UNAUTHENTICATED"}, (name, body, code)
    assert await node.core.store.table_digest() == before
