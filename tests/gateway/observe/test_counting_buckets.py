"""The latency bucket search agrees with ``bisect_left`` over the bounds."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest

from gateway._observe.counting import Histogram, bucket_of
from gateway._observe.families import LATENCY_BUCKETS_S

# Every bound, just either side of each, zero, negatives, past the last, infinity.
_SECONDS = sorted(
    {
        *LATENCY_BUCKETS_S,
        *(math.nextafter(bound, 0.0) for bound in LATENCY_BUCKETS_S),
        *(math.nextafter(bound, math.inf) for bound in LATENCY_BUCKETS_S),
        0.0,
        -1.0,
        LATENCY_BUCKETS_S[-1] * 10,
        math.inf,
    }
)


@pytest.mark.parametrize("seconds", _SECONDS)
def test_the_bucket_is_bisect_lefts(seconds: float) -> None:
    assert bucket_of(seconds) == bisect_left(LATENCY_BUCKETS_S, seconds)


def test_a_histogram_counts_each_duration_in_its_bucket() -> None:
    histogram = Histogram()
    for seconds in _SECONDS[:-1]:  # a sum with infinity in it reads nothing
        histogram.observe(seconds)
    expected = [0] * (len(LATENCY_BUCKETS_S) + 1)
    for seconds in _SECONDS[:-1]:
        expected[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
    assert histogram.counts == expected
    assert histogram.total == pytest.approx(math.fsum(_SECONDS[:-1]))
