"""Proxy mode: an OpenRTB auction path in front of the ad servers (bidders).

    exchange --POST /openrtb2/auction--> sidecar --score--> SageMaker (bid-filter)
                                            |  dropped: 204 No Content at once
                                            '- kept: forwarded to a bidder, its answer relayed

Configured by the ``[rtb]`` table of the gateway's TOML (``RtbConfig``).
Kept requests are spread round-robin over ``bidders`` (instances of one ad
server fleet, not an auction fan-out) through the project's own pooled
keep-alive client (``gateway._http.native``). A bidder that answers 204,
fails, times out or answers an error status yields 204: to an exchange every
one of those is "no bid". The filter's score and reason travel in
``x-bid-filter-score`` and ``x-bid-filter-reason`` on the answer, and are
passed to the bidder; a rule's decision also names it in ``x-bid-filter-rule``.

Every no-bid the proxy answers itself says why, in ``x-bid-filter-no-bid``:
``below_threshold`` (the score), ``rule`` (a rule's drop), ``rate_cap`` (the
bidders' cap) or ``unreadable`` (with ``unreadable = "no_bid"``), counted in
``sagemaker_gateway_rtb_no_bids_total{reason}``. ``no_bid = "204"`` answers
204 No Content; ``no_bid = "nbr"`` answers 200 with an OpenRTB bid response
holding only the request's ``id`` and ``nbr``, the code from ``no_bid_codes``
(defaults in ``NO_BID_CODES``) or the rule's own ``nbr``. A bidder's own
no-bid, failure or timeout is relayed as 204, as before.

``[rtb.rate_cap]`` caps the requests per second each bidder URL gets (see
``gateway.sidecar._ratecap``): over the cap the lowest-scored kept requests
are answered no-bid (``rate_cap``) first; with several workers each takes
its share of the cap.

``RtbProxy.reload`` (the command runs it on SIGHUP, in every worker) applies
a new ``[rtb]`` table while serving: the policy (thresholds, rules) at once,
for the next requests; a changed key that needs a restart (``bidders``,
batch sizes, ...) is named in the log and left as it was.

Bid requests may come gzipped (``Content-Encoding: gzip``, as exchanges
send them): they are inflated to at most ``max_inflated_bytes`` (more is a
413, so a zip bomb costs that much memory and no more) from at most
``MAX_GZIP_MEMBERS`` gzip members (more is a 413 too), in work linear in the
body, and forwarded to the bidder as received, still gzipped. The bidder sees the sidecar's own
``user-agent``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import re
import time
import zlib
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import orjson
from prometheus_client.core import HistogramMetricFamily, Metric

from gateway import errors
from gateway._config.reader import fail, http_url, read, section, setting
from gateway._http.message import Origin
from gateway._http.native import NativeTransport
from gateway._http.options import PoolConfig
from gateway._http.request import PreparedRequest
from gateway._observe import families
from gateway._observe.counting import Histogram
from gateway._observe.tracing import ServerTracing
from gateway._server.http import Request, Response
from gateway.rtb import BidFilter, Decision, FilterPolicy, Reason, Scorer
from gateway.rtb.request import (
    DEFAULT_MAX_REQUEST_BYTES,
    InvalidBidRequest,
    parse_bid_request,
    refuse_duplicate_keys,
)
from gateway.sidecar._ratecap import BidderCap, RateCapConfig

__all__ = [
    "MAX_GZIP_MEMBERS",
    "NO_BID_CODES",
    "NO_BID_HEADER",
    "REASON_HEADER",
    "ROUTE_HEADER",
    "RULE_HEADER",
    "SCORE_HEADER",
    "RtbConfig",
    "RtbProxy",
]

SCORE_HEADER: Final = "x-bid-filter-score"
REASON_HEADER: Final = "x-bid-filter-reason"
RULE_HEADER: Final = "x-bid-filter-rule"
NO_BID_HEADER: Final = "x-bid-filter-no-bid"
# Why the proxy answered no-bid itself, and the OpenRTB nbr codes it gives by default
# (OpenRTB 2.5 5.24 / 3.0 no-bid reasons: 0 unknown, 1 technical error, 2 invalid request).
NO_BID_CODES: Final = {"below_threshold": 0, "rule": 0, "rate_cap": 1, "unreadable": 2}
# Optional request header naming the traffic's route (e.g. the exchange), for
# `route_thresholds`; unknown names fall through to the segment/global rules.
# `route_header` names another (behind AWS RTB Fabric: its link id, LINK_HEADER).
ROUTE_HEADER: Final = "x-bid-filter-route"
LINK_HEADER: Final = "x-amz-rtb-link-id"
# Request headers passed on to the bidder (lower-case, as the server gives them).
FORWARDED_HEADERS: Final[tuple[str, ...]] = (
    "content-type",
    "content-encoding",
    "x-openrtb-version",
    "x-forwarded-for",
    ROUTE_HEADER,
    LINK_HEADER,
)
# W3C trace context (https://www.w3.org/TR/trace-context/), passed on when the
# sidecar does not trace itself: only when valid, since the caller is not
# trusted and the bidder may be. A repeated traceparent arrives comma-joined,
# which no valid one contains, so it is dropped too; a tracestate goes only
# with a valid traceparent, and only whole and valid (at most 32 members,
# 512 characters: the length every vendor must pass on).
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")
_TRACEPARENT_MAX: Final = 256  # version 00 is 55 characters; later versions may add fields
_TRACESTATE_KEY: Final = (
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
)
_TRACESTATE_MEMBER: Final = re.compile(
    _TRACESTATE_KEY + r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
_TRACESTATE_MAX: Final = 512
_TRACESTATE_MEMBERS: Final = 32
_NO_BID: Final = 204
# The [rtb] keys a reload applies while serving; any other that changed needs a restart.
_RELOADABLE: Final = frozenset(
    {"policy", "no_bid", "no_bid_codes", "unreadable", "rate_cap", "route_header"}
)
# Priority under a rate cap of a request kept without a score by a rule (keep, holdback).
_RULED: Final = frozenset({Reason.RULE_KEEP, Reason.HOLDBACK})
_JSON: Final = ("Content-Type", "application/json")
logger = logging.getLogger("gateway.rtb")
_TEXT = ("Content-Type", "text/plain; charset=utf-8")
# Gzip members one bid request may be made of (an exchange sends one): each
# costs a decompressor, so a body of thousands of empty members is refused.
MAX_GZIP_MEMBERS: Final = 64
# Compressed bytes handed to zlib at a time. At the end of a member zlib
# copies the rest of its input aside: fed whole, a body of many members
# would be copied once per member (quadratic); fed in slices, each copy is
# at most one slice.
_INFLATE_SLICE: Final = 16 * 1024


def _bidders(value: Any, key: str) -> Any:
    return [value] if isinstance(value, str) else value  # one bidder may be a bare URL


def _path(value: str) -> None:
    if not value.startswith("/"):
        raise ValueError(f"must start with '/', got {value!r}")


def _header_name(value: Any, key: str) -> Any:
    return value.lower() if isinstance(value, str) else value  # as the server gives them


def _no_bid_answer(value: Any, key: str) -> Any:
    return str(value) if value == 204 else value  # the environment's 204 is a number


def _no_bid_reasons(codes: Mapping[str, int]) -> None:
    unknown = sorted(set(codes) - set(NO_BID_CODES))
    if unknown:
        raise ValueError(f"unknown reason {unknown[0]!r} (reasons: {', '.join(NO_BID_CODES)})")


@section("rtb")
class RtbConfig:
    """The ``[rtb]`` table: the filter's ``policy`` keys sit in it next to the proxy's own."""

    bidders: tuple[str, ...] = setting(before=_bidders, check=lambda urls: [*map(http_url, urls)])
    path: str = setting(default="/openrtb2/auction", check=_path)
    # The request header whose value picks a `route_thresholds` entry.
    route_header: str = setting(default=ROUTE_HEADER, before=_header_name)
    endpoint: str = "bid-filter"
    policy: FilterPolicy = setting(factory=FilterPolicy, inline=True)
    max_batch: int = setting(default=32, ge=1)
    min_batch: int = setting(default=8, ge=1)
    max_wait_ms: float = setting(default=1.0, ge=0)
    call_time_ms: float = setting(default=2.0, ge=0)
    tmax_margin_ms: float = setting(default=50.0, ge=0)
    tmax_margin_share: float = setting(default=0.5, ge=0, lt=1)
    default_budget_ms: float = setting(default=20.0, ge=0.001)
    bidder_timeout_ms: float = setting(default=100.0, ge=0.001)
    bidder_max_connections: int = setting(default=256, ge=1)
    max_inflated_bytes: int = setting(default=1024 * 1024, ge=1)
    max_request_bytes: int = setting(default=DEFAULT_MAX_REQUEST_BYTES, ge=1)
    strict: bool = False
    oov_warning_share: float = setting(default=0.5, ge=0, le=1)
    # The proxy's own no-bids: "204" (empty) or "nbr" (200, {"id", "nbr"}); the reason
    # is in x-bid-filter-no-bid either way. Codes per reason override NO_BID_CODES.
    no_bid: Literal["204", "nbr"] = setting(default="204", before=_no_bid_answer)
    no_bid_codes: Mapping[str, int] = setting(factory=dict, ge=0, check=_no_bid_reasons)
    # A request the filter cannot read (and `strict` is off): forwarded unscored, or no-bid.
    unreadable: Literal["forward", "no_bid"] = "forward"
    # Requests per second each bidder URL may get, over all workers ([rtb.rate_cap]).
    rate_cap: RateCapConfig = setting(factory=RateCapConfig)

    def __post_init__(self) -> None:
        if not self.bidders:
            raise fail(self, "bidders", "must list at least one bidder URL")
        unknown = sorted(set(self.rate_cap.bidders) - set(self.bidders))
        if unknown:
            raise fail(self, "rate_cap", f"bidders: {unknown[0]!r} is not one of rtb.bidders")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> RtbConfig:
        return read(cls, mapping, "rtb")


# -- metrics ------------------------------------------------------------------


class RtbMetrics:
    """Proxy-mode counters; the filter's own counters are read at scrape time.

    Its families (``sagemaker_gateway_rtb_*``) are declared in ``gateway._observe.families``.
    """

    def __init__(self, bid_filter: BidFilter) -> None:
        self._filter = bid_filter
        self.invalid = 0
        self.reloads = {"applied": 0, "refused": 0}
        self.no_bids = dict.fromkeys(NO_BID_CODES, 0)
        self.cap: BidderCap | None = None
        self.bidder_errors: dict[str, int] = {}
        self.bidder_responses: dict[int, int] = {}
        self.forwarded = Histogram()

    def bidder_error(self, reason: str) -> None:
        self.bidder_errors[reason] = self.bidder_errors.get(reason, 0) + 1

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self._filter.stats
        for family, value in (
            (families.RTB_KEPT, stats.kept),
            (families.RTB_DROPPED, stats.dropped),
            (families.RTB_FAILED_OPEN, stats.failed_open),
            (families.RTB_EXPLORED, stats.explored),
            (families.RTB_SHADOWED, stats.shadowed),
            (families.RTB_INVALID, self.invalid),
            (families.RTB_UNREADABLE, stats.unreadable),
            (families.RTB_SCORE_TIMEOUTS, stats.timeouts),
            (families.RTB_SCORE_ERRORS, stats.errors),
            (families.RTB_RULE_DROPPED, stats.rule_dropped),
            (families.RTB_RULE_KEPT, stats.rule_kept),
            (families.RTB_HELD_BACK, stats.held_back),
        ):
            yield family.value(value)
        yield families.RTB_RULE_HITS.by_label(stats.rule_hits)
        yield families.RTB_RELOADS.by_label(self.reloads)
        yield families.RTB_NO_BIDS.by_label(self.no_bids)
        cap = self.cap
        if cap is not None:
            outcomes = {"admitted": cap.admitted, "cut": cap.cut_off, "no_token": cap.out_of_tokens}
            yield families.RTB_RATE_CAP.by_label(outcomes)
        yield _batch_family(stats.batch_sizes)
        yield families.RTB_UNREADABLE_BY_REASON.by_label(stats.unreadable_reasons)
        yield families.RTB_FEATURE_ROWS.value(stats.rows)
        yield families.RTB_OUT_OF_VOCABULARY.by_label(stats.out_of_vocabulary)
        yield families.RTB_BIDDER_ERRORS.by_label(self.bidder_errors)
        responses = list(self.bidder_responses.items())  # a snapshot: answers count on meanwhile
        yield families.RTB_BIDDER_RESPONSES.by_label(
            [(str(status), count) for status, count in responses]
        )
        forwarded = families.RTB_FORWARD_DURATION.family()
        forwarded.add_metric([], self.forwarded.buckets(), sum_value=self.forwarded.total)
        yield forwarded


def _batch_family(sizes: Mapping[int, int]) -> HistogramMetricFamily:
    """The batch-size histogram, from the filter's count of batches per size."""
    spec = families.RTB_BATCH_SIZE
    counts = [0] * (len(spec.bounds) + 1)
    total = 0
    for size, batches in sizes.items():
        counts[bisect_left(spec.bounds, size)] += batches
        total += size * batches
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for label, count in zip(spec.bucket_labels, counts, strict=True):
        cumulative += count
        buckets.append((label, cumulative))
    family = spec.family()
    family.add_metric([], buckets, sum_value=total)
    return family


