"""Cached scores: identical feature rows share a score (near tier, one MGET per batch).

Through the real path (Gateway -> emulator, real Redis with a namespace per
test) and, for the edge cases, with small in-process fakes. The emulator
serves the bundled model, so every score must equal the in-process
reference whether it came from the model, the near tier or Redis.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from gateway import Gateway
from gateway.cache import CacheConfig, Entry, PredictionCache
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb import (
    BidFilter,
    Feature,
    FeatureSpec,
    FilterPolicy,
    Reason,
    XGBoostModel,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.synth import sample_bodies
from gateway.rtb.xgb import BUNDLED_MODEL_PATH
from tests._redis_procs import RedisServer

NOW = 1_717_597_800.0
BODIES = sample_bodies(60, seed=31)
HANG_LIMIT = 10.0  # seconds: only catches a hang, never measures speed
SPEC = load_bundled_spec()
MODEL = XGBoostModel.load(BUNDLED_MODEL_PATH)


def row(body: bytes) -> bytes:
    return SPEC.to_csv_row(parse_bid_request(body), NOW)


def reference(bodies: Sequence[bytes]) -> list[float]:
    """What the bundled model says, computed in-process."""
    return [float(x) for x in MODEL.predict_csv(b"\n".join(map(row, bodies))).split()]


def distinct_rows(bodies: Sequence[bytes]) -> int:
    return len({row(b) for b in bodies})


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=4)) as emu:
        yield emu


@pytest.fixture
def namespace() -> str:
    return f"t-rtb-{uuid.uuid4().hex[:12]}"


def gateway(emulator: Emulator, **cache: Any) -> Gateway:
    # Generous Redis deadlines: these tests count hits, and a busy machine
    # must not turn a slow connect or MGET into a miss (the circuit opens).
    cache.setdefault("redis_socket_timeout_ms", 2000.0)
    cache.setdefault("redis_connect_timeout_ms", 2000.0)
    return Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), cache=cache)


class RowCounter:
    """Forwards to a Gateway and records how many rows each scoring call carried."""

    def __init__(self, gw: Gateway) -> None:
        self.gateway = gw
        self.calls: list[int] = []
        self.kwargs: list[dict[str, Any]] = []

    @property
    def prediction_cache(self) -> PredictionCache | None:
        return self.gateway.prediction_cache

    @property
    def rows(self) -> int:
        return sum(self.calls)

    async def invoke(self, endpoint: str, body: bytes, **kwargs: Any) -> Any:
        self.calls.append(body.count(b"\n") + 1)
        self.kwargs.append(kwargs)
        return await self.gateway.invoke(endpoint, body, **kwargs)


async def decide_all(bid_filter: BidFilter, bodies: Sequence[bytes]) -> list[Any]:
    async with asyncio.timeout(HANG_LIMIT):
        return await bid_filter.decide_many(bodies, now=NOW, budget=5.0)


async def test_identical_rows_are_scored_once_upstream(
    emulator: Emulator, redis_url: str, namespace: str
) -> None:
    async with gateway(emulator, redis_url=redis_url, namespace=namespace, ttl_s=60) as gw:
        counter = RowCounter(gw)
        bid_filter = BidFilter(
            counter, "bid-filter", cache=gw.prediction_cache, max_batch=4, max_wait=0.002
        )
        # Every body three times in one burst: many batches in flight at once.
        burst = [body for body in BODIES[:20] for _ in range(3)]
        try:
            first = await decide_all(bid_filter, burst)
            assert [d.score for d in first] == reference(burst)
            assert counter.rows == distinct_rows(BODIES[:20])  # each distinct row once
            assert emulator.stats.count("bid-filter") == len(counter.calls)
            upstream_calls = len(counter.calls)
            # Again: all decided at submit from the near tier, nothing goes upstream.
            again = await decide_all(bid_filter, BODIES[:20])
        finally:
            await bid_filter.aclose()
    assert [d.score for d in again] == reference(BODIES[:20])
    assert len(counter.calls) == upstream_calls
    assert emulator.stats.count("bid-filter") == upstream_calls
    stats = bid_filter.stats
    assert stats.cache_near_hits >= 20 and stats.failed_open == 0
    assert stats.cache_near_hits + stats.cache_redis_hits + stats.cache_misses == 80
    # The whole-batch cache of the Gateway is bypassed: only rows are cached.
    assert all(kwargs.get("cache") is False for kwargs in counter.kwargs)
    cache = gw.prediction_cache
    assert cache is not None and cache.near_size[0] == distinct_rows(BODIES[:20])


async def test_a_second_process_reads_the_scores_from_redis(
    emulator: Emulator, redis_url: str, namespace: str
) -> None:
    bodies = BODIES[:30]
    async with gateway(emulator, redis_url=redis_url, namespace=namespace) as gw:
        bid_filter = BidFilter(gw, "bid-filter", cache=gw.prediction_cache, max_batch=8)
        try:
            await decide_all(bid_filter, bodies)
        finally:
            await bid_filter.aclose()
        assert gw.prediction_cache is not None
        await gw.prediction_cache.flush_writes()
    calls = emulator.stats.count("bid-filter")
    # A fresh gateway and cache (another process): empty near tier, same Redis.
    async with gateway(emulator, redis_url=redis_url, namespace=namespace) as gw:
        counter = RowCounter(gw)
        # A lookup bound far above Redis's answer time: the test is about hits, not the bound
        # (the 5 ms default turns hits into misses on a busy machine).
        bid_filter = BidFilter(
            counter, "bid-filter", cache=gw.prediction_cache, max_batch=64, cache_timeout=1.0
        )
        try:
            decisions = await decide_all(bid_filter, bodies)
        finally:
            await bid_filter.aclose()
    assert [d.score for d in decisions] == reference(bodies)
    assert counter.calls == [] and emulator.stats.count("bid-filter") == calls
    stats = bid_filter.stats
    assert stats.cache_redis_hits + stats.cache_near_hits == len(bodies)
    assert stats.cache_redis_hits == distinct_rows(bodies)  # later copies: near, filled by MGET


async def test_mixed_hits_and_misses_keep_order_and_scores(
    emulator: Emulator, redis_url: str, namespace: str
) -> None:
    primed, fresh = BODIES[:20], BODIES[20:50]
    async with gateway(emulator, redis_url=redis_url, namespace=namespace) as gw:
        counter = RowCounter(gw)
        bid_filter = BidFilter(
            counter, "bid-filter", cache=gw.prediction_cache, max_batch=64, cache_timeout=1.0
        )
        try:
            await decide_all(bid_filter, primed)
            cache = gw.prediction_cache
            assert cache is not None
            await cache.flush_writes()
            cache.clear_near()  # the primed scores are now in Redis only
            counter.calls.clear()
            mixed = [body for pair in zip(fresh, primed + primed, strict=False) for body in pair]
            mixed += fresh[len(primed) * 2 :]
            decisions = await decide_all(bid_filter, mixed)
        finally:
            await bid_filter.aclose()
    assert [d.score for d in decisions] == reference(mixed)
    assert {d.reason for d in decisions} <= {Reason.SCORED_KEEP, Reason.SCORED_DROP}
    assert counter.calls == [distinct_rows(fresh)]  # one call, only the misses
    # every primed copy is found by the batch's one MGET
    assert bid_filter.stats.cache_redis_hits == sum(body in primed for body in mixed) == 30


async def test_dead_redis_still_gives_decisions(emulator: Emulator, namespace: str) -> None:
    with RedisServer.running() as redis_server:
        config = {"redis_url": redis_server.url, "namespace": namespace}
        async with gateway(emulator, **config, circuit_failures=2) as gw:
            bid_filter = BidFilter(gw, "bid-filter", cache=gw.prediction_cache, max_batch=8)
            try:
                await decide_all(bid_filter, BODIES[:10])
                redis_server.kill()
                assert gw.prediction_cache is not None
                gw.prediction_cache.clear_near()  # every lookup must try Redis
                decisions = await decide_all(bid_filter, BODIES[:40])
            finally:
                await bid_filter.aclose()
            cache_stats = gw.prediction_cache.stats
    assert [d.score for d in decisions] == reference(BODIES[:40])  # scored, not failed open
    assert bid_filter.stats.failed_open == 0
    assert cache_stats.redis_errors + cache_stats.redis_timeouts + cache_stats.redis_skipped > 0


async def test_a_new_spec_or_model_version_never_reads_old_scores(emulator: Emulator) -> None:
    async with gateway(emulator, namespace="t-rtb-versions") as gw:
        counter = RowCounter(gw)

        def make(**kwargs: Any) -> BidFilter:
            return BidFilter(counter, "bid-filter", cache=gw.prediction_cache, **kwargs)

        old = make(model_version="m1")
        new_model = make(model_version="m2")
        new_spec = make(
            model_version="m1", spec=SPEC.with_encodings({"domain": ({"x.com": 0.5}, 0.02)})
        )
        assert len({old.cache_tag, new_model.cache_tag, new_spec.cache_tag}) == 3
        assert old.cache_tag is not None and SPEC.fingerprint() in old.cache_tag
        try:
            for bid_filter in (old, new_model, new_spec, old):
                await decide_all(bid_filter, BODIES[:5])
        finally:
            for bid_filter in (old, new_model, new_spec):
                await bid_filter.aclose()
    assert len(counter.calls) == 3  # the last round was all near hits
    assert BidFilter(counter, "bid-filter").cache_tag is None


# -- edge cases with in-process fakes -------------------------------------------


@dataclass
class Result:
    body: bytes


class EchoScorer:
    """Scores each row with its first value, optionally after a delay or failing."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay = delay
        self.fail = fail
        self.rows: list[bytes] = []

    async def invoke(
        self, endpoint: str, body: bytes, *, content_type: str, accept: str, timeout: float | None
    ) -> Result:
        rows = body.split(b"\n")
        self.rows += rows
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("endpoint down")
        return Result(b"\n".join(r.split(b",")[0] for r in rows))


