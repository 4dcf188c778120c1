from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.routing import Outcome, Route, TargetHealth, TargetState
from tests.routing._support import FakeClock, by_key, call, make_route

NO_JITTER: dict[str, Any] = {"ejection": {"jitter": 0}}


def fail(route: Route, clock: FakeClock, state: TargetState, times: int = 1) -> None:
    for _ in range(times):
        call(route, clock, 0.001, Outcome.FAILURE, target=state)


def test_consecutive_failures_eject_and_the_target_is_skipped() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    targets = by_key(route)

    fail(route, clock, targets["e0"], times=4)
    assert targets["e0"].state is TargetHealth.HEALTHY
    fail(route, clock, targets["e0"])

    assert targets["e0"].state is TargetHealth.EJECTED
    assert targets["e0"].ejections == 1
    assert targets["e0"].ejected_until == pytest.approx(clock.now + 30.0)
    assert {route.pick().key for _ in range(20)} == {"e1"}  # type: ignore[union-attr]


def test_a_success_resets_the_consecutive_count() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    e0 = route.targets[0]

    fail(route, clock, e0, times=4)
    call(route, clock, 0.001, target=e0)
    fail(route, clock, e0, times=4)

    assert e0.state is TargetHealth.HEALTHY
    assert e0.consecutive_failures == 4


def test_neutral_outcomes_count_against_no_target() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    e0 = route.targets[0]

    for _ in range(50):
        call(route, clock, 0.002, Outcome.NEUTRAL, target=e0)

    assert e0.state is TargetHealth.HEALTHY
    assert e0.ewma_ms == 0.0  # an error answer is no latency sample
    assert route.target_up(e0)

    # Nor does a caller's mistake end a failure streak: the target is as it was.
    fail(route, clock, e0, times=4)
    call(route, clock, 0.002, Outcome.NEUTRAL, target=e0)
    assert e0.consecutive_failures == 4
    fail(route, clock, e0)
    assert e0.state is TargetHealth.EJECTED


def test_cancelled_outcomes_never_count() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    e0 = route.targets[0]

    for _ in range(100):
        call(route, clock, 0.5, Outcome.CANCELLED, target=e0)

    assert e0.state is TargetHealth.HEALTHY
    assert e0.outstanding == 0
    assert e0.ewma_ms == 0.0  # no latency sample either


def test_a_low_success_rate_ejects_without_consecutive_failures() -> None:
    clock = FakeClock()
    route = make_route(2, clock, ejection={"success_rate_min_requests": 20})
    e0 = route.targets[0]

    # Fail, fail, succeed: 33% success, never 5 failures in a row.
    for index in range(30):
        outcome = Outcome.SUCCESS if index % 3 == 2 else Outcome.FAILURE
        call(route, clock, 0.001, outcome, target=e0)
        if e0.state is TargetHealth.EJECTED:
            break

    assert e0.state is TargetHealth.EJECTED
    assert index >= 19  # not before the minimum request count


def test_old_failures_leave_the_success_rate_window() -> None:
    clock = FakeClock()
    route = make_route(2, clock, ejection={"success_rate_min_requests": 20})
    e0 = route.targets[0]

    for index in range(12):  # 8 failures, 4 successes
        outcome = Outcome.SUCCESS if index % 3 == 2 else Outcome.FAILURE
        call(route, clock, 0.001, outcome, target=e0)
    clock.advance(25.0)  # well past the 10 s window
    for index in range(12):
        outcome = Outcome.SUCCESS if index % 3 == 2 else Outcome.FAILURE
        call(route, clock, 0.001, outcome, target=e0)

    assert e0.state is TargetHealth.HEALTHY


def test_at_most_the_configured_share_is_ejected() -> None:
    clock = FakeClock()
    route = make_route(20, clock, ejection={"max_ejected_share": 0.1})

    for state in route.targets:
        fail(route, clock, state, times=5)

    ejected = [s for s in route.targets if s.state is TargetHealth.EJECTED]
    assert len(ejected) == 2  # 10% of 20


def test_a_two_target_route_may_eject_one_but_never_both() -> None:
    clock = FakeClock()
    route = make_route(2, clock)

    for _ in range(3):
        for state in route.targets:
            fail(route, clock, state, times=5)

    states = sorted(state.state.value for state in route.targets)
    assert states == ["ejected", "healthy"]
    assert route.pick() is not None


def test_a_single_target_is_never_ejected() -> None:
    clock = FakeClock()
    route = make_route(1, clock)

    fail(route, clock, route.targets[0], times=50)
    route.record_health_check(route.targets[0], healthy=False)

    assert route.targets[0].state is TargetHealth.HEALTHY
    # So a primary pick is always it; a retry that excludes it reuses it only if asked.
    assert route.pick() is route.targets[0]
    assert route.pick(exclude=route.targets) is None
    assert route.pick(exclude=route.targets, reuse_excluded=True) is route.targets[0]


def test_zero_share_disables_ejection() -> None:
    clock = FakeClock()
    route = make_route(3, clock, ejection={"max_ejected_share": 0})

    fail(route, clock, route.targets[0], times=50)

    assert route.targets[0].state is TargetHealth.HEALTHY


