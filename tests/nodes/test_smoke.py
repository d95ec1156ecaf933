"""The smoke test reports deviations: a faulty A makes its steps fail and the exit non-zero.

Real node processes; the nodes are given with ``--nodes`` (the Compose path),
so this also covers running the smoke test against nodes it did not start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodes.cluster import (
    NodeRecord,
    NodeSpec,
    free_ports,
    operator_key,
    peer_list,
    start_nodes,
    stop_all,
)
from nodes.home import Home
from nodes.smoke import SMOKE_STEPS

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def refusing_origin_cluster(tmp_path: Path) -> Iterator[tuple[Path, list[NodeRecord]]]:
    home = Home(tmp_path / "home")
    ports = free_ports(3)
    base = [
        NodeSpec(name=n, port=p, data_dir=home.data_dir(n), log_file=home.log_file(n))
        for n, p in zip("abc", ports, strict=True)
    ]
    specs = [
        NodeSpec(
            name=s.name,
            port=s.port,
            data_dir=s.data_dir,
            log_file=s.log_file,
            peers=peer_list(base, s.name),
            fault="refuse" if s.name == "a" else None,
            operator_keys=(operator_key(home).key_id,),
        )
        for s in base
    ]
    started = start_nodes(specs, timeout=60)
    try:
        yield home.root, [record for record, _ in started]
    finally:
        stop_all(started, grace=2.0)
        assert all(proc.poll() is not None for _, proc in started)


def test_smoke_against_a_refusing_origin_reports_deviating_steps_and_exits_1(
    refusing_origin_cluster: tuple[Path, list[NodeRecord]],
) -> None:
    home, records = refusing_origin_cluster
    members = ";".join(f"{r.name}={r.address}" for r in records)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVNET_")}
    argv = ["cluster", "smoke", "--home", str(home), "--nodes", members, "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env=env,
    )
    steps = {s["name"]: s for s in map(json.loads, done.stdout.splitlines())}
    assert list(steps) == list(SMOKE_STEPS)
    assert done.returncode == 1
    assert "smoke steps deviating: rehydrate_b, rehydrate_c" in done.stderr
    # A's refusal is seen for what it is; the steps that need it are not faked.
    outcome = steps["rehydrate_b"]["observed"]["outcomes"]
    assert [o["outcome"] for o in outcome] == ["refused"]
    assert steps["rehydrate_c"]["observed"] == {"skipped": "needs rehydrate_b"}
    # Everything independent of A's serving still holds.
    for name in ("commit", "deliver", "forward", "tamper", "crash", "intact"):
        assert steps[name]["ok"], steps[name]
