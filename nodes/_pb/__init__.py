"""Generated protobuf/gRPC code for proto/provnet/v1 (see nodes._pb.generate)."""
