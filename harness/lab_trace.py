"""Trace mode in the Part 5 lab's schema — the default trace format (spec §9).

A lab user's JSONL trace replays unchanged and yields the lab's per-cell
counts. Records (one JSON object per line; blank lines ignored)::

    {"step": "s009", "op": "MERGE", "ts": "2026-07-01T10:08:00Z",
     "fields": {...}, "merge_with": ["s001"]}

- ``op`` (required) is one of ``SOURCE_FETCH``, ``CACHE_READ``,
  ``LLM_TRANSFORM``, ``TOOL_CALL``, ``MERGE`` (exact spelling). Any other op
  is skipped and counted under ``unknown op 'X'``; a skipped record takes no
  step number. Mapped records are renumbered 1, 2, … in file order; that
  number is the hop's step (``h{step:06d}``) and the step in taint ids.
- ``step`` is any identifier, kept as a string (default: the line number);
  it only names the record for ``merge_with``. ``ts`` is informational.
- ``fields`` is an object of raw fields; anything else counts as empty.
- ``merge_with`` (MERGE only): earlier ``step`` ids, compared as strings.

Value topology mirrors the synthetic generator (spec §2): value 0 exists at
step 0 (a clean new value), one working value, at most 6 recents; a seventh
retires the oldest with a :class:`~harness.events.Retire` at that step.

- SOURCE_FETCH: a new value (next id) with the matched rule's axis, factor
  and taint; it replaces the working value.
- CACHE_READ, LLM_TRANSFORM, TOOL_CALL: an op on the working value with the
  matched rule's effect (none when no rule matched — unlike the generator,
  a clean cache read costs nothing).
- MERGE: inputs start as [working]. Each ``merge_with`` ref in order: not a
  known step id, or its value neither working nor in recents → the warning
  ``merge_with ref 'X' not live`` (the record still maps); already an input
  → ignored; else appended. Without refs, the newest recent is appended if
  there is one. Fewer than two inputs → a plain MERGE op on the working
  value; otherwise a merge (next id) that replaces the working value.
- After every mapped record whose step is a multiple of ``decision_every``,
  a decision point on the working value — except after a MERGE that found
  no second input: the lab maps it as a plain op and takes no decision
  there (its sample trace's per-cell counts show this at the MERGE of
  ``s041``, whose only ref is the working value).

Taint rules (:func:`load_lab_rules`): a YAML ``rules:`` list of ``{taint,
op, when, axis, factor}``; the first rule whose op equals the record's and
whose ``when`` holds wins, and its hit is counted under ``TAINT@OP``.
``when`` is ``{always: …}`` or ``{field: F, equals|not_equals|gt|lt: V}``:
F must be present in ``fields``; equality is plain equality of the JSON and
YAML values; ``gt``/``lt`` convert both sides to float and do not match when
either does not convert. Without a rules file the lab's four default rules
apply (:data:`DEFAULT_RULES`).

Unknown ops and dead ``merge_with`` refs are counted, never fatal;
structurally broken input (bad JSON, a record that is not an object, a
missing or non-string op, a bad rule) raises :class:`TraceError` naming the
file, the line or rule, and what was expected.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness._yaml_lines import LineDict, LineList, YamlInputError, load_yaml_with_lines
from harness.events import BASE_AXES, Decision, Event, Merge, NewValue, Op, OpEvent, Retire
from harness.trace import LoadedTrace
from harness.trace_rules import TraceError, describe_value

__all__ = [
    "DEFAULT_RULES",
    "LAB_OPS",
    "LabRule",
    "coverage_json",
    "load_lab_rules",
    "load_lab_trace",
]

#: Recents list length, as in the synthetic generator (spec §2).
_MAX_RECENTS = 6

#: The lab's five ops, exact spelling.
LAB_OPS: tuple[str, ...] = tuple(op.value for op in Op)

_COMPARATORS = ("equals", "not_equals", "gt", "lt")
_RULE_KEYS = ("taint", "op", "when", "axis", "factor")


@dataclass(frozen=True, slots=True)
class LabRule:
    """One taint rule: on ``op`` when the condition holds → axis × factor and a taint."""

    taint: str
    op: str
    always: bool
    field: str | None
    comparator: str | None
    value: object
    axis: str
    factor: float

    @property
    def label(self) -> str:
        """The hit counter's name in ``trace_coverage.json``: ``TAINT@OP``."""
        return f"{self.taint}@{self.op}"

    def matches(self, op: str, fields: dict[str, Any]) -> bool:
        if op != self.op:
            return False
        if self.always:
            return True
        if self.field is None or self.field not in fields:
            return False
        value = fields[self.field]
        match self.comparator:
            case "equals":
                return bool(value == self.value)
            case "not_equals":
                return bool(value != self.value)
            case "gt" | "lt":
                try:
                    left, right = float(value), float(self.value)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    return False
                return left > right if self.comparator == "gt" else left < right
            case _:
                return False


