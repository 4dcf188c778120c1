"""Redis Sentinel and Redis Cluster, each with processes of their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as redis_asyncio
from redis.asyncio.cluster import RedisCluster

from gateway.cache import CacheSource, Entry, PredictionCache
from tests._redis_procs import RedisCluster3, RedisSentinel, redis_cli
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]


async def test_sentinel_round_trip(make_cache: MakeCache, redis_sentinel: RedisSentinel) -> None:
    writer = await make_cache(redis_url=redis_sentinel.url)
    reader = await make_cache(redis_url=redis_sentinel.url)
    key = writer.key_for("r", "m", None, "text/csv", None, None, b"sentinel")
    await writer.get_or_load(key, CountingLoader(b"via-sentinel"))
    await writer.flush_writes()
    got, source = await reader.get_or_load(key, CountingLoader())
    assert (got.body, source) == (b"via-sentinel", CacheSource.REDIS)
    direct = redis_asyncio.Redis.from_url(redis_sentinel.master.url)
    try:
        assert await direct.exists(key) == 1  # it really went to the master
    finally:
        await direct.aclose()


def _sentinel_clients(sentinel: RedisSentinel) -> int:
    """Connections the sentinel process has open, redis-cli's own one not counted."""
    return len(redis_cli(sentinel.sentinel_port, "CLIENT", "LIST").splitlines()) - 1


async def test_closing_a_sentinel_cache_closes_its_sentinel_connections(
    make_cache: MakeCache, redis_sentinel: RedisSentinel
) -> None:
    before = await asyncio.to_thread(_sentinel_clients, redis_sentinel)
    cache = await make_cache(redis_url=redis_sentinel.url)
    key = cache.key_for("r", "m", None, "text/csv", None, None, b"sentinel-close")
    await cache.get_or_load(key, CountingLoader(b"x"))  # asks the sentinel for the master
    await cache.flush_writes()
    assert await asyncio.to_thread(_sentinel_clients, redis_sentinel) > before
    await cache.close()
    deadline = time.monotonic() + 5  # the server notices a closed socket on its next loop
    while (open_now := await asyncio.to_thread(_sentinel_clients, redis_sentinel)) > before:
        assert time.monotonic() < deadline, f"{open_now - before} sentinel connections left open"
        await asyncio.sleep(0.05)


async def test_cluster_round_trip_and_get_many_across_slots(
    make_cache: MakeCache, redis_cluster: RedisCluster3
) -> None:
    # A generous timeout: this is about cluster round trips, and a cold cluster
    # client's first command (topology discovery) can outlast the 50 ms default.
    cluster = {"cluster": redis_cluster.seeds, "redis_socket_timeout_ms": 2000}
    writer = await make_cache(**cluster)
    reader = await make_cache(**cluster)
    keys = [writer.key_for("r", "m", None, "t", None, None, str(i).encode()) for i in range(40)]
    for i, key in enumerate(keys):
        writer.put(key, Entry(str(i).encode(), "text/plain"))
    await writer.flush_writes()
    assert writer.stats.writes == 40 and writer.stats.writes_dropped == 0
    found = await reader.get_many([*keys, "absent-key"])
    assert [e.body if e else None for e in found] == [str(i).encode() for i in range(40)] + [None]
    assert reader.stats.redis_errors == 0

    probe = RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
    try:
        await probe.initialize()
        owners = {probe.get_node_from_key(key).name for key in keys}
    finally:
        await probe.aclose()
    assert len(owners) == 3  # the batch really spanned every master

    got, source = await reader.get_or_load(keys[7], CountingLoader())
    assert source is CacheSource.NEAR and got.body == b"7"
    other = await make_cache(**cluster)
    got, source = await other.get_or_load(keys[8], CountingLoader())
    assert (got.body, source) == (b"8", CacheSource.REDIS)
