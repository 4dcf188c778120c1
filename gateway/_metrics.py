"""Counters and latency histograms, kept as plain numbers on the hot path.

Recording an outcome is a few integer increments and one ``bisect``; the
Prometheus exposition is built only when something scrapes it, by a
``prometheus_client`` collector (so no ``Counter.labels()`` lookup per call).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LATENCY_BUCKETS_S", "GatewayMetrics", "TargetMetrics"]

# Upper bounds (seconds) suited to calls that should take a few milliseconds.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


@dataclass(slots=True)
class TargetMetrics:
    route: str
    target: str
    calls: int = 0
    successes: int = 0
    latency_sum: float = 0.0
    # One slot per bucket plus +Inf; cumulated at scrape time.
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    errors: dict[str, int] = field(default_factory=dict)

    def record_success(self, elapsed: float) -> None:
        self.calls += 1
        self.successes += 1
        self.latency_sum += elapsed
        self.latency_counts[bisect_left(LATENCY_BUCKETS_S, elapsed)] += 1

    def record_error(self, code: str) -> None:
        self.calls += 1
        self.errors[code] = self.errors.get(code, 0) + 1


@dataclass(slots=True)
class GatewayMetrics:
    targets: dict[tuple[str, str], TargetMetrics] = field(default_factory=dict)
    hedges: dict[str, int] = field(default_factory=dict)
    hedge_wins: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    deadline_exceeded: dict[str, int] = field(default_factory=dict)

    def target(self, route: str, target: str) -> TargetMetrics:
        key = (route, target)
        metrics = self.targets.get(key)
        if metrics is None:
            metrics = self.targets[key] = TargetMetrics(route, target)
        return metrics

    @staticmethod
    def bump(counter: dict[str, int], route: str) -> None:
        counter[route] = counter.get(route, 0) + 1

    def collector(self, extra: Callable[[], Iterator[Any]] | None = None) -> Any:
        """A ``prometheus_client`` collector reading these numbers at scrape time."""
        return _Collector(self, extra)


class _Collector:
    def __init__(self, metrics: GatewayMetrics, extra: Callable[[], Iterator[Any]] | None) -> None:
        self._metrics = metrics
        self._extra = extra

    def describe(self) -> list[Any]:
        # Returning nothing keeps registration from calling collect() early.
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            HistogramMetricFamily,
        )

        metrics = self._metrics
        calls = CounterMetricFamily(
            "sagemaker_gateway_calls", "Attempts sent to a target", labels=["route", "target"]
        )
        errors = CounterMetricFamily(
            "sagemaker_gateway_errors",
            "Failed attempts by error code",
            labels=["route", "target", "code"],
        )
        latency = HistogramMetricFamily(
            "sagemaker_gateway_latency_seconds",
            "Latency of successful attempts",
            labels=["route", "target"],
        )
        for target in list(metrics.targets.values()):
            labels = [target.route, target.target]
            calls.add_metric(labels, target.calls)
            for code, count in list(target.errors.items()):
                errors.add_metric([*labels, code], count)
            latency.add_metric(labels, _cumulative(target.latency_counts), target.latency_sum)
        yield calls
        yield errors
        yield latency
        for name, counter, text in (
            ("sagemaker_gateway_hedges", metrics.hedges, "Hedge attempts sent"),
            ("sagemaker_gateway_hedge_wins", metrics.hedge_wins, "Calls answered by a hedge"),
            ("sagemaker_gateway_retries", metrics.retries, "Retry attempts sent"),
            (
                "sagemaker_gateway_deadline_exceeded",
                metrics.deadline_exceeded,
                "Calls that ran out of time",
            ),
        ):
            family = CounterMetricFamily(name, text, labels=["route"])
            for route, count in list(counter.items()):
                family.add_metric([route], count)
            yield family
        if self._extra is not None:
            yield from self._extra()


def _cumulative(counts: list[int]) -> list[tuple[str, float]]:
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return buckets
