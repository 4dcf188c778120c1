"""RTB pre-filter micro-benchmarks (timings printed, never asserted).

python -m pytest bench/test_rtb_bench.py --benchmark-enable -s
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
import pytest

from gateway.rtb import (
    BidFilter,
    FilterPolicy,
    InProcessScorer,
    XGBoostModel,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.request import parse_record, refuse_duplicate_keys
from gateway.rtb.synth import sample_bodies
from gateway.rtb.xgb import BUNDLED_MODEL_PATH

NOW = 1_717_597_800.0
BODIES = sample_bodies(512, seed=11)


@pytest.fixture(scope="module")
def spec() -> Any:
    return load_bundled_spec()


def test_orjson_loads_floor(benchmark: Any) -> None:
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: orjson.loads(next(bodies)))


def test_parse_only(benchmark: Any) -> None:
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: parse_bid_request(next(bodies)))


def test_parse_and_features(benchmark: Any, spec: Any) -> None:
    """Target: <= 25 us per request. Through the typed view (the sidecar's path)."""
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: spec.to_csv_row(parse_bid_request(next(bodies)), NOW))


def test_parse_record_only(benchmark: Any) -> None:
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: parse_record(next(bodies)))


def test_refuse_duplicate_keys(benchmark: Any) -> None:
    """The repeated-key check BidFilter.submit runs on raw bytes after parse_record."""
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: refuse_duplicate_keys(next(bodies)))


def test_parse_record_and_features(benchmark: Any, spec: Any) -> None:
    """What BidFilter.submit pays per raw request (and refuse_duplicate_keys): no view objects."""
    bodies = itertools.cycle(BODIES)
    benchmark(lambda: spec.record_csv_row(parse_record(next(bodies)), NOW))


def test_evaluator_per_row(benchmark: Any, spec: Any) -> None:
    model = XGBoostModel.load(BUNDLED_MODEL_PATH)
    rows = [spec.values(parse_bid_request(b), NOW) for b in BODIES[:100]]
    benchmark.extra_info["rows_per_round"] = len(rows)
    benchmark(model.predict_rows, rows)  # divide the mean by 100 for per-row cost


def test_evaluator_csv_100_rows(benchmark: Any, spec: Any) -> None:
    model = XGBoostModel.load(BUNDLED_MODEL_PATH)
    body = b"\n".join(spec.to_csv_row(parse_bid_request(b), NOW) for b in BODIES[:100])
    benchmark(model.predict_csv, body)


def test_bid_filter_throughput_512_requests(benchmark: Any) -> None:
    """One burst of 512 raw requests through BidFilter with the in-process scorer."""
    policy = FilterPolicy(threshold=0.005)

    async def burst() -> None:
        bid_filter = BidFilter(InProcessScorer(), "bid-filter", policy=policy, max_batch=32)
        await bid_filter.decide_many(BODIES, now=NOW)

    benchmark(lambda: asyncio.run(burst()))  # divide the mean by 512 for per-request cost