# -- the proxy ------------------------------------------------------------------


class BodyRefused(Exception):
    """A bid request body this proxy will not read: ``status`` and a message for the sender."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def inflate(body: bytes, limit: int, max_members: int = MAX_GZIP_MEMBERS) -> bytes:
    """The gzip ``body`` inflated, refused past ``limit`` bytes (a zip bomb stops there).

    Several gzip members one after another (allowed by the format) are
    joined, up to ``max_members`` of them. The work is linear in the body:
    each byte is handed to zlib once, and zlib's copies at member ends are
    bounded by ``_INFLATE_SLICE``.
    """
    view = memoryview(body)
    parts: list[bytes] = []
    room = limit
    start = 0
    for _ in range(max_members):
        start, room = _inflate_member(view, start, room, limit, parts)
        if start == len(view):
            return b"".join(parts)  # one part: that part itself, not a copy
    raise BodyRefused(413, f"the gzip body has more than {max_members} members")


def _inflate_member(
    view: memoryview, start: int, room: int, limit: int, parts: list[bytes]
) -> tuple[int, int]:
    """Inflate the member at ``view[start:]`` into ``parts``; (where the next one starts, room)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while not inflater.eof:
        if start == len(view):
            raise BodyRefused(400, "the gzip body is truncated")
        data = view[start : start + _INFLATE_SLICE]
        try:
            # At most room + 1 bytes: one more than allowed tells "too large".
            part = inflater.decompress(data, room + 1)
        except zlib.error:
            raise BodyRefused(400, "Content-Encoding is gzip but the body is not gzip") from None
        if len(part) > room:
            raise BodyRefused(413, f"the gzip body inflates to more than {limit} bytes")
        if part:
            parts.append(part)
            room -= len(part)
        # Below the output cap zlib takes the whole slice, up to the member's end.
        start += len(data) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
    return start, room


