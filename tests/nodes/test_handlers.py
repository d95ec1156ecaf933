"""The node's handler wrapping (``nodes.interceptors.RequestContext``), on a real grpc.aio server.

A node's server has no interceptor: each method handler is wrapped once when
the server is built and found in one table. What the wrapper does must hold
for every handler it serves, including one that reached the table only as a
generic handler: errors become their precise status (never UNKNOWN or
INTERNAL for a bad request), control methods need a control signature, the
request id is echoed, and open methods are served from the parsed request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import structlog

from contracts.errors import EncodingError
from contracts.identity import Identity
from nodes import auth
from nodes.auth import ControlAuth, ControlCredentials
from nodes.config import LogFormat
from nodes.errors import MalformedRequest
from nodes.interceptors import REQUEST_ID_KEY, MethodCollector, RequestContext
from nodes.logging import configure_logging, get_logger

APPEND = "/provnet.v1.HopLog/Append"  # a control method (operator key only)
DEMAND = "/provnet.v1.Serve/Demand"  # an open method

OPERATOR = Identity.generate()
#: The id of the node the test server stands for (what a signed call must name).
NODE_ID = Identity.generate().node_id


def _identity(raw: bytes) -> bytes:
    return raw


async def _refuse(request: bytes, context: Any) -> bytes:
    if request == b"log":
        get_logger("tests.handlers").warning("handled")
    if request == b"bad-statement":
        raise EncodingError("demand: not a statement")
    if request == b"bad-request":
        raise MalformedRequest("demand: no demands given")
    return b"signer=" + (auth.caller() or "none").encode()


def _handlers() -> dict[str, Any]:
    return {
        name: grpc.unary_unary_rpc_method_handler(
            _refuse, request_deserializer=_identity, response_serializer=_identity
        )
        for name in ("Append", "Demand")
    }


@pytest.fixture(params=["registered", "generic"])
async def address(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A server whose handlers reached the table per method, or only as generic handlers."""
    collected = MethodCollector()
    for service in ("provnet.v1.HopLog", "provnet.v1.Serve"):
        handlers = {
            name: h for name, h in _handlers().items() if f"/{service}/{name}" in (APPEND, DEMAND)
        }
        if request.param == "registered":
            collected.add_registered_method_handlers(service, handlers)
        else:
            collected.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service, handlers),)
            )
    context = RequestContext(auth=ControlAuth({OPERATOR.node_id}, node_id=NODE_ID, node_name="t"))
    server = grpc.aio.server(handlers=[context.handler(collected)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def _call(address: str, method: str, body: bytes, metadata: Any = ()) -> Any:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            method, request_serializer=_identity, response_deserializer=_identity
        )
        return await call(body, metadata=metadata, timeout=5)


async def _code(address: str, method: str, body: bytes, metadata: Any = ()) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(address, method, body, metadata)
    return info.value.code()


async def test_errors_map_to_their_status_on_every_handler(address: str) -> None:
    assert await _code(address, DEMAND, b"bad-statement") is grpc.StatusCode.INVALID_ARGUMENT
    assert await _code(address, DEMAND, b"bad-request") is grpc.StatusCode.INVALID_ARGUMENT


async def test_control_methods_need_an_operator_signature(address: str) -> None:
    assert await _code(address, APPEND, b"x") is grpc.StatusCode.UNAUTHENTICATED
    stranger = ControlCredentials(Identity.generate())
    signed = stranger.metadata(APPEND, b"x", target=NODE_ID)
    assert await _code(address, APPEND, b"x", signed) is grpc.StatusCode.PERMISSION_DENIED
    signed = ControlCredentials(OPERATOR).metadata(APPEND, b"x", target=NODE_ID)
    assert await _call(address, APPEND, b"x", signed) == b"signer=" + OPERATOR.node_id.encode()


async def test_open_methods_are_served_unsigned_with_the_request_id_echoed(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            DEMAND, request_serializer=_identity, response_deserializer=_identity
        )(b"x", metadata=((REQUEST_ID_KEY, "req-7"),), timeout=5)
        assert await call == b"signer=none"
        assert dict(await call.trailing_metadata())[REQUEST_ID_KEY] == "req-7"


@pytest.mark.parametrize("method", [DEMAND, APPEND])
async def test_a_failed_call_carries_the_id_its_failure_is_logged_under_a_served_one_none(
    address: str, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(LogFormat.JSON, "info")
    signed: Any = ()
    if method == APPEND:
        signed = ControlCredentials(OPERATOR).metadata(APPEND, b"bad-request", target=NODE_ID)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_unary(
                method, request_serializer=_identity, response_deserializer=_identity
            )
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call(b"bad-request", metadata=signed, timeout=5)
            ok_metadata: Any = ()
            if method == APPEND:
                ok_metadata = ControlCredentials(OPERATOR).metadata(APPEND, b"x", target=NODE_ID)
            served = call(b"x", metadata=ok_metadata, timeout=5)
            await served
            served_trailers = dict(await served.trailing_metadata() or ())
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    finally:
        structlog.reset_defaults()
    assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    trailers: Any = failed.value.trailing_metadata() or ()
    echoed = dict(trailers).get(REQUEST_ID_KEY)
    (rejected,) = [e for e in lines if e["event"] == "rpc_rejected"]
    assert echoed is not None
    assert echoed == rejected["request_id"], (echoed, rejected)
    assert REQUEST_ID_KEY not in served_trailers


async def test_an_unknown_method_is_unimplemented(address: str) -> None:
    assert await _code(address, "/provnet.v1.Serve/Nope", b"x") is grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize("method", [DEMAND, APPEND])
async def test_events_logged_in_a_call_carry_its_request_id_and_method(
    address: str, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(LogFormat.JSON, "warning")
    try:
        metadata: Any = ((REQUEST_ID_KEY, "req-9"),)
        if method == APPEND:
            metadata += ControlCredentials(OPERATOR).metadata(APPEND, b"log", target=NODE_ID)
        await _call(address, method, b"log", metadata)
        get_logger("tests.handlers").warning("after")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    finally:
        structlog.reset_defaults()
    (handled,) = [e for e in lines if e["event"] == "handled"]
    assert (handled["request_id"], handled["rpc"]) == ("req-9", method)
    (after,) = [e for e in lines if e["event"] == "after"]
    assert "request_id" not in after
    assert "rpc" not in after
