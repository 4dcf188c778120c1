"""The hedge delay: from the first call, where the tail starts, adjusted by what wins.

Pure logic on a fake clock and seeded latencies: no sleeps, no timings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from gateway.routing import ConfigError, HedgeDelay, LatencyWindow, Outcome, Route
from tests.routing._support import FakeClock, call, make_route

HEDGE_ON: dict[str, Any] = {"hedge": {"enabled": True, "max_extra_load": 0.05, "min_delay_ms": 1}}
Latency = Callable[[random.Random], float]


def body(rng: random.Random) -> float:
    """2 ms +- 0.5 ms, no tail."""
    return rng.uniform(0.0015, 0.0025)


def with_stalls(share: float, stall_s: float = 0.050) -> Latency:
    def latency(rng: random.Random) -> float:
        return body(rng) + (stall_s if rng.random() < share else 0.0)

    return latency


def feed(route: Route, clock: FakeClock, latency: Latency, count: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    for _ in range(count):
        call(route, clock, latency(rng))


def refreshed_delay(route: Route, clock: FakeClock) -> float | None:
    clock.advance(3.0)  # past the refresh interval
    return route.hedge_delay()


def test_no_hedging_when_disabled() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    assert route.hedge_delay() is None
    assert not route.hedging
    assert route.hedge_policy is None
    assert not route.try_acquire_hedge()


def test_hedges_fire_from_the_first_call_at_the_initial_delay() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    assert route.hedge_delay() == pytest.approx(0.010)  # the default initial delay
    assert route.try_acquire_hedge()  # the budget starts with tokens
    configured = make_route(2, clock, hedge={"enabled": True, "initial_delay_ms": 25})
    assert configured.hedge_delay() == pytest.approx(0.025)


def test_the_initial_delay_holds_until_enough_samples_however_slow_one_was() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    for latency in (0.002, 0.003, 0.040, 0.002):  # far fewer than 100 samples
        call(route, clock, latency)
    clock.advance(0.2)  # past the warm-up refresh interval
    assert route.hedge_delay() == pytest.approx(0.010)


def test_a_body_without_a_tail_is_never_hedged() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    feed(route, clock, body, 2000)
    assert refreshed_delay(route, clock) is None


def test_the_delay_sits_where_the_tail_starts_not_at_a_fixed_percentile() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    feed(route, clock, with_stalls(0.01), 4000)
    delay = refreshed_delay(route, clock)
    # Just above the body (which ends at 2.5 ms), one ~9% bucket at most; a
    # p97.5 would sit inside the body and fire hedges that rarely win.
    assert delay is not None and 0.0025 <= delay <= 0.0025 * 1.1


def test_stragglers_between_body_and_tail_push_the_delay_past_them() -> None:
    """3% of answers at 3-4 ms would rarely lose to a hedge fired at 2.5 ms."""
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    rng = random.Random(9)
    for _ in range(4000):
        draw = rng.random()
        if draw < 0.01:
            latency = 0.052
        elif draw < 0.04:
            latency = rng.uniform(0.003, 0.004)
        else:
            latency = body(rng)
        call(route, clock, latency)
    delay = refreshed_delay(route, clock)
    # Past most stragglers (without them it would be 2.5 ms), short of the stall.
    assert delay is not None and 0.0035 <= delay <= 0.0044


def test_an_explicit_quantile_replaces_the_tail_estimate() -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True, "min_delay_ms": 1, "quantile": 0.95})
    rng = random.Random(5)
    samples = [rng.uniform(0.001, 0.100) for _ in range(2000)]
    for latency in samples:
        call(route, clock, latency)
    delay = refreshed_delay(route, clock)
    expected = sorted(samples)[int(0.95 * len(samples))]
    # Reported as the upper edge of a ~9%-wide log bucket: never below the quantile.
    assert delay is not None and expected <= delay <= expected * 1.1


def test_the_delay_is_refreshed_only_every_refresh_interval() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    feed(route, clock, body, 2000)
    assert refreshed_delay(route, clock) is None
    for _ in range(100):  # a burst of stalled answers, all within the same second
        state = route.pick()
        assert state is not None
        started = route.start(state)
        clock.advance(0.052)
        route.finish(state, started, Outcome.SUCCESS)
        clock.now -= 0.052  # they ran side by side
    assert route.hedge_delay() is None  # until the next refresh
    delay = refreshed_delay(route, clock)
    assert delay is not None and delay <= 0.0025 * 1.1


def test_the_delay_never_goes_below_the_floor() -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True, "min_delay_ms": 5})
    rng = random.Random(1)
    for _ in range(2000):
        call(route, clock, 0.0002 + (0.010 if rng.random() < 0.01 else 0.0))
    assert refreshed_delay(route, clock) == 0.005


def test_a_tail_that_left_the_window_stops_the_hedging() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    feed(route, clock, with_stalls(0.02), 1000)
    assert refreshed_delay(route, clock) is not None
    clock.advance(31.0)  # past the 30 s window
    feed(route, clock, body, 1000)
    assert refreshed_delay(route, clock) is None


def test_a_stall_cut_short_by_a_winning_hedge_still_reads_as_a_tail() -> None:
    """A superseded primary ran at least its elapsed time: recorded that way alone
    (3.5 ms here, less than delay + median) the tail would vanish from the window,
    hedging would stop, the tail come back: an oscillation."""
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    feed(route, clock, body, 98)
    clock.advance(3.0)
    assert route.hedge_delay() == pytest.approx(0.010)  # still warming up; median read
    rng = random.Random(4)
    for index in range(1000):
        if index % 50 == 0:  # 2%: the hedge (fired at ~2.5 ms) answered at 3.5 ms
            state = route.pick()
            assert state is not None
            started = route.start(state)
            clock.advance(0.0035)
            route.observe_superseded(started)
            route.finish(state, started, Outcome.CANCELLED)
        else:
            call(route, clock, body(rng))
    delay = refreshed_delay(route, clock)
    policy = route.hedge_policy
    assert policy is not None and policy.won == 20
    assert delay is not None and delay <= 0.0025 * 1.1


def test_hedges_that_do_not_win_raise_the_delay_and_wins_bring_it_back() -> None:
    window = LatencyWindow(30.0, 10, now=0.0)
    rng = random.Random(2)
    for _ in range(2000):
        window.record(with_stalls(0.01)(rng), 0.0)
    policy = HedgeDelay(window, initial_s=0.01, floor_s=0.001, win_share=0.5, warmup_samples=100)
    estimate = policy.refresh(1.0)
    assert estimate is not None

    for _ in range(19):  # too few to judge
        policy.on_fired()
    assert policy.refresh(2.0) == estimate
    policy.on_fired()  # 20 fired, none won: far below half of the aimed share
    raised = policy.refresh(3.0)
    assert raised == pytest.approx(estimate * 1.25)
    assert policy.refresh(4.0) == raised  # the evidence was used once

    for _ in range(20):  # 20 fired, 10 won: the share aimed at
        policy.on_fired()
    for _ in range(10):
        policy.on_won()
    assert policy.refresh(5.0) == pytest.approx(estimate)
    assert (policy.fired, policy.won) == (40, 10)
    assert policy.raised_by == 1.0


def _hedges_sent(latency: Latency, calls: int) -> tuple[int, int]:
    """Hedges a route sends (all, and those after warm-up) for calls of ``latency``."""
    clock = FakeClock()
    route = make_route(2, clock, **HEDGE_ON)
    rng = random.Random(8)
    sent = after_warmup = 0
    for index in range(calls):
        delay = route.hedge_delay()
        elapsed = latency(rng)
        state = route.pick()
        assert state is not None
        started = route.start(state)
        if delay is not None and elapsed > delay and route.try_acquire_hedge():
            sent += 1
            after_warmup += index >= 200
        clock.advance(elapsed)
        route.finish(state, started, Outcome.SUCCESS)
    return sent, after_warmup


def test_the_budget_is_spent_on_a_tail_and_not_without_one() -> None:
    _, without_tail = _hedges_sent(body, 6000)
    assert without_tail == 0
    _, with_tail = _hedges_sent(with_stalls(0.02), 6000)
    # Every stall after warm-up (2% of 5800, ~116) and little else.
    assert 90 <= with_tail <= 150


@pytest.mark.parametrize(
    ("hedge", "message"),
    [
        ({"win_share": 1.5}, "win_share"),
        ({"win_share": 0}, "win_share"),
        ({"initial_delay_ms": -1}, "initial_delay_ms"),
    ],
)
def test_bad_hedge_settings_are_refused_by_name(hedge: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_route(2, FakeClock(), hedge={"enabled": True, **hedge})
