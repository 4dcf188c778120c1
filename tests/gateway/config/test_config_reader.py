"""The one config reader: every section's errors name the full key, in one format, one class."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gateway import GatewayConfig, PoolConfig, cache, routing
from gateway.emulator import EmulatorConfig
from gateway.errors import ConfigError, GatewayError
from gateway.routing import HedgeConfig, RouteConfig, parse_routes
from gateway.rtb import FilterPolicy
from gateway.sidecar import RtbConfig, SidecarConfig
from tests._source import parse_file

ROOT = Path(__file__).resolve().parents[3]
RTB = {"bidders": ["http://bidder:8080"]}


def _gateway(table: dict[str, Any]) -> object:
    return GatewayConfig.from_mapping(table)


def _routes(table: dict[str, Any]) -> object:
    return parse_routes({"bid": {"targets": ["a"], **table}})


def _emulator(table: dict[str, Any]) -> object:
    return EmulatorConfig.from_dict({"endpoints": {"e": table}})


@pytest.mark.parametrize(
    ("build", "table", "message"),
    [
        (_gateway, {"region": 5}, "region: must be a non-empty string, got 5"),
        (_gateway, {"transport": "h2"}, "transport: must be one of native, httpx, got 'h2'"),
        (_gateway, {"profile": None}, "profile: has no value (None)"),
        (_gateway, {"pool": {"prewarm": -1}}, "pool.prewarm: must be >= 0, got -1"),
        (
            _gateway,
            {"pool": {"keepalive_count": 500}},
            "pool.keepalive_count: must be between 1 and 127, got 500",
        ),
        (
            _gateway,
            {"credentials": {"access_key_id": "a"}},
            "credentials.secret_access_key: required",
        ),
        (
            _routes,
            {"hedge": {"max_extra_load": 2}},
            "routes.bid.hedge.max_extra_load: must be > 0 and < 1, got 2.0",
        ),
        (
            _routes,
            {"retry": {"max_attempts": 1.5}},
            "routes.bid.retry.max_attempts: must be an integer, got 1.5",
        ),
        (
            _routes,
            {"ejection": {"jitter": -1}},
            "routes.bid.ejection.jitter: must be >= 0 and < 1, got -1.0",
        ),
        (
            _routes,
            {"health_check": {"interval_s": "5"}},
            "routes.bid.health_check.interval_s: must be a number, got '5'",
        ),
        (
            _routes,
            {"targets": [{"endpoint": "a", "weight": float("nan")}]},
            "routes.bid.targets[0].weight: must be a finite number, got nan",
        ),
        (
            lambda t: cache.CacheConfig.from_mapping(t),
            {"redis_prewarm": True},
            "cache.redis_prewarm: must be an integer, got True",
        ),
        (
            lambda t: cache.CacheConfig.from_mapping(t),
            {"cluster": ["h"]},
            "cache.cluster: 'h' is not \"host:port\"",
        ),
        (
            lambda t: SidecarConfig.from_mapping(t),
            {"listen": "x"},
            "sidecar.listen: expected HOST:PORT, got 'x'",
        ),
        (
            lambda t: SidecarConfig.from_mapping(t),
            {"auth": {"max_skew_s": 0}},
            "sidecar.auth.max_skew_s: must be >= 1, got 0.0",
        ),
        (
            lambda t: RtbConfig.from_mapping({**RTB, **t}),
            {"explore_share": 2},
            "rtb.explore_share: must be between 0 and 1, got 2.0",
        ),
        (
            lambda t: RtbConfig.from_mapping({**RTB, **t}),
            {"segment_thresholds": {"format": {"video": 3}}},
            "rtb.segment_thresholds.format.video: must be between 0 and 1, got 3.0",
        ),
        (
            lambda t: RtbConfig.from_mapping({**RTB, **t}),
            {"max_batch": 0},
            "rtb.max_batch: must be >= 1, got 0",
        ),
        (
            lambda t: RtbConfig.from_mapping(t),
            {"bidders": ["ftp://b"]},
            "rtb.bidders: must be an http(s):// URL with a host, got 'ftp://b'",
        ),
        (
            _emulator,
            {"model": {"type": "gpu"}},
            "endpoints.e.model.type: must be one of echo, constant, xgboost, container, got 'gpu'",
        ),
        (
            _emulator,
            {"model": {"type": "container"}},
            "endpoints.e.model.url: required for a container model",
        ),
        (
            _emulator,
            {"variants": [{"name": "a"}, {"name": "a"}]},
            "endpoints.e.variants[1].name: duplicate variant 'a'",
        ),
        (
            _emulator,
            {"faults": {"error_rates": {"Nope": 0.1}}},
            "endpoints.e.faults.error_rates.Nope: unknown error; one of",
        ),
        (
            _emulator,
            {"latency": {"tail_share": 1.5}},
            "endpoints.e.latency.tail_share: must be between 0 and 1, got 1.5",
        ),
        (
            lambda t: EmulatorConfig.from_dict(t),
            {"auth": {"credentials": {"AK": ""}}},
            "auth.credentials.AK: must be a non-empty string (the value is a secret: not shown)",
        ),
    ],
)
def test_every_section_names_the_full_key(build: Any, table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(table)
    assert str(caught.value).startswith(f"config error at {message}")
    assert caught.value.key == message.split(":")[0]


def test_one_error_class_for_every_package() -> None:
    assert routing.ConfigError is cache.ConfigError is ConfigError
    assert issubclass(ConfigError, GatewayError) and issubclass(ConfigError, ValueError)


def test_unknown_keys_list_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        RouteConfig.from_mapping("r", {"targets": ["a"], "hedge": {"delay": 1}})
    text = str(caught.value)
    assert text.startswith("config error at routes.r.hedge.delay: unknown key (allowed: enabled,")
    assert "max_extra_load" in text and "quantile" in text


def test_direct_construction_names_the_section() -> None:
    with pytest.raises(ConfigError, match=r"^config error at pool\.read_timeout_ms: must be >= "):
        PoolConfig(read_timeout_ms=0)
    with pytest.raises(ConfigError, match=r"^config error at routes\.r\.timeout_ms: must be > 0"):
        RouteConfig(name="r", targets=(routing.Target("a"),), timeout_ms=-1)
    with pytest.raises(ConfigError, match=r"^config error at rtb\.seed: must be >= 0, got -1"):
        FilterPolicy(seed=-1)


def test_values_are_normalised_to_the_declared_types() -> None:
    route = RouteConfig.from_mapping("r", {"targets": ["a"], "hedge": {"min_delay_ms": 3}})
    assert route.hedge == HedgeConfig(min_delay_ms=3.0) and type(route.hedge.min_delay_ms) is float
    assert isinstance(route.targets, tuple) and route.targets[0].endpoint == "a"
    pool = PoolConfig.from_mapping({"connect_timeout_ms": 250})
    assert pool.connect_timeout == 0.25 and pool.read_timeout == 60.0  # seconds, for the transports


def test_rtb_policy_is_the_filters_own_class() -> None:
    config = RtbConfig.from_mapping({**RTB, "threshold": 0.2, "shadow": True, "max_batch": 4})
    assert config.policy == FilterPolicy(threshold=0.2, shadow=True)
    assert config.max_batch == 4


def test_the_reader_imports_nothing_of_gateway_but_its_errors() -> None:
    path = ROOT / "gateway" / "_config" / "reader.py"
    tree = parse_file(path)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name.split(".")[0] == "gateway"} == {"gateway.errors"}


@pytest.mark.parametrize(
    "section",
    [
        RouteConfig.from_mapping(
            "bid",
            {
                "targets": ["a", {"endpoint": "b", "region": "eu-west-1", "weight": 3}],
                "hedge": {"enabled": True, "quantile": 0.9},
                "retry": {"backoff_base_ms": 80},  # the ceiling follows it
                "health_check": {"enabled": True, "body": "{}"},
            },
        ),
        RtbConfig.from_mapping({**RTB, "threshold": 0.2, "shadow": True, "max_batch": 4}),
        cache.CacheConfig.from_mapping({"redis_url": "redis://r:6379/1", "near_ttl_s": 5}),
    ],
    ids=["route", "rtb", "cache"],
)
def test_to_table_is_read_back_into_the_same_section(section: Any) -> None:
    from gateway._config.reader import read, to_table

    table = to_table(section, keyed=True)
    assert None not in table.values() and "name" not in table
    fixed = {"name": section.name} if isinstance(section, RouteConfig) else {}
    assert read(type(section), table, "x", **fixed) == section
