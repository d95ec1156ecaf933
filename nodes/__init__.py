"""provnet nodes: gRPC agent nodes with durable hop logs."""

__all__: list[str] = []
