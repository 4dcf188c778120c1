"""Cache configuration: the ``[cache]`` table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from gateway._config.reader import fail, read, section, setting
from gateway.errors import ConfigError

from ._redis_target import parse_host_port, redact_url, redis_target

__all__ = ["CacheConfig", "ConfigError"]

_MIB = 1024 * 1024
_URL_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://")


def _namespace(value: str) -> None:
    if len(value) > 64 or ":" in value or value.strip() != value:
        raise ValueError("must be 1-64 characters without ':' or surrounding spaces")


def _url_scheme(value: str) -> None:
    if not value.startswith(_URL_SCHEMES):
        raise ValueError(f"scheme must be one of {', '.join(_URL_SCHEMES)}")


@section("cache")
class CacheConfig:
    """Settings of the prediction cache; without ``redis_url`` or ``cluster``, in-process only."""

    enabled: bool = True
    namespace: str = setting(default="smgw", check=_namespace)
    redis_url: str | None = setting(default=None, check=_url_scheme)
    cluster: tuple[str, ...] = ()  # "host:port" seeds of a Redis Cluster
    ttl_s: float = setting(default=300.0, gt=0)
    stale_grace_s: float = setting(default=30.0, ge=0)
    near_max_entries: int = setting(default=100_000, ge=0)
    near_max_bytes: int = setting(default=64 * _MIB, ge=1)
    near_ttl_s: float | None = setting(default=None, ge=0)
    redis_socket_timeout_ms: float = setting(default=50.0, gt=0)
    redis_connect_timeout_ms: float = setting(default=100.0, gt=0)
    redis_max_connections: int = setting(default=32, ge=1)
    redis_prewarm: int = setting(default=4, ge=0)
    redis_max_pending_writes: int = setting(default=1024, ge=0)
    redis_slot_wait_ms: float = setting(default=2.0, ge=0)
    max_value_bytes: int = setting(default=1 * _MIB, ge=1)
    # How old a process's view of the version tags in Redis may get.
    version_ttl_s: float = setting(default=1.0, gt=0)
    circuit_failures: int = setting(default=5, ge=1)
    circuit_reset_s: float = setting(default=2.0, ge=0)

    def __post_init__(self) -> None:
        if self.redis_prewarm > self.redis_max_connections:
            raise fail(self, "redis_prewarm", "must be <= redis_max_connections")
        if self.redis_slot_wait_ms > self.redis_socket_timeout_ms:
            raise fail(self, "redis_slot_wait_ms", "must be <= redis_socket_timeout_ms")
        if self.redis_url is not None and self.cluster:
            raise fail(self, "cluster", "cannot be combined with redis_url")
        for seed in self.cluster:
            parse_host_port(self, seed, "cluster")
        # Decoding now turns a malformed sentinel URL into a config error at load time.
        redis_target(self)

    def __repr__(self) -> str:
        text = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "redis_url"
        )
        return f"CacheConfig(redis_url={redact_url(self.redis_url)!r}, {text})"

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> CacheConfig:
        """Build from a parsed TOML ``[cache]`` table; unknown keys are errors."""
        return read(cls, mapping, "cache")

    @property
    def effective_near_ttl_s(self) -> float:
        return self.ttl_s if self.near_ttl_s is None else self.near_ttl_s
