"""The ``[routes.<name>]`` tables: each class is both the TOML schema and the runtime type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Self
from urllib.parse import urlsplit

from gateway._config.reader import fail, http_url, read, section, setting
from gateway.errors import ConfigError

# Default ceilings; left at the default, each follows a larger base.
_BACKOFF_MAX_MS = 50.0
_MAX_EJECTION_S = 300.0
# Priority levels a route may use (0 first); more would only be a typo.
_MAX_PRIORITY = 9


@section("target")
class Target:
    """One place a request can go: a SageMaker endpoint, optionally pinned, or an
    inference router's routing target (``inference_router`` + ``routing_target``),
    which then picks the endpoint itself.

    ``priority`` orders targets as Envoy's priority levels do: priority 0
    takes all traffic while enough of it is up, the next priority takes what
    spills over (a fallback), and so on.

    ``key`` is stable across processes and restarts; it feeds the
    rendezvous hash for multi-model endpoints and labels metrics.
    """

    endpoint: str | None = None  # None: an inference router target
    region: str | None = None
    url: str | None = setting(default=None, check=http_url)
    variant: str | None = None
    weight: float = setting(default=1.0, gt=0)
    priority: int = setting(default=0, ge=0, le=_MAX_PRIORITY)
    inference_router: str | None = None
    routing_target: str | None = None
    key: str = field(init=False)

    def __post_init__(self) -> None:
        if self.inference_router is None:
            if not self.endpoint:
                raise fail(self, "endpoint", "required (or inference_router + routing_target)")
            if self.routing_target is not None:
                raise fail(self, "routing_target", "only with inference_router")
            key = self.endpoint if self.variant is None else f"{self.endpoint}/{self.variant}"
        else:
            if self.endpoint is not None:
                raise fail(self, "endpoint", "a target is an endpoint or an inference router")
            if not self.routing_target:
                raise fail(self, "routing_target", "required with inference_router")
            if self.variant is not None:
                raise fail(self, "variant", "the inference router picks the destination")
            key = f"router/{self.inference_router}/{self.routing_target}"
        self._set_key(key)

    def _set_key(self, key: str) -> None:
        # Readable enough for a metrics label, unique enough for a route: the
        # URL's host (not the whole URL) or the region says *where*.
        where = urlsplit(self.url).netloc if self.url is not None else self.region
        object.__setattr__(self, "key", key if where is None else f"{key}@{where}")


@section("hedge")
class HedgeConfig:
    """Backup requests where the latency tail starts; ``routing.HedgeDelay`` says how.

    ``max_extra_load`` sizes the token budget that caps hedges when latency
    rises for everyone, and how many answers the delay estimate waits for.
    """

    enabled: bool = False
    max_extra_load: float = setting(default=0.05, gt=0, lt=1)
    min_delay_ms: float = setting(default=1.0, ge=0)
    window_s: float = setting(default=30.0, gt=0)
    refresh_s: float = setting(default=3.0, gt=0)
    quantile: float | None = setting(default=None, gt=0, lt=1)
    initial_delay_ms: float = setting(default=10.0, ge=0)
    win_share: float = setting(default=0.5, gt=0, lt=1)

    def __post_init__(self) -> None:
        if self.refresh_s > self.window_s:
            raise fail(self, "refresh_s", f"must be <= window_s ({self.window_s:g})")


@section("retry")
class RetryConfig:
    """Retry limits; ``max_attempts`` counts the first attempt (2 = one retry)."""

    max_attempts: int = setting(default=2, ge=1)
    budget_ratio: float = setting(default=0.1, ge=0, le=1)
    min_per_second: float = setting(default=5.0, ge=0)
    backoff_base_ms: float = setting(default=2.0, ge=0)
    backoff_max_ms: float = setting(default=_BACKOFF_MAX_MS, ge=0)
    # A throttled answer's Retry-After cools its target down this long at most (0: ignore it).
    max_retry_after_s: float = setting(default=10.0, ge=0)

    def __post_init__(self) -> None:
        if self.backoff_max_ms < self.backoff_base_ms:
            if self.backoff_max_ms != _BACKOFF_MAX_MS:
                raise fail(self, "backoff_max_ms", "must be >= backoff_base_ms")
            object.__setattr__(self, "backoff_max_ms", self.backoff_base_ms)


@section("ejection")
class EjectionConfig:
    """Outlier ejection (Envoy style): consecutive failures or a low success rate."""

    consecutive_failures: int = setting(default=5, ge=1)
    success_rate_window_s: float = setting(default=10.0, gt=0)
    success_rate_min_requests: int = setting(default=20, ge=1)
    success_rate_threshold: float = setting(default=0.5, ge=0, le=1)
    base_ejection_s: float = setting(default=30.0, gt=0)
    max_ejection_s: float = setting(default=_MAX_EJECTION_S, gt=0)
    # 0 turns ejection off; any other value still lets one target of two or more go, never all.
    max_ejected_share: float = setting(default=0.1, ge=0, le=1)
    jitter: float = setting(default=0.15, ge=0, lt=1)

    def __post_init__(self) -> None:
        if self.max_ejection_s < self.base_ejection_s:
            if self.max_ejection_s != _MAX_EJECTION_S:
                raise fail(self, "max_ejection_s", "must be >= base_ejection_s")
            object.__setattr__(self, "max_ejection_s", self.base_ejection_s)


@section("health_check")
class HealthCheckConfig:
    """Optional active check; gateway sends it, routing only says when it is due."""

    enabled: bool = False
    interval_s: float = setting(default=5.0, gt=0)
    body: bytes = b""
    content_type: str = "application/json"


def _bare_targets(value: Any, key: str) -> Any:
    # `targets = ["a", "b"]`: a bare string is an endpoint name.
    if isinstance(value, list | tuple):
        return [{"endpoint": item} if isinstance(item, str) else item for item in value]
    return value


@section(lambda route: f"routes.{route.name}")
class RouteConfig:
    """A logical endpoint name and everything needed to serve it."""

    name: str
    targets: tuple[Target, ...] = setting(before=_bare_targets)
    timeout_ms: float | None = setting(default=None, gt=0)
    hedge: HedgeConfig = field(default_factory=HedgeConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    ejection: EjectionConfig = field(default_factory=EjectionConfig)
    health_check: HealthCheckConfig = field(default_factory=HealthCheckConfig)
    mme_preferred: int = setting(default=2, ge=1)
    # Envoy's overprovisioning factor: a priority level counts as fully up while
    # its up share times this is at least 1 (1.4: 72% up keeps all its traffic).
    overprovisioning_factor: float = setting(default=1.4, ge=1)
    # Prediction-cache defaults for calls on this route (a call's own
    # ``cache=``/``cache_ttl=`` still win); plain data, routing never caches.
    cache: bool = True
    cache_ttl_s: float | None = setting(default=None, gt=0)

    def __post_init__(self) -> None:
        if not self.targets:
            raise fail(self, "targets", "at least one target is required")
        keys = [target.key for target in self.targets]
        for index, key in enumerate(keys):
            if key in keys[:index]:
                problem = f"duplicate target {key!r} (give it a different region, url or variant)"
                raise fail(self, f"targets[{index}]", problem)

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        return read(cls, mapping, f"routes.{name}", name=name)


def parse_routes(mapping: Mapping[str, Any]) -> dict[str, RouteConfig]:
    """Parse the whole ``[routes]`` table (``tomllib`` output) into configs by name."""
    if not isinstance(mapping, Mapping):
        raise ConfigError.at("routes", f"must be a table, got {mapping!r}")
    return {
        str(name): RouteConfig.from_mapping(str(name), table) for name, table in mapping.items()
    }
