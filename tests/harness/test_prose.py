"""The mock prose channel (spec §4): exact rng order and realised recall/precision."""

from __future__ import annotations

import numpy as np

from harness.config import ProseConfig
from harness.prose import FAB_FAMILIES, PROSE_SEED_OFFSET, MockProseChannel


def _scalar_round_trip(
    rng: np.random.Generator, scores: list[float], taints: set[str], step: int, cfg: ProseConfig
) -> tuple[tuple[float, ...], frozenset[str]]:
    # the spec's scalar call order, written out literally
    out = [min(1.0, max(0.0, s + rng.normal(0, cfg.sigma))) for s in scores]
    kept = [t for t in sorted(taints) if rng.random() < cfg.taint_recall]
    fab: set[str] = set()
    if kept:
        p = min((1 - cfg.taint_precision) / cfg.taint_precision, 1.0)
        n_fab = rng.binomial(len(kept), p)
        for i in range(n_fab):
            fab.add(f"taint:{FAB_FAMILIES[rng.integers(4)]}:{step}~fab{i}")
    return tuple(out), frozenset(kept) | fab


def test_batched_draws_equal_the_spec_scalar_order() -> None:
    cfg = ProseConfig()
    for seed in range(40):
        channel = MockProseChannel(seed, cfg)
        rng = np.random.default_rng(seed + PROSE_SEED_OFFSET)
        for k in range(30):
            scores = [1.0, 0.7 - k * 0.01, 0.65, 0.45, 0.98**k]
            taints = {f"taint:tool_flaky:{s}" for s in range(k % 7)}
            got = channel.round_trip(scores, taints, k)
            expected_scores, expected_taints = _scalar_round_trip(rng, scores, taints, k, cfg)
            assert got.scores == expected_scores
            assert got.taints == expected_taints


def test_realised_recall_and_precision_match_the_configured_channel() -> None:
    cfg = ProseConfig(sigma=0.08, taint_recall=0.6, taint_precision=0.9)
    channel = MockProseChannel(0, cfg)
    taints = {f"taint:unverified_web:{s}" for s in range(10)}
    for step in range(2000):
        channel.round_trip([0.5] * 5, taints, step)
    c = channel.counters
    assert c.extractions == 2000
    assert c.true_taints == 20000
    assert abs(c.realized_recall - 0.6) < 0.01
    assert abs(c.realized_precision - 0.9) < 0.01


def test_scores_carry_gaussian_noise_clipped_to_unit_interval() -> None:
    channel = MockProseChannel(1, ProseConfig(sigma=0.08))
    errors: list[float] = []
    for step in range(2000):
        ext = channel.round_trip([0.5] * 5, set(), step)
        errors.extend(x - 0.5 for x in ext.scores)
        assert not ext.taints
    assert abs(float(np.std(errors)) - 0.08) < 0.005
    top = channel.round_trip([1.0] * 5, set(), 0)
    assert all(0.0 <= x <= 1.0 for x in top.scores)


def test_parse_failure_yields_the_worst_case_and_is_counted() -> None:
    channel = MockProseChannel(2, ProseConfig(parse_failure_rate=1.0))
    ext = channel.round_trip([0.9] * 5, {"taint:tool_flaky:1"}, 5)
    assert ext.scores == (0.0,) * 5
    assert ext.taints == frozenset()
    assert channel.counters.parse_failures == 1


def test_fabricated_taints_are_marked_and_never_collide_with_real_ones() -> None:
    channel = MockProseChannel(3, ProseConfig(taint_recall=1.0, taint_precision=0.5))
    ext = channel.round_trip([1.0] * 5, {"taint:tool_flaky:1", "taint:stale_cache:2"}, 9)
    fabricated = {t for t in ext.taints if "~fab" in t}
    assert ext.taints - fabricated == {"taint:tool_flaky:1", "taint:stale_cache:2"}
    assert all(t.endswith(tuple(f":9~fab{i}" for i in range(2))) for t in fabricated)
    assert channel.counters.fabricated == len(fabricated)
