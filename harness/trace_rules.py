"""Taint rules for trace mode: which trace records degrade an axis or taint.

Rules are YAML data, not code (Part 5: "tool status ≠ ok → taint, cache age
over threshold → taint"). A rules file is a list (or a mapping with a single
``rules`` list) of::

    - taint: tool_flaky          # taint id: taint:tool_flaky:{step}
      op: tool_call              # the trace op (aliases as in BUILTIN_OPS)
      when: {field: status, not_equals: ok}
      axis: tool_integrity       # freshness|capability|tool_integrity|verification
      factor: 0.65

``when`` is ``{always: true}`` or ``{field: NAME, OP: VALUE}`` with exactly
one of ``equals``, ``not_equals``, ``gt``, ``lt`` (``gt``/``lt`` need
numbers); ``NAME`` may be a dotted path into nested ``fields``. Equality never
confuses booleans with numbers. ``taint`` may be omitted or null (degrade
only) and ``axis``/``factor`` may be omitted (taint only), but not both.
``reconstruction`` is not a rule axis: only compaction degrades it.

See :mod:`harness.trace` for how the first matching rule is applied.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, assert_never

from harness._yaml_lines import LineDict, LineList, YamlInputError, load_yaml_with_lines
from harness.cli_errors import UsageError
from harness.events import BASE_AXES, Op

__all__ = [
    "BUILTIN_OPS",
    "Comparator",
    "Condition",
    "OpKind",
    "Outcome",
    "TaintRule",
    "TraceError",
    "describe_value",
    "is_number",
    "load_rules",
    "op_name",
]


class TraceError(UsageError):
    """Bad trace or rules input; the message names file, line/rule and key."""


class OpKind(StrEnum):
    FETCH = "fetch"
    OP = "op"
    DECISION = "decision"


class Outcome(StrEnum):
    """Result of evaluating one rule's condition against one record."""

    HOLDS = "holds"
    FAILS = "fails"
    FIELD_MISSING = "field_missing"
    NOT_A_NUMBER = "not_a_number"


class Comparator(StrEnum):
    ALWAYS = "always"
    EQUALS = "equals"
    NOT_EQUALS = "not_equals"
    GT = "gt"
    LT = "lt"


#: Lower-cased trace op → (kind, op name carried by the event and its hop).
BUILTIN_OPS: dict[str, tuple[OpKind, str]] = {
    "fetch": (OpKind.FETCH, Op.SOURCE_FETCH),
    "source_fetch": (OpKind.FETCH, Op.SOURCE_FETCH),
    "cache_read": (OpKind.OP, Op.CACHE_READ),
    "llm_transform": (OpKind.OP, Op.LLM_TRANSFORM),
    "llm_call": (OpKind.OP, Op.LLM_TRANSFORM),
    "tool_call": (OpKind.OP, Op.TOOL_CALL),
    "merge": (OpKind.OP, Op.MERGE),
    "decision": (OpKind.DECISION, "DECISION"),
}

_TAINT_NAME = re.compile(r"[a-z0-9][a-z0-9_]*")
_RULE_KEYS = ("taint", "op", "when", "axis", "factor")


def op_name(op: str) -> str:
    """The name two spellings of the same op share (aliases → canonical)."""
    builtin = BUILTIN_OPS.get(op.lower())
    return builtin[1] if builtin is not None else op


@dataclass(frozen=True, slots=True)
class Condition:
    comparator: Comparator
    field: str | None = None
    value: object = None

    def describe(self) -> str:
        match self.comparator:
            case Comparator.ALWAYS:
                return "always"
            case Comparator.EQUALS:
                symbol = "=="
            case Comparator.NOT_EQUALS:
                symbol = "!="
            case Comparator.GT:
                symbol = ">"
            case Comparator.LT:
                symbol = "<"
            case _:
                assert_never(self.comparator)
        return f"{self.field} {symbol} {json.dumps(self.value)}"


@dataclass(frozen=True, slots=True)
class TaintRule:
    index: int
    line: int
    op: str
    when: Condition
    taint: str | None
    axis: str | None
    factor: float

    def describe(self) -> str:
        effect = []
        if self.taint is not None:
            effect.append(f"taint:{self.taint}:{{step}}")
        if self.axis is not None:
            effect.append(f"{self.axis} x{self.factor:g}")
        return f"rules[{self.index}] {self.op} when {self.when.describe()} -> {', '.join(effect)}"

    def applies_to(self, name: str) -> bool:
        """True if this rule is for op ``name`` (already passed through :func:`op_name`)."""
        return op_name(self.op) == name

    def evaluate(self, fields: dict[str, Any]) -> tuple[Outcome, object]:
        """Evaluate ``when`` on a record's fields; also return the field value read."""
        cond = self.when
        if cond.comparator is Comparator.ALWAYS:
            return Outcome.HOLDS, None
        present, value = _lookup(fields, cond.field or "")
        if not present:
            return Outcome.FIELD_MISSING, None
        match cond.comparator:
            case Comparator.GT | Comparator.LT:
                if not is_number(value) or math.isnan(float(value)):  # type: ignore[arg-type]
                    return Outcome.NOT_A_NUMBER, value
                number, threshold = float(value), float(cond.value)  # type: ignore[arg-type]
                gt = cond.comparator is Comparator.GT
                holds = number > threshold if gt else number < threshold
            case Comparator.EQUALS:
                holds = _same(value, cond.value)
            case Comparator.NOT_EQUALS:
                holds = not _same(value, cond.value)
            case _:
                assert_never(cond.comparator)
        return (Outcome.HOLDS if holds else Outcome.FAILS), value


