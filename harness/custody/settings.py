"""Settings and result records of the custody experiment (:mod:`harness.custody`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from contracts.rules import promise_refusal
from harness.boundary.choices import TransportKind
from harness.custody.stats import closed_form, closed_form_random_placement, wilson

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_PS",
    "CellResult",
    "CustodyError",
    "CustodySettings",
    "Departures",
]

DEFAULT_KS: tuple[int, ...] = (0, 1, 2, 3)
DEFAULT_PS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5)
#: Most custodians a value may name per origin (the sweep's largest k).
MAX_K = 3


class CustodyError(ValueError):
    """Bad custody settings, or trials that cannot be played (the message names what)."""


class Departures(StrEnum):
    """How parties depart in an epoch.

    - ``independent``: each party on its own with probability ``p``;
    - ``operator``: whole operators with probability ``p`` each, custodians placed
      on operators without regard to the origin's or each other's (drawn uniformly);
    - ``operator_placed``: whole operators, custodians placed one per operator,
      none on the origin's (per-operator placement).
    """

    INDEPENDENT = "independent"
    OPERATOR = "operator"
    OPERATOR_PLACED = "operator_placed"


@dataclass(frozen=True, slots=True)
class CustodySettings:
    """One custody sweep: which cells, how many trials, on which nodes."""

    ks: tuple[int, ...] = DEFAULT_KS
    ps: tuple[float, ...] = DEFAULT_PS
    departures: tuple[Departures, ...] = tuple(Departures)
    #: trials per cell; 0: computed per cell from the closed form (:func:`trials_for`)
    trials: int = 40
    #: trials played at once (their waits for due demands overlap)
    batch: int = 64
    #: operators the parties are spread over in the operator modes
    operators: int = 4
    #: hops per committed fold
    hops: int = 12
    seed: int = 0
    transport: TransportKind = TransportKind.MEMORY
    deadline_ms: int = 250
    reasks: int = 0
    witness: bool = True

    def validate(self) -> None:
        if not self.ks:
            raise CustodyError("k: expected at least one custodian count")
        bad_k = [k for k in self.ks if not 0 <= k <= MAX_K]
        if bad_k:
            raise CustodyError(f"k: expected custodian counts within 0..{MAX_K}, got {bad_k}")
        if len(set(self.ks)) != len(self.ks):
            raise CustodyError(f"k: a custodian count appears twice in {list(self.ks)}")
        if not self.ps:
            raise CustodyError("p: expected at least one departure probability")
        bad_p = [p for p in self.ps if not 0.0 <= p < 1.0]
        if bad_p:
            raise CustodyError(f"p: expected probabilities within [0, 1), got {bad_p}")
        if len(set(self.ps)) != len(self.ps):
            raise CustodyError(f"p: a probability appears twice in {list(self.ps)}")
        if not self.departures:
            raise CustodyError("departures: expected at least one mode")
        if self.trials < 0:
            raise CustodyError(f"trials: expected an integer >= 0, got {self.trials}")
        if self.batch < 1:
            raise CustodyError(f"batch: expected an integer >= 1, got {self.batch}")
        if self.hops < 1:
            raise CustodyError(f"hops: expected an integer >= 1, got {self.hops}")
        placed = Departures.OPERATOR_PLACED in self.departures
        if placed and self.operators < max(self.ks) + 1:
            raise CustodyError(
                f"operators: per-operator placement of k = {max(self.ks)} custodians needs"
                f" at least {max(self.ks) + 1} operators, got {self.operators}"
            )
        if self.operators < 1:
            raise CustodyError(f"operators: expected an integer >= 1, got {self.operators}")
        refusal = promise_refusal(deadline_ms=self.deadline_ms)
        if refusal:
            raise CustodyError(f"deadline_ms: {refusal}")
        if self.reasks < 0:
            raise CustodyError(f"reasks: expected an integer >= 0, got {self.reasks}")
        if self.transport is TransportKind.REMOTE:
            raise CustodyError(
                "transport remote: the departing parties are started here; running nodes"
                " are given with --cluster or --nodes"
            )

    def expected(self, mode: Departures, k: int, p: float) -> float:
        """The closed-form availability of a cell."""
        if mode is Departures.OPERATOR:
            return closed_form_random_placement(k, p, self.operators)
        return closed_form(k, p)


@dataclass(slots=True)
class CellResult:
    """What one (departures, k, p) cell measured."""

    mode: Departures
    k: int
    p: float
    expected: float
    trials: int = 0
    available: int = 0
    #: lineage-gate decisions at the holder, and how many differ from the oracle
    decisions: int = 0
    flips: int = 0
    oracle_proceed: int = 0
    departed_origins: int = 0
    departed_custodians: int = 0
    #: (role, kind, departed) → evidence records naming such a party
    evidence: dict[tuple[str, str, bool], int] = field(default_factory=dict)
    #: unanswered demands no witness confirmed (never written as evidence)
    unconfirmed: int = 0
    #: parties that served the hops, by role
    served_by: dict[str, int] = field(default_factory=dict)
    value_bytes: int = 0
    statement_bytes: int = 0
    custody_bytes: int = 0
    #: custody statements the values carried (k per trial when every custodian took it)
    custodians_taken: int = 0
    lineage_bytes: int = 0
    commit_rpcs: int = 0
    commit_signatures: int = 0
    commit_seconds: list[float] = field(default_factory=list)
    rehydrate_rpcs: int = 0
    hops_per_custodian: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def availability(self) -> float:
        return self.available / self.trials if self.trials else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.available, self.trials)

    @property
    def inside(self) -> bool:
        lo, hi = self.interval
        return lo <= self.expected <= hi

    @property
    def honest_accused(self) -> int:
        """Evidence naming a party that had not departed (each one a false accusation)."""
        return sum(n for (_, _, departed), n in self.evidence.items() if not departed)
