"""provnet nodes: gRPC agent nodes with durable hop logs.

:mod:`nodes.api` is the supported library interface (docs/api.md) and
:mod:`nodes.a2a` the A2A extension (docs/a2a.md); every other module here is
internal and may change.
"""

__all__: list[str] = []
