"""The one client tools drive nodes with: :class:`NodeClient` (one node), :class:`NodeClients`.

Whatever drives running nodes from outside — the boundary and attest
experiments on running nodes, ``provnet cluster smoke``, the benchmarks —
calls them through this module and nothing else; none of them sees a
channel, a stub, a protobuf message or a gRPC error. A :class:`NodeClient`
owns, for the node at one address:

- **the channel**: :func:`nodes.auth.control_channel` with the caller's
  :class:`~nodes.auth.ControlCredentials` (the operator key): every control
  call is signed for that node, serve-plane calls (``Demand``,
  ``Challenge``, ``Info``, ``Stats``) go unsigned on the same channel.
  Without credentials it is a plain channel, and a control call gets the
  node's ``UNAUTHENTICATED``;
- **names and TLS**: the address may name its host by DNS; ``node_id`` pins
  the node there (control calls are signed for it, so another node a name
  reaches refuses them), ``tls`` makes the channel TLS, verifying the node's
  certificate (:mod:`nodes.tls`); :class:`NodeClients` takes ``pins`` and
  ``tls`` for every address;
- **typed calls**: one method per RPC, taking and returning the node's own
  types (:mod:`nodes.messages`, :mod:`nodes.attester`), converted by
  :mod:`nodes.wire`;
- **a deadline on every call** (the client's default, or the call's own);
- **retries with pushback**: a method the method table retries
  (:attr:`nodes.methods.MethodPolicy.retried`) is made again after a
  refusal that says it never ran, within the one deadline
  (:func:`nodes.retry.retry_shed`: the node's ``grpc-retry-pushback-ms``,
  else jittered backoff; signed afresh each attempt). Every other failure is final at once;
- **error mapping**: a failed call raises :class:`RpcFailed`, a
  :class:`nodes.transport.CallFailed` (the status name, the node's message,
  the address, its pushback) that also names the method — the error the
  node's own transport raises, so one ``except`` and one classification
  (:mod:`nodes.noanswer`, :mod:`nodes.refusal`) serve both;
- **a metering hook**: ``on_call`` is called once per call, after its last
  attempt, with a :class:`CallRecord` — method, address, request and
  response bytes (protobuf encodings, what gRPC frames carry), milliseconds
  including retries, the status (``OK`` or its name) and the attempts made.
  Sizes are computed only when a hook is set.

:class:`NodeClients` keeps one client per address with shared credentials,
options and hook, and :meth:`NodeClients.send` delivers the way a node's
``send`` does (:class:`nodes.elision.HeadElision`): heads the receiver
acknowledged travel as their digests, all of them again after a
``NOT_FOUND``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from nodes import wire
from nodes.attester import AttestationAnswer, AttestationAsk, FoldBytes, RestoreResult
from nodes.auth import ControlCredentials, control_channel
from nodes.elision import HeadElision
from nodes.messages import (
    Acknowledgement,
    Answer,
    ChallengeResult,
    CommittedCompaction,
    CommittedFold,
    Delivery,
    NodeInfo,
    RehydrationReport,
)
from nodes.methods import lookup as method_policy
from nodes.methods import method_name
from nodes.retry import appointment_ms, retry_shed
from nodes.tls import TlsFiles
from nodes.transport import CallFailed

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "CallObserver",
    "CallRecord",
    "NodeClient",
    "NodeClients",
    "RpcFailed",
]

#: The deadline of a call that names none (seconds).
DEFAULT_TIMEOUT_S = 30.0

_APPEND = method_name("HopLog", "Append")
_COMMIT_FOLD = method_name("HopLog", "CommitFold")
_COMMIT_COMPACTION = method_name("HopLog", "CommitCompaction")
_DELIVER = method_name("Deliver", "Deliver")
_FORWARD = method_name("Deliver", "Forward")
_REHYDRATE = method_name("Deliver", "Rehydrate")
_DEMAND = wire.DEMAND_METHOD
_CHALLENGE = method_name("Evidence", "Challenge")
_REPORT = method_name("Evidence", "Report")
_INFO = method_name("Node", "Info")
_STATS = method_name("Node", "Stats")
_ATTEST_REQUEST = method_name("Attest", "Request")
_RESTORE = method_name("Attest", "Restore")
_LIST = method_name("Attest", "List")
_SUBMIT = method_name("Attest", "Submit")


class RpcFailed(CallFailed):
    """A call to a node failed: ``code`` (status name), ``message`` (what the node
    said), ``address``, ``pushback_ms`` and the full ``method`` name."""

    def __init__(
        self, method: str, code: str, message: str, address: str, pushback_ms: int | None = None
    ) -> None:
        super().__init__(code, message, address, pushback_ms)
        self.method = method
        self.args = (f"{method} at {address}: {code}: {message}",)

    @classmethod
    def from_rpc(cls, method: str, address: str, exc: grpc.aio.AioRpcError) -> RpcFailed:
        return cls(method, exc.code().name, exc.details() or "", address, appointment_ms(exc))


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call as the metering hook sees it (after its last attempt)."""

    method: str
    address: str
    request_bytes: int
    response_bytes: int
    ms: float
    #: ``OK`` or the status name of the failure raised
    code: str
    attempts: int


