"""Experiment configuration: the Part 5 lab's YAML keys, parsed and checked.

A config file is a YAML mapping with exactly the keys the Part 5 lab uses
(spec §8), so an existing lab config runs unchanged:

``steps``, ``decision_every``, ``compaction_cadence`` (int or list),
``lineage_keep_hops``, ``allowlist_window``, ``reconstruction_penalty``,
``degradation_profiles`` (name → {p_unverified, p_fallback, p_flaky,
p_stale}), ``seeds`` (a count or an explicit list), ``death_spiral_run``
({steps, compaction_cadence, profile?, seed?} or null), ``prose`` ({sigma,
taint_recall, taint_precision, parse_failure_rate}); sweep configs add
``penalty_grid`` and ``profile``. The lab's ``prose.anthropic_model`` and
``prose.openai_model`` (the model names of its real-LLM channel, spec §10)
are valid and recorded; the mock channel does not use them.

A config file must be UTF-8, non-empty, and free of duplicate keys (YAML
would keep the last of two equal keys silently, hiding a typo).

Every problem is reported as a :class:`ConfigError` naming the file, the
key path and what was expected; unknown keys are errors (a typo must not
silently fall back to a default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_PROFILES",
    "ConfigError",
    "DeathSpiralConfig",
    "ExperimentConfig",
    "Profile",
    "ProseConfig",
    "default_sweep_config",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """A config file is malformed; the message names file, key and expectation."""


@dataclass(frozen=True, slots=True)
class Profile:
    """Degradation probabilities of the synthetic generator (spec §2)."""

    p_unverified: float
    p_fallback: float
    p_flaky: float
    p_stale: float


DEFAULT_PROFILES: dict[str, Profile] = {
    "low": Profile(0.05, 0.05, 0.03, 0.10),
    "med": Profile(0.15, 0.15, 0.08, 0.25),
    "high": Profile(0.30, 0.30, 0.15, 0.40),
}


@dataclass(frozen=True, slots=True)
class ProseConfig:
    """Mock prose channel parameters (spec §4)."""

    sigma: float = 0.08
    taint_recall: float = 0.6
    taint_precision: float = 0.9
    parse_failure_rate: float = 0.0
    #: model names of a real-LLM prose channel (the lab's keys); None = unset
    anthropic_model: str | None = None
    openai_model: str | None = None


@dataclass(frozen=True, slots=True)
class DeathSpiralConfig:
    """The long single run that shows the min-fold death spiral (spec §8)."""

    steps: int = 5000
    compaction_cadence: int = 25
    profile: str = "med"
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ExperimentConfig:
    """One experiment (main matrix or sweep), fully validated."""

    steps: int = 500
    decision_every: int = 5
    compaction_cadence: tuple[int, ...] = (10, 25, 50)
    lineage_keep_hops: int = 5
    allowlist_window: int = 8
    reconstruction_penalty: float = 0.02
    degradation_profiles: dict[str, Profile] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    seeds: tuple[int, ...] = tuple(range(20))
    death_spiral_run: DeathSpiralConfig | None = field(default_factory=DeathSpiralConfig)
    prose: ProseConfig = field(default_factory=ProseConfig)
    penalty_grid: tuple[float, ...] = ()
    profile: str | None = None

    def with_seed_count(self, n: int) -> ExperimentConfig:
        return replace(self, seeds=tuple(range(n)))

    def to_json(self) -> dict[str, object]:
        """The config as plain JSON data (recorded in ``run_meta.json``)."""
        ds = self.death_spiral_run
        return {
            "steps": self.steps,
            "decision_every": self.decision_every,
            "compaction_cadence": list(self.compaction_cadence),
            "lineage_keep_hops": self.lineage_keep_hops,
            "allowlist_window": self.allowlist_window,
            "reconstruction_penalty": self.reconstruction_penalty,
            "degradation_profiles": {
                name: {
                    "p_unverified": p.p_unverified,
                    "p_fallback": p.p_fallback,
                    "p_flaky": p.p_flaky,
                    "p_stale": p.p_stale,
                }
                for name, p in self.degradation_profiles.items()
            },
            "seeds": list(self.seeds),
            "death_spiral_run": None
            if ds is None
            else {
                "steps": ds.steps,
                "compaction_cadence": ds.compaction_cadence,
                "profile": ds.profile,
                "seed": ds.seed,
            },
            "prose": {
                "sigma": self.prose.sigma,
                "taint_recall": self.prose.taint_recall,
                "taint_precision": self.prose.taint_precision,
                "parse_failure_rate": self.prose.parse_failure_rate,
                **(
                    {"anthropic_model": self.prose.anthropic_model}
                    if self.prose.anthropic_model is not None
                    else {}
                ),
                **(
                    {"openai_model": self.prose.openai_model}
                    if self.prose.openai_model is not None
                    else {}
                ),
            },
            "penalty_grid": list(self.penalty_grid),
            "profile": self.profile,
        }


class _Reader:
    """Typed access to one YAML mapping, with errors naming file and key."""

    def __init__(self, source: str, data: Mapping[str, Any], prefix: str) -> None:
        self.source = source
        self.data = data
        self.prefix = prefix

    def fail(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(
            f"{self.source}: key '{self.prefix}{key}': expected {expected}, got {got!r}"
        )

    def check_keys(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise ConfigError(
                    f"{self.source}: unknown key '{self.prefix}{key}'"
                    f" (expected one of: {', '.join(sorted(allowed))})"
                )

    def int_(self, key: str, default: int, low: int) -> int:
        if key not in self.data:
            return default
        return self.int_value(key, self.data[key], low)

    def int_value(self, key: str, value: object, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"an integer ≥ {low}", value)
        if value < low:
            raise self.fail(key, f"an integer ≥ {low}", value)
        return value

    def prob(self, key: str, default: float, *, open_low: bool = False) -> float:
        if key not in self.data:
            return default
        return self.prob_value(key, self.data[key], open_low=open_low)

    def prob_value(self, key: str, value: object, *, open_low: bool = False) -> float:
        expected = "a number in (0, 1]" if open_low else "a number in [0, 1]"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, expected, value)
        number = float(value)
        if not math.isfinite(number) or number > 1.0 or number < 0.0:
            raise self.fail(key, expected, value)
        if open_low and number == 0.0:
            raise self.fail(key, expected, value)
        return number

    def penalty_value(self, key: str, value: object) -> float:
        """A compaction penalty: one rule, one wording, whatever is wrong with it."""
        expected = "a penalty in [0, 1)"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, expected, value)
        number = float(value)
        if not math.isfinite(number) or not 0.0 <= number < 1.0:
            raise self.fail(key, expected, value)
        return number

    def int_list(self, key: str, default: tuple[int, ...], low: int) -> tuple[int, ...]:
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, int) and not isinstance(value, bool):
            return (self.int_value(key, value, low),)
        if not isinstance(value, list) or not value:
            raise self.fail(key, f"an integer ≥ {low} or a non-empty list of them", value)
        return tuple(self.int_value(f"{key}[{i}]", v, low) for i, v in enumerate(value))

    def mapping(self, key: str) -> _Reader | None:
        if key not in self.data or self.data[key] is None:
            return None
        value = self.data[key]
        if not isinstance(value, dict):
            raise self.fail(key, "a mapping", value)
        return _Reader(self.source, value, f"{self.prefix}{key}.")


_TOP_KEYS = {
    "steps",
    "decision_every",
    "compaction_cadence",
    "lineage_keep_hops",
    "allowlist_window",
    "reconstruction_penalty",
    "degradation_profiles",
    "seeds",
    "death_spiral_run",
    "prose",
    "penalty_grid",
    "profile",
}


def parse_config(data: object, source: str = "<config>") -> ExperimentConfig:
    """Validate already-parsed YAML data into an :class:`ExperimentConfig`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a YAML mapping at top level, got {data!r}")
    top = _Reader(source, data, "")
    top.check_keys(_TOP_KEYS)
    base = ExperimentConfig()
    steps = top.int_("steps", base.steps, 1)
    decision_every = top.int_("decision_every", base.decision_every, 1)
    cadences = top.int_list("compaction_cadence", base.compaction_cadence, 1)
    keep = top.int_("lineage_keep_hops", base.lineage_keep_hops, 1)
    window = top.int_("allowlist_window", base.allowlist_window, 1)
    penalty = (
        top.penalty_value("reconstruction_penalty", data["reconstruction_penalty"])
        if "reconstruction_penalty" in data
        else base.reconstruction_penalty
    )

    profiles = dict(DEFAULT_PROFILES)
    prof_reader = top.mapping("degradation_profiles")
    if prof_reader is not None:
        profiles = {}
        for name, body in prof_reader.data.items():
            if not isinstance(name, str):
                raise prof_reader.fail(str(name), "a profile name (string)", name)
            sub = prof_reader.mapping(name)
            if sub is None:
                raise prof_reader.fail(name, "a mapping of probabilities", body)
            keys = {"p_unverified", "p_fallback", "p_flaky", "p_stale"}
            sub.check_keys(keys)
            for k in sorted(keys):
                if k not in sub.data:
                    raise ConfigError(f"{source}: missing key '{sub.prefix}{k}'")
            profiles[name] = Profile(
                sub.prob("p_unverified", 0.0),
                sub.prob("p_fallback", 0.0),
                sub.prob("p_flaky", 0.0),
                sub.prob("p_stale", 0.0),
            )
        if not profiles:
            raise top.fail("degradation_profiles", "at least one profile", {})

    seeds = base.seeds
    if "seeds" in data:
        raw = data["seeds"]
        if isinstance(raw, int) and not isinstance(raw, bool):
            seeds = tuple(range(top.int_value("seeds", raw, 1)))
        elif isinstance(raw, list) and raw:
            seeds = tuple(top.int_value(f"seeds[{i}]", v, 0) for i, v in enumerate(raw))
            if len(set(seeds)) != len(seeds):
                raise top.fail("seeds", "distinct seeds", raw)
        else:
            raise top.fail("seeds", "a seed count ≥ 1 or a non-empty list of seeds", raw)

    default_death = DeathSpiralConfig()
    death: DeathSpiralConfig | None = default_death
    if "death_spiral_run" not in data and default_death.profile not in profiles:
        raise ConfigError(
            f"{source}: key 'death_spiral_run.profile' defaults to"
            f" '{default_death.profile}', which is"
            f" not among the profiles {sorted(profiles)}: set death_spiral_run.profile"
            " or death_spiral_run: null"
        )
    if "death_spiral_run" in data:
        ds_reader = top.mapping("death_spiral_run")
        if ds_reader is None:
            death = None
        else:
            ds_reader.check_keys({"steps", "compaction_cadence", "profile", "seed"})
            ds_profile = ds_reader.data.get("profile", "med")
            if not isinstance(ds_profile, str) or ds_profile not in profiles:
                raise ds_reader.fail(
                    "profile", f"one of the profiles {sorted(profiles)}", ds_profile
                )
            death = DeathSpiralConfig(
                steps=ds_reader.int_("steps", 5000, 1),
                compaction_cadence=ds_reader.int_("compaction_cadence", 25, 1),
                profile=ds_profile,
                seed=ds_reader.int_("seed", 0, 0),
            )

    prose = base.prose
    pr = top.mapping("prose")
    if pr is not None:
        pr.check_keys(
            {
                "sigma",
                "taint_recall",
                "taint_precision",
                "parse_failure_rate",
                "anthropic_model",
                "openai_model",
            }
        )
        models: dict[str, str | None] = {}
        for key in ("anthropic_model", "openai_model"):
            model = pr.data.get(key)
            if model is not None and (not isinstance(model, str) or not model.strip()):
                raise pr.fail(key, "a model name (a non-empty string)", model)
            models[key] = model
        sigma = pr.data.get("sigma", prose.sigma)
        if (
            isinstance(sigma, bool)
            or not isinstance(sigma, int | float)
            or not math.isfinite(float(sigma))
            or sigma < 0
        ):
            raise pr.fail("sigma", "a finite number ≥ 0", sigma)
        prose = ProseConfig(
            sigma=float(sigma),
            taint_recall=pr.prob("taint_recall", prose.taint_recall),
            taint_precision=pr.prob("taint_precision", prose.taint_precision, open_low=True),
            parse_failure_rate=pr.prob("parse_failure_rate", prose.parse_failure_rate),
            anthropic_model=models["anthropic_model"],
            openai_model=models["openai_model"],
        )

    grid: tuple[float, ...] = ()
    if "penalty_grid" in data:
        raw_grid = data["penalty_grid"]
        if not isinstance(raw_grid, list) or not raw_grid:
            raise top.fail("penalty_grid", "a non-empty list of penalties in [0, 1)", raw_grid)
        grid = tuple(top.penalty_value(f"penalty_grid[{i}]", v) for i, v in enumerate(raw_grid))

    profile: str | None = None
    if "profile" in data:
        raw_profile = data["profile"]
        if not isinstance(raw_profile, str) or raw_profile not in profiles:
            raise top.fail("profile", f"one of the profiles {sorted(profiles)}", raw_profile)
        profile = raw_profile

    return ExperimentConfig(
        steps=steps,
        decision_every=decision_every,
        compaction_cadence=cadences,
        lineage_keep_hops=keep,
        allowlist_window=window,
        reconstruction_penalty=penalty,
        degradation_profiles=profiles,
        seeds=seeds,
        death_spiral_run=death,
        prose=prose,
        penalty_grid=grid,
        profile=profile,
    )


