"""A Redis that answers with the wrong type or shape: every reply is a counted miss, no key hangs.

The server is ``bench.bad_redis.MisbehavingRedis``, a real RESP server on a
loopback port that answers connection set-up like Redis and data commands
wrongly (an integer to GET, too few MGET items, nested items, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as redis_asyncio

from bench.bad_redis import MisbehavingRedis
from gateway.cache import CacheSource, PredictionCache
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]
# Generous: a busy machine must not turn a reply into a timeout (a different counter), nor
# a slow first connect open the circuit (then no command reaches the server at all).
PATIENT = {
    "redis_socket_timeout_ms": 2000,
    "redis_connect_timeout_ms": 2000,
    "circuit_failures": 1000,
}
# A call that is not done by then is hung (the loads here are instant).
HUNG_S = 10.0
WRONG_GET_REPLIES = ("integer", "short", "wrong_items")
# The protocol the installed redis-py speaks by default: 3 from redis-py 8 on, 2 before.
RESP = redis_asyncio.Connection().protocol


@pytest.fixture
async def bad_redis() -> AsyncIterator[MisbehavingRedis]:
    async with MisbehavingRedis() as server:
        yield server


async def _load(cache: PredictionCache, key: str, loader: CountingLoader) -> CacheSource:
    async with asyncio.timeout(HUNG_S):
        entry, source = await cache.get_or_load(key, loader)
    assert entry.body == loader.body
    return source


@pytest.mark.parametrize("mode", WRONG_GET_REPLIES)
async def test_a_wrong_reply_to_get_is_a_counted_miss_and_the_key_keeps_working(
    make_cache: MakeCache, bad_redis: MisbehavingRedis, mode: str
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    bad_redis.mode = mode
    loader = CountingLoader()

    assert await _load(cache, "k", loader) is CacheSource.LOADED
    cache.clear_near()
    # The key is not left with a flight nobody settles: the next caller loads again.
    assert await _load(cache, "k", loader) is CacheSource.LOADED

    assert loader.calls == 2
    assert bad_redis.commands["GET"] == 2
    assert cache.stats.redis_bad_replies >= 2  # the GETs (the background SETs may add)
    assert cache.stats.redis_errors == 0 and cache.stats.misses == 2


@pytest.mark.parametrize(
    ("mode", "counter"),
    [("garbage", "redis_errors"), ("error", "redis_errors"), ("hang", "redis_timeouts")],
)
async def test_garbage_error_replies_and_silence_are_counted_misses_too(
    make_cache: MakeCache, bad_redis: MisbehavingRedis, mode: str, counter: str
) -> None:
    timeouts = {"redis_socket_timeout_ms": 100} if mode == "hang" else {}
    cache = await make_cache(redis_url=bad_redis.url, **{**PATIENT, **timeouts})
    bad_redis.mode = mode
    loader = CountingLoader()

    for _ in range(2):
        cache.clear_near()
        assert await _load(cache, "k", loader) is CacheSource.LOADED
    assert await cache.get_many(["a", "b"]) == [None, None]

    assert loader.calls == 2
    assert getattr(cache.stats, counter) >= 3 and cache.stats.redis_bad_replies == 0


async def test_followers_of_a_key_whose_get_got_an_integer_get_the_one_load(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    bad_redis.mode = "integer"
    loader = CountingLoader()
    loader.release = asyncio.Event()

    calls = [asyncio.create_task(cache.get_or_load("k", loader)) for _ in range(5)]
    await asyncio.wait_for(loader.started.wait(), HUNG_S)
    loader.release.set()
    async with asyncio.timeout(HUNG_S):
        results = await asyncio.gather(*calls)

    assert loader.calls == 1
    assert sorted(source.value for _, source in results) == ["coalesced"] * 4 + ["loaded"]
    assert {entry.body for entry, _ in results} == {loader.body}


@pytest.mark.parametrize("mode", ["short", "integer", "wrong_items"])
async def test_a_wrong_mget_reply_is_all_misses(
    make_cache: MakeCache, bad_redis: MisbehavingRedis, mode: str
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    bad_redis.mode = mode

    assert await cache.get_many(["a", "b", "c"]) == [None, None, None]

    assert bad_redis.commands["MGET"] == 1
    assert cache.stats.redis_bad_replies == 1 and cache.stats.misses == 3


async def test_a_wrong_reply_closes_the_idle_connections_it_may_be_out_of_step_on(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, redis_prewarm=3, **PATIENT)
    assert bad_redis.connections == 3
    bad_redis.mode = "integer"

    assert await cache.get_many(["a"]) == [None]

    async with asyncio.timeout(HUNG_S):  # the server sees them close
        await bad_redis.until(lambda: bad_redis.connections == 0)
    bad_redis.mode = "ok"
    await _load(cache, "k", CountingLoader())  # and the tier reconnects
    assert bad_redis.commands["GET"] == 1


async def test_wrong_replies_to_the_version_hash_keep_the_tags_known(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, version_ttl_s=60, **PATIENT)
    cache.versions.set("route", None, "v2")
    bad_redis.mode = "wrong_items"  # HSET and HGETALL answered with a map

    await cache.versions.refresh("route")

    assert cache.versions.lookup("route", None) == "v2"
    assert bad_redis.commands["HGETALL"] == 1
    # Over RESP2, redis-py's HGETALL callback pairs up the items of the map it was sent and
    # hands the tier an empty hash: no tags, not a wrong reply (the tags are kept either way).
    bad = 2 if RESP == 3 else 1
    assert cache.stats.redis_bad_replies == bad and cache.stats.corrupt_entries == 0


async def test_a_follower_waits_for_an_identical_load_no_longer_than_its_deadline(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    loader = CountingLoader()
    loader.release = asyncio.Event()  # the leader's load does not finish by itself
    leader = asyncio.create_task(cache.get_or_load("k", loader))
    await asyncio.wait_for(loader.started.wait(), HUNG_S)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(HUNG_S):
            await cache.get_or_load("k", loader, deadline=time.monotonic() + 0.05)

    assert not leader.done()
    loader.release.set()
    entry, source = await asyncio.wait_for(leader, HUNG_S)
    assert (entry.body, source, loader.calls) == (loader.body, CacheSource.LOADED, 1)


async def test_a_follower_within_its_deadline_takes_the_settled_load(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    loader = CountingLoader()
    loader.release = asyncio.Event()
    leader = asyncio.create_task(cache.get_or_load("k", loader))
    await asyncio.wait_for(loader.started.wait(), HUNG_S)
    follower = asyncio.create_task(
        cache.get_or_load("k", loader, deadline=time.monotonic() + HUNG_S)
    )
    await asyncio.sleep(0)  # the follower joins the flight
    loader.release.set()

    (_, led), (_, followed) = await asyncio.wait_for(asyncio.gather(leader, follower), HUNG_S)
    assert (led, followed) == (CacheSource.LOADED, CacheSource.COALESCED)


async def test_followers_are_released_when_close_cancels_the_task_their_leader_handed_over_to(
    make_cache: MakeCache, bad_redis: MisbehavingRedis
) -> None:
    cache = await make_cache(redis_url=bad_redis.url, **PATIENT)
    bad_redis.mode = "hang"  # the leader's GET never gets an answer
    loader = CountingLoader()
    leader = asyncio.create_task(cache.get_or_load("k", loader))
    async with asyncio.timeout(HUNG_S):
        await bad_redis.until(lambda: bad_redis.commands["GET"] > 0)
    follower = asyncio.create_task(cache.get_or_load("k", loader))
    await asyncio.sleep(0)  # the follower joins the flight

    leader.cancel()  # its flight goes to a background task for the follower...
    await asyncio.wait([leader], timeout=HUNG_S)
    await cache.close()  # ...which close() cancels while it reads Redis

    done, _ = await asyncio.wait([leader, follower], timeout=HUNG_S)
    assert follower in done and leader in done  # nobody left waiting
    assert follower.cancelled() and loader.calls == 0
