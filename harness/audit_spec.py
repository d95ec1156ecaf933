"""Audit specs: what a compaction preserves and what each gate reads.

Parsing and validation for :mod:`harness.audit` (format and rules there and
in docs/report.md). Every error is an :class:`AuditSpecError` naming the
file, the line, the key path and what was expected; unknown and duplicate
keys are errors, and ``irreversible`` is required so that a forgotten flag
cannot hide a CRITICAL gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness._yaml_lines import LineDict, LineList, YamlInputError, line_of, load_yaml_with_lines
from harness.cli_errors import UsageError

__all__ = [
    "AuditSpec",
    "AuditSpecError",
    "Compaction",
    "GateSpec",
    "Polarity",
    "Read",
    "load_spec",
]


class AuditSpecError(UsageError):
    """The audit spec is malformed; the message names file, line, key and expectation."""


class Read(StrEnum):
    """What a gate consumes from the compacted value."""

    SCORES = "scores"
    TAINT_IDS = "taint_ids"
    HOP_WINDOW = "hop_window"
    ORDERING = "ordering"


class Polarity(StrEnum):
    """The gate's decision when the detail it needs is missing."""

    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class Compaction:
    """What survives a compaction. ``lineage_window`` ``None`` = never truncated."""

    score_aggregates: bool
    taint_ids: bool
    lineage_window: int | None
    ordering_preserved: bool


@dataclass(frozen=True, slots=True)
class GateSpec:
    name: str
    reads: tuple[Read, ...]
    window: int | None
    polarity: Polarity
    irreversible: bool


@dataclass(frozen=True, slots=True)
class AuditSpec:
    source: Path
    compaction: Compaction
    gates: tuple[GateSpec, ...]
    name: str | None = None


# ---------------------------------------------------------------- parsing

_TOP_KEYS = ("compaction", "gates", "name", "description")
_COMPACTION_KEYS = ("score_aggregates", "taint_ids", "lineage_window", "ordering_preserved")
_GATE_KEYS = ("name", "reads", "window", "polarity", "irreversible")
_READ_VALUES = frozenset(r.value for r in Read)


