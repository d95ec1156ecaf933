"""Cross-references in the code's docstrings and comments name things that exist.

A Sphinx-style reference to one of the project's packages (``:mod:``,
``:func:``, ``:class:``, ``:meth:``, ``:data:``, ``:attr:``, ``:exc:`` with a
dotted name under ``contracts``, ``nodes`` or ``harness``) must resolve: the
longest importable module prefix, then attributes. A module split or a method
moved to another role otherwise leaves its old name behind in the text that
explains it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "nodes", "harness")
_REF = re.compile(r":(?:mod|func|class|meth|data|attr|exc):`~?([\w.]+)`")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def _references() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_pb" in path.parts:
                continue  # generated code
            for name in _REF.findall(path.read_text(encoding="utf-8")):
                if "." in name and name.split(".", 1)[0] in PACKAGES:
                    found.append((str(path.relative_to(ROOT)), name))
    return found


def test_references_to_the_project_resolve() -> None:
    references = _references()
    assert len(references) > 100  # the scan sees the docstrings at all
    stale = sorted({(path, name) for path, name in references if not _resolves(name)})
    assert not stale, "references to names that do not exist (moved or renamed?):\n" + "\n".join(
        f"  {path}: {name}" for path, name in stale
    )


def test_a_stale_reference_is_caught() -> None:
    assert _resolves("nodes.holding.Holding.send")
    assert not _resolves("nodes.services.NodeCore.send")
    assert not _resolves("nodes.no_such_module.thing")
