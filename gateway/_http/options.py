"""The ``[pool]`` table; in the HTTP layer because the transports use it as is."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gateway._config.reader import fail, read, section, setting

__all__ = ["PoolConfig"]

_MS = 1000.0


@section("pool")
class PoolConfig:
    """The connection pool of each origin. The transports read the timeouts in
    seconds (``connect_timeout`` ...), worked out once here."""

    max_connections: int = setting(default=64, ge=1)  # per origin
    prewarm: int = setting(default=2, ge=0)  # connections opened per origin at start
    connect_timeout_ms: float = setting(default=1000.0, ge=0.001)
    # SageMaker lets a container take 60 s; AWS load balancers close idle connections at 60 s.
    read_timeout_ms: float = setting(default=60000.0, ge=0.001)
    pool_timeout_ms: float = setting(default=1000.0, ge=0.001)
    idle_timeout_s: float = setting(default=50.0, ge=0.001)
    # Linux's limits for TCP_KEEPIDLE / TCP_KEEPINTVL (seconds) and TCP_KEEPCNT.
    keepalive_idle_s: int = setting(default=30, ge=1, le=32767)
    keepalive_interval_s: int = setting(default=10, ge=1, le=32767)
    keepalive_count: int = setting(default=3, ge=1, le=127)
    tls_verify: bool = True
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    connect_timeout: float = field(init=False, repr=False)
    read_timeout: float = field(init=False, repr=False)
    pool_timeout: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.prewarm > self.max_connections:
            raise fail(self, "prewarm", "must not exceed max_connections")
        object.__setattr__(self, "connect_timeout", self.connect_timeout_ms / _MS)
        object.__setattr__(self, "read_timeout", self.read_timeout_ms / _MS)
        object.__setattr__(self, "pool_timeout", self.pool_timeout_ms / _MS)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> PoolConfig:
        return read(cls, mapping, "pool")
