"""Every route reads the origin's rules from one place (contracts.rules)."""

from __future__ import annotations

import contracts.evidence
import nodes.config
import nodes.services
from contracts import rules


def test_every_route_reads_the_same_bounds_and_window() -> None:
    assert nodes.config.MIN_DEADLINE_MS is rules.MIN_DEADLINE_MS
    assert nodes.config.MAX_DEADLINE_MS is rules.MAX_DEADLINE_MS
    assert nodes.services.MIN_DEADLINE_MS is rules.MIN_DEADLINE_MS
    assert nodes.services.MAX_DEADLINE_MS is rules.MAX_DEADLINE_MS
    assert nodes.services.MIN_SERVE_FOR_MS is rules.MIN_SERVE_FOR_MS
    assert nodes.services.MAX_SERVE_FOR_MS is rules.MAX_SERVE_FOR_MS
    assert nodes.services.DEMAND_WINDOW_S * 1000 == rules.DEMAND_WINDOW_MS
    assert contracts.evidence.CLEARING_SKEW_MS == rules.DEMAND_WINDOW_MS
