"""The nine gate policies and the three lineage modes (spec §6, Part 5).

Four gate classes:

- ``score`` — thresholds on base axes; never read reconstruction, so their
  agreement on the structural arms is 100% by construction.
- ``reconstruction`` — coupled to the reconstruction scalar ``r`` (for
  ``structural_perhop``: its fidelity 1 − worst single penalty).
- ``lineage_blocklist`` — default-allow: block iff a taint has a blocked
  prefix. Folded taints are invisible, so blind decisions fail *dangerous*
  (false-proceed).
- ``lineage_allowlist`` — default-deny: proceed only if the last W hops are
  provably clean. With W > K the proof is folded away, so blind decisions
  fail *expensive* (false-stop).

Modes for lineage gates: ``blind`` (decide on what is visible), ``degrade``
(missing detail ⇒ refuse) and ``rehydrate`` (fetch the folded hops from the
cold log; lookups and bytes are counted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from harness.events import Hop
from harness.lineage import FoldedPrefix, HopLog, sort_hops

__all__ = [
    "GATES",
    "Decision",
    "Gate",
    "GateClass",
    "GateView",
    "Mode",
    "evaluate",
    "gate_modes",
]


class GateClass(StrEnum):
    SCORE = "score"
    RECONSTRUCTION = "reconstruction"
    LINEAGE_BLOCKLIST = "lineage_blocklist"
    LINEAGE_ALLOWLIST = "lineage_allowlist"

    @property
    def is_lineage(self) -> bool:
        return self in (GateClass.LINEAGE_BLOCKLIST, GateClass.LINEAGE_ALLOWLIST)


class Mode(StrEnum):
    BLIND = "blind"
    DEGRADE = "degrade"
    REHYDRATE = "rehydrate"


@dataclass(frozen=True, slots=True)
class GateView:
    """What a gate sees of one arm's value (spec §6).

    ``scores`` are the five effective scores (perhop: reconstruction
    replaced by fidelity); ``history_truncated`` is true when a folded
    prefix or a prose blob exists.
    """

    scores: Sequence[float]
    tainted_by: frozenset[str] | set[str]
    visible: Sequence[Hop]
    folded: FoldedPrefix | None
    history_truncated: bool


@dataclass(frozen=True, slots=True)
class Decision:
    proceed: bool
    lookups: int = 0
    bytes_read: int = 0


@dataclass(frozen=True, slots=True)
class Gate:
    """One policy. ``prefixes`` for lineage gates; ``window`` for allowlists."""

    name: str
    gate_class: GateClass
    irreversible: bool
    prefixes: tuple[str, ...] = ()
    window: int = 0


def _score_rule(name: str, s: Sequence[float]) -> bool:
    # indices: 0 freshness, 1 capability, 2 tool_integrity, 3 verification, 4 reconstruction
    if name == "summarize_freshness_strict":
        return s[0] >= 0.6 and s[3] >= 0.5
    if name == "draft_reply_capability":
        return s[1] >= 0.5 and s[2] >= 0.5
    if name == "send_email_fresh_verified":
        return s[0] >= 0.5 and s[3] >= 0.6
    if name == "archive_all_axes_floor":
        return min(s) >= 0.5
    if name == "publish_discounted_thresholds":
        r = s[4]
        return s[0] * r >= 0.55 and s[3] * r >= 0.40
    raise KeyError(name)


_UNVERIFIED = "taint:unverified_web:"
_FALLBACK = "taint:fallback_model:"
_FLAKY = "taint:tool_flaky:"

GATES: tuple[Gate, ...] = (
    Gate("summarize_freshness_strict", GateClass.SCORE, False),
    Gate("draft_reply_capability", GateClass.SCORE, False),
    Gate("send_email_fresh_verified", GateClass.SCORE, True),
    Gate("archive_all_axes_floor", GateClass.RECONSTRUCTION, False),
    Gate("publish_discounted_thresholds", GateClass.RECONSTRUCTION, False),
    Gate("summarize_no_unverified_taint", GateClass.LINEAGE_BLOCKLIST, False, (_UNVERIFIED,)),
    Gate("audit_requires_clean_window", GateClass.LINEAGE_ALLOWLIST, False, (_FALLBACK,), 8),
    Gate("payment_no_untrusted_taint", GateClass.LINEAGE_BLOCKLIST, True, (_UNVERIFIED, _FLAKY)),
    Gate("send_wire_clean_window", GateClass.LINEAGE_ALLOWLIST, True, (_FALLBACK, _FLAKY), 8),
)


def gate_modes(gate: Gate, structural: bool, rehydrate: bool) -> tuple[Mode, ...]:
    """Modes evaluated: blind always; lineage gates on structural arms also degrade/rehydrate."""
    if structural and gate.gate_class.is_lineage:
        return (
            (Mode.BLIND, Mode.DEGRADE, Mode.REHYDRATE)
            if rehydrate
            else (
                Mode.BLIND,
                Mode.DEGRADE,
            )
        )
    return (Mode.BLIND,)


def _any_prefixed(taints: Iterable[str], prefixes: tuple[str, ...]) -> bool:
    return any(t.startswith(prefixes) for t in taints)


def _window_clean(hops: Sequence[Hop], window: int, prefixes: tuple[str, ...]) -> bool:
    return not any(t.startswith(prefixes) for hop in hops[-window:] for t in hop.taints_added)


#: The two decisions that read no hops. ``Decision`` is frozen, so sharing them
#: is the same as building a new one per evaluation, which the boundary runner
#: does some two million times over its full matrix.
_PROCEED = Decision(True)
_BLOCK = Decision(False)


def evaluate(
    gate: Gate,
    view: GateView,
    mode: Mode = Mode.BLIND,
    hop_log: HopLog | None = None,
    window: int | None = None,
) -> Decision:
    """Decide one gate on one view. ``window`` overrides the allowlist W."""
    cls = gate.gate_class
    if cls is GateClass.SCORE or cls is GateClass.RECONSTRUCTION:
        return _PROCEED if _score_rule(gate.name, view.scores) else _BLOCK
    folded = view.folded
    if cls is GateClass.LINEAGE_BLOCKLIST:
        # detail is missing iff folded taints exist; blind ignores it either way
        if folded is None or folded.n_taints_folded == 0 or mode is Mode.BLIND:
            return _BLOCK if _any_prefixed(view.tainted_by, gate.prefixes) else _PROCEED
        if mode is Mode.DEGRADE:
            return _BLOCK
        if mode is not Mode.REHYDRATE:
            assert_never(mode)
        if hop_log is None:
            raise ValueError("rehydrate mode needs the cold hop log")
        hops, nbytes = hop_log.fetch(folded.folded_hop_ids)
        blocked = _any_prefixed(view.tainted_by, gate.prefixes) or _any_prefixed(
            (t for h in hops for t in h.taints_added), gate.prefixes
        )
        return Decision(not blocked, len(folded.folded_hop_ids), nbytes)
    if cls is not GateClass.LINEAGE_ALLOWLIST:
        assert_never(cls)
    w = gate.window if window is None else window
    visible = view.visible
    if len(visible) >= w or not view.history_truncated:
        return _PROCEED if _window_clean(visible, w, gate.prefixes) else _BLOCK
    if mode is Mode.REHYDRATE and folded is not None:
        if hop_log is None:
            raise ValueError("rehydrate mode needs the cold hop log")
        hops, nbytes = hop_log.fetch(folded.folded_hop_ids)
        full = sort_hops([*visible, *hops])
        return Decision(_window_clean(full, w, gate.prefixes), len(folded.folded_hop_ids), nbytes)
    return _BLOCK
