"""Reading results files and the rate arithmetic shared by the analyses.

Internal to :mod:`harness.analysis`, :mod:`harness.crossover` and
:mod:`harness.hypotheses`; the public names are re-exported there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "AnalysisError",
    "check_frame",
    "closed_form_death_cycle",
    "flip",
    "pct",
    "read_csv",
    "read_or_check",
]


class AnalysisError(ValueError):
    """A results directory is missing a file or a column."""


def closed_form_death_cycle(theta: float, penalty: float) -> float:
    """n = ln θ / ln(1 − p): compactions until the min-folded value crosses θ."""
    if penalty <= 0.0:
        return math.inf
    return math.log(theta) / math.log(1.0 - penalty)


def read_csv(path: Path, columns: list[str]) -> Any:
    import pandas as pd

    if not path.exists():
        raise AnalysisError(f"{path}: missing (run `provnet experiment run` first)")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises several parser error types
        raise AnalysisError(f"{path}: not a readable CSV: {exc}") from exc
    return check_frame(path, df, columns)


def read_or_check(
    out: Path, name: str, columns: list[str], loaded: Mapping[str, Any] | None
) -> Any:
    """``out/name`` read and checked, or the frame the caller already read from it, checked."""
    frame = None if loaded is None else loaded.get(name)
    if frame is None:
        return read_csv(out / name, columns)
    return check_frame(out / name, frame, columns)


def check_frame(path: Path, df: Any, columns: list[str]) -> Any:
    """The column checks of :func:`read_csv` on a frame read from ``path``."""
    import pandas as pd

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path}: missing columns {missing}")
    for column in columns:
        if column in _NUMERIC and not df.empty:
            if not pd.api.types.is_numeric_dtype(df[column]):
                raise AnalysisError(f"{path}: column '{column}' must be numeric")
        elif column in _BOOLEAN and not df.empty and not pd.api.types.is_bool_dtype(df[column]):
            raise AnalysisError(f"{path}: column '{column}' must be True/False")
    return df


_NUMERIC = frozenset(
    {
        "cadence",
        "seed",
        "n",
        "n_agree",
        "n_false_proceed",
        "n_false_stop",
        "n_proceed",
        "n_oracle_proceed",
        "lookups",
        "bytes_read",
        "penalty",
        "sum_abs_err",
        "mae",
        "step",
        "cycle",
        "n_compactions",
        "recon_min",
        "fidelity_perhop",
        "recon_prose",
        "reconstruction",
        "n_extractions",
        "n_parse_failures",
        "parse_failure_rate",
        "n_true_taints",
        "n_kept_taints",
        "n_fabricated_taints",
    }
)
_BOOLEAN = frozenset({"irreversible", "proceed", "oracle_proceed"})


def pct(num: float, den: float) -> float:
    return 100.0 * num / den if den else float("nan")


def flip(df: Any) -> float:
    # 100 × (1 − agree/n), the lab's formula: it differs from 100 × flips/n in the
    # last float bit, which decides ties such as 16.175 → "16.17" when printed
    n = float(df["n"].sum())
    return 100.0 * (1.0 - float(df["n_agree"].sum()) / n) if n else float("nan")
