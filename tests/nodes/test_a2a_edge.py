"""The A2A surface at its edge: bad input is an A2A error or a refusal, never a crash.

Over JSON-RPC (the SDK's client and server through ``httpx.ASGITransport``),
against a receiving agent B and an honest origin A: a malformed part, a part
of the wrong kind, a card whose signature fails, statements for another
value, an oversized part, a ``Struct`` number where a string is required —
each answered with the A2A error that names it; and a property test sends
generated bad messages. After all of them B holds no evidence: nothing an
unsigned or unverifiable message says can accuse anybody.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Coroutine, Iterator
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.errors import BadSignature
from examples.a2a.scenario import compacted_value, delegate_to, start_agent
from nodes.a2a.agent import Decision, ProvnetAgent
from nodes.a2a.delegate import Delegate
from nodes.a2a.extension import (
    DELIVERY_MEDIA_TYPE,
    EXTENSION_URI,
    HINT_VALUE_REF,
    delegation_message,
    hint_key,
)
from nodes.messages import Delivery

T = TypeVar("T")

#: B's message bound in these tests (small, so the oversized case is cheap).
MAX_BYTES = 64 * 1024


class _Loop:
    """An event loop on its own thread: the property test is synchronous."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclasses.dataclass
class Edge:
    loop: _Loop
    a: ProvnetAgent
    b: ProvnetAgent
    to_b: Delegate
    value: Delivery
    stack: AsyncExitStack

    def send(self, message: a2a_pb2.Message) -> Any:
        """B's answer, or the A2A error it raised (returned, not raised)."""

        async def go() -> Any:
            try:
                return await self.to_b.send(message)
            except A2AError as exc:
                return exc

        return self.loop.run(go())

    def evidence_total(self) -> int:
        counters = self.loop.run(self.b.node.core.stats())
        return counters.get("evidence_total", 0)


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    root = tmp_path_factory.mktemp("a2a-edge")
    loop = _Loop()

    async def up() -> Edge:
        stack = AsyncExitStack()
        a = await start_agent(stack, root, "a")
        b = await start_agent(stack, root, "b", max_message_bytes=MAX_BYTES)
        to_b = await stack.enter_async_context(delegate_to(b, "JSONRPC"))
        value = await compacted_value(a.node, "v")
        return Edge(loop, a, b, to_b, value, stack)

    state = loop.run(up())
    try:
        yield state
    finally:
        loop.run(state.stack.aclose())
        loop.close()


def _message(delivery: Delivery, **hints: str) -> a2a_pb2.Message:
    return delegation_message(delivery, message_id=str(uuid.uuid4()), **hints)


def _delivery_part(message: a2a_pb2.Message) -> a2a_pb2.Part:
    (part,) = [p for p in message.parts if p.media_type == DELIVERY_MEDIA_TYPE]
    return part


def test_a_valid_delegation_is_acted_on(edge: Edge) -> None:
    answer = edge.send(_message(edge.value, action="act"))
    assert answer.decision == Decision.ACTED, answer


def test_malformed_part_is_invalid_params_naming_the_part(edge: Edge) -> None:
    message = _message(edge.value)
    _delivery_part(message).raw = b"\xff\x00garbage"
    err = edge.send(message)
    assert isinstance(err, InvalidParamsError), err
    assert "not a DeliverRequest" in err.message


def test_a_delivery_part_as_text_is_content_type_not_supported(edge: Edge) -> None:
    message = _message(edge.value)
    _delivery_part(message).text = "hello"
    err = edge.send(message)
    assert isinstance(err, ContentTypeNotSupportedError), err
    assert "raw bytes" in err.message


def test_two_delivery_parts_are_refused(edge: Edge) -> None:
    message = _message(edge.value)
    message.parts.append(_delivery_part(message))
    err = edge.send(message)
    assert isinstance(err, InvalidParamsError), err
    assert "exactly one" in err.message


def test_statements_that_do_not_prove_the_value_are_refused(edge: Edge) -> None:
    # t's fold proof with the head of another compaction (value u): the proof
    # names a head the message does not carry and B never verified.
    mine = edge.loop.run(compacted_value(edge.a.node, "t"))
    other = edge.loop.run(compacted_value(edge.a.node, "u"))
    mixed = dataclasses.replace(mine, heads=other.heads)
    err = edge.send(_message(mixed))
    assert isinstance(err, InvalidParamsError), err
    assert "fold proof names head" in err.message
    # And hints that name another value than the part carries.
    message = _message(edge.value)
    message.metadata.update({hint_key(HINT_VALUE_REF): "w"})
    err = edge.send(message)
    assert isinstance(err, InvalidParamsError), err
    assert "names value 'w'" in err.message


def test_a_value_carrying_another_values_folds_is_taken_as_provnet_takes_it(edge: Edge) -> None:
    # A merged value inherits its inputs' folds (harness.boundary.runner): the
    # node accepts folds of another value_ref, so the A2A layer does too. The
    # value's own bytes are not bound by the head (docs/a2a.md, "What binds").
    relabelled = dataclasses.replace(edge.value, value_ref="w")
    answer = edge.send(_message(relabelled))
    assert answer.decision == Decision.ACTED, answer


