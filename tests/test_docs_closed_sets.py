"""Docs that list the members of a closed set list exactly the enum's members.

Each table or flag synopsis below is read from the doc and compared with the
enum it documents, so adding a member (a fault mode, an evidence kind, an
arm, a gate mode) without documenting it — or documenting one that does not
exist — fails here, naming the file and the difference.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from contracts.evidence import EvidenceKind
from harness.arms import ArmName
from harness.attest.rows import Row
from harness.boundary.choices import BOUNDARY_FAULTS, TransportKind
from harness.gates import Mode
from nodes.faults import FaultMode

ROOT = Path(__file__).resolve().parents[1]


def _table_first_column(doc: str, *header: str) -> list[str]:
    """Backticked first cells of the Markdown table whose header row starts with ``header``."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and tuple(cells[: len(header)]) == header:
            out: list[str] = []
            for row in lines[i + 2 :]:
                if not row.lstrip().startswith("|"):
                    break
                match = re.fullmatch(r"`([^`]+)`", row.strip().strip("|").split("|")[0].strip())
                if match is None:
                    raise AssertionError(f"{doc}: row {row!r} does not start with a `member`")
                out.append(match.group(1))
            return out
    raise AssertionError(f"{doc}: no table with a first column {header!r}")


def _synopsis(doc: str, pattern: str) -> list[str]:
    """The ``a|b|c`` alternatives after ``pattern`` (e.g. ``--fault ``) in ``doc``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = re.search(re.escape(pattern) + r"([a-z_]+(?: ?\| ?[a-z_]+)+)", text)
    if found is None:
        raise AssertionError(f"{doc}: no {pattern!r}a|b|… synopsis")
    return [part.strip() for part in found.group(1).split("|")]


CASES: list[tuple[str, list[str], tuple[StrEnum, ...]]] = [
    ("docs/wire.md fault table", _table_first_column("docs/wire.md", "Mode"), tuple(FaultMode)),
    (
        "docs/contracts.md evidence kinds",
        _table_first_column("docs/contracts.md", "kind", "level"),
        tuple(EvidenceKind),
    ),
    ("docs/experiment.md arms", _table_first_column("docs/experiment.md", "arm"), tuple(ArmName)),
    (
        "docs/boundary.md --fault",
        _synopsis("docs/boundary.md", "[--fault "),
        BOUNDARY_FAULTS,
    ),
    (
        "docs/boundary.md --transport",
        _synopsis("docs/boundary.md", "[--transport "),
        tuple(TransportKind),
    ),
    ("docs/experiment.md modes", _synopsis("docs/experiment.md", "`mode` ("), tuple(Mode)),
    (
        "docs/attest.md rows",
        _table_first_column("docs/attest.md", "row", "the attester"),
        tuple(Row),
    ),
    (
        "README.md fault modes",
        ["none", *_synopsis("README.md", "`--fault ")],
        tuple(FaultMode),
    ),
]


@pytest.mark.parametrize(("where", "documented", "members"), CASES, ids=[c[0] for c in CASES])
def test_docs_list_every_member_of_the_closed_set_and_no_other(
    where: str, documented: list[str], members: tuple[StrEnum, ...]
) -> None:
    expected = [m.value for m in members]
    assert sorted(documented) == sorted(expected), (
        f"{where}: documents {documented}, the enum has {expected}"
    )
