"""What a new user tripped over: a bad PROVNET_HOME, a garbled cluster.json, keys new --force."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.identity import Identity, load_identity, save_identity
from harness.cli import main
from nodes.cluster import find_node_processes, is_alive
from nodes.home import Home


def test_cluster_up_under_a_file_is_one_error_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc = main(["cluster", "up", "--home", str(blocker / "home")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("provnet: error: PROVNET_HOME ")
    assert "Not a directory" in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


@pytest.fixture
def fake_node(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line names a node data dir under the home, as a node's does."""
    home = Home(tmp_path / "home")
    home.ensure()
    data_dir = home.data_dir("a")
    data_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(data_dir)])
    # Popen returns once the child is forked; its command line names the data dir
    # only after exec, which a loaded machine can delay: wait for it (bounded).
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    for _ in range(500):
        if str(data_dir).encode() in cmdline.read_bytes():
            break
        time.sleep(0.01)
    else:
        proc.kill()
        raise AssertionError(f"fake node {proc.pid} never showed {data_dir} in its command line")
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_garbled_cluster_json_status_says_how_to_recover_and_down_stops_what_it_finds(
    tmp_path: Path, fake_node: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    home = Home(tmp_path / "home")
    home.state_file.write_text("{garbled")
    assert [r.pid for r in find_node_processes(home)] == [fake_node.pid]

    rc = main(["cluster", "status", "--home", str(home.root)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not JSON" in err
    assert "run 'provnet cluster down' to stop the nodes still running" in err

    rc = main(["cluster", "down", "--home", str(home.root), "--grace", "5"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"a\tpid {fake_node.pid}\tterminated" in out
    fake_node.wait(timeout=10)
    assert not is_alive(fake_node.pid)
    assert not home.state_file.exists()
    aside = list(home.root.glob("cluster.json.unreadable-*"))
    assert len(aside) == 1
    assert aside[0].read_text() == "{garbled"


def test_keys_new_force_keeps_the_replaced_key_as_a_retired_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "node.key"
    old = Identity.generate()
    save_identity(old, path)
    assert main(["keys", "new", "--force", str(path)]) == 0
    retired = list(tmp_path.glob("node.key.retired-*"))
    assert len(retired) == 1
    assert load_identity(retired[0]).node_id == old.node_id
    assert load_identity(path).node_id != old.node_id
    assert f"retired {retired[0]}" in capsys.readouterr().out
    assert retired[0].stat().st_mode & 0o777 == 0o600
