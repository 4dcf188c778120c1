"""Fixtures for the cache tests: Redis servers and per-test key namespaces."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis.asyncio as redis_asyncio

from gateway.cache import CacheConfig, PredictionCache
from tests._redis_procs import RedisCluster3, RedisSentinel, RedisServer


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster3]:
    cluster = RedisCluster3()
    try:
        yield cluster.start()
    finally:
        cluster.cleanup()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    sentinel = RedisSentinel()
    try:
        yield sentinel.start()
    finally:
        sentinel.cleanup()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private redis-server this test may kill, restart or slow down."""
    with RedisServer.running() as server:
        yield server


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
async def raw_redis(shared_redis_url: str) -> AsyncIterator[redis_asyncio.Redis]:
    client = redis_asyncio.Redis.from_url(shared_redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def make_cache(namespace: str) -> AsyncIterator[Callable[..., Awaitable[PredictionCache]]]:
    """Build and start caches with test defaults; all are closed after the test."""
    made: list[PredictionCache] = []

    async def build(**settings: object) -> PredictionCache:
        settings.setdefault("namespace", namespace)
        # A slow first connect on a busy machine (parallel workers) must not fail the warm-up
        # and open the circuit; tests of connect timing set their own.
        settings.setdefault("redis_connect_timeout_ms", 1000)
        cache = PredictionCache(CacheConfig.from_mapping(settings))
        made.append(cache)
        await cache.start()
        return cache

    try:
        yield build
    finally:
        for cache in made:
            await cache.close()
