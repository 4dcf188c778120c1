"""The Redis tier against a real server (the shared one on 6379, or a private one)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import redis.asyncio as redis_asyncio

from gateway.cache import FORMAT_VERSION, CacheSource, Entry, PredictionCache, encode_entry
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]


async def two_caches(make_cache: MakeCache, url: str, **settings: object) -> list[PredictionCache]:
    """Two processes' worth of cache sharing one Redis."""
    return [await make_cache(redis_url=url, **settings) for _ in range(2)]


async def test_round_trip_between_processes(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis
) -> None:
    writer, reader = await two_caches(make_cache, shared_redis_url, ttl_s=60, stale_grace_s=10)
    key = writer.key_for("r", "m", "v1", "text/csv", "application/json", "1", b"1,2")
    stored, source = await writer.get_or_load(key, CountingLoader(b"0.42"))
    assert source is CacheSource.LOADED
    await writer.flush_writes()
    loader = CountingLoader()
    got, source = await reader.get_or_load(key, loader)
    assert source is CacheSource.REDIS and loader.calls == 0
    assert got == stored and got.meta_value("variant") == "v1"
    _, source = await reader.get_or_load(key, loader)
    assert source is CacheSource.NEAR  # filled on the way
    ttl_ms = await raw_redis.pttl(key)
    assert 69_000 < ttl_ms <= 70_000  # ttl + stale grace
    assert reader.stats.redis_hits == 1 and writer.stats.writes == 1


async def test_get_many_uses_near_then_redis(make_cache: MakeCache, shared_redis_url: str) -> None:
    writer, reader = await two_caches(make_cache, shared_redis_url)
    keys = [f"{writer.config.namespace}:k{i}" for i in range(10)]
    for i, key in enumerate(keys):
        writer.put(key, Entry(str(i).encode(), "text/plain"))
    await writer.flush_writes()
    reader.put(keys[0], Entry(b"near", "text/plain"))
    found = await reader.get_many([*keys, "absent"])
    assert found[0] is not None and found[0].body == b"near"
    assert [e.body if e else None for e in found[1:]] == [
        *(str(i).encode() for i in range(1, 10)),
        None,
    ]
    assert reader.stats.near_hits == 1 and reader.stats.redis_hits == 9
    assert reader.stats.misses == 1
    assert reader.peek_near(keys[5]) is not None


async def test_garbage_and_unknown_versions_are_misses(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url)
    future = bytearray(encode_entry(Entry(b"x", "t", (), time.time(), time.time() + 60)))
    future[2] = 99
    garbage = b"\xa7C" + bytes([FORMAT_VERSION]) + b"\x00garbage"
    await raw_redis.set(f"{namespace}:garbage", garbage, ex=60)
    await raw_redis.set(f"{namespace}:future", bytes(future), ex=60)
    await raw_redis.set(f"{namespace}:text", b"hello", ex=60)
    for name in ("garbage", "future", "text"):
        _, source = await cache.get_or_load(f"{namespace}:{name}", CountingLoader())
        assert source is CacheSource.LOADED
    assert (cache.stats.decode_errors, cache.stats.corrupt_entries) == (1, 1)
    assert cache.stats.unknown_format == 1
    await raw_redis.set(f"{namespace}:text2", b"hello", ex=60)
    assert await cache.get_many([f"{namespace}:text2"]) == [None]
    assert cache.stats.decode_errors == 2


async def test_stale_in_redis_is_served_and_refreshed(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, ttl_s=30, stale_grace_s=30)
    key = f"{namespace}:stale"
    now = time.time()
    old = Entry(b"old", "text/plain", (), now - 40, now - 10)
    await raw_redis.set(key, encode_entry(old), px=20_000)
    loader = CountingLoader(b"new")
    got, source = await cache.get_or_load(key, loader)
    assert (got.body, source) == (b"old", CacheSource.STALE)
    await loader.started.wait()
    await cache.flush_writes()
    assert loader.calls == 1
    assert cache.peek_near(key) is not None and cache.peek_near(key).body == b"new"  # type: ignore[union-attr]
    assert b"new" in await raw_redis.get(key)


async def test_version_tag_bump_misses(make_cache: MakeCache, shared_redis_url: str) -> None:
    cache = await make_cache(redis_url=shared_redis_url)
    v1 = cache.key_for("r", "m", None, "text/csv", None, "v1", b"body")
    v2 = cache.key_for("r", "m", None, "text/csv", None, "v2", b"body")
    await cache.get_or_load(v1, CountingLoader())
    loader = CountingLoader()
    _, source = await cache.get_or_load(v2, loader)
    assert source is CacheSource.LOADED and loader.calls == 1


async def test_unix_socket_and_rediss_urls_build(make_cache: MakeCache, tmp_path: object) -> None:
    # Nothing listens there: start must still succeed, with the circuit open.
    cache = await make_cache(redis_url=f"unix://{tmp_path}/absent.sock", circuit_reset_s=60)
    assert cache.stats.circuit_state == "open"
    _, source = await cache.get_or_load("k", CountingLoader())
    assert source is CacheSource.LOADED
