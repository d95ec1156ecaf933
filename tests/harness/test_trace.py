"""Trace mode: JSONL records and taint rules mapped onto the event model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.events import Decision, Merge, NewValue, Op, OpEvent, Retire
from harness.trace import MAX_RECENTS, TraceError, load_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "experiments" / "examples"

_RULES = """\
- taint: unverified_web
  op: fetch
  when: {field: verified, equals: false}
  axis: verification
  factor: 0.45
- taint: tool_flaky
  op: tool_call
  when: {field: status, not_equals: ok}
  axis: tool_integrity
  factor: 0.65
"""


def _trace(tmp_path: Path, *records: dict[str, object] | str) -> Path:
    path = tmp_path / "trace.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _rules(tmp_path: Path, text: str = _RULES) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _rec(step: int, op: str, **fields: object) -> dict[str, object]:
    return {"step": step, "op": op, "fields": fields}


def test_minimal_example_maps_every_record_kind_to_the_documented_events() -> None:
    loaded = load_trace(EXAMPLES / "trace-minimal.jsonl", EXAMPLES / "rules-research.yaml")
    assert loaded.events == [
        NewValue(step=1, value_id=0, unverified=False),
        OpEvent(step=2, value_id=0, op=Op.LLM_TRANSFORM, axis=None, factor=1.0, taint=None),
        NewValue(
            step=3,
            value_id=1,
            unverified=False,
            axis="verification",
            factor=0.45,
            taint="taint:unverified_web:3",
        ),
        OpEvent(4, 1, Op.TOOL_CALL, "tool_integrity", 0.65, "taint:tool_flaky:4"),
        OpEvent(5, 1, Op.CACHE_READ, "freshness", 0.70, "taint:stale_cache:5"),
        Decision(step=5, value_id=1),
        Merge(step=7, value_id=2, inputs=(1, 0)),
        OpEvent(8, 2, Op.LLM_TRANSFORM, "capability", 0.65, "taint:fallback_model:8"),
        Decision(step=9, value_id=2),
        OpEvent(10, 2, Op.TOOL_CALL, None, 1.0, None),
        Decision(step=10, value_id=2),
        OpEvent(12, 2, "db_query", "freshness", 0.70, "taint:stale_cache:12"),
    ]
    summary = loaded.summary
    assert summary["records_read"] == 12
    assert summary["ops_skipped"] == {"heartbeat": 1, "user_message": 1}
    assert summary["values"] == {"created": 2, "merged": 1, "retired": 0}
    assert summary["decisions"] == {"total": 3, "periodic": 2, "explicit": 1}
    assert summary["taints_total"] == 5
    assert json.loads(json.dumps(summary)) == summary


def test_research_example_summary_accounts_for_every_record() -> None:
    loaded = load_trace(EXAMPLES / "trace-research.jsonl", EXAMPLES / "rules-research.yaml")
    s = loaded.summary
    mapped, skipped = s["ops_mapped"], s["ops_skipped"]
    assert isinstance(mapped, dict)
    assert isinstance(skipped, dict)
    assert sum(mapped.values()) + sum(skipped.values()) == s["records_read"] == 400
    assert set(skipped) == {"heartbeat", "user_message"}
    n_hop_events = sum(isinstance(e, NewValue | OpEvent | Merge) for e in loaded.events)
    decisions = s["decisions"]
    assert isinstance(decisions, dict)
    assert n_hop_events + decisions["explicit"] == s["records_mapped"]
    assert sum(isinstance(e, Decision) for e in loaded.events) == decisions["total"]
    assert sum(isinstance(e, Retire) for e in loaded.events) == 76 + 21 - 1 - MAX_RECENTS


def test_trace_not_starting_with_fetch_gets_an_implicit_clean_value_at_step_zero(
    tmp_path: Path,
) -> None:
    loaded = load_trace(_trace(tmp_path, _rec(1, "tool_call", status="ok")), None)
    assert loaded.events[0] == NewValue(step=0, value_id=0, unverified=False)
    assert loaded.summary["implicit_initial_value"] is True


def test_step_zero_cannot_be_a_non_fetch_record(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"trace\.jsonl:1: step: 0 is taken by the implicit"):
        load_trace(_trace(tmp_path, _rec(0, "tool_call")), None)


def test_seventh_replacement_retires_the_oldest_value_like_the_generator(tmp_path: Path) -> None:
    path = _trace(tmp_path, *(_rec(step, "fetch") for step in range(1, 9)))
    retires = [e for e in load_trace(path, None).events if isinstance(e, Retire)]
    assert retires == [Retire(step=8, value_id=0)]


def test_merge_drops_retired_and_duplicate_inputs_and_counts_them(tmp_path: Path) -> None:
    records = [_rec(step, "fetch") for step in range(1, 9)]  # value 0 retired at step 8
    records.append({"step": 9, "op": "merge", "fields": {}, "merge_with": [1, 2, 2, 8]})
    loaded = load_trace(_trace(tmp_path, *records), None)
    merge = next(e for e in loaded.events if isinstance(e, Merge))
    assert merge == Merge(step=9, value_id=8, inputs=(7, 1))
    assert loaded.summary["merge_inputs_dropped"] == {
        "retired": 1,
        "duplicate": 2,
        "merges_without_live_input": 0,
    }


def test_merge_without_merge_with_is_a_plain_op_on_the_working_value(tmp_path: Path) -> None:
    loaded = load_trace(_trace(tmp_path, _rec(1, "fetch"), _rec(2, "merge")), None)
    assert loaded.events[-1] == OpEvent(2, 0, Op.MERGE, None, 1.0, None)


def test_first_matching_rule_wins(tmp_path: Path) -> None:
    rules = _rules(
        tmp_path,
        "- {taint: first, op: tool_call, when: {always: true}}\n"
        "- {taint: second, op: TOOL_CALL, when: {always: true}}\n",
    )
    loaded = load_trace(_trace(tmp_path, _rec(1, "fetch"), _rec(2, "Tool_Call")), rules)
    assert loaded.events[-1] == OpEvent(2, 0, Op.TOOL_CALL, None, 1.0, "taint:first:2")
    derived = loaded.summary["taints_derived"]
    assert isinstance(derived, list)
    assert [d["matched"] for d in derived] == [1, 0]


def test_equals_never_confuses_booleans_with_numbers(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "- {taint: t, op: tool_call, when: {field: ok, equals: 1}}\n")
    loaded = load_trace(
        _trace(
            tmp_path, _rec(1, "fetch"), _rec(2, "tool_call", ok=True), _rec(3, "tool_call", ok=1)
        ),
        rules,
    )
    taints = [e.taint for e in loaded.events if isinstance(e, OpEvent)]
    assert taints == [None, "taint:t:3"]


def test_condition_on_missing_field_does_not_hold_and_is_counted(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "- {taint: t, op: tool_call, when: {field: a.b, not_equals: x}}\n")
    loaded = load_trace(
        _trace(
            tmp_path,
            _rec(1, "fetch"),
            _rec(2, "tool_call", a={"c": 1}),
            _rec(3, "tool_call", a={"b": "y"}),
        ),
        rules,
    )
    assert [e.taint for e in loaded.events if isinstance(e, OpEvent)] == [None, "taint:t:3"]
    derived = loaded.summary["taints_derived"]
    assert isinstance(derived, list)
    assert (derived[0]["matched"], derived[0]["field_missing"]) == (1, 1)


def test_gt_on_a_non_number_field_names_line_field_and_rule(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "- {taint: t, op: cache_read, when: {field: age_s, gt: 3600}}\n")
    path = _trace(tmp_path, _rec(1, "fetch"), _rec(2, "cache_read", age_s="old"))
    with pytest.raises(TraceError) as info:
        load_trace(path, rules)
    assert str(info.value) == (
        f"{path}:2: fields.age_s: expected a number for rules[0] (age_s > 3600), got str 'old'"
    )


def test_unknown_ops_are_skipped_and_rule_named_ops_are_mapped(tmp_path: Path) -> None:
    rules = _rules(
        tmp_path, "- {op: db_query, when: {always: true}, axis: freshness, factor: 0.7}\n"
    )
    loaded = load_trace(
        _trace(tmp_path, _rec(1, "fetch"), _rec(2, "db_query"), _rec(3, "ping"), _rec(4, "ping")),
        rules,
    )
    assert loaded.events[-1] == OpEvent(2, 0, "db_query", "freshness", 0.7, None)
    assert loaded.summary["ops_skipped"] == {"ping": 2}
    assert loaded.summary["records_skipped"] == 2


def test_without_rules_no_record_degrades_or_taints(tmp_path: Path) -> None:
    loaded = load_trace(
        _trace(tmp_path, _rec(1, "fetch", verified=False), _rec(2, "tool_call", status="error")),
        None,
    )
    for event in loaded.events:
        if isinstance(event, NewValue | OpEvent):
            assert (event.axis, event.taint) == (None, None)


def test_decision_every_none_leaves_only_explicit_decisions(tmp_path: Path) -> None:
    path = _trace(tmp_path, _rec(5, "fetch"), _rec(10, "llm_call"), _rec(11, "decision"))
    periodic = load_trace(path, None)
    explicit = load_trace(path, None, decision_every=None)
    assert [e for e in periodic.events if isinstance(e, Decision)] == [
        Decision(5, 0),
        Decision(10, 0),
        Decision(11, 0),
    ]
    assert [e for e in explicit.events if isinstance(e, Decision)] == [Decision(11, 0)]


def test_explicit_decision_on_a_periodic_step_decides_once(tmp_path: Path) -> None:
    loaded = load_trace(_trace(tmp_path, _rec(1, "fetch"), _rec(5, "decision")), None)
    assert [e for e in loaded.events if isinstance(e, Decision)] == [Decision(5, 0)]


_GOOD = '{"step": 1, "op": "fetch", "fields": {}}'


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([_GOOD, '{"step": 2, "op": "x", '], ":2: malformed JSON (Expecting property name"),
        ([_GOOD, "[1, 2]"], ":2: expected a JSON object {step, op, fields, ts?, merge_with?}"),
        (['{"op": "fetch", "fields": {}}'], ":1: step: missing key (expected an integer >= 0)"),
        (['{"step": 1, "fields": {}}'], ":1: op: missing key (expected a non-empty string)"),
        (['{"step": 1, "op": "fetch"}'], ":1: fields: missing key (expected an object)"),
        (['{"step": "1", "op": "fetch", "fields": {}}'], ":1: step: expected an integer >= 0"),
        (['{"step": true, "op": "fetch", "fields": {}}'], ":1: step: expected an integer >= 0"),
        (['{"step": -3, "op": "fetch", "fields": {}}'], ":1: step: expected an integer >= 0"),
        (['{"step": 1, "op": "", "fields": {}}'], ":1: op: expected a non-empty string"),
        (
            ['{"step": 1, "op": "fetch", "fields": []}'],
            ":1: fields: expected an object, got a list",
        ),
        (['{"step": 1, "op": "fetch", "fields": {}, "ts": false}'], ":1: ts: expected a string"),
        (['{"step": 1, "op": "fetch", "fields": {}, "who": 1}'], ":1: who: unknown key"),
        (
            [_GOOD, '{"step": 2, "op": "merge", "fields": {}, "merge_with": 1}'],
            ":2: merge_with: expected a non-empty list of steps",
        ),
        (
            [_GOOD, '{"step": 2, "op": "merge", "fields": {}, "merge_with": ["1"]}'],
            ":2: merge_with[0]: expected the step of an earlier record",
        ),
        (
            [_GOOD, '{"step": 2, "op": "merge", "fields": {}, "merge_with": [2]}'],
            ":2: merge_with[0]: step 2 is not earlier than this record's step 2",
        ),
        (
            [_GOOD, '{"step": 3, "op": "merge", "fields": {}, "merge_with": [2]}'],
            ":2: merge_with[0]: no value was created at step 2",
        ),
        (
            [_GOOD, '{"step": 2, "op": "fetch", "fields": {}, "merge_with": [1]}'],
            ":2: merge_with: not allowed on a fetch record",
        ),
        ([_GOOD, _GOOD], ":2: step: 1 does not increase (line 1 had step 1)"),
        (
            ['{"step": 1, "op": "fetch", "fields": {"a": 1, "a": 2}}'],
            ":1: duplicate key 'a' in one JSON object",
        ),
        (["", "  "], ": no records (expected JSON objects, one per line)"),
        (
            ['{"step": 1, "op": "ping", "fields": {}}'],
            ": none of the 1 records has an op that maps",
        ),
    ],
)
def test_bad_trace_line_error_names_file_line_and_key(
    tmp_path: Path, lines: list[str], expected: str
) -> None:
    path = _trace(tmp_path, *lines)
    with pytest.raises(TraceError) as info:
        load_trace(path, None)
    assert f"{path}{expected}" in str(info.value)


def test_trace_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(_GOOD.encode() + b"\n" + b'{"step": 2, "op": "\xff"}\n')
    with pytest.raises(TraceError, match=r"trace\.jsonl:\d+: not UTF-8"):
        load_trace(path, None)


def test_byte_order_mark_before_the_first_record_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _GOOD.encode() + b"\n")
    assert load_trace(path, None).events == [NewValue(step=1, value_id=0, unverified=False)]


def test_missing_trace_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"absent\.jsonl: file not found"):
        load_trace(tmp_path / "absent.jsonl", None)


_RULE = "- taint: t\n  op: tool_call\n  when: {always: true}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- [1\n", ":2: invalid YAML"),
        ("taint: t\n", ":1: expected a list of taint rules"),
        ("- 3\n", ":1: rules[0]: expected a rule mapping"),
        (_RULE + "  colour: red\n", ":4: rules[0].colour: unknown key"),
        ("- {taint: t, when: {always: true}}\n", ":1: rules[0].op: expected the trace op"),
        ("- {taint: t, op: decision, when: {always: true}}\n", ":1: rules[0].op: decision records"),
        ("- {taint: t, op: merge, when: {always: true}}\n", ":1: rules[0].op: merge hops carry no"),
        (_RULE.replace("taint: t", "taint: 'Bad:Name'"), ":1: rules[0].taint: expected a taint"),
        (_RULE + "  axis: reconstruction\n  factor: 0.5\n", "degraded only by compaction"),
        (_RULE + "  axis: speed\n  factor: 0.5\n", ":4: rules[0].axis: expected one of freshness"),
        (_RULE + "  axis: freshness\n  factor: 1.5\n", ":5: rules[0].factor: expected a number in"),
        (_RULE + "  axis: freshness\n", ":1: rules[0].factor: expected a number in [0, 1]"),
        (_RULE + "  factor: 0.5\n", ":4: rules[0].factor: given without an axis"),
        ("- {op: tool_call, when: {always: true}}\n", ":1: rules[0].taint: a rule needs a taint"),
        ("- {taint: t, op: tool_call}\n", ":1: rules[0].when: missing"),
        (_RULE.replace("{always: true}", "{always: false}"), ":3: rules[0].when: expected exactly"),
        (_RULE.replace("{always: true}", "{equals: 1}"), ":3: rules[0].when.field: expected a"),
        (
            _RULE.replace("{always: true}", "{field: s, equals: 1, lt: 2}"),
            ":3: rules[0].when: expected exactly one of equals, not_equals, gt, lt; got 2",
        ),
        (
            _RULE.replace("{always: true}", "{field: s, above: 2}"),
            ":3: rules[0].when.above: unknown",
        ),
        (
            _RULE.replace("{always: true}", "{field: s, gt: high}"),
            ":3: rules[0].when.gt: expected a",
        ),
        (_RULE + "  op: fetch\n", ":4: invalid YAML: duplicate key 'op' (first on line 2)"),
    ],
)
def test_bad_rule_error_names_file_line_rule_index_and_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    rules = _rules(tmp_path, text)
    with pytest.raises(TraceError) as info:
        load_trace(_trace(tmp_path, _GOOD), rules)
    message = str(info.value)
    assert message.startswith(str(rules))
    assert expected in message


def test_rules_may_be_wrapped_in_a_rules_key(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "rules:\n" + _RULE.replace("- ", "  - ").replace("\n  ", "\n    "))
    loaded = load_trace(_trace(tmp_path, _GOOD, _rec(2, "tool_call")), rules)
    assert loaded.events[-1] == OpEvent(2, 0, Op.TOOL_CALL, None, 1.0, "taint:t:2")


def test_experiment_run_with_a_bad_trace_exits_two_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    path = _trace(tmp_path, _GOOD, '{"step": 2, "op": "tool_call", "fields": []}')
    code = main(
        [
            "experiment",
            "run",
            "--trace",
            str(path),
            "--trace-format",
            "provnet",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"provnet: error: {path}:2: fields: expected an object, got a list" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "gate_metrics.csv").exists()


def test_experiment_run_with_a_bad_rule_exits_two_naming_rule_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    rules = _rules(tmp_path, _RULE + "  axis: freshness\n  factor: 2\n")
    trace = str(_trace(tmp_path, _GOOD))
    out = str(tmp_path / "out")
    code = main(
        [
            "experiment",
            "run",
            "--trace",
            trace,
            "--trace-format",
            "provnet",
            "--rules",
            str(rules),
            "--out",
            out,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert f"provnet: error: {rules}:5: rules[0].factor: expected a number in [0, 1]" in err


def test_truncated_record_error_points_at_the_column_where_the_line_ends(
    tmp_path: Path,
) -> None:
    # The line's own newline is not part of the record: the missing value is
    # reported where the text stops, not at "column 1" of a phantom next line.
    truncated = '{"step": 2, "op": '
    path = _trace(tmp_path, _GOOD, truncated)
    with pytest.raises(TraceError) as info:
        load_trace(path, None)
    assert f":2: malformed JSON (Expecting value at column {len(truncated) + 1})" in str(info.value)
