# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Latency statistics and the retry budget.

Everything here is O(1) per recorded event; the occasional O(buckets) work
(rotating a time slice, recomputing a percentile) happens at most once per
slice, i.e. every few seconds, never per request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["LatencyWindow", "RetryBudget"]

Clock = Callable[[], float]

# Log-spaced buckets: 8 per doubling (each ~9% wide), from 10 us to ~100 s.
# Percentiles report a bucket's upper edge, so they err ~9% on the slow side,
# which for a hedge delay means slightly fewer hedges, never more.
_BUCKETS_PER_DOUBLING = 8
_LOWEST_S = 1e-5
_BUCKET_COUNT = math.ceil(math.log2(100.0 / _LOWEST_S) * _BUCKETS_PER_DOUBLING) + 1


def _bucket_upper_edge(index: int) -> float:
    return _LOWEST_S * math.pow(2.0, (index + 1) / _BUCKETS_PER_DOUBLING)


def _bucket_index(seconds: float) -> int:
    if seconds <= _LOWEST_S:
        return 0
    index = int(math.log2(seconds / _LOWEST_S) * _BUCKETS_PER_DOUBLING)
    return index if index < _BUCKET_COUNT else _BUCKET_COUNT - 1


class LatencyWindow:
    """A sliding-window latency histogram: a ring of per-slice log histograms.

    ``record`` is O(1); the window slides one slice (``window_s / slices``)
    at a time, so "the last 30 s" is really "the last 27-30 s".
    """

    __slots__ = ("_count", "_ring", "_slice_end", "_slice_s", "_slot", "_totals")

    def __init__(self, window_s: float, slices: int, now: float) -> None:
        if window_s <= 0 or slices < 1:
            raise ValueError("window_s must be > 0 and slices >= 1")
        self._slice_s = window_s / slices
        self._ring = [[0] * _BUCKET_COUNT for _ in range(slices)]
        self._totals = [0] * _BUCKET_COUNT
        self._count = 0
        self._slot = 0
        self._slice_end = now + self._slice_s

    @property
    def count(self) -> int:
        """Samples currently inside the window."""
        return self._count

    def record(self, seconds: float, now: float) -> None:
        if now >= self._slice_end:
            self._advance(now)
        if seconds > _LOWEST_S:
            index = int(math.log2(seconds / _LOWEST_S) * _BUCKETS_PER_DOUBLING)
            if index >= _BUCKET_COUNT:
                index = _BUCKET_COUNT - 1
        else:
            index = 0
        self._ring[self._slot][index] += 1
        self._totals[index] += 1
        self._count += 1

    def quantile(self, q: float, now: float) -> float | None:
        """Upper edge of the bucket holding quantile ``q``; None when empty."""
        if now >= self._slice_end:
            self._advance(now)
        if self._count == 0:
            return None
        rank = max(1, math.ceil(q * self._count))
        seen = 0
        for index, hits in enumerate(self._totals):
            seen += hits
            if seen >= rank:
                return _bucket_upper_edge(index)
        return _bucket_upper_edge(_BUCKET_COUNT - 1)  # pragma: no cover - rank <= count

    def tail_start(self, win_share: float, now: float) -> float | None:
        """Where the tail starts: the least delay worth hedging at, or None (no tail).

        A hedge fired at delay ``d`` wins when its own answer, typically the
        median ``m``, lands before the primary's: when the primary takes
        longer than ``d + m``. Among the samples slower than ``d``, the share
        slower than ``d + m`` is the share of hedges fired at ``d`` that
        would win. This is the least bucket edge ``d`` from the median up
        where that share reaches ``win_share``: above a body with no tail it
        never does (an answer a little late is nearly always back before a
        hedge would be), so nothing is hedged; with a tail, ``d`` sits where
        the tail outweighs what is left of the body. One pass over the
        buckets (a refresh, every few seconds), none per request.
        """
        median = self.quantile(0.5, now)
        if median is None:
            return None
        totals = self._totals
        # above[i]: samples in buckets above bucket i (all slower than its upper edge).
        above = [0] * _BUCKET_COUNT
        running = 0
        for index in range(_BUCKET_COUNT - 1, -1, -1):
            above[index] = running
            running += totals[index]
        start = _bucket_index(median)
        for index in range(start, _BUCKET_COUNT):
            slower = above[index]
            if slower == 0:
                return None
            delay = _bucket_upper_edge(index)
            # Samples in the bucket holding delay + m may be either side of it:
            # only those above it count, so the share errs low (fewer hedges).
            if above[_bucket_index(delay + median)] >= win_share * slower:
                return delay
        return None  # pragma: no cover - the last bucket has nothing above it

    def _advance(self, now: float) -> None:
        # Expire whole slices that ended; after a long idle gap, all of them.
        slices = len(self._ring)
        elapsed = int((now - self._slice_end) // self._slice_s) + 1
        totals = self._totals
        for _ in range(min(slices, elapsed)):
            self._slot = (self._slot + 1) % slices
            expired = self._ring[self._slot]
            for index, hits in enumerate(expired):
                if hits:
                    totals[index] -= hits
                    self._count -= hits
                    expired[index] = 0
        self._slice_end += self._slice_s * elapsed


class RetryBudget:
    """Finagle-style retry budget over a sliding TTL.

    Every request deposits ``ratio`` of a token and every retry withdraws one;
    on top, a reserve of ``min_per_second * ttl_s`` tokens lets low-traffic
    routes retry at all. Deposits and withdrawals older than ``ttl_s`` expire
    (tracked in ``slices`` time slices), so a failure storm can never spend
    more than ``ratio`` of recent traffic plus the reserve.
    """

    __slots__ = (
        "_clock",
        "_cur_deposits",
        "_cur_withdrawals",
        "_ratio",
        "_reserve",
        "_ring_deposits",
        "_ring_withdrawals",
        "_slice_end",
        "_slice_s",
        "_slot",
        "_sum_deposits",
        "_sum_withdrawals",
    )

    def __init__(
        self,
        ratio: float,
        min_per_second: float,
        ttl_s: float = 10.0,
        *,
        slices: int = 10,
        clock: Clock = time.monotonic,
    ) -> None:
        if ratio < 0 or min_per_second < 0 or ttl_s <= 0 or slices < 1:
            raise ValueError("ratio and min_per_second must be >= 0, ttl_s > 0, slices >= 1")
        self._clock = clock
        self._ratio = ratio
        self._reserve = min_per_second * ttl_s
        self._slice_s = ttl_s / slices
        # Closed slices hold their counts; the open one counts in _cur_*.
        self._ring_deposits = [0] * slices
        self._ring_withdrawals = [0] * slices
        self._sum_deposits = 0
        self._sum_withdrawals = 0
        self._cur_deposits = 0
        self._cur_withdrawals = 0
        self._slot = 0
        self._slice_end = clock() + self._slice_s

    @property
    def balance(self) -> float:
        """Tokens available now (may be fractional)."""
        now = self._clock()
        if now >= self._slice_end:
            self._advance(now)
        return self._balance()

    def deposit(self) -> None:
        self.deposit_at(self._clock())

    def deposit_at(self, now: float) -> None:
        """``deposit`` with a time the caller already read (saves a clock call)."""
        if now >= self._slice_end:
            self._advance(now)
        self._cur_deposits += 1

    def try_withdraw(self) -> bool:
        now = self._clock()
        if now >= self._slice_end:
            self._advance(now)
        if self._balance() < 1.0:
            return False
        self._cur_withdrawals += 1
        return True

    def _balance(self) -> float:
        deposits = self._sum_deposits + self._cur_deposits
        withdrawals = self._sum_withdrawals + self._cur_withdrawals
        return self._reserve + self._ratio * deposits - withdrawals

    def _advance(self, now: float) -> None:
        slices = len(self._ring_deposits)
        elapsed = int((now - self._slice_end) // self._slice_s) + 1
        if elapsed > slices:
            # Idle for longer than the TTL: everything, open slice included, expired.
            self._ring_deposits = [0] * slices
            self._ring_withdrawals = [0] * slices
            self._sum_deposits = self._sum_withdrawals = 0
            elapsed_steps = 0
        else:
            elapsed_steps = elapsed
        for step in range(elapsed_steps):
            # The first step closes the open slice; later ones are empty.
            self._slot = (self._slot + 1) % slices
            self._sum_deposits -= self._ring_deposits[self._slot]
            self._sum_withdrawals -= self._ring_withdrawals[self._slot]
            closing_deposits = self._cur_deposits if step == 0 else 0
            closing_withdrawals = self._cur_withdrawals if step == 0 else 0
            self._ring_deposits[self._slot] = closing_deposits
            self._ring_withdrawals[self._slot] = closing_withdrawals
            self._sum_deposits += closing_deposits
            self._sum_withdrawals += closing_withdrawals
        self._cur_deposits = 0
        self._cur_withdrawals = 0
        self._slice_end += self._slice_s * elapsed
