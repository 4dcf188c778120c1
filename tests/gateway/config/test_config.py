"""GatewayConfig / PoolConfig: every key validated, errors name the key, no secrets in repr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway, GatewayConfig, PoolConfig
from gateway.errors import ConfigError


def test_full_config_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        """
region = "eu-west-1"
endpoint_url = "http://127.0.0.1:8080"
profile = "prod"
transport = "httpx"
use_fips_endpoint = true
use_dualstack_endpoint = false
default_timeout_ms = 25.5

[credentials]
access_key_id = "AKIDTOML"
secret_access_key = "toml-secret"
session_token = "toml-token"

[pool]
max_connections = 8
prewarm = 4
connect_timeout_ms = 100
read_timeout_ms = 200
pool_timeout_ms = 5
idle_timeout_s = 30
keepalive_idle_s = 10
keepalive_interval_s = 2
keepalive_count = 5
tls_verify = false

[cache]
anything = "validated by the cache"
"""
    )
    config = GatewayConfig.from_toml(path)
    assert config.region == "eu-west-1" and config.transport == "httpx"
    assert config.use_fips_endpoint and config.default_timeout_ms == 25.5
    assert config.credentials is not None and config.credentials.token == "toml-token"
    options = config.pool
    assert (options.max_connections, options.prewarm) == (8, 4)
    assert (options.connect_timeout, options.read_timeout, options.pool_timeout) == (
        0.1,
        0.2,
        0.005,
    )
    assert (options.keepalive_idle_s, options.keepalive_interval_s, options.keepalive_count) == (
        10,
        2,
        5,
    )
    assert options.tls_verify is False
    assert config.sections["cache"] == {"anything": "validated by the cache"}
    text = repr(config)
    assert "toml-secret" not in text and "toml-token" not in text and "AKIDTOML" in text


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"nope": 1}, "nope"),
        ({"region": ""}, "region"),
        ({"region": 5}, "region"),
        ({"region": "us east 1"}, "region"),
        ({"endpoint_url": "ftp://x"}, "endpoint_url"),
        ({"endpoint_url": "http://h:99999"}, "endpoint_url"),
        ({"profile": None}, "profile"),
        ({"transport": "aiohttp"}, "transport"),
        ({"use_fips_endpoint": "yes"}, "use_fips_endpoint"),
        ({"use_dualstack_endpoint": 1}, "use_dualstack_endpoint"),
        ({"default_timeout_ms": 0}, "default_timeout_ms"),
        ({"default_timeout_ms": float("nan")}, "default_timeout_ms"),
        ({"default_timeout_ms": "10"}, "default_timeout_ms"),
        ({"credentials": "AKID:secret"}, "credentials"),
        ({"credentials": {"access_key_id": "a"}}, "credentials.secret_access_key"),
        ({"credentials": {"secret_access_key": "s"}}, "credentials.access_key_id"),
        (
            {"credentials": {"access_key_id": "a", "secret_access_key": "s", "token": "t"}},
            "credentials.token",
        ),
        (
            {"credentials": {"access_key_id": "a", "secret_access_key": "s", "session_token": 1}},
            "credentials.session_token",
        ),
        (
            {"credentials": {"access_key_id": "", "secret_access_key": "s"}},
            "credentials.access_key_id",
        ),
        ({"pool": []}, "pool"),
        ({"pool": {"max_conns": 1}}, "pool.max_conns"),
        ({"pool": {"max_connections": 0}}, "pool.max_connections"),
        ({"pool": {"max_connections": 2.0}}, "pool.max_connections"),
        ({"pool": {"max_connections": True}}, "pool.max_connections"),
        ({"pool": {"prewarm": -1}}, "pool.prewarm"),
        ({"pool": {"prewarm": 9, "max_connections": 8}}, "pool.prewarm"),
        ({"pool": {"connect_timeout_ms": 0}}, "pool.connect_timeout_ms"),
        ({"pool": {"connect_timeout_ms": float("nan")}}, "pool.connect_timeout_ms"),
        ({"pool": {"read_timeout_ms": float("inf")}}, "pool.read_timeout_ms"),
        ({"pool": {"pool_timeout_ms": "1"}}, "pool.pool_timeout_ms"),
        ({"pool": {"idle_timeout_s": -5}}, "pool.idle_timeout_s"),
        ({"pool": {"keepalive_idle_s": 0}}, "pool.keepalive_idle_s"),
        ({"pool": {"keepalive_idle_s": 40000}}, "pool.keepalive_idle_s"),
        ({"pool": {"keepalive_interval_s": 0}}, "pool.keepalive_interval_s"),
        ({"pool": {"keepalive_count": 0}}, "pool.keepalive_count"),
        ({"pool": {"keepalive_count": 500}}, "pool.keepalive_count"),
        ({"pool": {"tls_verify": "false"}}, "pool.tls_verify"),
        ({"cache": 3}, "cache"),
        ({"routes": "x"}, "routes"),
    ],
)
def test_every_key_validated(mapping: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        GatewayConfig.from_mapping(mapping)
    assert str(caught.value).startswith(f"config error at {key}:")


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("region = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        GatewayConfig.from_toml(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        GatewayConfig.from_toml(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("arguments", "key"),
    [
        ({"transport": "htpx"}, "transport"),
        ({"region": "us-east-1/../x"}, "region"),
        ({"pool": PoolConfig(max_connections=1, prewarm=0, keepalive_idle_s=1)}, None),
        ({"pool": {"prewarm": -1}}, "pool.prewarm"),
        ({"timeout": float("nan")}, "default_timeout_ms"),
    ],
)
def test_the_constructor_validates_too(arguments: dict[str, Any], key: str | None) -> None:
    arguments = {"region": "us-east-1", **arguments}
    if key is None:
        Gateway(endpoint_url="http://127.0.0.1:1", credentials=("a", "b"), **arguments)
        return
    with pytest.raises(ConfigError) as caught:
        Gateway(endpoint_url="http://127.0.0.1:1", credentials=("a", "b"), **arguments)
    assert str(caught.value).startswith(f"config error at {key}:")


def test_pool_config_built_directly_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"^config error at pool\.max_connections: must be >= 1"):
        PoolConfig(max_connections=0)
    with pytest.raises(ConfigError, match=r"^config error at pool\.prewarm: must not exceed"):
        PoolConfig(max_connections=2, prewarm=3)


def test_secrets_not_in_repr() -> None:
    config = GatewayConfig.from_mapping(
        {
            "region": "us-east-1",
            "credentials": {
                "access_key_id": "AKIDREPR",
                "secret_access_key": "repr-secret-value",
                "session_token": "repr-token-value",
            },
            "cache": {"redis_url": "redis://:hunter2@host"},
        }
    )
    for text in (repr(config), str(config), repr(config.credentials)):
        assert "repr-secret-value" not in text
        assert "repr-token-value" not in text
        assert "hunter2" not in text