def test_probing_offers_one_request_and_a_success_readmits() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    e0, e1 = route.targets
    call(route, clock, 0.001, target=e1)
    fail(route, clock, e0, times=5)

    clock.advance(30.0)
    probe = route.pick()
    assert probe is e0
    assert e0.state is TargetHealth.PROBING
    assert route.needs_probe(e0)
    started = route.start(probe)
    # While the probe is out, everyone else goes to the healthy target.
    assert {route.pick() for _ in range(10)} == {e1}
    assert not route.needs_probe(e0)

    clock.advance(0.003)
    route.finish(probe, started, Outcome.SUCCESS)

    assert e0.state is TargetHealth.HEALTHY
    assert e0.ewma_ms == pytest.approx(3.0)  # fresh, not the pre-ejection estimate


def test_a_failed_probe_ejects_again_for_longer() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    e0 = route.targets[0]
    fail(route, clock, e0, times=5)
    clock.advance(30.0)

    probe = route.pick()
    assert probe is e0
    fail(route, clock, e0)

    assert e0.state is TargetHealth.EJECTED
    assert e0.ejections == 2
    assert e0.ejected_until == pytest.approx(clock.now + 60.0)  # base x 2


def test_a_cancelled_probe_keeps_probing() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    e0 = route.targets[0]
    fail(route, clock, e0, times=5)
    clock.advance(30.0)

    call(route, clock, 0.001, Outcome.CANCELLED, target=route.pick())

    assert e0.state is TargetHealth.PROBING
    assert route.pick() is e0


def test_ejection_time_is_capped_and_jittered() -> None:
    clock = FakeClock()
    route = make_route(2, clock, ejection={"base_ejection_s": 30, "max_ejection_s": 100})
    e0 = route.targets[0]
    fail(route, clock, e0, times=5)
    durations = []
    for _ in range(6):
        durations.append(e0.ejected_until - clock.now)  # type: ignore[operator]
        clock.advance(e0.ejected_until - clock.now + 0.001)  # type: ignore[operator]
        assert route.pick() is e0
        fail(route, clock, e0)

    assert 30 * 0.85 <= durations[0] <= 30 * 1.15
    assert 60 * 0.85 <= durations[1] <= 60 * 1.15
    assert all(100 * 0.85 <= d <= 100 * 1.15 for d in durations[3:])


def test_the_ejection_multiplier_decays_while_healthy() -> None:
    clock = FakeClock()
    route = make_route(2, clock, **NO_JITTER)
    e0 = route.targets[0]
    fail(route, clock, e0, times=5)
    clock.advance(30.0)
    fail(route, clock, route.pick(), times=1)  # type: ignore[arg-type]  # level 2
    clock.advance(60.0)
    call(route, clock, 0.001, target=route.pick())  # re-admitted
    assert e0.state is TargetHealth.HEALTHY

    clock.advance(45.0)  # one base period healthy: level 2 -> 1
    fail(route, clock, e0, times=5)

    assert e0.ejected_until == pytest.approx(clock.now + 60.0)  # level 1 + 1


def test_late_answers_do_not_readmit_an_ejected_target() -> None:
    clock = FakeClock()
    route = make_route(2, clock)
    e0 = route.targets[0]
    slow_start = route.start(e0)
    fail(route, clock, e0, times=5)

    route.finish(e0, slow_start, Outcome.SUCCESS)

    assert e0.state is TargetHealth.EJECTED


def test_active_health_checks_are_due_on_interval_and_feed_ejection() -> None:
    clock = FakeClock()
    route = make_route(2, clock, health_check={"enabled": True, "interval_s": 5}, **NO_JITTER)
    e0 = route.targets[0]

    assert route.due_for_health_check(e0)
    route.record_health_check(e0, healthy=True)
    assert not route.due_for_health_check(e0)
    clock.advance(5.0)
    assert route.due_for_health_check(e0)

    for _ in range(5):
        route.record_health_check(e0, healthy=False)
    assert e0.state is TargetHealth.EJECTED
    clock.advance(30.0)
    route.pick()  # notices the ejection ended
    assert route.needs_probe(e0)
    route.record_health_check(e0, healthy=True)
    assert e0.state is TargetHealth.HEALTHY


def test_health_checks_are_never_due_when_disabled() -> None:
    clock = FakeClock()
    route = make_route(1, clock)
    assert not route.due_for_health_check(route.targets[0])


outcomes = st.sampled_from(list(Outcome))
steps = st.lists(
    st.tuples(st.integers(0, 5), outcomes, st.floats(0.0, 40.0), st.booleans()),
    max_size=150,
)


@settings(max_examples=60, deadline=None)
@given(
    targets=st.integers(1, 6),
    share=st.sampled_from([0.1, 0.3, 0.5, 1.0]),
    plan=steps,
)
def test_never_all_targets_are_out_of_rotation(
    targets: int, share: float, plan: list[tuple[int, Outcome, float, bool]]
) -> None:
    clock = FakeClock()
    route = make_route(
        targets, clock, ejection={"max_ejected_share": share, "consecutive_failures": 2}
    )
    limit = 0 if targets < 2 else min(targets - 1, max(1, int(share * targets)))

    for index, outcome, pause, via_pick in plan:
        state = route.pick() if via_pick else route.targets[index % targets]
        assert state is not None  # a primary pick always finds a target
        if via_pick:
            assert state.state is not TargetHealth.EJECTED
        call(route, clock, 0.001, outcome, target=state)
        clock.advance(pause)
        out = [s for s in route.targets if s.state is not TargetHealth.HEALTHY]
        assert len(out) <= limit
        assert len(out) < targets
        assert all(s.outstanding == 0 for s in route.targets)
