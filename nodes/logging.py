"""structlog set-up for nodes: JSON lines in services, console on a terminal.

Events are key-value (``log.info("demand_served", origin=…, hops=5)``), never
formatted strings. Per-call context (``request_id``, ``rpc``) is bound with
structlog's contextvars by :mod:`nodes.interceptors`, so every event logged
while a call is handled carries it.
"""

from __future__ import annotations

import logging as _stdlib_logging
import sys
from typing import Any

import structlog

from nodes.config import LogFormat

__all__ = ["configure_logging", "get_logger"]

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


def get_logger(name: str) -> Any:
    """A structlog logger tagged with the module that logs."""
    return structlog.get_logger(module=name)
