"""The one method table (:mod:`nodes.methods`): declared in the ``.proto``, read at import,
and what the node does.

* every rpc of every provnet service has its policy option, and the table read
  from the descriptors is exactly what was decided (:data:`DECIDED`, the
  "Who may call what" of docs/security.md): changing who may call an rpc, or
  how it is admitted or retried, is a deliberate edit here too;
* a missing or self-contradicting option is a :class:`MethodTableError` naming
  the rpc;
* against a real node server (its one method table, bulk admission on, as a
  node runs): a signed method called unsigned is ``UNAUTHENTICATED``, signed by
  a key the node does not authorise ``PERMISSION_DENIED`` for an operator
  method (a peer's own key passes to the core, which judges the request), and
  none of it moves the store; an open method called unsigned with garbage
  answers a proper status (never ``INTERNAL``/``UNKNOWN``/``UNAUTHENTICATED``)
  and moves nothing; with the unsigned callers' bulk slot held, every bulk
  method is shed before its body is read and no other method is;
* the caps and the retry rule follow the table (:class:`nodes.overload.Overload`,
  :func:`nodes.retry.retry_shed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool

from contracts.identity import Identity
from nodes import methods
from nodes._pb.provnet.v1 import (
    attest_pb2,
    custody_pb2,
    deliver_pb2,
    evidence_pb2,
    hoplog_pb2,
    node_pb2,
    policy_pb2,
    serve_pb2,
    witness_pb2,
)
from nodes.app import RunningNode
from nodes.auth import ControlCredentials
from nodes.methods import (
    Access,
    MethodTableError,
    OpenCap,
    Retry,
    Sender,
    policy_from_options,
    read_policies,
)
from nodes.overload import Overload
from nodes.retry import retry_shed
from nodes.servicers import SERVICES
from tests.nodes.rpc_support import grpc_node

_S, _O = Access.SIGNED, Access.OPEN
_OP, _PEER, _BEARER, _ANY = Sender.OPERATOR, Sender.PEER_AS_ITSELF, Sender.BEARER, Sender.ANYONE
_NEVER, _IDEM, _NOT_RUN = Retry.NEVER, Retry.IDEMPOTENT, Retry.NOT_RUN_ONLY

#: Who may call what (docs/security.md, "Threat model, by RPC"), and how each call
#: is admitted and retried: (access, sender, bulk, retry, open cap).
DECIDED: dict[str, tuple[Access, Sender, bool, Retry, OpenCap | None]] = {
    "/provnet.v1.HopLog/Append": (_S, _OP, True, _IDEM, None),
    "/provnet.v1.HopLog/CommitFold": (_S, _OP, True, _NOT_RUN, None),
    "/provnet.v1.HopLog/CommitCompaction": (_S, _OP, True, _NOT_RUN, None),
    "/provnet.v1.Deliver/Deliver": (_S, _PEER, True, _IDEM, None),
    "/provnet.v1.Deliver/Rehydrate": (_S, _OP, True, _IDEM, None),
    "/provnet.v1.Deliver/Forward": (_S, _OP, True, _IDEM, None),
    "/provnet.v1.Evidence/Report": (_S, _OP, False, _NEVER, None),
    "/provnet.v1.Evidence/Challenge": (_O, _ANY, False, _NEVER, OpenCap.WITNESS),
    "/provnet.v1.Attest/Submit": (_O, _ANY, True, _NEVER, None),
    "/provnet.v1.Attest/List": (_O, _ANY, False, _NEVER, OpenCap.SHARED),
    "/provnet.v1.Attest/Request": (_S, _PEER, True, _NEVER, None),
    "/provnet.v1.Attest/Restore": (_S, _OP, True, _NEVER, None),
    "/provnet.v1.Custody/Take": (_S, _PEER, True, _IDEM, None),
    "/provnet.v1.Node/Info": (_O, _ANY, False, _NEVER, OpenCap.SHARED),
    "/provnet.v1.Node/Stats": (_O, _ANY, False, _NEVER, OpenCap.SHARED),
    "/provnet.v1.Serve/Ask": (_O, _ANY, False, _NEVER, None),
    "/provnet.v1.Serve/Demand": (_O, _BEARER, False, _NEVER, OpenCap.NONE),
    "/provnet.v1.Serve/DemandStream": (_O, _BEARER, False, _NEVER, None),
    "/provnet.v1.Witness/AddCheckpoint": (_O, _BEARER, False, _IDEM, OpenCap.SHARED),
}

_MODULES = (
    attest_pb2,
    custody_pb2,
    deliver_pb2,
    evidence_pb2,
    hoplog_pb2,
    node_pb2,
    serve_pb2,
    witness_pb2,
)


def _all_methods() -> dict[str, Any]:
    """Full method name → method descriptor, for every method of every provnet service."""
    return {
        f"/{service.full_name}/{method.name}": method
        for module in _MODULES
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


# --------------------------------------------------------------------------- the table


def test_every_rpc_of_every_service_has_a_policy_and_every_served_one_is_in_the_table() -> None:
    every = set(_all_methods())
    assert every, "no provnet methods found"
    assert set(methods.METHODS) == every
    served = {name for name in every if name.split("/")[1] in {s.name for s in SERVICES}}
    assert served == every, f"methods no node serves: {sorted(every - served)}"


def test_the_table_read_from_the_descriptors_is_what_was_decided() -> None:
    read = {
        name: (p.access, p.sender, p.bulk, p.retry, p.open_cap)
        for name, p in methods.METHODS.items()
    }
    assert read == DECIDED
    for name, p in methods.METHODS.items():
        assert p.reason.strip(), name
        assert bool(p.retry_reason) is p.retried, name


def test_the_reference_page_lists_the_table() -> None:
    """docs/wire.md, "Method policy": one row per rpc, as the table reads."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "wire.md").read_text(encoding="utf-8")
    section = text.split("| RPC | access | sender | bulk | retry | open cap |", 1)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows["/provnet.v1." + cells[0].strip("`").replace(".", "/")] = tuple(cells[1:])
    expected = {
        name: (p.access, p.sender, "yes" if p.bulk else "no", p.retry, p.open_cap or "—")
        for name, p in methods.METHODS.items()
    }
    assert rows == expected


