"""Every published number of Part 5, computed from the results files (spec §8).

:func:`analyze` reads a ``provnet experiment run`` directory and returns
:class:`Findings`; :func:`analyze_sweep` reads a sweep directory and returns
:class:`SweepFindings`. The report renders these; nothing else recomputes
them. Rates pool counts (Σ events / Σ decisions), never average rates.

Definitions (all on the main matrix, ``run_type == "main"``, unless noted):

- flip rate = 100 × (1 − Σ n_agree / Σ n), computed in that order.
- Headline 1: Σ n_false_proceed / Σ n of ``structural_min`` on irreversible
  gates, blind, C = 25, med.
- Headline 2 (death-spiral run): a gate's *death cycle* for an arm is the
  first cycle c (cycle = step // C) such that the arm blocks every
  oracle-allowed decision of that gate at every cycle ≥ c, and at least one
  such decision exists — i.e. one past the last cycle at which it still
  proceeded on an oracle-allowed decision. The arm's death cycle is the
  latest over the reconstruction-class gates (from then on *every*
  reconstruction-coupled gate blocks). Closed form n = ln θ / ln(1 − p),
  θ = 0.50 for ``archive_all_axes_floor``, 0.55 for
  ``publish_discounted_thresholds``.
- Headline 3: prose flip rate / structural_min flip rate, all gates, blind.
- Headline 4: lineage gates, both structural arms pooled: rehydrate-mode
  lookups per 100 decisions; blind flip rate → rehydrate flip rate.

Preregistered hypotheses, as computed criteria:

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

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEATH_THRESHOLDS",
    "AnalysisError",
    "ClassRow",
    "ConfigRow",
    "Crossover",
    "DeathCycle",
    "DriftRow",
    "Findings",
    "Hypothesis",
    "ModeRow",
    "ProseChannelRow",
    "SweepFindings",
    "SweepPoint",
    "analyze",
    "analyze_sweep",
    "closed_form_death_cycle",
    "crossover_cadence",
]

#: Reconstruction-coupled gates and the r threshold at which each dies.
DEATH_THRESHOLDS: dict[str, float] = {
    "archive_all_axes_floor": 0.50,
    "publish_discounted_thresholds": 0.55,
}
_STRUCTURAL = ("structural_min", "structural_perhop")
_JUDGED = ("prose", "structural_min", "structural_perhop")
_CLASSES = ("score", "reconstruction", "lineage_blocklist", "lineage_allowlist")
_LINEAGE = ("lineage_blocklist", "lineage_allowlist")


class AnalysisError(ValueError):
    """A results directory is missing a file or a column."""


@dataclass(frozen=True, slots=True)
class ClassRow:
    """Blind flip rate (%) per arm for one gate class."""

    gate_class: str
    prose: float
    structural_min: float
    structural_perhop: float


@dataclass(frozen=True, slots=True)
class ModeRow:
    """One arm × mode over a set of gates: agreement, errors, cost per 100 decisions."""

    arm: str
    scope: str
    mode: str
    n: int
    agreement_pct: float
    false_proceed_pct: float
    false_stop_pct: float
    lookups_per_100: float
    kb_per_100: float


@dataclass(frozen=True, slots=True)
class ConfigRow:
    """Blind flip rate and irreversible false-proceed rate of one arm in one cell."""

    cadence: int
    profile: str
    arm: str
    flip_pct: float
    irreversible_false_proceed_pct: float


@dataclass(frozen=True, slots=True)
class DriftRow:
    arm: str
    axis: str
    n: int
    mae: float


@dataclass(frozen=True, slots=True)
class DeathCycle:
    """Closed form next to the empirical cycle, for one gate's threshold θ."""

    gate: str
    theta: float
    closed_form: float
    empirical_min: int | None
    empirical_perhop: int | None


@dataclass(frozen=True, slots=True)
class ProseChannelRow:
    extractions: int
    parse_failures: int
    true_taints: int
    kept: int
    fabricated: int
    assumed_recall: float
    assumed_precision: float
    realized_recall: float
    realized_precision: float


