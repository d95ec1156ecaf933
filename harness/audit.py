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
from typing import assert_never

from harness.audit_spec import (
    AuditSpec,
    AuditSpecError,
    Compaction,
    GateSpec,
    Polarity,
    Read,
    load_spec,
)

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


# ---------------------------------------------------------------- verdicts


def _starvation(compaction: Compaction, gate: GateSpec) -> tuple[Starvation, ...]:
    found: list[Starvation] = []
    for read in gate.reads:
        match read:
            case Read.SCORES:
                if not compaction.score_aggregates:
                    found.append(Starvation(read, "scores dropped"))
            case Read.TAINT_IDS:
                if not compaction.taint_ids:
                    found.append(Starvation(read, "taint ids folded"))
            case Read.HOP_WINDOW:
                keep = compaction.lineage_window
                if gate.window is not None and keep is not None and gate.window > keep:
                    found.append(Starvation(read, f"window {gate.window} > lineage {keep}"))
            case Read.ORDERING:
                if not compaction.ordering_preserved:
                    found.append(Starvation(read, "hop order lost"))
            case _:
                assert_never(read)
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
        elif gate.polarity is Polarity.DENY:
            failure, severity = Failure.FALSE_STOP, Severity.EXPENSIVE
        else:
            assert_never(gate.polarity)
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
