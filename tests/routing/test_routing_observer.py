"""Routing tells an observer (gateway's event stream) about ejections and re-admissions."""

from __future__ import annotations

import random

from gateway.routing import Outcome, Route, RouteConfig, Router, TargetHealth, TargetState
from tests.routing._support import FakeClock, call


def test_the_observer_sees_each_ejection_and_readmission_once() -> None:
    clock = FakeClock()
    seen: list[tuple[str, str, TargetHealth]] = []

    def observer(route: Route, target: TargetState) -> None:
        seen.append((route.name, target.key, target.state))

    config = RouteConfig.from_mapping(
        "pair", {"targets": [{"endpoint": "e0"}, {"endpoint": "e1"}], "ejection": {"jitter": 0}}
    )
    router = Router([config], clock=clock, rng=random.Random(3), observer=observer)
    route = router.resolve("pair")
    e0, e1 = route.targets
    call(route, clock, 0.001, target=e1)
    for _ in range(5):
        call(route, clock, 0.001, Outcome.FAILURE, target=e0)
    assert seen == [("pair", e0.key, TargetHealth.EJECTED)]

    clock.advance(30.0)
    probe = route.pick()  # ejection over: PROBING, not reported
    assert probe is e0 and len(seen) == 1
    call(route, clock, 0.002, target=e0)
    assert seen[-1] == ("pair", e0.key, TargetHealth.HEALTHY)
    assert len(seen) == 2