@dataclass(frozen=True, slots=True)
class Hypothesis:
    hid: str
    statement: str
    criterion: str
    measured: str
    passed: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"


@dataclass(frozen=True, slots=True)
class Findings:
    """Every number the report prints for a main run."""

    n_runs: int
    # headline 1
    headline_cell: tuple[int, str] | None
    irreversible_false_proceed_pct: float | None
    # headline 2
    death_cycle_min: int | None
    death_cycle_perhop: int | None
    death_cycles: tuple[DeathCycle, ...]
    death_spiral_compactions: int | None
    # headline 3
    flip_prose_pct: float
    flip_min_pct: float
    flip_perhop_pct: float
    flip_ratio: float
    # headline 4
    lineage_lookups_per_100: float | None
    lineage_kb_per_100: float | None
    lineage_flip_blind_pct: float
    lineage_flip_rehydrate_pct: float | None
    lineage_flip_degrade_pct: float | None
    # tables
    per_class: tuple[ClassRow, ...]
    per_config: tuple[ConfigRow, ...]
    payment: tuple[ModeRow, ...]
    rehydration: tuple[ModeRow, ...]
    drift: tuple[DriftRow, ...]
    drift_min_reconstruction: float
    drift_perhop_reconstruction: float
    drift_base_max: float
    prose_channel: ProseChannelRow | None
    hypotheses: tuple[Hypothesis, ...]
    penalty: float

    def headline_lines(self) -> list[str]:
        """The four headline numbers and verdicts as the write-up prints them."""
        lines = []
        if self.irreversible_false_proceed_pct is not None and self.headline_cell is not None:
            c, prof = self.headline_cell
            lines.append(
                f"1. irreversible false-proceed, structural_min, C={c}, {prof}, blind: "
                f"{self.irreversible_false_proceed_pct:.2f}%"
            )
        if self.death_cycle_min is not None or self.death_cycles:
            perhop = (
                "never dies"
                if self.death_cycle_perhop is None
                else (f"dies at {self.death_cycle_perhop}")
            )
            forms = "; ".join(
                f"θ={d.theta:.2f}: closed form {d.closed_form:.1f}, empirical {d.empirical_min}"
                for d in self.death_cycles
            )
            lines.append(
                f"2. death cycle structural_min: {self.death_cycle_min} "
                f"(structural_perhop {perhop}; {forms})"
            )
        lines.append(
            f"3. prose vs structural_min flip ratio: {self.flip_ratio:.2f}× "
            f"({self.flip_prose_pct:.2f}% vs {self.flip_min_pct:.2f}%)"
        )
        if self.lineage_lookups_per_100 is not None and self.lineage_flip_rehydrate_pct is not None:
            lines.append(
                f"4. rehydration: {self.lineage_lookups_per_100:.0f} lookups per 100 "
                f"lineage-gate decisions; flip {self.lineage_flip_blind_pct:.2f}% → "
                f"{self.lineage_flip_rehydrate_pct:.2f}%"
            )
        lines.append("hypotheses: " + ", ".join(f"{h.hid} {h.verdict}" for h in self.hypotheses))
        return lines


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """Blind flip rates (%) at one (penalty, cadence)."""

    penalty: float
    cadence: int
    min_reconstruction: float
    prose_reconstruction: float
    perhop_reconstruction: float
    min_blocklist: float
    prose_blocklist: float
    min_all: float
    prose_all: float


@dataclass(frozen=True, slots=True)
class Crossover:
    """C* where structural_min's reconstruction flip rate drops to prose's."""

    penalty: float
    cadence: float | None
    cycles: float | None
    closed_form_death_cycle: float