def _bidder_targets(urls: Sequence[str]) -> list[tuple[Origin, str]]:
    targets = []
    for url in urls:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        targets.append((Origin.from_url(url), path))
    return targets


class RtbProxy:
    """Answers the OpenRTB path: score, then 204 or forward to a bidder."""

    def __init__(self, scorer: Scorer, config: RtbConfig, *, workers: int = 1) -> None:
        """``workers``: processes serving this config; each takes that share of the rate cap."""
        self.config = config
        self._workers = workers
        self.path = config.path
        self.filter = BidFilter(
            scorer,
            config.endpoint,
            policy=config.policy,
            max_batch=config.max_batch,
            min_batch=config.min_batch,
            max_wait=config.max_wait_ms / 1000,
            call_time=config.call_time_ms / 1000,
            default_budget=config.default_budget_ms / 1000,
            tmax_margin=config.tmax_margin_ms / 1000,
            tmax_margin_share=config.tmax_margin_share,
            max_request_bytes=config.max_request_bytes,
            strict=config.strict,
            oov_warning_share=config.oov_warning_share,
        )
        self.metrics = RtbMetrics(self.filter)
        self._targets = _bidder_targets(config.bidders)
        self._bidders = itertools.cycle(self._targets)
        self._bidder_timeout = config.bidder_timeout_ms / 1000
        self._max_inflated = config.max_inflated_bytes
        self._nbr = config.no_bid == "nbr"
        self._codes = {**NO_BID_CODES, **config.no_bid_codes}
        self._cap: BidderCap | None = None
        self._set_rate_cap(config.rate_cap)
        self._http: NativeTransport | None = None
        # Set by the sidecar when it traces: bidder requests get a client span.
        self.tracing: ServerTracing | None = None

    def reload(self, config: RtbConfig) -> list[str]:
        """Serve by ``config`` from now on where it can; the changed keys it could not apply.

        The policy (thresholds, rules) applies to the next requests. A changed key
        that needs a restart keeps its running value and is named in the result.
        """
        running = self.config
        needs_restart = [
            field.name
            for field in dataclasses.fields(RtbConfig)
            if field.name not in _RELOADABLE
            and getattr(config, field.name) != getattr(running, field.name)
        ]
        kept = {name: getattr(running, name) for name in needs_restart}
        self.config = dataclasses.replace(config, **kept)
        self.filter.set_policy(config.policy)
        self._nbr = config.no_bid == "nbr"
        self._codes = {**NO_BID_CODES, **config.no_bid_codes}
        self._set_rate_cap(config.rate_cap)
        self.metrics.reloads["applied"] += 1
        logger.info(
            "rtb config reloaded",
            extra={"rules": list(config.policy.rules), "needs_restart": needs_restart},
        )
        if needs_restart:
            logger.warning(
                "rtb reload: these keys changed but apply only after a restart: %s",
                ", ".join(needs_restart),
            )
        return needs_restart

    def _set_rate_cap(self, cap: RateCapConfig) -> None:
        rates = cap.rates(self.config.bidders)
        if all(rate is None for rate in rates):
            self._cap = None
        elif self._cap is None:
            self._cap = BidderCap(rates, cap.burst_s, self._workers)
        else:
            self._cap.set_rates(rates, cap.burst_s, self._workers)
        self.metrics.cap = self._cap

    @property
    def bidder_rates(self) -> list[float] | None:
        """This process's cap per bidder, requests per second (None: no cap)."""
        return None if self._cap is None else self._cap.rates

    def reload_refused(self, error: Exception) -> None:
        """A reload whose config did not pass its checks: counted, logged; nothing changes."""
        self.metrics.reloads["refused"] += 1
        logger.error("rtb reload refused, the running config stays: %s", error)

    async def start(self) -> None:
        if self._http is None:
            timeout_ms = self.config.bidder_timeout_ms
            self._http = NativeTransport(
                PoolConfig(
                    max_connections=self.config.bidder_max_connections,
                    prewarm=0,
                    connect_timeout_ms=timeout_ms,
                    read_timeout_ms=timeout_ms,
                    pool_timeout_ms=timeout_ms,
                )
            )
            await self._http.start(list(dict.fromkeys(origin for origin, _ in self._targets)))

    async def aclose(self) -> None:
        await self.filter.aclose()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        try:
            body = self._plain_body(request)
            parsed = parse_bid_request(body, max_bytes=self.filter.max_request_bytes)
            # The bidder gets these bytes: it must read what was scored.
            refuse_duplicate_keys(body)
        except BodyRefused as refused:
            self.metrics.invalid += 1
            return Response(refused.status, (_TEXT,), str(refused).encode())
        except InvalidBidRequest as invalid:
            if not self.filter.strict:  # the bidder may read it: keep it, unscored
                unscored = _decision_headers(self.filter.unreadable(invalid))
                if self.config.unreadable == "no_bid":
                    return self._no_bid("unreadable", _request_id(request.body), unscored)
                target = await self._bidder_for(self.filter.policy.threshold)
                if target is None:
                    return self._no_bid("rate_cap", _request_id(request.body), unscored)
                return await self._forward(request, unscored, self._bidder_timeout, target)
            self.metrics.invalid += 1
            status = 413 if invalid.reason == "too_large" else 400
            return Response(status, (_TEXT,), str(invalid).encode())
        route = request.headers.get(self.config.route_header)
        decision = await self.filter.decide(parsed, route=route)
        decision_headers = _decision_headers(decision)
        if not decision.keep:
            rule = decision.rule
            if rule is None:
                return self._no_bid("below_threshold", parsed.id, decision_headers)
            return self._no_bid("rule", parsed.id, decision_headers, self._rule_code(rule))
        target = await self._bidder_for(self._priority(decision))
        if target is None:
            return self._no_bid("rate_cap", parsed.id, decision_headers)
        budget = self._bidder_timeout
        if parsed.tmax:
            budget = min(budget, parsed.tmax / 1000 - (time.perf_counter() - started))
        return await self._forward(request, decision_headers, budget, target)

    def _no_bid(
        self,
        reason: str,
        request_id: str,
        headers: list[tuple[str, str]],
        code: int | None = None,
    ) -> Response:
        """The proxy's own no-bid: counted by reason; 204, or 200 with OpenRTB's ``nbr``."""
        self.metrics.no_bids[reason] += 1
        headers.append((NO_BID_HEADER, reason))
        if not self._nbr:
            return Response(_NO_BID, headers)
        nbr = self._codes[reason] if code is None else code
        headers.append(_JSON)
        return Response(200, headers, orjson.dumps({"id": request_id, "nbr": nbr}))

    async def _bidder_for(self, priority: float) -> tuple[Origin, str] | None:
        """The bidder a kept request goes to; None when the rate cap refuses it."""
        cap = self._cap
        if cap is None:
            return next(self._bidders)
        admitted = cap.admit(priority)
        if not isinstance(admitted, int):
            admitted = await admitted
        return self._targets[admitted] if admitted >= 0 else None

    def _priority(self, decision: Decision) -> float:
        """A kept request's rank under the rate cap: its score, else what stands for one."""
        score = decision.score
        if score is not None:
            return score
        return 1.0 if decision.reason in _RULED else self.filter.policy.threshold

    def _rule_code(self, rule: str) -> int | None:
        found = self.config.policy.rules.get(rule)
        return found.nbr if found is not None else None

    def _plain_body(self, request: Request) -> bytes:
        encoding = request.headers.get("content-encoding")
        if encoding is None:
            return request.body
        encoding = encoding.strip().lower()
        if encoding == "gzip":
            return inflate(request.body, self._max_inflated)
        if encoding in ("", "identity"):
            return request.body
        raise BodyRefused(415, f"Content-Encoding {encoding!r} is not supported: send gzip")

    async def _forward(
        self,
        request: Request,
        decision_headers: list[tuple[str, str]],
        budget: float,
        target: tuple[Origin, str],
    ) -> Response:
        if budget <= 0:
            self.metrics.bidder_error("no_time_left")
            return Response(_NO_BID, decision_headers)
        http = self._http
        if http is None:
            raise RuntimeError("the RTB proxy is not started")
        origin, path = target
        request_headers = request.headers
        headers: list[tuple[str, str]] = [("host", origin.host_header)]
        headers.extend(
            (name, request_headers[name]) for name in FORWARDED_HEADERS if name in request_headers
        )
        headers.extend(decision_headers)
        sent = time.perf_counter()
        with self._bidder_span(request, headers):
            prepared = PreparedRequest(origin, path, "", headers, request.body, None)
            try:
                answer = await http.request(prepared, time.monotonic() + budget)
            except errors.TimeoutError:
                return self._bidder_failed("timeout", decision_headers, sent)
            except errors.GatewayError:
                return self._bidder_failed("transport", decision_headers, sent)
        metrics = self.metrics
        metrics.forwarded.observe(time.perf_counter() - sent)
        status = answer.status
        metrics.bidder_responses[status] = metrics.bidder_responses.get(status, 0) + 1
        if status == _NO_BID:
            return Response(_NO_BID, decision_headers)
        if not 200 <= status < 300:
            metrics.bidder_error("status")
            return Response(_NO_BID, decision_headers)
        content_type = answer.headers.get("content-type", "application/json")
        return Response(status, [("Content-Type", content_type), *decision_headers], answer.body)

    def _bidder_span(
        self, request: Request, headers: list[tuple[str, str]]
    ) -> contextlib.AbstractContextManager[Any]:
        """The trace context for the bidder: a client span's, or the inbound one as is."""
        if self.tracing is not None:
            return self.tracing.client_span("POST bidder", headers)
        traceparent = request.headers.get("traceparent")
        if traceparent is not None and valid_traceparent(traceparent):
            headers.append(("traceparent", traceparent))
            tracestate = request.headers.get("tracestate")
            if tracestate is not None and valid_tracestate(tracestate):
                headers.append(("tracestate", tracestate))
        return contextlib.nullcontext()

    def _bidder_failed(
        self, reason: str, decision_headers: list[tuple[str, str]], sent: float
    ) -> Response:
        self.metrics.forwarded.observe(time.perf_counter() - sent)
        self.metrics.bidder_error(reason)
        return Response(_NO_BID, decision_headers)


