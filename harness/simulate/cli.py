"""``provnet simulate``: argparse only at import (the engine is imported when it runs).

``provnet simulate [WORKLOAD.yaml] --out DIR [--agents N ...] [--seeds K] [--workers W]``
plays the workload (:mod:`harness.simulate.workload`; defaults without a
file) and writes the result files (:mod:`harness.simulate.report`) into
``DIR``. Bad input is one ``provnet: error:`` line naming the key and what
was expected (exit 2); Ctrl-C stops the run, closes its nodes and writes
nothing (exit 130, as every ``provnet`` command).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from harness.cli_common import add_progress_flags, positive_int, prepare_out
from harness.cli_errors import RunFailed, UsageError

__all__ = ["register"]


def _agents(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 3, got {text!r}") from None
    if value < 3:
        raise argparse.ArgumentTypeError(f"expected an integer >= 3, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="many agents on the real node core, on virtual time (docs/simulate.md)",
        description="Play a workload of delegations on the real node core over the"
        " in-memory transport, under a virtual clock; write cells.csv, summary.csv,"
        " growth.csv and summary.md.",
    )
    p.add_argument("workload", nargs="?", type=Path, help="workload YAML (default: built-in)")
    p.add_argument("--out", type=Path, required=True, help="results directory")
    p.add_argument(
        "--agents", type=_agents, nargs="+", help="N (several: a growth sweep); overrides the file"
    )
    p.add_argument("--seeds", type=positive_int, help="seeds 0..K-1; overrides the file")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes to share the cells over (results identical for any count)",
    )
    add_progress_flags(p)
    p.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    from harness.config import ExperimentConfig
    from harness.simulate.workload import Workload, WorkloadError, load_workload

    try:
        w = load_workload(args.workload) if args.workload is not None else Workload()
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None
    if args.agents:
        w = replace(w, agents=tuple(args.agents))
    if args.seeds is not None:
        w = replace(w, seeds=tuple(range(args.seeds)))
    prepare_out(args.out)

    from harness.simulate.report import write_outputs
    from harness.simulate.run import SimulationFailed, run_simulation

    try:
        result = run_simulation(ExperimentConfig(), w, progress=args.progress, workers=args.workers)
    except SimulationFailed as exc:
        raise RunFailed(str(exc)) from None
    written = write_outputs(result, args.out)
    honest = sum(r.proofs_honest for r in result.rows)
    print(
        f"simulated {len(result.rows)} cells, {sum(r.decisions for r in result.rows)} decisions;"
        f" proofs against faithful nodes: {honest}; wrote {', '.join(p.name for p in written)}",
        file=sys.stdout,
    )
    return 0
