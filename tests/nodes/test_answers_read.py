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
