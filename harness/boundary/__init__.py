"""The experiment played across the boundary: origin and holder are different nodes.

What one run does, and the files it writes, are in :mod:`harness.boundary.runner`
(entry points) and ``docs/boundary.md``. The modules:

- :mod:`~harness.boundary.runner` — :func:`run_boundary`, the slice's runs, fingerprints;
- :mod:`~harness.boundary.play` — one run: origin commits, deliveries, the holder's gates;
- :mod:`~harness.boundary.records` — settings and result records;
- :mod:`~harness.boundary.choices` — the closed sets (playable faults, transports, roles);
- :mod:`~harness.boundary.topology` — starting and stopping the nodes;
- :mod:`~harness.boundary.wire` — value encoding and metering;
- :mod:`~harness.boundary.report` — the result files;
- :mod:`~harness.boundary.cli` — ``provnet experiment boundary``.

This ``__init__`` imports nothing, so importing :mod:`harness.boundary.cli`
(argparse only) does not pull in grpc or aiosqlite.
"""

__all__: list[str] = []
