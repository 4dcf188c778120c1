"""Priority levels (Envoy's model) and Retry-After cooldowns, on the route alone."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.routing import Outcome, RouteConfig, TargetHealth
from tests.routing._support import FakeClock, by_key, call, make_route

PRIMARY_AND_FALLBACK = [
    {"endpoint": "home"},
    {"inference_router": "r", "routing_target": "t", "region": "eu-west-1", "priority": 1},
]
FALLBACK = "router/r/t@eu-west-1"
EJECT_AT_ONCE = {"ejection": {"consecutive_failures": 1, "base_ejection_s": 10.0, "jitter": 0.0}}


def served(route: Any, clock: FakeClock, calls: int) -> Counter[str]:
    return Counter(call(route, clock, 0.002).key for _ in range(calls))


def test_a_healthy_primary_leaves_the_fallback_idle() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock)
    assert served(route, clock, 1000) == {"home": 1000}
    assert route.level_loads() == {0: 1.0, 1: 0.0}


def test_an_ejected_primary_sends_everything_to_the_fallback_until_readmitted() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock, **EJECT_AT_ONCE)
    home = by_key(route)["home"]
    call(route, clock, 0.002, Outcome.FAILURE, target=home)
    assert home.state is TargetHealth.EJECTED
    assert route.level_loads() == {0: 0.0, 1: 1.0}
    assert served(route, clock, 100) == {FALLBACK: 100}
    clock.advance(11.0)  # the ejection ran out: the primary is probed, then readmitted
    assert call(route, clock, 0.002).key == "home"
    assert home.state is TargetHealth.HEALTHY
    assert served(route, clock, 100) == {"home": 100}


def test_traffic_spills_over_as_the_primary_levels_health_drops() -> None:
    clock = FakeClock()
    targets: list[dict[str, Any]] = [{"endpoint": f"p{i}"} for i in range(10)]
    targets.append({"endpoint": "backup", "priority": 1})
    ejection = {**EJECT_AT_ONCE["ejection"], "max_ejected_share": 1.0}
    route = make_route(targets, clock, ejection=ejection)
    states = by_key(route)
    for index in range(5):  # 50% up x 1.4 overprovisioning: 70% stays at priority 0
        call(route, clock, 0.002, Outcome.FAILURE, target=states[f"p{index}"])
    assert route.level_loads() == pytest.approx({0: 0.7, 1: 0.3})
    counts = served(route, clock, 1000)
    assert counts["backup"] == pytest.approx(300, abs=2)


def test_levels_whose_health_adds_up_to_less_than_one_are_normalised() -> None:
    clock = FakeClock()
    targets: list[dict[str, Any]] = [{"endpoint": f"p{i}"} for i in range(10)]
    targets += [{"endpoint": f"b{i}", "priority": 1} for i in range(10)]
    ejection = {**EJECT_AT_ONCE["ejection"], "max_ejected_share": 1.0}
    route = make_route(targets, clock, ejection=ejection)
    states = by_key(route)
    for index in range(9):  # priority 0: 10% up -> health 0.14
        call(route, clock, 0.002, Outcome.FAILURE, target=states[f"p{index}"])
    for index in range(8):  # priority 1: 20% up -> health 0.28
        call(route, clock, 0.002, Outcome.FAILURE, target=states[f"b{index}"])
    assert route.level_loads() == pytest.approx({0: 1 / 3, 1: 2 / 3})


def test_hedges_and_retries_go_to_the_fallback_while_the_primary_is_healthy() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock)
    home = by_key(route)["home"]
    assert route.pick(exclude=(home,), reuse_excluded=True) is by_key(route)[FALLBACK]
    assert route.pick(exclude=(home,)) is by_key(route)[FALLBACK]


def test_a_retry_that_tried_every_level_reuses_the_primary() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock)
    states = by_key(route)
    tried = (states["home"], states[FALLBACK])
    assert route.pick(exclude=tried, reuse_excluded=True) is states["home"]
    assert route.pick(exclude=tried) is None


def test_weights_share_calls_inside_a_level() -> None:
    clock = FakeClock()
    targets = [
        {"endpoint": "big", "weight": 3},
        {"endpoint": "small", "weight": 1},
        {"endpoint": "backup", "priority": 1},
    ]
    route = make_route(targets, clock)
    assert served(route, clock, 400) == {"big": 300, "small": 100}


def test_an_idle_fallback_is_not_probed_with_real_calls() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock, **EJECT_AT_ONCE)
    fallback = by_key(route)[FALLBACK]
    call(route, clock, 0.002, Outcome.FAILURE, target=fallback)  # a failed hedge, say
    assert fallback.state is TargetHealth.EJECTED
    clock.advance(11.0)
    assert served(route, clock, 50) == {"home": 50}
    assert fallback.state is TargetHealth.PROBING  # waits for a check or for being needed


def test_a_whole_level_may_go_but_never_the_routes_last_target() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock, **EJECT_AT_ONCE)
    states = by_key(route)
    call(route, clock, 0.002, Outcome.FAILURE, target=states["home"])
    call(route, clock, 0.002, Outcome.FAILURE, target=states[FALLBACK])
    assert states["home"].state is TargetHealth.EJECTED
    assert states[FALLBACK].state is TargetHealth.HEALTHY


@pytest.mark.parametrize("priority", [-1, 10, 1.5, "1"])
def test_priority_is_a_small_whole_number(priority: object) -> None:
    with pytest.raises(ConfigError, match="priority"):
        RouteConfig.from_mapping("r", {"targets": [{"endpoint": "a", "priority": priority}]})


def test_overprovisioning_factor_is_at_least_one() -> None:
    with pytest.raises(ConfigError, match="overprovisioning_factor"):
        RouteConfig.from_mapping("r", {"targets": ["a"], "overprovisioning_factor": 0.5})


# -- Retry-After cooldowns --------------------------------------------------------


def test_a_cooling_target_is_not_picked_until_its_retry_after_ends() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    states = by_key(route)
    route.cool_down(states["e0"], 2.0)
    assert served(route, clock, 100) == {"e1": 100}
    assert route.ready_in() == 0.0  # e1 takes calls now
    assert route.ready_in(exclude=(states["e1"],)) == pytest.approx(2.0 - 0.2, abs=1e-6)
    clock.advance(2.0)
    assert set(served(route, clock, 100)) == {"e0", "e1"}
    assert states["e0"].state is TargetHealth.HEALTHY  # a cooldown is no ejection


def test_a_cooldown_is_capped_and_can_be_turned_off() -> None:
    clock = FakeClock()
    route = make_route(2, clock, retry={"max_retry_after_s": 1.0})
    e0 = by_key(route)["e0"]
    route.cool_down(e0, 3600.0)
    assert e0.cool_until == clock.now + 1.0
    off = make_route(2, clock, retry={"max_retry_after_s": 0})
    off.cool_down(by_key(off)["e0"], 5.0)
    assert set(served(off, clock, 100)) == {"e0", "e1"}


def test_a_cooling_primary_spills_to_the_fallback_for_that_long() -> None:
    clock = FakeClock()
    route = make_route(PRIMARY_AND_FALLBACK, clock)
    route.cool_down(by_key(route)["home"], 1.0)
    assert route.level_loads() == {0: 0.0, 1: 1.0}
    assert served(route, clock, 10) == {FALLBACK: 10}
    clock.advance(1.0)
    assert served(route, clock, 10) == {"home": 10}


def test_when_every_target_cools_a_new_call_still_goes_out() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    for state in route.targets:
        route.cool_down(state, 1.0)
    assert route.pick() is not None  # serving beats refusing
    assert route.ready_in() == pytest.approx(1.0)
