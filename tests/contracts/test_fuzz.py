"""Mutation fuzzing: every input is accepted (valid) or rejected with a ContractError."""

from __future__ import annotations

import pytest

from tests.contracts._fuzz import run_fuzz


def test_fuzz_mutated_inputs_only_ever_raise_contract_errors() -> None:
    report = run_fuzz(4_000, seed=20261129)
    assert report.failures == []
    assert report.inputs == 4_000
    # The mutations reach past the envelope into statement and evidence checks.
    assert report.rejected["EncodingError"] > 0
    assert report.rejected["BadSignature"] > 0
    assert sum(report.rejected.values()) - report.rejected["EncodingError"] > 100
    assert report.accepted > 0
    # Heads, fold proofs and lazily judged receipts are among the targets.
    assert report.targets["_HeadServedTarget"] > 20
    assert report.targets["_FoldProofTarget"] > 20


@pytest.mark.long
def test_fuzz_long_run_of_100k_mutated_inputs_only_raises_contract_errors() -> None:
    report = run_fuzz(120_000, seed=7)
    print(f"fuzz: {report.inputs} inputs, {report.accepted} accepted, {dict(report.rejected)}")
    assert report.failures == []
    assert report.inputs >= 100_000