def test_an_oversized_part_is_refused_before_it_is_parsed(edge: Edge) -> None:
    message = _message(edge.value)
    _delivery_part(message).raw = b"\x00" * (MAX_BYTES + 1)
    err = edge.send(message)
    assert isinstance(err, InvalidParamsError), err
    assert f"limit {MAX_BYTES}" in err.message


def test_an_oversized_http_body_is_refused_before_the_sdk_reads_it(edge: Edge) -> None:
    limit = 2 * MAX_BYTES

    async def post(body: bytes) -> httpx.Response:
        transport = httpx.ASGITransport(app=edge.b.asgi_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://b.agent") as http:
            return await http.post("/", content=body, headers={"content-type": "application/json"})

    reply = edge.loop.run(post(b"x" * (limit + 1)))
    assert reply.status_code == 413
    assert reply.json()["error"]["code"] == -32600
    assert f"exceeds limit {limit}" in reply.json()["error"]["message"]


def test_a_struct_number_where_a_string_is_required_is_refused(edge: Edge) -> None:
    message = _message(edge.value)
    # 2^53 + 1 would arrive as 2^53: a double, never coerced into a name.
    message.metadata.update({hint_key(HINT_VALUE_REF): 2**53 + 1})
    err = edge.send(message)
    assert isinstance(err, InvalidParamsError), err
    assert "must be a string, got number_value" in err.message


def test_a_card_whose_signature_fails_is_refused_before_anything_is_sent(edge: Edge) -> None:
    card = a2a_pb2.AgentCard()
    card.CopyFrom(edge.b.card)
    card.supported_interfaces[0].url = "http://elsewhere/"
    with pytest.raises(BadSignature, match="no signature by"):
        Delegate(card, trusted_node_id=edge.b.node_id)
    # A valid card of another node than the one pinned: refused too.
    with pytest.raises(BadSignature, match="kid"):
        Delegate(edge.b.card, trusted_node_id=edge.a.node_id)


def test_a_rehydration_that_raises_is_a_refusal_not_a_failed_call(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(value_ref: str, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("store closed")

    monkeypatch.setattr(edge.b.node.core, "rehydrate", broken)
    answer = edge.send(_message(edge.value, action="act"))
    assert answer.decision == Decision.REFUSED, answer
    assert "rehydration of 'v' failed: store closed" in answer.reason


def test_streaming_is_refused_by_the_sdk_before_anything_is_admitted(edge: Edge) -> None:
    async def stream() -> Any:
        context = ServerCallContext(requested_extensions={EXTENSION_URI})
        request = a2a_pb2.SendMessageRequest(message=_message(edge.value))
        try:
            async for _ in edge.b.handler.on_message_send_stream(request, context):
                pass
        except A2AError as exc:
            return exc, context.state
        return None, context.state

    err, state = edge.loop.run(stream())
    assert isinstance(err, UnsupportedOperationError), err
    assert "provnet.admitted" not in state


def test_no_bad_message_produced_evidence(edge: Edge) -> None:
    assert edge.evidence_total() == 0
    assert list(edge.b.node.config.evidence_path.glob("*")) == []


# --------------------------------------------------------------------------- property


_hint_values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=5), max_size=3),
)
_metadata = st.dictionaries(
    st.one_of(st.sampled_from([hint_key(h) for h in ("valueRef", "action", "forwardTo", "x")])),
    _hint_values,
    max_size=3,
)


@st.composite
def _bad_messages(draw: st.DrawFn, base: bytes) -> a2a_pb2.Message:
    # Mostly near-valid (the URI named, one delivery part, bytes mutated), so
    # most examples reach the node's own checks, not only the layout's.
    message = a2a_pb2.Message(message_id="m", role=a2a_pb2.ROLE_USER)
    if draw(st.sampled_from([True, True, True, False])):
        message.extensions.append(EXTENSION_URI)
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 0, 2]))):
        kind = draw(
            st.sampled_from(["flip"] * 6 + ["cut", "cut", "random", "text", "url", "data", "same"])
        )
        part = a2a_pb2.Part(
            media_type=draw(st.sampled_from([DELIVERY_MEDIA_TYPE] * 5 + ["", "text/plain"]))
        )
        if kind == "flip":
            raw = bytearray(base)
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= draw(st.integers(1, 255))
            part.raw = bytes(raw)
        elif kind == "cut":
            part.raw = base[: draw(st.integers(0, len(base) - 1))]
        elif kind == "random":
            part.raw = draw(st.binary(max_size=512))
        elif kind == "text":
            part.text = draw(st.text(max_size=20))
        elif kind == "url":
            part.url = "http://example.invalid/x"
        elif kind == "data":
            part.data.string_value = draw(st.text(max_size=20))
        else:
            part.raw = base
        message.parts.append(part)
    if draw(st.sampled_from([False, False, True])):
        message.metadata.update(draw(_metadata))
    return message


def test_generated_bad_messages_get_an_a2a_error_or_an_answer_never_a_crash(edge: Edge) -> None:
    base = _delivery_part(_message(edge.value)).raw
    before = edge.evidence_total()

    @settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
    @given(message=_bad_messages(base))
    def check(message: a2a_pb2.Message) -> None:
        answer = edge.send(message)
        if isinstance(answer, A2AError):
            assert not isinstance(answer, InternalError), answer.message
            assert answer.message
        else:
            assert answer.decision in {d.value for d in Decision}, answer

    check()
    assert edge.evidence_total() == before
