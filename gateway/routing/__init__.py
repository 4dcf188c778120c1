"""Routing: endpoint model, balancing, health/ejection, model affinity, latency stats.

Pure logic driven by observations and an injectable clock: no sockets, no
asyncio, no imports of ``gateway`` or ``cache``. One call of gateway's
invoke, with a hedge and a retry, drives a route like this::

    route = router.resolve(endpoint)            # configured, or a default route
    target = route.pick(target_model)           # never None for a primary pick
    started = route.start(target)               # then send, without awaiting first
    ... no answer after route.hedge_delay() seconds (None: never hedge) ...
    if route.try_acquire_hedge():
        backup = route.pick(target_model, exclude=(target,), reuse_excluded=True)
        backup_started = route.start_backup(backup)
    ... the first success wins:
    route.finish(winner, winner_started, Outcome.SUCCESS)
    route.finish(loser, loser_started, Outcome.CANCELLED)
    ... or on a retryable failure:
    route.finish(target, started, Outcome.FAILURE)
    if route.try_acquire_retry(attempts_made=1):
        await asyncio.sleep(route.backoff(1))
        retry = route.pick(target_model, exclude=(target,), reuse_excluded=True)
        retry_started = route.start_backup(retry)

Only a success is a latency sample. ``Outcome.FAILURE`` is the target's own
state (a server fault, its endpoint not found, its model failing): it counts
toward ejection and can only raise the target's cost, so a target that fails
fast never draws calls for it. ``Outcome.NEUTRAL`` is the caller's mistake (a
malformed body): any target would answer the same, so it counts against none.
``Route.target_up`` says which targets count as healthy for readiness.
"""

from gateway.errors import ConfigError

from ._affinity import rendezvous_score
from ._config import (
    EjectionConfig,
    HealthCheckConfig,
    HedgeConfig,
    RetryConfig,
    RouteConfig,
    Target,
    parse_routes,
)
from ._hedge_policy import HedgeBudget, HedgeDelay
from ._route import HealthObserver, Route
from ._router import Router
from ._stats import LatencyWindow, RetryBudget
from ._target_state import Outcome, TargetHealth, TargetState

__all__ = [
    "ConfigError",
    "EjectionConfig",
    "HealthCheckConfig",
    "HealthObserver",
    "HedgeBudget",
    "HedgeConfig",
    "HedgeDelay",
    "LatencyWindow",
    "Outcome",
    "RetryBudget",
    "RetryConfig",
    "Route",
    "RouteConfig",
    "Router",
    "Target",
    "TargetHealth",
    "TargetState",
    "parse_routes",
    "rendezvous_score",
]
