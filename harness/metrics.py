"""Per-run metrics and the CSV schemas they stream into (spec §7).

Per (arm ≠ ground_truth, gate, mode): n, agreements with the oracle (its
blind decision for the same step and gate), false-proceeds (arm proceeds,
oracle blocks), false-stops (arm blocks, oracle proceeds), proceeds, oracle
proceeds, lookups and bytes read. Per (arm, axis): the sum of |arm − oracle|
over decision points, scores rounded to 6 decimals. A run produces a few
dozen rows; nothing per decision is kept except the reconstruction curve
(one row per decision) and, for the death-spiral run, its
reconstruction-gate decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEATH_SPIRAL_COLUMNS",
    "DRIFT_COLUMNS",
    "GATE_COLUMNS",
    "LAB_DEATH_SPIRAL_COLUMNS",
    "LAB_DRIFT_COLUMNS",
    "LAB_PROSE_COLUMNS",
    "LAB_RECON_COLUMNS",
    "PROSE_COLUMNS",
    "RECON_COLUMNS",
    "SWEEP_COLUMNS",
    "GateCounts",
    "RunKey",
]

_KEY = ["run_type", "cadence", "profile", "seed"]
GATE_COLUMNS: list[str] = [
    *_KEY,
    "arm",
    "policy",
    "gate_class",
    "irreversible",
    "mode",
    "n",
    "n_agree",
    "n_false_proceed",
    "n_false_stop",
    "n_proceed",
    "n_oracle_proceed",
    "lookups",
    "bytes_read",
]
SWEEP_COLUMNS: list[str] = [*GATE_COLUMNS, "penalty"]
# The lab's columns first, in the lab's order (spec §10); provnet's extras after.
DRIFT_COLUMNS: list[str] = [*_KEY, "arm", "axis", "mae", "n", "sum_abs_err"]
RECON_COLUMNS: list[str] = [
    *_KEY,
    "step",
    "n_compactions",
    "recon_min",
    "fidelity_perhop",
    "recon_prose",
    "cycle",
]
PROSE_COLUMNS: list[str] = [
    *_KEY,
    "n_extractions",
    "n_parse_failures",
    "parse_failure_rate",
    "n_true_taints",
    "n_kept_taints",
    "n_fabricated_taints",
    "realized_taint_recall",
    "realized_taint_precision",
    # real prose channel only (0 with the mock): requests sent, cache answers, refusals
    "n_llm_calls",
    "n_cache_hits",
    "n_refusals",
]
DEATH_SPIRAL_COLUMNS: list[str] = [
    *_KEY,
    "step",
    "arm",
    "policy",
    "proceed",
    "oracle_proceed",
    "cycle",
    "n_compactions",
    "gate_class",
    "reconstruction",
]
#: The columns a results file must have to be read: the lab's (spec §10).
LAB_DRIFT_COLUMNS: list[str] = DRIFT_COLUMNS[:8]
LAB_RECON_COLUMNS: list[str] = RECON_COLUMNS[:9]
LAB_PROSE_COLUMNS: list[str] = PROSE_COLUMNS[:12]
LAB_DEATH_SPIRAL_COLUMNS: list[str] = DEATH_SPIRAL_COLUMNS[:9]


@dataclass(frozen=True, slots=True)
class RunKey:
    """Identifies one run: (run_type, cadence, profile, seed)."""

    run_type: str
    cadence: int
    profile: str
    seed: int

    def row(self) -> list[object]:
        return [self.run_type, self.cadence, self.profile, self.seed]

    @property
    def label(self) -> str:
        """The run's name in a combined fingerprint (:func:`harness.fingerprint.combine`)."""
        return f"{self.run_type}/C={self.cadence}/{self.profile}/seed={self.seed}"


class GateCounts:
    """Confusion counts of one (arm, gate, mode) against the oracle."""

    __slots__ = (
        "bytes_read",
        "false_proceed",
        "false_stop",
        "lookups",
        "n",
        "oracle_proceed",
        "proceed",
    )

    def __init__(self) -> None:
        self.n = 0
        self.proceed = 0
        self.oracle_proceed = 0
        self.false_proceed = 0
        self.false_stop = 0
        self.lookups = 0
        self.bytes_read = 0

    def add(self, proceed: bool, oracle: bool, lookups: int, nbytes: int) -> None:
        self.n += 1
        if proceed:
            self.proceed += 1
            if not oracle:
                self.false_proceed += 1
        elif oracle:
            self.false_stop += 1
        if oracle:
            self.oracle_proceed += 1
        self.lookups += lookups
        self.bytes_read += nbytes

    @property
    def agree(self) -> int:
        return self.n - self.false_proceed - self.false_stop

    def row(
        self, arm: str, policy: str, gate_class: str, irreversible: bool, mode: str
    ) -> tuple[object, ...]:
        """The ``GATE_COLUMNS`` after the run key, for this (arm, gate, mode)."""
        return (
            arm,
            policy,
            gate_class,
            irreversible,
            mode,
            self.n,
            self.agree,
            self.false_proceed,
            self.false_stop,
            self.proceed,
            self.oracle_proceed,
            self.lookups,
            self.bytes_read,
        )
