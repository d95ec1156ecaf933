"""The node's types ⇄ protobuf: the one module that converts, and the one size rule.

Generated code (:mod:`nodes._pb`) is imported here and by the servicers
(:mod:`nodes.servicers`, which are typed with the generated classes); every
other module — transport, client, node core, cluster tools, the harness —
speaks :mod:`nodes.messages` and calls this module to cross the wire.

Conversions go both ways. Hop bytes, the envelopes of demands, receipts,
delivery receipts, attestations and witness reports, and heads (C2SP
tlog-checkpoint signed notes, :mod:`contracts.head_note`) and fold proofs
(their one encoding, :mod:`contracts.fold_layout`) are copied into and out of
``bytes`` fields verbatim: what is verified is what was signed or hashed, and
nothing is rebuilt.

**Message size** has one definition, :func:`message_size`: the protobuf
encoding of the message gRPC carries for a call, its length (neither gRPC's 5-byte
message prefix nor HTTP/2 framing) —
the quantity gRPC's ``max_*_message_length`` options bound. The in-memory
transport enforces its size bound with it, and the harness meters bytes
with it, through the per-RPC ``*_size`` helpers below. A demand's answers
read from the wire carry their response's length instead
(:class:`SizedAnswers`): the same number for a response this version
encodes, and what actually crossed the wire for one that is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc
from google.protobuf.message import DecodeError, Message

from contracts._lru import BoundedCache
from contracts.attest import RehydrationProof
from contracts.errors import EncodingError
from contracts.fold_layout import put_varint
from contracts.statements import Axis
from nodes._pb.provnet.v1 import (
    attest_pb2,
    attest_pb2_grpc,
    common_pb2,
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
from nodes.attester import (
    MAX_PROOFS,
    AttestationAnswer,
    AttestationAsk,
    FoldBytes,
    IssuedAttestation,
    RestoreResult,
)
from nodes.messages import (
    Acknowledgement,
    Answer,
    ChallengeResult,
    CommittedCompaction,
    CommittedFold,
    Delivery,
    NodeInfo,
    OriginOutcome,
    Outcome,
    RehydrationReport,
    VerifiedHop,
    WitnessReply,
)
from nodes.methods import method_name

if TYPE_CHECKING:  # the async stub types exist only in the generated .pyi
    from typing import TypeAlias

    from nodes._pb.provnet.v1.attest_pb2_grpc import AttestAsyncStub
    from nodes._pb.provnet.v1.custody_pb2_grpc import CustodyAsyncStub
    from nodes._pb.provnet.v1.deliver_pb2_grpc import DeliverAsyncStub
    from nodes._pb.provnet.v1.evidence_pb2_grpc import EvidenceAsyncStub
    from nodes._pb.provnet.v1.hoplog_pb2_grpc import HopLogAsyncStub
    from nodes._pb.provnet.v1.node_pb2_grpc import NodeAsyncStub
    from nodes._pb.provnet.v1.serve_pb2_grpc import ServeAsyncStub
    from nodes._pb.provnet.v1.witness_pb2_grpc import WitnessAsyncStub

    AttestStub: TypeAlias = AttestAsyncStub
    CustodyStub: TypeAlias = CustodyAsyncStub
    DeliverStub: TypeAlias = DeliverAsyncStub
    EvidenceStub: TypeAlias = EvidenceAsyncStub
    HopLogStub: TypeAlias = HopLogAsyncStub
    NodeStub: TypeAlias = NodeAsyncStub
    ServeStub: TypeAlias = ServeAsyncStub
    WitnessStub: TypeAlias = WitnessAsyncStub
    #: ``Serve.Demand`` from the demands' bytes, read into answers (:func:`demand_unary`).
    DemandCall: TypeAlias = grpc.aio.UnaryUnaryMultiCallable[Sequence[bytes], "SizedAnswers"]
    #: ``Serve.Ask`` written and read as bytes (:func:`ask_stream`).
    AskStreamCall: TypeAlias = grpc.aio.StreamStreamMultiCallable[
        bytes, Sequence[serve_pb2.AskReply]
    ]

__all__ = [
    "ASK_METHOD",
    "DEMAND_METHOD",
    "WIRE_VERSION",
    "AskStreamCall",
    "DemandCall",
    "SizedAnswers",
    "acknowledgement_from_pb",
    "add_checkpoint_request",
    "add_checkpoint_response",
    "answer_from_pb",
    "answer_to_pb",
    "answers_from_pb",
    "answers_from_response",
    "append_request",
    "ask_calls",
    "ask_frame_size",
    "ask_refusal",
    "ask_replies",
    "ask_reply_size",
    "ask_stream",
    "attest_request",
    "attest_request_size",
    "attest_response",
    "attest_response_size",
    "attest_stub",
    "attestation_answer_from_pb",
    "attestation_ask_from_pb",
    "challenge_request",
    "challenge_request_size",
    "challenge_response",
    "challenge_response_size",
    "challenge_result_from_pb",
    "commit_compaction_request",
    "commit_compaction_response",
    "commit_fold_request",
    "commit_fold_response",
    "committed_compaction_from_pb",
    "committed_fold_from_pb",
    "compaction_folds_from_pb",
    "deliver_request",
    "deliver_request_size",
    "deliver_response",
    "deliver_response_size",
    "deliver_stub",
    "delivered_value",
    "delivered_value_bytes",
    "delivery_from_pb",
    "delivery_from_value_bytes",
    "delivery_statement_size",
    "demand_request",
    "demand_request_size",
    "demand_response",
    "demand_response_size",
    "demand_unary",
    "encode_ask_frame",
    "encode_ask_refusal",
    "encode_ask_reply",
    "encode_demand_request",
    "evidence_stub",
    "forward_request",
    "hoplog_stub",
    "info_request",
    "info_response",
    "list_attestations_request",
    "message_size",
    "node_info_from_pb",
    "node_stub",
    "read_counters",
    "receipt_chunk",
    "receipt_chunk_size",
    "rehydrate_request",
    "rehydrate_response",
    "rehydration_report_from_pb",
    "reply_answers",
    "report_request",
    "reported_from_pb",
    "restore_from_pb",
    "restore_request",
    "restore_response",
    "restore_result_from_pb",
    "serve_stub",
    "stats_request",
    "stats_response",
    "stream_answer_size",
    "stream_request",
    "stream_request_size",
    "submit_attestation_request",
    "witness_reply_from_pb",
    "witness_stub",
]

#: Version of the delivery encoding (common.proto ``DeliveredValue``): 6 carries each
#: head as its C2SP checkpoint note and each fold proof in its one encoding
#: (:mod:`contracts.fold_layout`), both verbatim. Versions 1-5 took heads or fold
#: proofs apart into other forms and rebuilt them; they are not read.
WIRE_VERSION = 6


def message_size(message: Message) -> int:
    """Bytes of a message on the wire: its protobuf encoding (what gRPC bounds)."""
    return message.ByteSize()


# --------------------------------------------------------------------------- values


def delivered_value(delivery: Delivery) -> common_pb2.DeliveredValue:
    """A delivery in binary: its heads and fold proofs verbatim, each in its one encoding."""
    msg = common_pb2.DeliveredValue()
    _fill_delivered_value(msg, delivery)
    return msg


def _fill_delivered_value(msg: common_pb2.DeliveredValue, delivery: Delivery) -> None:
    # Filled in place: a message passed to a constructor is copied, and a request
    # is built for every delivery's size (deliver_request_size).
    msg.SetInParent()
    msg.value_ref = delivery.value_ref
    msg.value = delivery.value
    # a repeated field is only touched when there is something to put in it
    if delivery.commitments:
        msg.commitments.extend(delivery.commitments)
    if delivery.obligations:
        msg.obligations.extend(delivery.obligations)
    if delivery.fold_proofs:
        msg.fold_proofs.extend(delivery.fold_proofs)
    if delivery.heads:
        msg.heads.extend(delivery.heads)
    if delivery.custody:
        msg.custody.extend(delivery.custody)


def delivery_from_pb(msg: common_pb2.DeliveredValue, sender: str = "") -> Delivery:
    """The delivery a :func:`delivered_value` message carries; ``sender`` is the
    request's sender. Heads and fold proofs are taken as they came (the receiver
    verifies them)."""
    return Delivery(
        value_ref=str(msg.value_ref),
        value=bytes(msg.value),
        commitments=tuple(bytes(c) for c in msg.commitments),
        obligations=tuple(bytes(o) for o in msg.obligations),
        sender=sender,
        fold_proofs=tuple(bytes(p) for p in msg.fold_proofs),
        heads=tuple(bytes(h) for h in msg.heads),
        custody=tuple(bytes(c) for c in msg.custody),
    )


def answer_to_pb(answer: Answer) -> common_pb2.Answer:
    return common_pb2.Answer(
        receipt=answer.receipt, commitment=answer.commitment, hops=list(answer.hops)
    )


def answer_from_pb(msg: common_pb2.Answer) -> Answer:
    # A repeated ``bytes`` field yields ``bytes`` items already: one C-level copy
    # of the list, not a ``bytes()`` call per served hop.
    return Answer(bytes(msg.receipt), bytes(msg.commitment), tuple(msg.hops))


# --------------------------------------------------------------------------- Serve


def demand_request(demands: Sequence[bytes]) -> serve_pb2.DemandRequest:
    return serve_pb2.DemandRequest(demands=list(demands))


def encode_demand_request(demands: Sequence[bytes]) -> bytes:
    """The bytes of ``demand_request(demands).SerializeToString()``, written directly.

    A ``DemandRequest`` is one repeated ``bytes`` field (number 1): each demand
    is its tag, its length (a varint) and its bytes, in order, which is how
    protobuf writes it too (pinned by a test). The request serializer of
    :func:`demand_unary`: no message object built on every demand.
    """
    parts: list[bytes] = []
    for demand in demands:
        n = len(demand)
        if n < 0x80:
            parts.append(b"\x0a" + bytes((n,)))
        else:
            head = bytearray(b"\x0a")
            while n >= 0x80:
                head.append((n & 0x7F) | 0x80)
                n >>= 7
            head.append(n)
            parts.append(bytes(head))
        parts.append(demand)
    return b"".join(parts)


def encode_ask_frame(call_id: int, asks: bytes) -> bytes:
    """The bytes of ``AskFrame(calls=[AskCall(id=call_id, asks=asks)])``, written
    directly: field 1 (``calls``) holding field 1 (``id``) and field 2 (``asks``,
    the packed asks of :mod:`contracts.ask`). Frames back to back are one frame of
    all their calls (a repeated field's items appended in order)."""
    body = bytearray(b"\x08")
    put_varint(body, call_id)
    body.append(0x12)
    put_varint(body, len(asks))
    body += asks
    return _field_1(body)


def encode_ask_reply(call_id: int, answers: bytes) -> bytes:
    """The bytes of ``AskReplies(replies=[AskReply(answers=…, id=call_id)])`` where
    ``answers`` is the encoding of the answers (:meth:`AnswerEncodings.response`:
    field 1 of a ``DemandResponse`` and of an ``AskReply`` alike)."""
    body = bytearray(answers)
    body.append(0x10)
    put_varint(body, call_id)
    return _field_1(body)


def encode_ask_refusal(call_id: int, code: str, details: str) -> bytes:
    """An ``AskReplies`` of one reply refusing call ``call_id``: the gRPC status name
    the call would have ended with as a unary call, and why."""
    reply = serve_pb2.AskReply(id=call_id, code=code, details=details[:_MAX_DETAILS])
    return serve_pb2.AskReplies(replies=[reply]).SerializeToString()


#: Characters of a refusal's reason sent back (gRPC's own details are not longer in practice).
_MAX_DETAILS = 1024


def _field_1(body: bytearray) -> bytes:
    out = bytearray(b"\x0a")
    put_varint(out, len(body))
    return bytes(out + body)


def _framed(n: int) -> int:
    """Bytes of a length-delimited field 1 holding ``n`` bytes: tag, length, body."""
    size = 2 + n
    while n >= 0x80:
        size += 1
        n >>= 7
    return size


_read_ask_replies = serve_pb2.AskReplies.FromString


def ask_calls(frame: object, max_calls: int) -> list[tuple[int, bytes]]:
    """A frame the origin read (the stream's request as parsed): ``(id, asks)`` per
    call, in order. Raises :class:`contracts.errors.EncodingError` for anything that
    is not an ``AskFrame`` (bytes the server could not parse as one), or a frame of
    more than ``max_calls`` calls (counted before any is read)."""
    if type(frame) is not serve_pb2.AskFrame:
        raise EncodingError("ask: a message on Serve.Ask is not an AskFrame")
    calls = frame.calls
    if len(calls) > max_calls:
        raise EncodingError(f"ask: {len(calls)} calls in one message exceeds {max_calls}")
    return [(c.id, c.asks) for c in calls]


def ask_replies(data: bytes) -> Sequence[serve_pb2.AskReply]:
    """A message of replies read by the holder (the stream's response deserializer):
    each read further only if it answers a call in flight (:func:`ask_refusal`,
    :func:`reply_answers`)."""
    return _read_ask_replies(data).replies


def ask_refusal(reply: serve_pb2.AskReply) -> tuple[str, str] | None:
    """The status name and reason of a refused call; None for a call answered."""
    return (reply.code, reply.details) if reply.code else None


def reply_answers(reply: serve_pb2.AskReply) -> SizedAnswers:
    """A reply's answers, sized as the one-reply message that would carry them (the
    sizes of a message's replies add up to its length)."""
    answers: SizedAnswers = list.__new__(SizedAnswers)
    answers += [Answer(a.receipt, a.commitment, tuple(a.hops)) for a in reply.answers]
    answers.wire_size = _framed(reply.ByteSize())
    return answers


def demand_response(answers: Iterable[Answer]) -> serve_pb2.DemandResponse:
    # Each answer made in place (``add``): a message built apart and passed in
    # a list is copied into the response, half the cost of a batch's answers.
    msg = serve_pb2.DemandResponse()
    add = msg.answers.add
    for a in answers:
        add(receipt=a.receipt, commitment=a.commitment, hops=a.hops)
    return msg


class AnswerEncodings:
    """Answers as the encoding of a ``DemandResponse`` carrying them, each answer encoded
    once while it is kept (by identity: an origin answers the same ask with the same
    :class:`Answer`, :meth:`nodes.origin.Origin.answer_asks`).

    A response's encoding is its answers' encodings back to back, each the encoding
    of a response carrying that answer alone: protobuf reads concatenated messages as
    their merge, a repeated field's items appended in order, and ``answers`` is the
    response's only field. Bounded by the bytes kept (oldest dropped first)."""

    __slots__ = ("_kept",)

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self._kept: BoundedCache[int, tuple[Answer, bytes]] = BoundedCache(
            None, maxweight=max_bytes, weigh=_encoding_size
        )

    def response(self, answers: Sequence[Answer]) -> bytes:
        """The encoding of ``demand_response(answers)``."""
        kept = self._kept
        parts: list[bytes] = []
        for answer in answers:
            # by id: an entry keeps its answer alive, so no other answer has that id
            entry = kept.get(id(answer))
            if entry is None:
                entry = (answer, demand_response((answer,)).SerializeToString())
                kept.put(id(answer), entry)
            parts.append(entry[1])
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _encoding_size(entry: tuple[Answer, bytes]) -> int:
    return len(entry[1])


def answers_from_pb(msg: serve_pb2.DemandResponse) -> list[Answer]:
    return [answer_from_pb(a) for a in msg.answers]


class SizedAnswers(list[Answer]):
    """The answers of one ``Serve.Demand`` call and ``wire_size``, the bytes of the
    response message that carried them: what :func:`demand_response_size` computes
    for them, known without computing it when the message was read from the wire
    (:func:`answers_from_response`) or already sized by the sender."""

    __slots__ = ("wire_size",)

    def __init__(self, answers: Iterable[Answer], wire_size: int) -> None:
        super().__init__(answers)
        self.wire_size = wire_size


_read_demand_response = serve_pb2.DemandResponse.FromString


def answers_from_response(data: bytes) -> SizedAnswers:
    """A serialized ``DemandResponse`` as answers, sized by its length on the wire
    (the response deserializer of :func:`demand_unary`).

    Read on every demand: the answers are built in one comprehension (bytes fields
    are ``bytes`` already) and the size set on the list, without the per-answer
    call of :func:`answer_from_pb` or a Python ``__init__``."""
    answers: SizedAnswers = list.__new__(SizedAnswers)
    answers += [
        Answer(a.receipt, a.commitment, tuple(a.hops)) for a in _read_demand_response(data).answers
    ]
    answers.wire_size = len(data)
    return answers


def stream_request(demand: bytes, max_chunk_bytes: int = 0) -> serve_pb2.DemandStreamRequest:
    return serve_pb2.DemandStreamRequest(demand=demand, max_chunk_bytes=max_chunk_bytes)


def receipt_chunk(chunk: Answer, index: int, last: bool) -> serve_pb2.ReceiptChunk:
    return serve_pb2.ReceiptChunk(
        index=index,
        receipt=chunk.receipt,
        commitment=chunk.commitment,
        hops=list(chunk.hops),
        last=last,
    )


# --------------------------------------------------------------------------- Evidence


def challenge_request(
    *, commitment: bytes, obligation: bytes, demand: bytes, origin_address: str
) -> evidence_pb2.ChallengeRequest:
    return evidence_pb2.ChallengeRequest(
        commitment=commitment,
        obligation=obligation,
        demand=demand,
        origin_address=origin_address,
    )


def challenge_response(result: ChallengeResult) -> evidence_pb2.ChallengeResponse:
    return evidence_pb2.ChallengeResponse(
        witness_report=result.witness_report,
        answered=result.answered,
        witness_demand=result.witness_demand,
        receipt=result.receipt,
    )


def challenge_result_from_pb(msg: evidence_pb2.ChallengeResponse) -> ChallengeResult:
    return ChallengeResult(
        bytes(msg.witness_report),
        bool(msg.answered),
        bytes(msg.witness_demand),
        bytes(msg.receipt),
    )


def report_request(evidence: bytes) -> evidence_pb2.ReportRequest:
    return evidence_pb2.ReportRequest(evidence=evidence)


def reported_from_pb(msg: evidence_pb2.ReportResponse) -> tuple[str, str, str]:
    """``Evidence.Report``'s answer: (evidence kind, accused origin id, evidence digest)."""
    return str(msg.kind), str(msg.accused), str(msg.digest)


# --------------------------------------------------------------------------- Deliver


def delivered_value_bytes(delivery: Delivery) -> bytes:
    """A delivery as the bytes of its :func:`delivered_value` message (no sender)."""
    return bytes(delivered_value(delivery).SerializeToString())


def delivery_from_value_bytes(data: bytes) -> Delivery:
    """The delivery :func:`delivered_value_bytes` wrote (``EncodingError`` when the
    bytes are not such a message)."""
    try:
        msg = common_pb2.DeliveredValue.FromString(data)
    except DecodeError as exc:
        raise EncodingError(f"not a DeliveredValue ({exc})") from None
    return delivery_from_pb(msg)


def deliver_request(delivery: Delivery, *, signed: bool = False) -> deliver_pb2.DeliverRequest:
    request = deliver_pb2.DeliverRequest(sender=delivery.sender, signed_receipt=signed)
    _fill_delivered_value(request.value, delivery)
    return request


def deliver_request_from_bytes(data: bytes) -> deliver_pb2.DeliverRequest:
    """A DeliverRequest from its bytes (an A2A raw part, :mod:`nodes.a2a.extension`)."""
    try:
        return deliver_pb2.DeliverRequest.FromString(data)
    except DecodeError as exc:
        raise EncodingError(f"not a DeliverRequest ({exc})") from None


def deliver_response(ack: Acknowledgement) -> deliver_pb2.DeliverResponse:
    return deliver_pb2.DeliverResponse(delivery_receipt=ack.receipt, received_at=ack.received_at)


def acknowledgement_from_pb(msg: deliver_pb2.DeliverResponse) -> Acknowledgement:
    return Acknowledgement(int(msg.received_at), bytes(msg.delivery_receipt))


def forward_request(
    value_ref: str, peer: str, *, signed_receipt: bool = True
) -> deliver_pb2.ForwardRequest:
    return deliver_pb2.ForwardRequest(
        value_ref=value_ref, peer=peer, without_receipt=not signed_receipt
    )


def rehydrate_request(value_ref: str, witnesses: Sequence[str]) -> deliver_pb2.RehydrateRequest:
    return deliver_pb2.RehydrateRequest(value_ref=value_ref, witnesses=list(witnesses))


def _outcome_to_pb(o: OriginOutcome) -> deliver_pb2.OriginOutcome:
    return deliver_pb2.OriginOutcome(
        origin=o.origin,
        outcome=o.outcome.value,
        detail=o.detail,
        evidence=o.evidence,
        evidence_path=o.evidence_path,
        asks=o.asks,
        witnesses_asked=o.witnesses_asked,
        witnesses_unanswered=o.witnesses_unanswered,
        witness_confirmed=o.witness_confirmed,
        cleared=o.cleared,
    )


def _outcome_from_pb(o: deliver_pb2.OriginOutcome) -> OriginOutcome:
    return OriginOutcome(
        origin=o.origin,
        outcome=Outcome(o.outcome),
        detail=o.detail,
        evidence=o.evidence,
        evidence_path=o.evidence_path,
        asks=o.asks,
        witnesses_asked=o.witnesses_asked,
        witnesses_unanswered=o.witnesses_unanswered,
        witness_confirmed=o.witness_confirmed,
        cleared=o.cleared,
    )


def rehydrate_response(report: RehydrationReport) -> deliver_pb2.RehydrateResponse:
    return deliver_pb2.RehydrateResponse(
        value_ref=report.value_ref,
        outcomes=[_outcome_to_pb(o) for o in report.outcomes],
        parties=[_outcome_to_pb(o) for o in report.parties],
        recovered=report.recovered,
        hops=[
            deliver_pb2.VerifiedHop(origin=h.origin, leaf_index=h.leaf_index, hop=h.hop)
            for h in report.hops
        ],
        rpcs=report.rpcs,
        complete=report.complete,
    )


def rehydration_report_from_pb(msg: deliver_pb2.RehydrateResponse) -> RehydrationReport:
    """A holder node's Rehydrate reply as the report its client made.

    The reply carries the total of calls the holder made (``rpcs``: demands,
    re-asks, witness challenges), not the demands alone, so ``demand_rpcs``
    is that total too; verified hops do not name their commitment.
    """
    return RehydrationReport(
        value_ref=msg.value_ref,
        outcomes=tuple(_outcome_from_pb(o) for o in msg.outcomes),
        hops=tuple(
            VerifiedHop(origin=h.origin, commitment="", leaf_index=h.leaf_index, hop=h.hop)
            for h in msg.hops
        ),
        rpcs=msg.rpcs,
        demand_rpcs=msg.rpcs,
        parties=tuple(_outcome_from_pb(o) for o in msg.parties),
        recovered=msg.recovered,
    )


# --------------------------------------------------------------------------- HopLog, Node


def append_request(hops: Sequence[bytes], seqs: Sequence[int] = ()) -> hoplog_pb2.AppendRequest:
    return hoplog_pb2.AppendRequest(hops=list(hops), seqs=list(seqs))


def commit_fold_request(
    value_ref: str,
    seqs: Sequence[int],
    *,
    serve_for_ms: int = 0,
    deadline_ms: int = 0,
    value: bytes = b"",
) -> hoplog_pb2.CommitFoldRequest:
    return hoplog_pb2.CommitFoldRequest(
        value_ref=value_ref,
        seqs=list(seqs),
        serve_for_ms=serve_for_ms,
        deadline_ms=deadline_ms,
        value=value,
    )


def commit_fold_response(fold: CommittedFold) -> hoplog_pb2.CommitFoldResponse:
    return hoplog_pb2.CommitFoldResponse(
        commitment=fold.commitment,
        obligation=fold.obligation,
        provenance_pending=fold.provenance_pending,
    )


def committed_fold_from_pb(msg: hoplog_pb2.CommitFoldResponse) -> CommittedFold:
    return CommittedFold(bytes(msg.commitment), bytes(msg.obligation), msg.provenance_pending)


def commit_compaction_request(
    folds: Sequence[tuple[str, Sequence[int], bytes]],
    *,
    serve_for_ms: int = 0,
    deadline_ms: int = 0,
) -> hoplog_pb2.CommitCompactionRequest:
    return hoplog_pb2.CommitCompactionRequest(
        folds=[
            hoplog_pb2.CompactionFold(value_ref=ref, seqs=list(seqs), value=value)
            for ref, seqs, value in folds
        ],
        serve_for_ms=serve_for_ms,
        deadline_ms=deadline_ms,
    )


def compaction_folds_from_pb(
    msg: hoplog_pb2.CommitCompactionRequest,
) -> list[tuple[str, tuple[int, ...], bytes]]:
    return [(str(f.value_ref), tuple(int(s) for s in f.seqs), bytes(f.value)) for f in msg.folds]


def commit_compaction_response(
    compaction: CommittedCompaction,
) -> hoplog_pb2.CommitCompactionResponse:
    return hoplog_pb2.CommitCompactionResponse(
        head=compaction.head,
        fold_proofs=list(compaction.fold_proofs),
        provenance_pending=compaction.provenance_pending,
        custody=list(compaction.custody),
    )


def committed_compaction_from_pb(
    msg: hoplog_pb2.CommitCompactionResponse,
) -> CommittedCompaction:
    return CommittedCompaction(
        bytes(msg.head),
        tuple(bytes(p) for p in msg.fold_proofs),
        msg.provenance_pending,
        tuple(bytes(c) for c in msg.custody),
    )


def info_request() -> node_pb2.InfoRequest:
    return node_pb2.InfoRequest()


def info_response(info: NodeInfo) -> node_pb2.InfoResponse:
    return node_pb2.InfoResponse(
        name=info.name,
        node_id=info.node_id,
        public_key=info.public_key,
        epoch=info.epoch,
        fault=info.fault,
        listen=info.listen,
    )


def node_info_from_pb(msg: node_pb2.InfoResponse) -> NodeInfo:
    return NodeInfo(
        str(msg.name),
        str(msg.node_id),
        bytes(msg.public_key),
        str(msg.epoch),
        str(msg.fault),
        str(msg.listen),
    )


def stats_request() -> node_pb2.StatsRequest:
    return node_pb2.StatsRequest()


def stats_response(counters: dict[str, int]) -> node_pb2.StatsResponse:
    return node_pb2.StatsResponse(counters=counters)


def read_counters(channel: grpc.Channel, timeout: float) -> dict[str, int]:
    """``Node.Stats`` over a blocking channel (status tools); raises ``grpc.RpcError``."""
    reply = node_pb2_grpc.NodeStub(channel).Stats(stats_request(), timeout=timeout)
    return {str(k): int(v) for k, v in reply.counters.items()}


# --------------------------------------------------------------------------- stubs


def serve_stub(channel: grpc.aio.Channel) -> ServeStub:
    return serve_pb2_grpc.ServeStub(channel)


#: The full method name of ``Serve.Demand``.
DEMAND_METHOD = method_name("Serve", "Demand")


def demand_unary(channel: grpc.aio.Channel) -> DemandCall:
    """``Serve.Demand`` on ``channel`` as the stub's, except that it is called with the
    demands' bytes (written as the request by :func:`encode_demand_request`, no
    message built) and the reply is read straight into :class:`SizedAnswers`
    (:func:`answers_from_response`): no conversion after the call, and the
    response's size is its length. Registered with the channel, as the generated
    stub registers its methods (``_registered_method``): the call's path is
    interned once per channel, not made again for every demand."""
    return cast("DemandCall", _registered_demand(channel, encode_demand_request))


#: The full method name of ``Serve.Ask``.
ASK_METHOD = method_name("Serve", "Ask")


def ask_stream(channel: grpc.aio.Channel, method: str = ASK_METHOD) -> AskStreamCall:
    """``Serve.Ask`` on ``channel``, written with frames' bytes
    (:func:`encode_ask_frame`) and read into replies (:func:`ask_replies`).
    ``method``: the same stream on another method (a benchmark's bare server)."""
    registering: Any = channel  # grpc's stubs lack the generated code's _registered_method
    return cast(
        "AskStreamCall",
        registering.stream_stream(
            method,
            request_serializer=None,  # frames are written as their bytes
            response_deserializer=ask_replies,
            _registered_method=True,
        ),
    )


def _registered_demand(
    channel: grpc.aio.Channel, serializer: Callable[[Any], bytes], method: str = DEMAND_METHOD
) -> Any:
    registering: Any = channel  # grpc's stubs lack the generated code's _registered_method
    return registering.unary_unary(
        method,
        request_serializer=serializer,
        response_deserializer=answers_from_response,
        _registered_method=True,
    )


def evidence_stub(channel: grpc.aio.Channel) -> EvidenceStub:
    return evidence_pb2_grpc.EvidenceStub(channel)


def deliver_stub(channel: grpc.aio.Channel) -> DeliverStub:
    return deliver_pb2_grpc.DeliverStub(channel)


def hoplog_stub(channel: grpc.aio.Channel) -> HopLogStub:
    return hoplog_pb2_grpc.HopLogStub(channel)


def node_stub(channel: grpc.aio.Channel) -> NodeStub:
    return node_pb2_grpc.NodeStub(channel)


# --------------------------------------------------------------------------- sizes


def demand_request_size(demands: Sequence[bytes]) -> int:
    """Bytes of :func:`demand_request` on the wire."""
    return message_size(demand_request(demands))


def ask_frame_size(asks: bytes) -> int:
    """Bytes on the wire of one call asking ``asks`` (its one-call ``AskFrame``, the
    holder's first call id: later ids may take a byte or two more)."""
    return _framed(2 + _framed(len(asks)))  # id 1 (tag, value); asks (tag, length, bytes)


def ask_reply_size(answers: Sequence[Answer]) -> int:
    """Bytes on the wire of the reply carrying ``answers`` (its one-reply
    ``AskReplies``, with the holder's first call id, as :func:`ask_frame_size`)."""
    return _framed(message_size(demand_response(answers)) + 2)


def demand_response_size(answers: Iterable[Answer]) -> int:
    """Bytes of :func:`demand_response` on the wire: the length that carried
    :class:`SizedAnswers`, when they were read from (or sized for) a response."""
    if type(answers) is SizedAnswers:
        return answers.wire_size
    return message_size(demand_response(answers))


def stream_request_size(demand: bytes) -> int:
    return message_size(stream_request(demand))


def receipt_chunk_size(chunk: Answer, index: int, last: bool) -> int:
    return message_size(receipt_chunk(chunk, index, last))


def stream_answer_size(answer: Answer) -> int:
    """A reassembled streamed answer, counted as one chunk holding all of it."""
    return message_size(
        serve_pb2.ReceiptChunk(
            receipt=answer.receipt, commitment=answer.commitment, hops=list(answer.hops)
        )
    )


def challenge_request_size(
    *, commitment: bytes, obligation: bytes, demand: bytes, origin_address: str
) -> int:
    return message_size(
        challenge_request(
            commitment=commitment,
            obligation=obligation,
            demand=demand,
            origin_address=origin_address,
        )
    )


def challenge_response_size(result: ChallengeResult) -> int:
    return message_size(challenge_response(result))


def deliver_request_size(delivery: Delivery, *, signed: bool = False) -> int:
    """Bytes of :func:`deliver_request` on the wire: ``ByteSize()`` of the message
    built from the delivery (its statements are ``bytes`` fields copied verbatim,
    so building it packs nothing). The unsigned request's size is built once per
    delivery and kept on it, which the size check, the meter and the statement
    count share; a request asking for a signed receipt (a forward) is sized anew."""
    if signed:
        return message_size(deliver_request(delivery, signed=True))
    size = delivery._request_size
    if not size:
        size = message_size(deliver_request(delivery))
        object.__setattr__(delivery, "_request_size", size)
    return size


def delivery_statement_size(delivery: Delivery) -> int:
    """Protobuf bytes a delivery's statements add to its request: the size of its
    request minus that of the same request carrying the value alone (the
    statement fields with their tags and lengths, and what they add to the
    value's length prefix)."""
    bare = Delivery(delivery.value_ref, delivery.value, (), (), delivery.sender)
    return deliver_request_size(delivery) - deliver_request_size(bare)


def deliver_response_size(ack: Acknowledgement) -> int:
    """Bytes of :func:`deliver_response` on the wire."""
    return message_size(deliver_response(ack))


# --------------------------------------------------------------------------- custody


def custody_stub(channel: grpc.aio.Channel) -> CustodyStub:
    return custody_pb2_grpc.CustodyStub(channel)


def take_custody_request(
    head: bytes, fold_proofs: Sequence[bytes]
) -> custody_pb2.TakeCustodyRequest:
    return custody_pb2.TakeCustodyRequest(head=head, fold_proofs=list(fold_proofs))


def take_custody_response(statements: Sequence[bytes]) -> custody_pb2.TakeCustodyResponse:
    return custody_pb2.TakeCustodyResponse(statements=list(statements))


# --------------------------------------------------------------------------- attest


def attest_stub(channel: grpc.aio.Channel) -> AttestStub:
    return attest_pb2_grpc.AttestStub(channel)


def _proof_from_pb(data: bytes) -> RehydrationProof:
    try:
        return RehydrationProof.from_bytes(data)
    except (EncodingError, ValueError) as exc:
        raise EncodingError(f"attest: a rehydration proof is malformed: {exc}") from exc


def submit_attestation_request(attestation: bytes) -> attest_pb2.SubmitAttestationRequest:
    return attest_pb2.SubmitAttestationRequest(attestation=attestation)


def list_attestations_request(value_digest: str) -> attest_pb2.ListAttestationsRequest:
    return attest_pb2.ListAttestationsRequest(value_digest=value_digest)


def attest_request(ask: AttestationAsk) -> attest_pb2.RequestAttestationRequest:
    return attest_pb2.RequestAttestationRequest(
        value_ref=ask.value_ref,
        commitments=list(ask.commitments),
        proofs=[p.to_bytes() for p in ask.proofs],
        reconstruction=ask.reconstruction,
        issued_at_ms=ask.issued_at,
        lifetime_ms=ask.lifetime_ms,
        axes=[attest_pb2.AxisFloor(axis=a.value, floor=f) for a, f in ask.axes],
        discharge=list(ask.discharge),
    )


def attestation_ask_from_pb(msg: attest_pb2.RequestAttestationRequest) -> AttestationAsk:
    """Strict: unknown axes and malformed proofs are :class:`EncodingError`."""
    if len(msg.proofs) > MAX_PROOFS or len(msg.axes) > len(Axis):
        raise EncodingError(f"attest: at most {MAX_PROOFS} proofs and one floor per axis")
    axes: list[tuple[Axis, float]] = []
    for item in msg.axes:
        try:
            axes.append((Axis(item.axis), float(item.floor)))
        except ValueError:
            raise EncodingError(f"attest: unknown axis {item.axis!r:.40}") from None
    return AttestationAsk(
        msg.value_ref,
        tuple(msg.commitments),
        tuple(_proof_from_pb(bytes(p)) for p in msg.proofs),
        bool(msg.reconstruction),
        int(msg.issued_at_ms),
        int(msg.lifetime_ms),
        tuple(axes),
        tuple(msg.discharge),
    )


def attest_response(answer: AttestationAnswer) -> attest_pb2.RequestAttestationResponse:
    return attest_pb2.RequestAttestationResponse(
        attestations=[
            attest_pb2.IssuedAttestation(
                attestation=i.attestation,
                proofs=[p.to_bytes() for p in i.proofs],
                hop_commitment=i.hop_commitment,
                hop_obligation=i.hop_obligation,
            )
            for i in answer.issued
        ],
        refused=answer.refused,
    )


def attestation_answer_from_pb(msg: attest_pb2.RequestAttestationResponse) -> AttestationAnswer:
    return AttestationAnswer(
        tuple(
            IssuedAttestation(
                bytes(i.attestation),
                tuple(_proof_from_pb(bytes(p)) for p in i.proofs),
                bytes(i.hop_commitment),
                bytes(i.hop_obligation),
            )
            for i in msg.attestations
        ),
        msg.refused,
    )


def restore_request(
    ask: AttestationAsk, folds: Sequence[FoldBytes], attester: str
) -> attest_pb2.RestoreRequest:
    return attest_pb2.RestoreRequest(
        value_ref=ask.value_ref,
        folds=[
            attest_pb2.HeldFoldBytes(
                commitment=f.commitment, obligation=f.obligation, under_head=f.under_head
            )
            for f in folds
        ],
        attester=attester,
        issued_at_ms=ask.issued_at,
        lifetime_ms=ask.lifetime_ms,
    )


def restore_from_pb(
    msg: attest_pb2.RestoreRequest,
) -> tuple[AttestationAsk, tuple[FoldBytes, ...], str]:
    if len(msg.folds) > MAX_PROOFS:
        raise EncodingError(f"restore: at most {MAX_PROOFS} folds")
    folds = tuple(
        FoldBytes(bytes(f.commitment), bytes(f.obligation), bool(f.under_head)) for f in msg.folds
    )
    ask = AttestationAsk(msg.value_ref, (), (), True, int(msg.issued_at_ms), int(msg.lifetime_ms))
    return ask, folds, msg.attester


def restore_response(result: RestoreResult) -> attest_pb2.RestoreResponse:
    return attest_pb2.RestoreResponse(
        answer=attest_response(result.answer),
        rehydrated=result.rehydrated,
        detail=result.detail,
        demand_rpcs=result.demand_rpcs,
        hops=result.hops,
        request_bytes=result.request_bytes,
        response_bytes=result.response_bytes,
    )


def restore_result_from_pb(msg: attest_pb2.RestoreResponse) -> RestoreResult:
    return RestoreResult(
        attestation_answer_from_pb(msg.answer),
        bool(msg.rehydrated),
        msg.detail,
        int(msg.demand_rpcs),
        int(msg.hops),
        int(msg.request_bytes),
        int(msg.response_bytes),
    )


def attest_request_size(ask: AttestationAsk) -> int:
    return message_size(attest_request(ask))


def attest_response_size(answer: AttestationAnswer) -> int:
    return message_size(attest_response(answer))


# ------------------------------------------------------------------ witness


def witness_stub(channel: grpc.aio.Channel) -> WitnessStub:
    return witness_pb2_grpc.WitnessStub(channel)


def add_checkpoint_request(body: bytes) -> witness_pb2.AddCheckpointRequest:
    """The request carries tlog-witness's add-checkpoint body as it is, byte for byte."""
    return witness_pb2.AddCheckpointRequest(body=body)


def add_checkpoint_response(reply: WitnessReply) -> witness_pb2.AddCheckpointResponse:
    return witness_pb2.AddCheckpointResponse(
        cosignatures=reply.cosignatures, conflict=reply.conflict, size=reply.size
    )


def witness_reply_from_pb(pb: witness_pb2.AddCheckpointResponse) -> WitnessReply:
    return WitnessReply(bytes(pb.cosignatures), bool(pb.conflict), int(pb.size))
