"""No import cycles inside ``nodes/`` or ``harness/``, nor across the packages (static check).

Every ``.py`` file of the package is parsed with :mod:`ast` and every
``import`` / ``from … import`` statement anywhere in it becomes an edge of
the module graph: module level, inside functions (the lazy imports that keep
the CLI light), under ``if TYPE_CHECKING:`` and relative imports alike. A
deferred import still ties the two modules together — it merely hides the
cycle until the function runs — so none is ignored. Importing
``a.b.c`` also runs ``a/b/__init__.py``, so each import adds an edge to every
enclosing package of the target inside the checked package too.

Loads by name count as imports: ``importlib.import_module("a.b")`` and
``__import__("a.b")`` with a literal name are edges to ``a.b``; a module
that loads a computed name (a loop over a table of module names, as the
``provnet`` front does) gets an edge to every module its string literals
name, since any of them may be the one it loads.

The per-package check counts edges between modules of the same package;
the project check counts every edge between ``contracts``, ``nodes`` and
``harness``, so a loop through two packages (a front that loads a
package's subcommands while that package imports the front) is caught too.
Generated protobuf code (``nodes/_pb``) is excluded as it is from ruff and mypy.

A cycle is a strongly connected component of more than one module (or a
module importing itself); the failure lists every one of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXCLUDED = ("nodes._pb",)
PACKAGES = ("contracts", "nodes", "harness")
#: Calls that import the module named by their first argument.
_LOADERS = frozenset({"import_module", "__import__"})


def _modules(package: str, root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every module of ``package`` (packages as ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name.startswith(EXCLUDED):
            continue
        out[name] = path
    return out


def _imported_names(module: str, path: Path, is_package: bool) -> Iterator[str]:
    """Every dotted name ``module`` imports (``from a import b`` yields ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here[: len(here) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"
    yield from _loaded_names(tree)


def _loaded_names(tree: ast.Module) -> Iterator[str]:
    """Names the module loads through ``importlib.import_module`` / ``__import__``.

    A literal first argument is the name; any other argument is computed, so
    every string literal of the module is a name it may load (the caller keeps
    those that are modules).
    """
    computed = False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in _LOADERS:
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield first.value
        else:
            computed = True
    if computed:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.value


def import_graph(packages: str | Sequence[str], root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the modules of ``packages`` it imports (directly, via ``__init__`` or by name)."""
    tops = (packages,) if isinstance(packages, str) else tuple(packages)
    modules = {m: p for package in tops for m, p in _modules(package, root).items()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported_names(module, path, path.name == "__init__.py"):
            parts = name.split(".")
            # the target module and every enclosing package it makes Python run
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in modules and target not in tops and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_cycle_finder_reports_a_cycle_and_passes_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_import_graph_sees_function_level_relative_and_package_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.b import x\n")
    (pkg / "a.py").write_text("def f() -> None:\n    from .sub import c\n")
    (pkg / "b.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\nx = 1\n")
    (pkg / "sub" / "c.py").write_text("from .. import b\n")
    graph = import_graph("pkg", tmp_path)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.sub", "pkg.sub.c"},  # function level, relative; runs sub/__init__
        "pkg.b": {"pkg.a"},  # under TYPE_CHECKING
        "pkg.sub": {"pkg.b"},
        "pkg.sub.c": {"pkg.b"},
    }
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"]]


def test_import_graph_follows_loads_by_name(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("__init__", "b", "c", "d", "e"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "a.py").write_text(
        "import importlib\n"
        "def f() -> None:\n"
        "    importlib.import_module('pkg.b')\n"
        "    __import__('pkg.c')\n"
    )
    (pkg / "front.py").write_text(
        "from importlib import import_module\n"
        "_TABLE = ('pkg.d', 'pkg.e', 'not a module')\n"
        "def f() -> None:\n"
        "    for name in _TABLE:\n"
        "        import_module(name)\n"
    )
    (pkg / "d.py").write_text("from pkg.front import f\n")
    graph = import_graph("pkg", tmp_path)
    assert graph["pkg.a"] == {"pkg.b", "pkg.c"}
    assert graph["pkg.front"] == {"pkg.d", "pkg.e"}  # computed name: every module it spells
    assert cycles(graph) == [["pkg.d", "pkg.front"]]


def test_import_graph_spans_packages(tmp_path: Path) -> None:
    for package in ("top", "low"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    front = "import importlib\nimportlib.import_module('low.x')\n"
    (tmp_path / "top" / "front.py").write_text(front)
    (tmp_path / "low" / "x.py").write_text("from top.front import anything\n")
    assert cycles(import_graph("low", tmp_path)) == []  # one package alone cannot see it
    assert cycles(import_graph(("top", "low"), tmp_path)) == [["low.x", "top.front"]]


def test_no_import_cycles_across_packages() -> None:
    found = cycles(import_graph(PACKAGES))
    assert found == [], "import cycles across packages: " + "; ".join(" ↔ ".join(c) for c in found)


@pytest.mark.parametrize(
    "package",
    ["harness", "nodes"],
)
def test_no_import_cycles_within_package(package: str) -> None:
    found = cycles(import_graph(package))
    assert found == [], f"import cycles in {package}/: " + "; ".join(" ↔ ".join(c) for c in found)


#: The node's roles over their shared context (nodes.context), composed by
#: nodes.services.NodeCore: each a module of its own.
NODE_ROLES = (
    "nodes.origin",
    "nodes.origin_log",
    "nodes.origin_folds",
    "nodes.origin_replay",
    "nodes.holding",
    "nodes.witnessing",
    "nodes.attestations",
    "nodes.suspicions",
    "nodes.cosigner",
    "nodes.custodian",
    "nodes.relay_custody",
)


def _private_reaches(path: Path) -> list[str]:
    """``from <role> import _x`` and ``<not self>._x`` in one module, as "line: text"."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (*NODE_ROLES, "nodes.context"):
            found += [
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_node_roles_import_neither_the_composition_nor_each_others_privates() -> None:
    graph = import_graph("nodes")
    assert set(NODE_ROLES) <= set(graph), "a role module is missing from nodes/"
    for role in (*NODE_ROLES, "nodes.context"):
        # the composition imports the roles, never the other way round
        assert "nodes.services" not in graph[role], f"{role} imports nodes.services"
    assert not set(NODE_ROLES) & graph["nodes.context"], "the shared context imports a role"
    modules = _modules("nodes", ROOT)
    offenders = {
        m: reaches
        for m in (*NODE_ROLES, "nodes.context", "nodes.services")
        if (reaches := _private_reaches(modules[m]))
    }
    assert offenders == {}, f"private names reached across roles: {offenders}"


def test_the_private_reach_check_sees_both_forms(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "from nodes.origin import _Own, Origin\n"
        "def f(self, holding):\n"
        "    self._mine = holding._held\n"
    )
    assert _private_reaches(path) == ["1: from nodes.origin import _Own", "3: holding._held"]
