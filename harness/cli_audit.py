"""``provnet audit SPEC.yaml [--md FILE] [--strict]`` — the starvation checker.

See :mod:`harness.audit` for the spec format and the rules. Exit status: 0 no
CRITICAL gate, 1 at least one CRITICAL gate (``--strict``: any starved gate),
2 bad input (the message names file, line, key and what was expected).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "audit",
        help="static compaction/gate starvation check of a YAML spec",
        description=(
            "Read which fields a compaction preserves and which fields each gate reads; "
            "print which gates are starved and whether they fail dangerous (false-proceed) "
            "or expensive (false-stop). Exit 0 when no gate is CRITICAL (irreversible "
            "false-proceed), 1 when one is, 2 for a bad spec."
        ),
    )
    parser.add_argument("spec", type=Path, metavar="SPEC.yaml", help="audit spec (YAML)")
    parser.add_argument(
        "--md", type=Path, metavar="FILE", default=None, help="also write the table as Markdown"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any gate is starved, not only on CRITICAL gates",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from harness.audit import AuditSpecError, audit, load_spec, render_markdown, render_table

    try:
        spec = load_spec(args.spec)
    except AuditSpecError as exc:
        print(f"provnet: error: {exc}", file=sys.stderr)
        return 2
    result = audit(spec)
    sys.stdout.write(render_table(result))
    if args.md is not None:
        md_path: Path = args.md
        try:
            md_path.parent.mkdir(parents=True, exist_ok=True)
            md_path.write_text(render_markdown(result), encoding="utf-8")
        except OSError as exc:
            print(
                f"provnet: error: {md_path}: cannot write Markdown ({exc.strerror})",
                file=sys.stderr,
            )
            return 2
        print(f"wrote {md_path}")
    return result.exit_code(strict=args.strict)
