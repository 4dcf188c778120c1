"""A Gateway's Prometheus metrics: its call counters, labelled by its configured routes,
and the families ``Gateway.prometheus_collector`` adds to them.

Read at scrape time: target health per configured route, and the cache's
Redis errors and circuit state.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from gateway._observe.metrics import GatewayMetrics
from gateway.cache import PredictionCache
from gateway.routing import Router

__all__ = ["gateway_collector", "gateway_metrics", "route_and_cache_families"]


def gateway_metrics(
    router: Router, cache: PredictionCache | None, label_cap: int
) -> GatewayMetrics:
    """The call counters of a Gateway: its configured routes and their targets are the labels."""
    routes = {name: [t.key for t in r.targets] for name, r in router.routes.items()}
    routed = [name for name, r in router.routes.items() if r.routers]
    return GatewayMetrics(label_cap, routes, cache=cache is not None, routed=routed)


def gateway_collector(
    metrics: GatewayMetrics, router: Router, cache: PredictionCache | None
) -> Any:
    """A ``prometheus_client`` collector of ``metrics`` and the route and cache families."""
    return metrics.collector(functools.partial(route_and_cache_families, router, cache))


def route_and_cache_families(router: Router, cache: PredictionCache | None) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    # Configured routes only: their count is fixed by the config file.
    state = GaugeMetricFamily(
        "sagemaker_gateway_target_healthy",
        "1 when the target takes traffic and is not failing every call",
        labels=["route", "target"],
    )
    for name, route in router.routes.items():
        for target in route.targets:
            state.add_metric([name, target.key], float(route.target_up(target)))
    yield state
    if cache is not None:
        stats = cache.stats
        yield CounterMetricFamily(
            "sagemaker_gateway_cache_redis_errors",
            "Redis errors and timeouts (the cache failed open)",
            value=stats.redis_errors + stats.redis_timeouts,
        )
        yield GaugeMetricFamily(
            "sagemaker_gateway_cache_circuit_open",
            "1 while the whole Redis tier is skipped (circuit open or half-open)",
            value=float(stats.circuit_state in ("open", "half_open")),
        )
        yield GaugeMetricFamily(
            "sagemaker_gateway_cache_circuit_open_nodes",
            "Redis Cluster nodes whose circuit is open or half-open (their keys skipped)",
            value=stats.circuit_open_nodes,
        )
