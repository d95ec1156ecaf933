"""The delegating side: send a compacted value to an A2A agent with the SDK's client.

:class:`Delegate` checks the agent's card first — its §8.4 signature against
the node id the caller pins (:func:`nodes.a2a.card.verify_card`) and the
provnet parameters it declares — then sends a delegation message
(:func:`nodes.a2a.extension.delegation_message`) over the binding asked for,
with the extension activated in the headers ``headers`` names: by default
``A2A-Extensions`` (the HTTP header, or gRPC metadata ``a2a-extensions``);
``X-A2A-Extensions`` for v0.3 agents; none to leave it off. The answer is
read into a :class:`DelegationResult`: the agent's decision and reason
(string hints), its signed delivery receipt and any evidence it recorded, as
the bytes it signed or wrote.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import grpc
import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.extensions.common import HTTP_EXTENSION_HEADER as EXTENSIONS_HEADER
from a2a.types import a2a_pb2

from nodes.a2a.card import verify_card
from nodes.a2a.extension import (
    EVIDENCE_MEDIA_TYPE,
    EXTENSION_URI,
    RECEIPT_MEDIA_TYPE,
    delegation_message,
    hint_key,
    read_card_params,
)
from nodes.messages import Delivery

__all__ = ["EXTENSIONS_HEADER", "Binding", "Delegate", "DelegationResult"]

Binding = str  # "JSONRPC" or "GRPC" (a2a.utils.constants.TransportProtocol values)


@dataclass(frozen=True, slots=True)
class DelegationResult:
    """What the agent answered (its bytes kept as they came)."""

    decision: str
    reason: str
    text: str
    receipt: bytes
    evidence: tuple[bytes, ...]
    forwarded: str
    #: The decision's message (a task's final status message, or the answer).
    message: a2a_pb2.Message
    #: The task, when the agent answered with one (an activated delegation).
    task: a2a_pb2.Task | None = None


def _result(message: a2a_pb2.Message, task: a2a_pb2.Task | None = None) -> DelegationResult:
    def hint(name: str) -> str:
        value = message.metadata.fields.get(hint_key(name))
        return value.string_value if value is not None else ""

    parts = [
        *message.parts,
        *(p for a in (task.artifacts if task is not None else ()) for p in a.parts),
    ]
    receipts = [p.raw for p in parts if p.media_type == RECEIPT_MEDIA_TYPE]
    return DelegationResult(
        decision=hint("decision"),
        reason=hint("reason"),
        text="\n".join(p.text for p in message.parts if p.text),
        receipt=receipts[0] if receipts else b"",
        evidence=tuple(p.raw for p in parts if p.media_type == EVIDENCE_MEDIA_TYPE),
        forwarded=hint("forwarded"),
        message=message,
        task=task,
    )


class Delegate:
    """A client for one provnet agent, over one binding."""

    def __init__(
        self,
        card: a2a_pb2.AgentCard,
        *,
        binding: Binding = "JSONRPC",
        trusted_node_id: str | None = None,
        httpx_client: httpx.AsyncClient | None = None,
        headers: tuple[str, ...] = (EXTENSIONS_HEADER,),
        timeout: float = 30.0,
    ) -> None:
        params, self.required = read_card_params(card)  # (the card declares provnet)
        # The card's own key unless the caller pins one: then the card must be that node's.
        verify_card(card, trusted_node_id or params.node_id)
        self.card = card
        self.node_id = params.node_id
        self.headers = headers
        self.timeout = timeout
        config = ClientConfig(
            streaming=False,
            supported_protocol_bindings=[binding],
            httpx_client=httpx_client,
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        self._client = ClientFactory(config).create(card)

    def _context(self) -> ClientCallContext:
        params = dict.fromkeys(self.headers, EXTENSION_URI)
        return ClientCallContext(service_parameters=params, timeout=self.timeout)

    async def send(self, message: a2a_pb2.Message) -> DelegationResult:
        """Send a message as given (no layout of ours enforced) and read the answer."""
        request = a2a_pb2.SendMessageRequest(message=message)
        answer: a2a_pb2.Message | None = None
        task: a2a_pb2.Task | None = None
        async for event in self._client.send_message(request, context=self._context()):
            if event.HasField("message"):
                answer, task = event.message, None
            elif event.HasField("task") and event.task.status.HasField("message"):
                answer, task = event.task.status.message, event.task
        if answer is None:
            raise ValueError(f"agent {self.card.name!r} answered no message")
        return _result(answer, task)

    async def delegate(
        self, delivery: Delivery, action: str = "", *, forward_to: str = ""
    ) -> DelegationResult:
        """Delegate ``action`` on ``delivery``; the agent's answer."""
        message = delegation_message(
            delivery,
            action=action,
            forward_to=forward_to,
            message_id=str(uuid.uuid4()),
            text=f"please {action}" if action else "",
        )
        return await self.send(message)

    async def close(self) -> None:
        await self._client.close()
