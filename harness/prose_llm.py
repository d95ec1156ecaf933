"""The real prose channel: Part 5's summarize → extract round trip through a model.

Per compaction, per live value (the prose arm's order), two requests:

1. **summarize** — the value's five scores (canonical axis order, four
   decimals) and its taint ids (sorted) go to the model, which writes the
   working state as plain prose in at most :data:`SUMMARY_WORDS` words,
   provenance included. A longer answer is cut to its first
   :data:`SUMMARY_WORDS` words. The summary is the arm's new lineage blob.
2. **extract** — the summary alone goes back with a JSON schema (Chat
   Completions ``response_format``; a forced tool on Anthropic Messages);
   the model returns ``{"scores": {axis: number}, "taints": [id, …]}``.

The extraction replaces the arm's vector and taints, exactly as the mock's
does (spec §4). A round trip that yields no usable extraction — a refusal
of either call, an empty summary, an answer that is not JSON, misses an
axis, or holds a non-number — is a **parse failure**: the worst-case result
(all scores 0.0, no taints), as the mock's. Scores are clipped to [0, 1].
Extracted taints that are among the value's true taints count as kept,
the others as fabricated, so realised recall and precision are measured the
same way as the mock's.

The prompts carry no step and no run key, so equal states make equal
requests: the client's cache (:mod:`harness.llm`) answers repeats within a
run and across reruns without a call. With every answer cached, a run is
reproducible to its fingerprint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.events import AXES
from harness.llm import ChatReply, ChatRequest, LLMClient, LLMSettings, LLMSetupError, Provider
from harness.prose import Extraction, ProseCounters

__all__ = [
    "EXTRACT_SCHEMA",
    "SUMMARY_WORDS",
    "LLMChannelSource",
    "LLMProseChannel",
    "config_model",
    "extract_request",
    "parse_extraction",
    "resolve_settings",
    "summarize_request",
]

SUMMARY_WORDS = 150
#: room for reasoning models, whose hidden reasoning counts against the cap
_MAX_TOKENS = 2000
_WORST = (0.0,) * len(AXES)

EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "object",
            "properties": {axis: {"type": "number"} for axis in AXES},
            "required": list(AXES),
            "additionalProperties": False,
        },
        "taints": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["scores", "taints"],
    "additionalProperties": False,
}
_SCHEMA_NAME = "record_working_state"

_SUMMARIZE_SYSTEM = (
    "You compact an AI agent's working memory. You write short plain prose that a later "
    "step will read instead of the original state."
)
_EXTRACT_SYSTEM = (
    "You read a prose summary of an AI agent's working memory and recover the provenance "
    "it states: the five scores and every taint id."
)


def summarize_request(scores: Sequence[float], taints: frozenset[str] | set[str]) -> ChatRequest:
    """The summarize call for one value's state."""
    lines = [f"- {axis}: {score:.4f}" for axis, score in zip(AXES, scores, strict=True)]
    taint_lines = [f"- {t}" for t in sorted(taints)] or ["- (none)"]
    user = (
        "Working state of one value in the agent's memory.\n"
        "Provenance scores (0 = untrusted, 1 = pristine):\n"
        + "\n".join(lines)
        + "\nTaints attached to the value:\n"
        + "\n".join(taint_lines)
        + f"\n\nSummarize this working state in at most {SUMMARY_WORDS} words of plain prose. "
        "Keep its provenance: every score with its value and every taint id exactly as written."
    )
    return ChatRequest(_SUMMARIZE_SYSTEM, user, _MAX_TOKENS)


def extract_request(summary: str) -> ChatRequest:
    """The extract call for one summary (structured answer)."""
    user = (
        "Summary of the working state:\n"
        f"{summary}\n\n"
        f"Return the scores {', '.join(AXES)} as numbers in [0, 1] and every taint id the "
        "summary mentions, exactly as written (an empty list if there are none)."
    )
    return ChatRequest(_EXTRACT_SYSTEM, user, _MAX_TOKENS, (_SCHEMA_NAME, EXTRACT_SCHEMA))


def parse_extraction(obj: Mapping[str, Any]) -> tuple[tuple[float, ...], frozenset[str]] | str:
    """(scores, taints) from an extract answer, or why it is unusable."""
    scores = obj.get("scores")
    if not isinstance(scores, Mapping):
        return "'scores' is not an object"
    values: list[float] = []
    for axis in AXES:
        v = scores.get(axis)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"scores.{axis}: expected a number, got {v!r}"
        values.append(min(1.0, max(0.0, float(v))))
    taints = obj.get("taints")
    if not isinstance(taints, list) or not all(isinstance(t, str) for t in taints):
        return "'taints' is not a list of strings"
    return tuple(values), frozenset(t.strip() for t in taints if t.strip())


