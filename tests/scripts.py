"""A script of the project (``benchmarks/``, ``scripts/``) loaded as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> ModuleType:
    """The script at ``relative`` (to the repository root), run as module ``name``.

    Registered in ``sys.modules`` under ``name`` while it runs, as an import
    would be: a dataclass in it looks its module up there.
    """
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None, relative
    assert spec.loader is not None, relative
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
