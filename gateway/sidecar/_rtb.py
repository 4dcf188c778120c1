"""Proxy mode: an OpenRTB auction path in front of the ad servers (bidders).

    exchange --POST /openrtb2/auction--> sidecar --score--> SageMaker (bid-filter)
                                            |  dropped: 204 No Content at once
                                            '- kept: forwarded to a bidder, its answer relayed

Configured by the ``[rtb]`` table of the gateway's TOML (``RtbConfig``).
Kept requests are spread round-robin over ``bidders`` (instances of one ad
server fleet, not an auction fan-out) through one pooled keep-alive
``httpx.AsyncClient``. A bidder that answers 204, fails, times out or
answers an error status yields 204: to an exchange every one of those is
"no bid". The filter's score and reason travel in ``x-bid-filter-score``
and ``x-bid-filter-reason`` on the answer, and are passed to the bidder.
"""

from __future__ import annotations

import itertools
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from gateway._http_server import Request, Response
from gateway.errors import ConfigError
from gateway.rtb import SEGMENT_DIMENSIONS, BidFilter, Decision, FilterPolicy, Scorer
from gateway.rtb.request import InvalidBidRequest, parse_bid_request
from gateway.sidecar._config import _number, _reject_unknown
from gateway.sidecar._metrics import BUCKETS

__all__ = ["REASON_HEADER", "ROUTE_HEADER", "SCORE_HEADER", "RtbConfig", "RtbProxy"]

SCORE_HEADER: Final = "x-bid-filter-score"
REASON_HEADER: Final = "x-bid-filter-reason"
# Optional request header naming the traffic's route (e.g. the exchange), for
# `route_thresholds`; unknown names fall through to the segment/global rules.
ROUTE_HEADER: Final = "x-bid-filter-route"
# Request headers passed on to the bidder (lower-case, as the server gives them).
FORWARDED_HEADERS: Final[tuple[str, ...]] = (
    "content-type",
    "x-openrtb-version",
    "user-agent",
    "x-forwarded-for",
    ROUTE_HEADER,
)
_NO_BID: Final = 204
_TEXT = ("Content-Type", "text/plain; charset=utf-8")
_BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, slots=True)
class RtbConfig:
    """The ``[rtb]`` table. ``_ms`` values are milliseconds.

    The scoring deadline of a request is its ``tmax`` less ``tmax_margin_ms``
    (the part of the auction left to the bidder), else ``default_budget_ms``.
    A forwarded request gets ``bidder_timeout_ms``, capped by what is left of
    its ``tmax``.
    """

    bidders: tuple[str, ...]
    path: str = "/openrtb2/auction"
    endpoint: str = "bid-filter"
    threshold: float = 0.01
    route_thresholds: Mapping[str, float] = field(default_factory=dict)
    segment_thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    explore_share: float = 0.0
    shadow: bool = False
    seed: int | None = None
    max_batch: int = 32
    min_batch: int = 8
    max_wait_ms: float = 1.0
    call_time_ms: float = 2.0
    tmax_margin_ms: float = 50.0
    default_budget_ms: float = 20.0
    bidder_timeout_ms: float = 100.0
    bidder_max_connections: int = 256

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], section: str = "rtb") -> RtbConfig:
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{section}: must be a table")
        _reject_unknown(section, mapping, set(_FIELDS))
        if "bidders" not in mapping:
            raise ConfigError(f"{section}.bidders: required, a list of at least one bidder URL")
        values = {
            key: _read(f"{section}.{key}", kind, mapping[key], minimum)
            for key, (kind, minimum) in _FIELDS.items()
            if key in mapping
        }
        return cls(**values)

    def policy(self) -> FilterPolicy:
        return FilterPolicy(
            threshold=self.threshold,
            route_thresholds=dict(self.route_thresholds),
            segment_thresholds={k: dict(v) for k, v in self.segment_thresholds.items()},
            explore_share=self.explore_share,
            shadow=self.shadow,
            seed=self.seed,
        )


