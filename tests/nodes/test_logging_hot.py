"""Node loggers are bound once per logging configuration, not once per event.

structlog's lazy proxy (``cache_logger_on_first_use`` off) asks the logger
factory for a new logger on every event; on the demand path that was a
measurable share of a demand's CPU. :class:`nodes.logging.NodeLogger` keeps
the bound logger and still follows every reconfiguration.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from nodes.logging import get_logger


class _CountingFactory:
    """A logger factory that counts the loggers it makes and keeps what they print."""

    def __init__(self) -> None:
        self.made = 0
        self.lines: list[str] = []

    def __call__(self, *args: Any) -> Any:
        self.made += 1
        factory = self

        class _Logger:
            def msg(self, message: str) -> None:
                factory.lines.append(message)

            info = warning = debug = error = msg

        return _Logger()


@pytest.fixture
def fresh_structlog() -> Iterator[None]:
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.reset_defaults()


def _configure(factory: _CountingFactory, level: int) -> None:
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer(key_order=["event"])],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )


def test_a_node_logger_binds_once_for_many_events(fresh_structlog: None) -> None:
    factory = _CountingFactory()
    _configure(factory, 20)
    log = get_logger("tests.hot")
    for i in range(100):
        log.info("served", i=i)
    assert len(factory.lines) == 100
    # structlog's lazy proxy made one logger per event here (100).
    assert factory.made == 1
    assert "module='tests.hot'" in factory.lines[0]


def test_a_node_logger_follows_every_reconfiguration(fresh_structlog: None) -> None:
    first, second = _CountingFactory(), _CountingFactory()
    _configure(first, 20)
    log = get_logger("tests.hot")
    log.info("one")
    assert log.enabled("info")
    assert not log.enabled("debug")
    _configure(second, 30)  # a new factory and level: the kept logger is dropped
    log.info("filtered")
    log.warning("two")
    assert not log.enabled("info")
    assert [line.split()[0] for line in first.lines] == ["event='one'"]
    assert [line.split()[0] for line in second.lines] == ["event='two'"]
    with capture_logs() as captured:  # edits the processor list in place
        log.warning("three")
    assert [e["event"] for e in captured] == ["three"]


def test_a_node_logger_follows_a_change_of_processors_or_context_class_alone(
    fresh_structlog: None,
) -> None:
    factory = _CountingFactory()
    _configure(factory, 20)
    log = get_logger("tests.hot")
    log.info("one")
    structlog.configure(processors=[structlog.processors.KeyValueRenderer(key_order=["x"])])
    log.info("two", x=1)
    structlog.configure(context_class=dict)
    log.info("three", x=2)
    assert [line.split()[0] for line in factory.lines] == ["event='one'", "x=1", "x=2"]
