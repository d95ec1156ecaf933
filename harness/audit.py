"""Static compaction/gate starvation audit (Part 5, "what to actually build").

Every arm in the Part 5 experiment failed exactly where its compaction
discarded something a gate consumed. This module states that rule without a
simulation: given which fields a compaction *preserves* and which fields each
gate *reads*, it says which gates decide blind and in which direction they
fail.

A gate is **starved** when it reads something the compaction does not keep:

=============  ==========================================================
gate reads     starved when
=============  ==========================================================
``scores``     ``compaction.score_aggregates`` is false
``taint_ids``  ``compaction.taint_ids`` is false (only a count survives)
``hop_window`` the gate's ``window`` exceeds ``compaction.lineage_window``
``ordering``   ``compaction.ordering_preserved`` is false
=============  ==========================================================

The direction of failure is the gate's default under missing information
(its polarity): a starved default-**allow** gate finds nothing to object to
and fails *dangerous* (false-proceed); a starved default-**deny** gate cannot
prove what it needs and fails *expensive* (false-stop). A false-proceed on an
irreversible gate is **CRITICAL**.

Spec (YAML)::

    compaction:
      score_aggregates: true      # running-min axis scores survive
      taint_ids: false            # folded taint ids are dropped
      lineage_window: 5           # hops kept visible (null = never truncated)
      ordering_preserved: true
    gates:
      - name: payment_no_untrusted_taint
        reads: [taint_ids]
        polarity: allow           # allow | deny (default when detail is missing)
        irreversible: true
      - name: send_wire_clean_window
        reads: [taint_ids, hop_window]
        window: 8                 # required iff reads contains hop_window
        polarity: deny
        irreversible: true

Exit status of ``provnet audit``: 0 when no gate is CRITICAL, 1 when at least
one is (``--strict``: when any gate is starved), 2 for a bad spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness._yaml_lines import LineDict, LineList, YamlInputError, line_of, load_yaml_with_lines
from harness.cli import UsageError

__all__ = [
    "AuditResult",
    "AuditSpec",
    "AuditSpecError",
    "Compaction",
    "Failure",
    "GateSpec",
    "GateVerdict",
    "Polarity",
    "Read",
    "Severity",
    "Starvation",
    "audit",
    "load_spec",
    "render_markdown",
    "render_table",
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


class Failure(StrEnum):
    NONE = "none"
    FALSE_PROCEED = "false-proceed"
    FALSE_STOP = "false-stop"


class Severity(StrEnum):
    """``ok`` < ``expensive`` (false-stop) < ``dangerous`` (false-proceed) < ``CRITICAL``."""

    OK = "ok"
    EXPENSIVE = "expensive"
    DANGEROUS = "dangerous"
    CRITICAL = "CRITICAL"


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


@dataclass(frozen=True, slots=True)
class Starvation:
    """One input the gate reads that compaction does not keep, and why."""

    read: Read
    reason: str


@dataclass(frozen=True, slots=True)
class GateVerdict:
    gate: GateSpec
    starved_by: tuple[Starvation, ...]
    failure: Failure
    severity: Severity

    @property
    def starved(self) -> bool:
        return bool(self.starved_by)


@dataclass(frozen=True, slots=True)
class AuditResult:
    spec: AuditSpec
    verdicts: tuple[GateVerdict, ...]

    @property
    def n_starved(self) -> int:
        return sum(1 for v in self.verdicts if v.starved)

    @property
    def n_critical(self) -> int:
        return sum(1 for v in self.verdicts if v.severity is Severity.CRITICAL)

    def exit_code(self, *, strict: bool = False) -> int:
        """0 healthy, 1 a CRITICAL gate (or, with ``strict``, any starved gate)."""
        if self.n_critical or (strict and self.n_starved):
            return 1
        return 0


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


# ---------------------------------------------------------------- verdicts


def _starvation(compaction: Compaction, gate: GateSpec) -> tuple[Starvation, ...]:
    found: list[Starvation] = []
    for read in gate.reads:
        if read is Read.SCORES and not compaction.score_aggregates:
            found.append(Starvation(read, "scores dropped"))
        elif read is Read.TAINT_IDS and not compaction.taint_ids:
            found.append(Starvation(read, "taint ids folded"))
        elif read is Read.HOP_WINDOW:
            keep = compaction.lineage_window
            if gate.window is not None and keep is not None and gate.window > keep:
                found.append(Starvation(read, f"window {gate.window} > lineage {keep}"))
        elif read is Read.ORDERING and not compaction.ordering_preserved:
            found.append(Starvation(read, "hop order lost"))
    return tuple(found)


def audit(spec: AuditSpec) -> AuditResult:
    """Classify every gate: starved or not, failure direction, severity."""
    verdicts: list[GateVerdict] = []
    for gate in spec.gates:
        starved_by = _starvation(spec.compaction, gate)
        if not starved_by:
            failure, severity = Failure.NONE, Severity.OK
        elif gate.polarity is Polarity.ALLOW:
            failure = Failure.FALSE_PROCEED
            severity = Severity.CRITICAL if gate.irreversible else Severity.DANGEROUS
        else:
            failure, severity = Failure.FALSE_STOP, Severity.EXPENSIVE
        verdicts.append(GateVerdict(gate, starved_by, failure, severity))
    return AuditResult(spec=spec, verdicts=tuple(verdicts))


# ---------------------------------------------------------------- rendering

_HEADERS = ("gate", "polarity", "irreversible", "reads", "starved by", "fails as", "severity")


def _reads_text(gate: GateSpec) -> str:
    return ", ".join(
        f"hop_window({gate.window})" if r is Read.HOP_WINDOW else r.value for r in gate.reads
    )


def _rows(result: AuditResult) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for v in result.verdicts:
        rows.append(
            (
                v.gate.name,
                v.gate.polarity.value,
                "yes" if v.gate.irreversible else "no",
                _reads_text(v.gate),
                "; ".join(s.reason for s in v.starved_by) or "-",
                "-" if v.failure is Failure.NONE else v.failure.value,
                v.severity.value,
            )
        )
    return rows


def _compaction_text(c: Compaction) -> str:
    window = "never truncated" if c.lineage_window is None else f"last {c.lineage_window} hops"
    return (
        f"score aggregates {'kept' if c.score_aggregates else 'DROPPED'}, "
        f"taint ids {'kept' if c.taint_ids else 'folded to a count'}, "
        f"lineage {window}, ordering {'kept' if c.ordering_preserved else 'LOST'}"
    )


def _verdict_line(result: AuditResult) -> str:
    n = len(result.verdicts)
    if result.n_critical:
        return (
            f"{result.n_starved} of {n} gates starved; {result.n_critical} CRITICAL "
            "(irreversible and default-allow: will proceed when the oracle blocks)"
        )
    if result.n_starved:
        return f"{result.n_starved} of {n} gates starved; none CRITICAL"
    return f"healthy: none of {n} gates is starved"


def render_table(result: AuditResult) -> str:
    """Plain-text starvation table for a terminal."""
    rows = _rows(result)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
    title = result.spec.name or str(result.spec.source)
    lines = [
        f"audit: {title}",
        f"compaction: {_compaction_text(result.spec.compaction)}",
        "",
        "  ".join(h.ljust(w) for h, w in zip(_HEADERS, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    lines += ["", _verdict_line(result)]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(result: AuditResult) -> str:
    """The same table as GitHub-flavoured Markdown."""
    title = result.spec.name or result.spec.source.name
    lines = [
        f"# Starvation audit: {_md_cell(title)}",
        "",
        f"Compaction: {_compaction_text(result.spec.compaction)}.",
        "",
        "| " + " | ".join(_HEADERS) + " |",
        "|" + "|".join("---" for _ in _HEADERS) + "|",
    ]
    for row in _rows(result):
        cells = [_md_cell(c) for c in row]
        if cells[-1] == Severity.CRITICAL.value:
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"**Verdict:** {_verdict_line(result)}.", ""]
    return "\n".join(lines)
