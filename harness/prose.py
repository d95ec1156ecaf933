"""The prose channel: summarize → extract round trip of the prose arm (spec §4).

The ``prose`` arm is Part 5's honest-but-naive baseline: at every
compaction its working state goes through a summary and is extracted back;
whatever survives the round trip replaces the arm's vector and taints.

:class:`MockProseChannel` is the deterministic default: its own
``default_rng(seed + 1_000_003)`` per run, consumed per round trip in this
order: (1) only if ``parse_failure_rate > 0``, one ``random()`` deciding a
parse failure (all scores 0.0, no taints); (2) one ``normal(0, σ)`` per axis
in canonical order; (3) one ``random()`` per taint in sorted order (kept iff
< recall); (4) if any were kept, ``binomial(len(kept), min((1 − precision) /
precision, 1))`` fabricated taints; (5) one ``integers(4)`` per fabricated
taint picking its family. Batched draws (``normal(0, σ, 5)``,
``random(n)``) consume the stream exactly as the scalar calls do; the
tests check this equality.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from harness.config import ProseConfig

__all__ = [
    "FAB_FAMILIES",
    "PROSE_SEED_OFFSET",
    "ChannelSource",
    "Extraction",
    "MockProseChannel",
    "ProseChannel",
    "ProseCounters",
]

PROSE_SEED_OFFSET = 1_000_003
FAB_FAMILIES: tuple[str, ...] = ("unverified_web", "fallback_model", "tool_flaky", "stale_cache")


@dataclass(frozen=True, slots=True)
class Extraction:
    """What the extract call recovered from one summary."""

    scores: tuple[float, ...]
    taints: frozenset[str]
    blob: str


@dataclass(slots=True)
class ProseCounters:
    """Realised channel quality over a run (recall/precision as measured)."""

    extractions: int = 0
    parse_failures: int = 0
    true_taints: int = 0
    kept: int = 0
    fabricated: int = 0
    #: real channel only (:mod:`harness.prose_llm`): requests sent, answers
    #: taken from the cache, refusals (each refusal is also a parse failure)
    llm_calls: int = 0
    cache_hits: int = 0
    refusals: int = 0

    @property
    def realized_recall(self) -> float:
        return self.kept / self.true_taints if self.true_taints else float("nan")

    @property
    def realized_precision(self) -> float:
        total = self.kept + self.fabricated
        return self.kept / total if total else float("nan")


class ProseChannel(Protocol):
    """A summarize→extract round trip over one value's state."""

    counters: ProseCounters

    def round_trip(
        self, scores: Sequence[float], taints: frozenset[str] | set[str], step: int
    ) -> Extraction: ...


class ChannelSource(Protocol):
    """Where a run's prose channel comes from when it is not the mock.

    The default (no source) builds a :class:`MockProseChannel` inside each
    run from its prose seed; a source (the real channel of
    :mod:`harness.prose_llm`) hands out one channel per run and describes
    itself for ``run_meta.json``.
    """

    def channel(self, seed: int) -> ProseChannel: ...

    def meta(self) -> dict[str, object]: ...


class MockProseChannel:
    """Deterministic mock channel: gaussian score noise, lossy taint recall."""

    __slots__ = ("_fab_p", "_normal", "_random", "_rng", "_sigma", "config", "counters")

    def __init__(self, seed: int, config: ProseConfig) -> None:
        self.config = config
        self._rng = np.random.default_rng(seed + PROSE_SEED_OFFSET)
        self._random = self._rng.random
        self._normal = self._rng.normal
        self._sigma = config.sigma
        self._fab_p = min((1.0 - config.taint_precision) / config.taint_precision, 1.0)
        self.counters = ProseCounters()

    def round_trip(
        self, scores: Sequence[float], taints: frozenset[str] | set[str], step: int
    ) -> Extraction:
        rng = self._rng
        cfg = self.config
        counters = self.counters
        counters.extractions += 1
        counters.true_taints += len(taints)
        blob = f"[prose summary of state at step {step}]"
        if cfg.parse_failure_rate > 0.0 and self._random() < cfg.parse_failure_rate:
            counters.parse_failures += 1
            return Extraction((0.0, 0.0, 0.0, 0.0, 0.0), frozenset(), blob)
        noise = self._normal(0.0, self._sigma, len(scores)).tolist()
        extracted = []
        for s, e in zip(scores, noise, strict=True):
            x = s + e
            extracted.append(0.0 if x < 0.0 else 1.0 if x > 1.0 else x)
        kept: list[str] = []
        if taints:
            ordered = sorted(taints)
            draws = self._random(len(ordered)).tolist()
            recall = cfg.taint_recall
            kept = [t for t, u in zip(ordered, draws, strict=True) if u < recall]
        out = set(kept)
        if kept:
            n_fab = int(rng.binomial(len(kept), self._fab_p))
            for i in range(n_fab):
                family = FAB_FAMILIES[int(rng.integers(4))]
                out.add(f"taint:{family}:{step}~fab{i}")
            counters.fabricated += n_fab
        counters.kept += len(kept)
        return Extraction(tuple(extracted), frozenset(out), blob)
