"""The real prose channel's round trip over a loopback server: parsing and counting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config import ExperimentConfig
from harness.events import AXES
from harness.llm import LLMClient, LLMSettings, LLMSetupError, Provider
from harness.prose_llm import (
    SUMMARY_WORDS,
    LLMChannelSource,
    LLMProseChannel,
    config_model,
    parse_extraction,
    resolve_settings,
)
from tests.harness._llm_server import KEY, Answer, Content, FakeLLM, Refuse

SCORES = (0.7, 0.65, 0.65, 0.45, 1.0)
TAINTS = frozenset(
    {
        "taint:unverified_web:2",
        "taint:tool_flaky:6",
        "taint:tool_flaky:7",
        "taint:unverified_web:11",
        "taint:stale_cache:16",
        "taint:fallback_model:24",
    }
)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    try:
        yield server
    finally:
        server.stop()


def _channel(fake: FakeLLM, tmp_path: Path, provider: Provider) -> LLMProseChannel:
    settings = LLMSettings(provider, "test-model", fake.base_url, KEY, tmp_path / "cache")
    return LLMProseChannel(LLMClient(settings, sleep=lambda s: None))


@pytest.mark.parametrize("provider", list(Provider))
def test_round_trip_recovers_scores_and_taints(
    fake: FakeLLM, tmp_path: Path, provider: Provider
) -> None:
    ch = _channel(fake, tmp_path, provider)
    ext = ch.round_trip(SCORES, TAINTS, 25)
    assert ext.scores == SCORES
    assert ext.taints == TAINTS
    assert "taint:fallback_model:24" in ext.blob
    assert len(ext.blob.split()) <= SUMMARY_WORDS
    c = ch.counters
    assert (c.extractions, c.parse_failures, c.true_taints, c.kept, c.fabricated) == (1, 0, 6, 6, 0)
    assert (c.llm_calls, c.cache_hits, c.refusals) == (2, 0, 0)
    assert len(fake.requests) == 2


def test_lost_and_fabricated_taints_move_realised_recall_and_precision(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.forget_every = 3
    fake.fabricate = True
    ch = _channel(fake, tmp_path, Provider.OPENAI)
    ext = ch.round_trip(SCORES, TAINTS, 25)
    assert len(ext.taints & TAINTS) == 4
    assert "taint:tool_flaky:999999" in ext.taints
    c = ch.counters
    assert (c.kept, c.fabricated) == (4, 1)
    assert c.realized_recall == pytest.approx(4 / 6)
    assert c.realized_precision == pytest.approx(4 / 5)


def test_equal_states_are_answered_from_the_cache(fake: FakeLLM, tmp_path: Path) -> None:
    ch = _channel(fake, tmp_path, Provider.ANTHROPIC)
    first = ch.round_trip(SCORES, TAINTS, 25)
    second = ch.round_trip(SCORES, TAINTS, 50)  # the step is not part of the request
    assert first == second
    assert (ch.counters.llm_calls, ch.counters.cache_hits) == (2, 2)
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", list(Provider))
@pytest.mark.parametrize("which", ["summarize", "extract"])
def test_refusal_is_a_counted_parse_failure_with_the_worst_case_result(
    fake: FakeLLM, tmp_path: Path, provider: Provider, which: str
) -> None:
    fake.push(Refuse()) if which == "summarize" else fake.push(Answer(), Refuse())
    ch = _channel(fake, tmp_path, provider)
    ext = ch.round_trip(SCORES, TAINTS, 25)
    assert ext.scores == (0.0,) * len(AXES)
    assert ext.taints == frozenset()
    c = ch.counters
    assert (c.parse_failures, c.refusals, c.kept, c.fabricated) == (1, 1, 0, 0)
    assert c.llm_calls == (1 if which == "summarize" else 2)


@pytest.mark.parametrize("provider", list(Provider))
def test_malformed_extraction_is_a_counted_parse_failure(
    fake: FakeLLM, tmp_path: Path, provider: Provider
) -> None:
    ch = _channel(fake, tmp_path, provider)
    fake.push(Content("freshness 0.7 and some taints"), Content('{"scores": {"freshness": 0.7'))
    ext = ch.round_trip(SCORES, TAINTS, 25)
    assert ext.blob == "freshness 0.7 and some taints"
    assert ext.scores == (0.0,) * len(AXES)
    assert ext.taints == frozenset()
    assert (ch.counters.parse_failures, ch.counters.refusals) == (1, 0)


def test_empty_summary_is_a_parse_failure_without_an_extract_call(
    fake: FakeLLM, tmp_path: Path
) -> None:
    fake.push(Content("   "))
    ch = _channel(fake, tmp_path, Provider.OPENAI)
    ch.round_trip(SCORES, TAINTS, 25)
    assert ch.counters.parse_failures == 1
    assert len(fake.requests) == 1


def test_summary_is_cut_to_150_words(fake: FakeLLM, tmp_path: Path) -> None:
    fake.summary_suffix = " filler" * 400
    ch = _channel(fake, tmp_path, Provider.OPENAI)
    ext = ch.round_trip(SCORES, TAINTS, 25)
    assert len(ext.blob.split()) == SUMMARY_WORDS
    extract_user = fake.requests[1].body["messages"][-1]["content"]
    assert extract_user.count("filler") < 150


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ({"scores": [], "taints": []}, "'scores' is not an object"),
        ({"scores": dict.fromkeys(AXES[:4], 0.5), "taints": []}, "reconstruction"),
        ({"scores": {**dict.fromkeys(AXES, 0.5), "capability": "high"}, "taints": []}, "'high'"),
        ({"scores": {**dict.fromkeys(AXES, 0.5), "freshness": True}, "taints": []}, "True"),
        ({"scores": {**dict.fromkeys(AXES, 0.5), "freshness": float("nan")}, "taints": []}, "nan"),
        ({"scores": dict.fromkeys(AXES, 0.5), "taints": "taint:a:1"}, "'taints'"),
    ],
)
def test_parse_extraction_names_what_is_wrong(obj: dict[str, object], why: str) -> None:
    result = parse_extraction(obj)
    assert isinstance(result, str)
    assert why in result


def test_parse_extraction_clips_scores_and_strips_taints() -> None:
    scores = {**dict.fromkeys(AXES, 0.5), "freshness": 1.5, "capability": -0.2}
    result = parse_extraction({"scores": scores, "taints": [" taint:a:1 ", ""]})
    assert result == ((1.0, 0.0, 0.5, 0.5, 0.5), frozenset({"taint:a:1"}))


def test_source_meta_totals_the_runs(fake: FakeLLM, tmp_path: Path) -> None:
    settings = LLMSettings(Provider.OPENAI, "test-model", fake.base_url, KEY, tmp_path / "c")
    source = LLMChannelSource.open(LLMClient(settings))
    try:
        source.channel(0).round_trip(SCORES, TAINTS, 10)
        fake.push(Refuse())
        source.channel(1).round_trip((0.5,) * 5, frozenset(), 10)
        meta = source.meta()
    finally:
        source.close()
    assert meta["provider"] == "openai"
    assert meta["model"] == "test-model"
    assert (meta["calls"], meta["extractions"], meta["parse_failures"], meta["refusals"]) == (
        3,
        2,
        1,
        1,
    )


def test_settings_take_flag_then_config_model_and_env_base_url(tmp_path: Path) -> None:
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}
    s = resolve_settings(
        Provider.ANTHROPIC,
        model=None,
        base_url=None,
        cache_dir=tmp_path,
        budget=None,
        timeout=5.0,
        config_model_name="from-config",
        env=env,
    )
    assert (s.model, s.base_url, s.api_key) == ("from-config", "http://127.0.0.1:9", "k")
    s = resolve_settings(
        Provider.OPENAI,
        model="from-flag",
        base_url=None,
        cache_dir=tmp_path,
        budget=3,
        timeout=5.0,
        config_model_name="from-config",
        env={},
    )
    assert (s.model, s.base_url, s.api_key, s.budget) == (
        "from-flag",
        "https://api.openai.com",
        None,
        3,
    )
    with pytest.raises(LLMSetupError, match=r"pass --llm-model NAME or set prose.openai_model"):
        resolve_settings(
            Provider.OPENAI,
            model=None,
            base_url=None,
            cache_dir=tmp_path,
            budget=None,
            timeout=5.0,
            env={},
        )


def test_config_model_reads_the_prose_section_leniently() -> None:
    cfg = SimpleNamespace(prose=SimpleNamespace(openai_model="gpt-x", anthropic_model=None))
    assert config_model(cfg, Provider.OPENAI) == "gpt-x"
    assert config_model(cfg, Provider.ANTHROPIC) is None
    assert config_model({"prose": None}, Provider.OPENAI) is None
    assert config_model(SimpleNamespace(prose={"anthropic_model": "c"}), Provider.ANTHROPIC) == "c"
    assert config_model(ExperimentConfig(), Provider.OPENAI) is None