def _cut(text: str) -> str:
    words = text.split()
    return " ".join(words[:SUMMARY_WORDS])


class LLMProseChannel:
    """One run's channel over a shared client; counts into its own counters."""

    __slots__ = ("client", "counters")

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.counters = ProseCounters()

    def _ask(self, request: ChatRequest) -> ChatReply:
        stats = self.client.stats
        calls, hits = stats.calls, stats.cache_hits
        try:
            return self.client.complete(request)
        finally:
            self.counters.llm_calls += stats.calls - calls
            self.counters.cache_hits += stats.cache_hits - hits

    def _fail(self, blob: str, refused: bool) -> Extraction:
        self.counters.parse_failures += 1
        if refused:
            self.counters.refusals += 1
        return Extraction(_WORST, frozenset(), blob)

    def round_trip(
        self, scores: Sequence[float], taints: frozenset[str] | set[str], step: int
    ) -> Extraction:
        counters = self.counters
        counters.extractions += 1
        counters.true_taints += len(taints)
        summary = self._ask(summarize_request(scores, taints))
        if summary.refusal is not None:
            return self._fail(f"[summary refused at step {step}]", refused=True)
        blob = _cut(summary.text or "")
        if not blob:
            return self._fail(f"[empty summary at step {step}]", refused=False)
        reply = self._ask(extract_request(blob))
        if reply.refusal is not None or reply.structured is None:
            return self._fail(blob, refused=reply.refusal is not None)
        parsed = parse_extraction(reply.structured)
        if isinstance(parsed, str):
            return self._fail(blob, refused=False)
        values, extracted = parsed
        kept = extracted & taints
        counters.kept += len(kept)
        counters.fabricated += len(extracted) - len(kept)
        return Extraction(values, extracted, blob)


@dataclass(slots=True)
class LLMChannelSource:
    """A fresh :class:`LLMProseChannel` per run, all sharing one client."""

    client: LLMClient
    channels: list[LLMProseChannel]

    @classmethod
    def open(cls, client: LLMClient) -> LLMChannelSource:
        return cls(client, [])

    def channel(self, seed: int) -> LLMProseChannel:
        ch = LLMProseChannel(self.client)
        self.channels.append(ch)
        return ch

    def meta(self) -> dict[str, object]:
        """What ``run_meta.json`` records under ``llm_channel``."""
        s = self.client.settings
        total = ProseCounters()
        for ch in self.channels:
            c = ch.counters
            total.extractions += c.extractions
            total.parse_failures += c.parse_failures
            total.refusals += c.refusals
        return {
            "provider": s.provider.value,
            "model": s.model,
            "base_url": s.base_url,
            "calls": self.client.stats.calls,
            "cache_hits": self.client.stats.cache_hits,
            "retries": self.client.stats.retries,
            "extractions": total.extractions,
            "parse_failures": total.parse_failures,
            "refusals": total.refusals,
            "budget": s.budget,
            "cache_dir": str(s.cache_dir),
        }

    def close(self) -> None:
        self.client.close()


def config_model(config: object, provider: Provider) -> str | None:
    """The config's ``prose.<provider>_model``, if the loaded config carries one."""
    prose = getattr(config, "prose", None)
    name = getattr(prose, f"{provider.value}_model", None)
    if name is None and isinstance(prose, Mapping):
        name = prose.get(f"{provider.value}_model")
    return name if isinstance(name, str) and name else None


def resolve_settings(
    provider: Provider,
    *,
    model: str | None,
    base_url: str | None,
    cache_dir: Path,
    budget: int | None,
    timeout: float,
    max_retries: int = 4,
    config_model_name: str | None = None,
    env: Mapping[str, str] | None = None,
) -> LLMSettings:
    """Settings from flags, then environment, then config; a clear error if no model."""
    env = os.environ if env is None else env
    chosen = model or config_model_name
    if not chosen:
        raise LLMSetupError(
            f"--llm {provider.value}: no model named; pass --llm-model NAME or set "
            f"prose.{provider.value}_model in the config"
        )
    base = base_url or env.get(provider.base_url_env) or provider.default_base_url
    settings = LLMSettings(
        provider=provider,
        model=chosen,
        base_url=base,
        api_key=env.get(provider.key_env) or None,
        cache_dir=cache_dir,
        budget=budget,
        timeout=timeout,
        max_retries=max_retries,
    )
    return settings