def load_config(path: Path) -> ExperimentConfig:
    """Read and validate a YAML config file; every failure is a ConfigError.

    Rejected before validation: a file that cannot be read, is not UTF-8,
    is empty (or only comments), is malformed YAML or repeats a key.
    """
    from harness._yaml_lines import YamlInputError, load_yaml_with_lines

    try:
        text = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from exc
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = text[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{text[exc.start]:02x} on line {bad_line});"
            " save the config as UTF-8"
        ) from None
    try:
        data = load_yaml_with_lines(path)
    except YamlInputError as exc:
        message = str(exc).replace(": invalid YAML: ", ": malformed YAML: ", 1)
        if message.startswith(f"{path}:") and not message.startswith(f"{path}: "):
            # "{path}:{line}: …" → say "line N" as the other config errors do
            rest = message[len(str(path)) + 1 :]
            at, _, problem = rest.partition(": ")
            message = f"{path}: malformed YAML at line {at}: " + problem.removeprefix(
                "malformed YAML: "
            )
        raise ConfigError(message) from None
    if data is None:
        raise ConfigError(
            f"{path}: empty config (expected a YAML mapping of experiment keys such as"
            " steps, compaction_cadence, seeds)"
        )
    return parse_config(data, str(path))


def default_sweep_config() -> ExperimentConfig:
    """The built-in crossover sweep (spec §8): 14 cadences × 5 penalties, med."""
    return ExperimentConfig(
        compaction_cadence=(2, 3, 5, 10, 15, 20, 25, 35, 50, 75, 100, 150, 250, 500),
        degradation_profiles={"med": DEFAULT_PROFILES["med"]},
        death_spiral_run=None,
        penalty_grid=(0.005, 0.01, 0.02, 0.05, 0.1),
        profile="med",
    )
