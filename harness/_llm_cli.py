"""The ``--llm*`` flags of ``provnet experiment run`` (real prose channel, off by default).

Only argparse work and setting resolution live here; nothing imports httpx
until ``--llm`` is given, so the default run never loads the HTTP client.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.prose_llm import LLMChannelSource

__all__ = ["LLM_PROVIDERS", "add_llm_flags", "open_llm_source"]

#: the values of ``--llm`` (harness.llm.Provider, kept here so argparse needs no import)
LLM_PROVIDERS = ("openai", "anthropic")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def add_llm_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("real prose channel (off by default)")
    group.add_argument(
        "--llm",
        choices=LLM_PROVIDERS,
        default=None,
        help="send the prose arm's summarize/extract round trips to this API "
        "(key from OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    group.add_argument(
        "--llm-model",
        default=None,
        help="model name (default: the config's prose.openai_model / prose.anthropic_model)",
    )
    group.add_argument(
        "--llm-base-url",
        default=None,
        help="API base URL (default: OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the public API)",
    )
    group.add_argument(
        "--llm-budget",
        type=_count,
        default=None,
        metavar="N",
        help="stop before the (N+1)-th request; cached answers are free (default: no limit)",
    )
    group.add_argument(
        "--llm-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="answer cache keyed by request digest, kept outside the results folder so a "
        "rerun or a run stopped by its budget keeps it (default: $PROVNET_LLM_CACHE, else "
        "$XDG_CACHE_HOME/provnet/llm, else ~/.cache/provnet/llm)",
    )
    group.add_argument(
        "--llm-retries",
        type=_count,
        default=4,
        metavar="N",
        help="retries of a request after a 429, a 5xx, a timeout or a failed connection "
        "(default: 4)",
    )
    group.add_argument(
        "--llm-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="timeout of one request (default: 60)",
    )


def default_cache_dir() -> Path:
    """Where answers are cached when ``--llm-cache`` is not given.

    Not inside ``--out``: a results folder is replaced whole when a run
    completes and discarded when it stops early (budget, Ctrl-C), and the
    cache must outlive both so a rerun costs nothing.
    """
    explicit = os.environ.get("PROVNET_LLM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provnet" / "llm"


def open_llm_source(args: argparse.Namespace, config: object) -> LLMChannelSource | None:
    """The real channel the flags ask for, or None (the mock). Raises LLMError."""
    llm_only = ("llm_model", "llm_base_url", "llm_budget", "llm_cache")
    if args.llm is None:
        given = [
            f"--{name.replace('_', '-')}" for name in llm_only if getattr(args, name) is not None
        ]
        if given:
            from harness.llm_errors import LLMSetupError

            raise LLMSetupError(f"{', '.join(given)} needs --llm openai|anthropic")
        return None
    from harness.llm import LLMClient, Provider
    from harness.prose_llm import LLMChannelSource, config_model, resolve_settings

    provider = Provider(args.llm)
    settings = resolve_settings(
        provider,
        model=args.llm_model,
        base_url=args.llm_base_url,
        cache_dir=args.llm_cache if args.llm_cache is not None else default_cache_dir(),
        budget=args.llm_budget,
        timeout=args.llm_timeout,
        max_retries=args.llm_retries,
        config_model_name=config_model(config, provider),
    )
    return LLMChannelSource.open(LLMClient(settings))
