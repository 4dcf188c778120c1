from __future__ import annotations

import pytest

from gateway.cache import CacheConfig, ConfigError
from gateway.cache._redis_target import redis_target


def test_defaults() -> None:
    config = CacheConfig()
    assert config.ttl_s == 300
    assert config.stale_grace_s == 30
    assert config.near_max_entries == 100_000
    assert config.near_max_bytes == 64 * 1024 * 1024
    assert config.effective_near_ttl_s == 300
    assert config.namespace == "smgw"
    assert config.enabled
    assert config.circuit_failures == 5
    assert config.circuit_reset_s == 2.0
    assert redis_target(config) is None


def test_from_mapping_reads_a_toml_table() -> None:
    config = CacheConfig.from_mapping(
        {"redis_url": "redis://127.0.0.1:6379/2", "ttl_s": 60, "near_ttl_s": 5, "redis_prewarm": 2}
    )
    assert config.ttl_s == 60
    assert config.effective_near_ttl_s == 5
    target = redis_target(config)
    assert target is not None
    assert target.kind == "url"


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"ttl_s": 0}, "cache.ttl_s: must be > 0, got 0"),
        ({"ttl_s": -1.5}, "cache.ttl_s: must be > 0, got -1.5"),
        ({"ttl_s": "300"}, "cache.ttl_s: must be a number"),
        ({"stale_grace_s": -1}, "cache.stale_grace_s: must be >= 0, got -1"),
        ({"near_max_entries": 1.5}, "cache.near_max_entries: must be an integer"),
        ({"redis_prewarm": True}, "cache.redis_prewarm: must be an integer, got True"),
        ({"enabled": "yes"}, "cache.enabled: must be true or false"),
        ({"ttl": 5}, "cache.ttl: unknown key"),
        ({"redis_url": "http://x"}, "cache.redis_url: scheme must be"),
        ({"cluster": "a:1"}, "cache.cluster: must be a list"),
        ({"cluster": [1]}, "cache.cluster[0]: must be a non-empty string"),
        ({"cluster": ["nohost"]}, "cache.cluster: 'nohost' is not"),
        ({"cluster": ["a:1"], "redis_url": "redis://x"}, "cache.cluster: cannot be combined"),
        ({"namespace": "a:b"}, "cache.namespace: must be 1-64 characters"),
        (
            {"redis_prewarm": 10, "redis_max_connections": 4},
            "cache.redis_prewarm: must be <= redis_max_connections",
        ),
        ({"redis_url": "redis+sentinel://h:1"}, "cache.redis_url: sentinel form"),
    ],
)
def test_bad_values_name_the_key(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CacheConfig.from_mapping(mapping)
    assert str(caught.value).startswith(f"config error at {message}")
    assert isinstance(caught.value, ValueError)


def test_secrets_are_redacted_in_repr() -> None:
    config = CacheConfig.from_mapping({"redis_url": "rediss://user:s3cret@cache.internal:6380/0"})
    assert "s3cret" not in repr(config)
    assert "user:***@cache.internal" in repr(config)
    query = CacheConfig.from_mapping({"redis_url": "unix:///tmp/r.sock?db=1&password=s3cret"})
    assert "s3cret" not in repr(query)


def test_sentinel_url_is_decoded() -> None:
    config = CacheConfig.from_mapping(
        {"redis_url": "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/cache-main/3"}
    )
    target = redis_target(config)
    assert target is not None
    assert target.kind == "sentinel"
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert target.service_name == "cache-main"
    assert target.db == 3
    assert target.password == "pw"
    assert "pw" not in repr(target) and "pw" not in repr(config)


def test_cluster_seeds() -> None:
    config = CacheConfig.from_mapping({"cluster": ["10.0.0.1:7000", "[::1]:7001"]})
    target = redis_target(config)
    assert target is not None
    assert target.cluster_nodes == (("10.0.0.1", 7000), ("::1", 7001))


def test_disabled_cache_has_no_redis() -> None:
    config = CacheConfig.from_mapping({"enabled": False, "redis_url": "redis://x:1"})
    assert redis_target(config) is None