@dataclass(frozen=True, slots=True)
class SweepFindings:
    steps: int
    points: tuple[SweepPoint, ...]
    crossovers: tuple[Crossover, ...]
    #: first sign change (either direction) of structural_min − prose on
    #: blocklist gates at the first penalty (blocklist flips do not depend on p)
    blocklist_crossover: float | None
    blocklist_crossover_direction: str | None
    #: penalties at which prose's pooled (all-gate) flip rate exceeds
    #: structural_min's at every cadence of the grid
    pooled_prose_behind_everywhere: tuple[float, ...]
    exponent: float | None
    n_runs: int

    def lines(self) -> list[str]:
        out = []
        for c in self.crossovers:
            cs = "none on grid" if c.cadence is None else f"C*={c.cadence:.1f}"
            cy = "" if c.cycles is None else f", cycles*={c.cycles:.1f}"
            out.append(f"p={c.penalty:g}: {cs}{cy}")
        if self.blocklist_crossover is not None:
            out.append(
                f"blocklist sign change: C≈{self.blocklist_crossover:.1f} "
                f"({self.blocklist_crossover_direction})"
            )
        if self.exponent is not None:
            out.append(f"fitted exponent: cycles* ∝ p^{self.exponent:.2f}")
        return out


def closed_form_death_cycle(theta: float, penalty: float) -> float:
    """n = ln θ / ln(1 − p): compactions until the min-folded value crosses θ."""
    if penalty <= 0.0:
        return math.inf
    return math.log(theta) / math.log(1.0 - penalty)


def crossover_cadence(
    cadences: list[int], diff: list[float], *, either_direction: bool = False
) -> float | None:
    """First sign change of ``diff`` from > 0 to ≤ 0, interpolated in log10(cadence).

    With ``either_direction`` a change from ≤ 0 to > 0 also counts.
    """
    for i in range(1, len(cadences)):
        d0, d1 = diff[i - 1], diff[i]
        down = d0 > 0.0 and d1 <= 0.0
        up = either_direction and d0 <= 0.0 and d1 > 0.0
        if down or up:
            x0, x1 = math.log10(cadences[i - 1]), math.log10(cadences[i])
            x = x0 + (x1 - x0) * d0 / (d0 - d1)
            return float(10.0**x)
    return None


def _read_csv(path: Path, columns: list[str]) -> Any:
    import pandas as pd

    if not path.exists():
        raise AnalysisError(f"{path}: missing (run `provnet experiment run` first)")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises several parser error types
        raise AnalysisError(f"{path}: not a readable CSV: {exc}") from exc
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path}: missing columns {missing}")
    return df


def _pct(num: float, den: float) -> float:
    return 100.0 * num / den if den else float("nan")


def _flip(df: Any) -> float:
    # 100 × (1 − agree/n), the lab's formula: it differs from 100 × flips/n in the
    # last float bit, which decides ties such as 16.175 → "16.17" when printed
    n = float(df["n"].sum())
    return 100.0 * (1.0 - float(df["n_agree"].sum()) / n) if n else float("nan")


def _mode_row(df: Any, arm: str, scope: str, mode: str) -> ModeRow:
    n = int(df["n"].sum())
    return ModeRow(
        arm,
        scope,
        mode,
        n,
        _pct(float(df["n_agree"].sum()), n),
        _pct(float(df["n_false_proceed"].sum()), n),
        _pct(float(df["n_false_stop"].sum()), n),
        _pct(float(df["lookups"].sum()), n),
        _pct(float(df["bytes_read"].sum()) / 1000.0, n),
    )


def _death_cycle(rows: Any) -> int | None:
    allowed = rows[rows["oracle_proceed"]]
    if allowed.empty:
        return None
    alive = allowed[allowed["proceed"]]
    if alive.empty:
        return int(allowed["cycle"].min())
    last = int(alive["cycle"].max())
    if int(allowed["cycle"].max()) <= last:
        return None
    return last + 1


