"""provnet harness: the four-arm, nine-gate compaction experiment (Part 5).

In-process mode imports neither grpc nor aiosqlite; only the boundary runner
talks to :mod:`nodes`, through its client.
"""

__all__: list[str] = []
