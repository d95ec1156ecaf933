"""``Serve.Demand``'s request is written from the demands' bytes, not built as a message.

The holder's transport sends :func:`nodes.wire.encode_demand_request`: the
same bytes protobuf writes for ``DemandRequest(demands=…)`` (so an origin
reads exactly the demands sent), for every length class of a varint.
"""

from __future__ import annotations

import os

import pytest

from nodes import wire
from nodes._pb.provnet.v1 import serve_pb2

# Lengths at every varint boundary (1, 2, 3 and 4 bytes), empty included.
LENGTHS = [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_151, 2_097_152]


@pytest.mark.parametrize("n", LENGTHS)
def test_one_demand_is_written_as_protobuf_writes_it(n: int) -> None:
    demand = os.urandom(n)
    data = wire.encode_demand_request([demand])
    assert data == wire.demand_request([demand]).SerializeToString()
    assert list(serve_pb2.DemandRequest.FromString(data).demands) == [demand]


def test_many_demands_keep_their_order_and_bytes() -> None:
    demands = [os.urandom(n) for n in (5, 0, 200, 128, 127, 40_000)]
    data = wire.encode_demand_request(demands)
    assert data == wire.demand_request(demands).SerializeToString()
    assert list(serve_pb2.DemandRequest.FromString(data).demands) == demands
    assert len(data) == wire.demand_request_size(demands)


def test_no_demands_is_the_empty_message() -> None:
    assert wire.encode_demand_request([]) == b""
    assert serve_pb2.DemandRequest().SerializeToString() == b""
