"""The cache does not trust what Redis hands back: corrupt, forged, timeless or huge
entries are misses (counted, and deleted or overwritten), never answers."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as redis_asyncio

from gateway.cache import CacheSource, Entry, PredictionCache, encode_entry
from tests.cache._cache_support import CountingLoader, faulty_writer_entry, forge_entry

MakeCache = Callable[..., Awaitable[PredictionCache]]
# A busy machine must not turn a lookup into a timeout: only the entry may make it a miss.
PATIENT = {"redis_socket_timeout_ms": 2000}


async def _miss_then_repaired(
    cache: PredictionCache, raw_redis: redis_asyncio.Redis, key: str
) -> None:
    """The lookup loads (a miss); afterwards Redis holds the loaded entry or nothing."""
    loader = CountingLoader(b"fresh")
    got, source = await cache.get_or_load(key, loader)
    assert (source, got.body, loader.calls) == (CacheSource.LOADED, b"fresh", 1)
    await cache.flush_writes()
    stored = await raw_redis.get(key)
    assert stored is None or b"fresh" in stored


async def test_a_flipped_body_byte_is_a_counted_miss_and_is_overwritten(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, **PATIENT)
    now = time.time()
    blob = bytearray(encode_entry(Entry(b'{"p":0.91}', "application/json", (), now, now + 60)))
    blob[-6] ^= 0x08  # one bit inside the body
    key = f"{namespace}:flipped"
    await raw_redis.set(key, bytes(blob), ex=60)

    await _miss_then_repaired(cache, raw_redis, key)

    assert cache.stats.corrupt_entries == 1 and cache.stats.redis_hits == 0


async def test_a_corrupt_entry_found_by_get_many_is_deleted(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, **PATIENT)
    now = time.time()
    key = f"{namespace}:bad-crc"
    await raw_redis.set(key, forge_entry(b"0.9", "text/csv", now, now + 60, crc=False), ex=60)

    assert await cache.get_many([key]) == [None]
    await cache.flush_writes()

    assert cache.stats.corrupt_entries == 1
    assert await raw_redis.exists(key) == 0


@pytest.mark.parametrize(
    ("stored_offset", "expires_offset"),
    [
        (-20.0, math.inf),  # never expires
        (-20.0, 1e9),  # expires in 30 years
        (1e6, 2e6),  # "stored" 11 days from now
    ],
)
async def test_freshness_never_exceeds_the_ttl(
    make_cache: MakeCache,
    shared_redis_url: str,
    raw_redis: redis_asyncio.Redis,
    namespace: str,
    stored_offset: float,
    expires_offset: float,
) -> None:
    # TTL 10 s, no stale grace: an entry stored 20 s ago is dead whatever it claims.
    cache = await make_cache(redis_url=shared_redis_url, ttl_s=10, stale_grace_s=0, **PATIENT)
    now = time.time()
    key = f"{namespace}:timeless"
    stored_at, expires_at = now + stored_offset, now + expires_offset
    if math.isfinite(expires_at):
        raw = encode_entry(Entry(b"old", "text/csv", (), stored_at, expires_at))
    else:  # the codec refuses to write it; a faulty writer might
        raw = forge_entry(b"old", "text/csv", stored_at, expires_at)
    await raw_redis.set(key, raw, ex=60)

    await _miss_then_repaired(cache, raw_redis, key)
    assert await cache.get_many([key]) != [None]  # now the repaired entry, fresh
    assert (await cache.get_many([key]))[0].body == b"fresh"  # type: ignore[union-attr]


async def test_a_long_expiry_is_cut_to_the_readers_ttl(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, ttl_s=10, stale_grace_s=0, **PATIENT)
    now = time.time()
    key = f"{namespace}:long"
    await raw_redis.set(key, encode_entry(Entry(b"ok", "text/csv", (), now - 2, now + 1e6)), ex=60)

    got, source = await cache.get_or_load(key, CountingLoader())

    assert (source, got.body) == (CacheSource.REDIS, b"ok")
    assert got.expires_at == pytest.approx(now - 2 + 10)


@pytest.mark.parametrize(
    "content_type",
    ["text/csv\r\nx-injected: 1", "text/csv\rx-injected: 1", "text/csv\n", "a\x00b", "a\x7f"],
)
async def test_control_characters_in_a_cached_content_type_are_a_miss(
    make_cache: MakeCache,
    shared_redis_url: str,
    raw_redis: redis_asyncio.Redis,
    namespace: str,
    content_type: str,
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, **PATIENT)
    now = time.time()
    key = f"{namespace}:inject"
    await raw_redis.set(key, faulty_writer_entry(b"0.5", content_type, now, now + 60), ex=60)

    await _miss_then_repaired(cache, raw_redis, key)

    assert cache.stats.corrupt_entries == 1


async def test_an_entry_above_max_value_bytes_is_refused_and_deleted(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    # max_value_bytes: 1 MiB. Time enough to read 20 MiB, so only the size can refuse it.
    cache = await make_cache(redis_url=shared_redis_url, redis_socket_timeout_ms=5000)
    now = time.time()
    key = f"{namespace}:huge"
    huge = encode_entry(Entry(b"x" * (20 << 20), "text/csv", (), now, now + 60))
    await raw_redis.set(key, huge, ex=60)

    assert await cache.get_many([key]) == [None]
    await cache.flush_writes()

    assert cache.stats.oversize_entries == 1
    assert await raw_redis.exists(key) == 0


async def test_an_entry_above_max_value_bytes_is_never_written(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, max_value_bytes=1024, **PATIENT)
    key = f"{namespace}:big"
    await cache.get_or_load(key, CountingLoader(b"y" * 2048))
    await cache.flush_writes()

    assert await raw_redis.exists(key) == 0
    assert cache.stats.writes_dropped == 1
