# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The sidecar's own metrics, exposed through ``prometheus_client``.

The hot path only bumps plain ints (no lock, no label lookup);
the numbers become metric families when /metrics is scraped. The families
(``sagemaker_gateway_sidecar_*``) are declared in ``gateway._observe.families``;
the latency histogram uses the gateway's one bucket set. Route labels are
the configured route names; any other name a client sends counts as
``unconfigured`` (without a list of configured routes, the first
``sidecar.metrics_label_cap`` names keep theirs and later ones count as
``other``). Rejection reasons and per-operation families are exported at
zero from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric

from gateway._observe import families
from gateway._observe.counting import (
    DEFAULT_LABEL_CAP,
    UNCONFIGURED,
    Histogram,
    LabelCap,
    with_zeros,
)
from gateway._observe.prometheus import build_info_family

__all__ = ["BuildInfo", "SidecarMetrics", "cumulative_only", "merge_expositions"]

# Why a request was refused before reaching the gateway (exported at zero).
REJECT_REASONS = (
    "in_flight_cap",
    "auth",
    "unknown_operation",
    # Refused by the HTTP server before the sidecar saw a request.
    "bad_request",
    "request_timeout",
    "too_large",
    "headers_too_large",
)
# Each operation's success status, the one series of it exported at zero per route.
_SUCCESS = {"invoke": 200, "stream": 200, "async": 202, "openrtb": 200}


class _OperationCounts:
    """One operation's counters, bumped as attributes: a request costs two look-ups
    (its operation, its route) and one bump of its status, no key tuple built."""

    __slots__ = ("latency", "received", "routes", "sent")

    def __init__(self) -> None:
        self.latency = Histogram()
        self.received = 0
        self.sent = 0
        self.routes: dict[str, dict[int, int]] = {}  # route label -> status -> requests


class SidecarMetrics:
    """Counters of one sidecar; register it on a ``CollectorRegistry``."""

    def __init__(
        self,
        in_flight: Callable[[], int],
        label_cap: int = DEFAULT_LABEL_CAP,
        routes: Collection[str] | None = None,
        operations: Sequence[str] = (),
    ) -> None:
        """``routes``: the configured route names (None: any name, capped);
        ``operations``: the ones this sidecar serves, exported at zero."""
        self._in_flight = in_flight
        self._routes = None if routes is None else frozenset(routes)
        self._operations = tuple(operations)
        self._counts: dict[str, _OperationCounts] = {}
        self.rejected: dict[str, int] = {}
        self._route_cap = LabelCap(label_cap)
        # Set once by the sidecar command after gc.freeze() (tune_gc); a
        # number, not gc.get_freeze_count() per scrape: that walks the list.
        self.gc_frozen_objects = 0

    def record(
        self,
        operation: str,
        route: str,
        status: int,
        seconds: float,
        received: int = 0,
        sent: int = 0,
    ) -> None:
        counts = self._counts.get(operation)
        if counts is None:
            counts = self._counts[operation] = _OperationCounts()
        counts.latency.observe(seconds)
        counts.received += received
        counts.sent += sent
        statuses = counts.routes.get(route)
        if statuses is None:
            statuses = counts.routes[route] = {}
        statuses[status] = statuses.get(status, 0) + 1

    @property
    def requests(self) -> dict[tuple[str, str, int], int]:
        """Requests answered, by (operation, route label, status)."""
        return {
            (operation, route, status): count
            for operation, counts in list(self._counts.items())
            for route, statuses in list(counts.routes.items())
            for status, count in list(statuses.items())
        }

    @property
    def received_bytes(self) -> dict[str, int]:
        """Request body bytes received, by operation."""
        return {operation: counts.received for operation, counts in self._counts.items()}

    @property
    def sent_bytes(self) -> dict[str, int]:
        """Answer body bytes sent, by operation."""
        return {operation: counts.sent for operation, counts in self._counts.items()}

    def route_label(self, name: str) -> str:
        """``name`` if it is a configured route, else ``unconfigured``."""
        routes = self._routes
        if routes is None:
            return self._route_cap(name)
        return name if name in routes else UNCONFIGURED

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    # prometheus_client Collector protocol -----------------------------------

    def describe(self) -> list[Metric]:
        return []  # no fixed description: collect() is cheap and always current

    def collect(self) -> Iterator[Metric]:
        requests = families.SIDECAR_REQUESTS.family()
        for (operation, route, status), count in self._requests_with_zeros():
            requests.add_metric([operation, route, str(status)], count)
        yield requests
        yield families.SIDECAR_IN_FLIGHT.value(self._in_flight())
        yield families.SIDECAR_REJECTED.by_label(with_zeros(self.rejected, REJECT_REASONS))
        yield self._latency_family()
        operations = self._operations
        yield families.SIDECAR_RECEIVED_BYTES.by_label(with_zeros(self.received_bytes, operations))
        yield families.SIDECAR_SENT_BYTES.by_label(with_zeros(self.sent_bytes, operations))
        yield families.SIDECAR_GC_FROZEN_OBJECTS.value(self.gc_frozen_objects)

    def _requests_with_zeros(self) -> list[tuple[tuple[str, str, int], int]]:
        requests = dict(self.requests)
        routes = sorted(self._routes or ())
        for operation in self._operations:
            status = _SUCCESS.get(operation, 200)
            for route in ("openrtb",) if operation == "openrtb" else routes:
                requests.setdefault((operation, route, status), 0)
        return list(requests.items())

    def _latency_family(self) -> HistogramMetricFamily:
        family = families.SIDECAR_REQUEST_DURATION.family()
        histograms = {operation: counts.latency for operation, counts in self._counts.items()}
        for operation in self._operations:
            if operation not in histograms:
                histograms[operation] = Histogram()
        for operation, histogram in histograms.items():
            family.add_metric([operation], histogram.buckets(), sum_value=histogram.total)
        return family


