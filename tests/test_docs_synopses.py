"""Every synopsis and flag table in README.md and docs/*.md matches the ``provnet`` parsers.

A *synopsis* is a code-block line ``provnet <command> …`` (with its indented
continuation lines) or a heading `` `provnet <command> …` `` that shows at
least one optional flag (``[--…``); a *flag table* is a Markdown table whose
first header cell is ``flag``, documenting the nearest command above it whose
parser has every flag in it. Per page and command:

- every flag a synopsis or table names exists in that command's parser;
- the page's synopses and tables together name every flag the parser has
  (a synopsis is complete, not a sample);
- a table with a ``variable`` column is the full table: exactly the parser's
  flags, and each variable is the one the flag's help names.

Commands shown only as examples (no ``[--``) are not synopses, and a
synopsis that ends in ``…`` is partial (what it names must exist; the rest
is documented elsewhere). Extends
``tests/test_docs_closed_sets.py``, which checks the closed sets of values.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_CODE = re.compile(r"^( {4,})(?:\.venv/bin/)?provnet (.*)$")
_HEADING = re.compile(r"^#+ .*?`provnet ([^`]*)`")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command(words: str) -> tuple[str, argparse.ArgumentParser] | None:
    """The longest subcommand path at the start of ``words`` and its parser."""
    parser = build_parser()
    path: list[str] = []
    for word in words.split():
        sub = _subparsers(parser).get(word)
        if sub is None:
            break
        parser, path = sub, [*path, word]
    return (" ".join(path), parser) if path else None


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }


def _help(parser: argparse.ArgumentParser, flag: str) -> str:
    for action in parser._actions:
        if flag in action.option_strings:
            return action.help or ""
    return ""


@dataclass
class Page:
    """What one page documents: flags per command, and its full tables."""

    name: str
    documented: dict[str, set[str]] = field(default_factory=dict)
    where: dict[str, list[int]] = field(default_factory=dict)
    full_tables: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    #: commands with at least one synopsis or table that claims to be complete
    complete: set[str] = field(default_factory=set)

    def note(self, command: str, line: int, flags: set[str], *, partial: bool = False) -> None:
        self.documented.setdefault(command, set()).update(flags)
        self.where.setdefault(command, []).append(line)
        if not partial:
            self.complete.add(command)


def _read(name: str) -> Page:
    page = Page(name)
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    mentioned: list[tuple[int, str]] = []  # commands named so far, for the tables
    i = 0
    while i < len(lines):
        line = lines[i]
        code, heading = _CODE.match(line), _HEADING.match(line)
        if code or heading:
            rest = code.group(2) if code else heading.group(1)  # type: ignore[union-attr]
            found = _command(rest)
            text = rest
            if code:
                indent = len(code.group(1))
                j = i + 1
                while j < len(lines) and lines[j].startswith(" " * (indent + 1)):
                    if _CODE.match(lines[j]):
                        break
                    text += " " + lines[j].strip()
                    j += 1
            if found is not None:
                command, _ = found
                mentioned.append((i, command))
                if "[--" in text:
                    # "… " at the end (before any comment): a partial synopsis, the rest elsewhere
                    partial = text.split(" #")[0].rstrip().endswith("…")
                    page.note(command, i + 1, set(_FLAG.findall(text)), partial=partial)
        elif line.startswith("|") and line.strip("| ").lower().startswith("flag "):
            header = [c.strip().lower() for c in line.strip().strip("|").split("|")]
            rows: dict[str, str] = {}
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                variable = cells[1].strip("`") if "variable" in header[1:2] else ""
                for flag in _FLAG.findall(cells[0]):
                    rows[flag] = variable
                j += 1
            owner = next(
                (
                    c
                    for _, c in reversed(mentioned)
                    if set(rows) <= _flags(_command(c)[1])  # type: ignore[index]
                ),
                None,
            )
            if owner is None:
                page.errors.append(
                    f"{name}:{i + 1}: flag table {sorted(rows)} matches no command above it"
                )
            else:
                page.note(owner, i + 1, set(rows))
                if "variable" in header[1:2]:
                    page.full_tables.append((i + 1, owner, rows))
            i = j
            continue
        i += 1
    return page


PAGES_READ = {name: _read(name) for name in PAGES}
DOCUMENTED = [(name, cmd) for name, page in PAGES_READ.items() for cmd in sorted(page.documented)]


def test_every_page_with_a_synopsis_or_flag_table_is_checked() -> None:
    # the pages this test reads: a page whose synopses it stopped seeing fails here
    with_synopsis = {name for name, _ in DOCUMENTED}
    assert {"README.md", "docs/attest.md", "docs/boundary.md", "docs/cluster.md"} <= with_synopsis
    assert {"docs/experiment.md", "docs/report.md"} <= with_synopsis
    for page in PAGES_READ.values():
        assert not page.errors, page.errors


@pytest.mark.parametrize(("page", "command"), DOCUMENTED, ids=[f"{p}:{c}" for p, c in DOCUMENTED])
def test_synopses_and_tables_name_exactly_the_parsers_flags(page: str, command: str) -> None:
    read = PAGES_READ[page]
    found = _command(command)
    assert found is not None
    flags = _flags(found[1])
    documented = read.documented[command]
    lines = ", ".join(map(str, read.where[command]))
    unknown = sorted(documented - flags)
    missing = sorted(flags - documented)
    assert not unknown, f"{page} (lines {lines}): provnet {command} has no {unknown}"
    if command not in read.complete:
        return  # only partial synopses ("… "): what they name exists, the rest is elsewhere
    assert not missing, f"{page} (lines {lines}): provnet {command}'s synopsis lacks {missing}"


FULL_TABLES = [(p.name, t) for p in PAGES_READ.values() for t in p.full_tables]


@pytest.mark.parametrize(
    ("page", "table"), FULL_TABLES, ids=[f"{p}:{t[0]}:{t[1]}" for p, t in FULL_TABLES]
)
def test_full_flag_tables_are_every_flag_with_its_variable(
    page: str, table: tuple[int, str, dict[str, str]]
) -> None:
    line, command, rows = table
    found = _command(command)
    assert found is not None
    parser = found[1]
    # flags that only select a subcommand's output, not settings, need no row
    assert set(rows) == _flags(parser), (
        f"{page}:{line}: the table of provnet {command} lacks {sorted(_flags(parser) - set(rows))}"
        f" and has {sorted(set(rows) - _flags(parser))} extra"
    )
    for flag, variable in rows.items():
        if variable:
            assert f"${variable}" in _help(parser, flag), (
                f"{page}:{line}: {flag} is documented with {variable}, its help says"
                f" {_help(parser, flag)!r}"
            )
