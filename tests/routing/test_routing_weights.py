"""Weights are traffic shares at any concurrency; latency balances inside a share."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.routing import Outcome, Route, TargetState
from tests.routing._support import FakeClock, by_key, make_route

CANARY = [{"endpoint": "primary", "weight": 0.9}, {"endpoint": "canary", "weight": 0.1}]


def closed_loop(
    route: Route, clock: FakeClock, in_flight: int, calls: int, latency_s: dict[str, float]
) -> Counter[str]:
    """``calls`` picks with ``in_flight`` outstanding, each answering after its target's latency."""
    pending: list[tuple[float, TargetState, float]] = []  # (due, target, started)
    served: Counter[str] = Counter()
    for _ in range(calls):
        while len(pending) >= in_flight:
            pending.sort(key=lambda item: item[0])
            due, state, started = pending.pop(0)
            clock.now = max(clock.now, due)
            route.finish(state, started, Outcome.SUCCESS)
        state = route.pick()
        assert state is not None
        started = route.start(state)
        pending.append((clock.now + latency_s[state.key], state, started))
        served[state.key] += 1
        clock.advance(0.0001)
    return served


@pytest.mark.parametrize("in_flight", [1, 2, 4, 8, 32])
def test_a_canary_gets_its_weight_at_any_concurrency(in_flight: int) -> None:
    clock = FakeClock()
    route = make_route(CANARY, clock)
    served = closed_loop(route, clock, in_flight, 10_000, {"primary": 0.004, "canary": 0.004})
    assert served["canary"] / 10_000 == pytest.approx(0.10, abs=0.005)


def test_a_slower_canary_still_gets_its_share() -> None:
    clock = FakeClock()
    route = make_route(CANARY, clock)
    served = closed_loop(route, clock, 4, 10_000, {"primary": 0.002, "canary": 0.020})
    assert served["canary"] / 10_000 == pytest.approx(0.10, abs=0.005)


def test_latency_balances_inside_a_share() -> None:
    clock = FakeClock()
    route = make_route(
        [
            {"endpoint": "fast", "weight": 1},
            {"endpoint": "slow", "weight": 1},
            {"endpoint": "canary", "weight": 0.5},
        ],
        clock,
    )
    latency = {"fast": 0.002, "slow": 0.020, "canary": 0.005}
    served = closed_loop(route, clock, 2, 10_000, latency)
    # The canary class: 0.5 of 2.5; the two weight-1 targets share 80% by latency.
    assert served["canary"] / 10_000 == pytest.approx(0.20, abs=0.005)
    assert served["fast"] > 4 * served["slow"]


def test_an_ejected_targets_share_goes_to_the_others() -> None:
    clock = FakeClock()
    route = make_route(
        [
            {"endpoint": "a", "weight": 1},
            {"endpoint": "b", "weight": 1},
            {"endpoint": "canary", "weight": 0.2},
        ],
        clock,
        ejection={"consecutive_failures": 1, "base_ejection_s": 1000},
    )
    targets = by_key(route)
    route.finish(targets["b"], route.start(targets["b"]), Outcome.FAILURE)
    assert targets["b"].ejected_until is not None

    served = Counter(_one_call(route, clock).key for _ in range(1200))

    assert served["b"] == 0
    assert served["canary"] / 1200 == pytest.approx(0.2 / 1.2, abs=0.01)


def test_hedges_and_retries_still_go_elsewhere() -> None:
    clock = FakeClock()
    route = make_route(CANARY, clock)
    targets = by_key(route)
    for _ in range(20):
        assert route.pick(exclude=(targets["primary"],)) is targets["canary"]
        assert route.pick(exclude=(targets["canary"],)) is targets["primary"]


def _one_call(route: Route, clock: FakeClock) -> TargetState:
    state = route.pick()
    assert state is not None
    started = route.start(state)
    clock.advance(0.003)
    route.finish(state, started, Outcome.SUCCESS)
    return state
