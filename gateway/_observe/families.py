"""Every metric family the gateway, the sidecar and the RTB proxy serve, declared once.

A family is its type, name, help and label names; whatever counts it (the
gateway's Prometheus hook, the sidecar's counters, the RTB proxy's) builds
it from here at scrape time, so a new metric is one declaration here plus
the code that counts it. The names, labels and help are what alerts,
dashboards and the metric reference read: changing one is a breaking change
for them.

Counters are declared by the name of their samples (``..._total``), the one
a query uses; ``prometheus_client`` names the family without the suffix.
Every latency histogram uses ``LATENCY_BUCKETS_S``, so the gateway's, the
sidecar's and the RTB proxy's line up on one dashboard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

# prometheus_client is imported on the first scrape, not with the library.
if TYPE_CHECKING:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

__all__ = [
    "BATCH_SIZE_BUCKETS",
    "FAMILIES",
    "LATENCY_BUCKETS_S",
    "CounterFamily",
    "Family",
    "GaugeFamily",
    "HistogramFamily",
]

# Upper bounds (seconds) for every latency histogram: sub-millisecond steps
# where a call with a few-ms budget lives, then coarser out to 10 s.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.004,
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
    10.0,
)
# Rows per scoring call: integers, so their bucket labels read "1", not "1.0".
BATCH_SIZE_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, slots=True)
class CounterFamily:
    """A counter family: ``name`` ends in ``_total``."""

    name: str
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> CounterMetricFamily:
        """The family without samples (``add_metric`` adds them)."""
        from prometheus_client.core import CounterMetricFamily

        return CounterMetricFamily(self.name, self.help, labels=self.labels)

    def value(self, count: float) -> CounterMetricFamily:
        """The family of an unlabelled counter."""
        from prometheus_client.core import CounterMetricFamily

        return CounterMetricFamily(self.name, self.help, value=count)

    def by_label(
        self, counts: Mapping[str, float] | Iterable[tuple[str, float]]
    ) -> CounterMetricFamily:
        """The family of a one-label counter: a sample per (label value, count)."""
        family = self.family()
        items = counts.items() if isinstance(counts, Mapping) else counts
        for value, count in list(items):  # a snapshot: calls count on meanwhile
            family.add_metric([value], count)
        return family


@dataclass(frozen=True, slots=True)
class GaugeFamily:
    """A gauge family: a value read at scrape time."""

    name: str
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> GaugeMetricFamily:
        """The family without samples (``add_metric`` adds them)."""
        from prometheus_client.core import GaugeMetricFamily

        return GaugeMetricFamily(self.name, self.help, labels=self.labels)

    def value(self, value: float) -> GaugeMetricFamily:
        """The family of an unlabelled gauge."""
        from prometheus_client.core import GaugeMetricFamily

        return GaugeMetricFamily(self.name, self.help, value=value)


@dataclass(frozen=True, slots=True)
class HistogramFamily:
    """A histogram family; ``bounds`` are its buckets' upper bounds (+Inf aside)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    bounds: tuple[float, ...] | tuple[int, ...] = LATENCY_BUCKETS_S

    @property
    def bucket_labels(self) -> tuple[str, ...]:
        """Each bucket's ``le`` label, ``+Inf`` last."""
        return (*(repr(bound) for bound in self.bounds), "+Inf")

    def family(self) -> HistogramMetricFamily:
        """The family without samples (``add_metric`` adds them)."""
        from prometheus_client.core import HistogramMetricFamily

        return HistogramMetricFamily(self.name, self.help, labels=self.labels)


Family = CounterFamily | GaugeFamily | HistogramFamily

# -- the gateway (Gateway.prometheus_collector, and the sidecar's /metrics) --------------