# key -> (kind, minimum); kinds are read by `_read`.
_FIELDS: Final[dict[str, tuple[str, float]]] = {
    "bidders": ("urls", 0),
    "path": ("path", 0),
    "endpoint": ("string", 0),
    "threshold": ("share", 0),
    "route_thresholds": ("shares", 0),
    "segment_thresholds": ("segments", 0),
    "explore_share": ("share", 0),
    "shadow": ("bool", 0),
    "seed": ("int", 0),
    "max_batch": ("int", 1),
    "min_batch": ("int", 1),
    "max_wait_ms": ("float", 0),
    "call_time_ms": ("float", 0),
    "tmax_margin_ms": ("float", 0),
    "default_budget_ms": ("float", 0.001),
    "bidder_timeout_ms": ("float", 0.001),
    "bidder_max_connections": ("int", 1),
}


def _read(where: str, kind: str, value: Any, minimum: float) -> Any:
    if kind in ("int", "float"):
        number = _number(where, value, minimum, integer=kind == "int")
        return float(number) if kind == "float" else number
    if kind == "share":
        return _share(where, value)
    if kind == "shares":
        return _shares(where, value)
    if kind == "segments":
        return _segments(where, value)
    if kind == "urls":
        return _bidders(where, value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
    if kind == "path" and not value.startswith("/"):
        raise ConfigError(f"{where}: must start with '/', got {value!r}")
    return value


def _share(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: must be a number within [0, 1], got {value!r}")
    return float(value)


def _shares(where: str, value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table of name = threshold")
    return {str(name): _share(f"{where}.{name}", share) for name, share in value.items()}


def _segments(where: str, value: Any) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table of dimension tables")
    for dimension in value:
        if dimension not in SEGMENT_DIMENSIONS:
            raise ConfigError(
                f"{where}.{dimension}: unknown segment dimension "
                f"(allowed: {', '.join(SEGMENT_DIMENSIONS)})"
            )
    return {str(dim): _shares(f"{where}.{dim}", table) for dim, table in value.items()}


def _bidders(where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not value:
        raise ConfigError(f"{where}: must be a list of at least one bidder URL")
    for url in value:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}: {url!r} is not an http(s) URL")
    return tuple(value)


# -- metrics ------------------------------------------------------------------


class _Histogram:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        cumulative = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            cumulative += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        return out


class RtbMetrics:
    """Proxy-mode counters; the filter's own counters are read at scrape time."""

    def __init__(self, bid_filter: BidFilter) -> None:
        self._filter = bid_filter
        self.invalid = 0
        self.bidder_errors: dict[str, int] = {}
        self.bidder_responses: dict[int, int] = {}
        self.forwarded = _Histogram()

    def bidder_error(self, reason: str) -> None:
        self.bidder_errors[reason] = self.bidder_errors.get(reason, 0) + 1

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self._filter.stats
        for name, value, text in (
            ("kept", stats.kept, "Bid requests kept (any reason: scored, explored, ...)."),
            ("dropped", stats.dropped, "Bid requests answered 204 because of their score."),
            ("failed_open", stats.failed_open, "Kept because no score came in time."),
            ("explored", stats.explored, "Kept below the threshold by the exploration draw."),
            ("shadowed", stats.shadowed, "Kept below the threshold because of shadow mode."),
            ("invalid", self.invalid, "Malformed bid requests answered 400."),
            ("score_timeouts", stats.timeouts, "Requests whose score missed the deadline."),
            ("score_errors", stats.errors, "Requests whose scoring call failed."),
        ):
            yield CounterMetricFamily(f"sidecar_rtb_{name}", text, value=value)
        yield self._batch_family(stats.batch_sizes)
        errors = CounterMetricFamily(
            "sidecar_rtb_bidder_errors",
            "Forwarded requests that got no usable bidder answer, by reason.",
            labels=["reason"],
        )
        for reason, count in list(self.bidder_errors.items()):
            errors.add_metric([reason], count)
        yield errors
        responses = CounterMetricFamily(
            "sidecar_rtb_bidder_responses", "Bidder answers by HTTP status.", labels=["code"]
        )
        for status, count in list(self.bidder_responses.items()):
            responses.add_metric([str(status)], count)
        yield responses
        forwarded = HistogramMetricFamily(
            "sidecar_rtb_forward_duration_seconds",
            "Time from forwarding a kept request to the bidder's answer (or failure).",
        )
        forwarded.add_metric([], self.forwarded.buckets(), sum_value=self.forwarded.total)
        yield forwarded

    @staticmethod
    def _batch_family(sizes: Mapping[int, int]) -> HistogramMetricFamily:
        counts = [0] * (len(_BATCH_BUCKETS) + 1)
        total = 0
        for size, batches in sizes.items():
            counts[bisect_left(_BATCH_BUCKETS, size)] += batches
            total += size * batches
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*_BATCH_BUCKETS, "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((str(bound), cumulative))
        family = HistogramMetricFamily(
            "sidecar_rtb_batch_size", "Rows per scoring call (micro-batch size)."
        )
        family.add_metric([], buckets, sum_value=total)
        return family


# -- the proxy ------------------------------------------------------------------


class RtbProxy:
    """Answers the OpenRTB path: score, then 204 or forward to a bidder."""

    def __init__(self, scorer: Scorer, config: RtbConfig) -> None:
        self.config = config
        self.path = config.path
        self.filter = BidFilter(
            scorer,
            config.endpoint,
            policy=config.policy(),
            max_batch=config.max_batch,
            min_batch=config.min_batch,
            max_wait=config.max_wait_ms / 1000,
            call_time=config.call_time_ms / 1000,
            default_budget=config.default_budget_ms / 1000,
            tmax_margin=config.tmax_margin_ms / 1000,
        )
        self.metrics = RtbMetrics(self.filter)
        self._bidders = itertools.cycle(config.bidders)
        self._bidder_timeout = config.bidder_timeout_ms / 1000
        self._http: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._http is None:
            limit = self.config.bidder_max_connections
            self._http = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
                timeout=self._bidder_timeout,
            )

    async def aclose(self) -> None:
        await self.filter.aclose()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            parsed = parse_bid_request(request.body)
        except InvalidBidRequest as invalid:
            self.metrics.invalid += 1
            return Response(400, (_TEXT,), str(invalid).encode())
        route = request.headers.get(ROUTE_HEADER)
        decision = await self.filter.decide(parsed, route=route)
        decision_headers = _decision_headers(decision)
        if not decision.keep:
            return Response(_NO_BID, decision_headers)
        budget = self._bidder_timeout
        if parsed.tmax:
            budget = min(budget, parsed.tmax / 1000 - (time.perf_counter() - started))
        return await self._forward(request, decision_headers, budget)

    async def _forward(
        self, request: Request, decision_headers: list[tuple[str, str]], budget: float
    ) -> Response:
        if budget <= 0:
            self.metrics.bidder_error("no_time_left")
            return Response(_NO_BID, decision_headers)
        http = self._http
        if http is None:
            raise RuntimeError("the RTB proxy is not started")
        headers: list[tuple[str, str]] = [
            (name, request.headers[name]) for name in FORWARDED_HEADERS if name in request.headers
        ]
        headers.extend(decision_headers)
        sent = time.perf_counter()
        try:
            answer = await http.post(
                next(self._bidders), content=request.body, headers=headers, timeout=budget
            )
        except httpx.TimeoutException:
            return self._bidder_failed("timeout", decision_headers, sent)
        except httpx.HTTPError:
            return self._bidder_failed("transport", decision_headers, sent)
        metrics = self.metrics
        metrics.forwarded.observe(time.perf_counter() - sent)
        status = answer.status_code
        metrics.bidder_responses[status] = metrics.bidder_responses.get(status, 0) + 1
        if status == _NO_BID:
            return Response(_NO_BID, decision_headers)
        if not 200 <= status < 300:
            metrics.bidder_error("status")
            return Response(_NO_BID, decision_headers)
        content_type = answer.headers.get("content-type", "application/json")
        return Response(status, [("Content-Type", content_type), *decision_headers], answer.content)

    def _bidder_failed(
        self, reason: str, decision_headers: list[tuple[str, str]], sent: float
    ) -> Response:
        self.metrics.forwarded.observe(time.perf_counter() - sent)
        self.metrics.bidder_error(reason)
        return Response(_NO_BID, decision_headers)


def _decision_headers(decision: Decision) -> list[tuple[str, str]]:
    headers = [(REASON_HEADER, decision.reason.value)]
    if decision.score is not None:
        headers.append((SCORE_HEADER, f"{decision.score:.6g}"))
    return headers
