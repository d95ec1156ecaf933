"""Results folders: the lab's format is read, and runs never leave mixed or partial folders."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import UsageError
from harness.config import DeathSpiralConfig, ExperimentConfig, default_sweep_config
from harness.metrics import (
    GATE_COLUMNS,
    LAB_DEATH_SPIRAL_COLUMNS,
    LAB_DRIFT_COLUMNS,
    LAB_PROSE_COLUMNS,
    LAB_RECON_COLUMNS,
)
from harness.replay import RunResult
from harness.report import write_report
from harness.runner import RunTask, run_main
from harness.sweep import run_sweep
from tests.foreground import sigint_default

# spec §10: the lab's run_meta.json and sweep_meta.json keys, nothing else
LAB_RUN_META_KEYS = [
    "config", "llm", "rehydrate", "seeds", "runs", "steps", "reconstruction_penalty",
    "recon_gate_thresholds", "death_spiral_cadence", "wall_seconds",
    "decision_log_sha256_last_run",
]  # fmt: skip
LAB_SWEEP_META_KEYS = ["config", "steps", "penalty_grid", "cadences", "seeds", "wall_seconds"]
LAB_FILES = {
    "gate_metrics.csv": GATE_COLUMNS,
    "drift.csv": LAB_DRIFT_COLUMNS,
    "recon_curve.csv": LAB_RECON_COLUMNS,
    "prose_channel.csv": LAB_PROSE_COLUMNS,
    "death_spiral_decisions.csv": LAB_DEATH_SPIRAL_COLUMNS,
}
SMALL = ExperimentConfig(
    steps=200,
    compaction_cadence=(25,),
    seeds=(0, 1),
    death_spiral_run=DeathSpiralConfig(steps=1500, compaction_cadence=25),
)


@pytest.fixture(scope="module")
def provnet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("p") / "results"
    run_main(SMALL, out, workers=1, progress=False)
    return out


def test_every_result_file_starts_with_the_labs_columns_in_order(provnet_run: Path) -> None:
    for name, columns in LAB_FILES.items():
        header = (provnet_run / name).read_text().splitlines()[0].split(",")
        assert header[: len(columns)] == columns, name
    meta = json.loads((provnet_run / "run_meta.json").read_text())
    assert list(meta)[: len(LAB_RUN_META_KEYS)] == LAB_RUN_META_KEYS


def _lab_folder(src: Path, dst: Path) -> Path:
    """The same results as the lab writes them: its columns only, its meta keys only."""
    dst.mkdir()
    for name, columns in LAB_FILES.items():
        pd.read_csv(src / name)[columns].to_csv(dst / name, index=False)
    meta = json.loads((src / "run_meta.json").read_text())
    lab_meta = {k: meta[k] for k in LAB_RUN_META_KEYS}
    lab_meta["config"] = "experiments/config.yaml"  # the lab records its config file
    (dst / "run_meta.json").write_text(json.dumps(lab_meta))
    return dst


def test_report_reads_a_folder_in_the_labs_exact_format(provnet_run: Path, tmp_path: Path) -> None:
    lab = _lab_folder(provnet_run, tmp_path / "lab")
    write_report(lab, None)
    ours = _summary_numbers(write_report(provnet_run, None)[0])
    theirs = _summary_numbers(lab / "summary.md")
    # the lab's meta names its config file, so the configured recall/precision
    # are n/a; every measured number is the same
    configured = ("| taint recall |", "| taint precision |")
    assert [x for x in theirs if not x.startswith(configured)] == [
        x for x in ours if not x.startswith(configured)
    ]
    assert len(theirs) == len(ours)


def _summary_numbers(path: Path) -> list[str]:
    # every line but the header line (it names the folder and the fingerprint)
    return [line for line in path.read_text().splitlines()[3:] if "![" not in line]


def test_report_reads_a_lab_sweep_folder(tmp_path: Path) -> None:
    cfg = default_sweep_config().with_seed_count(1)
    ours = tmp_path / "sweep"
    run_sweep(cfg, ours, workers=1, progress=False)
    meta = json.loads((ours / "sweep_meta.json").read_text())
    assert list(meta)[: len(LAB_SWEEP_META_KEYS)] == LAB_SWEEP_META_KEYS
    lab = tmp_path / "lab-sweep"
    lab.mkdir()
    frame = pd.read_csv(ours / "sweep_metrics.csv")
    frame[[*GATE_COLUMNS, "penalty"]].to_csv(lab / "sweep_metrics.csv", index=False)
    (lab / "sweep_meta.json").write_text(json.dumps({k: meta[k] for k in LAB_SWEEP_META_KEYS}))
    run = tmp_path / "run"
    run_main(SMALL, run, workers=1, progress=False)
    write_report(run, ours)
    with_ours = (run / "summary.md").read_text()
    write_report(run, lab)
    with_lab = (run / "summary.md").read_text()
    crossover = with_ours[with_ours.index("## Crossover") :].split("\n## ")[0]
    assert crossover.replace(str(ours), "X") in with_lab.replace(str(lab), "X")


def test_an_interrupted_run_leaves_the_previous_results_untouched(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run_main(SMALL, out, workers=1, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupt(task: RunTask, result: RunResult) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_main(SMALL.with_seed_count(1), out, workers=1, progress=False, on_result=interrupt)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no partial folder


def test_a_new_run_replaces_every_file_of_the_old_one(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run_main(SMALL, out, workers=1, progress=False)
    write_report(out, None)
    run_main(SMALL.with_seed_count(1), out, workers=1, progress=False)
    assert not (out / "summary.md").exists()  # the old run's report went with it
    meta = json.loads((out / "run_meta.json").read_text())
    assert meta["seeds"] == [0]


def test_report_refuses_a_folder_whose_files_come_from_different_runs(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    run_main(SMALL, a, workers=1, progress=False)
    run_main(SMALL.with_seed_count(1), b, workers=1, progress=False)
    (a / "gate_metrics.csv").write_bytes((b / "gate_metrics.csv").read_bytes())
    with pytest.raises(UsageError, match=r"gate_metrics.csv: not the file the run in run_meta"):
        write_report(a, None)


def test_a_folder_holding_other_files_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(UsageError, match=r"mine: holds files that are not results \(thesis.tex\)"):
        run_main(SMALL, out, workers=1, progress=False)
    assert (out / "thesis.tex").read_text() == "precious"


def test_ctrl_c_during_a_run_is_one_line_exit_130_and_keeps_the_old_results(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "results"
    run_main(SMALL, out, workers=1, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "experiment", "run", "--workers", "2",
         "--no-progress", "--out", str(out)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=sigint_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # interrupt once the workers are writing rows into the partial folder
        while not any(
            len(p.read_bytes().splitlines()) > 2
            for p in tmp_path.glob(".results.partial-*/gate_metrics.csv")
        ):
            assert proc.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline, "no rows reached the partial folder"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole group
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    assert err.decode() == "provnet: interrupted\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


#: While set, every process forked from this one writes into it whether a SIGINT
#: reaching it at its first moment would be acted on (not blocked, not ignored).
_FORK_PROBE: list[Path] = []


def _probe_after_fork() -> None:
    import os
    import signal

    if not _FORK_PROBE:
        return
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    (_FORK_PROBE[0] / f"child-{os.getpid()}").write_text(
        "deaf" if blocked or ignored else "hears ctrl-c"
    )


def test_pool_workers_never_hear_ctrl_c_not_even_before_their_initializer(
    tmp_path: Path,
) -> None:
    """The Ctrl-C race: the terminal sends SIGINT to the whole process group. A worker
    it reaches between its fork and its initializer (which looks up libc first, slow
    on a loaded machine) died with a traceback on stderr, beside the parent's one
    line. Workers are born with SIGINT blocked, so there is no such moment."""
    import os

    probes = tmp_path / "probes"
    probes.mkdir()
    os.register_at_fork(after_in_child=_probe_after_fork)
    _FORK_PROBE.append(probes)
    try:
        run_main(SMALL.with_seed_count(1), tmp_path / "out", workers=2, progress=False)
    finally:
        _FORK_PROBE.clear()
    seen = {p.name: p.read_text() for p in probes.iterdir()}
    assert len(seen) >= 2, seen  # both pool workers
    assert set(seen.values()) == {"deaf"}, seen