BUILD_INFO = GaugeFamily(
    "sagemaker_gateway_build_info",
    "The running version; build: compiled (mypyc hot path), pure or mixed",
    ("version", "build"),
)
ATTEMPTS = CounterFamily(
    "sagemaker_gateway_attempts_total",
    "Requests sent to a target, by kind (primary, hedge, retry) and outcome "
    "(won, lost, cancelled, failed)",
    ("route", "target", "kind", "outcome"),
)
ATTEMPT_ERRORS = CounterFamily(
    "sagemaker_gateway_attempt_errors_total",
    "Failed attempts by error code",
    ("route", "target", "code"),
)
ATTEMPT_DURATION = HistogramFamily(
    "sagemaker_gateway_attempt_duration_seconds",
    "Time from sending an attempt to its successful answer",
    ("route", "target"),
)
CALLS = CounterFamily("sagemaker_gateway_calls_total", "Calls made (Gateway.invoke)", ("route",))
CALL_ERRORS = CounterFamily(
    "sagemaker_gateway_call_errors_total", "Calls that raised, by error code", ("route", "code")
)
CALL_DURATION = HistogramFamily(
    "sagemaker_gateway_call_duration_seconds",
    "Time of a whole call: cache, attempts, hedges, backoffs and retries",
    ("route",),
)
HEDGES = CounterFamily("sagemaker_gateway_hedges_total", "Hedge attempts fired", ("route",))
HEDGE_WINS = CounterFamily(
    "sagemaker_gateway_hedge_wins_total", "Calls answered by a hedge", ("route",)
)
RETRIES = CounterFamily("sagemaker_gateway_retries_total", "Retry attempts sent", ("route",))
DEADLINE_EXCEEDED = CounterFamily(
    "sagemaker_gateway_deadline_exceeded_total", "Calls that ran out of time", ("route",)
)
EJECTIONS = CounterFamily(
    "sagemaker_gateway_ejections_total", "Times a target was ejected", ("route", "target")
)
ROUTED_CALLS = CounterFamily(
    "sagemaker_gateway_routed_calls_total",
    "Calls an inference router answered, by its routing reason",
    ("route", "reason"),
)
ROUTED_RESOURCES = CounterFamily(
    "sagemaker_gateway_routed_resources_total",
    "Calls an inference router answered, by the endpoint or inference component it "
    "invoked (an ARN, or other)",
    ("route", "resource"),
)
CACHE_LOOKUPS = CounterFamily(
    "sagemaker_gateway_cache_lookups_total",
    "Prediction cache lookups by source (near, redis, stale, coalesced; miss)",
    ("source",),
)
CACHE_CIRCUIT_OPENS = CounterFamily(
    "sagemaker_gateway_cache_circuit_opens_total",
    "Times the Redis tier's circuit opened (Redis lost)",
)
CREDENTIAL_REFRESHES = CounterFamily(
    "sagemaker_gateway_credential_refreshes_total",
    "AWS credential refreshes by result (ok, failed)",
    ("result",),
)
# Read at scrape time from the router and the cache, not counted from events.
TARGET_HEALTHY = GaugeFamily(
    "sagemaker_gateway_target_healthy",
    "1 when the target takes traffic and is not failing every call",
    ("route", "target"),
)
CACHE_REDIS_ERRORS = CounterFamily(
    "sagemaker_gateway_cache_redis_errors_total",
    "Redis errors and timeouts (the cache failed open)",
)
CACHE_CIRCUIT_OPEN = GaugeFamily(
    "sagemaker_gateway_cache_circuit_open",
    "1 while the whole Redis tier is skipped (circuit open or half-open)",
)
CACHE_CIRCUIT_OPEN_NODES = GaugeFamily(
    "sagemaker_gateway_cache_circuit_open_nodes",
    "Redis Cluster nodes whose circuit is open or half-open (their keys skipped)",
)

# -- the sidecar --------------------------------------------------------------------------

SIDECAR_REQUESTS = CounterFamily(
    "sagemaker_gateway_sidecar_requests_total",
    "Requests answered by the sidecar, by operation, route and HTTP status.",
    ("operation", "route", "code"),
)
SIDECAR_IN_FLIGHT = GaugeFamily(
    "sagemaker_gateway_sidecar_in_flight", "Invocations being served right now."
)
SIDECAR_REJECTED = CounterFamily(
    "sagemaker_gateway_sidecar_rejected_total",
    "Requests refused before reaching the gateway, by reason.",
    ("reason",),
)
SIDECAR_REQUEST_DURATION = HistogramFamily(
    "sagemaker_gateway_sidecar_request_duration_seconds",
    "Time from the request being parsed to the response being ready.",
    ("operation",),
)
SIDECAR_RECEIVED_BYTES = CounterFamily(
    "sagemaker_gateway_sidecar_received_bytes_total",
    "Request body bytes received, by operation.",
    ("operation",),
)
SIDECAR_SENT_BYTES = CounterFamily(
    "sagemaker_gateway_sidecar_sent_bytes_total",
    "Response body bytes sent, by operation.",
    ("operation",),
)
SIDECAR_GC_FROZEN_OBJECTS = GaugeFamily(
    "sagemaker_gateway_sidecar_gc_frozen_objects",
    "Objects the sidecar command moved out of the collector's sight at start "
    "(gc.freeze, sidecar.gc_freeze); 0: not frozen.",
)

# -- the RTB proxy (the sidecar's [rtb] table) ------------------------------------------

