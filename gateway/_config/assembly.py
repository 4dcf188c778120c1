"""Config assembly: what ``Gateway(...)``'s keywords and config sections become at start.

Runs once per Gateway, never per call: the keywords into a ``GatewayConfig``,
the ``[routes]`` and ``[defaults]`` sections into route configs, the
``[cache]`` section into a prediction cache, and the transport with its TLS
trust (``gateway._host.ca_bundle``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from gateway import errors
from gateway._aws.sigv4 import Credentials
from gateway._config.options import GatewayConfig, PoolConfig
from gateway._config.reader import read
from gateway._host.ca_bundle import botocore_ca_bundle, ssl_context
from gateway._http.httpx_transport import HttpxTransport
from gateway._http.interfaces import Transport
from gateway._http.native import NativeTransport
from gateway.cache import CacheConfig, PredictionCache
from gateway.routing import RouteConfig, parse_routes

__all__ = [
    "config_from_keywords",
    "defaults_template",
    "make_cache",
    "make_transport",
    "route_configs",
]


def config_from_keywords(
    *,
    region: str | None,
    endpoint_url: str | None,
    credentials: Credentials | tuple[str, str] | tuple[str, str, str] | None,
    profile: str | None,
    transport: str,
    pool: PoolConfig | Mapping[str, Any] | None,
    timeout: float | None,
    routes: Mapping[str, Any] | None,
    cache: CacheConfig | Mapping[str, Any] | None,
    use_fips_endpoint: bool | None,
    use_dualstack_endpoint: bool | None,
    ignore_configured_endpoint_urls: bool | None,
    ca_bundle: str | None,
    user_agent_extra: str | None,
    user_agent_appid: str | None,
    defaults: Mapping[str, Any] | None,
) -> GatewayConfig:
    """The ``GatewayConfig`` that ``Gateway(...)``'s keywords describe."""
    sections: dict[str, Mapping[str, Any]] = {}
    if routes is not None:
        sections["routes"] = routes
    if defaults is not None:
        sections["defaults"] = defaults
    if isinstance(cache, Mapping):
        sections["cache"] = cache
    return GatewayConfig(
        region=region,
        endpoint_url=endpoint_url,
        credentials=_as_credentials(credentials),
        profile=profile,
        # A str is checked against the choices by GatewayConfig.
        transport=cast(Any, transport),
        use_fips_endpoint=use_fips_endpoint,
        use_dualstack_endpoint=use_dualstack_endpoint,
        ignore_configured_endpoint_urls=ignore_configured_endpoint_urls,
        ca_bundle=ca_bundle,
        user_agent_extra=user_agent_extra,
        user_agent_appid=user_agent_appid,
        pool=_as_pool(pool),
        default_timeout_ms=timeout * 1000 if timeout is not None else None,
        sections=sections,
    )


def make_transport(config: GatewayConfig) -> Transport:
    """The configured transport, trusting the CA bundle botocore would."""
    pool = config.pool
    if pool.tls_verify and pool.ssl_context is None:
        ca_bundle = config.ca_bundle or botocore_ca_bundle(config.profile)
        if ca_bundle:
            pool = dataclasses.replace(pool, ssl_context=ssl_context(ca_bundle))
    if config.transport == "httpx":
        return HttpxTransport(pool)
    return NativeTransport(pool)


def route_configs(config: GatewayConfig) -> list[RouteConfig]:
    routes = config.sections.get("routes")
    if not routes:
        return []
    return list(parse_routes(routes).values())


def defaults_template(config: GatewayConfig) -> RouteConfig | None:
    """The ``[defaults]`` route template for bare endpoint names (its own targets unused)."""
    section = config.sections.get("defaults")
    if section is None:
        return None
    if "targets" in section:
        raise errors.ConfigError.at("defaults.targets", "a template has no targets")
    # Router replaces the placeholder target with the endpoint called.
    template = {**section, "targets": ["template"]}
    return read(RouteConfig, template, "defaults", name="defaults")


def make_cache(explicit: CacheConfig | None, config: GatewayConfig) -> PredictionCache | None:
    if explicit is None:
        section = config.sections.get("cache")
        if section is None:
            return None
        explicit = CacheConfig.from_mapping(section)
    return PredictionCache(explicit) if explicit.enabled else None


def _as_credentials(
    value: Credentials | tuple[str, str] | tuple[str, str, str] | None,
) -> Credentials | None:
    if value is None or isinstance(value, Credentials):
        return value
    return Credentials(*value)


def _as_pool(value: PoolConfig | Mapping[str, Any] | None) -> PoolConfig:
    if value is None:
        return PoolConfig()
    if isinstance(value, PoolConfig):
        return value
    return PoolConfig.from_mapping(value)
