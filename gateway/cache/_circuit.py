"""Circuit breakers in front of the Redis tier.

After ``failure_threshold`` consecutive errors or timeouts a circuit opens
and what it guards is skipped for ``reset_s`` (lookups are instant misses,
writes are dropped). Then it is half-open: exactly one trial is allowed, run
in the background by the tier (so no caller waits on a reconnect); its
success closes the circuit, its failure opens it for another ``reset_s``.

A single Redis (or a Sentinel-managed master) has one circuit. A Redis
Cluster has one per node on top of the tier-wide one, so a dead node turns
off its own slots, not the whole tier. Each breaker keeps its own state and
calls ``on_change`` when it moves, so the tier can summarise them in
:class:`CacheStats`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ._stats import CacheStats

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker"]

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


def _nothing() -> None:
    pass


class CircuitBreaker:
    __slots__ = (
        "_clock",
        "_failures",
        "_on_change",
        "_reopen_at",
        "_reset_s",
        "_stats",
        "_threshold",
        "closed",
        "name",
        "state",
    )

    def __init__(
        self,
        failure_threshold: int,
        reset_s: float,
        stats: CacheStats,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] = _nothing,
        name: str = "",
    ) -> None:
        self.name = name  # what it guards: "" for the whole tier, else a node
        self._threshold = failure_threshold
        self._reset_s = reset_s
        self._stats = stats
        self._clock = clock
        self._on_change = on_change
        self._failures = 0
        self._reopen_at = 0.0
        # A plain attribute, so the hot path checks it without a call.
        self.closed = True
        self.state = CLOSED

    def trial_due(self) -> bool:
        """True once per open period, when the trial may start (-> half-open)."""
        if self.state != OPEN or self._clock() < self._reopen_at:
            return False
        self._move(HALF_OPEN)
        return True

    def record_success(self) -> None:
        self._failures = 0
        # Only the trial closes an open circuit: a request that was already in
        # flight when it opened proves little about the server now.
        if self.state == HALF_OPEN:
            self.closed = True
            self._move(CLOSED)

    def record_failure(self) -> None:
        self._failures += 1
        if self.state == HALF_OPEN or (self.closed and self._failures >= self._threshold):
            self.trip()

    def trip(self) -> None:
        """Open now (also used when Redis is unreachable at start)."""
        self.closed = False
        self._stats.circuit_opens += 1
        self._reopen_at = self._clock() + self._reset_s
        self._move(OPEN)

    def _move(self, state: str) -> None:
        self.state = state
        self._on_change()
