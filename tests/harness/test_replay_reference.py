"""The engine against the literal, unoptimised reference implementation of the spec."""

from __future__ import annotations

import pytest

from harness.config import DEFAULT_PROFILES, ProseConfig
from harness.reference import reference_generate, reference_run
from harness.replay import ReplayParams, replay
from harness.trajectory import generate


@pytest.mark.parametrize(
    ("profile", "cadence", "seed"),
    [("low", 10, 0), ("med", 25, 0), ("high", 50, 3), ("high", 2, 5), ("med", 3, 8)],
)
def test_engine_matches_the_reference_decision_for_decision(
    profile: str, cadence: int, seed: int
) -> None:
    events = reference_generate(seed, 400, 5, DEFAULT_PROFILES[profile])
    # bisect-on-cdf op draws consume the stream exactly as rng.choice(5, p=w)
    assert events == generate(seed, 400, 5, DEFAULT_PROFILES[profile])
    fingerprint, rows = reference_run(events, cadence, prose_seed=seed)
    result = replay(events, ReplayParams(cadence=cadence, prose_seed=seed))
    assert result.fingerprint == fingerprint
    assert sorted(result.gate_rows) == sorted(rows)


def test_engine_matches_the_reference_blind_only_with_parse_failures() -> None:
    prose = ProseConfig(sigma=0.2, taint_recall=0.3, taint_precision=0.6, parse_failure_rate=0.1)
    events = generate(2, 300, 5, DEFAULT_PROFILES["high"])
    fingerprint, rows = reference_run(
        events, 5, penalty=0.1, prose=prose, prose_seed=2, lineage_modes=False, rehydrate=False
    )
    result = replay(
        events,
        ReplayParams(
            cadence=5, penalty=0.1, prose=prose, prose_seed=2, lineage_modes=False, rehydrate=False
        ),
    )
    assert result.fingerprint == fingerprint
    assert sorted(result.gate_rows) == sorted(rows)
    assert result.prose.parse_failures > 0
