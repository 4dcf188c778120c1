"""The logging sink: a WARNING line per state change an operator must see.

Target ejected / re-admitted, Redis lost / back, credentials refresh failed:
one line each on the ``gateway.state`` logger, rate-limited per subject so a
flapping target cannot flood the log. Calls themselves are never logged here
(the sidecar's access log covers requests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway._observe.events import (
    CircuitClosed,
    CircuitOpened,
    CredentialsRefreshFailed,
    Event,
    TargetEjected,
    TargetReadmitted,
)

__all__ = ["RateLimiter", "StateLog"]


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
