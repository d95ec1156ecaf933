"""The closed sets a boundary run is configured with, defined once.

- :data:`BOUNDARY_FAULTS` — the :class:`nodes.faults.FaultMode` members the
  first origin can run here (every mode but ``crash``, which would end the
  runner's own process);
- :class:`TransportKind` — how the nodes reach each other;
- :class:`Role` — what a node does in the topology.

``provnet experiment boundary`` takes its ``--fault`` and ``--transport``
choices from these, and so do the benchmark and the docs check, so a member
added here is offered everywhere at once. This module imports no grpc and no
aiosqlite (the CLI imports it to build its parser).
"""

from __future__ import annotations

from enum import StrEnum

from nodes.faults import FaultMode

__all__ = ["BOUNDARY_FAULTS", "Role", "TransportKind"]

#: Fault modes a boundary run can give its first origin.
BOUNDARY_FAULTS: tuple[FaultMode, ...] = tuple(m for m in FaultMode if m is not FaultMode.CRASH)


class TransportKind(StrEnum):
    MEMORY = "memory"
    GRPC = "grpc"
    #: nodes this process did not start (``--cluster``, ``--nodes``), over gRPC
    REMOTE = "remote"


class Role(StrEnum):
    ORIGIN = "origin"
    RELAY = "relay"
    HOLDER = "holder"
    WITNESS = "witness"
    #: takes custody of the origins' folds at each commit (``--custody-k``)
    CUSTODIAN = "custodian"
