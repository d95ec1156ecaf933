"""The custody experiment: does a value's serving duty outlive the parties that owe it?

An origin commits a fold and hands it to a holder; with ``k`` > 0 it also has
``k`` custodians take custody of the fold's hops. Then, in one epoch, every
party (the origin and each custodian) departs for good with probability
``p`` — its node closed or its process stopped AND its data directory
removed — independently, or together with every node of its operator. The
holder then needs the folded hops for a lineage gate: it demands them and
decides exactly if any party serves them; otherwise its gates fall back.

The modules:

- :mod:`~harness.custody.stats` — the closed forms, Wilson intervals, trial counts;
- :mod:`~harness.custody.settings` — settings, their validation, result records;
- :mod:`~harness.custody.trials` — the trials on in-process nodes (memory or gRPC);
- :mod:`~harness.custody.report` — the CSV files, ``summary.md`` and figures;
- :mod:`~harness.custody.cli` — ``provnet experiment custody``;
- :mod:`~harness.custody.split_view` — the split-view rows: an origin that shows
  two holders two heads against a witness quorum (witness-cosigned heads);
- :mod:`~harness.custody.death_spiral` — the death-spiral row: reconstruction
  restored from a custodian after the origin is gone.

This ``__init__`` imports nothing, so registering the CLI (argparse at import)
does not pull in grpc or aiosqlite.
"""

__all__: list[str] = []
