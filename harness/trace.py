"""Trace mode: replay a real agent log through the four arms (Part 5, "Run it").

Synthetic trajectories are the experiment's honest limitation; trace mode
swaps the generator (:mod:`harness.trajectory`) for a JSONL log of what an
agent actually did, and YAML *taint rules* that say which records degrade an
axis or attach a taint. The oracle is then a full-provenance replay of the
same trace.

Trace records (one JSON object per line; blank lines ignored)::

    {"step": 12, "op": "tool_call", "ts": "2026-11-29T10:00:00Z",
     "fields": {"status": "timeout"}, "merge_with": [3, 7]}

``step`` (integer >= 0, strictly increasing — hop ids are ``h{step:06d}``),
``op`` (string) and ``fields`` (object) are required; ``ts`` (string or
number) is kept only for the reader; ``merge_with`` lists the steps of the
records that created the values to merge with the working value.

Op mapping (case-insensitive; aliases in :data:`BUILTIN_OPS`):

* ``fetch`` → a new value (:class:`~harness.events.NewValue`) that becomes
  the working value; the old working value joins the recents list (at most
  6; the oldest beyond that is retired with a :class:`~harness.events.Retire`
  event at that step), exactly as the synthetic generator does.
* ``cache_read``, ``llm_transform``/``llm_call``, ``tool_call``, ``merge``
  and every op named by a taint rule → an :class:`~harness.events.OpEvent` on
  the working value; with ``merge_with`` → a :class:`~harness.events.Merge`
  of the working value and the named live values (in that order), which then
  becomes the working value. Merge hops carry no axis and no taint (as in the
  generator); taint rules are not evaluated for them. Inputs that are already
  retired, or are the working value itself, are dropped and counted; a merge
  left with no other input is recorded as a plain op.
* ``decision`` → a decision point on the working value (no hop).
* anything else → skipped, and counted by op in the summary.

A decision point is also emitted after every mapped record whose step is a
multiple of ``decision_every`` (5 by default, the lab's ``D``; ``None``
turns this off so only ``decision`` records decide). If the first mapped
record is not a fetch, an implicit clean fetch at step 0 creates value 0
(that record's step must then be >= 1).

Taint rules (:mod:`harness.trace_rules`): for each fetch or op record the
rules are tried in file order; the first rule whose ``op`` matches (same
aliases as above) and whose ``when`` holds wins, giving the hop's
axis/factor and its taint id ``taint:{taint}:{step}`` — the same id shape as
the synthetic generator, so the nine gates' prefixes
(``taint:unverified_web:`` …) apply unchanged. Without a rules file no record
degrades an axis or carries a taint.

Every bad input raises :class:`TraceError` (a :class:`harness.cli_errors.UsageError`)
naming the file, the line (trace) or rule index and key (rules), and what was
expected.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from harness.events import Decision, Event, Merge, NewValue, Op, OpEvent, Retire
from harness.trace_rules import (
    BUILTIN_OPS,
    OpKind,
    Outcome,
    TaintRule,
    TraceError,
    describe_value,
    is_number,
    load_rules,
    op_name,
)

__all__ = ["MAX_RECENTS", "LoadedTrace", "TraceError", "load_rules", "load_trace"]

#: Recents list length, as in the synthetic generator (spec §2).
MAX_RECENTS = 6


_RECORD_KEYS = ("step", "op", "ts", "fields", "merge_with")


@dataclass(frozen=True, slots=True)
class LoadedTrace:
    """Events ready for replay plus a JSON-serialisable mapping summary."""

    events: list[Event]
    summary: dict[str, object]


# ---------------------------------------------------------------- trace


@dataclass(slots=True)
class _RuleStats:
    matched: int = 0
    field_missing: int = 0


@dataclass(slots=True)
class _Builder:
    """Turns records into events, keeping the generator's value topology."""

    path: Path
    rules: tuple[TaintRule, ...]
    decision_every: int | None
    events: list[Event] = field(default_factory=list)
    working: int | None = None
    recents: list[int] = field(default_factory=list)
    next_id: int = 0
    created_at: dict[int, int] = field(default_factory=dict)  # step -> value id
    retired: set[int] = field(default_factory=set)
    rule_stats: list[_RuleStats] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    ops_mapped: Counter[str] = field(default_factory=Counter)
    ops_skipped: Counter[str] = field(default_factory=Counter)
    implicit_initial: bool = False

    def fail(self, line: int, message: str) -> TraceError:
        return TraceError(f"{self.path}:{line}: {message}")

    def _new_id(self, step: int) -> int:
        value_id = self.next_id
        self.next_id += 1
        self.created_at[step] = value_id
        return value_id

    def _replace_working(self, step: int, value_id: int) -> None:
        if self.working is not None:
            self.recents.append(self.working)
            if len(self.recents) > MAX_RECENTS:
                oldest = self.recents.pop(0)
                self.retired.add(oldest)
                self.events.append(Retire(step=step, value_id=oldest))
                self.counts["retired"] += 1
        self.working = value_id

    def _ensure_working(self, step: int, line: int) -> int:
        if self.working is None:
            if step < 1:
                raise self.fail(
                    line,
                    "step: 0 is taken by the implicit initial fetch (the trace does not "
                    "start with a fetch); start at step 1 or begin with a fetch record",
                )
            self.events.append(NewValue(step=0, value_id=self._new_id(0), unverified=False))
            self.working = 0
            self.implicit_initial = True
            self.counts["created"] += 1
        return self.working

    def _match(self, name: str, fields: dict[str, Any], line: int) -> TaintRule | None:
        """The first rule for op ``name`` whose condition holds (spec: first match wins)."""
        for rule in self.rules:
            if not rule.applies_to(name):
                continue
            outcome, value = rule.evaluate(fields)
            match outcome:
                case Outcome.HOLDS:
                    self.rule_stats[rule.index].matched += 1
                    return rule
                case Outcome.FIELD_MISSING:
                    self.rule_stats[rule.index].field_missing += 1
                case Outcome.NOT_A_NUMBER:
                    raise self.fail(
                        line,
                        f"fields.{rule.when.field}: expected a number for rules[{rule.index}] "
                        f"({rule.when.describe()}), got {describe_value(value)}",
                    )
                case Outcome.FAILS:
                    pass
                case _:
                    assert_never(outcome)
        return None

    def record(
        self, line: int, step: int, op: str, fields: dict[str, Any], merge_with: list[int] | None
    ) -> None:
        builtin = BUILTIN_OPS.get(op.lower())
        name = op_name(op)
        if builtin is not None:
            kind = builtin[0]
        elif any(r.applies_to(name) for r in self.rules):
            kind = OpKind.OP
        else:
            self.ops_skipped[op] += 1
            return
        if merge_with is not None and kind is not OpKind.OP:
            raise self.fail(
                line,
                f"merge_with: not allowed on a {kind.value} record (only on ops that act "
                "on the working value)",
            )
        self.ops_mapped[name] += 1
        decided = False
        if kind is OpKind.FETCH:
            rule = self._match(name, fields, line)
            value_id = self._new_id(step)
            if rule is None:
                self.events.append(NewValue(step=step, value_id=value_id, unverified=False))
            else:
                self.events.append(
                    NewValue(
                        step=step,
                        value_id=value_id,
                        unverified=False,
                        axis=rule.axis,
                        factor=rule.factor,
                        taint=None if rule.taint is None else f"taint:{rule.taint}:{step}",
                    )
                )
            self.counts["created"] += 1
            self._replace_working(step, value_id)
        elif kind is OpKind.DECISION:
            working = self._ensure_working(step, line)
            self.events.append(Decision(step=step, value_id=working))
            self.counts["decisions_explicit"] += 1
            decided = True
        elif merge_with is not None:
            working = self._ensure_working(step, line)
            inputs = [working]
            for i, ref in enumerate(merge_with):
                if ref not in self.created_at:
                    raise self.fail(
                        line,
                        f"merge_with[{i}]: no value was created at step {ref} (expected the "
                        "step of an earlier fetch or merge record)",
                    )
                value_id = self.created_at[ref]
                if value_id in self.retired:
                    self.counts["merge_inputs_retired"] += 1
                elif value_id in inputs:
                    self.counts["merge_inputs_duplicate"] += 1
                else:
                    inputs.append(value_id)
            if len(inputs) == 1:
                self.counts["merges_without_live_input"] += 1
                self.events.append(
                    OpEvent(step=step, value_id=working, op=name, axis=None, factor=1.0, taint=None)
                )
            else:
                merged = self._new_id(step)
                self.events.append(Merge(step=step, value_id=merged, inputs=tuple(inputs), op=name))
                self.counts["merged"] += 1
                self._replace_working(step, merged)
        else:
            working = self._ensure_working(step, line)
            rule = self._match(name, fields, line) if name != Op.MERGE else None
            self.events.append(
                OpEvent(
                    step=step,
                    value_id=working,
                    op=name,
                    axis=None if rule is None else rule.axis,
                    factor=1.0 if rule is None else rule.factor,
                    taint=None
                    if rule is None or rule.taint is None
                    else f"taint:{rule.taint}:{step}",
                )
            )
        periodic = bool(self.decision_every) and step % (self.decision_every or 1) == 0
        if not decided and periodic and self.working is not None:
            self.events.append(Decision(step=step, value_id=self.working))
            self.counts["decisions_periodic"] += 1


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys silently; a log line with two
    # "op" keys is ambiguous, so it is an error here.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _parse_record(
    path: Path, lineno: int, text: str
) -> tuple[int, str, dict[str, Any], list[int] | None]:
    def err(message: str) -> TraceError:
        return TraceError(f"{path}:{lineno}: {message}")

    try:
        record = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise err(f"malformed JSON ({exc.msg} at column {exc.colno})") from None
    except _DuplicateKey as exc:
        raise err(
            f"duplicate key {exc.key!r} in one JSON object (expected each key once)"
        ) from None
    if not isinstance(record, dict):
        raise err(
            "expected a JSON object {step, op, fields, ts?, merge_with?}, "
            f"got {describe_value(record)}"
        )
    for key in record:
        if key not in _RECORD_KEYS:
            raise err(f"{key}: unknown key (expected step, op, fields, ts, merge_with)")
    for key, what in (
        ("step", "an integer >= 0"),
        ("op", "a non-empty string"),
        ("fields", "an object"),
    ):
        if key not in record:
            raise err(f"{key}: missing key (expected {what})")
    step = record["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise err(f"step: expected an integer >= 0, got {describe_value(step)}")
    op = record["op"]
    if not isinstance(op, str) or not op.strip():
        raise err(f"op: expected a non-empty string, got {describe_value(op)}")
    fields = record["fields"]
    if not isinstance(fields, dict):
        raise err(f"fields: expected an object, got {describe_value(fields)}")
    if "ts" in record and not (isinstance(record["ts"], str) or is_number(record["ts"])):
        raise err(f"ts: expected a string or a number, got {describe_value(record['ts'])}")
    merge_with = record.get("merge_with")
    if merge_with is not None:
        if not isinstance(merge_with, list) or not merge_with:
            raise err(
                f"merge_with: expected a non-empty list of steps, got {describe_value(merge_with)}"
            )
        for i, ref in enumerate(merge_with):
            if isinstance(ref, bool) or not isinstance(ref, int) or ref < 0:
                raise err(
                    f"merge_with[{i}]: expected the step of an earlier record, "
                    f"got {describe_value(ref)}"
                )
            if ref >= step:
                raise err(
                    f"merge_with[{i}]: step {ref} is not earlier than this record's step {step}"
                )
    return step, op, fields, merge_with


def load_trace(trace: Path, rules: Path | None, *, decision_every: int | None = 5) -> LoadedTrace:
    """Read a JSONL trace (and optional taint rules) into replayable events."""
    if decision_every is not None and (isinstance(decision_every, bool) or decision_every < 1):
        raise ValueError(f"decision_every must be >= 1 or None, got {decision_every!r}")
    parsed_rules = load_rules(rules) if rules is not None else ()
    builder = _Builder(path=trace, rules=parsed_rules, decision_every=decision_every)
    builder.rule_stats = [_RuleStats() for _ in parsed_rules]
    records = 0
    previous: tuple[int, int] | None = None  # (step, line)
    first_step: int | None = None
    try:
        # utf-8-sig: a byte-order mark some editors write is not part of line 1's JSON.
        handle = trace.open("r", encoding="utf-8-sig")
    except FileNotFoundError:
        raise TraceError(f"{trace}: file not found") from None
    except OSError as exc:
        raise TraceError(f"{trace}: cannot read ({exc.strerror})") from None
    with handle:
        lineno = 0
        while True:
            try:
                text = handle.readline()
            except UnicodeDecodeError as exc:
                raise TraceError(f"{trace}:{lineno + 1}: not UTF-8 text ({exc.reason})") from None
            if not text:
                break
            lineno += 1
            if not text.strip():
                continue
            step, op, fields, merge_with = _parse_record(trace, lineno, text.rstrip("\r\n"))
            if previous is not None and step <= previous[0]:
                raise TraceError(
                    f"{trace}:{lineno}: step: {step} does not increase (line {previous[1]} had "
                    f"step {previous[0]}); hop ids are h{{step:06d}}, so steps must increase"
                )
            previous = (step, lineno)
            first_step = step if first_step is None else first_step
            records += 1
            builder.record(lineno, step, op, fields, merge_with)
    if records == 0:
        raise TraceError(f"{trace}: no records (expected JSON objects, one per line)")
    if builder.working is None:
        raise TraceError(
            f"{trace}: none of the {records} records has an op that maps to the event model "
            f"(skipped ops: {', '.join(sorted(builder.ops_skipped))})"
        )
    counts = builder.counts
    taints = [
        {
            "rule": rule.index,
            "describe": rule.describe(),
            "taint": rule.taint,
            "matched": builder.rule_stats[rule.index].matched,
            "field_missing": builder.rule_stats[rule.index].field_missing,
        }
        for rule in parsed_rules
    ]
    summary: dict[str, object] = {
        "trace": str(trace),
        "rules": None if rules is None else str(rules),
        "decision_every": decision_every,
        "records_read": records,
        "records_mapped": sum(builder.ops_mapped.values()),
        "records_skipped": sum(builder.ops_skipped.values()),
        "ops_mapped": {str(k): v for k, v in sorted(builder.ops_mapped.items())},
        "ops_skipped": dict(sorted(builder.ops_skipped.items())),
        "first_step": first_step,
        "last_step": previous[0] if previous is not None else None,
        "implicit_initial_value": builder.implicit_initial,
        "taints_derived": taints,
        "taints_total": sum(
            builder.rule_stats[r.index].matched for r in parsed_rules if r.taint is not None
        ),
        "values": {
            "created": counts["created"],
            "merged": counts["merged"],
            "retired": counts["retired"],
        },
        "merge_inputs_dropped": {
            "retired": counts["merge_inputs_retired"],
            "duplicate": counts["merge_inputs_duplicate"],
            "merges_without_live_input": counts["merges_without_live_input"],
        },
        "decisions": {
            "total": counts["decisions_periodic"] + counts["decisions_explicit"],
            "periodic": counts["decisions_periodic"],
            "explicit": counts["decisions_explicit"],
        },
        "events": len(builder.events),
    }
    return LoadedTrace(events=builder.events, summary=summary)
