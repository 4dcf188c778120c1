"""Route configuration: frozen dataclasses built from the parsed TOML ``routes`` table.

Every ``from_mapping`` validates eagerly and raises :class:`RouteConfigError`
whose message starts with the dotted path of the offending key, so a user
sees ``routes.bid-filter.hedge.max_extra_load: must be in (0, 1)`` rather
than a traceback from deep inside the balancer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Self
from urllib.parse import urlsplit

__all__ = [
    "EjectionConfig",
    "HealthCheckConfig",
    "HedgeConfig",
    "RetryConfig",
    "RouteConfig",
    "RouteConfigError",
    "Target",
    "parse_routes",
]


class RouteConfigError(ValueError):
    """A ``routes`` table entry is malformed; the message names the key."""


# --- small validators -------------------------------------------------------
# They take the full dotted path so every error message names the bad key.


def _check_mapping(path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RouteConfigError(f"{path}: must be a table, got {type(value).__name__}")
    return value


def _check_keys(path: str, mapping: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(str(key) for key in mapping if key not in allowed)
    if unknown:
        raise RouteConfigError(
            f"{path}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
        )


def _number(path: str, value: object) -> float:
    # bool is an int subclass; `timeout_ms = true` is a mistake, not 1 ms.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RouteConfigError(f"{path}: must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise RouteConfigError(f"{path}: must be finite")
    return number


def _integer(path: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RouteConfigError(f"{path}: must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise RouteConfigError(f"{path}: must be >= {minimum}")
    return value


def _at_least(path: str, value: object, minimum: float) -> float:
    number = _number(path, value)
    if number < minimum:
        raise RouteConfigError(f"{path}: must be >= {minimum:g}")
    return number


def _positive(path: str, value: object) -> float:
    number = _number(path, value)
    if number <= 0:
        raise RouteConfigError(f"{path}: must be > 0")
    return number


def _fraction(path: str, value: object, *, open_low: bool, open_high: bool) -> float:
    number = _number(path, value)
    too_low = number <= 0 if open_low else number < 0
    too_high = number >= 1 if open_high else number > 1
    if too_low or too_high:
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise RouteConfigError(f"{path}: must be in {interval}")
    return number


def _boolean(path: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise RouteConfigError(f"{path}: must be true or false, got {type(value).__name__}")
    return value


def _text(path: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise RouteConfigError(f"{path}: must be a non-empty string")
    return value


def _optional_text(path: str, value: object) -> str | None:
    return None if value is None else _text(path, value)


# --- targets ----------------------------------------------------------------


def _target_key(endpoint: str, region: str | None, url: str | None, variant: str | None) -> str:
    # Readable enough for a metrics label, unique enough for a route: the
    # URL's host (not the whole URL) or the region says *where*.
    key = endpoint if variant is None else f"{endpoint}/{variant}"
    where = urlsplit(url).netloc if url is not None else region
    return key if where is None else f"{key}@{where}"


@dataclass(frozen=True, slots=True)
class Target:
    """One place a request can go: a SageMaker endpoint, optionally pinned.

    ``key`` is stable across processes and restarts; it feeds the
    rendezvous hash for multi-model endpoints and labels metrics.
    """

    endpoint: str
    region: str | None = None
    url: str | None = None
    variant: str | None = None
    weight: float = 1.0
    key: str = field(init=False)

    _KEYS = frozenset({"endpoint", "region", "url", "variant", "weight"})

    def __post_init__(self) -> None:
        # from_mapping reports these with the key's path; this catches
        # direct construction, where a zero weight would divide by zero.
        if not self.endpoint:
            raise RouteConfigError("Target.endpoint: must be a non-empty string")
        if not self.weight > 0 or not math.isfinite(self.weight):
            raise RouteConfigError("Target.weight: must be > 0")
        object.__setattr__(
            self, "key", _target_key(self.endpoint, self.region, self.url, self.variant)
        )

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any] | str) -> Target:
        """Build from ``{ endpoint = ..., ... }`` or a bare endpoint name string."""
        if isinstance(mapping, str):
            return cls(endpoint=_text(f"{name}.endpoint", mapping))
        mapping = _check_mapping(name, mapping)
        _check_keys(name, mapping, cls._KEYS)
        if "endpoint" not in mapping:
            raise RouteConfigError(f"{name}.endpoint: required")
        url = _optional_text(f"{name}.url", mapping.get("url"))
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise RouteConfigError(f"{name}.url: must be an http(s):// URL with a host")
        return cls(
            endpoint=_text(f"{name}.endpoint", mapping["endpoint"]),
            region=_optional_text(f"{name}.region", mapping.get("region")),
            url=url,
            variant=_optional_text(f"{name}.variant", mapping.get("variant")),
            weight=_positive(f"{name}.weight", mapping.get("weight", 1.0)),
        )


# --- policies ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HedgeConfig:
    """Backup requests after a latency percentile (Finagle BackupRequestFilter).

    ``max_extra_load`` sizes the token budget that caps hedges when latency
    rises for everyone, and, unless ``quantile`` is set, picks the delay.

    The default delay is the ``1 - max_extra_load / 2`` quantile (p97.5 for a
    5% budget), not ``1 - max_extra_load`` as in Finagle: hedging at exactly
    the budget's percentile spends the whole budget on requests that are only
    a little slow, so when a real stall comes the bucket is empty and the
    stall is not hedged (measured with ``python -m bench.tail``). Aiming at
    half the budget leaves tokens for the outliers hedging exists for.
    """

    enabled: bool = False
    max_extra_load: float = 0.05
    min_delay_ms: float = 1.0
    window_s: float = 30.0
    refresh_s: float = 3.0
    quantile: float | None = None

    @property
    def delay_quantile(self) -> float:
        return self.quantile if self.quantile is not None else 1.0 - self.max_extra_load / 2

    def __post_init__(self) -> None:
        if not 0 < self.max_extra_load < 1:
            raise RouteConfigError("HedgeConfig.max_extra_load: must be in (0, 1)")
        if self.quantile is not None and not 0 < self.quantile < 1:
            raise RouteConfigError("HedgeConfig.quantile: must be in (0, 1)")
        if not 0 < self.refresh_s <= self.window_s:
            raise RouteConfigError("HedgeConfig.refresh_s: must be in (0, window_s]")

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        mapping = _check_mapping(name, mapping)
        _check_keys(name, mapping, _field_names(cls))
        d = cls()
        window_s = _positive(f"{name}.window_s", mapping.get("window_s", d.window_s))
        refresh_s = _positive(f"{name}.refresh_s", mapping.get("refresh_s", d.refresh_s))
        if refresh_s > window_s:
            raise RouteConfigError(f"{name}.refresh_s: must be <= window_s ({window_s:g})")
        return cls(
            enabled=_boolean(f"{name}.enabled", mapping.get("enabled", d.enabled)),
            max_extra_load=_fraction(
                f"{name}.max_extra_load",
                mapping.get("max_extra_load", d.max_extra_load),
                open_low=True,
                open_high=True,
            ),
            min_delay_ms=_at_least(
                f"{name}.min_delay_ms", mapping.get("min_delay_ms", d.min_delay_ms), 0.0
            ),
            window_s=window_s,
            refresh_s=refresh_s,
            quantile=(
                None
                if mapping.get("quantile") is None
                else _fraction(
                    f"{name}.quantile", mapping["quantile"], open_low=True, open_high=True
                )
            ),
        )


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Retry limits; ``max_attempts`` counts the first attempt (2 = one retry)."""

    max_attempts: int = 2
    budget_ratio: float = 0.1
    min_per_second: float = 5.0
    backoff_base_ms: float = 2.0
    backoff_max_ms: float = 50.0

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        mapping = _check_mapping(name, mapping)
        _check_keys(name, mapping, _field_names(cls))
        d = cls()
        base = _at_least(
            f"{name}.backoff_base_ms", mapping.get("backoff_base_ms", d.backoff_base_ms), 0.0
        )
        maximum = _at_least(
            f"{name}.backoff_max_ms", mapping.get("backoff_max_ms", max(base, d.backoff_max_ms)), 0
        )
        if maximum < base:
            raise RouteConfigError(f"{name}.backoff_max_ms: must be >= backoff_base_ms")
        return cls(
            max_attempts=_integer(
                f"{name}.max_attempts", mapping.get("max_attempts", d.max_attempts), minimum=1
            ),
            budget_ratio=_fraction(
                f"{name}.budget_ratio",
                mapping.get("budget_ratio", d.budget_ratio),
                open_low=False,
                open_high=False,
            ),
            min_per_second=_at_least(
                f"{name}.min_per_second", mapping.get("min_per_second", d.min_per_second), 0.0
            ),
            backoff_base_ms=base,
            backoff_max_ms=maximum,
        )


