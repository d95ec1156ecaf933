"""``cluster up --fault NODE=MODE`` and the concise ``cluster status`` line, with real nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodes.cli import _status_line

pytestmark = pytest.mark.timeout(240)


def _provnet(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    env["PROVNET_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_cluster_up_starts_the_named_node_with_its_fault(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up = _provnet(home, "cluster", "up", "--nodes", "2", "--fault", "b=tamper")
    try:
        assert up.returncode == 0, up.stderr
        assert "cluster of 2 nodes up" in up.stdout
        status = _provnet(home, "cluster", "status", "--json")
        rows = {r["name"]: r for r in map(json.loads, status.stdout.splitlines())}
        assert rows["a"]["fault"] is None
        assert rows["b"]["fault"] == "tamper"
        started = [
            json.loads(line)
            for line in (home / "logs" / "b.log").read_text().splitlines()
            if '"node_started"' in line
        ]
        assert [e["fault"] for e in started] == ["tamper"]
        text = _provnet(home, "cluster", "status").stdout.splitlines()
        assert "fault tamper" in text[1]
        assert "fault" not in text[0]
    finally:
        assert _provnet(home, "cluster", "down").returncode == 0


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("z=drop", "no node 'z' in this cluster (a, b)"),
        ("b=slow", "'slow' needs a delay"),
        ("b=bogus", "expected one of"),
        ("b", "expected NODE=MODE"),
    ],
)
def test_cluster_up_bad_fault_is_one_line_and_starts_nothing(
    tmp_path: Path, entry: str, says: str
) -> None:
    home = tmp_path / "home"
    done = _provnet(home, "cluster", "up", "--nodes", "2", "--fault", entry)
    assert done.returncode == 2
    assert done.stderr.startswith("provnet: error: --fault")
    assert says in done.stderr
    assert done.stderr.count("\n") == 1
    assert not (home / "cluster.json").exists()


def test_status_line_is_concise_unless_verbose() -> None:
    counters = {f"rpc_{i}": i for i in range(20)}
    counters.update(serves=3, refusals=0, gc_frozen_objects=41234, evidence_bad_data=2)
    row = {"name": "a", "health": "SERVING", "pid": 1, "alive": True, "port": 5, "fault": None}
    short = _status_line({**row, "counters": counters})
    full = _status_line({**row, "counters": counters}, verbose=True)
    assert "gc_frozen_objects" not in short
    assert "rpc_3" not in short
    assert "serves=3" in short
    assert "evidence_bad_data=2" in short
    assert len(short) < 120
    assert "gc_frozen_objects=41234" in full
    assert "rpc_19=19" in full