def _lookup(fields: dict[str, Any], dotted: str) -> tuple[bool, object]:
    current: object = fields
    for part in dotted.split("."):
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _same(a: object, b: object) -> bool:
    # JSON/YAML booleans are not numbers here: `equals: 1` must not match `true`.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return a == b


def describe_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_rule(path: Path, raw: object, index: int, line: int) -> TaintRule:
    def err(key: str, message: str, at: int | None = None) -> TraceError:
        where = line if at is None else at
        return TraceError(f"{path}:{where}: rules[{index}].{key}: {message}")

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
    op = raw.get("op")
    if not isinstance(op, str) or not op:
        raise err("op", f"expected the trace op this rule applies to, got {describe_value(op)}")
    if BUILTIN_OPS.get(op.lower(), (None,))[0] is OpKind.DECISION:
        raise err("op", "decision records carry no hop; a rule cannot apply to them")
    if op.lower() == "merge":
        raise err("op", "merge hops carry no axis and no taint; rules do not apply to them")
    taint = raw.get("taint")
    if taint is not None and (not isinstance(taint, str) or not _TAINT_NAME.fullmatch(taint)):
        raise err(
            "taint",
            f"expected a taint family name of [a-z0-9_] such as tool_flaky, "
            f"got {describe_value(taint)}",
            raw.line_for("taint"),
        )
    axis = raw.get("axis")
    if axis is not None and axis not in BASE_AXES:
        hint = (
            " (reconstruction is degraded only by compaction)" if axis == "reconstruction" else ""
        )
        raise err(
            "axis",
            f"expected one of {', '.join(BASE_AXES)}{hint}, got {describe_value(axis)}",
            raw.line_for("axis"),
        )
    factor_raw = raw.get("factor")
    if axis is None:
        if "factor" in raw:
            raise err(
                "factor",
                "given without an axis (add axis or remove factor)",
                raw.line_for("factor"),
            )
        factor = 1.0
    else:
        if not is_number(factor_raw) or not 0.0 <= float(factor_raw) <= 1.0:  # type: ignore[arg-type]
            raise err(
                "factor",
                f"expected a number in [0, 1] (the axis multiplier), "
                f"got {describe_value(factor_raw)}",
                raw.line_for("factor"),
            )
        factor = float(factor_raw)  # type: ignore[arg-type]
    if taint is None and axis is None:
        raise err("taint", "a rule needs a taint, an axis, or both")
    when = _parse_when(path, raw, index)
    return TaintRule(
        index=index, line=line, op=op, when=when, taint=taint, axis=axis, factor=factor
    )


def _parse_when(path: Path, rule: LineDict, index: int) -> Condition:
    at = rule.line_for("when")
    prefix = f"{path}:{at}: rules[{index}].when"
    if "when" not in rule:
        raise TraceError(
            f"{path}:{rule.line}: rules[{index}].when: missing (expected "
            "{always: true} or {field: NAME, equals|not_equals|gt|lt: VALUE})"
        )
    when = rule["when"]
    if not isinstance(when, dict):
        raise TraceError(f"{prefix}: expected a mapping, got {describe_value(when)}")
    if "always" in when:
        if set(when) != {"always"} or when["always"] is not True:
            raise TraceError(f"{prefix}: expected exactly {{always: true}}")
        return Condition(Comparator.ALWAYS)
    name = when.get("field")
    if not isinstance(name, str) or not name:
        raise TraceError(
            f"{prefix}.field: expected a field name (dotted path), got {describe_value(name)}"
        )
    comparators = [k for k in when if k != "field"]
    known = {c.value for c in Comparator} - {"always"}
    unknown = [k for k in comparators if k not in known]
    if unknown:
        raise TraceError(
            f"{prefix}.{unknown[0]}: unknown comparator (expected equals, not_equals, gt or lt)"
        )
    if len(comparators) != 1:
        raise TraceError(
            f"{prefix}: expected exactly one of equals, not_equals, gt, lt; got {len(comparators)}"
        )
    comparator = Comparator(comparators[0])
    value = when[comparators[0]]
    if comparator in (Comparator.GT, Comparator.LT) and not is_number(value):
        raise TraceError(
            f"{prefix}.{comparator.value}: expected a number, got {describe_value(value)}"
        )
    return Condition(comparator, name, value)


def load_rules(path: Path) -> tuple[TaintRule, ...]:
    """Parse taint rules; :class:`TraceError` names file, line, rule index and key."""
    try:
        data = load_yaml_with_lines(path)
    except YamlInputError as exc:
        raise TraceError(str(exc)) from None
    if isinstance(data, LineDict) and set(data) == {"rules"}:
        data = data["rules"]
    if not isinstance(data, LineList):
        raise TraceError(
            f"{path}:1: expected a list of taint rules (or a mapping with one key 'rules'), "
            f"got {describe_value(data)}"
        )
    return tuple(_parse_rule(path, raw, i, data.line_for(i)) for i, raw in enumerate(data))
