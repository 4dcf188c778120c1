"""The sidecar's own metrics, exposed through ``prometheus_client``.

The hot path only bumps plain ints in dicts (no lock, no label lookup);
the numbers become metric families when /metrics is scraped. The
exposition format itself is prometheus_client's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

__all__ = ["OTHER_ROUTE", "SidecarMetrics"]

# Seconds. Dense below 10 ms, where a sidecar in front of a fast model lives.
BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# Route names come from clients: past this many, new names count as "other"
# so that a client cannot blow up the series count.
MAX_ROUTES = 256
OTHER_ROUTE = "other"


class _Histogram:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0


class SidecarMetrics:
    """Counters of one sidecar; register it on a ``CollectorRegistry``."""

    def __init__(self, in_flight: Callable[[], int]) -> None:
        self._in_flight = in_flight
        self.requests: dict[tuple[str, str, int], int] = {}
        self.rejected: dict[str, int] = {}
        self._latency: dict[str, _Histogram] = {}
        self._routes: set[str] = set()
        # Set once by the sidecar command after gc.freeze() (tune_gc); a
        # number, not gc.get_freeze_count() per scrape: that walks the list.
        self.gc_frozen_objects = 0

    def route_label(self, name: str) -> str:
        if name in self._routes:
            return name
        if len(self._routes) < MAX_ROUTES:
            self._routes.add(name)
            return name
        return OTHER_ROUTE

    def record(self, operation: str, route: str, status: int, seconds: float) -> None:
        key = (operation, route, status)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        histogram = self._latency.get(operation)
        if histogram is None:
            histogram = self._latency[operation] = _Histogram()
        histogram.counts[bisect_left(BUCKETS, seconds)] += 1
        histogram.total += seconds

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    # prometheus_client Collector protocol -----------------------------------

    def describe(self) -> list[Metric]:
        return []  # no fixed description: collect() is cheap and always current

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "sidecar_requests",
            "Requests answered by the sidecar, by operation, route and HTTP status.",
            labels=["operation", "route", "code"],
        )
        for (operation, route, status), count in list(self.requests.items()):
            requests.add_metric([operation, route, str(status)], count)
        yield requests
        yield GaugeMetricFamily(
            "sidecar_in_flight", "Invocations being served right now.", value=self._in_flight()
        )
        rejected = CounterMetricFamily(
            "sidecar_rejected",
            "Requests refused before reaching the gateway, by reason.",
            labels=["reason"],
        )
        for reason, count in list(self.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected
        yield self._latency_family()
        yield GaugeMetricFamily(
            "sidecar_gc_frozen_objects",
            "Objects the sidecar command moved out of the collector's sight at start "
            "(gc.freeze, sidecar.gc_freeze); 0: not frozen.",
            value=self.gc_frozen_objects,
        )

    def _latency_family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "sidecar_request_duration_seconds",
            "Time from the request being parsed to the response being ready.",
            labels=["operation"],
        )
        for operation, histogram in list(self._latency.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*BUCKETS, float("inf")), histogram.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric([operation], buckets, sum_value=histogram.total)
        return family
