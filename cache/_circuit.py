"""Circuit breaker in front of the Redis tier.

After ``failure_threshold`` consecutive errors or timeouts the tier is
skipped for ``reset_s`` (lookups are instant misses, writes are dropped).
Then it is half-open: exactly one trial is allowed, run in the background by
the tier (so no caller waits on a reconnect); its success closes the
circuit, its failure opens it for another ``reset_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ._stats import CacheStats

__all__ = ["CircuitBreaker"]

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


class CircuitBreaker:
    __slots__ = ("_clock", "_failures", "_reopen_at", "_reset_s", "_stats", "_threshold", "closed")

    def __init__(
        self,
        failure_threshold: int,
        reset_s: float,
        stats: CacheStats,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._threshold = failure_threshold
        self._reset_s = reset_s
        self._stats = stats
        self._clock = clock
        self._failures = 0
        self._reopen_at = 0.0
        # A plain attribute, so the hot path checks it without a call.
        self.closed = True

    @property
    def state(self) -> str:
        return self._stats.circuit_state

    def trial_due(self) -> bool:
        """True once per open period, when the trial may start (-> half-open)."""
        if self._stats.circuit_state != OPEN or self._clock() < self._reopen_at:
            return False
        self._stats.circuit_state = HALF_OPEN
        return True

    def record_success(self) -> None:
        self._failures = 0
        # Only the trial closes an open circuit: a request that was already in
        # flight when it opened proves little about the server now.
        if self._stats.circuit_state == HALF_OPEN:
            self.closed = True
            self._stats.circuit_state = CLOSED

    def record_failure(self) -> None:
        self._failures += 1
        if self._stats.circuit_state == HALF_OPEN or (
            self.closed and self._failures >= self._threshold
        ):
            self.trip()

    def trip(self) -> None:
        """Open now (also used when Redis is unreachable at start)."""
        self.closed = False
        self._stats.circuit_state = OPEN
        self._stats.circuit_opens += 1
        self._reopen_at = self._clock() + self._reset_s
