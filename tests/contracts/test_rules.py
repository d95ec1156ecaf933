"""The origin's rules (contracts.rules), each at its edges, named after its clause."""

from __future__ import annotations

from contracts.rules import (
    DEMAND_WINDOW_MS,
    FUTURE_SLACK_MS,
    MAX_DEADLINE_MS,
    MAX_SERVE_FOR_MS,
    MIN_DEADLINE_MS,
    MIN_SERVE_FOR_MS,
    demand_due_ms,
    demand_is_fresh,
    expired,
    holder_signature_decides,
    promise_refusal,
    serves_unsigned,
)

NOW = 1_800_000_000_000


def test_s1_a_demand_exactly_at_the_window_either_way_is_fresh() -> None:
    assert demand_is_fresh(NOW, NOW)
    assert demand_is_fresh(NOW + DEMAND_WINDOW_MS, NOW)
    assert demand_is_fresh(NOW - DEMAND_WINDOW_MS, NOW)


def test_s1_a_demand_one_ms_beyond_the_window_either_way_is_not_fresh() -> None:
    assert not demand_is_fresh(NOW + DEMAND_WINDOW_MS + 1, NOW)
    assert not demand_is_fresh(NOW - DEMAND_WINDOW_MS - 1, NOW)


def test_s1_freshness_reads_a_fractional_clock_without_rounding_it() -> None:
    # the node's clock has sub-ms resolution: half a ms beyond the window is beyond it
    assert not demand_is_fresh(NOW + DEMAND_WINDOW_MS, NOW - 0.5)
    assert not demand_is_fresh(NOW - DEMAND_WINDOW_MS, NOW + 0.5)
    assert demand_is_fresh(NOW + DEMAND_WINDOW_MS, NOW + 0.5)


def test_s1_the_window_is_the_documented_thirty_second_skew() -> None:
    assert DEMAND_WINDOW_MS == 30_000


def test_s3_an_obligation_is_expired_exactly_at_serve_until_and_not_a_ms_before() -> None:
    assert not expired(NOW, NOW - 1)
    assert expired(NOW, NOW)
    assert expired(NOW, NOW + 1)


def test_s4_a_demand_is_due_at_its_time_plus_the_promised_deadline() -> None:
    assert demand_due_ms(NOW, 2_000) == NOW + 2_000
    assert demand_due_ms(NOW, MIN_DEADLINE_MS) == NOW + MIN_DEADLINE_MS


def test_s1_deadline_bounds_are_inclusive_at_min_and_max() -> None:
    assert promise_refusal(deadline_ms=MIN_DEADLINE_MS) == ""
    assert promise_refusal(deadline_ms=MAX_DEADLINE_MS) == ""
    for wrong in (MIN_DEADLINE_MS - 1, MAX_DEADLINE_MS + 1, 10, 0):
        assert promise_refusal(deadline_ms=wrong) == (
            f"deadline_ms {wrong} is outside {MIN_DEADLINE_MS}..{MAX_DEADLINE_MS}:"
            " an origin does not promise to answer that fast or that slowly"
        )


def test_s5_lifetime_bounds_are_inclusive_at_min_and_max() -> None:
    assert promise_refusal(serve_for_ms=MIN_SERVE_FOR_MS) == ""
    assert promise_refusal(serve_for_ms=MAX_SERVE_FOR_MS) == ""
    for wrong in (MIN_SERVE_FOR_MS - 1, MAX_SERVE_FOR_MS + 1):
        assert promise_refusal(serve_for_ms=wrong).startswith(
            f"serve_for_ms {wrong} is outside {MIN_SERVE_FOR_MS}..{MAX_SERVE_FOR_MS} (30 days)"
        )
    assert MAX_SERVE_FOR_MS == 30 * 24 * 3_600_000


def test_s1_s5_a_promise_is_refused_for_its_first_part_out_of_bounds() -> None:
    both = promise_refusal(deadline_ms=10, serve_for_ms=MAX_SERVE_FOR_MS + 1)
    assert both.startswith("deadline_ms 10 ")
    assert promise_refusal(deadline_ms=2_000, serve_for_ms=0).startswith("serve_for_ms 0 ")
    assert promise_refusal() == ""


def test_s7_a_bearer_demand_under_an_own_head_needs_no_signature_up_to_the_slack() -> None:
    assert not holder_signature_decides(NOW, NOW, bearer_under_own_head=True)
    assert not holder_signature_decides(NOW + FUTURE_SLACK_MS, NOW, bearer_under_own_head=True)
    assert not holder_signature_decides(NOW - DEMAND_WINDOW_MS, NOW, bearer_under_own_head=True)


def test_s7_a_bearer_demand_dated_beyond_the_slack_ahead_is_verified() -> None:
    assert holder_signature_decides(NOW + FUTURE_SLACK_MS + 1, NOW, bearer_under_own_head=True)


def test_s7_a_bound_or_unheaded_demand_is_always_verified() -> None:
    assert holder_signature_decides(NOW, NOW, bearer_under_own_head=False)
    assert holder_signature_decides(NOW - DEMAND_WINDOW_MS, NOW, bearer_under_own_head=False)


def test_rev3_an_unsigned_ask_is_served_until_serve_until_and_not_at_it() -> None:
    assert serves_unsigned(NOW + 1, NOW, leaf_count=5, max_leaves=5)
    assert not serves_unsigned(NOW, NOW, leaf_count=5, max_leaves=5)  # expired() agrees
    assert expired(NOW, NOW)


def test_rev3_an_unsigned_ask_is_served_only_for_a_bounded_nonempty_fold() -> None:
    assert not serves_unsigned(NOW + 1, NOW, leaf_count=6, max_leaves=5)
    assert not serves_unsigned(NOW + 1, NOW, leaf_count=0, max_leaves=5)
