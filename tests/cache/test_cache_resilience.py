"""Fail-open behaviour: Redis killed, restarted, slow, full, or absent at start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
import redis.asyncio as redis_asyncio

from gateway.cache import CacheSource, Entry, PredictionCache
from tests._redis_procs import RedisServer, free_port, ping
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]
SOCKET_TIMEOUT_MS = 50


@pytest.fixture
def debug_redis() -> Iterator[RedisServer]:
    with RedisServer.running("--enable-debug-command", "yes") as server:
        yield server


async def sleep_redis(server: RedisServer, seconds: float) -> asyncio.Task[object]:
    """Block the server for ``seconds`` (DEBUG SLEEP) from a connection of its own."""
    client = redis_asyncio.Redis.from_url(server.url)

    async def block() -> object:
        try:
            return await client.execute_command("DEBUG", "SLEEP", str(seconds))
        finally:
            await client.aclose()

    task = asyncio.create_task(block())
    # Until the server stops answering a PING, the command has not reached it yet
    # (on a busy machine that can take longer than any fixed pause).
    await asyncio.to_thread(_wait_until_blocked, server.port)
    return task


def _wait_until_blocked(port: int) -> None:
    while ping(port, 0.05):
        time.sleep(0.005)


async def test_dead_redis_at_start_does_not_fail_start(make_cache: MakeCache) -> None:
    cache = await make_cache(redis_url=f"redis://127.0.0.1:{free_port()}/0", circuit_reset_s=60)
    assert cache.stats.circuit_state == "open" and cache.stats.circuit_opens == 1
    loader = CountingLoader()
    started = time.perf_counter()
    _, source = await cache.get_or_load("k", loader)
    assert source is CacheSource.LOADED
    assert time.perf_counter() - started < 0.01  # an instant miss, no connect attempt
    assert cache.stats.redis_skipped >= 1


async def test_kill_mid_run_then_restart(make_cache: MakeCache, own_redis: RedisServer) -> None:
    cache = await make_cache(
        redis_url=own_redis.url,
        circuit_failures=3,
        circuit_reset_s=0.2,
        redis_socket_timeout_ms=SOCKET_TIMEOUT_MS,
    )
    loader = CountingLoader()
    for i in range(30):
        if i == 10:
            own_redis.kill()
        started = time.perf_counter()
        _, source = await cache.get_or_load(f"k{i}", loader)
        assert source is CacheSource.LOADED
        assert time.perf_counter() - started < 0.5
    assert loader.calls == 30
    stats = cache.stats
    assert stats.circuit_state == "open" and stats.circuit_opens == 1
    assert stats.redis_errors + stats.redis_timeouts >= 3
    assert stats.redis_skipped > 0

    own_redis.start()  # same port
    await asyncio.sleep(0.25)
    async with asyncio.timeout(3):
        for attempt in range(10_000):
            await cache.get_or_load(f"probe{attempt}", loader)  # the first starts the trial
            if cache.stats.circuit_state == "closed":
                break
            await asyncio.sleep(0.02)
    assert cache.stats.circuit_opens == 1  # the trial did not fail on a stale connection
    cache.put("after", Entry(b"back", "text/plain"))
    await cache.flush_writes()
    other = await make_cache(redis_url=own_redis.url)
    got, source = await other.get_or_load("after", CountingLoader())
    assert (got.body, source) == (b"back", CacheSource.REDIS)


async def test_slow_redis_does_not_delay_callers(
    make_cache: MakeCache, debug_redis: RedisServer
) -> None:
    cache = await make_cache(
        redis_url=debug_redis.url, redis_socket_timeout_ms=SOCKET_TIMEOUT_MS, circuit_failures=100
    )
    blocker = await sleep_redis(debug_redis, 0.6)
    loader = CountingLoader()
    for i in range(3):
        started = time.perf_counter()
        _, source = await cache.get_or_load(f"slow{i}", loader)
        elapsed = time.perf_counter() - started
        assert source is CacheSource.LOADED
        assert elapsed < SOCKET_TIMEOUT_MS / 1000 + 0.1, elapsed
    started = time.perf_counter()
    cache.put("w", Entry(b"x", "t"))  # a write never waits for Redis
    assert time.perf_counter() - started < 0.005
    assert cache.stats.redis_timeouts >= 3
    await blocker


async def test_no_free_connection_is_a_counted_miss(
    make_cache: MakeCache, debug_redis: RedisServer
) -> None:
    cache = await make_cache(
        redis_url=debug_redis.url,
        redis_max_connections=1,
        redis_prewarm=1,
        redis_slot_wait_ms=1,
        redis_socket_timeout_ms=100,
        circuit_failures=100,
    )
    blocker = await sleep_redis(debug_redis, 0.3)
    results = await asyncio.gather(
        *(cache.get_or_load(f"p{i}", CountingLoader()) for i in range(3))
    )
    assert all(source is CacheSource.LOADED for _, source in results)
    # The two lookups behind the busy connection find no slot; a background
    # read of the version tags may also find none on a slow machine.
    assert cache.stats.redis_pool_exhausted >= 2
    await blocker


async def test_bounded_pending_writes(make_cache: MakeCache, debug_redis: RedisServer) -> None:
    cache = await make_cache(
        redis_url=debug_redis.url, redis_max_pending_writes=5, circuit_failures=100
    )
    blocker = await sleep_redis(debug_redis, 0.3)
    for i in range(20):
        cache.put(f"w{i}", Entry(b"x", "t"))
    assert cache.stats.writes_dropped >= 15 - 1  # the writer may already hold one batch
    await blocker
