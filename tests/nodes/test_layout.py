"""Where each concept of the node layer lives, pinned so it cannot spread again.

- generated code is imported by :mod:`nodes.wire` and :mod:`nodes.servicers` only;
- the node core (:mod:`nodes.services`) imports no gRPC;
- the services a node registers are one table covering every proto service;
- closed sets derive from one definition (outcomes from evidence kinds,
  fault behaviours from fault modes);
- one error tree, each error carrying its status code.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import grpc

import contracts
import harness
import nodes
from contracts.evidence import EvidenceKind
from contracts.identity import Identity
from nodes import errors, faults, store
from nodes._pb.provnet.v1 import (
    attest_pb2,
    custody_pb2,
    deliver_pb2,
    evidence_pb2,
    hoplog_pb2,
    node_pb2,
    serve_pb2,
    witness_pb2,
)
from nodes.faults import Behaviour, FaultMode, FaultPlan
from nodes.messages import EVIDENCE_KINDS, Outcome, outcome_for
from nodes.servicers import SERVICE_NAMES

_ROOTS = [Path(str(p.__file__)).parent for p in (contracts, nodes, harness)]
#: Modules that import generated code: the conversions, the servicers, and the method
#: table (it reads the rpcs' policy options from the descriptors, builds no message).
_MAY_IMPORT_GENERATED = {"nodes/wire.py", "nodes/servicers.py", "nodes/methods.py"}
#: Modules that decide per method (who may call, admission, retry, which rpc is called):
#: they name methods only through the method table, never by a literal of their own.
_READ_THE_METHOD_TABLE = (
    "nodes/auth.py",
    "nodes/interceptors.py",
    "nodes/overload.py",
    "nodes/retry.py",
    "nodes/transport.py",
    "nodes/wire.py",
    "nodes/attest_log.py",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _library_files() -> list[tuple[str, Path]]:
    files = []
    for root in _ROOTS:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root.parent).as_posix()
            if not rel.startswith("nodes/_pb/"):
                files.append((rel, path))
    return files


def test_only_the_wire_module_and_servicers_import_generated_code() -> None:
    offenders = sorted(
        f"{rel}: {name}"
        for rel, path in _library_files()
        if rel not in _MAY_IMPORT_GENERATED
        for name in _imports(path)
        if name == "nodes._pb" or name.startswith("nodes._pb.")
    )
    assert offenders == []


def test_per_method_policy_lives_only_in_the_method_table() -> None:
    root = Path(str(nodes.__file__)).parent.parent
    literals = sorted(
        f"{rel}: {node.value}"
        for rel in _READ_THE_METHOD_TABLE
        for node in ast.walk(ast.parse((root / rel).read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("/provnet.v1.")
    )
    assert literals == [], "name methods through nodes.methods (method_name, METHODS)"


def test_node_core_imports_no_grpc() -> None:
    core = Path(str(nodes.__file__)).parent / "services.py"
    grpc_imports = sorted(
        name for name in _imports(core) if name.split(".")[0] == "grpc" or "._pb" in name
    )
    assert grpc_imports == []


#: What only the one client (nodes.control) may use to reach a node: gRPC itself,
#: the generated code, raw stubs and channels, and the retry of shed calls.
_CLIENT_ONLY_MODULES = ("grpc", "nodes._pb", "nodes.retry")
_CLIENT_ONLY_NAMES = frozenset({"nodes.auth.control_channel", "nodes.smoke.control_channel"})


def _raw_stub_uses(path: Path) -> set[str]:
    """``wire.<x>_stub`` / ``wire.demand_unary`` attribute uses (raw stubs from nodes.wire)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        f"wire.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "wire"
        and (node.attr.endswith("_stub") or node.attr == "demand_unary")
    }


def test_the_harness_imports_no_grpc_and_reaches_nodes_only_through_the_client() -> None:
    offenders = sorted(
        f"{rel}: {name}"
        for rel, path in _library_files()
        if rel.startswith("harness/")
        for name in _imports(path) | _raw_stub_uses(path)
        if name in _CLIENT_ONLY_NAMES
        or name.startswith("wire.")
        or any(name == m or name.startswith(f"{m}.") for m in _CLIENT_ONLY_MODULES)
    )
    assert offenders == []


def test_service_table_registers_every_service_in_the_protos() -> None:
    in_protos = {
        svc.full_name
        for mod in (
            hoplog_pb2,
            serve_pb2,
            deliver_pb2,
            attest_pb2,
            custody_pb2,
            evidence_pb2,
            node_pb2,
            witness_pb2,
        )
        for svc in mod.DESCRIPTOR.services_by_name.values()
    }
    assert len(SERVICE_NAMES) == len(set(SERVICE_NAMES))
    assert set(SERVICE_NAMES) == in_protos


def test_accusing_outcomes_are_the_evidence_kinds() -> None:
    assert {o.value for o in EVIDENCE_KINDS} == {k.value for k in EvidenceKind}
    for kind in EvidenceKind:
        assert outcome_for(kind).value == kind.value
    # Nothing else in Outcome shares a value with an evidence kind.
    assert {o for o in Outcome if o.value in set(EvidenceKind)} == EVIDENCE_KINDS


def test_every_fault_mode_has_its_own_behaviour_class() -> None:
    identity = Identity.generate()
    classes = {
        mode: type(FaultPlan(mode, 1, crash=lambda: None).behaviour(identity)) for mode in FaultMode
    }
    assert len(set(classes.values())) == len(FaultMode)
    for cls in classes.values():
        assert issubclass(cls, Behaviour)
        assert inspect.getmodule(cls) is faults


def test_one_error_tree_each_error_with_its_status_code() -> None:
    assert store.UnknownCommitment is errors.UnknownCommitment
    assert store.StoreError is errors.StoreError
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, errors.NodeError), name
            assert isinstance(obj.code, grpc.StatusCode), name
            assert errors.status_for(obj("x")) is obj.code
    assert errors.status_for(store.StoreClosed("x")) is grpc.StatusCode.UNAVAILABLE
    assert errors.status_for(store.StoreCorrupt("x")) is grpc.StatusCode.INTERNAL


def _doc_table_first_column(heading: str) -> set[str]:
    """The backticked first cells of the first table under ``heading`` in docs/wire.md."""
    text = (Path(str(nodes.__file__)).parent.parent / "docs" / "wire.md").read_text("utf-8")
    section = text.split(f"\n{heading}\n", 1)[1]
    cells: set[str] = set()
    in_table = False
    for line in section.splitlines():
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1].strip()
            if first.startswith("`") and first.endswith("`"):
                cells.add(first.strip("`"))
        elif in_table:
            break
    return cells


def test_wire_doc_tables_list_every_fault_mode_and_outcome() -> None:
    assert _doc_table_first_column("## Fault modes (`--fault`, `PROVNET_FAULT`)") == {
        m.value for m in FaultMode
    }
    assert _doc_table_first_column("## The holder client (`nodes.client.Holder`)") == {
        o.value for o in Outcome
    }
