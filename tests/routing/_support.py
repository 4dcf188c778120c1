"""Shared helpers for the routing tests: a fake clock and a route factory."""

from __future__ import annotations

import random
from typing import Any

from gateway.routing import Outcome, Route, RouteConfig, TargetState


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_route(
    targets: int | list[dict[str, Any]],
    clock: FakeClock,
    *,
    seed: int = 7,
    **settings: Any,
) -> Route:
    """A route over ``e0..e{n-1}`` (or the given target tables), seeded and on ``clock``."""
    tables = (
        [{"endpoint": f"e{index}"} for index in range(targets)]
        if isinstance(targets, int)
        else targets
    )
    config = RouteConfig.from_mapping("test", {"targets": tables, **settings})
    return Route(config, clock=clock, rng=random.Random(seed))


def call(
    route: Route,
    clock: FakeClock,
    latency_s: float,
    outcome: Outcome = Outcome.SUCCESS,
    *,
    target: TargetState | None = None,
    model: str | None = None,
) -> TargetState:
    """One sequential attempt: pick (unless given), start, wait ``latency_s``, finish."""
    chosen = target if target is not None else route.pick(model)
    assert chosen is not None
    started = route.start(chosen)
    clock.advance(latency_s)
    route.finish(chosen, started, outcome)
    return chosen


def by_key(route: Route) -> dict[str, TargetState]:
    return {state.key: state for state in route.targets}