#: The lab's rules when no ``--taint-rules`` file is given (spec §9).
DEFAULT_RULES: tuple[LabRule, ...] = (
    LabRule(
        "unverified_web",
        Op.SOURCE_FETCH,
        False,
        "origin",
        "equals",
        "unauthenticated_web",
        "verification",
        0.45,
    ),
    LabRule("stale_cache", Op.CACHE_READ, False, "age_seconds", "gt", 3600, "freshness", 0.70),
    LabRule(
        "fallback_model",
        Op.LLM_TRANSFORM,
        False,
        "model_tier",
        "equals",
        "fallback",
        "capability",
        0.65,
    ),
    LabRule(
        "tool_flaky", Op.TOOL_CALL, False, "status", "not_equals", "ok", "tool_integrity", 0.65
    ),
)


def _parse_rule(path: Path, raw: object, index: int, line: int) -> LabRule:
    def err(key: str, message: str, at: int | None = None) -> TraceError:
        return TraceError(f"{path}:{line if at is None else at}: rules[{index}].{key}: {message}")

    if not isinstance(raw, LineDict):
        raise TraceError(
            f"{path}:{line}: rules[{index}]: expected a rule mapping "
            f"{{taint, op, when, axis, factor}}, got {describe_value(raw)}"
        )
    for key in raw:
        if key not in _RULE_KEYS:
            raise err(
                str(key), f"unknown key (expected {', '.join(_RULE_KEYS)})", raw.line_for(key)
            )
    for key in _RULE_KEYS:
        if key not in raw:
            raise err(key, "missing key")
    taint = raw["taint"]
    if not isinstance(taint, str) or not taint:
        raise err("taint", f"expected a taint name, got {describe_value(taint)}")
    op = raw["op"]
    if op not in LAB_OPS:
        raise err("op", f"expected one of {', '.join(LAB_OPS)}, got {describe_value(op)}")
    axis = raw["axis"]
    if axis not in BASE_AXES:
        raise err("axis", f"expected one of {', '.join(BASE_AXES)}, got {describe_value(axis)}")
    factor = raw["factor"]
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise err("factor", f"expected a number, got {describe_value(factor)}")
    when = raw["when"]
    at = raw.line_for("when")
    if not isinstance(when, dict):
        raise err("when", f"expected a mapping, got {describe_value(when)}", at)
    if "always" in when:
        if set(when) != {"always"}:
            raise err("when", "expected {always: …} alone", at)
        return LabRule(taint, op, True, None, None, None, axis, float(factor))
    name = when.get("field")
    if not isinstance(name, str) or not name:
        raise err("when.field", f"expected a field name, got {describe_value(name)}", at)
    comparators = [k for k in when if k != "field"]
    if len(comparators) != 1 or comparators[0] not in _COMPARATORS:
        raise err(
            "when",
            f"expected {{always: …}} or {{field: F, one of {' | '.join(_COMPARATORS)}: V}}, "
            f"got keys {sorted(map(str, when))}",
            at,
        )
    comparator = comparators[0]
    return LabRule(taint, op, False, name, comparator, when[comparator], axis, float(factor))


def load_lab_rules(path: Path) -> tuple[LabRule, ...]:
    """Parse a lab rules file (``rules:`` list); errors name file, line, rule and key."""
    try:
        data = load_yaml_with_lines(path)
    except YamlInputError as exc:
        raise TraceError(str(exc)) from None
    if not isinstance(data, LineDict) or "rules" not in data:
        raise TraceError(
            f"{path}:1: expected a mapping with a 'rules:' list, got {describe_value(data)}"
        )
    extra = [k for k in data if k != "rules"]
    if extra:
        raise TraceError(
            f"{path}:{data.line_for(extra[0])}: {extra[0]}: unknown key (expected only 'rules')"
        )
    rules = data["rules"]
    if not isinstance(rules, LineList):
        raise TraceError(
            f"{path}:{data.line_for('rules')}: rules: expected a list, got {describe_value(rules)}"
        )
    return tuple(_parse_rule(path, raw, i, rules.line_for(i)) for i, raw in enumerate(rules))


