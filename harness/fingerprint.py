"""SHA-256 over a canonical decision log: the determinism contract.

For each decision point, in event order, one line (UTF-8, ``\\n``
terminated)::

    {step} {value_id} {tokens}

``tokens`` concatenates, for every evaluation in canonical order — arms in
``ground_truth, structural_min, structural_perhop, prose`` order, gates in
spec order, modes in ``blind, degrade, rehydrate`` order (only the modes
evaluated) — ``1`` for proceed or ``0`` for block, followed by
``({lookups},{bytes_read})`` when the evaluation fetched hops. Two runs with
the same fingerprint made the same decisions at the same cost.

A set of runs is fingerprinted by hashing ``{run key} {run fingerprint}\\n``
lines in the canonical run order (independent of worker scheduling).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["DecisionLog", "combine"]


class DecisionLog:
    """Streams decision lines into a SHA-256; keeps nothing else."""

    __slots__ = ("_h", "count")

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.count = 0

    def add(self, step: int, value_id: int, tokens: str) -> None:
        self._h.update(f"{step} {value_id} {tokens}\n".encode())
        self.count += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def combine(entries: Iterable[tuple[str, str]]) -> str:
    """One fingerprint over (run label, run fingerprint) pairs, in the given order."""
    h = hashlib.sha256()
    for label, digest in entries:
        h.update(f"{label} {digest}\n".encode())
    return h.hexdigest()