RTB_KEPT = CounterFamily(
    "sagemaker_gateway_rtb_kept_total", "Bid requests kept (any reason: scored, explored, ...)."
)
RTB_DROPPED = CounterFamily(
    "sagemaker_gateway_rtb_dropped_total", "Bid requests answered 204 because of their score."
)
RTB_FAILED_OPEN = CounterFamily(
    "sagemaker_gateway_rtb_failed_open_total", "Kept because no score came in time."
)
RTB_EXPLORED = CounterFamily(
    "sagemaker_gateway_rtb_explored_total", "Kept below the threshold by the exploration draw."
)
RTB_SHADOWED = CounterFamily(
    "sagemaker_gateway_rtb_shadowed_total", "Kept below the threshold because of shadow mode."
)
RTB_INVALID = CounterFamily(
    "sagemaker_gateway_rtb_invalid_total", "Bid requests refused (400, 413, 415)."
)
RTB_UNREADABLE = CounterFamily(
    "sagemaker_gateway_rtb_unreadable_total", "Kept unscored: unreadable or too large."
)
RTB_SCORE_TIMEOUTS = CounterFamily(
    "sagemaker_gateway_rtb_score_timeouts_total", "Requests whose score missed the deadline."
)
RTB_SCORE_ERRORS = CounterFamily(
    "sagemaker_gateway_rtb_score_errors_total", "Requests whose scoring call failed."
)
RTB_RULE_DROPPED = CounterFamily(
    "sagemaker_gateway_rtb_rule_dropped_total", "Dropped unscored by a rule ([rtb.rules])."
)
RTB_RULE_KEPT = CounterFamily("sagemaker_gateway_rtb_rule_kept_total", "Kept unscored by a rule.")
RTB_HELD_BACK = CounterFamily(
    "sagemaker_gateway_rtb_held_back_total", "A rule matched; kept anyway by its holdback share."
)
RTB_RULE_HITS = CounterFamily(
    "sagemaker_gateway_rtb_rule_hits_total",
    "Bid requests each rule matched (whatever its action or holdback did).",
    ("rule",),
)
RTB_RELOADS = CounterFamily(
    "sagemaker_gateway_rtb_reloads_total",
    "Reloads of the [rtb] table (SIGHUP): applied, or refused (the old one stays).",
    ("outcome",),
)
RTB_NO_BIDS = CounterFamily(
    "sagemaker_gateway_rtb_no_bids_total",
    "No-bids the proxy answered itself, by reason (below_threshold, rule, rate_cap, "
    "unreadable); a bidder's own no-bids are not counted here.",
    ("reason",),
)
RTB_RATE_CAP = CounterFamily(
    "sagemaker_gateway_rtb_rate_cap_total",
    "Kept requests through the bidders' rate cap: admitted, refused by the "
    "adaptive score cut, or refused for want of a token.",
    ("outcome",),
)
RTB_BATCH_SIZE = HistogramFamily(
    "sagemaker_gateway_rtb_batch_size",
    "Rows per scoring call (micro-batch size).",
    bounds=BATCH_SIZE_BUCKETS,
)
RTB_UNREADABLE_BY_REASON = CounterFamily(
    "sagemaker_gateway_rtb_unreadable_by_reason_total",
    "Bid requests forwarded unscored, by reason (too_large, not_json, invalid, ...).",
    ("reason",),
)
RTB_FEATURE_ROWS = CounterFamily(
    "sagemaker_gateway_rtb_feature_rows_total",
    "Feature rows computed (the denominator of the out-of-vocabulary shares).",
)
RTB_OUT_OF_VOCABULARY = CounterFamily(
    "sagemaker_gateway_rtb_out_of_vocabulary_total",
    "Feature rows whose value of this feature the model's encoding did not know.",
    ("feature",),
)
RTB_BIDDER_ERRORS = CounterFamily(
    "sagemaker_gateway_rtb_bidder_errors_total",
    "Forwarded requests that got no usable bidder answer, by reason.",
    ("reason",),
)
RTB_BIDDER_RESPONSES = CounterFamily(
    "sagemaker_gateway_rtb_bidder_responses_total", "Bidder answers by HTTP status.", ("code",)
)
RTB_FORWARD_DURATION = HistogramFamily(
    "sagemaker_gateway_rtb_forward_duration_seconds",
    "Time from forwarding a kept request to the bidder's answer (or failure).",
)

# Every family above, for the checks that each one is served and documented.
FAMILIES: tuple[Family, ...] = tuple(
    value
    for value in tuple(globals().values())
    if isinstance(value, CounterFamily | GaugeFamily | HistogramFamily)
)
