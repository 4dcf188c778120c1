from __future__ import annotations

import random
from typing import Any

import pytest

from routing import HedgeBudget, LatencyWindow, Outcome, RetryBudget
from tests.routing._support import FakeClock, call, make_route

HEDGE_ON: dict[str, Any] = {"hedge": {"enabled": True, "max_extra_load": 0.05, "min_delay_ms": 1}}


def test_no_hedging_when_disabled_or_before_any_sample() -> None:
    clock = FakeClock()
    assert make_route(2, clock).hedge_delay() is None
    assert not make_route(2, clock).hedging
    route = make_route(2, clock, **HEDGE_ON)
    assert route.hedging
    assert route.hedge_delay() is None
    assert not make_route(2, clock).try_acquire_hedge()


@pytest.mark.parametrize(
    ("hedge", "quantile"),
    [
        # By default the delay aims at half the budget: p97.5 for 5%.
        ({"max_extra_load": 0.05}, 0.975),
        # An explicit quantile wins (Finagle's choice: the budget's own percentile).
        ({"max_extra_load": 0.05, "quantile": 0.95}, 0.95),
    ],
)
def test_hedge_delay_tracks_its_quantile_of_recent_latency(
    hedge: dict[str, Any], quantile: float
) -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True, "min_delay_ms": 1, **hedge})
    rng = random.Random(5)
    samples = [rng.uniform(0.001, 0.100) for _ in range(2000)]
    for latency in samples:
        call(route, clock, latency)

    clock.advance(3.0)  # past the refresh interval
    delay = route.hedge_delay()

    expected = sorted(samples)[int(quantile * len(samples))]
    assert delay is not None
    # Reported as the upper edge of a ~9%-wide log bucket: never below the quantile.
    assert expected <= delay <= expected * 1.1


def test_hedge_delay_is_refreshed_only_every_refresh_interval() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    for _ in range(100):
        call(route, clock, 0.010)
    clock.advance(3.0)
    before = route.hedge_delay()

    for _ in range(5000):  # 2.5 s of fast answers: the p97.5 will drop to them
        call(route, clock, 0.0005, target=route.targets[0])
    assert route.hedge_delay() == before
    clock.advance(3.0)
    after = route.hedge_delay()

    assert before is not None and after is not None and after < before


def test_hedge_delay_never_goes_below_the_floor() -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True, "min_delay_ms": 5})
    for _ in range(500):
        call(route, clock, 0.0002)
    clock.advance(3.0)

    assert route.hedge_delay() == 0.005


def test_warmup_hedges_only_slower_than_anything_seen() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    for latency in (0.002, 0.003, 0.040, 0.002):  # far fewer than 100 samples
        call(route, clock, latency)
    clock.advance(0.2)

    delay = route.hedge_delay()

    assert delay is not None and 0.040 <= delay <= 0.044


def test_old_latency_leaves_the_window() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    for _ in range(200):
        call(route, clock, 0.050)
    clock.advance(31.0)
    for _ in range(200):
        call(route, clock, 0.002)
    clock.advance(3.0)

    delay = route.hedge_delay()

    assert delay is not None and delay < 0.0025


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


def test_superseded_primaries_count_toward_the_hedge_delay() -> None:
    """A primary that lost to its hedge took at least its elapsed time; without it
    in the window the slow tail vanishes and the delay comes out too short."""
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True, "max_extra_load": 0.05})
    for _ in range(900):
        call(route, clock, 0.002)
    for _ in range(100):  # a tenth of primaries superseded after 50 ms
        state = route.pick()
        assert state is not None
        started = route.start(state)
        clock.advance(0.050)
        route.observe_superseded(started)
        route.finish(state, started, Outcome.CANCELLED)
    clock.advance(3.0)
    delay = route.hedge_delay()
    assert delay is not None and delay >= 0.045  # p97.5 now sits in the superseded tail
