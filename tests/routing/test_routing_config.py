from __future__ import annotations

import tomllib
from typing import Any

import pytest

from gateway.routing import (
    ConfigError,
    EjectionConfig,
    HealthCheckConfig,
    HedgeConfig,
    RetryConfig,
    RouteConfig,
    Target,
    parse_routes,
)

VPCE = "https://vpce-0def.runtime.sagemaker.us-west-2.vpce.amazonaws.com"
EXAMPLE = """
[routes.bid-filter]
targets = [
  { endpoint = "bid-filter-a" },
  { endpoint = "bid-filter-b", region = "us-west-2", url = "VPCE", weight = 1 },
]
timeout_ms = 20
hedge = { enabled = true, max_extra_load = 0.05, min_delay_ms = 1 }
retry = { max_attempts = 2, budget_ratio = 0.1, min_per_second = 5 }
""".replace("VPCE", VPCE)


def test_parses_the_documented_toml_shape() -> None:
    routes = parse_routes(tomllib.loads(EXAMPLE)["routes"])

    route = routes["bid-filter"]
    assert route.name == "bid-filter"
    assert route.timeout_ms == 20.0
    assert route.hedge == HedgeConfig(enabled=True, max_extra_load=0.05, min_delay_ms=1.0)
    assert route.retry == RetryConfig(max_attempts=2, budget_ratio=0.1, min_per_second=5.0)
    assert route.ejection == EjectionConfig()
    assert route.health_check == HealthCheckConfig()
    assert route.mme_preferred == 2
    a, b = route.targets
    assert a == Target(endpoint="bid-filter-a")
    assert b.region == "us-west-2"
    assert b.url == VPCE
    assert b.weight == 1.0


def test_target_keys_are_readable_and_distinct() -> None:
    assert Target("e").key == "e"
    assert Target("e", region="us-east-1").key == "e@us-east-1"
    assert Target("e", variant="blue").key == "e/blue"
    assert (
        Target("e", region="us-west-2", url="https://vpce-1.example.com:443/x").key
        == "e@vpce-1.example.com:443"
    )


def test_bare_endpoint_strings_are_accepted_as_targets() -> None:
    route = RouteConfig.from_mapping("r", {"targets": ["a", "b"]})
    assert [target.endpoint for target in route.targets] == ["a", "b"]


def test_health_check_body_string_becomes_bytes() -> None:
    route = RouteConfig.from_mapping(
        "r", {"targets": ["a"], "health_check": {"enabled": True, "body": "[1,2]"}}
    )
    assert route.health_check.body == b"[1,2]"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"hedge": {"max_extra_load": 1.5}},
            "routes.bid-filter.hedge.max_extra_load: must be > 0 and < 1, got 1.5",
        ),
        ({"hedge": {"max_extra_load": 0}}, "routes.bid-filter.hedge.max_extra_load: must be > 0"),
        ({"hedge": {"enabled": 1}}, "routes.bid-filter.hedge.enabled: must be true or false"),
        ({"hedge": {"refresh_s": 60}}, "routes.bid-filter.hedge.refresh_s: must be <= window_s"),
        ({"hedge": {"delay": 3}}, "routes.bid-filter.hedge.delay: unknown key"),
        ({"hedge": "fast"}, "routes.bid-filter.hedge: must be a table"),
        (
            {"retry": {"max_attempts": 0}},
            "routes.bid-filter.retry.max_attempts: must be >= 1, got 0",
        ),
        ({"retry": {"max_attempts": 2.5}}, "routes.bid-filter.retry.max_attempts: must be an int"),
        (
            {"retry": {"budget_ratio": -0.1}},
            "routes.bid-filter.retry.budget_ratio: must be between 0 and 1",
        ),
        (
            {"retry": {"backoff_base_ms": 10, "backoff_max_ms": 5}},
            "routes.bid-filter.retry.backoff_max_ms: must be >= backoff_base_ms",
        ),
        (
            {"ejection": {"max_ejected_share": 2}},
            "routes.bid-filter.ejection.max_ejected_share: must be between 0 and 1, got 2",
        ),
        (
            {"ejection": {"consecutive_failures": 0}},
            "routes.bid-filter.ejection.consecutive_failures: must be >= 1, got 0",
        ),
        (
            {"ejection": {"jitter": 1}},
            "routes.bid-filter.ejection.jitter: must be >= 0 and < 1, got 1",
        ),
        (
            {"health_check": {"interval_s": 0}},
            "routes.bid-filter.health_check.interval_s: must be > 0, got 0",
        ),
        ({"timeout_ms": 0}, "routes.bid-filter.timeout_ms: must be > 0, got 0"),
        ({"timeout_ms": True}, "routes.bid-filter.timeout_ms: must be a number"),
        ({"timeout_ms": float("inf")}, "routes.bid-filter.timeout_ms: must be a finite number"),
        ({"mme_preferred": 0}, "routes.bid-filter.mme_preferred: must be >= 1, got 0"),
        ({"balancer": "p2c"}, "routes.bid-filter.balancer: unknown key"),
        ({"targets": []}, "routes.bid-filter.targets: at least one target is required"),
        ({"targets": "a"}, "routes.bid-filter.targets: must be a list"),
        ({"targets": [{"region": "x"}]}, "routes.bid-filter.targets[0].endpoint: required"),
        (
            {"targets": [{"endpoint": "a", "weight": 0}]},
            "routes.bid-filter.targets[0].weight: must be > 0, got 0",
        ),
        (
            {"targets": [{"endpoint": "a", "zone": "b"}]},
            "routes.bid-filter.targets[0].zone: unknown key",
        ),
        (
            {"targets": [{"endpoint": "a", "url": "vpce-1.example.com"}]},
            "routes.bid-filter.targets[0].url: must be an http(s):// URL",
        ),
        (
            {"targets": [{"endpoint": "a"}, {"endpoint": "a"}]},
            "routes.bid-filter.targets[1]: duplicate target 'a'",
        ),
    ],
)
def test_validation_errors_name_the_bad_key(table: dict[str, Any], message: str) -> None:
    mapping: dict[str, Any] = {"targets": [{"endpoint": "a"}], **table}
    with pytest.raises(ConfigError) as caught:
        parse_routes({"bid-filter": mapping})
    assert str(caught.value).startswith(f"config error at {message}")


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ValueError, match=r"^config error at routes: must be a table"):
        parse_routes([])  # type: ignore[arg-type]


def test_configs_are_frozen() -> None:
    config = HedgeConfig()
    with pytest.raises(AttributeError):
        config.enabled = True  # type: ignore[misc]


def test_direct_construction_rejects_values_that_would_break_routing() -> None:
    with pytest.raises(ConfigError, match=r"^config error at target\.weight: must be > 0"):
        Target("a", weight=0)
    with pytest.raises(ConfigError, match=r"^config error at hedge\.max_extra_load: must be > 0"):
        HedgeConfig(max_extra_load=0)
    with pytest.raises(ConfigError, match=r"^config error at routes\.r\.targets: at least one"):
        RouteConfig(name="r", targets=())