def test_the_views_are_the_table() -> None:
    assert {n for n, d in DECIDED.items() if d[0] is _S} == methods.SIGNED
    assert {n for n, d in DECIDED.items() if d[1] is _OP} == methods.OPERATOR_ONLY
    assert {n for n, d in DECIDED.items() if d[2]} == methods.BULK
    assert methods.method_name("Deliver", "Deliver") == "/provnet.v1.Deliver/Deliver"
    with pytest.raises(KeyError, match=r"/provnet\.v1\.Deliver/Nope is not a provnet\.v1"):
        methods.method_name("Deliver", "Nope")


def _bare_service(options: descriptor_pb2.MethodOptions | None, streaming: bool = False) -> Any:
    """A service ``provnet.test.Bare`` with one rpc ``Nope`` carrying ``options``."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="provnet/test/bare.proto", package="provnet.test", syntax="proto3"
    )
    proto.message_type.add(name="Empty")
    method = proto.service.add(name="Bare").method.add(
        name="Nope",
        input_type=".provnet.test.Empty",
        output_type=".provnet.test.Empty",
        server_streaming=streaming,
    )
    if options is not None:
        method.options.CopyFrom(options)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(proto.SerializeToString())
    return pool.FindServiceByName("provnet.test.Bare")


def _options(**fields: Any) -> descriptor_pb2.MethodOptions:
    options = descriptor_pb2.MethodOptions()
    options.Extensions[policy_pb2.policy].CopyFrom(policy_pb2.MethodPolicy(**fields))
    return options


_OPEN_READ = {
    "access": policy_pb2.ACCESS_OPEN,
    "reason": "reads",
    "sender": policy_pb2.SENDER_ANYONE,
    "retry": policy_pb2.RETRY_NEVER,
    "open_cap": policy_pb2.OPEN_CAP_SHARED,
}


def test_an_rpc_without_the_option_is_an_error_naming_it() -> None:
    with pytest.raises(MethodTableError, match=r"/provnet\.test\.Bare/Nope declares no policy"):
        read_policies([_bare_service(None)])
    with pytest.raises(MethodTableError, match=r"/provnet\.test\.Bare/Nope declares no policy"):
        read_policies([_bare_service(descriptor_pb2.MethodOptions())])
    # the same descriptor with the option reads (through a pool of its own)
    table = read_policies([_bare_service(_options(**_OPEN_READ))])
    assert table["/provnet.test.Bare/Nope"].open_cap is OpenCap.SHARED


@pytest.mark.parametrize(
    ("change", "streaming", "error"),
    [
        ({"access": policy_pb2.ACCESS_UNSPECIFIED}, False, "access is unset"),
        ({"sender": policy_pb2.SENDER_UNSPECIFIED}, False, "sender is unset"),
        ({"retry": policy_pb2.RETRY_UNSPECIFIED}, False, "retry is unset"),
        ({"reason": " "}, False, "says no reason"),
        ({"sender": policy_pb2.SENDER_OPERATOR}, False, "open method cannot be called by"),
        (
            {"access": policy_pb2.ACCESS_SIGNED, "sender": policy_pb2.SENDER_BEARER},
            False,
            "signed method cannot be called by sender bearer",
        ),
        ({"retry": policy_pb2.RETRY_IDEMPOTENT}, False, "without a retry_reason"),
        ({"retry_reason": "why not"}, False, "never retried"),
        ({"open_cap": policy_pb2.OPEN_CAP_UNSPECIFIED}, False, "open_cap is unset"),
        (
            {"bulk": True},
            False,
            "open_cap applies only to open, unary, non-bulk methods",
        ),
        ({"bulk": True, "open_cap": policy_pb2.OPEN_CAP_UNSPECIFIED}, True, "must be unary"),
        ({}, True, "open_cap applies only to open, unary, non-bulk methods"),
        (
            {"retry": policy_pb2.RETRY_IDEMPOTENT, "retry_reason": "r", "open_cap": 0},
            True,
            "only unary methods are retried",
        ),
    ],
)
def test_a_contradicting_option_is_an_error_naming_the_rpc(
    change: dict[str, Any], streaming: bool, error: str
) -> None:
    with pytest.raises(MethodTableError, match=rf"^/provnet\.test\.Bare/Nope: .*{error}"):
        policy_from_options(
            "/provnet.test.Bare/Nope",
            _options(**{**_OPEN_READ, **change}),
            server_streaming=streaming,
        )


def test_caps_follow_the_table() -> None:
    overload = Overload(max_streams=4, max_open_calls=8)
    for name, p in methods.METHODS.items():
        slots = overload.slots_for(name, unary=p.unary)
        if not p.unary:
            assert slots is overload.streams[name], name
        elif p.open_cap is OpenCap.SHARED:
            assert slots is overload.open_calls, name
        elif p.open_cap is OpenCap.WITNESS:
            assert slots is overload.challenges, name
        else:  # signed, bulk, or the serve path
            assert slots is None, name
    assert overload.slots_for("/grpc.health.v1.Health/Check", unary=True) is None
    assert overload.slots_for("/some.Other/Unary", unary=True) is overload.open_calls


async def test_retry_follows_the_table() -> None:
    async def once(left: float) -> str:
        return "ran"

    for name, p in methods.METHODS.items():
        if p.retried:
            assert await retry_shed(name, once, 1.0) == "ran", name
        else:
            with pytest.raises(ValueError, match="is not a retry-safe method"):
                await retry_shed(name, once, 1.0)
    with pytest.raises(ValueError, match="has no policy"):
        await retry_shed("/some.Other/Call", once, 1.0)


# --------------------------------------------------------------------------- a real node


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


async def _status(chan: grpc.aio.Channel, name: str, body: bytes, md: Any = ()) -> Any:
    """The status code name and details a call of ``name`` with ``body`` ends with."""
    method = _all_methods()[name]
    call = _call(chan, name, method)(body, metadata=md, timeout=10)
    try:
        if method.server_streaming:
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name), exc.details() or ""
    return "OK", ""


async def _code(chan: grpc.aio.Channel, name: str, body: bytes, md: Any = ()) -> str:
    code, _ = await _status(chan, name, body, md)
    return str(code)


async def test_signed_methods_refuse_the_unsigned_and_the_unauthorised_and_write_nothing(
    node: RunningNode,
) -> None:
    stranger = ControlCredentials(Identity.generate())
    before = await node.core.store.table_digest()
    async with grpc.aio.insecure_channel(node.address) as chan:
        for name in sorted(methods.SIGNED):
            for body in (b"", b"\x0a\x03abc", b"\xff\xff\xff"):
                code = await _code(chan, name, body)
                assert code == "UNAUTHENTICATED", (name, body, code)
                signed = stranger.metadata(name, body, target=node.core.node_id)
                code, details = await _status(chan, name, body, signed)
                # what the signature check says to a key it does not authorise
                refused_by_auth = details.endswith("is not an operator key of node 'table'")
                if methods.policy(name).operator_only:
                    assert code == "PERMISSION_DENIED", (name, body, code)
                    assert refused_by_auth, (name, details)
                else:  # a peer signs as itself: the core judges the request
                    assert code not in {"INTERNAL", "UNKNOWN"}, (name, body, code)
                    assert not refused_by_auth, (name, details)
    assert await node.core.store.table_digest() == before


async def test_open_methods_answer_garbage_properly_and_write_nothing(node: RunningNode) -> None:
    before = await node.core.store.table_digest()
    open_methods = sorted(n for n, p in methods.METHODS.items() if not p.signed)
    assert open_methods
    async with grpc.aio.insecure_channel(node.address) as chan:
        for name in open_methods:
            for body in (b"", b"\x0a\x03abc", b"\xff\xff\xff"):
                code = await _code(chan, name, body)
                assert code not in {"INTERNAL", "UNKNOWN", "UNAUTHENTICATED"}, (name, body, code)
    assert await node.core.store.table_digest() == before


async def _bodiless(release: asyncio.Event) -> AsyncIterator[bytes]:
    await release.wait()
    return
    yield b""  # pragma: no cover - makes this an async generator


async def test_with_the_unsigned_bulk_slot_held_every_bulk_method_is_shed_and_no_other(
    tmp_path: Path,
) -> None:
    """Four bulk slots: unsigned callers share one. Held by a bodiless ``Attest.Submit``,
    every bulk method called unsigned is shed before its body is read (and before its
    missing signature is even looked at); every other method answers as it would."""
    node = await grpc_node(tmp_path, "bulk", max_bulk_rpcs=4)
    release = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(node.address) as chan:
            holder = chan.stream_unary("/provnet.v1.Attest/Submit", None, None)(
                _bodiless(release), timeout=30
            )
            assert await holder.initial_metadata(), "the bodiless Submit was not admitted"
            assert node.server.requests.bulk_in_flight == 1
            for name in sorted(methods.METHODS):
                code, details = await _status(chan, name, b"\xff\xff\xff")
                if methods.policy(name).bulk:
                    assert code == "RESOURCE_EXHAUSTED", (name, code, details)
                    assert "shed before reading the request" in details, (name, details)
                else:
                    assert code != "RESOURCE_EXHAUSTED", (name, code, details)
            release.set()
            with pytest.raises(grpc.aio.AioRpcError):
                await holder
    finally:
        release.set()
        await node.stop(0.2)
