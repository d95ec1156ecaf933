"""What a new user's first hour tripped over in the experiment commands (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import UsageError, main
from harness.cli_experiment import TraceFormat

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "experiments" / "examples"


def _one_line(err: str) -> str:
    assert err.startswith("provnet: error:"), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_attest_policy_naming_a_node_not_in_the_run_is_one_line_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "type: attest-policy\nattesters:\n  atester:\n    axes: {reconstruction: 1.0}\n"
    )
    out = tmp_path / "o"
    code = main(["experiment", "attest", "--policy", str(policy), "--out", str(out)])
    err = _one_line(capsys.readouterr().err)
    assert code == 2
    assert f"{policy}: policy names node 'atester', not in the run" in err
    assert "attester, holder, origin, witness" in err
    assert not out.exists()
    assert not list(tmp_path.glob(".o.partial*"))


def test_attest_report_only_on_a_missing_folder_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["experiment", "attest", "--report-only", "--out", str(tmp_path / "nope")])
    err = _one_line(capsys.readouterr().err)
    assert code == 2
    assert "Errno" not in err
    assert f"{tmp_path / 'nope'}/attest_results.json not found" in err


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (EXAMPLES / "trace-minimal.jsonl", TraceFormat.PROVNET),
        (EXAMPLES / "trace-research.jsonl", TraceFormat.PROVNET),
        (REPO / "tests" / "harness" / "data" / "lab-trace" / "sample.jsonl", TraceFormat.LAB),
    ],
)
def test_trace_format_is_read_from_the_ops(path: Path, fmt: TraceFormat) -> None:
    from harness.cli_experiment import detect_trace_format

    assert detect_trace_format(path) is fmt


def test_shipped_trace_runs_without_trace_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = EXAMPLES / "trace-minimal.jsonl"
    code = main(["experiment", "run", "--trace", str(trace), "--out", str(tmp_path / "r")])
    assert code == 0, capsys.readouterr().err
    assert "provnet's trace schema" in capsys.readouterr().err
    assert (tmp_path / "r" / "gate_metrics.csv").is_file()


def test_provnet_trace_read_as_lab_says_which_format_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = EXAMPLES / "trace-minimal.jsonl"
    argv = ["experiment", "run", "--trace", str(trace), "--trace-format", "lab"]
    code = main([*argv, "--out", str(tmp_path / "r")])
    err = _one_line(capsys.readouterr().err)
    assert code == 2
    assert err.rstrip().endswith("--trace-format provnet")


def test_origins_count_on_running_nodes_picks_running_nodes() -> None:
    from harness.boundary.cli import _pick_origins

    names = ["a", "b", "c", "d", "e"]
    assert _pick_origins(names, ("a", "b"), None, 3) == ("a", "c", "d")
    assert _pick_origins(names, ("c", "b"), "a", 2) == ("c", "d")
    with pytest.raises(UsageError, match=r"--origins 3: needs 3 origin nodes.*leave 1: c"):
        _pick_origins(["a", "b", "c"], ("a", "b"), None, 3)


def test_origins_count_beyond_the_running_nodes_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = "a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3"
    code = main(
        ["experiment", "boundary", "--nodes", nodes, "--origins", "3", "--out", str(tmp_path)]
    )
    err = _one_line(capsys.readouterr().err)
    assert code == 2
    assert "a2" not in err
    assert "--origins 3: needs 3 origin nodes" in err


def test_origins_count_in_the_settings_picks_running_nodes_never_made_up_names() -> None:
    # The settings themselves, not only the CLI: a running cluster a–e, chain a,b,
    # witness e and 3 origins plays on a, c, d (no 'a2', which no node is).
    from harness.boundary.choices import TransportKind
    from harness.boundary.runner import BoundaryError, BoundarySettings
    from harness.config import ExperimentConfig

    five = tuple((n, f"127.0.0.1:{port}") for port, n in enumerate("abcde", start=1))
    settings = BoundarySettings(
        transport=TransportKind.REMOTE,
        nodes=five,
        chain=("a", "b"),
        origins=3,
        witness_name="e",
    )
    settings.validate(ExperimentConfig())
    assert settings.origin_names() == ["a", "c", "d"]
    assert settings.node_names() == ["a", "c", "d", "b", "e"]
    assert settings.to_json()["origins"] == ["a", "c", "d"]
    # started here (no running nodes), the extra origins are still made up
    assert BoundarySettings(chain=("a", "b"), origins=3).origin_names() == ["a", "a2", "a3"]
    short = BoundarySettings(
        transport=TransportKind.REMOTE, nodes=five[:3], chain=("a", "b"), origins=3
    )
    with pytest.raises(BoundaryError, match=r"--origins 3: needs 3 origin nodes.*leave 1: c"):
        short.validate(ExperimentConfig())
