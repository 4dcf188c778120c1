"""One instrumentation stream: typed, frozen events and the hooks that receive them.

Everything the gateway can tell an operator (Prometheus metrics, traces, the
state-change log lines, the demo's summary) is a *hook* on this stream::

    class Printer:
        def __call__(self, event: Event) -> None:
            if isinstance(event, TargetEjected):
                print("ejected", event.target)

    gateway.add_hook(Printer())

A hook is any callable taking one :data:`Event`. Hooks run synchronously on
the event loop, inside the call that emits: keep them short and never let
them raise (an exception is logged once per hook type and swallowed, the
call goes on). With no hook registered the call path pays one ``None``
check per emission point and builds no event at all.

Durations are seconds (floats); ``route``/``target``/``endpoint`` are the
names the route table uses. Events are immutable ``NamedTuple``s (cheap to
build: a frozen dataclass costs several times more per event); tell them
apart by type (``isinstance`` or ``type(event)``), not by equality, since
two events of different types with equal fields compare equal as tuples.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, Protocol, TypeAlias

from gateway.routing import Route, TargetHealth, TargetState

__all__ = [
    "CANCELLED",
    "FAILED",
    "HEDGE",
    "INVOKE_ENDPOINT",
    "INVOKE_ENDPOINT_ASYNC",
    "INVOKE_ENDPOINT_STREAM",
    "LOST",
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
    "Hook",
    "Instrumentation",
    "RateLimiter",
    "RetryScheduled",
    "StateLog",
    "TargetEjected",
    "TargetReadmitted",
    "routing_labels",
]

log = logging.getLogger("gateway.events")

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


class Hook(Protocol):
    """Anything that takes an event.

    A hook with a true ``never_raises`` attribute is called directly; any
    other is wrapped so that an exception it raises is logged and dropped.
    A hook whose ``reads_request_id`` attribute is False never reads
    ``CallFinished.request_id``: while it is the only hook, that is None
    (finding the id in an answer costs CPU on every call).
    """

    def __call__(self, event: Event) -> None: ...


class Instrumentation:
    """The hooks of one gateway; ``emit`` is what emission points call.

    ``emit`` is None while no hook is registered, so an emission point is
    ``if emit is not None: emit(Event(...))``. With one hook, ``emit`` is
    that hook itself (no fan-out loop); listeners re-read ``emit`` through
    ``subscribe`` whenever the set of hooks changes.
    """

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self._hooks: list[Hook] = []
        self._listeners: list[Callable[[Emit | None], None]] = []
        self._failed: set[type] = set()
        self.emit: Emit | None = None
        for hook in hooks:
            self.add(hook)

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return tuple(self._hooks)

    def add(self, hook: Hook) -> None:
        if hook not in self._hooks:
            self._hooks.append(hook)
            self._rebuild()

    def remove(self, hook: Hook) -> None:
        if hook in self._hooks:
            self._hooks.remove(hook)
            self._rebuild()

    def subscribe(self, listener: Callable[[Emit | None], None]) -> None:
        """Call ``listener(emit)`` now and whenever hooks are added or removed."""
        self._listeners.append(listener)
        listener(self.emit)

    def _rebuild(self) -> None:
        hooks = tuple(self._hooks)
        if not hooks:
            self.emit = None
        elif len(hooks) == 1:
            self.emit = self._guard(hooks[0])
        else:
            guarded = tuple(self._guard(hook) for hook in hooks)

            def fan_out(event: Event) -> None:
                for hook in guarded:
                    hook(event)

            self.emit = fan_out
        for listener in self._listeners:
            listener(self.emit)

    def _guard(self, hook: Hook) -> Emit:
        if getattr(hook, "never_raises", False) is True:
            return hook  # the gateway's own hooks: no wrapper call per event
        failed = self._failed

        def guarded(event: Event) -> None:
            try:
                hook(event)
            except Exception:
                # A broken hook must never break a call; say so once per kind.
                if type(hook) not in failed:
                    failed.add(type(hook))
                    log.exception("instrumentation hook %s failed", type(hook).__name__)

        if getattr(hook, "reads_request_id", True) is False:
            guarded.reads_request_id = False  # type: ignore[attr-defined]  # read by emitters
        return guarded


# -- state-change log lines ------------------------------------------------------


class RateLimiter:
    """At most one line per subject per ``interval_s``; counts what it held back.

    ``allow(subject)`` returns None to suppress, else how many lines for that
    subject were suppressed since the last one let through (to put in it).
    A flapping target thus gives one line per interval, not one per flap.
    """

    __slots__ = ("_clock", "_interval", "_last", "_suppressed")

    _MAX_SUBJECTS = 4096

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self._interval = interval_s
        self._clock = clock
        self._last: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def allow(self, subject: object) -> int | None:
        now = self._clock()
        last = self._last.get(subject)
        if last is not None and now - last < self._interval:
            self._suppressed[subject] = self._suppressed.get(subject, 0) + 1
            return None
        if len(self._last) >= self._MAX_SUBJECTS:
            self._last.clear()  # bounded memory; at worst one extra line each
        self._last[subject] = now
        return self._suppressed.pop(subject, 0)


_state_log = logging.getLogger("gateway.state")


def _describe(event: Event) -> tuple[str, str, dict[str, object]] | None:
    """(subject, message, fields) of a state change worth a WARNING; None otherwise."""
    if isinstance(event, TargetEjected):
        fields: dict[str, object] = {
            "event": "target_ejected",
            "route": event.route,
            "target": event.target,
            "ejected_for_s": round(event.duration_s, 3),
            "ejections": event.ejections,
        }
        return f"ejected:{event.route}:{event.target}", "target ejected", fields
    if isinstance(event, TargetReadmitted):
        fields = {"event": "target_readmitted", "route": event.route, "target": event.target}
        return f"readmitted:{event.route}:{event.target}", "target re-admitted", fields
    if isinstance(event, CircuitOpened):
        fields = {"event": "redis_lost", "tier": event.tier}
        if event.tier == "redis-nodes":
            message = "Redis partly lost: Cluster nodes' circuits open, their keys are skipped"
        else:
            message = "Redis lost: cache circuit open, the Redis tier is skipped"
        return "redis-lost", message, fields
    if isinstance(event, CircuitClosed):
        fields = {"event": "redis_back", "tier": event.tier}
        return "redis-back", "Redis back: cache circuit closed", fields
    if isinstance(event, CredentialsRefreshFailed):
        # The error's type only: a provider's message may name a profile.
        fields = {"event": "credentials_refresh_failed", "error": event.error}
        return "credentials", "AWS credentials refresh failed", fields
    return None


class StateLog:
    """A hook writing a WARNING line (logger ``gateway.state``) per state change.

    Target ejected / re-admitted, Redis lost / back (the cache's circuit),
    credentials refresh failed. Rate-limited per kind of change and subject
    (a target's ejections, its re-admissions, ...): at most one line per
    ``interval_s``, the next one carrying ``suppressed``, the count held back
    meanwhile. Fields are names and
    numbers only, never a secret.
    """

    def __init__(
        self, logger: logging.Logger | None = None, limiter: RateLimiter | None = None
    ) -> None:
        self._logger = logger or _state_log
        self._limiter = limiter or RateLimiter()

    def __call__(self, event: Event) -> None:
        described = _describe(event)
        if described is None:
            return
        subject, message, fields = described
        suppressed = self._limiter.allow(subject)
        if suppressed is None:
            return
        if suppressed:
            fields["suppressed"] = suppressed
        self._logger.warning(message, extra=fields)


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
