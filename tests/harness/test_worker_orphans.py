"""A parent killed outright (SIGKILL) leaves no worker process behind.

Real processes: ``provnet experiment boundary --full --workers 2`` (forked
workers on the in-memory transport) and ``provnet experiment run --workers 2``
(forked workers, with a long death-spiral run) are started, the test waits
until their workers are playing (they have used CPU), SIGKILLs the parent and
then expects every process it had started to be gone within a bounded wait.
Without ``harness._workers.exit_with_parent`` a boundary worker plays its
whole share of the matrix for nobody (tens of seconds), and a forked worker
plays the run it holds to the end (it only stops when it next writes a
result to the dead parent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs /proc to find the worker processes"
)

#: How long the workers may take to notice their parent is gone (seconds).
ORPHAN_DEADLINE_S = 15.0
#: CPU a worker must have used before the parent is killed: it is really playing.
PLAYING_CPU_S = 0.5


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds, start time) of ``pid``; None once it is gone (or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, int(fields[19])


def _children(parent: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[0] == parent:
                kids.append(int(entry.name))
    return kids


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if _stat(p) is not None]


class _Reaper:
    """Processes this test started, SIGKILLed at the end whatever happened.

    Each is known by pid and start time, so a pid the system has since given
    to another process is left alone.
    """

    def __init__(self) -> None:
        self.started: dict[int, int] = {}

    def add(self, pid: int) -> None:
        st = _stat(pid)
        if st is not None:
            self.started.setdefault(pid, st[2])

    def kill_all(self) -> None:
        for pid, start in self.started.items():
            st = _stat(pid)
            if st is not None and st[2] == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def reap() -> Iterator[_Reaper]:
    reaper = _Reaper()
    yield reaper
    reaper.kill_all()


@pytest.mark.parametrize(
    "command",
    [
        ["experiment", "boundary", "--full", "--workers", "2", "--no-progress"],
        ["experiment", "run", "--workers", "2", "--config", "long-spiral.yaml"],
    ],
    ids=["boundary-fork", "run-fork"],
)
def test_workers_exit_when_their_parent_is_killed(
    command: list[str], tmp_path: Path, reap: _Reaper
) -> None:
    # run: the death-spiral run (submitted first) long enough to outlast the wait, and
    # seeds long enough that a second worker plays beside it on a fast machine
    (tmp_path / "long-spiral.yaml").write_text(
        "steps: 5000\nseeds: 4\ndeath_spiral_run:\n  steps: 150000\n  compaction_cadence: 25\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-m", "harness", *command, "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    reap.add(parent.pid)
    workers: list[int] = []
    give_up = time.monotonic() + 180
    while time.monotonic() < give_up and parent.poll() is None:
        kids = _children(parent.pid)
        for k in kids:
            reap.add(k)
        cpu = {k: st[1] for k in kids if (st := _stat(k)) is not None}
        playing = [k for k, s in cpu.items() if s >= PLAYING_CPU_S]
        if len(playing) >= 2:
            workers = kids
            break
        time.sleep(0.1)
    assert parent.poll() is None, "the command ended before its workers were seen playing"
    assert workers, f"no two workers of {command} were seen using CPU"
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + ORPHAN_DEADLINE_S
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = _alive(workers)
    assert not survivors, (
        f"{len(survivors)} worker process(es) of {' '.join(command)} still running"
        f" {ORPHAN_DEADLINE_S:.0f} s after their parent was killed: {survivors}"
    )
