"""Version tags shared through Redis: one process bumps, every process follows."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import redis.asyncio as redis_asyncio

from gateway.cache import PredictionCache

MakeCache = Callable[..., Awaitable[PredictionCache]]


async def test_a_tag_set_in_one_cache_is_read_by_another_after_the_ttl(
    make_cache: MakeCache, shared_redis_url: str
) -> None:
    writer = await make_cache(
        redis_url=shared_redis_url, version_ttl_s=0.1, redis_socket_timeout_ms=2000
    )
    reader = await make_cache(
        redis_url=shared_redis_url, version_ttl_s=0.1, redis_socket_timeout_ms=2000
    )
    assert reader.versions.due("route")
    await reader.versions.refresh("route")
    assert reader.versions.lookup("route", "model-a") is None

    writer.versions.set("route", "model-a", "v2")
    writer.versions.set("route", None, "all-3")
    await writer.flush_writes()
    await asyncio.sleep(0.15)

    assert reader.versions.due("route")
    await reader.versions.refresh("route")
    assert reader.versions.lookup("route", "model-a") == "v2"
    assert reader.versions.lookup("route", "model-b") == "all-3"
    assert not reader.versions.due("route")


async def test_an_oversized_tag_hash_is_refused(
    make_cache: MakeCache, shared_redis_url: str, raw_redis: redis_asyncio.Redis, namespace: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, redis_socket_timeout_ms=2000)
    await raw_redis.hset(f"{namespace}:ver1:route", mapping={f"m{i}": "x" for i in range(5000)})
    await raw_redis.expire(f"{namespace}:ver1:route", 60)

    await cache.versions.refresh("route")

    assert cache.versions.lookup("route", "m1") is None
    assert cache.stats.corrupt_entries == 1


async def test_without_redis_tags_are_local_and_never_due(make_cache: MakeCache) -> None:
    cache = await make_cache()
    cache.versions.set("route", None, "v1")
    assert not cache.versions.due("route")
    assert cache.versions.lookup("route", "any-model") == "v1"


async def test_the_table_of_route_views_is_bounded(
    make_cache: MakeCache, shared_redis_url: str
) -> None:
    cache = await make_cache(redis_url=shared_redis_url, redis_socket_timeout_ms=2000)
    cache.versions.set("bumped", None, "v1")
    await cache.flush_writes()
    for index in range(4200):  # endpoint names callers made up
        await cache.versions.refresh(f"endpoint-{index}")
    assert len(cache.versions._views) <= 4096
    # A dropped view is due again, and read back from Redis.
    assert cache.versions.due("bumped")
    await cache.versions.refresh("bumped")
    assert cache.versions.lookup("bumped", None) == "v1"
