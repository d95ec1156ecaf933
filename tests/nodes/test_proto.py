"""The committed generated code matches proto/ and the pinned generator."""

from __future__ import annotations

import filecmp
import re
import tomllib
from pathlib import Path

import grpc
from google.protobuf import __version__ as protobuf_version

from nodes._pb import generate as gen


def test_committed_generated_code_is_not_stale(tmp_path: Path) -> None:
    written = gen.generate(tmp_path)
    fresh = {p.name for p in written}
    committed = {p.name for p in gen.PACKAGE_DIR.iterdir() if p.is_file()}
    assert fresh == committed, (
        f"generated file set differs: missing {sorted(fresh - committed)}, "
        f"extra {sorted(committed - fresh)}; run: .venv/bin/python -m nodes._pb.generate"
    )
    stale = [
        name
        for name in sorted(fresh)
        if not filecmp.cmp(tmp_path / name, gen.PACKAGE_DIR / name, shallow=False)
    ]
    assert stale == [], f"stale files {stale}; run: .venv/bin/python -m nodes._pb.generate"


def test_generated_imports_point_into_nodes_pb() -> None:
    for path in gen.PACKAGE_DIR.glob("*.py*"):
        text = path.read_text(encoding="utf-8")
        assert "from provnet.v1 import" not in text, f"{path.name} still imports provnet.v1"


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _pyproject_minimum(name: str) -> tuple[int, ...]:
    data = tomllib.loads((gen.REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for dep in data["project"]["dependencies"]:
        match = re.fullmatch(rf"{re.escape(name)}>=([\d.]+)", dep.replace(" ", ""))
        if match:
            return _version_tuple(match.group(1))
    raise AssertionError(f"pyproject.toml has no '{name}>=' dependency")


def test_pyproject_minimums_satisfy_generated_version_guards() -> None:
    pb2 = (gen.PACKAGE_DIR / "serve_pb2.py").read_text(encoding="utf-8")
    guard = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", pb2)
    assert guard is not None, "serve_pb2.py lost its protobuf runtime version guard"
    protobuf_needed = tuple(int(g) for g in guard.groups())
    grpc_py = (gen.PACKAGE_DIR / "serve_pb2_grpc.py").read_text(encoding="utf-8")
    grpc_guard = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", grpc_py)
    assert grpc_guard is not None, "serve_pb2_grpc.py lost its grpc version guard"
    grpc_needed = _version_tuple(grpc_guard.group(1))
    # The declared minimum must be at least what the generated code demands,
    # and within the same protobuf major (the guard rejects other majors).
    assert _pyproject_minimum("protobuf") >= protobuf_needed
    assert _pyproject_minimum("protobuf")[0] == protobuf_needed[0]
    assert _pyproject_minimum("grpcio") >= grpc_needed
    assert _version_tuple(protobuf_version) >= protobuf_needed
    assert _version_tuple(grpc.__version__) >= grpc_needed


def test_every_service_in_proto_is_generated() -> None:
    from nodes._pb.provnet.v1 import (
        attest_pb2,
        deliver_pb2,
        evidence_pb2,
        hoplog_pb2,
        node_pb2,
        serve_pb2,
    )

    names = {
        svc.full_name
        for mod in (attest_pb2, deliver_pb2, evidence_pb2, hoplog_pb2, node_pb2, serve_pb2)
        for svc in mod.DESCRIPTOR.services_by_name.values()
    }
    assert names == {
        "provnet.v1.Attest",
        "provnet.v1.Deliver",
        "provnet.v1.Evidence",
        "provnet.v1.HopLog",
        "provnet.v1.Node",
        "provnet.v1.Serve",
    }