class SlowCache(PredictionCache):
    """A near-only cache whose batch lookup hangs, as a stuck Redis would."""

    def __init__(self) -> None:
        super().__init__(CacheConfig(namespace="t-slow"))
        self.lookups = 0

    async def get_many(self, keys: Sequence[str]) -> list[Entry | None]:
        self.lookups += 1
        await asyncio.sleep(10)
        return [None] * len(keys)


def echo_bid(score: float) -> bytes:
    return b'{"id":"r","imp":[{"id":"1","banner":{},"bidfloor":%s}]}' % str(score).encode()


ECHO_SPEC = FeatureSpec("echo", (Feature("floor", "numeric", ("imp.0.bidfloor",)),))


async def test_a_hanging_lookup_is_bounded_and_rows_are_still_scored() -> None:
    cache, scorer = SlowCache(), EchoScorer()
    bid_filter = BidFilter(
        scorer, "e", spec=ECHO_SPEC, cache=cache, cache_timeout=0.01, policy=FilterPolicy(0.5)
    )
    try:
        async with asyncio.timeout(HANG_LIMIT):
            decisions = await bid_filter.decide_many([echo_bid(0.9), echo_bid(0.1)], budget=5.0)
    finally:
        await bid_filter.aclose()
    assert [(d.keep, d.score) for d in decisions] == [(True, 0.9), (False, 0.1)]
    assert cache.lookups == 1 and bid_filter.stats.cache_misses == 2


