"""The seam between a node and its peers: :class:`Transport`.

A holder, a witness or a forwarding node reaches other nodes only through a
``Transport``. Two implementations behave the same way to the caller:

- :class:`GrpcTransport` — grpc.aio channels (one per address, reused),
  bounded message sizes, a deadline on every call;
- :class:`InMemoryTransport` — calls another in-process
  :class:`~nodes.services.NodeCore` directly (fast unit tests), with the
  same deadline, size and status-code behaviour.

Every failure is a :class:`CallFailed` carrying the gRPC status name, so the
client classifies failures once, whatever carried the call:
``DEADLINE_EXCEEDED``/``UNAVAILABLE`` mean "no answer"; any other code means
the peer answered with an (unsigned) error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from nodes._pb.provnet.v1 import (
    common_pb2,
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
)
from nodes.errors import status_for

if TYPE_CHECKING:
    from nodes.services import NodeCore

__all__ = [
    "NO_ANSWER_CODES",
    "Answer",
    "CallFailed",
    "ChallengeResult",
    "Delivery",
    "GrpcTransport",
    "InMemoryTransport",
    "Transport",
]

#: Status codes that mean the peer did not answer at all.
NO_ANSWER_CODES = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED"})


@dataclass(frozen=True, slots=True)
class Answer:
    """An origin's answer to one demand, as received (nothing verified yet).

    ``receipt`` and ``commitment`` are envelope bytes; ``hops`` the served hop
    bytes in the receipt's leaf order (empty unless the receipt is SERVED).
    """

    receipt: bytes
    commitment: bytes
    hops: tuple[bytes, ...] = ()

    @property
    def size(self) -> int:
        return len(self.receipt) + len(self.commitment) + sum(len(h) for h in self.hops)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A compacted value with its origins' commitments and obligations (same order)."""

    value_ref: str
    value: bytes
    commitments: tuple[bytes, ...]
    obligations: tuple[bytes, ...]
    sender: str = ""

    def to_pb(self) -> Any:
        return common_pb2.DeliveredValue(
            value_ref=self.value_ref,
            value=self.value,
            commitments=list(self.commitments),
            obligations=list(self.obligations),
        )

    @classmethod
    def from_pb(cls, msg: Any, sender: str = "") -> Delivery:
        return cls(
            value_ref=str(msg.value_ref),
            value=bytes(msg.value),
            commitments=tuple(bytes(c) for c in msg.commitments),
            obligations=tuple(bytes(o) for o in msg.obligations),
            sender=sender,
        )

    @property
    def size(self) -> int:
        return (
            len(self.value)
            + sum(len(c) for c in self.commitments)
            + sum(len(o) for o in self.obligations)
        )


@dataclass(frozen=True, slots=True)
class ChallengeResult:
    """A witness's answer: its signed report, its own demand, the origin's receipt if any.

    ``witness_report`` is empty when the witness ran out of budget before the
    origin's deadline passed (inconclusive).
    """

    witness_report: bytes
    answered: bool
    witness_demand: bytes = b""
    receipt: bytes = b""


class CallFailed(Exception):
    """A call to a peer failed; ``code`` is the gRPC status name."""

    def __init__(self, code: str, message: str, address: str) -> None:
        super().__init__(f"{address}: {code}: {message}")
        self.code = code
        self.message = message
        self.address = address

    @property
    def no_answer(self) -> bool:
        return self.code in NO_ANSWER_CODES


class Transport(Protocol):
    """How a node reaches another node; every call has a timeout in seconds."""

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        """``Serve.Demand``: all demands for one origin, one call; answers in order."""
        ...

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        """``Serve.DemandStream``: one large answer in chunks, reassembled."""
        ...

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        """``Evidence.Challenge`` on a witness."""
        ...

    async def deliver(self, address: str, delivery: Delivery, timeout: float) -> bytes:
        """``Deliver.Deliver``: returns the peer's signed delivery receipt."""
        ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------- grpc


def _client_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.enable_retries", 0),
    ]


