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

Preregistered hypotheses: :mod:`harness.hypotheses`; the sweep's
crossover analysis: :mod:`harness.crossover` (both re-exported here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness._results import AnalysisError, closed_form_death_cycle, read_or_check
from harness._results import flip as _flip
from harness._results import pct as _pct
from harness._results import read_csv as _read_csv
from harness.arms import STRUCTURAL_ARMS
from harness.crossover import (
    Crossover,
    SweepFindings,
    SweepPoint,
    analyze_sweep,
    crossover_cadence,
)
from harness.gates import GateClass
from harness.hypotheses import Hypothesis, evaluate_hypotheses

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
_STRUCTURAL = tuple(a.value for a in STRUCTURAL_ARMS)
_JUDGED = ("prose", *_STRUCTURAL)
_CLASSES = tuple(c.value for c in GateClass)
_LINEAGE = tuple(c.value for c in GateClass if c.is_lineage)


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
    #: run_meta.json's ``llm_channel`` when a real channel ran (None: the mock)
    llm: dict[str, object] | None = None


@dataclass(frozen=True, slots=True)
class Findings:
    """Every number the report prints for a main run."""

    run_type: str  # "main", or "trace" for a results directory of trace replays
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


def analyze(out: Path, *, loaded: Mapping[str, Any] | None = None) -> Findings:
    """Compute every published number from a results directory.

    ``loaded`` maps file names in ``out`` to frames the caller has already
    read from them (checked again here, not re-read).
    """
    from harness.metrics import (
        GATE_COLUMNS,
        LAB_DEATH_SPIRAL_COLUMNS,
        LAB_DRIFT_COLUMNS,
        LAB_PROSE_COLUMNS,
    )

    gm = read_or_check(out, "gate_metrics.csv", GATE_COLUMNS, loaded)
    drift_df = read_or_check(out, "drift.csv", LAB_DRIFT_COLUMNS, loaded)
    meta_path = out / "run_meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        # the lab's top-level key; older provnet folders have it in config only
        penalty = float(
            meta["reconstruction_penalty"]
            if "reconstruction_penalty" in meta
            else meta["config"]["reconstruction_penalty"]
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnalysisError(f"{meta_path}: missing or malformed ({exc})") from exc
    config = meta.get("config")
    config = config if isinstance(config, dict) else {}

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
        # provnet's extra column sum_abs_err is exact; a lab folder has mae and n only
        total = (
            float(grp["sum_abs_err"].sum())
            if "sum_abs_err" in grp.columns
            else float((grp["mae"] * grp["n"]).sum())
        )
        drift_rows.append(DriftRow(str(arm), str(axis), n, total / n if n else 0.0))

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
    ds = _read_csv(ds_path, LAB_DEATH_SPIRAL_COLUMNS) if ds_path.exists() else None
    if ds is not None and not ds.empty:
        if "cycle" not in ds.columns:  # a lab folder: cycle = step // cadence
            ds = ds.assign(cycle=ds["step"] // ds["cadence"])
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
        curve = read_or_check(out, "recon_curve.csv", ["run_type", "recon_min"], loaded)
        spiral = curve[curve["run_type"] == "death_spiral"]
        n_compactions = (
            int(ds["n_compactions"].max())
            if "n_compactions" in ds.columns
            else int(spiral["n_compactions"].max())
        )
        store = spiral["recon_min"].to_numpy()
        monotone = bool(len(store) > 1 and (store[1:] <= store[:-1]).all())

    # prose channel
    prose_row: ProseChannelRow | None = None
    pc_path = out / "prose_channel.csv"
    if pc_path.exists():
        pc = _read_csv(pc_path, LAB_PROSE_COLUMNS)
        pc = pc[pc["run_type"] == run_type]
        kept = int(pc["n_kept_taints"].sum())
        true = int(pc["n_true_taints"].sum())
        fab = int(pc["n_fabricated_taints"].sum())
        prose_cfg = config.get("prose", {}) if isinstance(config.get("prose"), dict) else {}
        prose_row = ProseChannelRow(
            int(pc["n_extractions"].sum()),
            int(pc["n_parse_failures"].sum()),
            true,
            kept,
            fab,
            float(prose_cfg.get("taint_recall", float("nan"))),
            float(prose_cfg.get("taint_precision", float("nan"))),
            kept / true if true else float("nan"),
            kept / (kept + fab) if kept + fab else float("nan"),
            meta["llm_channel"] if isinstance(meta.get("llm_channel"), dict) else None,
        )

    hyps = evaluate_hypotheses(
        blind,
        per_class,
        death_min,
        death_perhop,
        monotone,
        lin_blind,
        has_death_spiral=ds is not None and not ds.empty,
    )
    return Findings(
        run_type=run_type,
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
