"""Package boundaries of `contracts`, and the benchmark as an opt-in test."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import contracts
from contracts import (
    ReceiptStatus,
    RefusalReason,
    answer_demand,
    build_demand,
)
from tests.contracts._support import NOW, make_world
from tests.scripts import load_script

CONTRACTS_DIR = Path(contracts.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
    return names


def test_contracts_imports_nothing_from_nodes_or_harness_or_grpc() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in sorted(CONTRACTS_DIR.glob("*.py"))
        for name in _imported_modules(path)
        if name.split(".")[0] in {"nodes", "harness", "grpc", "aiosqlite"}
    }
    assert offenders == set()
    assert len(list(CONTRACTS_DIR.glob("*.py"))) >= 10


def test_signed_note_modules_import_no_clock_and_no_io() -> None:
    # Heads become C2SP notes: their encodings must stay pure so every route
    # (node, harness, CLI) reads the same bytes the same way.
    allowed = {"__future__", "binascii", "hashlib", "collections.abc", "dataclasses", "typing"}
    for name in ("note.py", "checkpoint.py"):
        imported = _imported_modules(CONTRACTS_DIR / name)
        assert {m for m in imported if not m.startswith("contracts.")} <= allowed, name


def test_origin_rules_module_is_pure_no_imports_no_clock_no_io() -> None:
    # The origin's rules are decided the same on every route only if nothing but
    # their arguments decides them: no module (no time, os, random), no open().
    path = CONTRACTS_DIR / "rules.py"
    assert _imported_modules(path) <= {"__future__"}
    tree = ast.parse(path.read_text(), filename=str(path))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    called = {n.func.id for n in calls if isinstance(n.func, ast.Name)}
    assert all(isinstance(n.func, ast.Name) for n in calls)  # no attribute calls either
    assert called <= {"abs"}, called
    assert not any(isinstance(n, ast.Global | ast.Nonlocal) for n in ast.walk(tree))


def test_every_public_name_is_exported_and_resolves() -> None:
    for name in contracts.__all__:
        assert getattr(contracts, name) is not None, name
    assert len(contracts.__all__) == len(set(contracts.__all__))


def test_origin_refuses_a_demand_for_leaves_outside_the_fold_as_bad_demand() -> None:
    w = make_world(n_hops=4)
    bad = build_demand(w.holder, w.obligation, now=NOW + 1, leaves=[2, 9], nonce="0d" * 16)
    receipt = answer_demand(
        w.origin, bad, obligation=w.obligation, commitment=w.commitment, hops=w.hops, now=NOW + 2
    )
    assert (receipt.statement.status, receipt.statement.reason) == (
        ReceiptStatus.REFUSED,
        RefusalReason.BAD_DEMAND,
    )


@pytest.mark.bench
def test_bench_fold_verification_stays_within_1_5x_of_one_verify_plus_50_hashes() -> None:
    module = load_script("benchmarks/bench_contracts.py", "bench_contracts")
    assert module.main(["--quick"]) == 0
