# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The Prometheus sink: the gateway's events counted, and its families built at scrape time.

``GatewayMetrics`` is an event hook (see ``gateway._observe.events``): each event is a
few integer increments and at most one bucket search; the exposition is built
only when something scrapes it, by a ``prometheus_client`` collector (no
``Counter.labels()`` lookup per call). Route and target labels are the
configured names: a name the config does not have (a bare endpoint name, or
junk a client sends) counts under ``unconfigured``, so no client can grow the
series count or push a real route out of its label. Error codes past
``label_cap`` distinct values (the gateway's own codes aside) count under
``other``. Every family an alert or a dashboard reads is exported at zero for
the configured routes and targets from the start, so ``increase()`` sees the
first event.

Calls an inference router answered count by routing reason (the documented
four, else ``other``; at zero for each configured route with a router target)
and by routed resource (a SageMaker ARN among the first ``label_cap`` seen,
else ``other``). ``invoke_router`` calls count under the router's name
(the first ``label_cap`` names, else ``other``).

Read at scrape time rather than counted: target health per configured route,
and the cache's Redis errors and circuit state. The families themselves
(names, help, labels) are declared in ``gateway._observe.families``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from gateway._observe import families
from gateway._observe.counting import (
    DEFAULT_LABEL_CAP,
    OTHER,
    UNCONFIGURED,
    Histogram,
    LabelCap,
    with_zeros,
)
from gateway._observe.events import (
    CANCELLED,
    FAILED,
    HEDGE,
    INVOKE_ENDPOINT,
    LOST,
    PRIMARY,
    RETRY,
    ROUTING_REASONS,
    WON,
    AttemptFinished,
    CacheLookup,
    CallFinished,
    CircuitOpened,
    CredentialsRefreshed,
    CredentialsRefreshFailed,
    Event,
    HedgeFired,
    TargetEjected,
)
from gateway.cache import PredictionCache
from gateway.routing import Router

__all__ = [
    "KNOWN_ERROR_CODES",
    "GatewayMetrics",
    "RouteCalls",
    "TargetMetrics",
    "build_info_family",
    "gateway_collector",
    "gateway_metrics",
    "route_and_cache_families",
]

# The error codes the gateway itself reports (exported at zero, never capped).
KNOWN_ERROR_CODES: tuple[str, ...] = (
    "DeadlineExceeded",
    "ThrottlingException",
    "ModelError",
    "ModelNotReadyException",
    "ValidationError",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalDependencyException",
    "NoHealthyTarget",
    "ConnectError",
    "ReadTimeout",
    "PoolTimeout",
)
_KINDS = (PRIMARY, HEDGE, RETRY)
_PRIMARY_WON = (PRIMARY, WON)
_OUTCOMES = (WON, LOST, CANCELLED, FAILED)
_CACHE_SOURCES = ("near", "redis", "stale", "coalesced", "miss")
_REFRESH_RESULTS = ("ok", "failed")
_REASONS = (*ROUTING_REASONS, OTHER)


class RouteCalls:
    """One route label's calls: how many, and their latency."""

    __slots__ = ("count", "latency")

    def __init__(self) -> None:
        self.count = 0
        self.latency = Histogram()


class TargetMetrics:
    """One (route, target) label pair: attempts by kind and outcome, errors, latency."""

    __slots__ = (
        "_other_attempts",
        "errors",
        "latency",
        "primary_won",
        "route",
        "route_calls",
        "target",
    )

    def __init__(self, route: str, target: str) -> None:
        self.route = route
        self.target = target
        # A primary attempt that won (nearly every attempt) is an int to bump; the
        # other kinds and outcomes are counted by (kind, outcome).
        self.primary_won = 0
        self._other_attempts: dict[tuple[str, str], int] = {}
        self.errors: dict[str, int] = {}
        self.latency = Histogram()  # attempts that won
        # Its route label's calls, once a call is counted through it.
        self.route_calls: RouteCalls | None = None

    @property
    def attempts(self) -> dict[tuple[str, str], int]:
        """Attempts by (kind, outcome)."""
        attempts = dict(self._other_attempts)
        if self.primary_won:
            attempts[_PRIMARY_WON] = self.primary_won
        return attempts

    def count_attempt(self, kind: str, outcome: str) -> None:
        if outcome == WON and kind == PRIMARY:
            self.primary_won += 1
        else:
            other = self._other_attempts
            key = (kind, outcome)
            other[key] = other.get(key, 0) + 1

    @property
    def calls(self) -> int:
        """Attempts sent to this target, whatever their kind and outcome."""
        return sum(self.attempts.values())

    @property
    def successes(self) -> int:
        return sum(n for (_, outcome), n in self.attempts.items() if outcome == WON)


class GatewayMetrics:
    """Counters of one gateway, fed by its events; register ``collector()`` to expose them."""

    # Dict and list updates only: called without the guard wrapper (see Hook).
    never_raises: ClassVar[bool] = True
    # No counter is labelled by request id: alone, it spares every call reading one (see Hook).
    reads_request_id: ClassVar[bool] = False

    def __init__(
        self,
        label_cap: int = DEFAULT_LABEL_CAP,
        routes: Mapping[str, Iterable[str]] | None = None,
        cache: bool = False,
        routed: Iterable[str] = (),
    ) -> None:
        """``routes``: configured route -> its target keys, the only label values
        (anything else counts as ``unconfigured``); None: any name, capped.
        ``routed``: the configured routes with an inference router target."""
        self.label_cap = label_cap
        self.configured: dict[str, frozenset[str]] | None = (
            None if routes is None else {name: frozenset(keys) for name, keys in routes.items()}
        )
        # Cache lookups are exported at zero only when there is a cache.
        self.cache_enabled = cache
        self._routes = LabelCap(label_cap)
        self._pairs = LabelCap(label_cap)
        self._codes = LabelCap(label_cap, KNOWN_ERROR_CODES)
        # Raw (route, target) -> its metrics, bounded: past the limit a
        # folded pair is looked up again on each event instead of remembered.
        self._by_name: dict[tuple[str, str], TargetMetrics] = {}
        self._unconfigured_remembered = 0  # of _by_name's pairs
        self.targets: dict[tuple[str, str], TargetMetrics] = {}
        self._route_calls: dict[str, RouteCalls] = {}
        self.call_errors: dict[tuple[str, str], int] = {}
        self.hedges: dict[str, int] = {}
        self.hedge_wins: dict[str, int] = {}
        self.retries: dict[str, int] = {}
        self.deadline_exceeded: dict[str, int] = {}
        self.ejections: dict[tuple[str, str], int] = {}
        self.cache_lookups: dict[str, int] = {}
        self.circuit_opens = 0
        self.credential_refreshes: dict[str, int] = {}
        self.routed_routes = tuple(routed)
        self.routing_reasons: dict[tuple[str, str], int] = {}
        self.routed_resources: dict[tuple[str, str], int] = {}
        self._router_names = LabelCap(label_cap)
        self._resources = LabelCap(label_cap)
        self._handlers: dict[type, Callable[[Any], None]] = {
            AttemptFinished: self._attempt,
            CallFinished: self._call,
            HedgeFired: self._hedge_fired,
            TargetEjected: self._ejected,
            CacheLookup: self._cache_lookup,
            CircuitOpened: self._circuit_opened,
            CredentialsRefreshed: self._refreshed,
            CredentialsRefreshFailed: self._refresh_failed,
        }

    # -- the hook ------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def route_label(self, route: str) -> str:
        configured = self.configured
        if configured is None:
            return self._routes(route)
        return route if route in configured else UNCONFIGURED

    def target(self, route: str, target: str) -> TargetMetrics:
        metrics = self._by_name.get((route, target))
        if metrics is None:
            metrics = self._fold(route, target)
        return metrics

    def _fold(self, route: str, target: str) -> TargetMetrics:
        configured = self.configured
        if configured is None:
            route_label = self._routes(route)
            target_label = target if self._pairs(f"{route_label}\x00{target}") != OTHER else OTHER
        else:
            targets = configured.get(route)
            route_label = route if targets is not None else UNCONFIGURED
            target_label = target if targets is not None and target in targets else UNCONFIGURED
        key = (route_label, target_label)
        metrics = self.targets.get(key)
        if metrics is None:
            metrics = self.targets[key] = TargetMetrics(route_label, target_label)
        if self._remember(configured is not None and target_label == UNCONFIGURED):
            self._by_name[(route, target)] = metrics
        return metrics

    def _remember(self, unconfigured: bool) -> bool:
        """Whether a folded pair is remembered (else folded again on each event).

        Configured pairs (any pair, without a config) and unconfigured ones
        (a bare endpoint name, or junk a client sends) each up to a bound of
        their own: junk never keeps a configured pair from being remembered.
        """
        limit = 4 * self.label_cap
        if not unconfigured:
            return len(self._by_name) - self._unconfigured_remembered < limit
        if self._unconfigured_remembered >= limit:
            return False
        self._unconfigured_remembered += 1
        return True

    def _attempt(self, event: AttemptFinished) -> None:
        # The one handler every attempt runs: lookups inlined, no helper calls
        # on the common path (a primary attempt that won).
        route, target, _, kind, outcome, duration, code = event
        metrics = self._by_name.get((route, target))
        if metrics is None:
            metrics = self._fold(route, target)
        metrics.count_attempt(kind, outcome)
        if outcome == WON:
            metrics.latency.observe(duration)
            if kind == HEDGE:
                _bump(self.hedge_wins, metrics.route)
        elif code is not None:
            code = self._codes(code)
            metrics.errors[code] = metrics.errors.get(code, 0) + 1
        if kind == RETRY:
            _bump(self.retries, metrics.route)

    def _call(self, event: CallFinished) -> None:
        if event.routing_reason is not None:
            self._routed(event)
        if event.operation != INVOKE_ENDPOINT:
            return  # calls_total and its histogram count Gateway.invoke, as documented
        # route_label, inlined: this runs on every call.
        route, configured = event.route, self.configured
        if configured is None:
            route = self._routes(route)
        elif route not in configured:
            route = UNCONFIGURED
        self._count_call(route, event.duration_s)
        code = event.error_code
        if code is not None:
            _bump(self.call_errors, (route, self._codes(code)))
            if code == "DeadlineExceeded":
                _bump(self.deadline_exceeded, route)

    @property
    def calls(self) -> dict[str, int]:
        """Calls by route label."""
        return {route: calls.count for route, calls in list(self._route_calls.items())}

    @property
    def call_latency(self) -> dict[str, Histogram]:
        """The calls' latency by route label."""
        return {route: calls.latency for route, calls in list(self._route_calls.items())}

    def _calls_of(self, route: str) -> RouteCalls:
        calls = self._route_calls.get(route)
        if calls is None:
            calls = self._route_calls[route] = RouteCalls()
        return calls

    def _count_call(self, route: str, duration: float) -> None:
        """A call of ``route`` (its label) in calls_total and the call latency histogram."""
        calls = self._calls_of(route)
        calls.count += 1
        calls.latency.observe(duration)

    def call_answered(self, route: str, target: str, attempt_s: float, call_s: float) -> None:
        """An InvokeEndpoint call its first attempt answered, counted without its events.

        What an ``AttemptFinished`` (primary, won) and a ``CallFinished`` with no
        error or routing reason count, for a caller that knows this is the lone
        hook (the sidecar's relay lane): two events built and dispatched less.
        """
        metrics = self._by_name.get((route, target))
        if metrics is None:
            metrics = self._fold(route, target)
        metrics.primary_won += 1
        metrics.latency.observe(attempt_s)
        # The folded pair's route label is the call's: both come from route_label's rules.
        calls = metrics.route_calls
        if calls is None:
            calls = metrics.route_calls = self._calls_of(metrics.route)
        calls.count += 1
        calls.latency.observe(call_s)

    def _routed(self, event: CallFinished) -> None:
        # The event's labels are bounded already; the cap bounds how many ARNs.
        if event.operation == INVOKE_ENDPOINT:
            route = self.route_label(event.route)
        else:
            route = self._router_names(event.route)
        reason = event.routing_reason or OTHER
        _bump(self.routing_reasons, (route, reason if reason in _REASONS else OTHER))
        _bump(self.routed_resources, (route, self._resources(event.routed_resource or OTHER)))

    def _hedge_fired(self, event: HedgeFired) -> None:
        _bump(self.hedges, self.route_label(event.route))

    def _ejected(self, event: TargetEjected) -> None:
        metrics = self.target(event.route, event.target)
        _bump(self.ejections, (metrics.route, metrics.target))

    def _cache_lookup(self, event: CacheLookup) -> None:
        _bump(self.cache_lookups, event.source)

    def _circuit_opened(self, event: CircuitOpened) -> None:
        self.circuit_opens += 1

    def _refreshed(self, event: CredentialsRefreshed) -> None:
        _bump(self.credential_refreshes, "ok")

    def _refresh_failed(self, event: CredentialsRefreshFailed) -> None:
        _bump(self.credential_refreshes, "failed")

    # -- exposition ----------------------------------------------------------

    def collector(self, extra: Callable[[], Iterator[Any]] | None = None) -> Any:
        """A ``prometheus_client`` collector reading these numbers at scrape time."""
        return _Collector(self, extra)


def _bump(counter: dict[Any, int], key: Any) -> None:
    counter[key] = counter.get(key, 0) + 1


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
    # Configured routes only: their count is fixed by the config file.
    state = families.TARGET_HEALTHY.family()
    for name, route in router.routes.items():
        for target in route.targets:
            state.add_metric([name, target.key], float(route.target_up(target)))
    yield state
    if cache is not None:
        stats = cache.stats
        yield families.CACHE_REDIS_ERRORS.value(stats.redis_errors + stats.redis_timeouts)
        yield families.CACHE_CIRCUIT_OPEN.value(float(stats.circuit_state in ("open", "half_open")))
        yield families.CACHE_CIRCUIT_OPEN_NODES.value(stats.circuit_open_nodes)


def build_info_family() -> Any:
    """``sagemaker_gateway_build_info{version,build} 1``."""
    from gateway._host.build import build_kind
    from gateway._host.version import __version__

    family = families.BUILD_INFO.family()
    family.add_metric([__version__, build_kind()], 1.0)
    return family


class _Collector:
    def __init__(self, metrics: GatewayMetrics, extra: Callable[[], Iterator[Any]] | None) -> None:
        self._metrics = metrics
        self._extra = extra
        self._build_info: Any = None

    def describe(self) -> list[Any]:
        # Returning nothing keeps registration from calling collect() early.
        return []

    def collect(self) -> Iterator[Any]:
        if self._build_info is None:
            self._build_info = build_info_family()  # the build does not change
        yield self._build_info
        yield from self._target_families()
        yield from self._call_families()
        yield from self._event_families()
        if self._extra is not None:
            yield from self._extra()

    def _target_families(self) -> Iterator[Any]:
        attempts = families.ATTEMPTS.family()
        errors = families.ATTEMPT_ERRORS.family()
        latency = families.ATTEMPT_DURATION.family()
        for target in self._all_targets():
            labels = [target.route, target.target]
            counts = dict(target.attempts)
            for kind in _KINDS:
                for outcome in _OUTCOMES:
                    attempts.add_metric([*labels, kind, outcome], counts.pop((kind, outcome), 0))
            for (kind, outcome), count in counts.items():
                attempts.add_metric([*labels, kind, outcome], count)
            for code, count in with_zeros(target.errors, KNOWN_ERROR_CODES):
                errors.add_metric([*labels, code], count)
            latency.add_metric(labels, target.latency.buckets(), target.latency.total)
        yield attempts
        yield errors
        yield latency

    def _all_targets(self) -> list[TargetMetrics]:
        """Every target counted so far, and the configured ones not yet called (at zero)."""
        metrics = self._metrics
        seen = dict(metrics.targets)
        for route, keys in self._configured().items():
            for key in sorted(keys):
                if (route, key) not in seen:
                    seen[(route, key)] = TargetMetrics(route, key)
        return list(seen.values())

    def _configured(self) -> dict[str, frozenset[str]]:
        configured = self._metrics.configured
        return configured if configured is not None else {}

    def _call_families(self) -> Iterator[Any]:
        metrics = self._metrics
        routes = list(self._configured())
        yield families.CALLS.by_label(with_zeros(metrics.calls, routes))
        errors = families.CALL_ERRORS.family()
        known = [(route, code) for route in routes for code in KNOWN_ERROR_CODES]
        for (route, code), count in with_zeros(metrics.call_errors, known):
            errors.add_metric([route, code], count)
        yield errors
        latency = families.CALL_DURATION.family()
        histograms = dict(metrics.call_latency)
        for route in routes:
            histograms.setdefault(route, Histogram())
        for route, histogram in histograms.items():
            latency.add_metric([route], histogram.buckets(), histogram.total)
        yield latency

    def _event_families(self) -> Iterator[Any]:
        metrics = self._metrics
        configured = self._configured()
        routes = list(configured)
        for family, counter in (
            (families.HEDGES, metrics.hedges),
            (families.HEDGE_WINS, metrics.hedge_wins),
            (families.RETRIES, metrics.retries),
            (families.DEADLINE_EXCEEDED, metrics.deadline_exceeded),
        ):
            yield family.by_label(with_zeros(counter, routes))
        ejections = families.EJECTIONS.family()
        pairs = [(route, key) for route, keys in configured.items() for key in sorted(keys)]
        for (route, target), count in with_zeros(metrics.ejections, pairs):
            ejections.add_metric([route, target], count)
        yield ejections
        reasons = families.ROUTED_CALLS.family()
        known = [(route, reason) for route in metrics.routed_routes for reason in _REASONS]
        for (route, reason), count in with_zeros(metrics.routing_reasons, known):
            reasons.add_metric([route, reason], count)
        yield reasons
        resources = families.ROUTED_RESOURCES.family()
        for (route, resource), count in list(metrics.routed_resources.items()):
            resources.add_metric([route, resource], count)
        yield resources
        sources = _CACHE_SOURCES if metrics.cache_enabled else ()
        yield families.CACHE_LOOKUPS.by_label(with_zeros(metrics.cache_lookups, sources))
        yield families.CACHE_CIRCUIT_OPENS.value(metrics.circuit_opens)
        yield families.CREDENTIAL_REFRESHES.by_label(
            with_zeros(metrics.credential_refreshes, _REFRESH_RESULTS)
        )
