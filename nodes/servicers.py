"""The gRPC servicers of a node: generated request in, :class:`NodeCore` call, message out.

Each servicer is typed with the generated message classes and does nothing
but convert (through :mod:`nodes.wire`) and pass the caller's remaining
deadline on; every decision is the core's, every error is mapped to a
status code by :mod:`nodes.interceptors`. :data:`SERVICES` is the one table
of what a node serves: :func:`nodes.server.build_server` registers it and
reports each name to the health service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from contracts.canonical import sha256_hex
from nodes import auth, wire
from nodes._pb.provnet.v1 import (
    attest_pb2,
    attest_pb2_grpc,
    custody_pb2,
    custody_pb2_grpc,
    deliver_pb2,
    deliver_pb2_grpc,
    evidence_pb2,
    evidence_pb2_grpc,
    hoplog_pb2,
    hoplog_pb2_grpc,
    node_pb2,
    node_pb2_grpc,
    serve_pb2,
    serve_pb2_grpc,
    witness_pb2,
    witness_pb2_grpc,
)
from nodes.ask_stream import serve_asks
from nodes.errors import MalformedRequest
from nodes.messages import Answer
from nodes.services import NodeCore

__all__ = ["SERVE_SERVICE", "SERVICES", "SERVICE_NAMES", "Service", "add_services"]

_Context = grpc.aio.ServicerContext[Any, Any]


def _deadline(context: _Context) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + float(remaining)


def _authorised_sender(core: NodeCore, sender: str) -> str:
    """The sender a delivery receipt may name: the call's signer, or anyone for an operator.

    The handler wrapper has verified the call's signature (:mod:`nodes.auth`); a
    node may deliver as itself only, so a receipt never names a node that did
    not sign the call. An operator key may name any sender (or none: the
    value's origin).
    """
    signer = auth.caller()
    if signer is None:
        raise auth.NotAuthenticated("Deliver: the call is not signed")
    if signer in core.config.operator_keys:
        return sender
    if sender and sender != signer:
        if not core.config.operator_keys:
            # Most likely an operator's call to a node started without its key.
            raise auth.PermissionDenied(
                f"Deliver: sender {sender[:16]}… is not the key that signed the call"
                f" ({signer[:16]}…) and node {core.config.name!r} has no operator key"
                " configured (--operator-keys / PROVNET_OPERATOR_KEYS) that may name another"
            )
        raise auth.PermissionDenied(
            f"Deliver: sender {sender[:16]}… is not the key that signed the call"
            f" ({signer[:16]}…); a node delivers only as itself"
        )
    return signer


class HopLog(hoplog_pb2_grpc.HopLogServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Append(
        self, request: hoplog_pb2.AppendRequest, context: _Context
    ) -> hoplog_pb2.AppendResponse:
        epoch, seqs = await self.core.append(list(request.hops), list(request.seqs))
        return hoplog_pb2.AppendResponse(epoch=epoch, seqs=list(seqs))

    async def CommitFold(
        self, request: hoplog_pb2.CommitFoldRequest, context: _Context
    ) -> hoplog_pb2.CommitFoldResponse:
        fold = await self.core.commit_fold(
            request.value_ref,
            list(request.seqs),
            serve_for_ms=request.serve_for_ms,
            deadline_ms=request.deadline_ms,
            value=bytes(request.value),
        )
        return wire.commit_fold_response(fold)

    async def CommitCompaction(
        self, request: hoplog_pb2.CommitCompactionRequest, context: _Context
    ) -> hoplog_pb2.CommitCompactionResponse:
        compaction = await self.core.commit_compaction(
            wire.compaction_folds_from_pb(request),
            serve_for_ms=request.serve_for_ms,
            deadline_ms=request.deadline_ms,
        )
        return wire.commit_compaction_response(compaction)


class Serve(serve_pb2_grpc.ServeServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core
        #: Unsigned answers, each encoded once (the origin answers an ask again with
        #: the same answer): sent as the response's encoding.
        self._encodings = wire.AnswerEncodings()

    async def Demand(
        self, request: serve_pb2.DemandRequest, context: _Context
    ) -> serve_pb2.DemandResponse:
        # The repeated field itself (a sequence of bytes), not a copy of it in a list.
        return wire.demand_response(await self.core.answer_demands(request.demands))

    async def Ask(  # type: ignore[override]  # reads and writes with the context
        self, request_iterator: object, context: _Context
    ) -> None:
        """Unsigned first asks on one stream (:mod:`nodes.ask_stream`), answered with
        the encodings of the answers (:class:`nodes.wire.AnswerEncodings`)."""
        await serve_asks(
            context,
            self.core.answer_asks,
            self._encodings.response,
            self.core.config.max_message_bytes,
        )

    async def DemandStream(
        self, request: serve_pb2.DemandStreamRequest, context: _Context
    ) -> AsyncIterator[serve_pb2.ReceiptChunk]:
        chunks = self.core.answer_demand_stream(
            bytes(request.demand), max_chunk_bytes=int(request.max_chunk_bytes)
        )
        index = 0
        pending: Answer | None = None
        async for chunk in chunks:
            if pending is not None:
                yield wire.receipt_chunk(pending, index, last=False)
                index += 1
            pending = chunk
        if pending is not None:
            yield wire.receipt_chunk(pending, index, last=True)


#: Values at least this large are hashed in a worker thread, off the event loop.
_OFFLOAD_HASH_BYTES = 256 * 1024


class Deliver(deliver_pb2_grpc.DeliverServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Deliver(
        self, request: deliver_pb2.DeliverRequest, context: _Context
    ) -> deliver_pb2.DeliverResponse:
        if not request.HasField("value"):
            raise MalformedRequest("deliver: no value given")
        sender = _authorised_sender(self.core, request.sender)
        delivery = wire.delivery_from_pb(request.value, sender)
        signed = request.signed_receipt
        del request  # the parsed message holds a second copy of the value
        # A signed receipt's digest of a large value is computed in a worker thread
        # (hashlib releases the GIL), not on the event loop demands are served on.
        digest = (
            await asyncio.to_thread(sha256_hex, delivery.value)
            if signed and len(delivery.value) >= _OFFLOAD_HASH_BYTES
            else None
        )
        ack = await self.core.deliver(
            delivery, value_digest=digest, by=auth.caller(), signed=signed
        )
        return wire.deliver_response(ack)

    async def Rehydrate(
        self, request: deliver_pb2.RehydrateRequest, context: _Context
    ) -> deliver_pb2.RehydrateResponse:
        report = await self.core.rehydrate(
            request.value_ref, list(request.witnesses), deadline=_deadline(context)
        )
        return wire.rehydrate_response(report)

    async def Forward(
        self, request: deliver_pb2.ForwardRequest, context: _Context
    ) -> deliver_pb2.ForwardResponse:
        receipt = await self.core.forward(
            request.value_ref,
            request.peer,
            deadline=_deadline(context),
            signed_receipt=not request.without_receipt,
        )
        return deliver_pb2.ForwardResponse(delivery_receipt=receipt)


class Attest(attest_pb2_grpc.AttestServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Submit(
        self, request: attest_pb2.SubmitAttestationRequest, context: _Context
    ) -> attest_pb2.SubmitAttestationResponse:
        digest = await self.core.submit_attestation(bytes(request.attestation))
        return attest_pb2.SubmitAttestationResponse(digest=digest)

    async def List(
        self, request: attest_pb2.ListAttestationsRequest, context: _Context
    ) -> attest_pb2.ListAttestationsResponse:
        found = await self.core.list_attestations(request.value_digest)
        return attest_pb2.ListAttestationsResponse(attestations=list(found))

    async def Request(
        self, request: attest_pb2.RequestAttestationRequest, context: _Context
    ) -> attest_pb2.RequestAttestationResponse:
        answer = await self.core.request_attestation(
            wire.attestation_ask_from_pb(request), caller=auth.caller()
        )
        return wire.attest_response(answer)

    async def Restore(
        self, request: attest_pb2.RestoreRequest, context: _Context
    ) -> attest_pb2.RestoreResponse:
        ask, folds, attester = wire.restore_from_pb(request)
        result = await self.core.restore(ask, folds, attester, deadline=_deadline(context))
        return wire.restore_response(result)


class Evidence(evidence_pb2_grpc.EvidenceServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Report(
        self, request: evidence_pb2.ReportRequest, context: _Context
    ) -> evidence_pb2.ReportResponse:
        kind, accused, digest = await self.core.report_evidence(bytes(request.evidence))
        return evidence_pb2.ReportResponse(kind=kind, accused=accused, digest=digest)

    async def Challenge(
        self, request: evidence_pb2.ChallengeRequest, context: _Context
    ) -> evidence_pb2.ChallengeResponse:
        result = await self.core.challenge(
            commitment=bytes(request.commitment),
            obligation=bytes(request.obligation),
            demand=bytes(request.demand),
            origin_address=request.origin_address,
            deadline=_deadline(context),
        )
        return wire.challenge_response(result)


class Custody(custody_pb2_grpc.CustodyServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Take(
        self, request: custody_pb2.TakeCustodyRequest, context: _Context
    ) -> custody_pb2.TakeCustodyResponse:
        statements = await self.core.custodian.take(
            bytes(request.head),
            [bytes(p) for p in request.fold_proofs],
            by=auth.caller(),
            deadline=_deadline(context),
        )
        return wire.take_custody_response(statements)


class Node(node_pb2_grpc.NodeServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def Info(self, request: node_pb2.InfoRequest, context: _Context) -> node_pb2.InfoResponse:
        return wire.info_response(self.core.info())

    async def Stats(
        self, request: node_pb2.StatsRequest, context: _Context
    ) -> node_pb2.StatsResponse:
        return wire.stats_response(await self.core.stats())


class Witness(witness_pb2_grpc.WitnessServicer):
    def __init__(self, core: NodeCore) -> None:
        self.core = core

    async def AddCheckpoint(
        self, request: witness_pb2.AddCheckpointRequest, context: _Context
    ) -> witness_pb2.AddCheckpointResponse:
        reply = await self.core.add_checkpoint(bytes(request.body))
        return wire.add_checkpoint_response(reply)


@dataclass(frozen=True, slots=True)
class Service:
    """One provnet service: its full name and how it is added to a server over a core."""

    name: str
    add: Callable[[NodeCore, grpc.aio.Server], None]


def _name(module: Any, service: str) -> str:
    return str(module.DESCRIPTOR.services_by_name[service].full_name)


#: Every service a node serves, in registration order.
SERVICES: tuple[Service, ...] = (
    Service(
        _name(hoplog_pb2, "HopLog"),
        lambda core, server: hoplog_pb2_grpc.add_HopLogServicer_to_server(HopLog(core), server),
    ),
    Service(
        _name(serve_pb2, "Serve"),
        lambda core, server: serve_pb2_grpc.add_ServeServicer_to_server(Serve(core), server),
    ),
    Service(
        _name(deliver_pb2, "Deliver"),
        lambda core, server: deliver_pb2_grpc.add_DeliverServicer_to_server(Deliver(core), server),
    ),
    Service(
        _name(attest_pb2, "Attest"),
        lambda core, server: attest_pb2_grpc.add_AttestServicer_to_server(Attest(core), server),
    ),
    Service(
        _name(evidence_pb2, "Evidence"),
        lambda core, server: evidence_pb2_grpc.add_EvidenceServicer_to_server(
            Evidence(core), server
        ),
    ),
    Service(
        _name(custody_pb2, "Custody"),
        lambda core, server: custody_pb2_grpc.add_CustodyServicer_to_server(Custody(core), server),
    ),
    Service(
        _name(node_pb2, "Node"),
        lambda core, server: node_pb2_grpc.add_NodeServicer_to_server(Node(core), server),
    ),
    Service(
        _name(witness_pb2, "Witness"),
        lambda core, server: witness_pb2_grpc.add_WitnessServicer_to_server(Witness(core), server),
    ),
)

#: Fully-qualified names of the provnet services (health reports each one).
SERVICE_NAMES: tuple[str, ...] = tuple(s.name for s in SERVICES)

#: The serve path's service (demands; open to any bearer of an obligation).
SERVE_SERVICE: str = _name(serve_pb2, "Serve")


def add_services(core: NodeCore, server: grpc.aio.Server) -> None:
    """Register every service of :data:`SERVICES` on ``server``, all over ``core``."""
    for service in SERVICES:
        service.add(core, server)
