"""Trace mode in the lab's schema (spec §9): provnet reproduces the lab's own output.

``data/lab-trace/`` holds the lab's sample trace and rules and the lab's own
``gate_metrics.csv`` and ``trace_coverage.json`` for them.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.events import Decision, Merge, NewValue, OpEvent, Retire
from harness.lab_trace import load_lab_trace
from harness.trace_rules import TraceError

DATA = Path(__file__).resolve().parent / "data" / "lab-trace"
REPO = Path(__file__).resolve().parents[2]


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


@pytest.mark.parametrize("flag", ["--taint-rules", "--rules"])
def test_run_trace_reproduces_the_labs_gate_metrics_cell_by_cell(
    tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    rc = main(
        [
            "experiment", "run", "--trace", str(DATA / "sample.jsonl"), flag,
            str(DATA / "rules.yaml"), "--config", str(REPO / "experiments" / "config.yaml"),
            "--mock", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    got, want = _rows(out / "gate_metrics.csv"), _rows(DATA / "expected_gate_metrics.csv")
    assert len(got) == len(want) == 130
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g[: len(w)] == w, f"row {i}"
    coverage = json.loads((out / "trace_coverage.json").read_text())
    assert coverage == json.loads((DATA / "expected_trace_coverage.json").read_text())
    # the death-spiral file exists with its header only (no death-spiral run)
    assert len(_rows(out / "death_spiral_decisions.csv")) == 1
    printed = capsys.readouterr().out
    assert "60 records, 59 mapped, 1 skipped" in printed
    assert "merge_with ref 's999' not live" in printed
    assert "rehydration:" in printed  # headline numbers, not only a fingerprint


def test_without_rules_the_labs_default_rules_give_the_same_cells(tmp_path: Path) -> None:
    out = tmp_path / "r"
    rc = main(
        ["experiment", "run", "--trace", str(DATA / "sample.jsonl"), "--out", str(out),
         "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    assert _rows(out / "gate_metrics.csv") == _rows(DATA / "expected_gate_metrics.csv")


def test_a_merge_that_finds_no_second_input_is_a_plain_op_without_a_decision(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    records: list[dict[str, object]] = [{"step": "a", "op": "SOURCE_FETCH"}]
    records += [{"op": "TOOL_CALL", "fields": {"status": "ok"}}] * 3
    records += [{"step": "m", "op": "MERGE", "merge_with": ["a"]}]  # "a" is the working value
    trace.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    loaded = load_lab_trace(trace)
    assert [type(e) for e in loaded.events] == [NewValue, NewValue, OpEvent, OpEvent, OpEvent,
                                                OpEvent]  # fmt: skip
    assert loaded.events[-1] == OpEvent(5, 1, "MERGE", None, 1.0, None)


def test_unknown_ops_take_no_step_and_dead_refs_warn_but_map(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        {"op": "SOURCE_FETCH", "fields": {"origin": "unauthenticated_web"}},
        {"op": "HUMAN_REVIEW"},
        "",
        {"op": "SOURCE_FETCH"},
        {"op": "MERGE", "merge_with": ["nope", 1]},  # line 1's step id is "1"
        {"op": "CACHE_READ", "fields": {"age_seconds": "7200"}},  # converted to float
    ]
    trace.write_text("\n".join(json.dumps(x) if x else "" for x in lines) + "\n")
    loaded = load_lab_trace(trace, decision_every=5)
    s = loaded.summary
    assert (s["n_records"], s["n_mapped"], s["n_skipped"]) == (5, 4, 1)
    assert s["skipped_by_reason"] == {"unknown op 'HUMAN_REVIEW'": 1}
    assert s["warnings"] == {"merge_with ref 'nope' not live": 1}
    assert s["rule_hits"] == {
        "fallback_model@LLM_TRANSFORM": 0,
        "stale_cache@CACHE_READ": 1,
        "tool_flaky@TOOL_CALL": 0,
        "unverified_web@SOURCE_FETCH": 1,
    }
    merges = [e for e in loaded.events if isinstance(e, Merge)]
    assert merges == [Merge(3, 3, (2, 1))]
    first_fetch = loaded.events[1]
    assert isinstance(first_fetch, NewValue)
    assert first_fetch.taint == "taint:unverified_web:1"
    assert not any(isinstance(e, Decision | Retire) for e in loaded.events)


def test_seventh_recent_retires_the_oldest(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "SOURCE_FETCH"}\n' * 8)
    events = load_lab_trace(trace, decision_every=100).events
    assert [e for e in events if isinstance(e, Retire)] == [Retire(7, 0), Retire(8, 1)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json\n", "t.jsonl:2: malformed JSON"),
        ('{"step": "s1"}\n', "t.jsonl:2: op: expected a string"),
        ("[1]\n", "t.jsonl:2: expected a JSON object"),
        ('{"op": "MERGE", "merge_with": "s1"}\n', "t.jsonl:2: merge_with: expected a list"),
    ],
)
def test_broken_records_are_errors_naming_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "SOURCE_FETCH"}\n' + text)
    with pytest.raises(TraceError, match=expected):
        load_lab_trace(trace)


def test_a_trace_with_no_known_op_is_an_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "NOPE"}\n')
    with pytest.raises(TraceError, match="none of the 1 records"):
        load_lab_trace(trace)


def test_bad_rule_names_file_rule_and_key(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "rules:\n  - {taint: x, op: fetch, when: {always: true}, axis: freshness, factor: 0.5}\n"
    )
    with pytest.raises(TraceError, match=r"r.yaml:2: rules\[0\].op: expected one of SOURCE_FETCH"):
        load_lab_trace(DATA / "sample.jsonl", rules)