@dataclass(slots=True)
class _Builder:
    rules: tuple[LabRule, ...]
    decision_every: int
    events: list[Event] = field(default_factory=list)
    working: int = 0
    recents: list[int] = field(default_factory=list)
    next_id: int = 1
    step: int = 0
    value_of: dict[str, int] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)
    hits: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.events.append(NewValue(step=0, value_id=0, unverified=False))
        for rule in self.rules:
            self.hits[rule.label] += 0

    def _replace_working(self, value_id: int) -> None:
        self.recents.append(self.working)
        if len(self.recents) > _MAX_RECENTS:
            self.events.append(Retire(step=self.step, value_id=self.recents.pop(0)))
        self.working = value_id

    def _match(self, op: str, fields: dict[str, Any]) -> LabRule | None:
        for rule in self.rules:
            if rule.matches(op, fields):
                self.hits[rule.label] += 1
                return rule
        return None

    def record(self, op: str, step_id: str, fields: dict[str, Any], refs: list[str]) -> None:
        if op not in LAB_OPS:
            self.skipped[f"unknown op {op!r}"] += 1
            return
        self.step += 1
        step = self.step
        if op == Op.MERGE:
            if self._merge(step, step_id, refs) and step % self.decision_every == 0:
                self.events.append(Decision(step=step, value_id=self.working))
        else:
            rule = self._match(op, fields)
            axis = None if rule is None else rule.axis
            factor = 1.0 if rule is None else rule.factor
            taint = None if rule is None else f"taint:{rule.taint}:{step}"
            if op == Op.SOURCE_FETCH:
                value_id = self.next_id
                self.next_id += 1
                self.events.append(NewValue(step, value_id, False, op, axis, factor, taint))
                self.value_of[step_id] = value_id
                self._replace_working(value_id)
            else:
                self.events.append(OpEvent(step, self.working, op, axis, factor, taint))
            if step % self.decision_every == 0:
                self.events.append(Decision(step=step, value_id=self.working))

    def _merge(self, step: int, step_id: str, refs: list[str]) -> bool:
        """Map one MERGE; False when it found no second input (a plain op)."""
        inputs = [self.working]
        if refs:
            for ref in refs:
                value_id = self.value_of.get(ref)
                if value_id is None or (value_id != self.working and value_id not in self.recents):
                    self.warnings[f"merge_with ref {ref!r} not live"] += 1
                elif value_id not in inputs:
                    inputs.append(value_id)
        elif self.recents:
            inputs.append(self.recents[-1])
        if len(inputs) < 2:
            self.events.append(OpEvent(step, self.working, Op.MERGE, None, 1.0, None))
            return False
        value_id = self.next_id
        self.next_id += 1
        self.events.append(Merge(step, value_id, tuple(inputs)))
        self.value_of[step_id] = value_id
        self._replace_working(value_id)
        return True


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r} in one JSON object (expected each key once)")
        result[key] = value
    return result


def _step_id(value: object) -> str:
    # JSON numbers keep their JSON spelling (5 → "5"), so `"merge_with": [5]` and
    # `"step": 5` meet, as they do when both are strings.
    if isinstance(value, str):
        return value
    return json.dumps(value)


def load_lab_trace(
    trace: Path, rules: Path | None = None, *, decision_every: int = 5
) -> LoadedTrace:
    """Read a lab-schema JSONL trace into replayable events and its coverage summary."""
    if isinstance(decision_every, bool) or decision_every < 1:
        raise ValueError(f"decision_every must be >= 1, got {decision_every!r}")
    parsed = load_lab_rules(rules) if rules is not None else DEFAULT_RULES
    builder = _Builder(rules=parsed, decision_every=decision_every)
    try:
        raw = trace.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{trace}: file not found") from None
    except IsADirectoryError:
        raise TraceError(f"{trace}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise TraceError(f"{trace}: cannot read ({exc.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    n_records = 0
    for lineno, line_bytes in enumerate(raw.splitlines(), start=1):
        try:
            text = line_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(f"{trace}:{lineno}: not UTF-8 text ({exc.reason})") from None
        if not text.strip():
            continue
        n_records += 1
        try:
            record = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"{trace}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})"
            ) from None
        except ValueError as exc:
            raise TraceError(f"{trace}:{lineno}: {exc}") from None
        if not isinstance(record, dict):
            raise TraceError(
                f"{trace}:{lineno}: expected a JSON object {{op, step?, ts?, fields?, "
                f"merge_with?}}, got {describe_value(record)}"
            )
        op = record.get("op")
        if not isinstance(op, str):
            raise TraceError(
                f"{trace}:{lineno}: op: expected a string such as SOURCE_FETCH, "
                f"got {describe_value(op) if 'op' in record else 'nothing (missing key)'}"
            )
        step_id = _step_id(record["step"]) if "step" in record else str(lineno)
        fields = record.get("fields")
        if not isinstance(fields, dict):
            fields = {}
        merge_with = record.get("merge_with")
        if merge_with is None:
            refs: list[str] = []
        elif isinstance(merge_with, list):
            refs = [_step_id(r) for r in merge_with]
        else:
            raise TraceError(
                f"{trace}:{lineno}: merge_with: expected a list of earlier step ids, "
                f"got {describe_value(merge_with)}"
            )
        builder.record(op, step_id, fields, refs)
    n_mapped = builder.step
    summary: dict[str, object] = {
        "n_records": n_records,
        "n_mapped": n_mapped,
        "n_skipped": n_records - n_mapped,
        "skipped_by_reason": dict(sorted(builder.skipped.items())),
        "warnings": dict(sorted(builder.warnings.items())),
        "rule_hits": dict(sorted(builder.hits.items())),
    }
    if n_mapped == 0:
        raise TraceError(
            f"{trace}: none of the {n_records} records has one of the ops "
            f"{', '.join(LAB_OPS)} (skipped: {summary['skipped_by_reason']})"
        )
    return LoadedTrace(events=builder.events, summary=summary)


def coverage_json(summary: dict[str, object]) -> str:
    """``trace_coverage.json`` text as the lab writes it: indented, no final newline."""
    return json.dumps(summary, indent=2)
