"""A failure is never a fast answer, and a route whose every target fails is down.

Peak-EWMA prefers the target with the lowest latency. A target that fails at
once (its endpoint deleted, its model crashing) answers faster than any that
serves, so a failure recorded as a latency sample draws the traffic to it.
"""

from __future__ import annotations

import pytest

from gateway.routing import Outcome, Route, TargetHealth, TargetState
from tests.routing._support import FakeClock, by_key, call, make_route

NO_JITTER = {"ejection": {"jitter": 0}}


def _picks(route: Route, clock: FakeClock, count: int) -> dict[str, int]:
    """``count`` sequential calls that succeed in 5 ms: where they went."""
    went: dict[str, int] = {}
    for _ in range(count):
        state = call(route, clock, 0.005)
        went[state.key] = went.get(state.key, 0) + 1
    return went


def test_a_fast_failure_never_makes_its_target_look_faster() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)
    call(route, clock, 0.005, target=targets["e1"])

    call(route, clock, 0.0001, Outcome.FAILURE, target=targets["e0"])

    assert targets["e0"].ewma_ms >= 2 * targets["e1"].ewma_ms
    # The calls stay with the target that answers.
    assert _picks(route, clock, 20) == {"e1": 20}


def test_a_failure_before_any_answer_is_not_preferred_once_another_answers() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    targets = by_key(route)

    call(route, clock, 0.0001, Outcome.FAILURE, target=targets["e0"])
    call(route, clock, 0.005, target=targets["e1"])

    assert targets["e0"].ewma_ms > targets["e1"].ewma_ms
    assert _picks(route, clock, 20) == {"e1": 20}


def test_a_failure_never_lowers_a_targets_latency() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    e0 = route.targets[0]
    call(route, clock, 0.050, target=e0)

    call(route, clock, 0.0001, Outcome.FAILURE, target=e0)

    assert e0.ewma_ms >= 50.0


@pytest.mark.parametrize("outcome", [Outcome.NEUTRAL, Outcome.CANCELLED])
def test_an_answer_that_is_not_a_success_is_no_latency_sample(outcome: Outcome) -> None:
    clock = FakeClock()
    route = make_route(2, clock, hedge={"enabled": True})
    targets = by_key(route)
    call(route, clock, 0.005, target=targets["e1"])

    for _ in range(20):
        call(route, clock, 0.0001, outcome, target=targets["e0"])

    assert targets["e0"].ewma_ms == 0.0
    policy = route.hedge_policy
    assert policy is not None
    policy.refresh(clock.now)
    # The hedge delay's window saw the one answer only.
    assert policy.median_s == pytest.approx(0.005, rel=0.5)


def _fail(route: Route, clock: FakeClock, state: TargetState, times: int) -> None:
    for _ in range(times):
        call(route, clock, 0.0001, Outcome.FAILURE, target=state)


def test_a_route_whose_every_target_fails_has_none_up() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    e0, e1 = route.targets
    assert route.target_up(e0) and route.target_up(e1)

    _fail(route, clock, e0, 5)
    _fail(route, clock, e1, 5)

    # One is ejected; the other cannot be (never all), but its streak says it is down.
    assert e0.state is TargetHealth.EJECTED
    assert e1.state is TargetHealth.HEALTHY
    assert not route.target_up(e0)
    assert not route.target_up(e1)

    call(route, clock, 0.005, target=e1)
    assert route.target_up(e1)


def test_a_lone_target_that_fails_every_call_is_down() -> None:
    clock = FakeClock()
    route = make_route(1, clock)
    (only,) = route.targets

    _fail(route, clock, only, 4)
    assert route.target_up(only)
    _fail(route, clock, only, 1)
    assert only.state is TargetHealth.HEALTHY  # a lone target is never ejected
    assert not route.target_up(only)


def test_untried_says_whether_a_retry_has_somewhere_else_to_go() -> None:
    clock = FakeClock()
    route = make_route(3, clock, **NO_JITTER)
    e0, e1, e2 = route.targets
    assert route.untried([e0, e1])
    assert not route.untried([e0, e1, e2])

    _fail(route, clock, e2, 5)  # ejected: it takes no retry
    assert e2.state is TargetHealth.EJECTED
    assert not route.untried([e0, e1])

    clock.advance(60.0)  # its ejection is over: an idle probe may take one
    assert route.untried([e0, e1])