class BuildInfo:
    """/metrics without per-request metrics (``[sidecar] metrics = false``): the build family."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield build_info_family()


# -- several workers, one scrape ---------------------------------------------------

# Per-process families: summed they would mean nothing, so each keeps a
# ``worker`` label instead.
_PER_PROCESS = ("process_", "python_", families.SIDECAR_GC_FROZEN_OBJECTS.name)
_ONCE = (families.BUILD_INFO.name,)
_ADDITIVE = ("counter", "gauge", "histogram", "summary", "unknown")


def merge_expositions(texts: Iterable[str], workers: Sequence[str] | None = None) -> bytes:
    """One exposition from several workers' ``/metrics`` texts (same version).

    Samples of the same name and labels are added up: counters, histogram
    buckets, sums and counts, and gauges such as in-flight calls (a process's
    in-flight is its workers' sum). ``_created`` keeps the earliest; info,
    state-set and ``build_info`` samples keep the first value seen;
    per-process families (``process_*``, ``python_*``, frozen objects) get a
    ``worker`` label (``workers[i]`` for the i-th text, else ``i``) instead of a sum.
    """
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Metric] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
    for position, text in enumerate(texts):
        worker = workers[position] if workers is not None else str(position)
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            per_process = family.name.startswith(_PER_PROCESS)
            additive = family.type in _ADDITIVE and family.name not in _ONCE
            for sample in family.samples:
                labels = dict(sample.labels)
                if per_process:
                    labels["worker"] = worker
                key = (family.name, sample.name, tuple(sorted(labels.items())))
                seen = values.get(key)
                if seen is None:
                    values[key] = sample.value
                elif sample.name.endswith("_created"):
                    values[key] = min(seen, sample.value)
                elif additive:
                    values[key] = seen + sample.value
    for (family_name, sample_name, label_pairs), value in values.items():
        families[family_name].add_sample(sample_name, dict(label_pairs), value)
    return _render(families.values())


# What still means something once its process is gone: counts since start.
_CUMULATIVE = ("counter", "histogram", "summary")


def cumulative_only(text: str) -> str:
    """``text`` with only its counters, histograms and summaries (no per-process family).

    A dead worker's gauges (in flight, memory) are over; its counts are not.
    """
    from prometheus_client.parser import text_string_to_metric_families

    kept = [
        family
        for family in text_string_to_metric_families(text)
        if family.type in _CUMULATIVE and not family.name.startswith(_PER_PROCESS)
    ]
    return _render(kept).decode()


class _Fixed:
    """A collector of families already built."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def _render(families: Iterable[Metric]) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return bytes(generate_latest(registry))
