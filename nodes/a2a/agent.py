"""The receiving agent: an A2A server in front of a provnet node.

One process, one node, one gRPC port: :meth:`ProvnetAgent.start` starts the
node (:func:`nodes.app.start_node`) with the A2A gRPC service added to the
node's own grpc.aio server, beside Serve, Deliver and the rest, under the
same health service (``a2a.v1.A2AService`` reported with them). Rehydration
is provnet's Serve service on that port — the endpoint the origin's head
names — not an A2A method: a holder that already speaks provnet demands from
an A2A agent unchanged, and A2A's task model adds nothing to a signed
demand and receipt. The JSON-RPC binding is an ASGI app (:meth:`ProvnetAgent.asgi_app`)
the caller serves however it likes (``httpx.ASGITransport`` in tests).

A delegation is handled in two steps:

1. **admission**, in :class:`ProvnetRequestHandler` before the SDK's handler
   runs: activation (``A2A-Extensions``, ``X-A2A-Extensions`` for v0.3;
   required and absent → ``ExtensionSupportRequiredError``, which the SDK
   never raises itself), the message layout (:func:`nodes.a2a.extension.read_delegation`)
   and the node's own verification of the delivery
   (:meth:`nodes.holding.Holding.deliver`: heads, fold proofs, obligations;
   the value held on one stranger account for all A2A callers). Any failure
   is an A2A error naming it; nothing is held and no evidence is written;
2. **execution**, in :class:`ProvnetExecutor`: the value is rehydrated from
   its origins (:meth:`nodes.holding.Holding.rehydrate` — the holder
   client, its re-asks, its evidence files), the gate decides, the value is
   forwarded unchanged when asked (the duty stays with the value: the next
   agent demands from the origin, not from us), and the answer is a task
   (completed: acted; rejected: refused) whose result Artifact carries our
   signed delivery receipt and the evidence, its status message the decision
   with its reason.

An optional extension a client did not activate yields a plain A2A answer
saying the value was not read, so no action gated on it is taken.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import grpc
from a2a.compat.v0_3.context_builders import (
    V03GrpcServerCallContextBuilder,
    V03ServerCallContextBuilder,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import (
    DefaultGrpcServerCallContextBuilder,
    DefaultRequestHandlerV2,
    GrpcHandler,
)
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
)
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import InternalError, InvalidParamsError
from grpc_health.v1 import health_pb2
from starlette.applications import Starlette

from contracts.errors import ContractError
from contracts.identity import Identity
from nodes.a2a.card import sign_card
from nodes.a2a.extension import (
    EVIDENCE_MEDIA_TYPE,
    EXTENSION_URI,
    RECEIPT_MEDIA_TYPE,
    CardParams,
    Delegation,
    card_extension,
    check_activation,
    hint_key,
    read_delegation,
)
from nodes.app import RunningNode, start_node
from nodes.config import NodeConfig
from nodes.errors import NodeError
from nodes.faults import FaultPlan
from nodes.logging import get_logger
from nodes.messages import Delivery, Outcome, RehydrationReport
from nodes.services import NodeCore

if TYPE_CHECKING:
    from nodes.a2a.delegate import DelegationResult

__all__ = [
    "A2A_ACCOUNT",
    "A2A_SERVICE",
    "RESULT_ARTIFACT",
    "BodyLimit",
    "Decision",
    "Downstream",
    "Gate",
    "ProvnetAgent",
    "ProvnetExecutor",
    "ProvnetRequestHandler",
    "Verdict",
    "build_card",
    "verified_gate",
]

log = get_logger(__name__)

#: The gRPC service name of A2A, as the health service reports it.
A2A_SERVICE = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name
#: The held-value account every A2A delivery is kept on: no A2A caller is
#: authenticated by a provnet key, so none is reserved (:mod:`nodes.held`).
A2A_ACCOUNT = "a2a"
#: Where admission leaves its result for the executor (the call's own state).
_ADMITTED = "provnet.admitted"

#: The name of the result Artifact of an activated delegation.
RESULT_ARTIFACT = "provnet-result"
#: Reply metadata keys (strings, like every hint).
DECISION = hint_key("decision")
REASON = hint_key("reason")


class Decision(StrEnum):
    """What the receiving agent did with the gated action."""

    ACTED = "acted"
    REFUSED = "refused"
    NOT_READ = "not-read"  # the extension was not activated: the value was not looked at


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    reason: str


#: Decides on a delegation after its rehydration (verified hops, or outcomes).
Gate = Callable[[Delegation, RehydrationReport], Verdict]
#: Forwards a value to a named agent with an action: e.g. ``Delegate.delegate``
#: (nodes.a2a.delegate).
Downstream = Callable[[Delivery, str], Awaitable["DelegationResult"]]


def verified_gate(delegation: Delegation, report: RehydrationReport) -> Verdict:
    """Rehydrate mode: act only when every origin served hops that verified."""
    action = delegation.action or "the action"
    if report.complete:
        return Verdict(
            Decision.ACTED,
            f"{action}: {len(report.hops)} folded hops rehydrated and verified against"
            " the origin's signed head",
        )
    failed = "; ".join(
        f"origin {o.origin[:12]}… {o.outcome.value}: {o.detail}"
        for o in report.outcomes
        if o.outcome is not Outcome.SERVED
    )
    return Verdict(Decision.REFUSED, f"{action} refused: {failed}")


@dataclass(slots=True)
class _Admitted:
    active: bool
    delegation: Delegation | None = None
    receipt: bytes = b""


class ProvnetRequestHandler(DefaultRequestHandlerV2):
    """The SDK's handler, with activation and admission first (module docstring, step 1)."""

    def __init__(self, core: NodeCore, card: a2a_pb2.AgentCard, *, required: bool, **kw: Any):
        self.core = core
        self.required = required
        self.streaming = card.capabilities.streaming
        super().__init__(agent_card=card, **kw)

    async def _admit(self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext) -> None:
        active = check_activation(context.requested_extensions, required=self.required)
        admitted = _Admitted(active)
        if active:
            delegation = read_delegation(
                params.message, max_bytes=self.core.config.max_message_bytes
            )
            try:
                # the delegator keeps the receipt: signed
                ack = await self.core.deliver(delegation.delivery, by=A2A_ACCOUNT, signed=True)
                admitted.receipt = ack.receipt
            except (ContractError, NodeError) as exc:
                # The statements failed the node's own checks: refused with the reason,
                # and nothing is held or recorded against anyone.
                raise InvalidParamsError(
                    message=f"delivery of {delegation.value_ref[:80]!r} refused: {exc}"
                ) from None
            except Exception as exc:
                log.warning("a2a_admission_failed", error=str(exc), kind=type(exc).__name__)
                raise InternalError(message=f"delivery could not be taken: {exc}") from None
            admitted.delegation = delegation
        context.state[_ADMITTED] = admitted

    async def on_message_send(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> a2a_pb2.Message | a2a_pb2.Task:
        await self._admit(params, context)
        result: a2a_pb2.Message | a2a_pb2.Task = await super().on_message_send(params, context)
        return result

    async def on_message_send_stream(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> Any:
        if self.streaming:  # else the SDK refuses it (UnsupportedOperation): nothing admitted
            await self._admit(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event


@dataclass(slots=True)
class ProvnetExecutor(AgentExecutor):
    """Rehydrate, gate, forward, answer (module docstring, step 2)."""

    core: NodeCore
    gate: Gate = verified_gate
    #: Agents this one may forward to, by the name a ``forwardTo`` hint uses.
    downstream: Mapping[str, Downstream] = field(default_factory=dict)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        admitted = context.call_context.state.get(_ADMITTED)
        if not isinstance(admitted, _Admitted) or not admitted.active:
            await event_queue.enqueue_event(
                _reply(
                    context,
                    Verdict(
                        Decision.NOT_READ,
                        f"extension {EXTENSION_URI} not activated: no provnet value was read,"
                        " so no action gated on one is taken",
                    ),
                )
            )
            return
        delegation = admitted.delegation
        if delegation is None:  # pragma: no cover - admission sets it whenever active
            raise InternalError(message="admitted delegation missing")
        task_id, context_id = context.task_id or "", context.context_id or ""
        # An activated delegation is a task: its result Artifact carries the signed
        # bytes (our receipt, any evidence), its final status the decision.
        await event_queue.enqueue_event(
            a2a_pb2.Task(
                id=task_id,
                context_id=context_id,
                status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING),
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        parts = [a2a_pb2.Part(raw=admitted.receipt, media_type=RECEIPT_MEDIA_TYPE)]
        verdict, forwarded = await self._decide(delegation, parts)
        log.info(
            "a2a_delegation_decided",
            value_ref=delegation.value_ref,
            decision=str(verdict.decision),
            reason=verdict.reason,
        )
        await updater.add_artifact(parts, name=RESULT_ARTIFACT, extensions=[EXTENSION_URI])
        answer = _reply(context, verdict, forwarded=forwarded)
        if verdict.decision is Decision.ACTED:
            await updater.complete(answer)
        else:
            await updater.reject(answer)

    async def _decide(
        self, delegation: Delegation, parts: list[a2a_pb2.Part]
    ) -> tuple[Verdict, str]:
        """Rehydrate, gate, forward; evidence parts appended to ``parts``."""
        action = delegation.action or "the action"
        try:
            report = await self.core.rehydrate(delegation.value_ref)
        except Exception as exc:
            # (the value evicted since admission, the node stopping…): no verified
            # hops, so the gated action is not taken; an answer, not a failed task.
            log.warning("a2a_rehydration_failed", value_ref=delegation.value_ref, error=str(exc))
            return (
                Verdict(
                    Decision.REFUSED,
                    f"{action} refused: rehydration of {delegation.value_ref[:80]!r} failed: {exc}",
                ),
                "",
            )
        verdict = self.gate(delegation, report)
        for outcome in report.outcomes:
            if outcome.evidence:
                parts.append(
                    a2a_pb2.Part(
                        raw=outcome.evidence,
                        media_type=EVIDENCE_MEDIA_TYPE,
                        filename=f"{outcome.outcome.value}-{outcome.origin[:16]}.json",
                    )
                )
        forwarded = ""
        if delegation.forward_to and verdict.decision is Decision.ACTED:
            forwarded = await self._forward(delegation, parts)
        return verdict, forwarded

    async def _forward(self, delegation: Delegation, parts: list[a2a_pb2.Part]) -> str:
        send = self.downstream.get(delegation.forward_to)
        if send is None:
            return f"not forwarded: no agent {delegation.forward_to[:40]!r} known here"
        held = self.core.held(delegation.value_ref).delivery
        # The value and its origins' statements unchanged: the next holder demands
        # from the origin the heads name (S7), never from this agent.
        outgoing = Delivery(
            held.value_ref,
            held.value,
            held.commitments,
            held.obligations,
            "",
            held.fold_proofs,
            held.heads,
        )
        try:
            result = await send(outgoing, delegation.action)
        except Exception as exc:
            return f"forward to {delegation.forward_to} failed: {exc}"
        parts.extend(a2a_pb2.Part(raw=e, media_type=EVIDENCE_MEDIA_TYPE) for e in result.evidence)
        return f"forwarded to {delegation.forward_to}: {result.decision} ({result.reason})"

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise InvalidParamsError(message="a delegation is decided at once; nothing to cancel")


def _reply(
    context: RequestContext,
    verdict: Verdict,
    parts: list[a2a_pb2.Part] | None = None,
    *,
    forwarded: str = "",
) -> a2a_pb2.Message:
    text = f"{verdict.decision}: {verdict.reason}" + (f"; {forwarded}" if forwarded else "")
    message = a2a_pb2.Message(
        message_id=str(uuid.uuid4()),
        context_id=context.context_id or "",
        task_id=(context.task_id or "") if verdict.decision is not Decision.NOT_READ else "",
        role=a2a_pb2.ROLE_AGENT,
        extensions=[EXTENSION_URI] if verdict.decision is not Decision.NOT_READ else [],
        parts=[a2a_pb2.Part(text=text), *(parts or [])],
    )
    message.metadata.update({DECISION: str(verdict.decision), REASON: verdict.reason})
    if forwarded:
        message.metadata.update({hint_key("forwarded"): forwarded})
    return message


def build_card(
    name: str,
    identity: Identity,
    *,
    grpc_url: str,
    jsonrpc_url: str = "",
    required: bool = True,
) -> a2a_pb2.AgentCard:
    """The agent's card, declaring the extension, signed by the node's key (§8.4)."""
    card = a2a_pb2.AgentCard(
        name=name,
        description=f"provnet agent {name}: gates actions on values it rehydrates",
        version="1",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=a2a_pb2.AgentCapabilities(streaming=False),
        skills=[
            a2a_pb2.AgentSkill(
                id="gated-delegation",
                name="gated delegation",
                description="takes a compacted value and acts only on what it rehydrates",
                tags=["provnet"],
            )
        ],
    )
    if jsonrpc_url:
        card.supported_interfaces.append(
            a2a_pb2.AgentInterface(
                url=jsonrpc_url, protocol_binding="JSONRPC", protocol_version="1.0"
            )
        )
    if grpc_url:
        card.supported_interfaces.append(
            a2a_pb2.AgentInterface(url=grpc_url, protocol_binding="GRPC", protocol_version="1.0")
        )
    card.capabilities.extensions.append(
        card_extension(
            CardParams(node_id=identity.node_id, rehydration_endpoint=grpc_url), required=required
        )
    )
    return sign_card(card, identity)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI: refuse an HTTP body over ``limit`` bytes (413, a JSON-RPC error) unread.

    The body is read up to the limit before the app sees any of it, so an
    oversized request costs at most ``limit`` bytes of memory, whether it
    declares its length or streams it.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send, f"request body of {int(declared)} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await receive()
            if event["type"] != "http.request":
                break
            chunk = event.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, f"request body over {self.limit} bytes")
                return
            chunks.append(chunk)
            if not event.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, what: str) -> None:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": f"{what} exceeds limit {self.limit}"},
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class ProvnetAgent:
    """A started agent: its node, its signed card, its handler; ``await stop()`` it."""

    node: RunningNode
    card: a2a_pb2.AgentCard
    handler: ProvnetRequestHandler
    executor: ProvnetExecutor
    jsonrpc_url: str

    @classmethod
    async def start(
        cls,
        config: NodeConfig,
        *,
        jsonrpc_url: str = "",
        required: bool = True,
        gate: Gate = verified_gate,
        fault: FaultPlan | None = None,
        **node_kw: Any,
    ) -> ProvnetAgent:
        built: dict[str, Any] = {}

        def add_a2a(core: NodeCore, server: grpc.aio.Server) -> None:
            # Before the port is known: the handler reads only the card's
            # capabilities, which the published card (made after start) shares.
            provisional = build_card(
                config.name,
                core.identity,
                grpc_url=config.listen,
                jsonrpc_url=jsonrpc_url,
                required=required,
            )
            executor = ProvnetExecutor(core, gate)
            handler = ProvnetRequestHandler(
                core,
                provisional,
                required=required,
                agent_executor=executor,
                task_store=InMemoryTaskStore(),
            )
            grpc_handler = GrpcHandler(
                handler,
                context_builder=V03GrpcServerCallContextBuilder(  # type: ignore[arg-type]
                    DefaultGrpcServerCallContextBuilder()
                ),
            )
            a2a_pb2_grpc.add_A2AServiceServicer_to_server(grpc_handler, server)  # type: ignore[no-untyped-call]
            built.update(handler=handler, executor=executor)

        node = await start_node(config, fault=fault, extra_services=add_a2a, **node_kw)
        try:
            await node.server.health.set(A2A_SERVICE, health_pb2.HealthCheckResponse.SERVING)
            card = build_card(
                config.name,
                node.core.identity,
                grpc_url=node.address,
                jsonrpc_url=jsonrpc_url,
                required=required,
            )
        except BaseException:
            await node.stop(0)
            raise
        return cls(node, card, built["handler"], built["executor"], jsonrpc_url)

    @property
    def node_id(self) -> str:
        return self.node.node_id

    def connect(self, name: str, send: Downstream) -> None:
        """Let this agent forward values to agent ``name`` (a ``forwardTo`` hint)."""
        self.executor.downstream = {**self.executor.downstream, name: send}

    def asgi_app(self) -> BodyLimit:
        """The JSON-RPC binding and the card at ``/.well-known/agent-card.json``.

        Request bodies are bounded before the SDK parses them: a raw part
        travels base64 in JSON (4/3 of its size), so the bound is twice the
        node's message bound.
        """
        builder = V03ServerCallContextBuilder(DefaultServerCallContextBuilder())
        routes = [
            *create_agent_card_routes(self.card),
            *create_jsonrpc_routes(self.handler, "/", context_builder=builder),  # type: ignore[arg-type]
        ]
        return BodyLimit(Starlette(routes=routes), 2 * self.node.config.max_message_bytes)

    async def stop(self, grace: float = 0.2) -> None:
        await self.node.stop(grace)
