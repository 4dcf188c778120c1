from __future__ import annotations

from typing import Any

import pytest

from gateway.routing import HedgeBudget, LatencyWindow, Outcome, RetryBudget
from tests.routing._support import FakeClock, make_route

HEDGE_ON: dict[str, Any] = {"hedge": {"enabled": True, "max_extra_load": 0.05, "min_delay_ms": 1}}


def test_hedge_budget_caps_hedges_near_the_extra_load_under_a_burst() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON, retry={"budget_ratio": 1.0})
    hedges = 0
    for _ in range(10_000):  # every request is slow: each would like a hedge
        state = route.pick()
        assert state is not None
        started = route.start(state)
        clock.advance(0.001)
        if route.try_acquire_hedge():
            hedges += 1
        route.finish(state, started, Outcome.SUCCESS)

    assert 480 <= hedges <= 500 + 10  # 5% of traffic plus at most the banked cap


def test_hedges_also_spend_the_retry_budget() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON, retry={"budget_ratio": 0.0, "min_per_second": 0})
    for _ in range(100):
        route.start(route.targets[0])

    assert not route.try_acquire_hedge()
    assert route.hedge_budget.tokens >= 1.0  # untouched when the retry budget says no


def test_hedge_budget_balance_is_bounded() -> None:
    budget = HedgeBudget(0.05)
    for _ in range(100_000):
        budget.deposit()
    spent = 0
    while budget.try_spend():
        spent += 1
    assert spent == 10


def test_retry_budget_holds_under_a_failure_storm() -> None:
    clock = FakeClock()
    budget = RetryBudget(0.1, 5.0, clock=clock)
    retries = 0
    for _ in range(10_000):  # 1000 requests/s for 10 s, every one wants a retry
        budget.deposit()
        if budget.try_withdraw():
            retries += 1
        clock.advance(0.001)

    # 10% of requests plus the 5/s x 10 s reserve.
    assert retries == pytest.approx(1000 + 50, abs=2)


def test_retry_budget_reserve_lets_quiet_routes_retry_and_expires() -> None:
    clock = FakeClock()
    budget = RetryBudget(0.1, 1.0, clock=clock)  # reserve: 10 per 10 s
    assert sum(budget.try_withdraw() for _ in range(20)) == 10
    assert budget.balance < 1
    clock.advance(11.0)  # withdrawals older than the TTL expire
    assert budget.balance == pytest.approx(10.0)


def test_route_retries_respect_max_attempts_and_the_budget() -> None:
    clock = FakeClock()
    route = make_route(2, clock, retry={"max_attempts": 3, "min_per_second": 0.1})
    assert route.try_acquire_retry(1)
    assert not route.try_acquire_retry(3)  # three attempts made: that is the max
    assert not route.try_acquire_retry(1)  # reserve of 1 spent, no deposits


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    clock = FakeClock()
    route = make_route(1, clock, retry={"backoff_base_ms": 2, "backoff_max_ms": 50})

    for attempt, ceiling in [(1, 0.004), (2, 0.008), (3, 0.016), (10, 0.050)]:
        delays = [route.backoff(attempt) for _ in range(200)]
        assert all(0.002 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8  # the jitter uses the whole range


def test_latency_window_quantiles() -> None:
    window = LatencyWindow(30.0, 10, now=0.0)
    assert window.quantile(0.5, 0.0) is None
    for ms in range(1, 101):
        window.record(ms / 1000, 0.0)

    median = window.quantile(0.5, 1.0)
    assert median is not None and 0.050 <= median <= 0.055
    assert window.count == 100
    assert window.quantile(0.5, 40.0) is None  # idle past the window: all expired
    window.record(1e-9, 41.0)  # below the lowest bucket
    window.record(1e4, 41.0)  # above the highest
    assert window.count == 2
