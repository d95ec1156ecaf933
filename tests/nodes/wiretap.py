"""A man in the middle on a client's path to one node: relays every unary call, keeps a copy.

What an attacker on the (plaintext) path sees: each call's method, exact
request bytes and metadata, signature included. :meth:`Wiretap.replay` sends
a captured call, byte for byte, wherever the attacker likes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    _Generic = grpc.GenericRpcHandler[Any, Any]
else:
    _Generic = grpc.GenericRpcHandler

__all__ = ["Captured", "Wiretap"]


@dataclass(frozen=True, slots=True)
class Captured:
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...]


def _user_metadata(metadata: Any) -> tuple[tuple[str, str], ...]:
    return tuple(
        (k, v)
        for k, v in metadata or ()
        if isinstance(v, str) and not k.startswith((":", "grpc-")) and k != "user-agent"
    )


class Wiretap(_Generic):
    """Listens on 127.0.0.1 (``address`` once started) and relays to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.captured: list[Captured] = []
        self.address = ""
        self._server: Any = None
        self._channel: Any = None

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method

        async def relay(request: bytes, context: Any) -> bytes:
            metadata = _user_metadata(context.invocation_metadata())
            self.captured.append(Captured(method, request, metadata))
            try:
                reply: bytes = await self._channel.unary_unary(method, None, None)(
                    request, metadata=metadata, timeout=15
                )
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            return reply

        return grpc.unary_unary_rpc_method_handler(relay)

    async def start(self) -> str:
        self._channel = grpc.aio.insecure_channel(self.upstream)
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        self._server.add_generic_rpc_handlers((self,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
        if self._channel is not None:
            await self._channel.close(None)

    def last(self, method: str) -> Captured:
        """The latest call of ``method`` seen on the wire."""
        for call in reversed(self.captured):
            if call.method == method:
                return call
        raise AssertionError(f"no {method} call captured (saw {[c.method for c in self.captured]})")

    @staticmethod
    async def replay(call: Captured, address: str, timeout: float = 10) -> bytes:
        """Send a captured call, byte for byte, to ``address``; its reply bytes."""
        async with grpc.aio.insecure_channel(address) as chan:
            reply: bytes = await chan.unary_unary(call.method, None, None)(
                call.request, metadata=call.metadata, timeout=timeout
            )
        return reply
