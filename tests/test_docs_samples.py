"""Sample output that the docs call deterministic is what the command prints today.

Each sample is read from its page, the command is played again, and the two
are compared line by line with only the figures the page says vary (wall
time, latencies, CPU time) masked, so a change to what a command prints or
writes fails here until the page shows it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
BOUNDARY = ROOT / "docs" / "boundary.md"
_SECTION = "## Reading it: the default slice as it prints today"
_T = "<varies>"
#: per-arm table cells that vary with the machine: in-process p50, p50 / p99, crypto ms/dec
_VARYING_CELLS = (4, 9, 10)


def _mask(line: str) -> str:
    line = re.sub(r"(\d+ runs? in )\d+\.\d+( s)", rf"\g<1>{_T}\g<2>", line)
    if line.startswith("| rehydrating decision p50 / p99 |"):
        return re.sub(r"\d+\.\d+", _T, line)
    if line.startswith("Origin commits:"):
        return re.sub(r"[\d.]+( ms of signature)", rf"{_T}\g<1>", line)
    cells = line.split("|")
    if (
        line.startswith("| ")
        and len(cells) == 14
        and cells[2].strip()
        in (
            "blind",
            "degrade",
            "rehydrate",
        )
    ):
        for i in _VARYING_CELLS:
            if cells[i + 1].strip() != "–":
                cells[i + 1] = f" {_T} "
        return "|".join(cells)
    return line


def _doc_sample() -> tuple[list[str], list[str], str]:
    """(terminal lines after the command, per-arm table lines, origin commits line)."""
    text = BOUNDARY.read_text(encoding="utf-8")
    assert _SECTION in text, f"{BOUNDARY}: section {_SECTION!r} is gone"
    section = text.split(_SECTION, 1)[1].split("\n## ", 1)[0].splitlines()
    start = section.index("    $ provnet experiment boundary")
    terminal: list[str] = []
    for line in section[start + 1 :]:
        if not line.startswith("    "):
            break
        terminal.append(line[4:])
    table = [line for line in section if line.startswith("| arm |") or line.startswith("|---")]
    rows = [
        line for line in section if re.match(r"\| [a-z_]+ \| (blind|degrade|rehydrate) \|", line)
    ]
    origin = next(line for line in section if line.startswith("Origin commits:"))
    return terminal, [*table, *rows], origin


def test_boundary_default_slice_sample_is_what_the_command_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal, table, origin = _doc_sample()
    monkeypatch.chdir(tmp_path)  # `--out` as the sample shows it: results-boundary/
    # The command as the page shows it, its default deadline included: the deadline is
    # a signed serving term, so another one changes the statement bytes the page pins.
    argv = ["experiment", "boundary", "--config", str(ROOT / "experiments" / "config.yaml")]
    assert main([*argv, "--no-progress"]) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    assert [_mask(x) for x in printed] == [_mask(x) for x in terminal]
    written = (tmp_path / "results-boundary" / "boundary.md").read_text(encoding="utf-8")
    lines = written.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("| arm |")))
    end = next(i for i in range(head, len(lines)) if not lines[i].startswith("|"))
    assert [_mask(x) for x in lines[head:end]] == [_mask(x) for x in table]
    fresh_origin = next(x for x in lines if x.startswith("Origin commits:"))
    assert _mask(fresh_origin) == _mask(origin)


def test_mask_hides_only_what_varies() -> None:
    row = (
        "| structural_min | rehydrate | 0.00 → 0.00 | 587.8 | 0.059 | 1.30 |"
        " 2,433 = 1,335 + 140 + 958 | 9,858 | 36 | 0.958 / 59.531 | 0.600 | 0 |"
    )
    masked = _mask(row)
    assert "587.8" in masked
    assert "2,433 = 1,335 + 140 + 958" in masked
    assert "0.059" not in masked
    assert "59.531" not in masked
    assert "0.600" not in masked
    assert _mask("boundary: 2 runs in 8.91 s (memory") == f"boundary: 2 runs in {_T} s (memory"
