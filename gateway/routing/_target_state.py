# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Per-target runtime state and the outcome vocabulary gateway reports in."""

from __future__ import annotations

import enum
import math

from ._config import Target

__all__ = ["Outcome", "TargetHealth", "TargetState"]


class Outcome(enum.Enum):
    """How an attempt ended, as far as routing cares."""

    #: A response arrived and the call succeeded: latency recorded.
    SUCCESS = "success"
    #: A server or transport fault (5xx, reset, timeout): counts toward ejection.
    FAILURE = "failure"
    #: A request-level error (400 validation, 424 model error): the target did
    #: its job, so latency is recorded and health is not affected.
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
    ``_fields`` are read and written directly by :class:`Route` on the hot
    path, where a property call would cost more than the work itself.
    """

    __slots__ = (
        "_consecutive_failures",
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

    def __repr__(self) -> str:
        return (
            f"<TargetState {self.key} {self._state.value} outstanding={self._outstanding} "
            f"ewma_ms={self.ewma_ms:.3f} ejections={self._ejections}>"
        )
