"""The grpc.aio server of a node: provnet services, health, reflection.

``build_server`` wires a :class:`nodes.services.NodeCore` into a grpc.aio
server (every service of :data:`nodes.servicers.SERVICES`, health and
reflection, each method handler wrapped once by
:class:`nodes.interceptors.RequestContext` and served from one table, with
no server interceptor), bounded message sizes and
SO_REUSEPORT off (two nodes can never silently share a port). ``NodeServer``
owns its lifecycle: ``start`` binds (port 0 allowed) and marks health
SERVING; ``stop`` marks NOT_SERVING, then gives in-flight calls ``grace``
seconds before cancelling them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

from nodes.auth import CONTROL_SKEW_S, ControlAuth
from nodes.control_replay import ControlReplay
from nodes.eventloop import idle_clock
from nodes.interceptors import MethodCollector, RequestContext
from nodes.logging import get_logger
from nodes.overload import BACKLOG_SHED_PER_PENDING, BulkBudget, Overload
from nodes.servicers import SERVE_SERVICE, SERVICE_NAMES, add_services
from nodes.services import NodeCore

__all__ = [
    "HEALTH_SERVICE",
    "REFLECTION_V1",
    "REFLECTION_V1ALPHA",
    "SERVICE_NAMES",
    "HealthServicer",
    "NodeServer",
    "build_server",
    "server_options",
]

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_V1ALPHA = reflection.SERVICE_NAME
#: The v1 reflection service is the v1alpha one renamed (same messages, same
#: field numbers), so the v1alpha servicer answers it byte for byte.
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"

log = get_logger(__name__)


#: HTTP/2 streams one connection may have open at once: a client's further
#: calls wait on its side, so the node never buffers more than this many
#: in-flight request bodies per connection.
MAX_STREAMS_PER_CONNECTION = 64


def server_options(max_message_bytes: int, max_pending_rpcs: int = 0) -> list[tuple[str, Any]]:
    # Calls gRPC has received but the node's event loop has not taken up yet
    # (grpc.aio takes them one per loop turn): beyond ``max_pending_rpcs`` gRPC
    # refuses a new call at once, in its own threads (the caller sees
    # CANCELLED). Without it the queue grows to gRPC's soft limit of 1 000,
    # and every call, shed or admitted, waits behind it. Soft limit one below
    # the hard one: a fixed cap, no random early drop.
    pending: list[tuple[str, Any]] = (
        [
            ("grpc.server.max_pending_requests", max_pending_rpcs - 1),
            ("grpc.server.max_pending_requests_hard_limit", max_pending_rpcs),
        ]
        if max_pending_rpcs > 0
        else []
    )
    return [
        *pending,
        ("grpc.so_reuseport", 0),
        ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
        # No bandwidth-delay probing on what the node receives: a stream's
        # receive window then stays at HTTP/2's 64 KiB until the handler asks
        # for the message, so a call shed (or not yet read) buffers at most
        # that much of its body, not all of it (with probing, unread bodies are
        # buffered whole: docs/measurements/2026-12-01-node-overload-constants.md).
        ("grpc.http2.bdp_probe", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


class HealthServicer(health_aio.HealthServicer):  # type: ignore[misc]
    """grpc.aio health (Check, Watch) plus ``List``, which the aio servicer lacks."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: Any
    ) -> health_pb2.HealthListResponse:
        statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in statuses.items()
            }
        )


def _add_reflection(names: tuple[str, ...], methods: MethodCollector) -> None:
    servicer = reflection_aio.ReflectionServicer(names)
    for service in (REFLECTION_V1ALPHA, REFLECTION_V1):
        methods.add_registered_method_handlers(
            service,
            {
                "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                    servicer.ServerReflectionInfo,
                    request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                    response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
                )
            },
        )


