"""provnet nodes: gRPC agent nodes with durable hop logs.

:mod:`nodes.api` is the supported library interface (docs/api.md); every
other module here is internal and may change.
"""

__all__: list[str] = []
