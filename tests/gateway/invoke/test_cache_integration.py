"""The prediction cache behind ``Gateway.invoke``: near tier, Redis tier, single-flight,
version tags, and failing open when Redis dies, against the emulator and real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from tests._redis_procs import RedisServer
from tests._sagemaker_members import SESSIONS
from tests.cache._cache_support import faulty_writer_entry


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = EmulatorConfig.from_dict(
        {
            "endpoints": {
                "echo": {},
                "slow": {"latency": {"base_ms": 50}},
                "broken": {"faults": {"error_rates": {"ValidationError": 1.0}}},
            }
        }
    )
    async with Emulator(config) as emu:
        yield emu


def _cache(redis_url: str | None = None, **overrides: Any) -> dict[str, Any]:
    # A namespace per test keeps tests sharing one Redis out of each other's way.
    config: dict[str, Any] = {"namespace": f"t-{uuid.uuid4().hex[:12]}", "ttl_s": 60}
    if redis_url is not None:
        config["redis_url"] = redis_url
        # The 100 ms default connect deadline can be missed on a loaded test machine: the
        # warm-up fails, the circuit opens and a Redis hit turns into a load.
        config["redis_connect_timeout_ms"] = 1000
    config.update(overrides)
    return config


def _gateway(emu: Emulator, cache: dict[str, Any]) -> Gateway:
    return Gateway("us-east-1", endpoint_url=emu.url, credentials=("AK", "SK"), cache=cache)


async def test_a_repeated_call_is_answered_by_the_near_tier(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        first = await gw.invoke("echo", b"1,2,3", content_type="text/csv", timeout=2)
        second = await gw.invoke("echo", b"1,2,3", content_type="text/csv", timeout=2)
    assert first.cache is None and first.body == b"1,2,3"
    assert second.cache == "near"
    assert (second.body, second.content_type, second.invoked_variant) == (
        first.body,
        first.content_type,
        first.invoked_variant,
    )
    assert emulator.stats.count(endpoint="echo") == 1


async def test_what_changes_the_answer_changes_the_key(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        await gw.invoke("echo", b"a", content_type="text/csv")
        await gw.invoke("echo", b"b", content_type="text/csv")
        await gw.invoke("echo", b"a", content_type="application/json")
        await gw.invoke("echo", b"a", content_type="text/csv", accept="text/csv")
        await gw.invoke("echo", b"a", content_type="text/csv", custom_attributes="k=v")
    assert emulator.stats.count(endpoint="echo") == 5


async def test_a_second_process_is_answered_from_redis(emulator: Emulator, redis_url: str) -> None:
    shared = _cache(redis_url)
    async with _gateway(emulator, shared) as first:
        await first.invoke("echo", b"shared", content_type="text/csv")
        await first.prediction_cache.flush_writes()  # type: ignore[union-attr]
    async with _gateway(emulator, shared) as second:
        result = await second.invoke("echo", b"shared", content_type="text/csv")
    assert result.cache == "redis"
    assert result.body == b"shared"
    assert emulator.stats.count(endpoint="echo") == 1


async def test_concurrent_identical_misses_make_one_upstream_call(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        calls = [gw.invoke("slow", b"same", content_type="text/csv", timeout=2) for _ in range(20)]
        results = await asyncio.gather(*calls)
        stats = gw.prediction_cache.stats  # type: ignore[union-attr]
    assert {r.body for r in results} == {b"same"}
    assert emulator.stats.count(endpoint="slow") == 1
    assert stats.coalesced == 19


async def test_bumping_the_version_tag_misses(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        await gw.invoke("echo", b"v", content_type="text/csv")
        assert (await gw.invoke("echo", b"v", content_type="text/csv")).cache == "near"
        gw.set_cache_version("echo", "model-v2")
        assert (await gw.invoke("echo", b"v", content_type="text/csv")).cache is None
    assert emulator.stats.count(endpoint="echo") == 2


async def test_errors_are_never_cached(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        for _ in range(2):
            with pytest.raises(errors.ValidationError):
                await gw.invoke("broken", b"x")
    assert emulator.stats.count(endpoint="broken") == 2


async def test_cache_false_and_sessions_bypass_the_cache(emulator: Emulator) -> None:
    async with _gateway(emulator, _cache()) as gw:
        await gw.invoke("echo", b"x")
        assert (await gw.invoke("echo", b"x", cache=False)).cache is None
        if SESSIONS:  # botocore >= 1.35.15
            assert (await gw.invoke("echo", b"x", session_id="NEW_SESSION")).cache is None
    assert emulator.stats.count(endpoint="echo") == (3 if SESSIONS else 2)


async def test_redis_dying_and_returning_never_fails_a_call(emulator: Emulator) -> None:
    with RedisServer.running() as redis_server:
        config = _cache(
            redis_server.url, near_max_entries=1, circuit_failures=2, circuit_reset_s=0.2
        )
        async with _gateway(emulator, config) as gw:
            cache = gw.prediction_cache
            assert cache is not None
            for i in range(10):
                await gw.invoke("echo", f"{i}".encode())
            redis_server.kill()
            for i in range(10, 30):
                # Every call succeeds through the emulator while Redis is gone.
                assert (await gw.invoke("echo", f"{i}".encode(), timeout=2)).body == f"{i}".encode()
            assert cache.stats.redis_errors + cache.stats.redis_timeouts > 0
            assert cache.stats.circuit_opens >= 1

            redis_server.start()
            # Lookups trigger the half-open trial once circuit_reset_s has passed.
            for attempt in range(50):
                await gw.invoke("echo", f"probe-{attempt}".encode())
                if cache.stats.circuit_state == "closed":
                    break
                await asyncio.sleep(0.1)
            assert cache.stats.circuit_state == "closed"
            await gw.invoke("echo", b"after-restart")
            await cache.flush_writes()
            cache.clear_near()
            again = await gw.invoke("echo", b"after-restart")
            assert again.cache == "redis"
            assert cache.stats.circuit_state == "closed"


async def test_routes_set_cache_defaults(emulator: Emulator) -> None:
    routes = {
        "uncached": {"targets": [{"endpoint": "echo"}], "cache": False},
        "short": {"targets": [{"endpoint": "echo"}], "cache_ttl_s": 0.05},
    }
    async with Gateway(
        "us-east-1",
        endpoint_url=emulator.url,
        credentials=("AK", "SK"),
        cache=_cache(),
        routes=routes,
    ) as gw:
        for _ in range(2):
            assert (await gw.invoke("uncached", b"u")).cache is None
        assert (await gw.invoke("uncached", b"u", cache=True)).cache is None  # a miss fills
        assert (await gw.invoke("uncached", b"u", cache=True)).cache == "near"
        await gw.invoke("short", b"s")
        assert (await gw.invoke("short", b"s")).cache == "near"
        await asyncio.sleep(0.1)  # past the route's 50 ms TTL: within the stale grace
        assert (await gw.invoke("short", b"s")).cache == "stale"
    # 2 uncached, 1 fill on "uncached", 1 on "short" (+ the stale entry's refresh)
    assert emulator.stats.count(endpoint="echo") >= 4


async def test_header_values_holding_a_separator_never_share_a_cached_answer(
    emulator: Emulator,
) -> None:
    # Header values may hold any separator (once \x1f, a control character now refused);
    # a key that joined the parts with it made these two calls one key, and the second
    # got the first's answer.
    async with _gateway(emulator, _cache()) as gw:
        first = await gw.invoke("echo", b"same", custom_attributes="x:y")
        second = await gw.invoke(
            "echo", b"same", custom_attributes="x", target_container_hostname="y:"
        )
    assert (second.cache, second.custom_attributes) == (None, "x")
    assert first.custom_attributes != second.custom_attributes
    assert emulator.stats.count(endpoint="echo") == 2


@pytest.mark.parametrize("content_type", ["text/csv\r\nx-injected: 1", "text/csv\rx-injected: 1"])
async def test_a_cached_content_type_that_would_inject_a_header_is_not_served(
    emulator: Emulator, redis_url: str, content_type: str
) -> None:
    async with _gateway(emulator, _cache(redis_url)) as gw:
        cache = gw.prediction_cache
        assert cache is not None
        key = cache.key_for("echo", None, None, "text/csv", None, None, b"1,2")
        now = time.time()
        async with Redis.from_url(redis_url) as raw:
            await raw.set(key, faulty_writer_entry(b"0.99", content_type, now, now + 60), ex=60)

        result = await gw.invoke("echo", b"1,2", content_type="text/csv")

        assert (result.cache, result.body, result.content_type) == (None, b"1,2", "text/csv")
        assert cache.stats.corrupt_entries == 1


async def test_a_version_bump_in_one_gateway_reaches_another_through_redis(
    emulator: Emulator, redis_url: str
) -> None:
    # Redis answers may take long on a busy machine: only the version tag may cause a miss.
    shared = _cache(redis_url, version_ttl_s=0.2, redis_socket_timeout_ms=2000)
    async with _gateway(emulator, shared) as first, _gateway(emulator, shared) as second:
        await first.invoke("echo", b"v", content_type="text/csv")
        await first.prediction_cache.flush_writes()  # type: ignore[union-attr]
        assert (await second.invoke("echo", b"v", content_type="text/csv")).cache == "redis"
        assert (await second.invoke("echo", b"v", content_type="text/csv")).cache == "near"

        first.set_cache_version("echo", "model-v2")  # only the first process is told
        await first.prediction_cache.flush_writes()  # type: ignore[union-attr]
        await asyncio.sleep(0.3)  # past the second's version_ttl_s

        after = await second.invoke("echo", b"v", content_type="text/csv")
        assert after.cache is None  # a miss under the new tag, not the old answer
        await second.prediction_cache.flush_writes()  # type: ignore[union-attr]
        assert (await first.invoke("echo", b"v", content_type="text/csv")).cache != "near"
    assert emulator.stats.count(endpoint="echo") == 2


async def test_a_version_set_before_start_is_published_at_the_first_call(
    emulator: Emulator, redis_url: str
) -> None:
    shared = _cache(redis_url, version_ttl_s=60, redis_socket_timeout_ms=2000)
    early = _gateway(emulator, shared)
    early.set_cache_version("echo", "v7")
    async with early, _gateway(emulator, shared) as other:
        await early.invoke("echo", b"x")
        await early.prediction_cache.flush_writes()  # type: ignore[union-attr]
        assert (await other.invoke("echo", b"x")).cache == "redis"  # same tag, same key
        other.set_cache_version("echo", "v8")
        assert (await other.invoke("echo", b"x")).cache is None


async def test_version_tags_fail_open_when_redis_is_gone(emulator: Emulator) -> None:
    with RedisServer.running() as redis_server:
        config = _cache(redis_server.url, version_ttl_s=0.05, circuit_failures=1)
        async with _gateway(emulator, config) as gw:
            await gw.invoke("echo", b"k")
            redis_server.kill()
            gw.set_cache_version("echo", "after-outage")
            for _ in range(3):
                await asyncio.sleep(0.06)
                result = await gw.invoke("echo", b"k", timeout=2)
                assert result.body == b"k"
            # The local bump held although Redis never took it: the old answer is gone.
    assert emulator.stats.count(endpoint="echo") == 2
