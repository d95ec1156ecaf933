"""Confusion counting against the oracle (spec §7)."""

from __future__ import annotations

from harness.metrics import GATE_COLUMNS, SWEEP_COLUMNS, GateCounts


def test_false_proceed_and_false_stop_are_judged_against_the_oracle() -> None:
    c = GateCounts()
    c.add(True, True, 0, 0)  # agree, proceed
    c.add(True, False, 0, 0)  # false-proceed: arm proceeds, oracle blocks
    c.add(False, True, 3, 300)  # false-stop: arm blocks, oracle proceeds
    c.add(False, False, 2, 200)  # agree, block
    assert (c.n, c.agree, c.false_proceed, c.false_stop) == (4, 2, 1, 1)
    assert (c.proceed, c.oracle_proceed) == (2, 2)
    assert (c.lookups, c.bytes_read) == (5, 500)


def test_sweep_rows_are_gate_rows_plus_penalty() -> None:
    assert [*GATE_COLUMNS, "penalty"] == SWEEP_COLUMNS
    assert GATE_COLUMNS[:4] == ["run_type", "cadence", "profile", "seed"]
