"""The experiment played across the boundary: origin and holder are different nodes.

What one run does, and the files it writes, are in :mod:`harness.boundary.runner`
(entry points) and ``docs/boundary.md``. The modules:

- :mod:`~harness.boundary.runner` — :func:`run_boundary`, the slice's runs, fingerprints;
- :mod:`~harness.boundary.play` — one run: origin commits, deliveries, the holder's gates;
- :mod:`~harness.boundary.records` — settings and result records;
- :mod:`~harness.boundary.choices` — the closed sets (playable faults, transports, roles);
- :mod:`~harness.boundary.topology` — starting and stopping the in-process nodes;
- :mod:`~harness.boundary.remote` — the slice on running nodes (``--cluster``, ``--nodes``);
- :mod:`~harness.boundary.links` — a link proxy per directed link between two nodes;
- :mod:`~harness.boundary.rtt` — the ``--rtt-ms`` sweep over link round-trip times;
- :mod:`~harness.boundary.wire` — value encoding and metering;
- :mod:`~harness.boundary.report` — the result files;
- :mod:`~harness.boundary.cli` — ``provnet experiment boundary``.

This ``__init__`` imports nothing, so registering :mod:`harness.boundary.cli`
(argparse at import; the runner is imported when the command runs) does not
pull in grpc or aiosqlite (tested in ``tests/harness/test_boundary.py``).
"""

__all__: list[str] = []