@dataclass(slots=True)
class NodeServer:
    """A built (not yet started) node server; ``port`` is known after ``start``."""

    server: grpc.aio.Server
    health: HealthServicer
    core: NodeCore
    listen: str
    #: What wraps every handler (its overload controller's ``bulk_in_flight``/``bulk_shed``).
    requests: RequestContext
    #: Control-call signatures (and their durable replay record).
    auth: ControlAuth | None = None
    #: TLS for the port (:mod:`nodes.tls`); None: plaintext.
    tls: grpc.ServerCredentials | None = None
    port: int = 0

    async def start(self) -> int:
        if self.auth is not None:
            # Calls signed after this start are dated above the floor a previous run left.
            await self.auth.replay.outwait_floor()
        if self.tls is None:
            self.port = self.server.add_insecure_port(self.listen)
        else:
            self.port = self.server.add_secure_port(self.listen, self.tls)
        if self.port == 0:
            raise OSError(f"cannot bind {self.listen}")
        await self.server.start()
        if self.requests.loop_lag is not None:
            self.requests.loop_lag.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("node_serving", listen=self.listen, port=self.port, tls=self.tls is not None)
        return self.port

    @property
    def address(self) -> str:
        host = self.listen.rpartition(":")[0]
        if host in {"0.0.0.0", "[::]", ""}:
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def stop(self, grace: float) -> None:
        """Health NOT_SERVING first (load balancers and holders back off), then stop."""
        await self.health.enter_graceful_shutdown()
        # Ask streams stay open while their holders do: ended at once (and any that
        # starts from now on), rather than after the whole grace.
        self.requests.end_streams()
        await self.server.stop(grace)
        if self.requests.loop_lag is not None:
            await self.requests.loop_lag.stop()
        log.info("node_stopped", grace_s=grace)


def build_server(
    core: NodeCore,
    listen: str,
    max_message_bytes: int,
    tls: grpc.ServerCredentials | None = None,
) -> NodeServer:
    auth = ControlAuth(
        core.config.operator_keys,
        node_id=core.node_id,
        node_name=core.config.name,
        peer_keys=(p.node_id for p in core.config.peers if p.node_id),
        clock=core.clock,
        # A call accepted before a restart stays refused after it.
        replay=ControlReplay(
            core.config.data_dir, int(2 * CONTROL_SKEW_S * 1000), clock=core.clock
        ),
    )
    overload = Overload(
        core.config.max_bulk_rpcs,
        bulk_shed_lag_s=core.config.bulk_shed_lag_ms / 1000,
        bulk_budget=(
            BulkBudget(core.config.max_bulk_bytes, max_message_bytes)
            if core.config.max_bulk_bytes > 0
            else None
        ),
        # gRPC's own soft limit when the node sets none (0).
        backlog_limit=round(BACKLOG_SHED_PER_PENDING * (core.config.max_pending_rpcs or 1000)),
        # A node process runs on a NodeEventLoop, which tells when a backlog has
        # drained; a node started in another program's loop falls back to pauses.
        loop_idle_at=idle_clock(),
        # Caps per class of call, counted by the node: not gRPC's
        # ``maximum_concurrent_rpcs``, which counts every call, the serve path's
        # and health checks' included, so whoever holds that many calls open (idle
        # health watches, say) has every other call refused.
        max_streams=core.config.max_streams,
        max_streams_per_peer=core.config.max_streams_per_peer,
        max_open_calls=core.config.max_concurrent_rpcs,
    )
    requests = RequestContext(core.count_rpc, auth, overload)
    # Every handler is collected first and wrapped once, then served from one
    # generic handler: no server interceptor (a coroutine chain per call before
    # the handler is found) and no per-method registration (grpc.aio's serving
    # loop then waits on one pending future per registered method, for every
    # call it takes up).
    methods = MethodCollector()
    add_services(core, methods)  # type: ignore[arg-type]  # it has what registration uses
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, methods)
    _add_reflection((*SERVICE_NAMES, HEALTH_SERVICE, REFLECTION_V1ALPHA, REFLECTION_V1), methods)
    table = requests.handler(methods)
    server = grpc.aio.server(
        handlers=[table],
        options=server_options(max_message_bytes, core.config.max_pending_rpcs),
    )
    # The serve path alone is registered per method, its handlers the same
    # wrapped ones: gRPC then queues its calls apart from the rest (one queue
    # per registered method, each with its own pending-call limit, taken up in
    # turn), so a demand never waits behind, or is refused with, a backlog of
    # bulk calls (with every method behind the one generic handler, a flood of
    # bulk calls delays demands and the pending-call limit cancels some:
    # docs/measurements/2026-12-01-node-overload-constants.md). Two registered methods keep the
    # serving loop's per-call wait small.
    registered: Any = server  # grpc's stubs lack add_registered_method_handlers
    registered.add_registered_method_handlers(SERVE_SERVICE, table.of_service(SERVE_SERVICE))
    return NodeServer(
        server=server,
        health=health_servicer,
        core=core,
        listen=listen,
        requests=requests,
        auth=auth,
        tls=tls,
    )
