"""Cache configuration: the ``[cache]`` table, validated once at start-up."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import unquote

__all__ = ["CacheConfig", "CacheConfigError", "RedisTarget"]

_MIB = 1024 * 1024
_URL_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://")
_SENTINEL_SCHEME = "redis+sentinel://"
# userinfo in "scheme://user:secret@host" and "password=..." query parameters.
_URL_SECRET = re.compile(r"(?<=://)([^/@]*?):([^/@]*)@")
_QUERY_SECRET = re.compile(r"(?i)(password=)[^&]*")


class CacheConfigError(ValueError):
    """A ``[cache]`` setting is missing, unknown or out of range; the message names the key."""


def redact_url(url: str | None) -> str | None:
    """``url`` with any password replaced by ``***``, safe for logs and reprs."""
    if url is None:
        return None
    return _QUERY_SECRET.sub(r"\1***", _URL_SECRET.sub(r"\1:***@", url))


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where the Redis tier connects, decoded from ``redis_url`` / ``cluster``."""

    kind: str  # "url", "sentinel" or "cluster"
    url: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    cluster_nodes: tuple[tuple[str, int], ...] = ()

    def __repr__(self) -> str:
        return (
            f"RedisTarget(kind={self.kind!r}, url={redact_url(self.url)!r}, "
            f"sentinels={self.sentinels!r}, service_name={self.service_name!r}, "
            f"db={self.db}, cluster_nodes={self.cluster_nodes!r})"
        )


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Settings of the prediction cache.

    Times ending in ``_s`` are seconds, ``_ms`` milliseconds. With neither
    ``redis_url`` nor ``cluster`` set, the cache is in-process only.
    """

    enabled: bool = True
    namespace: str = "smgw"
    redis_url: str | None = None
    cluster: tuple[str, ...] = ()
    ttl_s: float = 300.0
    stale_grace_s: float = 30.0
    near_max_entries: int = 100_000
    near_max_bytes: int = 64 * _MIB
    near_ttl_s: float | None = None
    redis_socket_timeout_ms: float = 50.0
    redis_connect_timeout_ms: float = 100.0
    redis_max_connections: int = 32
    redis_prewarm: int = 4
    redis_max_pending_writes: int = 1024
    redis_slot_wait_ms: float = 2.0
    circuit_failures: int = 5
    circuit_reset_s: float = 2.0

    def __post_init__(self) -> None:
        _validate(self)

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "redis_url":
                value = redact_url(value)
            parts.append(f"{f.name}={value!r}")
        return f"CacheConfig({', '.join(parts)})"

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> CacheConfig:
        """Build from a parsed TOML ``[cache]`` table; unknown keys are errors."""
        known = {f.name for f in fields(cls)}
        for key in mapping:
            if key not in known:
                raise CacheConfigError(f"cache.{key}: unknown key")
        values = dict(mapping)
        if "cluster" in values:
            values["cluster"] = _as_seed_tuple(values["cluster"])
        return cls(**values)

    @property
    def effective_near_ttl_s(self) -> float:
        return self.ttl_s if self.near_ttl_s is None else self.near_ttl_s

    @property
    def redis_enabled(self) -> bool:
        return self.enabled and (self.redis_url is not None or bool(self.cluster))

    def redis_target(self) -> RedisTarget | None:
        """The decoded connection target, or None for a near-only cache."""
        if not self.redis_enabled:
            return None
        if self.cluster:
            nodes = tuple(_parse_host_port(seed, "cluster") for seed in self.cluster)
            return RedisTarget(kind="cluster", cluster_nodes=nodes)
        assert self.redis_url is not None
        if self.redis_url.startswith(_SENTINEL_SCHEME):
            return _parse_sentinel_url(self.redis_url)
        return RedisTarget(kind="url", url=self.redis_url)


def _fail(key: str, problem: str) -> CacheConfigError:
    return CacheConfigError(f"cache.{key}: {problem}")


def _as_seed_tuple(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise _fail("cluster", 'must be a list of "host:port" strings')
    return tuple(value)


def _check_type(key: str, value: Any, kind: type | tuple[type, ...]) -> None:
    # bool is an int subclass; "redis_prewarm = true" must not pass as 1.
    if isinstance(value, bool) and kind is not bool:
        raise _fail(key, f"must be {_type_name(kind)}, not a boolean")
    if not isinstance(value, kind):
        raise _fail(key, f"must be {_type_name(kind)}")


def _type_name(kind: type | tuple[type, ...]) -> str:
    if kind is bool:
        return "a boolean"
    if kind is int:
        return "an integer"
    if kind is str:
        return "a string"
    return "a number"


def _positive(config: CacheConfig, key: str, *, allow_zero: bool = False) -> None:
    value = getattr(config, key)
    _check_type(key, value, (int, float))
    if not math.isfinite(value):
        raise _fail(key, "must be a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise _fail(key, "must be >= 0" if allow_zero else "must be > 0")


def _positive_int(config: CacheConfig, key: str, *, allow_zero: bool = False) -> None:
    value = getattr(config, key)
    _check_type(key, value, int)
    if value < 0 or (value == 0 and not allow_zero):
        raise _fail(key, "must be >= 0" if allow_zero else "must be > 0")


def _validate(config: CacheConfig) -> None:
    _check_type("enabled", config.enabled, bool)
    _validate_namespace(config.namespace)
    for key in ("ttl_s", "redis_socket_timeout_ms", "redis_connect_timeout_ms"):
        _positive(config, key)
    for key in ("stale_grace_s", "redis_slot_wait_ms", "circuit_reset_s"):
        _positive(config, key, allow_zero=True)
    if config.near_ttl_s is not None:
        _positive(config, "near_ttl_s", allow_zero=True)
    for key in ("near_max_bytes", "redis_max_connections", "circuit_failures"):
        _positive_int(config, key)
    for key in ("near_max_entries", "redis_prewarm", "redis_max_pending_writes"):
        _positive_int(config, key, allow_zero=True)
    if config.redis_prewarm > config.redis_max_connections:
        raise _fail("redis_prewarm", "must be <= redis_max_connections")
    if config.redis_slot_wait_ms > config.redis_socket_timeout_ms:
        raise _fail("redis_slot_wait_ms", "must be <= redis_socket_timeout_ms")
    _validate_target(config)


def _validate_namespace(namespace: Any) -> None:
    _check_type("namespace", namespace, str)
    if not namespace or len(namespace) > 64 or ":" in namespace or namespace.strip() != namespace:
        raise _fail("namespace", "must be 1-64 characters without ':' or surrounding spaces")


def _validate_target(config: CacheConfig) -> None:
    if config.redis_url is not None:
        _check_type("redis_url", config.redis_url, str)
        if not config.redis_url.startswith(_URL_SCHEMES):
            raise _fail("redis_url", f"scheme must be one of {', '.join(_URL_SCHEMES)}")
        if config.cluster:
            raise _fail("cluster", "cannot be combined with redis_url")
    if not isinstance(config.cluster, tuple):
        raise _fail("cluster", 'must be a list of "host:port" strings')
    for seed in config.cluster:
        _parse_host_port(seed, "cluster")
    # Decoding now turns a malformed sentinel URL into a config error at load time.
    config.redis_target()


def _parse_host_port(text: Any, key: str) -> tuple[str, int]:
    if not isinstance(text, str):
        raise _fail(key, f'{text!r} is not a "host:port" string')
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")  # allow "[::1]:6379"
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _fail(key, f'{redact_url(text)!r} is not "host:port"')
    return host, int(port_text)


def _parse_sentinel_url(url: str) -> RedisTarget:
    """``redis+sentinel://[user:pass@]h1:26379,h2:26379/service_name[/db]``.

    The credentials are the master's; sentinels are reached without them.
    """
    rest = url[len(_SENTINEL_SCHEME) :]
    userinfo, at, rest = rest.rpartition("@")
    if not at:
        userinfo = ""
    hosts_text, _, path = rest.partition("/")
    path_parts = [part for part in path.split("/") if part]
    if not hosts_text or not path_parts or len(path_parts) > 2:
        raise _fail("redis_url", "sentinel form is redis+sentinel://host:port,.../service[/db]")
    sentinels = tuple(_parse_host_port(h, "redis_url") for h in hosts_text.split(","))
    db_text = path_parts[1] if len(path_parts) == 2 else "0"
    if not db_text.isdigit():
        raise _fail("redis_url", "sentinel db must be an integer")
    username, _, password = userinfo.partition(":")
    return RedisTarget(
        kind="sentinel",
        url=url,
        sentinels=sentinels,
        service_name=unquote(path_parts[0]),
        db=int(db_text),
        username=unquote(username) or None,
        password=unquote(password) or None,
    )
