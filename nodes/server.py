"""The grpc.aio server of a node: provnet services, health, reflection.

``build_server`` wires a :class:`nodes.services.NodeCore` into a grpc.aio
server (every service of :data:`nodes.servicers.SERVICES`) with the
request-context interceptor, bounded message sizes and
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
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from nodes.interceptors import RequestContextInterceptor
from nodes.logging import get_logger
from nodes.servicers import SERVICE_NAMES, add_services
from nodes.services import NodeCore

__all__ = ["SERVICE_NAMES", "NodeServer", "build_server", "server_options"]

log = get_logger(__name__)


def server_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


@dataclass(slots=True)
class NodeServer:
    """A built (not yet started) node server; ``port`` is known after ``start``."""

    server: grpc.aio.Server
    health: health_aio.HealthServicer
    core: NodeCore
    listen: str
    port: int = 0

    async def start(self) -> int:
        self.port = self.server.add_insecure_port(self.listen)
        if self.port == 0:
            raise OSError(f"cannot bind {self.listen}")
        await self.server.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("node_serving", listen=self.listen, port=self.port)
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
        await self.server.stop(grace)
        log.info("node_stopped", grace_s=grace)


def build_server(core: NodeCore, listen: str, max_message_bytes: int) -> NodeServer:
    server = grpc.aio.server(
        interceptors=[RequestContextInterceptor(core.count_rpc)],
        options=server_options(max_message_bytes),
    )
    add_services(core, server)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return NodeServer(server=server, health=health_servicer, core=core, listen=listen)
