"""A demand's response read into answers: every field of every answer, and its size."""

from __future__ import annotations

from nodes import wire
from nodes._pb.provnet.v1 import serve_pb2
from nodes.messages import Answer


def test_a_response_is_read_answer_by_answer_with_its_length() -> None:
    answers = [
        Answer(b"receipt-1", b"commitment-1", (b"hop-a", b"hop-b")),
        Answer(b"", b"", (b"hop-c",)),
        Answer(b"receipt-3", b"", ()),
    ]
    data = wire.demand_response(answers).SerializeToString()
    read = wire.answers_from_response(data)
    assert type(read) is wire.SizedAnswers
    assert list(read) == answers
    assert all(type(h) is bytes for a in read for h in a.hops)
    assert read.wire_size == len(data) == wire.demand_response_size(read)
    assert wire.demand_response_size(answers) == len(data)
    assert wire.answers_from_response(serve_pb2.DemandResponse().SerializeToString()) == []


def test_answers_encoded_once_are_the_response_protobuf_encodes() -> None:
    encodings = wire.AnswerEncodings()
    answers = [
        Answer(b"", b"", (b"hop-a", b"hop-b")),
        Answer(b"", b"", ()),
        Answer(b"receipt-3", b"commitment-3", (b"hop-c",)),
    ]
    for batch in ([answers[0]], answers, answers[::-1], answers):  # kept, then reused
        data = encodings.response(batch)
        assert data == wire.demand_response(batch).SerializeToString()
        assert list(wire.answers_from_response(data)) == batch
