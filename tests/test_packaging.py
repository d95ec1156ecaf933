"""The distribution's top-level import names, and that nothing else in the environment owns them.

``provnet`` installs three top-level packages, ``contracts``, ``nodes`` and
``harness`` (``docs/packaging.md`` says why they are not nested under
``provnet.``). Those names are generic: another distribution installed into
the same environment could ship a package of the same name, and pip would
let its files overwrite ours (or ours theirs) without a word. These tests
fail when that has happened, naming the other distribution, and when an
import of one of the names resolves outside this project.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("contracts", "harness", "nodes")


def test_the_distribution_installs_exactly_the_three_top_level_packages() -> None:
    top_level = importlib.metadata.distribution("provnet").read_text("top_level.txt")
    assert top_level is not None, "provnet is installed without top_level.txt"
    assert sorted(top_level.split()) == list(TOP_LEVEL)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_no_other_installed_distribution_provides_the_same_top_level_name(name: str) -> None:
    owners = set(importlib.metadata.packages_distributions().get(name, []))
    assert owners == {"provnet"}, f"top-level package {name!r} is also provided by {owners}"


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_each_top_level_name_imports_from_this_project(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == ROOT / name