class _Ctx:
    """Formats errors as ``file:line: key.path: message``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, line: int, key: str, message: str) -> AuditSpecError:
        where = f"{self.path}:{line}"
        return AuditSpecError(f"{where}: {key}: {message}" if key else f"{where}: {message}")


def _require_mapping(ctx: _Ctx, value: object, line: int, key: str, what: str) -> LineDict:
    if not isinstance(value, LineDict):
        raise ctx.error(line, key, f"expected {what} (a mapping), got {_describe(value)}")
    return value


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _check_keys(ctx: _Ctx, mapping: LineDict, allowed: tuple[str, ...], prefix: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ctx.error(
                mapping.line_for(key),
                f"{prefix}{key}",
                f"unknown key (expected one of: {', '.join(allowed)})",
            )


def _get_bool(ctx: _Ctx, mapping: LineDict, key: str, prefix: str) -> bool:
    if key not in mapping:
        raise ctx.error(mapping.line, f"{prefix}{key}", "missing (expected true or false)")
    value = mapping[key]
    if not isinstance(value, bool):
        raise ctx.error(
            mapping.line_for(key),
            f"{prefix}{key}",
            f"expected true or false, got {_describe(value)}",
        )
    return value


def _parse_compaction(ctx: _Ctx, top: LineDict) -> Compaction:
    if "compaction" not in top:
        raise ctx.error(top.line, "compaction", "missing (expected a mapping of what survives)")
    comp = _require_mapping(
        ctx, top["compaction"], top.line_for("compaction"), "compaction", "the compaction block"
    )
    _check_keys(ctx, comp, _COMPACTION_KEYS, "compaction.")
    score_aggregates = _get_bool(ctx, comp, "score_aggregates", "compaction.")
    taint_ids = _get_bool(ctx, comp, "taint_ids", "compaction.")
    ordering = _get_bool(ctx, comp, "ordering_preserved", "compaction.")
    if "lineage_window" not in comp:
        raise ctx.error(
            comp.line,
            "compaction.lineage_window",
            "missing (expected the number of hops kept visible, or null for never truncated)",
        )
    window = comp["lineage_window"]
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 0
    ):
        raise ctx.error(
            comp.line_for("lineage_window"),
            "compaction.lineage_window",
            f"expected an integer >= 0 or null, got {_describe(window)}",
        )
    return Compaction(
        score_aggregates=score_aggregates,
        taint_ids=taint_ids,
        lineage_window=window,
        ordering_preserved=ordering,
    )


def _parse_gate(ctx: _Ctx, raw: object, line: int, index: int) -> GateSpec:
    prefix = f"gates[{index}]."
    gate = _require_mapping(ctx, raw, line, f"gates[{index}]", "a gate")
    _check_keys(ctx, gate, _GATE_KEYS, prefix)
    name = gate.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ctx.error(
            gate.line_for("name"),
            f"{prefix}name",
            f"expected a non-empty string, got {_describe(name)}",
        )
    prefix = f"gates[{index}] ({name})."
    reads_raw = gate.get("reads")
    allowed_reads = ", ".join(r.value for r in Read)
    if not isinstance(reads_raw, list) or not reads_raw:
        raise ctx.error(
            gate.line_for("reads"),
            f"{prefix}reads",
            f"expected a non-empty list drawn from {{{allowed_reads}}}, got {_describe(reads_raw)}",
        )
    reads: list[Read] = []
    for i, item in enumerate(reads_raw):
        item_line = line_of(reads_raw, i, gate.line_for("reads"))
        if not isinstance(item, str) or item not in _READ_VALUES:
            raise ctx.error(
                item_line,
                f"{prefix}reads[{i}]",
                f"expected one of {{{allowed_reads}}}, got {_describe(item)}",
            )
        read = Read(item)
        if read in reads:
            raise ctx.error(item_line, f"{prefix}reads[{i}]", f"{read.value!r} listed twice")
        reads.append(read)
    window = gate.get("window")
    if Read.HOP_WINDOW in reads:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ctx.error(
                gate.line_for("window"),
                f"{prefix}window",
                f"expected an integer >= 1 (the gate reads hop_window), got {_describe(window)}",
            )
    elif "window" in gate:
        raise ctx.error(
            gate.line_for("window"),
            f"{prefix}window",
            "only meaningful when reads contains hop_window (add it or remove window)",
        )
    polarity_raw = gate.get("polarity")
    if polarity_raw not in ("allow", "deny"):
        raise ctx.error(
            gate.line_for("polarity"),
            f"{prefix}polarity",
            f"expected 'allow' or 'deny' (the default when detail is missing), "
            f"got {_describe(polarity_raw)}",
        )
    if "irreversible" not in gate:
        raise ctx.error(gate.line, f"{prefix}irreversible", "missing (expected true or false)")
    irreversible = _get_bool(ctx, gate, "irreversible", prefix)
    return GateSpec(
        name=name,
        reads=tuple(reads),
        window=window if Read.HOP_WINDOW in reads else None,
        polarity=Polarity(polarity_raw),
        irreversible=irreversible,
    )


def load_spec(path: Path) -> AuditSpec:
    """Parse and validate an audit spec; :class:`AuditSpecError` names file, line and key."""
    try:
        data = load_yaml_with_lines(path)
    except YamlInputError as exc:
        raise AuditSpecError(str(exc)) from None
    ctx = _Ctx(path)
    top = _require_mapping(ctx, data, 1, "", "an audit spec with 'compaction' and 'gates'")
    _check_keys(ctx, top, _TOP_KEYS, "")
    name = top.get("name")
    if name is not None and not isinstance(name, str):
        raise ctx.error(top.line_for("name"), "name", f"expected a string, got {_describe(name)}")
    compaction = _parse_compaction(ctx, top)
    if "gates" not in top:
        raise ctx.error(top.line, "gates", "missing (expected a non-empty list of gates)")
    gates_raw = top["gates"]
    if not isinstance(gates_raw, LineList) or not gates_raw:
        raise ctx.error(
            top.line_for("gates"),
            "gates",
            f"expected a non-empty list of gates, got {_describe(gates_raw)}",
        )
    gates: list[GateSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(gates_raw):
        line = gates_raw.line_for(index)
        gate = _parse_gate(ctx, raw, line, index)
        if gate.name in seen:
            raise ctx.error(
                line,
                f"gates[{index}].name",
                f"duplicate gate name {gate.name!r} (also gates[{seen[gate.name]}])",
            )
        seen[gate.name] = index
        gates.append(gate)
    return AuditSpec(source=path, compaction=compaction, gates=tuple(gates), name=name)
