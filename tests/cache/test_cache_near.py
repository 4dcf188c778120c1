"""The in-process tier, alone and through the PredictionCache facade."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import gateway.cache._cache as cache_module
from gateway.cache import CacheSource, Entry, PredictionCache
from gateway.cache._near import NearTier
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(cache_module, "_monotonic", fake)
    monkeypatch.setattr(cache_module, "_wall_clock", lambda: fake.now + 1.7e9)
    return fake


def entry(size: int = 10) -> Entry:
    return Entry(b"x" * size, "application/json")


def test_lru_by_entries() -> None:
    near = NearTier(max_entries=2, max_bytes=1 << 20, ttl_s=10, stale_grace_s=0)
    near.put("a", entry(), 10, now=0)
    near.put("b", entry(), 10, now=0)
    assert near.lookup("a", now=1) is not None  # a is now most recent
    near.put("c", entry(), 10, now=1)
    assert near.lookup("b", now=1) is None
    assert near.lookup("a", now=1) is not None
    assert near.lookup("c", now=1) is not None


def test_lru_by_bytes() -> None:
    near = NearTier(max_entries=100, max_bytes=3_000, ttl_s=10, stale_grace_s=0)
    for name in "abcd":
        near.put(name, entry(900), 10, now=0)
    assert len(near) == 2
    assert near.nbytes <= 3_000
    assert near.lookup("a", now=0) is None
    assert near.lookup("d", now=0) is not None
    near.put("huge", entry(10_000), 10, now=0)  # larger than the whole tier: not kept
    assert near.lookup("huge", now=0) is None
    assert near.lookup("d", now=0) is not None


def test_replacing_a_key_keeps_byte_count_right() -> None:
    near = NearTier(max_entries=100, max_bytes=1 << 20, ttl_s=10, stale_grace_s=0)
    near.put("a", entry(1000), 10, now=0)
    near.put("a", entry(10), 10, now=0)
    near.discard("a")
    assert near.nbytes == 0 and len(near) == 0


def test_ttl_and_stale_window() -> None:
    near = NearTier(max_entries=10, max_bytes=1 << 20, ttl_s=10, stale_grace_s=5)
    near.put("a", entry(), 10, now=0)
    slot = near.lookup("a", now=9.9)
    assert slot is not None and slot.fresh_until > 9.9
    slot = near.lookup("a", now=12)
    assert slot is not None and slot.fresh_until <= 12  # stale but servable
    assert near.lookup("a", now=15.1) is None
    assert len(near) == 0


def test_near_ttl_shorter_than_entry_has_no_stale_window() -> None:
    near = NearTier(max_entries=10, max_bytes=1 << 20, ttl_s=2, stale_grace_s=5)
    near.put("a", entry(), 300, now=0)
    assert near.lookup("a", now=1) is not None
    assert near.lookup("a", now=2.5) is None  # go and read the shared copy instead


async def test_peek_near_hit_and_miss(make_cache: MakeCache, clock: FakeClock) -> None:
    cache = await make_cache(ttl_s=10, stale_grace_s=5)
    assert cache.peek_near("k") is None
    stored = cache.put("k", entry())
    assert stored.expires_at - stored.stored_at == pytest.approx(10)
    assert cache.peek_near("k") == stored
    clock.now += 10.5
    assert cache.peek_near("k") is None  # stale entries are only served by get_or_load
    assert cache.stats.near_hits == 1


async def test_get_or_load_fills_and_hits(make_cache: MakeCache, clock: FakeClock) -> None:
    cache = await make_cache(ttl_s=10)
    loader = CountingLoader()
    first, source = await cache.get_or_load("k", loader)
    assert source is CacheSource.LOADED
    assert first.meta_value("variant") == "v1"
    again, source = await cache.get_or_load("k", loader)
    assert source is CacheSource.NEAR and again == first
    assert loader.calls == 1
    clock.now += 11 + 30  # past ttl and grace
    _, source = await cache.get_or_load("k", loader)
    assert source is CacheSource.LOADED and loader.calls == 2
    stats = cache.stats
    assert (stats.near_hits, stats.misses, stats.loads) == (1, 2, 2)


async def test_use_cache_false_bypasses_both_ways(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    await cache.get_or_load("k", loader, use_cache=False)
    assert cache.peek_near("k") is None
    await cache.get_or_load("k", loader)
    _, source = await cache.get_or_load("k", loader, use_cache=False)
    assert source is CacheSource.LOADED and loader.calls == 3


async def test_disabled_cache_always_loads(make_cache: MakeCache) -> None:
    cache = await make_cache(enabled=False)
    loader = CountingLoader()
    for _ in range(3):
        _, source = await cache.get_or_load("k", loader)
        assert source is CacheSource.LOADED
    cache.put("k", entry())
    assert cache.peek_near("k") is None
    assert await cache.get_many(["k"]) == [None]
    assert loader.calls == 3


async def test_per_call_ttl(make_cache: MakeCache, clock: FakeClock) -> None:
    cache = await make_cache(ttl_s=100, stale_grace_s=0)
    await cache.get_or_load("k", CountingLoader(), ttl_s=1)
    clock.now += 1.5
    assert cache.peek_near("k") is None


async def test_near_only_get_many(make_cache: MakeCache) -> None:
    cache = await make_cache()
    cache.put("a", entry())
    assert [e is not None for e in await cache.get_many(["a", "b"])] == [True, False]
    assert cache.stats.misses == 1
