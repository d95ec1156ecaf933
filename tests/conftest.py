"""Project-wide test settings.

Hypothesis' per-example deadline measures wall time, which on a shared
2-core machine says more about the neighbours than about the code; property
tests here bound their work by ``max_examples`` instead.
"""

from collections.abc import Iterator

import pytest
import structlog
from hypothesis import settings

settings.register_profile("provnet", deadline=None)
settings.load_profile("provnet")


@pytest.fixture(autouse=True)
def _structlog_config_restored() -> Iterator[None]:
    """Give every test the logging configuration the one before it found.

    Drivers configure structlog process-wide (``configure_logging(..., "error")``
    for a row played in this process); a later test capturing ``info`` events
    would otherwise see none, and pass or fail by the order tests ran in.
    """
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
