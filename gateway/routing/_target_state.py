# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Per-target runtime state, its updates, and the outcome vocabulary gateway reports in."""

from __future__ import annotations

import enum
import math
from typing import Final

from ._config import EjectionConfig, Target

__all__ = ["INV_TAU", "Outcome", "TargetHealth", "TargetState"]

# Peak-EWMA time constant (Finagle and Linkerd use 10 s).
_TAU_S = 10.0
INV_TAU: Final = 1.0 / _TAU_S  # Final: compiled, a C static, not a module look-up
# A failure counts as a sample at least this many times the current EWMA (and
# the route's fastest answering target's, see Route.finish), so traffic drains
# from a failing target before ejection kicks in; capped so a long failure
# streak cannot push the cost to infinity.
_FAILURE_PENALTY = 2.0
_MAX_EWMA_S = 60.0


class Outcome(enum.Enum):
    """How an attempt ended, as far as routing cares."""

    #: A response arrived and the call succeeded: latency recorded.
    SUCCESS = "success"
    #: The target's own state failed the attempt: a server or transport fault
    #: (5xx, reset, timeout), or an answer about the target itself (its endpoint
    #: not found, its model failing or not ready, access to it denied). Counts
    #: toward ejection; its latency can only raise the target's cost.
    FAILURE = "failure"
    #: The caller's mistake (a malformed body, a bad member): any target would
    #: have answered the same, so it counts against none. No latency sample
    #: either: an error answer is no measure of how fast the target serves.
    NEUTRAL = "neutral"
    #: Cancelled by the caller, or a hedge that lost the race: no latency
    #: sample and never a failure (the target did nothing wrong).
    CANCELLED = "cancelled"


class TargetHealth(enum.Enum):
    HEALTHY = "healthy"
    #: Out of rotation until its ejection time passes.
    EJECTED = "ejected"
    #: Ejection time passed: offered to one request at a time until a
    #: success re-admits it or a failure ejects it again, for longer.
    PROBING = "probing"


