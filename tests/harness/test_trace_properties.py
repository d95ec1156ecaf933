"""Property tests: any well-formed trace yields a replayable event stream; any
malformed input yields a named TraceError, never another exception."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.events import Decision, Event, Merge, NewValue, OpEvent, Retire
from harness.trace import MAX_RECENTS, TraceError, load_trace

_RULES = """\
- {taint: unverified_web, op: fetch, when: {field: ok, equals: false},
   axis: verification, factor: 0.45}
- {taint: tool_flaky, op: tool_call, when: {field: status, not_equals: ok},
   axis: tool_integrity, factor: 0.65}
- {taint: stale_cache, op: cache_read, when: {field: age, gt: 100}, axis: freshness, factor: 0.7}
- {op: db_query, when: {always: true}, axis: freshness, factor: 0.9}
"""

_OPS = ("fetch", "cache_read", "llm_call", "tool_call", "merge", "decision", "ping", "db_query")


@st.composite
def _traces(draw: st.DrawFn) -> list[dict[str, object]]:
    n = draw(st.integers(1, 60))
    step = draw(st.integers(0, 3))
    fetch_steps: list[int] = []
    records: list[dict[str, object]] = []
    for i in range(n):
        step += draw(st.integers(1, 4)) if i else 0
        op = draw(st.sampled_from(_OPS))
        if i == 0 and step == 0:
            op = "fetch"
        fields: dict[str, object] = {
            "ok": draw(st.booleans()),
            "status": draw(st.sampled_from(["ok", "error"])),
            "age": draw(st.integers(0, 200)),
        }
        record: dict[str, object] = {"step": step, "op": op, "fields": fields}
        if op == "merge" and fetch_steps and draw(st.booleans()):
            k = draw(st.integers(1, min(3, len(fetch_steps))))
            record["merge_with"] = draw(
                st.lists(st.sampled_from(fetch_steps), min_size=k, max_size=k)
            )
        if op == "fetch":
            fetch_steps.append(step)
        records.append(record)
    return records


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check_stream(events: list[Event]) -> None:
    live: set[int] = set()
    created: set[int] = set()
    hop_steps: list[int] = []
    last_step = -1
    for event in events:
        assert event.step >= last_step
        if event.step > last_step:
            # A fetch or merge emits its value before the retire it causes at the same
            # step (generator order), so the bound holds between steps.
            assert len(live) <= MAX_RECENTS + 1
        last_step = event.step
        if isinstance(event, NewValue):
            assert event.value_id not in created
            created.add(event.value_id)
            live.add(event.value_id)
            hop_steps.append(event.step)
        elif isinstance(event, Merge):
            assert event.value_id not in created
            assert len(event.inputs) >= 2
            assert len(set(event.inputs)) == len(event.inputs)
            assert set(event.inputs) <= live
            created.add(event.value_id)
            live.add(event.value_id)
            hop_steps.append(event.step)
        elif isinstance(event, OpEvent):
            assert event.value_id in live
            hop_steps.append(event.step)
        elif isinstance(event, Retire):
            assert event.value_id in live
            live.remove(event.value_id)
        elif isinstance(event, Decision):
            assert event.value_id in live
    assert len(live) <= MAX_RECENTS + 1
    # One hop per step: hop ids h{step:06d} never collide.
    assert len(hop_steps) == len(set(hop_steps))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=_traces(), decision_every=st.sampled_from([None, 1, 5]))
def test_any_wellformed_trace_gives_a_replayable_stream(
    tmp_path: Path, records: list[dict[str, object]], decision_every: int | None
) -> None:
    trace = _write(tmp_path, "t.jsonl", [json.dumps(r) for r in records])
    rules = tmp_path / "rules.yaml"
    rules.write_text(_RULES, encoding="utf-8")
    try:
        loaded = load_trace(trace, rules, decision_every=decision_every)
    except TraceError as exc:
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        # The only refusal a generated trace may meet: every op unknown.
        assert "none of the" in refusal
        assert all(r["op"] == "ping" for r in records)
        return
    _check_stream(loaded.events)
    summary = loaded.summary
    assert summary["records_read"] == len(records)
    assert json.loads(json.dumps(summary)) == summary
    decisions = summary["decisions"]
    assert isinstance(decisions, dict)
    assert decisions["total"] == sum(isinstance(e, Decision) for e in loaded.events)


_JSON_ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4), st.floats(allow_nan=False)
)
_JSON = st.recursive(
    _JSON_ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["step", "op", "fields", "ts", "merge_with", "x"]), inner),
    ),
    max_leaves=8,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.one_of(_JSON.map(json.dumps), st.text(max_size=20)), min_size=1, max_size=4)
)
def test_malformed_lines_raise_only_trace_errors_naming_the_file(
    tmp_path: Path, lines: list[str]
) -> None:
    trace = _write(tmp_path, "t.jsonl", [line.replace("\n", " ") for line in lines])
    try:
        load_trace(trace, None)
    except TraceError as exc:
        message = str(exc)
    else:
        message = str(trace)
    assert message.startswith(str(trace))


_RULE_KEYS = st.sampled_from(
    ["taint", "op", "when", "axis", "factor", "field", "equals", "gt", "lt", "always", "rules"]
)
_RULE_ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 5),
    st.floats(-1, 2, allow_nan=False),
    st.sampled_from(["tool_call", "fetch", "freshness", "reconstruction", "t", "Bad:x", "merge"]),
)
_RULE_DOCS = st.recursive(
    _RULE_ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_RULE_KEYS, inner, max_size=5)
    ),
    max_leaves=12,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=_RULE_DOCS)
def test_arbitrary_rules_yaml_loads_or_raises_a_named_error(
    tmp_path: Path, document: object
) -> None:
    import yaml

    from harness.trace import load_rules

    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(document), encoding="utf-8")
    try:
        parsed = load_rules(rules)
    except TraceError as exc:
        message = str(exc)
    else:
        message = str(rules)
        assert all(r.taint is not None or r.axis is not None for r in parsed)
    assert message.startswith(str(rules))
