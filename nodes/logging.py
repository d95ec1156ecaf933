"""structlog set-up for nodes: JSON lines in services, console on a terminal.

Events are key-value (``log.info("demand_served", origin=…, hops=5)``), never
formatted strings. Per-call context (``request_id``, ``rpc``) is bound with
structlog's contextvars by :mod:`nodes.interceptors`, so every event logged
while a call is handled carries it.

Loggers from :func:`get_logger` are bound once per configuration, not once
per event: structlog's lazy proxy (with ``cache_logger_on_first_use`` off,
so a later :func:`configure_logging` still takes effect) builds a new bound
logger on every call, which cost a measurable share of a demand's CPU. The
logger here keeps the bound logger and rebuilds it when structlog's
configuration changed — any ``structlog.configure`` or ``reset_defaults``,
not only :func:`configure_logging` (the wrapper class, logger factory,
processor list and context class are compared by identity on each use;
``structlog.testing.capture_logs`` edits the processor list in place, which
a kept logger sees). An event below the configured level is a no-op method
of structlog's filtering logger, as before; :meth:`NodeLogger.enabled` lets
a hot path skip building an event's fields. Its answer depends on the wrapper
class alone (a filtering logger's level is fixed in its class), so it is kept
per level and answered again when that class changes.
"""

from __future__ import annotations

import logging as _stdlib_logging
import sys
from typing import Any

import structlog

from nodes.config import LogFormat

__all__ = ["NodeLogger", "configure_logging", "get_logger"]

_LEVELS = {
    "debug": _stdlib_logging.DEBUG,
    "info": _stdlib_logging.INFO,
    "warning": _stdlib_logging.WARNING,
    "error": _stdlib_logging.ERROR,
}


def configure_logging(fmt: LogFormat = LogFormat.AUTO, level: str = "info", **bind: Any) -> None:
    """Configure structlog process-wide; ``bind`` adds fields to every event (e.g. node name)."""
    use_console = fmt is LogFormat.CONSOLE or (fmt is LogFormat.AUTO and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, 20)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Anything logged through the standard library (asyncio, grpc's Python
    # side) is rendered by the same renderer: a JSON log holds only JSON lines.
    handler = _stdlib_logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
            ],
            foreign_pre_chain=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = _stdlib_logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(level, 20))
    structlog.contextvars.clear_contextvars()
    if bind:
        structlog.contextvars.bind_contextvars(**bind)


#: structlog's configuration object, read for its wrapper class alone on every
#: :meth:`NodeLogger.enabled` (``structlog.get_config`` builds a dictionary of five
#: entries per call); None if a structlog release moves it, then read as documented.
_STRUCTLOG_CONFIG: Any = getattr(getattr(structlog, "_config", None), "_CONFIG", None)
if not hasattr(_STRUCTLOG_CONFIG, "default_wrapper_class"):
    _STRUCTLOG_CONFIG = None
#: [the wrapper class the answers are for, level → whether it is emitted]
_ENABLED: list[Any] = [None, {}]


def _wrapper_class() -> Any:
    if _STRUCTLOG_CONFIG is not None:
        return _STRUCTLOG_CONFIG.default_wrapper_class
    return structlog.get_config()["wrapper_class"]


def _config_key() -> tuple[Any, Any, Any, Any]:
    # The objects themselves (kept alive here), compared by identity: an id
    # could be reused by a new object once the old one is freed.
    config = structlog.get_config()
    return (
        config["wrapper_class"],
        config["logger_factory"],
        config["processors"],
        config["context_class"],
    )


class NodeLogger:
    """A structlog logger tagged with a module, bound once per configuration."""

    __slots__ = ("_bound", "_check", "_key", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._key: tuple[Any, Any, Any, Any] = (None, None, None, None)
        self._bound: Any = None
        self._check: Any = None

    def _logger(self) -> Any:
        key, old = _config_key(), self._key
        if not (key[0] is old[0] and key[1] is old[1] and key[2] is old[2] and key[3] is old[3]):
            self._bound = structlog.get_logger(module=self._name).bind()
            self._check = getattr(self._bound, "is_enabled_for", None)
            self._key = key
        return self._bound

    def enabled(self, level: str) -> bool:
        """Whether an event at ``level`` ("debug", "info", …) would be emitted."""
        wrapper = _wrapper_class()
        if wrapper is not _ENABLED[0]:
            # what a level gives depends on the wrapper class alone (a filtering
            # logger's level is fixed in its class): answered again when it changes
            _ENABLED[:] = [wrapper, {}]
        answers: dict[str, bool] = _ENABLED[1]
        answer = answers.get(level)
        if answer is None:
            self._logger()
            check = self._check
            answer = answers[level] = True if check is None else bool(check(_LEVELS.get(level, 20)))
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger(), name)


def get_logger(name: str) -> Any:
    """A structlog logger tagged with the module that logs (see module docstring)."""
    return NodeLogger(name)
