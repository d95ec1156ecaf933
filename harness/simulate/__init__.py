"""``provnet simulate``: many agents on the real node core, on virtual time.

The modules:

- :mod:`~harness.simulate.clock` — the event loop on virtual time;
- :mod:`~harness.simulate.engine` — slices of the boundary experiment played
  on that loop, the nodes reading the virtual clock;
- :mod:`~harness.simulate.network` — the modelled network: WAN round trips,
  loss, churn;
- :mod:`~harness.simulate.workload` — the YAML workload and its checks;
- :mod:`~harness.simulate.report` — the CSV and ``summary.md`` of a run;
- :mod:`~harness.simulate.cli` — ``provnet simulate``.

See ``docs/simulate.md``. This ``__init__`` imports nothing (the CLI
registers its parser without pulling in the node core).
"""

__all__: list[str] = []
