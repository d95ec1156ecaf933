"""Words for results and console output: counts with their noun, yes/no for flags.

Output is read by people, not by Python: a count agrees with its noun ("1
receipt", "2 receipts") and a flag reads as a word, never as ``True``/``None``.
"""

from __future__ import annotations

__all__ = ["count", "yes_no"]

_IRREGULAR = {"re-ask": "re-asks", "suspicion": "suspicions", "is": "are", "was": "were"}


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n`` is 1 ("1 run", "3 runs")."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n:,} {plural or _IRREGULAR.get(noun) or noun + 's'}"


def yes_no(flag: bool) -> str:
    """``flag`` as a word for a table cell."""
    return "yes" if flag else "no"