def valid_traceparent(value: str) -> bool:
    """A W3C ``traceparent`` this proxy passes on (see _TRACEPARENT)."""
    if len(value) > _TRACEPARENT_MAX:
        return False
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    version, trace_id, parent_id, extra = match.groups()
    if version == "ff" or (version == "00" and extra is not None):
        return False
    return trace_id != "0" * 32 and parent_id != "0" * 16


def valid_tracestate(value: str) -> bool:
    """A W3C ``tracestate`` (repeated headers comma-joined) this proxy passes on whole."""
    if len(value) > _TRACESTATE_MAX:
        return False
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]  # empty list members are allowed
    if len(members) > _TRACESTATE_MEMBERS:
        return False
    keys = set()
    for member in members:
        if _TRACESTATE_MEMBER.fullmatch(member) is None:
            return False
        keys.add(member.partition("=")[0])
    return len(keys) == len(members)  # a key may appear once


def _request_id(body: bytes) -> str:
    """The ``id`` of a body the filter could not read, if it has one ("" if not)."""
    try:
        found = orjson.loads(body).get("id")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return found if isinstance(found, str) else ""


def _decision_headers(decision: Decision) -> list[tuple[str, str]]:
    headers = [(REASON_HEADER, decision.reason.value)]
    if decision.score is not None:
        headers.append((SCORE_HEADER, f"{decision.score:.6g}"))
    if decision.rule is not None:
        headers.append((RULE_HEADER, decision.rule))
    return headers
