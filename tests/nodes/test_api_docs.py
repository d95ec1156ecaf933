"""The public surface is one list: ``nodes.api.__all__``, and docs/api.md names it whole.

Every public name has its entry on the page, and the error tree drawn on the
page and in the module docstring is the class tree of the errors themselves,
so adding, renaming or re-parenting a public name fails here until both say so.
"""

from __future__ import annotations

import re
from pathlib import Path

import contracts
import harness
import nodes
from nodes import api
from nodes.faults import FaultMode

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
_TREE_LINE = re.compile(r"^\s*(?:[│ ]*[├└]── )?([A-Z][A-Za-z]+)\s{2,}")


def _errors() -> dict[str, str]:
    """Each public error class and its parent's name (the root's parent: Exception)."""
    return {
        name: obj.__mro__[1].__name__
        for name in api.__all__
        if isinstance(obj := getattr(api, name), type) and issubclass(obj, Exception)
    }


def _tree(text: str) -> dict[str, str]:
    """The error tree as drawn: each class and the class one indent level up."""
    root = re.search(r"^[ \t]*ProvnetError[ \t]{2,}.*$", text, re.MULTILINE)
    assert root is not None, "no error tree drawn"
    lines = text[root.start() :].split("\n\n", 1)[0].splitlines()
    parents: dict[str, str] = {"ProvnetError": "Exception"}
    stack: list[tuple[int, str]] = [(-1, "ProvnetError")]
    for line in lines[1:]:
        m = _TREE_LINE.match(line + "  ")
        if m is None:
            continue  # a continuation line of a description
        depth = line.index(m.group(1))
        while stack[-1][0] >= depth:
            stack.pop()
        parents[m.group(1)] = stack[-1][1]
        stack.append((depth, m.group(1)))
    return parents


def test_every_public_name_has_its_entry_on_the_page() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [n for n in api.__all__ if not re.search(rf"`(await )?{n}\b", text)]
    assert missing == []


def test_the_page_draws_the_error_tree_the_classes_form() -> None:
    assert _tree(DOC.read_text(encoding="utf-8")) == _errors()


def test_the_module_docstring_draws_the_same_tree() -> None:
    assert _tree(api.__doc__ or "") == _errors()


def test_every_package_says_it_is_internal_and_names_the_api() -> None:
    for package in (contracts, nodes, harness):
        doc = package.__doc__ or ""
        assert "nodes.api" in doc, package.__name__
        assert "internal" in doc.lower(), package.__name__


def test_the_page_lists_every_fault_mode() -> None:
    text = DOC.read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if "misbehave as an origin" in x)
    block = text.split(line, 1)[1].split("(`FaultMode`)", 1)[0]
    listed = re.findall(r"`([a-z]+)`", line + block)
    assert sorted(listed) == sorted(m.value for m in FaultMode if m is not FaultMode.NONE)
