from __future__ import annotations

import random
import tomllib

from gateway.routing import Route, RouteConfig, Router
from tests.routing._support import FakeClock


def make_router(**kwargs: object) -> Router:
    table = tomllib.loads(
        """
        [routes.bid-filter]
        targets = [{ endpoint = "bid-filter-a" }, { endpoint = "bid-filter-b" }]
        hedge = { enabled = true }
        """
    )["routes"]
    return Router.from_mapping(table, clock=FakeClock(), rng=random.Random(1), **kwargs)


def test_configured_routes_are_found_by_name() -> None:
    router = make_router()
    route = router.route("bid-filter")
    assert isinstance(route, Route)
    assert [t.key for t in route.targets] == ["bid-filter-a", "bid-filter-b"]
    assert router.route("nope") is None
    assert router.resolve("bid-filter") is route
    assert set(router.routes) == {"bid-filter"}


def test_a_bare_endpoint_name_gets_a_cached_single_target_route() -> None:
    router = make_router()
    route = router.resolve("plain-endpoint")
    assert [t.target.endpoint for t in route.targets] == ["plain-endpoint"]
    assert router.default_route("plain-endpoint") is route
    assert router.route("plain-endpoint") is None  # not a configured route


def test_find_gives_what_resolve_gives_but_makes_nothing() -> None:
    router = make_router(default_route_capacity=2)
    assert router.find("bid-filter") is router.resolve("bid-filter")
    assert router.find("plain-endpoint") is None  # never resolved: not made by find either
    kept = router.resolve("plain-endpoint")
    for index in range(10):
        assert router.find(f"junk-{index}") is None
    assert router.find("plain-endpoint") is kept  # junk names pushed nothing out


def test_default_routes_are_bounded() -> None:
    router = make_router(default_route_capacity=3)
    first = router.default_route("e0")
    for index in range(1, 5):
        router.default_route(f"e{index}")
    assert router.default_route("e0") is not first  # evicted, rebuilt


def test_default_routes_follow_the_template() -> None:
    template = RouteConfig.from_mapping(
        "template", {"targets": ["ignored"], "timeout_ms": 15, "hedge": {"enabled": True}}
    )
    router = make_router(default_template=template)
    route = router.default_route("x")
    assert route.name == "x"
    assert route.timeout_s == 0.015
    assert route.config.hedge.enabled
    assert [t.key for t in route.targets] == ["x"]