#: The metering hook: called once per call.
CallObserver = Callable[[CallRecord], None]


def _size(message: Any) -> int:
    return int(message.ByteSize())


class NodeClient:
    """Typed calls to the node at ``address`` (module docstring); :meth:`close` it."""

    def __init__(
        self,
        address: str,
        credentials: ControlCredentials | None = None,
        *,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float = DEFAULT_TIMEOUT_S,
        on_call: CallObserver | None = None,
        node_id: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.address = address
        self.credentials = credentials
        self.timeout = timeout
        self.on_call = on_call
        # ``node_id`` pins the node: control calls are signed for it, so any other
        # node a name reaches refuses them (UNAUTHENTICATED, naming both ids).
        self._channel = control_channel(
            address,
            credentials,
            options,
            target=node_id,
            tls=None if tls is None else tls.channel_credentials(),
        )
        self._hoplog = wire.hoplog_stub(self._channel)
        self._deliver = wire.deliver_stub(self._channel)
        self._node = wire.node_stub(self._channel)
        self._evidence = wire.evidence_stub(self._channel)
        self._attest = wire.attest_stub(self._channel)
        self._demand: wire.DemandCall | None = None

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _unary(
        self,
        method: str,
        call: Any,
        request: Any,
        timeout: float | None,
        *,
        request_bytes: Callable[[Any], int] = _size,
        response_bytes: Callable[[Any], int] = _size,
        wait_for_ready: bool | None = None,
    ) -> Any:
        """``call(request)`` within the deadline, retried if ``method`` is retry-safe."""
        budget = self.timeout if timeout is None else timeout
        attempts = 0

        def attempt(left: float) -> Any:
            nonlocal attempts
            attempts += 1
            return call(request, timeout=left, wait_for_ready=wait_for_ready)

        start = time.perf_counter()
        try:
            found = method_policy(method)
            if found is not None and found.retried:
                reply = await retry_shed(method, attempt, budget)
            else:
                reply = await attempt(budget)
        except grpc.aio.AioRpcError as exc:
            failed = RpcFailed.from_rpc(method, self.address, exc)
            self._observe(method, request, request_bytes, None, 0, start, failed.code, attempts)
            raise failed from exc
        self._observe(method, request, request_bytes, reply, response_bytes, start, "OK", attempts)
        return reply

    def _observe(
        self,
        method: str,
        request: Any,
        request_bytes: Callable[[Any], int],
        reply: Any,
        response_bytes: Callable[[Any], int] | int,
        start: float,
        code: str,
        attempts: int,
    ) -> None:
        if self.on_call is None:
            return
        ms = (time.perf_counter() - start) * 1000.0
        got = response_bytes if isinstance(response_bytes, int) else response_bytes(reply)
        self.on_call(
            CallRecord(method, self.address, request_bytes(request), got, ms, code, attempts)
        )

    # ----------------------------------------------------------------- Node (open)

    async def info(self, *, timeout: float | None = None, wait_for_ready: bool = False) -> NodeInfo:
        """``Node.Info``: the node's name, id, key, epoch, fault and listen address."""
        reply = await self._unary(
            _INFO,
            self._node.Info,
            wire.info_request(),
            timeout,
            wait_for_ready=wait_for_ready or None,
        )
        return wire.node_info_from_pb(reply)

    async def stats(self, *, timeout: float | None = None) -> dict[str, int]:
        """``Node.Stats``: the node's counters."""
        reply = await self._unary(_STATS, self._node.Stats, wire.stats_request(), timeout)
        return {str(k): int(v) for k, v in reply.counters.items()}

    # ----------------------------------------------------------------- HopLog (control)

    async def append(
        self, hops: Sequence[bytes], seqs: Sequence[int] = (), *, timeout: float | None = None
    ) -> tuple[int, ...]:
        """``HopLog.Append``: the sequence number each hop got, in order."""
        request = wire.append_request(hops, seqs)
        reply = await self._unary(_APPEND, self._hoplog.Append, request, timeout)
        return tuple(int(s) for s in reply.seqs)

    async def commit_fold(
        self,
        value_ref: str,
        seqs: Sequence[int],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
        value: bytes = b"",
        timeout: float | None = None,
    ) -> CommittedFold:
        """``HopLog.CommitFold``: the signed commitment and obligation over ``seqs``."""
        request = wire.commit_fold_request(
            value_ref, seqs, serve_for_ms=serve_for_ms, deadline_ms=deadline_ms, value=value
        )
        reply = await self._unary(_COMMIT_FOLD, self._hoplog.CommitFold, request, timeout)
        return wire.committed_fold_from_pb(reply)

    async def commit_compaction(
        self,
        folds: Sequence[tuple[str, Sequence[int], bytes]],
        *,
        serve_for_ms: int = 0,
        deadline_ms: int = 0,
        timeout: float | None = None,
    ) -> CommittedCompaction:
        """``HopLog.CommitCompaction``: ONE signed head, a fold proof per (ref, seqs, value)."""
        request = wire.commit_compaction_request(
            folds, serve_for_ms=serve_for_ms, deadline_ms=deadline_ms
        )
        reply = await self._unary(
            _COMMIT_COMPACTION, self._hoplog.CommitCompaction, request, timeout
        )
        return wire.committed_compaction_from_pb(reply)

    # ----------------------------------------------------------------- Deliver (control)

    async def deliver(
        self, delivery: Delivery, *, timeout: float | None = None, signed: bool = False
    ) -> Acknowledgement:
        """``Deliver.Deliver`` as sent (no head left out): the node's acknowledgement,
        with its signed delivery receipt when ``signed``."""
        request = wire.deliver_request(delivery, signed=signed)
        reply = await self._unary(_DELIVER, self._deliver.Deliver, request, timeout)
        return wire.acknowledgement_from_pb(reply)

    async def forward(
        self,
        value_ref: str,
        peer: str,
        *,
        timeout: float | None = None,
        signed_receipt: bool = True,
    ) -> bytes:
        """``Deliver.Forward``: the node delivers its held value to ``peer``; that peer's
        signed delivery receipt, verified by the node (``signed_receipt=False``: none
        is asked for, and ``b""`` is returned)."""
        request = wire.forward_request(value_ref, peer, signed_receipt=signed_receipt)
        reply = await self._unary(_FORWARD, self._deliver.Forward, request, timeout)
        return bytes(reply.delivery_receipt)

    async def rehydrate(
        self, value_ref: str, witnesses: Sequence[str] = (), *, timeout: float | None = None
    ) -> RehydrationReport:
        """``Deliver.Rehydrate``: the holder node demands, verifies and reports."""
        request = wire.rehydrate_request(value_ref, witnesses)
        reply = await self._unary(_REHYDRATE, self._deliver.Rehydrate, request, timeout)
        return wire.rehydration_report_from_pb(reply)

    # ----------------------------------------------------------------- Serve, Evidence

    async def demand(
        self, demands: Sequence[bytes], *, timeout: float | None = None
    ) -> list[Answer]:
        """``Serve.Demand``: the answers, in demand order (sized as received)."""
        if self._demand is None:
            self._demand = wire.demand_unary(self._channel)
        answers: wire.SizedAnswers = await self._unary(
            _DEMAND,
            self._demand,
            demands,
            timeout,
            request_bytes=wire.demand_request_size,
            response_bytes=lambda a: int(a.wire_size),
        )
        return answers

    async def challenge(
        self,
        *,
        commitment: bytes,
        obligation: bytes,
        demand: bytes,
        origin_address: str = "",
        timeout: float | None = None,
    ) -> ChallengeResult:
        """``Evidence.Challenge`` on a witness node."""
        request = wire.challenge_request(
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
        )
        reply = await self._unary(_CHALLENGE, self._evidence.Challenge, request, timeout)
        return wire.challenge_result_from_pb(reply)

    async def report_evidence(
        self, evidence: bytes, *, timeout: float | None = None
    ) -> tuple[str, str, str]:
        """``Evidence.Report``: (kind, accused origin id, digest) of the evidence accepted."""
        request = wire.report_request(evidence)
        reply = await self._unary(_REPORT, self._evidence.Report, request, timeout)
        return wire.reported_from_pb(reply)

    # ----------------------------------------------------------------- Attest

    async def request_attestation(
        self, ask: AttestationAsk, *, timeout: float | None = None
    ) -> AttestationAnswer:
        """``Attest.Request`` on an attester node."""
        request = wire.attest_request(ask)
        reply = await self._unary(_ATTEST_REQUEST, self._attest.Request, request, timeout)
        return wire.attestation_answer_from_pb(reply)

    async def restore(
        self,
        ask: AttestationAsk,
        folds: Sequence[FoldBytes],
        attester: str,
        *,
        timeout: float | None = None,
    ) -> RestoreResult:
        """``Attest.Restore`` on a holder node: rehydrate, then ask ``attester`` (address)."""
        request = wire.restore_request(ask, folds, attester)
        reply = await self._unary(_RESTORE, self._attest.Restore, request, timeout)
        return wire.restore_result_from_pb(reply)

    async def list_attestations(
        self, value_digest: str, *, timeout: float | None = None
    ) -> tuple[bytes, ...]:
        """``Attest.List``: the attestations the node keeps for a value."""
        request = wire.list_attestations_request(value_digest)
        reply = await self._unary(_LIST, self._attest.List, request, timeout)
        return tuple(bytes(a) for a in reply.attestations)

    async def submit_attestation(self, attestation: bytes, *, timeout: float | None = None) -> str:
        """``Attest.Submit``: the digest of the attestation the node accepted."""
        request = wire.submit_attestation_request(attestation)
        reply = await self._unary(_SUBMIT, self._attest.Submit, request, timeout)
        return str(reply.digest)


class NodeClients:
    """One :class:`NodeClient` per address, sharing credentials, options, deadline and hook.

    ``on_call`` may be set at any time; it sees every client's calls.
    """

    def __init__(
        self,
        credentials: ControlCredentials | None = None,
        *,
        options: Sequence[tuple[str, Any]] = (),
        timeout: float = DEFAULT_TIMEOUT_S,
        on_call: CallObserver | None = None,
        pins: Mapping[str, str] | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.credentials = credentials
        self.on_call = on_call
        self._pins = dict(pins or {})
        self._tls = tls
        self._options = tuple(options)
        self._timeout = timeout
        self._clients: dict[str, NodeClient] = {}
        self._elision = HeadElision()

    def at(self, address: str) -> NodeClient:
        """The client of the node at ``address`` (made on first use)."""
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = NodeClient(
                address,
                self.credentials,
                options=self._options,
                timeout=self._timeout,
                on_call=self._observe,
                node_id=self._pins.get(address),
                tls=self._tls,
            )
        return client

    def _observe(self, record: CallRecord) -> None:
        if self.on_call is not None:
            self.on_call(record)

    async def deliver(
        self, address: str, delivery: Delivery, timeout: float, signed: bool = False
    ) -> Acknowledgement:
        """``Deliver.Deliver`` to ``address`` as given (a :data:`nodes.elision.DeliverCall`)."""
        return await self.at(address).deliver(delivery, timeout=timeout, signed=signed)

    async def send(
        self, address: str, delivery: Delivery, timeout: float, *, signed: bool = False
    ) -> tuple[Acknowledgement, Delivery]:
        """Deliver as a node's ``send`` does (:meth:`nodes.elision.HeadElision.send`):
        the peer's acknowledgement (with its signed delivery receipt when
        ``signed``) and the delivery as sent."""
        return await self._elision.send(self.deliver, address, delivery, timeout, signed=signed)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()