def analyze(out: Path) -> Findings:
    """Compute every published number from a results directory."""
    from harness.metrics import DEATH_SPIRAL_COLUMNS, DRIFT_COLUMNS, GATE_COLUMNS

    gm = _read_csv(out / "gate_metrics.csv", GATE_COLUMNS)
    drift_df = _read_csv(out / "drift.csv", DRIFT_COLUMNS)
    meta_path = out / "run_meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        penalty = float(meta["config"]["reconstruction_penalty"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnalysisError(f"{meta_path}: missing or malformed ({exc})") from exc

    run_type = "main" if (gm["run_type"] == "main").any() else "trace"
    main = gm[gm["run_type"] == run_type]
    blind = main[main["mode"] == "blind"]
    n_runs = int(main[["cadence", "profile", "seed"]].drop_duplicates().shape[0])

    def arm_blind(arm: str) -> Any:
        return blind[blind["arm"] == arm]

    # headline 1
    cell: tuple[int, str] | None = None
    irr_fp: float | None = None
    cells = main[["cadence", "profile"]].drop_duplicates()
    if ((cells["cadence"] == 25) & (cells["profile"] == "med")).any():
        cell = (25, "med")
        sel = arm_blind("structural_min")
        sel = sel[(sel["cadence"] == 25) & (sel["profile"] == "med") & sel["irreversible"]]
        irr_fp = _pct(float(sel["n_false_proceed"].sum()), float(sel["n"].sum()))

    # headline 3
    flip_prose = _flip(arm_blind("prose"))
    flip_min = _flip(arm_blind("structural_min"))
    flip_perhop = _flip(arm_blind("structural_perhop"))

    # headline 4 and the rehydration table
    lineage = main[main["gate_class"].isin(_LINEAGE) & main["arm"].isin(_STRUCTURAL)]
    lin_blind = _flip(lineage[lineage["mode"] == "blind"])
    lin_deg = lineage[lineage["mode"] == "degrade"]
    lin_reh = lineage[lineage["mode"] == "rehydrate"]
    rehydration = tuple(
        _mode_row(
            lineage[(lineage["arm"] == arm) & (lineage["mode"] == mode)], arm, "lineage", mode
        )
        for arm in _STRUCTURAL
        for mode in ("blind", "degrade", "rehydrate")
        if not lineage[(lineage["arm"] == arm) & (lineage["mode"] == mode)].empty
    )
    payment_df = main[
        (main["policy"] == "payment_no_untrusted_taint") & main["arm"].isin(_STRUCTURAL)
    ]
    payment = tuple(
        _mode_row(
            payment_df[payment_df["mode"] == mode], "structural", "payment_no_untrusted_taint", mode
        )
        for mode in ("blind", "degrade", "rehydrate")
        if not payment_df[payment_df["mode"] == mode].empty
    )

    per_class = tuple(
        ClassRow(
            cls,
            *(
                _flip(blind[(blind["arm"] == arm) & (blind["gate_class"] == cls)])
                for arm in _JUDGED
            ),
        )
        for cls in _CLASSES
    )
    per_config = []
    for (c, prof), grp in blind.groupby(["cadence", "profile"], sort=False):
        for arm in _JUDGED:
            a = grp[grp["arm"] == arm]
            irr = a[a["irreversible"]]
            per_config.append(
                ConfigRow(
                    int(c),
                    str(prof),
                    arm,
                    _flip(a),
                    _pct(float(irr["n_false_proceed"].sum()), float(irr["n"].sum())),
                )
            )

    # drift
    dmain = drift_df[drift_df["run_type"] == run_type]
    drift_rows = []
    for (arm, axis), grp in dmain.groupby(["arm", "axis"], sort=False):
        n = int(grp["n"].sum())
        drift_rows.append(
            DriftRow(str(arm), str(axis), n, float(grp["sum_abs_err"].sum()) / n if n else 0.0)
        )

    def mae(arm: str, axis: str) -> float:
        for d in drift_rows:
            if d.arm == arm and d.axis == axis:
                return d.mae
        return float("nan")

    base_max = max(
        (d.mae for d in drift_rows if d.arm in _STRUCTURAL and d.axis != "reconstruction"),
        default=float("nan"),
    )

    # death spiral
    death_min: int | None = None
    death_perhop: int | None = None
    cycles: list[DeathCycle] = []
    n_compactions: int | None = None
    monotone = False
    ds_path = out / "death_spiral_decisions.csv"
    ds = _read_csv(ds_path, DEATH_SPIRAL_COLUMNS) if ds_path.exists() else None
    if ds is not None and not ds.empty:
        per_gate_min: list[int | None] = []
        per_gate_perhop: list[int | None] = []
        for gate, theta in DEATH_THRESHOLDS.items():
            g = ds[ds["policy"] == gate]
            e_min = _death_cycle(g[g["arm"] == "structural_min"])
            e_ph = _death_cycle(g[g["arm"] == "structural_perhop"])
            per_gate_min.append(e_min)
            per_gate_perhop.append(e_ph)
            cycles.append(
                DeathCycle(gate, theta, closed_form_death_cycle(theta, penalty), e_min, e_ph)
            )
        death_min = (
            None
            if any(x is None for x in per_gate_min)
            else max(x for x in per_gate_min if x is not None)
        )
        death_perhop = (
            None
            if any(x is None for x in per_gate_perhop)
            else max(x for x in per_gate_perhop if x is not None)
        )
        n_compactions = int(ds["n_compactions"].max())
        curve = _read_csv(out / "recon_curve.csv", ["run_type", "store_reconstruction"])
        store = curve[curve["run_type"] == "death_spiral"]["store_reconstruction"].to_numpy()
        monotone = bool(len(store) > 1 and (store[1:] <= store[:-1]).all())

    # prose channel
    prose_row: ProseChannelRow | None = None
    pc_path = out / "prose_channel.csv"
    if pc_path.exists():
        pc = _read_csv(pc_path, ["run_type", "extractions", "kept", "true_taints", "fabricated"])
        pc = pc[pc["run_type"] == run_type]
        kept = int(pc["kept"].sum())
        true = int(pc["true_taints"].sum())
        fab = int(pc["fabricated"].sum())
        prose_cfg = meta["config"].get("prose", {})
        prose_row = ProseChannelRow(
            int(pc["extractions"].sum()),
            int(pc["parse_failures"].sum()),
            true,
            kept,
            fab,
            float(prose_cfg.get("taint_recall", float("nan"))),
            float(prose_cfg.get("taint_precision", float("nan"))),
            kept / true if true else float("nan"),
            kept / (kept + fab) if kept + fab else float("nan"),
        )

    hyps = _hypotheses(blind, per_class, death_min, death_perhop, monotone, lin_blind)
    return Findings(
        n_runs=n_runs,
        headline_cell=cell,
        irreversible_false_proceed_pct=irr_fp,
        death_cycle_min=death_min,
        death_cycle_perhop=death_perhop,
        death_cycles=tuple(cycles),
        death_spiral_compactions=n_compactions,
        flip_prose_pct=flip_prose,
        flip_min_pct=flip_min,
        flip_perhop_pct=flip_perhop,
        flip_ratio=flip_prose / flip_min if flip_min else float("inf"),
        lineage_lookups_per_100=_pct(float(lin_reh["lookups"].sum()), float(lin_reh["n"].sum()))
        if not lin_reh.empty
        else None,
        lineage_kb_per_100=_pct(
            float(lin_reh["bytes_read"].sum()) / 1000.0, float(lin_reh["n"].sum())
        )
        if not lin_reh.empty
        else None,
        lineage_flip_blind_pct=lin_blind,
        lineage_flip_rehydrate_pct=_flip(lin_reh) if not lin_reh.empty else None,
        lineage_flip_degrade_pct=_flip(lin_deg) if not lin_deg.empty else None,
        per_class=per_class,
        per_config=tuple(per_config),
        payment=payment,
        rehydration=rehydration,
        drift=tuple(drift_rows),
        drift_min_reconstruction=mae("structural_min", "reconstruction"),
        drift_perhop_reconstruction=mae("structural_perhop", "reconstruction"),
        drift_base_max=base_max,
        prose_channel=prose_row,
        hypotheses=hyps,
        penalty=penalty,
    )


