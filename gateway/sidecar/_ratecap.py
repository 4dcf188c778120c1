"""A rate cap toward each bidder URL: token buckets, spent on the best-scored requests first.

``[rtb.rate_cap]`` gives each bidder URL a cap in requests per second (``rps``
for every bidder, ``bidders`` per URL). The whole sidecar keeps under it: each
of its N worker processes takes 1/N of every cap and of every bucket, so the
sum over workers never exceeds the cap.

Which requests a cap refuses, when more are kept than the bidders may take:
the lowest-scored, not the last to arrive. Two parts do it, neither holding a
request back:

- A score cut that adapts. Every 100 ms the offered rate (kept requests
  asking for a bidder) is compared with the cap; over it, the cut is the
  score under which the excess share of the last 512 requests fell, and a
  request scored under the cut is answered no-bid at once (``rate_cap``),
  spending no token. Under the cap the cut is off.
- Priority within a loop turn. While a bucket is more than half full a
  request takes a token at once. Below that, the requests that ask in one
  event-loop turn (a scoring batch's decisions resolve together, in one
  turn) are served at its end, best score first, while tokens last; the
  rest are no-bid. No request waits past the turn it asked in.

The cut follows the score distribution of the traffic itself, so it needs
no setting; the buckets make the cap hard (what the cut lets through past
the cap is refused, lowest first within the turn). Requests kept without a
score rank as follows: a rule's keep or holdback as a score of 1, a request
kept unscored (failed open, unreadable) as the policy's threshold.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from gateway._config.reader import section, setting

__all__ = ["BidderCap", "RateCapConfig"]

_RING: Final = 512  # recent priorities the cut is read from (a power of two)
_MASK: Final = _RING - 1
_WINDOW_S: Final = 0.1  # how often the offered rate (and the cut) are updated
_INF: Final = math.inf


@section("rtb.rate_cap")
class RateCapConfig:
    """The ``[rtb.rate_cap]`` table (see the module docstring)."""

    rps: float | None = setting(default=None, gt=0)  # every bidder URL's cap
    bidders: Mapping[str, float] = setting(factory=dict, gt=0)  # URL -> its cap (wins over rps)
    burst_s: float = setting(default=0.05, gt=0, le=10)  # a bucket holds this many seconds of rate

    def rates(self, urls: Sequence[str]) -> list[float | None]:
        """Each bidder's cap (requests per second; None: uncapped), in ``urls`` order."""
        return [self.bidders.get(url, self.rps) for url in urls]


class BidderCap:
    """Token buckets per bidder (one worker's share) and admission by score.

    ``admit(priority)`` gives a bidder's index, or -1 (capped: answer no-bid),
    or a future of either when the request must wait for the end of the turn.
    """

    def __init__(
        self,
        rates: Sequence[float | None],
        burst_s: float,
        share: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._count = len(rates)
        self._rates: list[float] = []
        self._capacity: list[float] = []
        self._roomy: list[float] = []
        self._tokens: list[float] = []
        self._stamps: list[float] = []
        self._total = 0.0
        self.set_rates(rates, burst_s, share)
        self._cursor = 0
        self._pending: list[tuple[float, asyncio.Future[int]]] = []
        self._recent = [0.0] * _RING
        self._seen = 0
        self._window_start = clock()
        self._window_seen = 0  # `_seen` when the window began
        self._offered: float | None = None
        self.cut = -_INF
        self.admitted = 0
        self.cut_off = 0  # refused by the cut
        self.out_of_tokens = 0  # refused at the end of a turn: no token left

    def set_rates(self, rates: Sequence[float | None], burst_s: float, share: int = 1) -> None:
        """New caps (a reload); each bucket keeps its tokens, up to its new size."""
        if len(rates) != self._count:
            raise ValueError("one rate per bidder")
        now = self._clock()
        old = self._tokens
        self._rates = [_INF if rate is None else rate / share for rate in rates]
        self._capacity = [_INF if r == _INF else max(1.0, r * burst_s) for r in self._rates]
        self._roomy = [1.0 + capacity / 2 for capacity in self._capacity]
        self._tokens = [
            capacity if not old else min(capacity, old[index])
            for index, capacity in enumerate(self._capacity)
        ]
        self._stamps = [now] * self._count
        self._total = sum(self._rates)

    @property
    def rates(self) -> list[float]:
        """This worker's cap per bidder (inf: uncapped)."""
        return list(self._rates)

    def admit(self, priority: float) -> int | asyncio.Future[int]:
        now = self._clock()
        seen = self._seen
        self._recent[seen & _MASK] = priority
        self._seen = seen + 1
        if now - self._window_start >= _WINDOW_S:
            self._new_window(now)
        if priority < self.cut:
            self.cut_off += 1
            return -1
        if not self._pending:
            # The common case first: the next bidder's bucket is roomy as it stands.
            index = self._cursor
            have = self._tokens[index]
            if have >= self._roomy[index]:
                self._tokens[index] = have - 1.0
                self._cursor = index + 1 if index + 1 < self._count else 0
                self.admitted += 1
                return index
            target = self._take(now, self._roomy)
            if target >= 0:
                self.admitted += 1
                return target
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._serve_turn)
        self._pending.append((priority, future))
        return future

    def _take(self, now: float, floor: Sequence[float] | None) -> int:
        """A bidder (round robin) with a token (above ``floor``, if given): spent. -1: none."""
        count = self._count
        tokens = self._tokens
        for step in range(count):
            index = (self._cursor + step) % count
            have = tokens[index]
            capacity = self._capacity[index]
            if have < capacity:
                have = min(capacity, have + (now - self._stamps[index]) * self._rates[index])
                tokens[index] = have
                self._stamps[index] = now
            if have >= (1.0 if floor is None else floor[index]):
                tokens[index] = have - 1.0
                self._cursor = index + 1 if index + 1 < count else 0
                return index
        return -1

    def _serve_turn(self) -> None:
        """The end of a loop turn: the waiting requests, best score first, while tokens last."""
        pending, self._pending = self._pending, []
        pending.sort(key=_by_priority, reverse=True)
        now = self._clock()
        exhausted = False
        for _, future in pending:
            if future.done():  # its request went away
                continue
            target = -1 if exhausted else self._take(now, None)
            if target < 0:
                exhausted = True
                self.out_of_tokens += 1
            else:
                self.admitted += 1
            future.set_result(target)

    def _new_window(self, now: float) -> None:
        """Every ``_WINDOW_S``: the offered rate (averaged with the last), and the cut."""
        rate = (self._seen - self._window_seen) / (now - self._window_start)
        offered = self._offered
        self._offered = rate if offered is None else (offered + rate) / 2
        self._window_start = now
        self._window_seen = self._seen
        self.cut = self._cut()

    def _cut(self) -> float:
        offered = self._offered
        if offered is None or offered <= self._total:
            return -_INF
        recent = sorted(self._recent[: min(self._seen, _RING)])
        refused = 1.0 - self._total / offered  # the share over the cap
        return recent[min(len(recent) - 1, int(refused * len(recent)))]


def _by_priority(item: tuple[float, asyncio.Future[int]]) -> float:
    return item[0]
