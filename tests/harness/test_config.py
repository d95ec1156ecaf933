"""Config parsing: the lab's keys, good and bad (errors name file, key, expectation)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.config import (
    DEFAULT_PROFILES,
    ConfigError,
    ExperimentConfig,
    default_sweep_config,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parents[2]


def test_shipped_main_config_equals_the_built_in_defaults() -> None:
    # the lab's config.yaml also names its real-LLM models; nothing else differs
    shipped = load_config(REPO / "experiments" / "config.yaml")
    assert shipped.prose.anthropic_model
    assert shipped.prose.openai_model
    bare = replace(shipped, prose=replace(shipped.prose, anthropic_model=None, openai_model=None))
    assert bare == ExperimentConfig()


@pytest.mark.parametrize(
    "name", ["config.yaml", "config-sweep.yaml", "config-llm.yaml", "config.matched.yaml"]
)
def test_every_lab_config_loads_unchanged(name: str) -> None:
    cfg = load_config(REPO / "experiments" / name)
    assert cfg.steps == 500


def test_lab_prose_model_keys_are_accepted_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("prose: {anthropic_model: claude-x, openai_model: gpt-y}\n")
    cfg = load_config(path)
    assert (cfg.prose.anthropic_model, cfg.prose.openai_model) == ("claude-x", "gpt-y")
    prose = cfg.to_json()["prose"]
    assert isinstance(prose, dict)
    assert prose["openai_model"] == "gpt-y"


def test_unknown_prose_key_is_still_named_with_the_expected_keys(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "prose: {gemini_model: g}\n")
    assert "unknown key 'prose.gemini_model'" in msg
    assert "anthropic_model" in msg


def test_config_that_is_not_utf8_is_rejected_naming_byte_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"steps: 500\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"c.yaml: not UTF-8 text \(byte 0xe9 on line 2\)"):
        load_config(path)


def test_duplicate_key_is_rejected_not_silently_the_last(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "steps: 500\nseeds: 3\nsteps: 50\n")
    assert "duplicate key 'steps' (first on line 1)" in msg
    assert "line 3" in msg


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_config_is_rejected(tmp_path: Path, text: str) -> None:
    msg = _bad(tmp_path, text)
    assert "empty config" in msg


def test_shipped_sweep_config_equals_the_built_in_sweep() -> None:
    assert load_config(REPO / "experiments" / "config-sweep.yaml") == default_sweep_config()


def test_seed_count_or_explicit_list() -> None:
    assert parse_config({"seeds": 3}).seeds == (0, 1, 2)
    assert parse_config({"seeds": [4, 9]}).seeds == (4, 9)
    assert ExperimentConfig().with_seed_count(2).seeds == (0, 1)


def test_single_cadence_and_partial_mappings_take_defaults() -> None:
    cfg = parse_config({"compaction_cadence": 25, "prose": {"sigma": 0.0}})
    assert cfg.compaction_cadence == (25,)
    assert cfg.prose.sigma == 0.0
    assert cfg.prose.taint_recall == 0.6
    assert cfg.degradation_profiles == DEFAULT_PROFILES


def test_death_spiral_can_be_disabled() -> None:
    assert parse_config({"death_spiral_run": None}).death_spiral_run is None


def _bad(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    return message


def test_unknown_key_is_named(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "steps: 500\ncompaction_cadance: [10]\n")
    assert "unknown key 'compaction_cadance'" in msg


def test_unknown_nested_key_is_named_with_its_path(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "prose:\n  sigma: 0.1\n  recall: 0.5\n")
    assert "'prose.recall'" in msg


def test_mistyped_value_names_key_and_expectation(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "steps: five hundred\n")
    assert "'steps'" in msg
    assert "integer" in msg


def test_out_of_range_probability(tmp_path: Path) -> None:
    msg = _bad(
        tmp_path,
        "degradation_profiles:\n  med: {p_unverified: 1.5, p_fallback: 0.1, "
        "p_flaky: 0.1, p_stale: 0.1}\n",
    )
    assert "'degradation_profiles.med.p_unverified'" in msg
    assert "[0, 1]" in msg


def test_missing_profile_probability(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "degradation_profiles:\n  med: {p_unverified: 0.1}\n")
    assert "missing key 'degradation_profiles.med.p_fallback'" in msg


def test_cadence_must_be_positive(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "compaction_cadence: [10, 0]\n")
    assert "'compaction_cadence[1]'" in msg
    assert "≥ 1" in msg


def test_boolean_is_not_an_integer(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "lineage_keep_hops: true\n")
    assert "'lineage_keep_hops'" in msg


def test_penalty_of_one_is_rejected(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "reconstruction_penalty: 1.0\n")
    assert "'reconstruction_penalty'" in msg


def test_unknown_profile_reference(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "profile: extreme\n")
    assert "'profile'" in msg
    assert "med" in msg


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "steps: 500\nseeds: [1, 2\nprose: {}\n")
    assert "malformed YAML" in msg
    assert "line" in msg


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    msg = _bad(tmp_path, "- 1\n- 2\n")
    assert "mapping" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")


def test_default_death_spiral_profile_must_exist(tmp_path: Path) -> None:
    msg = _bad(
        tmp_path,
        "degradation_profiles:\n  calm: {p_unverified: 0.1, p_fallback: 0.1, "
        "p_flaky: 0.1, p_stale: 0.1}\n",
    )
    assert "'death_spiral_run.profile'" in msg
    assert "calm" in msg


@pytest.mark.parametrize(
    "text",
    [
        "reconstruction_penalty: 1.0\n",
        "reconstruction_penalty: 1.5\n",
        "reconstruction_penalty: -0.1\n",
        "reconstruction_penalty: high\n",
        "penalty_grid: [0.01, 2]\n",
        "penalty_grid: [0.01, 1.0]\n",
    ],
)
def test_every_bad_penalty_is_worded_the_same(tmp_path: Path, text: str) -> None:
    msg = _bad(tmp_path, text)
    assert "expected a penalty in [0, 1)" in msg
