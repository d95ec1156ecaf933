"""The four preregistered hypotheses of Part 5 as computed criteria.

- H1 PASS iff the score-class blind flip rate is 0 on both structural arms
  and the lineage-class (blocklist ∪ allowlist) blind flip rate is > 0 on
  both.
- H2 PASS iff in the death-spiral run structural_min's store
  reconstruction never increases from one decision to the next, a
  structural_min death cycle exists, and structural_perhop has none.
- H3 PASS iff on both structural arms, blind: blocklist gates have
  false-stops = 0 and false-proceeds > 0, allowlist gates have
  false-proceeds = 0 and false-stops > 0.
- H4 PASS iff prose's blind flip rate exceeds both structural arms' on
  every gate class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness._results import flip as _flip
from harness._results import pct as _pct
from harness.arms import STRUCTURAL_ARMS
from harness.gates import GateClass

__all__ = ["Hypothesis", "evaluate_hypotheses"]

_STRUCTURAL = tuple(a.value for a in STRUCTURAL_ARMS)
_LINEAGE = tuple(c.value for c in GateClass if c.is_lineage)


class _ClassRates(Protocol):
    @property
    def gate_class(self) -> str: ...
    @property
    def prose(self) -> float: ...
    @property
    def structural_min(self) -> float: ...
    @property
    def structural_perhop(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Hypothesis:
    hid: str
    statement: str
    criterion: str
    measured: str
    passed: bool
    #: False when the results cannot decide it (H2 without a death-spiral run)
    measurable: bool = True

    @property
    def verdict(self) -> str:
        if not self.measurable:
            return "N/A"
        return "PASS" if self.passed else "FAIL"


def _counts(df: Any) -> tuple[int, int, int]:
    return int(df["n"].sum()), int(df["n_false_proceed"].sum()), int(df["n_false_stop"].sum())


def evaluate_hypotheses(
    blind: Any,
    per_class: Sequence[_ClassRates],
    death_min: int | None,
    death_perhop: int | None,
    monotone: bool,
    lineage_flip: float,
    has_death_spiral: bool = True,
) -> tuple[Hypothesis, ...]:
    by_class = {row.gate_class: row for row in per_class}
    score = by_class["score"]
    lin_min = _flip(blind[(blind["arm"] == "structural_min") & blind["gate_class"].isin(_LINEAGE)])
    lin_ph = _flip(
        blind[(blind["arm"] == "structural_perhop") & blind["gate_class"].isin(_LINEAGE)]
    )
    h1 = Hypothesis(
        "H1",
        "score gates track (structural arms agree with the oracle) while lineage gates split",
        "score-class blind flip = 0 on both structural arms and "
        "lineage-class blind flip > 0 on both",
        f"score flip {score.structural_min:.2f}% / {score.structural_perhop:.2f}%; "
        f"lineage flip {lin_min:.2f}% / {lin_ph:.2f}% (pooled {lineage_flip:.2f}%)",
        score.structural_min == 0.0
        and score.structural_perhop == 0.0
        and lin_min > 0
        and lin_ph > 0,
    )
    h2 = Hypothesis(
        "H2",
        "min-folded reconstruction decays monotonically and dies; perhop never dies",
        "death-spiral store reconstruction non-increasing, a structural_min death cycle exists, "
        "no structural_perhop death cycle",
        f"monotone {'yes' if monotone else 'no'}; death cycle structural_min {death_min}, "
        f"structural_perhop {'never' if death_perhop is None else death_perhop}"
        if has_death_spiral
        else "no death-spiral run in these results",
        monotone and death_min is not None and death_perhop is None,
        measurable=has_death_spiral,
    )
    polar: list[str] = []
    ok3 = True
    for arm in _STRUCTURAL:
        a = blind[blind["arm"] == arm]
        n_b, fp_b, fs_b = _counts(a[a["gate_class"] == "lineage_blocklist"])
        n_a, fp_a, fs_a = _counts(a[a["gate_class"] == "lineage_allowlist"])
        ok3 = ok3 and fs_b == 0 and fp_b > 0 and fp_a == 0 and fs_a > 0
        polar.append(
            f"{arm}: blocklist fp {_pct(fp_b, n_b):.2f}% fs {_pct(fs_b, n_b):.2f}%, "
            f"allowlist fp {_pct(fp_a, n_a):.2f}% fs {_pct(fs_a, n_a):.2f}%"
        )
    h3 = Hypothesis(
        "H3",
        "error polarity: blocklist gates fail only by false-proceed, allowlist only by false-stop",
        "both structural arms, blind: blocklist fs = 0 < fp; allowlist fp = 0 < fs",
        "; ".join(polar),
        ok3,
    )
    lost = [
        r.gate_class
        for r in per_class
        if not (r.prose > r.structural_min and r.prose > r.structural_perhop)
    ]
    h4 = Hypothesis(
        "H4",
        "prose flip rates dominate the structural arms on every gate class",
        "prose blind flip > structural_min and > structural_perhop on all four classes",
        "prose does not dominate on: " + (", ".join(lost) if lost else "none"),
        not lost,
    )
    return (h1, h2, h3, h4)