@dataclass(frozen=True, slots=True)
class EjectionConfig:
    """Outlier ejection (Envoy style): consecutive failures or a low success rate.

    ``max_ejected_share = 0`` turns ejection off; any other value still lets
    one target of a two-or-more target route be ejected, and never all.
    """

    consecutive_failures: int = 5
    success_rate_window_s: float = 10.0
    success_rate_min_requests: int = 20
    success_rate_threshold: float = 0.5
    base_ejection_s: float = 30.0
    max_ejection_s: float = 300.0
    max_ejected_share: float = 0.1
    jitter: float = 0.15

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        mapping = _check_mapping(name, mapping)
        _check_keys(name, mapping, _field_names(cls))
        d = cls()
        base = _positive(
            f"{name}.base_ejection_s", mapping.get("base_ejection_s", d.base_ejection_s)
        )
        maximum = _positive(
            f"{name}.max_ejection_s", mapping.get("max_ejection_s", max(base, d.max_ejection_s))
        )
        if maximum < base:
            raise RouteConfigError(f"{name}.max_ejection_s: must be >= base_ejection_s")
        return cls(
            consecutive_failures=_integer(
                f"{name}.consecutive_failures",
                mapping.get("consecutive_failures", d.consecutive_failures),
                minimum=1,
            ),
            success_rate_window_s=_positive(
                f"{name}.success_rate_window_s",
                mapping.get("success_rate_window_s", d.success_rate_window_s),
            ),
            success_rate_min_requests=_integer(
                f"{name}.success_rate_min_requests",
                mapping.get("success_rate_min_requests", d.success_rate_min_requests),
                minimum=1,
            ),
            success_rate_threshold=_fraction(
                f"{name}.success_rate_threshold",
                mapping.get("success_rate_threshold", d.success_rate_threshold),
                open_low=False,
                open_high=False,
            ),
            base_ejection_s=base,
            max_ejection_s=maximum,
            max_ejected_share=_fraction(
                f"{name}.max_ejected_share",
                mapping.get("max_ejected_share", d.max_ejected_share),
                open_low=False,
                open_high=False,
            ),
            jitter=_fraction(
                f"{name}.jitter", mapping.get("jitter", d.jitter), open_low=False, open_high=True
            ),
        )


