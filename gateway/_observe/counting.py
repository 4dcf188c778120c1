# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""What the metric sinks count with between scrapes: latency histograms and label caps.

Shared by the gateway's Prometheus hook, the sidecar's counters and the RTB
proxy's. Counting is plain integer arithmetic on the request path; the
families are built from these numbers only when something scrapes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, TypeVar

from gateway._observe.events import OTHER
from gateway._observe.families import LATENCY_BUCKETS_S

__all__ = [
    "DEFAULT_LABEL_CAP",
    "OTHER",
    "UNCONFIGURED",
    "Histogram",
    "LabelCap",
    "bucket_of",
    "with_zeros",
]

# The route or target label of a name that is not configured.
UNCONFIGURED: Final = "unconfigured"
DEFAULT_LABEL_CAP = 100
_INF = float("inf")
_BOUNDS = (*LATENCY_BUCKETS_S, _INF)
_BOUND_LABELS = tuple("+Inf" if bound == _INF else repr(bound) for bound in _BOUNDS)

_Key = TypeVar("_Key")


class LabelCap:
    """The first ``cap`` distinct values keep their name; later ones read ``other``.

    ``known`` values always keep theirs and never count towards the cap.
    """

    __slots__ = ("_cap", "_seen")

    def __init__(self, cap: int = DEFAULT_LABEL_CAP, known: Iterable[str] = ()) -> None:
        if cap < 1:
            raise ValueError("label cap must be at least 1")
        self._cap = cap + len(set(known))
        self._seen: set[str] = set(known)

    @property
    def cap(self) -> int:
        return self._cap

    def __call__(self, value: str) -> str:
        seen = self._seen
        if value in seen:
            return value
        if len(seen) < self._cap:
            seen.add(value)
            return value
        return OTHER


def bucket_of(seconds: float) -> int:
    """``bisect_left(LATENCY_BUCKETS_S, seconds)``: the index of the first bound at or
    above ``seconds``; the +Inf bucket's past the last.

    The bounds are written out (tests/gateway/observe pins them to ``LATENCY_BUCKETS_S``):
    compiled, each is a comparison of two C doubles, where a loop over the tuple
    unboxes every bound it passes (about 450 instructions an observation, three a
    relayed request).
    """
    if seconds <= 0.0001:
        return 0
    if seconds <= 0.00025:
        return 1
    if seconds <= 0.0005:
        return 2
    if seconds <= 0.00075:
        return 3
    if seconds <= 0.001:
        return 4
    if seconds <= 0.0015:
        return 5
    if seconds <= 0.002:
        return 6
    if seconds <= 0.003:
        return 7
    if seconds <= 0.004:
        return 8
    if seconds <= 0.005:
        return 9
    if seconds <= 0.0075:
        return 10
    if seconds <= 0.01:
        return 11
    if seconds <= 0.015:
        return 12
    if seconds <= 0.02:
        return 13
    if seconds <= 0.03:
        return 14
    if seconds <= 0.05:
        return 15
    if seconds <= 0.1:
        return 16
    if seconds <= 0.25:
        return 17
    if seconds <= 0.5:
        return 18
    if seconds <= 1.0:
        return 19
    if seconds <= 2.5:
        return 20
    if seconds <= 5.0:
        return 21
    if seconds <= 10.0:
        return 22
    return 23


class Histogram:
    """Counts per ``LATENCY_BUCKETS_S`` bucket (not cumulated) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(_BOUNDS)  # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bucket_of(seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative buckets as ``HistogramMetricFamily.add_metric`` wants them."""
        running = 0
        out: list[tuple[str, float]] = []
        for label, count in zip(_BOUND_LABELS, list(self.counts), strict=True):
            running += count
            out.append((label, float(running)))
        return out


def with_zeros(counter: Mapping[_Key, int], known: Iterable[_Key]) -> list[tuple[_Key, int]]:
    """``counter``'s items, plus each ``known`` key it has not counted yet, at zero.

    Exporting a series at zero before its first event lets ``increase()`` see that event.
    """
    items = dict(counter)
    for key in known:
        items.setdefault(key, 0)
    return list(items.items())