class GrpcTransport:
    """grpc.aio client side: one insecure channel per address (loopback/cluster use)."""

    def __init__(self, max_message_bytes: int = 4 * 1024 * 1024) -> None:
        self._max = max_message_bytes
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self.calls = 0

    def _stub(self, address: str, kind: str) -> Any:
        key = (address, kind)
        stub = self._stubs.get(key)
        if stub is None:
            factory = {
                "serve": serve_pb2_grpc.ServeStub,
                "evidence": evidence_pb2_grpc.EvidenceStub,
                "deliver": deliver_pb2_grpc.DeliverStub,
            }[kind]
            stub = factory(self.channel(address))
            self._stubs[key] = stub
        return stub

    def channel(self, address: str) -> grpc.aio.Channel:
        chan = self._channels.get(address)
        if chan is None:
            chan = grpc.aio.insecure_channel(address, options=_client_options(self._max))
            self._channels[address] = chan
        return chan

    async def _call(self, address: str, coro: Any) -> Any:
        self.calls += 1
        try:
            return await coro
        except grpc.aio.AioRpcError as exc:
            raise CallFailed(exc.code().name, exc.details() or "", address) from exc

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        stub = self._stub(address, "serve")
        reply = await self._call(
            address,
            stub.Demand(serve_pb2.DemandRequest(demands=list(demands)), timeout=timeout),
        )
        return [
            Answer(bytes(a.receipt), bytes(a.commitment), tuple(bytes(h) for h in a.hops))
            for a in reply.answers
        ]

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        stub = self._stub(address, "serve")
        self.calls += 1
        hops: list[bytes] = []
        receipt = commitment = b""
        expected = 0
        try:
            call = stub.DemandStream(serve_pb2.DemandStreamRequest(demand=demand), timeout=timeout)
            async for chunk in call:
                if chunk.index != expected:
                    raise CallFailed("DATA_LOSS", f"chunk {chunk.index} out of order", address)
                if expected == 0:
                    receipt, commitment = bytes(chunk.receipt), bytes(chunk.commitment)
                expected += 1
                hops.extend(bytes(h) for h in chunk.hops)
                if chunk.last:
                    break
            else:
                raise CallFailed("DATA_LOSS", "stream ended without a last chunk", address)
        except grpc.aio.AioRpcError as exc:
            raise CallFailed(exc.code().name, exc.details() or "", address) from exc
        return Answer(receipt, commitment, tuple(hops))

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        stub = self._stub(address, "evidence")
        request = evidence_pb2.ChallengeRequest(
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
        )
        reply = await self._call(address, stub.Challenge(request, timeout=timeout))
        return ChallengeResult(
            bytes(reply.witness_report),
            bool(reply.answered),
            bytes(reply.witness_demand),
            bytes(reply.receipt),
        )

    async def deliver(self, address: str, delivery: Delivery, timeout: float) -> bytes:
        stub = self._stub(address, "deliver")
        request = deliver_pb2.DeliverRequest(value=delivery.to_pb(), sender=delivery.sender)
        reply = await self._call(address, stub.Deliver(request, timeout=timeout))
        return bytes(reply.delivery_receipt)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._stubs.clear()
        for chan in channels.values():
            await chan.close(None)


# --------------------------------------------------------------------------- in-memory


class InMemoryTransport:
    """Calls in-process nodes directly, with gRPC's deadline, size and status behaviour.

    Register nodes with :meth:`register`; an unknown or crashed address is
    UNAVAILABLE, a call that outlives its timeout is DEADLINE_EXCEEDED, an
    error raised by the node becomes the status code the server would send.
    """

    def __init__(
        self,
        max_message_bytes: int = 4 * 1024 * 1024,
        registry: dict[str, NodeCore] | None = None,
    ) -> None:
        # Several transports may share one registry: each node its own view,
        # with its own ``blocked`` set (a partition as seen from that node).
        self._nodes: dict[str, NodeCore] = {} if registry is None else registry
        self._max = max_message_bytes
        self.blocked: set[str] = set()
        self.calls = 0

    def register(self, address: str, core: NodeCore) -> None:
        self._nodes[address] = core

    def _node(self, address: str) -> NodeCore:
        core = self._nodes.get(address)
        if core is None or core.crashed or address in self.blocked:
            raise CallFailed("UNAVAILABLE", "no node listening", address)
        return core

    def _check_size(self, address: str, size: int) -> None:
        if size > self._max:
            raise CallFailed(
                "RESOURCE_EXHAUSTED",
                f"message of {size} bytes exceeds the limit of {self._max}",
                address,
            )

    async def _run(self, address: str, timeout: float, coro: Any) -> Any:
        self.calls += 1
        try:
            return await asyncio.wait_for(coro, timeout)
        except TimeoutError:
            raise CallFailed("DEADLINE_EXCEEDED", "deadline exceeded", address) from None
        except CallFailed:
            raise
        except Exception as exc:
            code = status_for(exc)
            if code is None:
                raise
            raise CallFailed(code.name, f"{type(exc).__name__}: {exc}", address) from exc

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        core = self._node(address)
        self._check_size(address, sum(len(d) for d in demands))
        answers: list[Answer] = await self._run(address, timeout, core.answer_demands(demands))
        self._check_size(address, sum(a.size for a in answers))
        return answers

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        core = self._node(address)
        self._check_size(address, len(demand))

        async def collect() -> Answer:
            hops: list[bytes] = []
            first: Answer | None = None
            async for chunk in core.answer_demand_stream(demand):
                self._check_size(address, chunk.size)
                if first is None:
                    first = chunk
                hops.extend(chunk.hops)
            if first is None:
                raise CallFailed("DATA_LOSS", "stream ended without a chunk", address)
            return Answer(first.receipt, first.commitment, tuple(hops))

        result: Answer = await self._run(address, timeout, collect())
        return result

    async def challenge(
        self,
        address: str,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        timeout: float,
    ) -> ChallengeResult:
        core = self._node(address)
        deadline = time.monotonic() + timeout
        result: ChallengeResult = await self._run(
            address,
            timeout,
            core.challenge(
                commitment=commitment,
                obligation=obligation,
                demand=demand,
                origin_address=origin_address,
                deadline=deadline,
            ),
        )
        return result

    async def deliver(self, address: str, delivery: Delivery, timeout: float) -> bytes:
        core = self._node(address)
        self._check_size(address, delivery.size)
        receipt: bytes = await self._run(address, timeout, core.deliver(delivery))
        return receipt

    async def close(self) -> None:
        return None