@dataclass(frozen=True, slots=True)
class HealthCheckConfig:
    """Optional active check; gateway sends it, routing only says when it is due."""

    enabled: bool = False
    interval_s: float = 5.0
    body: bytes = b""
    content_type: str = "application/json"

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        mapping = _check_mapping(name, mapping)
        _check_keys(name, mapping, _field_names(cls))
        d = cls()
        body = mapping.get("body", d.body)
        if isinstance(body, str):
            body = body.encode()
        if not isinstance(body, bytes):
            raise RouteConfigError(f"{name}.body: must be a string")
        return cls(
            enabled=_boolean(f"{name}.enabled", mapping.get("enabled", d.enabled)),
            interval_s=_positive(f"{name}.interval_s", mapping.get("interval_s", d.interval_s)),
            body=body,
            content_type=_text(f"{name}.content_type", mapping.get("content_type", d.content_type)),
        )


def _field_names(cls: type) -> frozenset[str]:
    return frozenset(item.name for item in fields(cls))


# --- routes -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """A logical endpoint name and everything needed to serve it."""

    name: str
    targets: tuple[Target, ...]
    timeout_ms: float | None = None
    hedge: HedgeConfig = field(default_factory=HedgeConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)
    ejection: EjectionConfig = field(default_factory=EjectionConfig)
    health_check: HealthCheckConfig = field(default_factory=HealthCheckConfig)
    mme_preferred: int = 2
    # Prediction-cache defaults for calls on this route (a call's own
    # ``cache=``/``cache_ttl=`` still win); plain data, routing never caches.
    cache: bool = True
    cache_ttl_s: float | None = None

    _KEYS = frozenset(
        {
            "targets",
            "timeout_ms",
            "hedge",
            "retry",
            "ejection",
            "health_check",
            "mme_preferred",
            "cache",
            "cache_ttl_s",
        }
    )

    def __post_init__(self) -> None:
        path = f"routes.{self.name}"
        if not self.targets:
            raise RouteConfigError(f"{path}.targets: at least one target is required")
        seen: set[str] = set()
        for index, target in enumerate(self.targets):
            if target.key in seen:
                raise RouteConfigError(
                    f"{path}.targets[{index}]: duplicate target {target.key!r} "
                    "(give it a different region, url or variant)"
                )
            seen.add(target.key)
        if self.timeout_ms is not None and not self.timeout_ms > 0:
            raise RouteConfigError(f"{path}.timeout_ms: must be > 0")
        if self.mme_preferred < 1:
            raise RouteConfigError(f"{path}.mme_preferred: must be >= 1")
        if self.cache_ttl_s is not None and not self.cache_ttl_s > 0:
            raise RouteConfigError(f"{path}.cache_ttl_s: must be > 0")

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Any]) -> Self:
        """Build route ``name`` from its table; errors are prefixed ``routes.<name>``."""
        path = f"routes.{name}"
        mapping = _check_mapping(path, mapping)
        _check_keys(path, mapping, cls._KEYS)
        raw_targets = mapping.get("targets")
        if not isinstance(raw_targets, list | tuple) or not raw_targets:
            raise RouteConfigError(f"{path}.targets: must be a non-empty array of targets")
        targets = tuple(
            Target.from_mapping(f"{path}.targets[{index}]", raw)
            for index, raw in enumerate(raw_targets)
        )
        timeout = mapping.get("timeout_ms")
        cache_ttl = mapping.get("cache_ttl_s")
        return cls(
            name=name,
            targets=targets,
            timeout_ms=None if timeout is None else _positive(f"{path}.timeout_ms", timeout),
            hedge=HedgeConfig.from_mapping(f"{path}.hedge", mapping.get("hedge", {})),
            retry=RetryConfig.from_mapping(f"{path}.retry", mapping.get("retry", {})),
            ejection=EjectionConfig.from_mapping(f"{path}.ejection", mapping.get("ejection", {})),
            health_check=HealthCheckConfig.from_mapping(
                f"{path}.health_check", mapping.get("health_check", {})
            ),
            mme_preferred=_integer(
                f"{path}.mme_preferred", mapping.get("mme_preferred", 2), minimum=1
            ),
            cache=_boolean(f"{path}.cache", mapping.get("cache", True)),
            cache_ttl_s=None if cache_ttl is None else _positive(f"{path}.cache_ttl_s", cache_ttl),
        )


def parse_routes(mapping: Mapping[str, Any]) -> dict[str, RouteConfig]:
    """Parse the whole ``[routes]`` table (``tomllib`` output) into configs by name."""
    routes = _check_mapping("routes", mapping)
    parsed: dict[str, RouteConfig] = {}
    for name, table in routes.items():
        if not isinstance(name, str) or not name:
            raise RouteConfigError(f"routes.{name!r}: route names must be non-empty strings")
        parsed[name] = RouteConfig.from_mapping(name, table)
    return parsed