async def test_cached_rows_are_decided_even_when_scoring_fails() -> None:
    cache = PredictionCache(CacheConfig(namespace="t-fail"))
    good = BidFilter(EchoScorer(), "e", spec=ECHO_SPEC, cache=cache, policy=FilterPolicy(0.5))
    bad = BidFilter(
        EchoScorer(fail=True), "e", spec=ECHO_SPEC, cache=cache, policy=FilterPolicy(0.5)
    )
    try:
        async with asyncio.timeout(HANG_LIMIT):
            await good.decide(echo_bid(0.2), budget=5.0)
            decisions = await bad.decide_many([echo_bid(0.2), echo_bid(0.7)], budget=5.0)
    finally:
        await good.aclose()
        await bad.aclose()
    assert [d.reason for d in decisions] == [Reason.SCORED_DROP, Reason.FAILED_OPEN]
    stats = bad.stats
    assert (stats.cache_near_hits, stats.cache_misses, stats.failed_open) == (1, 1, 1)
    assert stats.errors == 1


async def test_a_row_in_flight_elsewhere_waits_for_that_answer() -> None:
    cache, scorer = PredictionCache(CacheConfig(namespace="t-flight")), EchoScorer(delay=0.02)
    bid_filter = BidFilter(
        scorer, "e", spec=ECHO_SPEC, cache=cache, max_wait=0.0, policy=FilterPolicy(0.5)
    )
    try:
        async with asyncio.timeout(HANG_LIMIT):
            first = bid_filter.submit(echo_bid(0.6), budget=5.0)
            await asyncio.sleep(0.005)  # the first batch is now in flight
            second = bid_filter.submit(echo_bid(0.6), budget=5.0)
            third = bid_filter.submit(echo_bid(0.3), budget=5.0)
            decisions = [await first, await second, await third]
    finally:
        await bid_filter.aclose()
    assert [d.score for d in decisions] == [0.6, 0.6, 0.3]
    assert scorer.rows == [b"0.6", b"0.3"]  # 0.6 was sent once