class TargetState:
    """Live state of one :class:`Target` inside one route.

    The public read-only properties are for metrics and tests. The
    :class:`Route` changes the state only through the methods below; on the
    hot path it reads a few ``_fields`` directly (the balancing cost), where
    a property call would cost more than the work itself.
    """

    __slots__ = (
        "_consecutive_failures",
        "_cool_until",
        "_ejected_until",
        "_ejection_level",
        "_ejections",
        "_ewma",
        "_inv_weight",
        "_last_check",
        "_outstanding",
        "_prev_failures",
        "_prev_successes",
        "_readmitted_at",
        "_stamp",
        "_state",
        "_window_end",
        "_window_failures",
        "_window_successes",
        "key",
        "target",
    )

    def __init__(self, target: Target) -> None:
        self.target = target
        self.key = target.key
        self._inv_weight = 1.0 / target.weight
        self._state = TargetHealth.HEALTHY
        self._outstanding = 0
        # Peak EWMA of latency in seconds at time _stamp; 0.0 means "no sample
        # yet" (real samples are clamped to >= 1 us).
        self._ewma = 0.0
        self._stamp = 0.0
        self._consecutive_failures = 0
        # Success-rate window: the current window's counts, plus the previous
        # window's, blended in proportionally (a cheap sliding window).
        self._window_end = -math.inf
        self._window_successes = 0
        self._window_failures = 0
        self._prev_successes = 0
        self._prev_failures = 0
        self._ejections = 0
        self._ejection_level = 0
        self._ejected_until = 0.0
        self._readmitted_at = 0.0
        self._last_check = -math.inf
        # Clock time a throttle's Retry-After asked this target to be left alone until.
        self._cool_until = 0.0

    @property
    def state(self) -> TargetHealth:
        return self._state

    @property
    def outstanding(self) -> int:
        """Attempts started and not yet finished."""
        return self._outstanding

    @property
    def ewma_ms(self) -> float:
        """The peak-EWMA latency as last updated, in ms (0.0 before any sample)."""
        return self._ewma * 1000.0

    @property
    def ejections(self) -> int:
        """How many times this target has been ejected (monotonic, for metrics)."""
        return self._ejections

    @property
    def ejected_until(self) -> float | None:
        """Clock time the current ejection ends, or None when not ejected."""
        return self._ejected_until if self._state is TargetHealth.EJECTED else None

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive_failures

    @property
    def cool_until(self) -> float:
        """Clock time a throttle's ``Retry-After`` keeps this target out of picks until."""
        return self._cool_until

    @property
    def priority(self) -> int:
        return self.target.priority

    # -- updates: the route calls these; nothing else writes the fields -----------

    def begin(self) -> None:
        """An attempt went out to this target."""
        self._outstanding += 1

    def end(self) -> None:
        """An attempt to this target ended, however it ended."""
        self._outstanding -= 1

    def record_answer(self, elapsed: float, now: float, window_s: float) -> None:
        """A successful answer: its latency, and a success counted."""
        ewma = self._ewma
        if elapsed >= ewma:
            self._ewma = elapsed  # the "peak" in peak EWMA: rise at once
        else:
            weight = math.exp((self._stamp - now) * INV_TAU)
            self._ewma = ewma * weight + elapsed * (1.0 - weight)
        self._stamp = now
        self._consecutive_failures = 0
        if now >= self._window_end:
            self._roll_window(now, window_s)
        self._window_successes += 1

    def record_failed_latency(self, elapsed: float, now: float, floor: float) -> None:
        """A failure's latency: it can only raise the EWMA (a fast failure is no fast target).

        ``floor`` is the least latency the failure may count as, before the
        penalty: the fastest latency the route knows of its other targets.
        """
        sample = max(elapsed, max(self._ewma, floor) * _FAILURE_PENALTY)
        self._ewma = sample if sample < _MAX_EWMA_S else _MAX_EWMA_S
        self._stamp = now

    def count_failure(self, now: float, window_s: float) -> None:
        """A failure of a HEALTHY target, toward its ejection."""
        self._consecutive_failures += 1
        if now >= self._window_end:
            self._roll_window(now, window_s)
        self._window_failures += 1

    def cool_down(self, until: float) -> None:
        """Left out of picks until ``until`` (a later cooldown never shortens one)."""
        if until > self._cool_until:
            self._cool_until = until

    def clear_failures(self) -> None:
        """A passed active check: the failure streak ends."""
        self._consecutive_failures = 0

    def mark_checked(self, now: float) -> None:
        """An active check was made now."""
        self._last_check = now

    def failing(self, now: float, ejection: EjectionConfig) -> bool:
        """Whether recent failures call for ejection: a streak, or a low success rate."""
        if self._consecutive_failures >= ejection.consecutive_failures:
            return True
        # Sliding-window estimate: the previous window weighted by how much
        # of it still overlaps the last `window_s`.
        window = ejection.success_rate_window_s
        overlap = max(0.0, (self._window_end - now) / window)
        successes = self._window_successes + self._prev_successes * overlap
        failures = self._window_failures + self._prev_failures * overlap
        total = successes + failures
        return (
            total >= ejection.success_rate_min_requests
            and successes / total < ejection.success_rate_threshold
        )

    def eject(self, now: float, ejection: EjectionConfig, draw: float) -> None:
        """Out of rotation, for longer each time; ``draw`` in [0, 1) jitters the duration."""
        # The multiplier decays by one per base_ejection_s spent healthy, so a
        # target that flapped long ago starts again from the base time.
        if self._state is TargetHealth.HEALTHY and self._ejection_level:
            quiet = now - self._readmitted_at
            self._ejection_level = max(
                0, self._ejection_level - int(quiet // ejection.base_ejection_s)
            )
        self._ejection_level += 1
        self._ejections += 1
        duration = min(ejection.base_ejection_s * self._ejection_level, ejection.max_ejection_s)
        duration *= 1.0 + ejection.jitter * (2.0 * draw - 1.0)
        self._ejected_until = now + duration
        self._state = TargetHealth.EJECTED
        self._consecutive_failures = 0
        self._clear_window()

    def readmit(self, now: float, probe_latency: float | None = None) -> None:
        """Back in rotation; ``probe_latency`` replaces the stale pre-ejection EWMA."""
        if probe_latency is not None:
            self._ewma = probe_latency
        self._state = TargetHealth.HEALTHY
        self._readmitted_at = now
        self._clear_window()

    def start_probing_if_due(self, now: float) -> bool:
        """An ejection whose time is up becomes PROBING; True when it did."""
        if self._state is TargetHealth.EJECTED and self._ejected_until <= now:
            self._state = TargetHealth.PROBING
            return True
        return False

    def _roll_window(self, now: float, window_s: float) -> None:
        if now >= self._window_end + window_s:
            self._prev_successes = self._prev_failures = 0
            self._window_end = now + window_s
        else:
            self._prev_successes = self._window_successes
            self._prev_failures = self._window_failures
            self._window_end += window_s
        self._window_successes = self._window_failures = 0

    def _clear_window(self) -> None:
        self._window_successes = self._window_failures = 0
        self._prev_successes = self._prev_failures = 0

    def __repr__(self) -> str:
        return (
            f"<TargetState {self.key} {self._state.value} outstanding={self._outstanding} "
            f"ewma_ms={self.ewma_ms:.3f} ejections={self._ejections}>"
        )
