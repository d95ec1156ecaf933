"""``Witness.AddCheckpoint``'s answer, and its conversion to and from the wire message."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from nodes._pb.provnet.v1 import witness_pb2, witness_pb2_grpc

__all__ = ["WitnessReply", "add_checkpoint_request", "witness_stub"]


def witness_stub(channel: grpc.aio.Channel) -> witness_pb2_grpc.WitnessStub:
    return witness_pb2_grpc.WitnessStub(channel)


def add_checkpoint_request(body: bytes) -> witness_pb2.AddCheckpointRequest:
    """The request carries tlog-witness's add-checkpoint body as it is, byte for byte."""
    return witness_pb2.AddCheckpointRequest(body=body)


@dataclass(frozen=True, slots=True)
class WitnessReply:
    """An ``AddCheckpoint`` answer: cosignature lines, or a conflict with the witness's size."""

    cosignatures: bytes = b""
    conflict: bool = False
    size: int = 0

    def to_pb(self) -> witness_pb2.AddCheckpointResponse:
        return witness_pb2.AddCheckpointResponse(
            cosignatures=self.cosignatures, conflict=self.conflict, size=self.size
        )

    @classmethod
    def from_pb(cls, pb: witness_pb2.AddCheckpointResponse) -> WitnessReply:
        return cls(bytes(pb.cosignatures), bool(pb.conflict), int(pb.size))
