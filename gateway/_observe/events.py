"""The instrumentation stream's vocabulary: typed, frozen events.

Everything the gateway can tell an operator (Prometheus metrics, traces, the
state-change log lines, the demo's summary) is a *hook* on this stream
(``gateway._observe.hooks``)::

    class Printer:
        def __call__(self, event: Event) -> None:
            if isinstance(event, TargetEjected):
                print("ejected", event.target)

    gateway.add_hook(Printer())

The gateway's own hooks each sit in a module of their own: ``prometheus``,
``tracing`` and ``logs``. With no hook registered the call path pays one
``None`` check per emission point and builds no event at all.

Durations are seconds (floats); ``route``/``target``/``endpoint`` are the
names the route table uses. Events are immutable ``NamedTuple``s (cheap to
build: a frozen dataclass costs several times more per event); tell them
apart by type (``isinstance`` or ``type(event)``), not by equality, since
two events of different types with equal fields compare equal as tuples.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Final, NamedTuple, TypeAlias

from gateway.routing import Route, TargetHealth, TargetState

__all__ = [
    "CANCELLED",
    "FAILED",
    "HEDGE",
    "INVOKE_ENDPOINT",
    "INVOKE_ENDPOINT_ASYNC",
    "INVOKE_ENDPOINT_STREAM",
    "LOST",
    "OTHER",
    "PRIMARY",
    "RETRY",
    "ROUTING_REASONS",
    "WON",
    "AttemptFinished",
    "CacheLookup",
    "CallFinished",
    "CallStarted",
    "CircuitClosed",
    "CircuitOpened",
    "CredentialsRefreshFailed",
    "CredentialsRefreshed",
    "Emit",
    "Event",
    "HedgeFired",
    "HedgeLost",
    "RetryScheduled",
    "TargetEjected",
    "TargetReadmitted",
    "circuit_event",
    "health_event",
    "routing_labels",
]

# Attempt kinds.
PRIMARY: Final = "primary"
HEDGE: Final = "hedge"
RETRY: Final = "retry"
# Attempt outcomes. ``lost``: superseded by another attempt of the same call
# (a hedge race); ``cancelled``: the caller (or its deadline) gave up.
WON: Final = "won"
LOST: Final = "lost"
CANCELLED: Final = "cancelled"
FAILED: Final = "failed"


# The SageMaker Runtime operations' API names (the other runtimes' calls carry theirs).
INVOKE_ENDPOINT: Final = "InvokeEndpoint"
INVOKE_ENDPOINT_STREAM: Final = "InvokeEndpointWithResponseStream"
INVOKE_ENDPOINT_ASYNC: Final = "InvokeEndpointAsync"

# An inference router's documented RoutingReason values; any other reads OTHER.
ROUTING_REASONS: Final = ("local-preferred", "capacity-available", "only-healthy", "failover")
OTHER: Final = "other"
# The routed resource a label may hold: a SageMaker endpoint's or inference component's ARN.
_ROUTED_ARN = re.compile(
    r"arn:aws[a-z-]{0,16}:sagemaker:[a-z0-9-]{1,32}:[0-9]{12}:"
    r"(?:endpoint|inference-component)/[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}"
)


def routing_labels(reason: str | None, arn: str | None) -> tuple[str | None, str | None]:
    """An inference router's answer as bounded labels: the reason from the documented
    set, the resource a well-formed SageMaker ARN; anything else ``other``.
    (None, None) for an answer that came from no router."""
    if reason is None and arn is None:
        return None, None
    label = reason if reason in ROUTING_REASONS else OTHER
    resource = arn if arn is not None and _ROUTED_ARN.fullmatch(arn) else OTHER
    return label, resource


class CallStarted(NamedTuple):
    """A call began: ``Gateway.invoke`` (before the cache or any attempt),
    ``invoke_stream`` (at its first iteration) or ``invoke_async``.
    ``operation`` is the API name of the operation called, in whichever runtime."""

    route: str
    model: str | None
    operation: str = INVOKE_ENDPOINT


class CallFinished(NamedTuple):
    """The call of the last ``CallStarted`` returned or raised (a stream: ended).

    ``cache_source`` is where a cached answer came from (``near``, ``redis``,
    ``stale``, ``coalesced``), None when a target answered or there was no
    cache. ``error_code`` is None on success. ``request_id`` is SageMaker's
    ``x-amzn-RequestId`` when an answer carried one. ``routing_reason`` and
    ``routed_resource`` are set when an inference router answered (see
    :func:`routing_labels`: a documented reason or ``other``, an ARN or ``other``).
    """

    route: str
    model: str | None
    endpoint: str | None
    duration_s: float
    attempts: int
    hedged: bool
    cache_source: str | None
    error_code: str | None
    operation: str = INVOKE_ENDPOINT
    request_id: str | None = None
    routing_reason: str | None = None
    routed_resource: str | None = None


class AttemptFinished(NamedTuple):
    """One request to one target ended. ``kind``: primary, hedge or retry;
    ``outcome``: won, lost, cancelled or failed (then ``error_code`` is set)."""

    route: str
    target: str
    endpoint: str
    kind: str
    outcome: str
    duration_s: float
    error_code: str | None


class HedgeFired(NamedTuple):
    """The primary was slow: a hedge attempt goes to ``target`` after ``delay_s``."""

    route: str
    target: str
    delay_s: float


class HedgeLost(NamedTuple):
    """A hedge attempt was cancelled because the primary answered first."""

    route: str
    target: str


class RetryScheduled(NamedTuple):
    """Attempt ``attempt`` failed with ``error_code``; a retry follows after ``backoff_s``."""

    route: str
    attempt: int
    backoff_s: float
    error_code: str


class TargetEjected(NamedTuple):
    """Outlier ejection took ``target`` out of rotation for ``duration_s``."""

    route: str
    target: str
    duration_s: float
    ejections: int


class TargetReadmitted(NamedTuple):
    """A probe succeeded: ``target`` takes traffic again."""

    route: str
    target: str


class CacheLookup(NamedTuple):
    """The prediction cache answered a call (``source``: near, redis, stale,
    coalesced) or missed (``miss``: a target was called)."""

    route: str
    source: str


class CircuitOpened(NamedTuple):
    """Redis lost: errors or timeouts in a row. ``tier``: ``redis`` (the whole
    tier is skipped) or ``redis-nodes`` (some Redis Cluster nodes are)."""

    tier: str


class CircuitClosed(NamedTuple):
    """The Redis tier answered its trial request (Redis back)."""

    tier: str


class CredentialsRefreshed(NamedTuple):
    """New AWS credentials were loaded; ``expiry`` is epoch seconds or None."""

    expiry: float | None


class CredentialsRefreshFailed(NamedTuple):
    """Loading AWS credentials failed; ``error`` is the exception's type name."""

    error: str


Event: TypeAlias = (
    CallStarted
    | CallFinished
    | AttemptFinished
    | HedgeFired
    | HedgeLost
    | RetryScheduled
    | TargetEjected
    | TargetReadmitted
    | CacheLookup
    | CircuitOpened
    | CircuitClosed
    | CredentialsRefreshed
    | CredentialsRefreshFailed
)
Emit: TypeAlias = Callable[[Event], None]


def health_event(route: Route, state: TargetState) -> Event | None:
    """The event for a target's health change: ejected or readmitted (None otherwise)."""
    if state.state is TargetHealth.EJECTED:
        until = state.ejected_until or 0.0
        duration = max(0.0, until - time.monotonic())
        return TargetEjected(route.name, state.key, duration, state.ejections)
    if state.state is TargetHealth.HEALTHY:
        return TargetReadmitted(route.name, state.key)
    return None


def circuit_event(state: str) -> Event:
    """The event for the Redis circuit's change: "open" skips the whole tier,
    "partial" some Cluster nodes, "closed" none."""
    if state == "closed":
        return CircuitClosed("redis")
    return CircuitOpened("redis" if state == "open" else "redis-nodes")
