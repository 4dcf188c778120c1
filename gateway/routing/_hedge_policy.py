# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The hedging policy: when a hedge fires (``HedgeDelay``) and how many may (``HedgeBudget``).

O(1) per recorded event; the delay is recomputed at most once per refresh.
"""

from __future__ import annotations

from ._stats import LatencyWindow

__all__ = ["HedgeBudget", "HedgeDelay"]


# Hedge outcomes needed before they move the delay, and how far one refresh moves it.
_MIN_HEDGE_EVIDENCE = 20
_RAISE_STEP = 1.25
_MAX_RAISE = 8.0


class HedgeDelay:
    """When to hedge: where the tail starts, while hedges there win; and how they fared.

    * Until the window holds ``warmup_samples`` latencies: ``initial_s``, so
      hedges fire from a route's first call.
    * Then, by default, :meth:`LatencyWindow.tail_start`: the least delay at
      which ``win_share`` of the hedges fired would answer first. With no
      tail there is no such delay and nothing is hedged, so the budget is
      spent only when there is a tail to cut.
    * The hedges actually sent check that estimate: every 20 hedges, while
      fewer than half of ``win_share`` of them won, the delay goes up by a
      quarter (at most 8x); once they win as often as aimed, it comes back
      down. The route refreshes as soon as 20 have been sent, so a wrong
      estimate costs a few dozen hedges, not a refresh period's worth.
    * An explicit ``quantile`` replaces the tail estimate (Finagle's fixed
      percentile), for operators who want it.

    Pure logic, driven by :class:`Route` with its clock's readings.
    """

    __slots__ = (
        "_fired_since",
        "_floor_s",
        "_initial_s",
        "_quantile",
        "_raise",
        "_warmup_samples",
        "_win_share",
        "_window",
        "_won_since",
        "fired",
        "median_s",
        "won",
    )

    def __init__(
        self,
        window: LatencyWindow,
        *,
        initial_s: float | None,
        floor_s: float,
        win_share: float,
        warmup_samples: int,
        quantile: float | None = None,
    ) -> None:
        self._window = window
        self._initial_s = initial_s
        self._floor_s = floor_s
        self._win_share = win_share
        self._warmup_samples = warmup_samples
        self._quantile = quantile
        self._raise = 1.0
        self._fired_since = 0
        self._won_since = 0
        #: Hedges sent, and those that answered before their primary, since the start.
        self.fired = 0
        self.won = 0
        #: The window's median at the last refresh (0.0 before any sample).
        self.median_s = 0.0

    @property
    def warming_up(self) -> bool:
        return self._window.count < self._warmup_samples

    @property
    def raised_by(self) -> float:
        """How far the hedges' own results have pushed the delay up (1.0: not at all)."""
        return self._raise

    def on_fired(self) -> bool:
        """Count a hedge sent; True when enough have been sent to judge them (refresh soon)."""
        self.fired += 1
        self._fired_since += 1
        return self._fired_since >= _MIN_HEDGE_EVIDENCE

    def on_won(self) -> None:
        self.won += 1
        self._won_since += 1

    def refresh(self, now: float) -> float | None:
        """The delay to use until the next refresh; None means "do not hedge"."""
        window = self._window
        median = window.quantile(0.5, now)
        self.median_s = 0.0 if median is None else median
        if window.count < self._warmup_samples:
            delay = self._initial_s
        else:
            self._learn_from_hedges()
            if self._quantile is not None:
                delay = window.quantile(self._quantile, now)
            else:
                delay = window.tail_start(self._win_share, now)
            if delay is not None:
                delay *= self._raise
        if delay is None:
            return None
        return delay if delay > self._floor_s else self._floor_s

    def _learn_from_hedges(self) -> None:
        fired = self._fired_since
        if fired < _MIN_HEDGE_EVIDENCE:
            return  # too few to judge: keep counting
        share = self._won_since / fired
        if share < self._win_share / 2:
            self._raise = min(self._raise * _RAISE_STEP, _MAX_RAISE)
        elif share >= self._win_share:
            self._raise = max(self._raise / _RAISE_STEP, 1.0)
        self._fired_since = self._won_since = 0


class HedgeBudget:
    """Each primary request deposits ``ratio`` tokens; a hedge spends one.

    The balance is capped so a long calm period cannot bank a burst of
    hedges: when latency jumps for everyone, hedges stay near ``ratio`` of
    traffic plus at most ``cap`` up front.
    """

    __slots__ = ("_cap", "_ratio", "_tokens")

    def __init__(self, ratio: float, cap: float | None = None) -> None:
        self._ratio = ratio
        # ~200 requests' worth of deposits (10 hedges at 5%), at least one.
        self._cap = cap if cap is not None else max(1.0, ratio * 200.0)
        # Full from the start: a new route's first calls (cold connections, a
        # cold model) are when a hedge helps most, and the cap bounds them.
        self._tokens = self._cap

    @property
    def tokens(self) -> float:
        return self._tokens

    def deposit(self) -> None:
        tokens = self._tokens + self._ratio
        self._tokens = tokens if tokens < self._cap else self._cap

    def can_spend(self) -> bool:
        return self._tokens >= 1.0

    def try_spend(self) -> bool:
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def spend(self) -> None:
        self._tokens -= 1.0