def _counts(df: Any) -> tuple[int, int, int]:
    return int(df["n"].sum()), int(df["n_false_proceed"].sum()), int(df["n_false_stop"].sum())


def _hypotheses(
    blind: Any,
    per_class: tuple[ClassRow, ...],
    death_min: int | None,
    death_perhop: int | None,
    monotone: bool,
    lineage_flip: float,
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
        f"structural_perhop {'never' if death_perhop is None else death_perhop}",
        monotone and death_min is not None and death_perhop is None,
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


def analyze_sweep(out: Path) -> SweepFindings:
    """Crossover C* per penalty, cycles* = steps / C*, and the fitted exponent."""
    from harness.metrics import SWEEP_COLUMNS

    df = _read_csv(out / "sweep_metrics.csv", SWEEP_COLUMNS)
    steps = 500
    meta_path = out / "run_meta.json"
    if meta_path.exists():
        try:
            steps = int(json.loads(meta_path.read_text(encoding="utf-8"))["config"]["steps"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AnalysisError(f"{meta_path}: malformed ({exc})") from exc
    blind = df[df["mode"] == "blind"]
    n_runs = int(blind[["penalty", "cadence", "seed"]].drop_duplicates().shape[0])
    agg = (
        blind.groupby(["penalty", "cadence", "arm", "gate_class"])[["n", "n_agree"]]
        .sum()
        .reset_index()
    )
    pooled = blind.groupby(["penalty", "cadence", "arm"])[["n", "n_agree"]].sum().reset_index()

    def rate(frame: Any, **sel: object) -> float:
        f = frame
        for k, v in sel.items():
            f = f[f[k] == v]
        return _flip(f)

    points = []
    crossovers = []
    penalties = sorted(float(p) for p in blind["penalty"].unique())
    cadences = sorted(int(c) for c in blind["cadence"].unique())
    block_cross: float | None = None
    block_dir: str | None = None
    behind: list[float] = []
    for p in penalties:
        a = agg[agg["penalty"] == p]
        pa = pooled[pooled["penalty"] == p]
        diffs = []
        block_diffs = []
        for c in cadences:
            ac = a[a["cadence"] == c]
            pt = SweepPoint(
                p,
                c,
                rate(ac, arm="structural_min", gate_class="reconstruction"),
                rate(ac, arm="prose", gate_class="reconstruction"),
                rate(ac, arm="structural_perhop", gate_class="reconstruction"),
                rate(ac, arm="structural_min", gate_class="lineage_blocklist"),
                rate(ac, arm="prose", gate_class="lineage_blocklist"),
                rate(pa[pa["cadence"] == c], arm="structural_min"),
                rate(pa[pa["cadence"] == c], arm="prose"),
            )
            points.append(pt)
            diffs.append(pt.min_reconstruction - pt.prose_reconstruction)
            block_diffs.append(pt.min_blocklist - pt.prose_blocklist)
        c_star = crossover_cadence(cadences, diffs)
        crossovers.append(
            Crossover(
                p, c_star, steps / c_star if c_star else None, closed_form_death_cycle(0.5, p)
            )
        )
        if p == penalties[0]:
            block_cross = crossover_cadence(cadences, block_diffs, either_direction=True)
            if block_cross is not None:
                i = next(k for k in range(1, len(cadences)) if cadences[k] > block_cross)
                block_dir = (
                    "structural_min rises above prose"
                    if block_diffs[i] > 0.0
                    else "structural_min falls below prose"
                )
        pts = [pt for pt in points if pt.penalty == p]
        if all(pt.prose_all > pt.min_all for pt in pts):
            behind.append(p)
    fit = [
        (math.log(c.penalty), math.log(c.cycles)) for c in crossovers if c.cycles and c.penalty > 0
    ]
    exponent: float | None = None
    if len(fit) >= 2:
        xs = [x for x, _ in fit]
        ys = [y for _, y in fit]
        mx = sum(xs) / len(xs)
        my = sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        exponent = sum((x - mx) * (y - my) for x, y in fit) / sxx if sxx else None
    return SweepFindings(
        steps,
        tuple(points),
        tuple(crossovers),
        block_cross,
        block_dir,
        tuple(behind),
        exponent,
        n_runs,
    )
