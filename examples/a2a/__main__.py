"""``python -m examples.a2a [DIR] [--binding JSONRPC|GRPC|both]``: the three runs, printed.

Evidence files stay under ``DIR/<run>/b/evidence`` (default ``./a2a-demo``);
check one with ``provnet evidence verify FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from examples.a2a.scenario import Scenario, run_scenario
from nodes.config import LogFormat
from nodes.logging import configure_logging


async def _main(root: Path, bindings: list[str]) -> int:
    for binding in bindings:
        for scenario in Scenario:
            run = await run_scenario(root / f"{scenario}-{binding.lower()}", scenario, binding)
            print("\n".join(run.lines()), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.a2a", description=__doc__)
    parser.add_argument("dir", nargs="?", type=Path, default=Path("a2a-demo"))
    parser.add_argument("--binding", choices=["JSONRPC", "GRPC", "both"], default="both")
    args = parser.parse_args()
    configure_logging(LogFormat.CONSOLE, "warning", node="example")
    bindings = ["JSONRPC", "GRPC"] if args.binding == "both" else [args.binding]
    return asyncio.run(_main(args.dir, bindings))


if __name__ == "__main__":
    raise SystemExit(main())
