"""provnet harness: the experiments, their command line and their result files.

The four-arm, nine-gate compaction experiment (Part 5: :mod:`~harness.runner`,
:mod:`~harness.replay`, :mod:`~harness.gates`, sweeps, traces, the audit, prose
and LLM arms) runs in process and imports neither grpc nor aiosqlite. Two
packages play it on provnet nodes and are the only parts that import
:mod:`nodes`: :mod:`harness.boundary` (``provnet experiment boundary``, origin and
holder as different nodes) and :mod:`harness.attest` (``provnet experiment
attest``, Part 6). :mod:`harness.cli` is the ``provnet`` front: it registers the
subcommands of every package (harness, contracts, nodes) by module name.

Internal: the supported interfaces are the ``provnet`` command line and
:mod:`nodes.api` (docs/api.md); this package may change.
"""

__all__: list[str] = []
