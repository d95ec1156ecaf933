"""The seam between a node and its peers: :class:`Transport`.

A holder, a witness or a forwarding node reaches other nodes only through a
``Transport``. Two implementations behave the same way to the caller:

- :class:`GrpcTransport` — grpc.aio channels (one per address, reused),
  bounded message sizes, a deadline on every call;
- :class:`InMemoryTransport` — calls another in-process
  :class:`LocalNode` (a node core) directly (fast unit tests), with the
  same deadline, size and status-code behaviour; message sizes are
  :func:`nodes.wire.message_size`, the encoding the gRPC path carries.

Every failure is a :class:`CallFailed` carrying the gRPC status name, so the
client classifies failures once, whatever carried the call, by the one rule
of :mod:`nodes.noanswer`: silence, busy, or an (unsigned) status.

Addresses are ``host:port`` where the host may be a DNS name: gRPC resolves
it when a channel connects and again after a connection fails (its ``dns``
resolver, what a plain ``host:port`` target uses). A node's identity is its
key, never its address: ``pins`` (address → node id, from the peers the
configuration pins, :meth:`nodes.config.NodeConfig.pins`) makes both
transports check, before a call on a connection not yet checked, that the
node answering there is the pinned one. A name that resolves to another node
fails the call with :data:`WRONG_NODE` (``UNAUTHENTICATED``, naming the
address and both ids) before the request is sent: a status, never silence,
so nobody is suspected for it and no witness signs it (:mod:`nodes.noanswer`).
The check runs again whenever the channel is not connected at call time (it
is about to connect, perhaps to another address the name now resolves to)
and after a call failed. It catches a name resolving to the wrong honest
node; ``Node.Info`` is unauthenticated, so a node that lies about its id
passes it, and signatures stay the guard of what a call decides: a receipt,
a report or a delivery receipt verifies only with the key that must sign it,
and a signed call is signed for the pinned id, which any other node refuses.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Generator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import grpc

from contracts._lru import BoundedCache
from nodes import wire
from nodes.ask_stream import AskStream, StreamEnded
from nodes.attester import AttestationAnswer, AttestationAsk
from nodes.auth import (
    ControlCredentials,
    NotAuthenticated,
    control_channel,
    node_id_at,
    signed_metadata,
)
from nodes.errors import status_for
from nodes.loopclock import loop_time
from nodes.messages import Acknowledgement, Answer, ChallengeResult, Delivery, WitnessReply
from nodes.methods import method_name
from nodes.noanswer import SILENT_CODES, CallFailed
from nodes.retry import appointment_ms, retry_shed
from nodes.tls import TLS_FAILED, TlsFiles, diagnose

__all__ = [
    "CONNECT_TIMEOUT_MS",
    "DNS_RERESOLVE_MS",
    "MAX_CHANNELS",
    "NO_ANSWER_CODES",
    "WRONG_NODE",
    "Answer",
    "CallFailed",
    "ChallengeResult",
    "Delivery",
    "GrpcTransport",
    "InMemoryTransport",
    "LocalNode",
    "Transport",
]

_DELIVER = method_name("Deliver", "Deliver")
_ATTEST_REQUEST = method_name("Attest", "Request")
_CUSTODY_TAKE = method_name("Custody", "Take")

#: Status codes that mean the peer did not answer at all (:mod:`nodes.noanswer`).
NO_ANSWER_CODES = SILENT_CODES
#: The status of a call refused because the node at the address is not the
#: pinned one: a status (never silence, never evidence).
WRONG_NODE = "UNAUTHENTICATED"


def wrong_node(address: str, found: str, pinned: str) -> CallFailed:
    """The failure of a call whose address answers as ``found``, not the ``pinned`` node."""
    return CallFailed(
        WRONG_NODE,
        f"the node at {address} is {found[:16]}…, not the pinned {pinned[:16]}…"
        " (the name resolves to another node: check DNS and the peers' pinned keys);"
        " nothing was sent",
        address,
    )


class LocalNode(Protocol):
    """What :class:`InMemoryTransport` calls on an in-process node (a node core)."""

    @property
    def crashed(self) -> bool: ...

    async def answer_demands(self, demands: Sequence[bytes]) -> list[Answer]: ...

    async def answer_asks(self, asks: bytes) -> list[Answer]: ...

    def answer_demand_stream(
        self, demand: bytes, *, max_chunk_bytes: int = 0
    ) -> AsyncIterator[Answer]: ...

    async def challenge(
        self,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str,
        deadline: float | None = None,
    ) -> ChallengeResult: ...

    async def deliver(self, delivery: Delivery, *, signed: bool = False) -> Acknowledgement: ...


@runtime_checkable
class _CustodianNode(Protocol):
    """An in-process node that answers ``Custody.Take`` (a node core)."""

    async def take_custody(
        self, head: bytes, fold_proofs: Sequence[bytes]
    ) -> tuple[bytes, ...]: ...


@runtime_checkable
class _WitnessNode(Protocol):
    """An in-process node that answers ``Witness.AddCheckpoint`` (a node core)."""

    async def add_checkpoint(self, body: bytes) -> WitnessReply: ...


@runtime_checkable
class _AttesterNode(Protocol):
    """An in-process node that answers ``Attest.Request`` (a node core)."""

    async def request_attestation(self, ask: AttestationAsk) -> AttestationAnswer: ...


class Transport(Protocol):
    """How a node reaches another node; every call has a timeout in seconds."""

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        """``Serve.Demand``: all demands for one origin, one call; answers in order."""
        ...

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        """``Serve.Ask``: unsigned asks (:mod:`contracts.ask`), answered with hops and no
        receipts."""
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

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        """``Deliver.Deliver``: the peer's acknowledgement, with its signed delivery
        receipt when ``signed``."""
        ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------- grpc


#: How long one connection attempt may take (TCP connect + the peer's HTTP/2
#: SETTINGS): room for WAN round trips and a loaded machine.
CONNECT_TIMEOUT_MS = 5_000
#: Channels a transport keeps open at once. A witness dials the endpoints of any
#: obligation a challenge cites, and anyone can sign an obligation naming any
#: address: beyond this many, the oldest channel is closed (after the longest
#: promise a node signs, so calls on it end first) and made again if used again.
MAX_CHANNELS = 1024
_CHANNEL_CLOSE_GRACE_S = 60.0
#: How long naming a failed TLS handshake may take (one more connection).
_DIAGNOSE_TIMEOUT_S = 1.0
#: Least time between two DNS resolutions of one channel's name. gRPC
#: re-resolves after a connection fails, but by default not within 30 s of
#: the last resolution: a node rescheduled to a new address (a pod, a swarm
#: task) would stay unreachable for that long, past any promised deadline.
DNS_RERESOLVE_MS = 1_000


def _client_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.enable_retries", 0),
        # A peer that restarts is reached again within a promised deadline: a
        # channel in reconnect backoff would otherwise fail every call at once
        # and an honest origin that came back would look unanswered.
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", 500),
        # gRPC core also takes this as the *minimum connect timeout*: how long
        # one attempt may take to get the peer's HTTP/2 SETTINGS. At 50 ms a
        # peer more than ~50 ms of round trip away (or a loaded machine) could
        # never be reached by a fail-fast call (Deliver, Challenge): every
        # attempt timed out. Refused connections still fail at once, so the
        # 50-500 ms backoff above keeps reaching restarted peers quickly.
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
        ("grpc.dns_min_time_between_resolutions_ms", DNS_RERESOLVE_MS),
    ]


class GrpcTransport:
    """grpc.aio client side: one channel per address (loopback/cluster use).

    Channels are plain (:func:`nodes.auth.control_channel` without
    credentials): the serve plane (``Demand``, ``DemandStream``,
    ``Challenge``) is open, and a channel interceptor would cost every demand
    an extra task and a copy of its request. The calls this transport makes
    that must be signed (``Deliver``, ``Attest.Request``) carry the signature
    in their own metadata (:func:`nodes.auth.signed_metadata`, the same
    bytes the signing channel attaches) when ``credentials`` is set, signed
    for the node at the address (its id asked once, ``Node.Info``). A
    node's own transport signs with the node key (a forwarded value names it
    as sender); tools pass the operator key.

    ``tls``: with a CA, every channel is TLS and verifies the peer's
    certificate (:mod:`nodes.tls`); a handshake failure is named, not silence.

    ``pins`` (address → node id): calls to a pinned address first check the
    node there is that node (module docstring); its signed calls are signed
    for the pinned id, never for what the address says.
    """

    def __init__(
        self,
        max_message_bytes: int = 4 * 1024 * 1024,
        credentials: ControlCredentials | None = None,
        *,
        pins: Mapping[str, str] | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self._max = max_message_bytes
        # Read once: a TLS file that is wrong fails here, naming it, not at a call.
        self._tls = None if tls is None else tls.channel_credentials()
        self._ca_pem = None if tls is None else tls.ca_pem()
        self.credentials = credentials
        self.pins: dict[str, str] = dict(pins or {})
        #: Pinned addresses whose current connection answered as the pinned node.
        self._checked: set[str] = set()
        self._checking: dict[str, asyncio.Future[str]] = {}
        # oldest made first out (a use does not refresh): a channel evicted is closed
        # once its calls can have ended, and made again if used
        self._channels: BoundedCache[str, grpc.aio.Channel] = BoundedCache(
            MAX_CHANNELS, on_evict=self._drop_channel
        )
        self._serve: dict[str, wire.ServeStub] = {}
        self._demand: dict[str, wire.DemandCall] = {}
        #: Address → the ``Serve.Ask`` stream open to it (:mod:`nodes.ask_stream`).
        self._asking: dict[str, AskStream] = {}
        self._evidence: dict[str, wire.EvidenceStub] = {}
        self._deliver: dict[str, wire.DeliverStub] = {}
        self._closing: dict[asyncio.Future[None], grpc.aio.Channel] = {}
        #: Address → the id of the node there, which signed calls name.
        self._targets: dict[str, str] = {}
        self.calls = 0

    def _serve_stub(self, address: str) -> wire.ServeStub:
        stub = self._serve.get(address)
        if stub is None:
            stub = self._serve[address] = wire.serve_stub(self.channel(address))
        return stub

    def _evidence_stub(self, address: str) -> wire.EvidenceStub:
        stub = self._evidence.get(address)
        if stub is None:
            stub = self._evidence[address] = wire.evidence_stub(self.channel(address))
        return stub

    def _deliver_stub(self, address: str) -> wire.DeliverStub:
        stub = self._deliver.get(address)
        if stub is None:
            stub = self._deliver[address] = wire.deliver_stub(self.channel(address))
        return stub

    def channel(self, address: str) -> grpc.aio.Channel:
        chan = self._channels.peek(address)
        if chan is None:
            chan = control_channel(address, None, _client_options(self._max), tls=self._tls)
            self._channels.put(address, chan)
        return chan

    def _drop_channel(self, address: str, chan: grpc.aio.Channel) -> None:
        """A channel evicted from the bounded set: its stubs go, it closes with grace."""
        for stubs in (self._serve, self._demand, self._evidence, self._deliver):
            stubs.pop(address, None)
        asking = self._asking.pop(address, None)
        if asking is not None:
            asking.cancel()
        self._targets.pop(address, None)
        self._checked.discard(address)
        closing = asyncio.ensure_future(chan.close(_CHANNEL_CLOSE_GRACE_S))
        self._closing[closing] = chan
        closing.add_done_callback(lambda done: self._closing.pop(done, None))

    async def _call(self, address: str, coro: Any) -> Any:
        self.calls += 1
        try:
            return await coro
        except grpc.aio.AioRpcError as exc:
            raise await self._failed(address, exc) from exc

    async def _check_pin(self, address: str, timeout: float, wait_for_ready: bool) -> float:
        """Check the node at a pinned ``address`` is the pinned one; the timeout left.

        Skipped while the connection that was checked is still up (one
        ``get_state``); otherwise one ``Node.Info`` (shared by the calls
        waiting for it) within the call's own timeout, before anything is sent.
        """
        pinned = self.pins.get(address)
        if pinned is None:
            return timeout
        chan = self.channel(address)
        if (
            address in self._checked
            and chan.get_state(try_to_connect=False) is grpc.ChannelConnectivity.READY
        ):
            return timeout
        self._checked.discard(address)
        started = loop_time()
        checking = self._checking.get(address)
        if checking is None or checking.done():
            checking = asyncio.ensure_future(
                node_id_at(chan, timeout, wait_for_ready=wait_for_ready)
            )
            self._checking[address] = checking
            checking.add_done_callback(
                lambda done: (
                    self._checking.pop(address, None)
                    if self._checking.get(address) is done
                    else None
                )
            )
        try:
            found = await asyncio.shield(checking)
        except grpc.aio.AioRpcError as exc:
            raise await self._failed(address, exc) from exc
        except NotAuthenticated as exc:
            raise CallFailed(WRONG_NODE, str(exc), address) from exc
        if found != pinned:
            raise wrong_node(address, found, pinned)
        self._checked.add(address)
        return max(0.001, timeout - (loop_time() - started))

    async def _failed(self, address: str, exc: grpc.aio.AioRpcError) -> CallFailed:
        """The :class:`CallFailed` for a failed call; a TLS handshake failure named as such.

        A connection whose handshake failed looks like silence to gRPC; with a
        CA configured, such a failure is diagnosed (:func:`nodes.tls.diagnose`)
        and becomes :data:`nodes.tls.TLS_FAILED` naming what failed: a status,
        so a wrong or expired certificate accuses nobody.
        """
        self._checked.discard(address)
        code = self._code(address, exc)
        details = exc.details() or ""
        if self._ca_pem is not None and code in SILENT_CODES:
            chan = self._channels.peek(address)
            handshake = any(w in details.lower() for w in ("handshake", "ssl", "certificate"))
            if handshake or (
                chan is not None
                and chan.get_state(try_to_connect=False)
                is grpc.ChannelConnectivity.TRANSIENT_FAILURE
            ):
                reason = await diagnose(address, self._ca_pem, _DIAGNOSE_TIMEOUT_S)
                if reason is not None:
                    return CallFailed(TLS_FAILED, f"TLS: {reason}; nothing was sent", address)
        return CallFailed(code, details, address, appointment_ms(exc))

    def _code(self, address: str, exc: grpc.aio.AioRpcError) -> str:
        """The status name; a call that waited for a channel never connected is UNAVAILABLE.

        Demands wait for the channel within their deadline (a restarted origin
        is reached); when it never connected, the peer is unreachable, as the
        in-memory transport says, not slow.
        """
        code = exc.code().name
        chan = self._channels.peek(address)
        if code == "DEADLINE_EXCEEDED" and chan is not None:
            state = chan.get_state(try_to_connect=False)
            if state in (
                grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                grpc.ChannelConnectivity.CONNECTING,
                grpc.ChannelConnectivity.IDLE,
            ):
                return "UNAVAILABLE"
        return code

    async def demand(self, address: str, demands: Sequence[bytes], timeout: float) -> list[Answer]:
        # The reply is read into answers by the call itself (wire.demand_unary),
        # sized by its length on the wire: nothing to convert or measure after it.
        if self.pins:
            timeout = await self._check_pin(address, timeout, True)
        call = self._demand.get(address)
        if call is None:
            call = self._demand[address] = wire.demand_unary(self.channel(address))
        self.calls += 1
        try:
            answers: wire.SizedAnswers = await call(demands, timeout=timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            raise await self._failed(address, exc) from exc
        return answers

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        """On the ``Serve.Ask`` stream to ``address``, opened if none is (module
        :mod:`nodes.ask_stream`); asked once more on a new stream when the one it
        went out on ended OK first (idle, or the origin restarting)."""
        if self.pins:
            timeout = await self._check_pin(address, timeout, True)
        self.calls += 1
        started = loop_time()
        try:
            try:
                return await self._ask_stream(address).ask(asks, timeout)
            except StreamEnded:
                left = timeout - (loop_time() - started)
                if left <= 0:
                    raise CallFailed(
                        "DEADLINE_EXCEEDED", "the ask stream ended before an answer", address
                    ) from None
                try:
                    return await self._ask_stream(address).ask(asks, left)
                except StreamEnded as exc:
                    raise CallFailed("UNAVAILABLE", str(exc), address) from None
        except CallFailed:
            self._checked.discard(address)  # a pinned node is checked again first
            raise

    def _ask_stream(self, address: str) -> AskStream:
        asking = self._asking.get(address)
        if asking is None:
            asking = self._asking[address] = AskStream(
                wire.ask_stream(self.channel(address)), address, self._ask_ended, self._max
            )
        return asking

    def _ask_ended(self, asking: AskStream) -> None:
        if self._asking.get(asking.address) is asking:
            del self._asking[asking.address]

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        if self.pins:
            timeout = await self._check_pin(address, timeout, True)
        stub = self._serve_stub(address)
        self.calls += 1
        hops: list[bytes] = []
        receipt = commitment = b""
        expected = 0
        try:
            call = stub.DemandStream(
                wire.stream_request(demand), timeout=timeout, wait_for_ready=True
            )
            async for chunk in call:
                if chunk.index != expected:
                    raise CallFailed("DATA_LOSS", f"chunk {chunk.index} out of order", address)
                if expected == 0:
                    receipt, commitment = bytes(chunk.receipt), bytes(chunk.commitment)
                expected += 1
                hops.extend(chunk.hops)  # bytes items already
                if chunk.last:
                    break
            else:
                raise CallFailed("DATA_LOSS", "stream ended without a last chunk", address)
        except grpc.aio.AioRpcError as exc:
            raise await self._failed(address, exc) from exc
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
        if self.pins:
            timeout = await self._check_pin(address, timeout, False)
        stub = self._evidence_stub(address)
        request = wire.challenge_request(
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
        )
        reply = await self._call(address, stub.Challenge(request, timeout=timeout))
        return wire.challenge_result_from_pb(reply)

    async def _target(self, address: str, timeout: float) -> str | None:
        """The id of the node at ``address``, which a signed call names (None: no credentials).

        Asked once per address (``Node.Info``) and kept; forgotten when that node
        refuses a signed call as UNAUTHENTICATED (a different node may now be there).
        """
        if self.credentials is None:
            return None
        pinned = self.pins.get(address)
        if pinned is not None:
            return pinned
        known = self._targets.get(address)
        if known is None:
            try:
                known = await node_id_at(self.channel(address), timeout)
            except grpc.aio.AioRpcError as exc:
                raise await self._failed(address, exc) from exc
            self._targets[address] = known
        return known

    def _metadata(
        self, method: str, request: Any, target: str | None
    ) -> tuple[tuple[str, str], ...] | None:
        """The control signature of a call that needs one (None without credentials)."""
        if self.credentials is None or target is None:
            return None
        return signed_metadata(self.credentials, method, request, target=target)

    async def _signed_call(self, address: str, coro: Any) -> Any:
        try:
            return await self._call(address, coro)
        except CallFailed as exc:
            if exc.code == "UNAUTHENTICATED":
                self._targets.pop(address, None)
            raise

    async def _signed_retried(
        self, address: str, method: str, call: Any, request: Any, timeout: float
    ) -> Any:
        """One signed, idempotent call (``call``: the stub method for ``method``): each
        attempt signed afresh (new time and nonce: a retry is a new call), asked again
        within the deadline when the peer shed it before reading it (nodes.retry)."""
        if self.pins:
            timeout = await self._check_pin(address, timeout, False)
        target = await self._target(address, timeout)

        def attempt(left: float) -> Any:
            metadata = self._metadata(method, request, target)
            return call(request, timeout=left, metadata=metadata)

        return await self._signed_call(address, retry_shed(method, attempt, timeout))

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        # A delivery is keyed by its value_ref: asking again is safe.
        reply = await self._signed_retried(
            address,
            _DELIVER,
            self._deliver_stub(address).Deliver,
            wire.deliver_request(delivery, signed=signed),
            timeout,
        )
        return wire.acknowledgement_from_pb(reply)

    async def take_custody(
        self, address: str, head: bytes, fold_proofs: Sequence[bytes], timeout: float
    ) -> tuple[bytes, ...]:
        """``Custody.Take`` on a custodian (signed with this transport's credentials)."""
        reply = await self._signed_retried(
            address,
            _CUSTODY_TAKE,
            wire.custody_stub(self.channel(address)).Take,
            wire.take_custody_request(head, fold_proofs),
            timeout,
        )
        return tuple(bytes(s) for s in reply.statements)

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer:
        """``Attest.Request`` on an attester (signed with this transport's credentials)."""
        if self.pins:
            timeout = await self._check_pin(address, timeout, False)
        stub = wire.attest_stub(self.channel(address))
        request = wire.attest_request(ask)
        metadata = self._metadata(_ATTEST_REQUEST, request, await self._target(address, timeout))
        reply = await self._signed_call(
            address, stub.Request(request, timeout=timeout, metadata=metadata)
        )
        return wire.attestation_answer_from_pb(reply)

    async def add_checkpoint(self, address: str, body: bytes, timeout: float) -> WitnessReply:
        """``Witness.AddCheckpoint`` on a witness (open: the checkpoint's signature decides)."""
        if self.pins:
            timeout = await self._check_pin(address, timeout, False)
        stub = wire.witness_stub(self.channel(address))
        request = wire.add_checkpoint_request(body)
        reply = await self._call(address, stub.AddCheckpoint(request, timeout=timeout))
        return wire.witness_reply_from_pb(reply)

    async def close(self) -> None:
        asking, self._asking = list(self._asking.values()), {}
        for stream in asking:
            await stream.close()
        channels = self._channels
        self._channels = BoundedCache(MAX_CHANNELS, on_evict=self._drop_channel)
        self._serve.clear()
        self._demand.clear()
        self._evidence.clear()
        self._deliver.clear()
        for _, chan in channels.items():
            await chan.close(None)
        for closing, chan in list(self._closing.items()):
            closing.cancel()
            await chan.close(None)


# --------------------------------------------------------------------------- in-memory


@types.coroutine
def _resume(coro: Any, first: Any) -> Generator[Any, Any, Any]:
    """Await ``coro`` from the point where it yielded ``first``: what ``yield from``
    does, for a coroutine already started (results, exceptions and cancellation
    pass through unchanged)."""
    message = first
    while True:
        try:
            received = yield message
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                message = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                message = coro.send(received)
            except StopIteration as done:
                return done.value


class InMemoryTransport:
    """Calls in-process nodes directly, with gRPC's deadline, size and status behaviour.

    Register nodes with :meth:`register`; an unknown or crashed address is
    UNAVAILABLE, a call that outlives its timeout is DEADLINE_EXCEEDED, an
    error raised by the node becomes the status code the server would send.
    """

    def __init__(
        self,
        max_message_bytes: int = 4 * 1024 * 1024,
        registry: dict[str, LocalNode] | None = None,
        *,
        pins: Mapping[str, str] | None = None,
    ) -> None:
        # Several transports may share one registry: each node its own view,
        # with its own ``blocked`` set (a partition as seen from that node).
        self._nodes: dict[str, LocalNode] = {} if registry is None else registry
        self._max = max_message_bytes
        self.blocked: set[str] = set()
        self.calls = 0
        #: Address → the node id pinned for it (as :class:`GrpcTransport`).
        self.pins: dict[str, str] = dict(pins or {})

    def register(self, address: str, core: LocalNode) -> None:
        self._nodes[address] = core

    def _node(self, address: str) -> LocalNode:
        core = self._nodes.get(address)
        if core is None or core.crashed or address in self.blocked:
            raise CallFailed("UNAVAILABLE", "no node listening", address)
        pinned = self.pins.get(address)
        if pinned is not None:
            found = str(getattr(core, "node_id", ""))
            if found != pinned:
                raise wrong_node(address, found, pinned)
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
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            # In the caller's task (no task per call, as ``wait_for`` would make).
            # The handler runs up to its first suspension before a timer is armed:
            # a deadline can only fire while the caller's task waits, so a handler
            # that never waits (the usual in-process call) needs none — as with
            # ``asyncio.timeout`` around it, which would never fire either. If it
            # waits, the rest runs under the same deadline, from the call's start.
            try:
                first = coro.send(None)
            except StopIteration as done:
                return done.value
            async with asyncio.timeout_at(deadline):
                return await _resume(coro, first)
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
        self._check_size(address, wire.demand_request_size(demands))
        answers: list[Answer] = await self._run(address, timeout, core.answer_demands(demands))
        size = wire.demand_response_size(answers)
        self._check_size(address, size)
        return wire.SizedAnswers(answers, size)  # sized once: a meter reads the size

    async def ask(self, address: str, asks: bytes, timeout: float) -> list[Answer]:
        core = self._node(address)
        self._check_size(address, wire.ask_frame_size(asks))
        answers: list[Answer] = await self._run(address, timeout, core.answer_asks(asks))
        size = wire.ask_reply_size(answers)
        self._check_size(address, size)
        return wire.SizedAnswers(answers, size)

    async def demand_stream(self, address: str, demand: bytes, timeout: float) -> Answer:
        core = self._node(address)
        self._check_size(address, wire.stream_request_size(demand))

        async def collect() -> Answer:
            hops: list[bytes] = []
            first: Answer | None = None
            index = 0
            async for chunk in core.answer_demand_stream(demand):
                # Sized as the chunk that may be the last (the larger encoding).
                self._check_size(address, wire.receipt_chunk_size(chunk, index, True))
                index += 1
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
        deadline = loop_time() + timeout
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

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        core = self._node(address)
        self._check_size(address, wire.deliver_request_size(delivery, signed=signed))
        ack: Acknowledgement = await self._run(
            address, timeout, core.deliver(delivery, signed=signed)
        )
        return ack

    async def take_custody(
        self, address: str, head: bytes, fold_proofs: Sequence[bytes], timeout: float
    ) -> tuple[bytes, ...]:
        """``Custody.Take`` on an in-process custodian."""
        core = self._node(address)
        if not isinstance(core, _CustodianNode):
            raise CallFailed("UNIMPLEMENTED", "not a custodian", address)
        self._check_size(address, len(head) + sum(map(len, fold_proofs)))
        statements: tuple[bytes, ...] = await self._run(
            address, timeout, core.take_custody(head, fold_proofs)
        )
        return statements

    async def request_attestation(
        self, address: str, ask: AttestationAsk, timeout: float
    ) -> AttestationAnswer:
        core = self._node(address)
        if not isinstance(core, _AttesterNode):
            raise CallFailed("UNIMPLEMENTED", "not an attester", address)
        self._check_size(address, wire.attest_request_size(ask))
        answer: AttestationAnswer = await self._run(address, timeout, core.request_attestation(ask))
        self._check_size(address, wire.attest_response_size(answer))
        return answer

    async def add_checkpoint(self, address: str, body: bytes, timeout: float) -> WitnessReply:
        core = self._node(address)
        if not isinstance(core, _WitnessNode):
            raise CallFailed("UNIMPLEMENTED", "not a witness", address)
        self._check_size(address, wire.message_size(wire.add_checkpoint_request(body)))
        reply: WitnessReply = await self._run(address, timeout, core.add_checkpoint(body))
        return reply

    async def close(self) -> None:
        return None
