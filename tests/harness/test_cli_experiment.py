"""``provnet experiment``: end to end through the console entry point."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis import analyze
from harness.cli import main
from harness.metrics import (
    DEATH_SPIRAL_COLUMNS,
    DRIFT_COLUMNS,
    GATE_COLUMNS,
    PROSE_COLUMNS,
    RECON_COLUMNS,
)

REPO = Path(__file__).resolve().parents[2]


def _small_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "small.yaml"
    cfg.write_text(
        "steps: 200\ncompaction_cadence: [25]\nseeds: 2\n"
        "death_spiral_run: {steps: 600, compaction_cadence: 25}\n"
    )
    return cfg


def test_run_writes_every_documented_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    rc = main(
        [
            "experiment",
            "run",
            "--config",
            str(_small_config(tmp_path)),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "fingerprint:" in printed
    assert "hypotheses:" in printed
    expected = {
        "gate_metrics.csv": GATE_COLUMNS,
        "drift.csv": DRIFT_COLUMNS,
        "recon_curve.csv": RECON_COLUMNS,
        "prose_channel.csv": PROSE_COLUMNS,
        "death_spiral_decisions.csv": DEATH_SPIRAL_COLUMNS,
    }
    for name, columns in expected.items():
        with (out / name).open() as fh:
            rows = list(csv.reader(fh))
        assert rows[0] == columns, name
        assert len(rows) > 1, name
    with (out / "gate_metrics.csv").open() as fh:
        gm = list(csv.DictReader(fh))
    # 3 profiles × 2 seeds main runs + the death spiral, 43 rows each
    assert len(gm) == 7 * 43
    assert {r["run_type"] for r in gm} == {"main", "death_spiral"}
    assert {r["irreversible"] for r in gm} == {"True", "False"}
    assert {r["mode"] for r in gm} == {"blind", "degrade", "rehydrate"}
    assert "ground_truth" not in {r["arm"] for r in gm}
    meta = json.loads((out / "run_meta.json").read_text())
    assert set(meta) >= {
        "config",
        "versions",
        "workers",
        "rehydrate",
        "wall_seconds",
        "run_fingerprints",
        "fingerprint",
    }
    assert set(meta["versions"]) == {"provnet", "python", "numpy"}


def test_seeds_flag_overrides_the_config_and_no_rehydrate_drops_the_mode(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r"
    rc = main(
        [
            "experiment",
            "run",
            "--config",
            str(_small_config(tmp_path)),
            "--out",
            str(out),
            "--seeds",
            "1",
            "--workers",
            "1",
            "--no-rehydrate",
            "--no-progress",
        ]
    )
    assert rc == 0
    with (out / "gate_metrics.csv").open() as fh:
        gm = list(csv.DictReader(fh))
    assert {r["seed"] for r in gm if r["run_type"] == "main"} == {"0"}
    assert "rehydrate" not in {r["mode"] for r in gm}
    assert json.loads((out / "run_meta.json").read_text())["rehydrate"] is False


def test_run_without_a_config_uses_the_built_in_defaults_from_any_directory(
    tmp_path: Path,
) -> None:
    # a subprocess so the working directory has no experiments/ folder
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "experiment",
            "run",
            "--seeds",
            "1",
            "--workers",
            "2",
            "--out",
            "res",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "res" / "run_meta.json").read_text())
    assert meta["config"]["compaction_cadence"] == [10, 25, 50]
    assert meta["n_runs"] == 10  # 3 cadences × 3 profiles × 1 seed + death spiral


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("steps: [1\n", "malformed YAML at line"),
        ("stepz: 500\n", "unknown key 'stepz'"),
        ("allowlist_window: eight\n", "key 'allowlist_window': expected an integer"),
        ("prose: {taint_recall: 2}\n", "key 'prose.taint_recall': expected a number in [0, 1]"),
    ],
)
def test_bad_config_exits_2_naming_file_and_key_without_traceback(
    tmp_path: Path, text: str, needle: str
) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "experiment",
            "run",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("provnet: error: ")
    assert str(cfg) in proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_explicit_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "experiment",
            "sweep",
            "--config",
            str(tmp_path / "nope.yaml"),
            "--out",
            str(tmp_path / "s"),
        ]
    )
    assert rc == 2
    assert "nope.yaml: cannot read config" in capsys.readouterr().err


def test_rules_without_trace_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "experiment",
            "run",
            "--config",
            str(_small_config(tmp_path)),
            "--rules",
            "r.yaml",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert rc == 2
    assert "--taint-rules needs --trace" in capsys.readouterr().err


def test_small_sweep_prints_crossovers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(
        "steps: 300\ncompaction_cadence: [5, 50, 150]\npenalty_grid: [0.02, 0.1]\n"
        "profile: med\nseeds: 2\ndeath_spiral_run: null\n"
    )
    rc = main(
        [
            "experiment",
            "sweep",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "s"),
            "--workers",
            "2",
            "--no-progress",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "sweep: 12 runs" in out
    assert "p=0.02:" in out
    assert "p=0.1:" in out


def test_trace_replay_writes_trace_rows_and_the_mapping_summary(tmp_path: Path) -> None:
    trace = REPO / "experiments" / "examples" / "trace-research.jsonl"
    rules = REPO / "experiments" / "examples" / "rules-research.yaml"
    out = tmp_path / "t"
    rc = main(
        [
            "experiment",
            "run",
            "--trace",
            str(trace),
            "--trace-format",
            "provnet",
            "--rules",
            str(rules),
            "--config",
            str(_small_config(tmp_path)),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    with (out / "gate_metrics.csv").open() as fh:
        gm = list(csv.DictReader(fh))
    assert {(r["run_type"], r["cadence"], r["profile"], r["seed"]) for r in gm} == {
        ("main", "25", "trace", "0")
    }
    meta = json.loads((out / "run_meta.json").read_text())
    assert "trace" in meta
    assert meta["trace"]["records_read"] > 0
    # H2 needs the death-spiral run, which a trace replay does not have
    assert [h.verdict for h in analyze(out).hypotheses][1] == "N/A"


def test_bad_trace_line_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"step": 1, "op": "fetch", "fields": {}}\n{not json\n')
    rc = main(
        [
            "experiment",
            "run",
            "--trace",
            str(trace),
            "--out",
            str(tmp_path / "o"),
            "--config",
            str(_small_config(tmp_path)),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err
    assert "2" in err


def test_report_renders_from_run_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    assert (
        main(
            [
                "experiment",
                "run",
                "--config",
                str(_small_config(tmp_path)),
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    rc = main(["experiment", "report", "--out", str(out), "--sweep-out", str(tmp_path / "none")])
    assert rc == 0
    captured = capsys.readouterr()
    assert str(out / "summary.md") in captured.out
    assert "crossover section skipped" in captured.err
    assert (out / "summary.md").read_text().startswith("#")


def test_report_on_a_missing_results_dir_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["experiment", "report", "--out", str(tmp_path / "absent")])
    assert rc == 2
    assert "absent" in capsys.readouterr().err


def test_unwritable_out_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc = main(
        [
            "experiment",
            "run",
            "--config",
            str(_small_config(tmp_path)),
            "--out",
            str(blocker / "results"),
        ]
    )
    assert rc == 2
    assert "cannot create the results directory" in capsys.readouterr().err
