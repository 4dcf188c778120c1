"""Single-flight, error handling, cancellation and stale-while-revalidate."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

import gateway.cache._cache as cache_module
from gateway.cache import CacheSource, PredictionCache
from tests.cache._cache_support import CountingLoader

MakeCache = Callable[..., Awaitable[PredictionCache]]


async def wait_for_calls(loader: CountingLoader, calls: int) -> None:
    assert calls == 1
    async with asyncio.timeout(2):
        await loader.started.wait()


async def test_concurrent_identical_misses_share_one_load(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    loader.release = asyncio.Event()
    callers = [asyncio.create_task(cache.get_or_load("k", loader)) for _ in range(20)]
    await wait_for_calls(loader, 1)
    await asyncio.sleep(0.01)
    loader.release.set()
    results = await asyncio.gather(*callers)
    assert loader.calls == 1
    sources = [source for _, source in results]
    assert sources.count(CacheSource.LOADED) == 1
    assert sources.count(CacheSource.COALESCED) == 19
    assert len({entry for entry, _ in results}) == 1
    assert cache.stats.coalesced == 19 and cache.stats.loads == 1


async def test_different_keys_do_not_coalesce(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    await asyncio.gather(*(cache.get_or_load(f"k{i}", loader) for i in range(5)))
    assert loader.calls == 5


async def test_leader_failure_reaches_everyone_and_is_not_cached(make_cache: MakeCache) -> None:
    cache = await make_cache()
    failing = CountingLoader(fail=RuntimeError("model error"))
    failing.release = asyncio.Event()
    callers = [asyncio.create_task(cache.get_or_load("k", failing)) for _ in range(5)]
    await wait_for_calls(failing, 1)
    failing.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and str(r) == "model error" for r in results)
    assert failing.calls == 1
    assert cache.peek_near("k") is None
    assert cache.stats.load_errors == 1
    ok = CountingLoader()
    _, source = await cache.get_or_load("k", ok)
    assert source is CacheSource.LOADED and ok.calls == 1


async def test_cancelling_the_leader_does_not_cancel_the_shared_load(
    make_cache: MakeCache,
) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    loader.release = asyncio.Event()
    leader = asyncio.create_task(cache.get_or_load("k", loader))
    await wait_for_calls(loader, 1)
    followers = [asyncio.create_task(cache.get_or_load("k", loader)) for _ in range(3)]
    await asyncio.sleep(0)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    loader.release.set()
    results = await asyncio.gather(*followers)
    assert all(source is CacheSource.COALESCED for _, source in results)
    assert loader.calls == 1
    assert cache.peek_near("k") is not None


async def test_cancelling_a_follower_leaves_the_others(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    loader.release = asyncio.Event()
    callers = [asyncio.create_task(cache.get_or_load("k", loader)) for _ in range(3)]
    await wait_for_calls(loader, 1)
    callers[1].cancel()
    loader.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert not isinstance(results[0], BaseException)
    assert not isinstance(results[2], BaseException)
    assert loader.calls == 1


async def test_a_lone_cancelled_leader_still_fills_the_cache(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    loader.release = asyncio.Event()
    leader = asyncio.create_task(cache.get_or_load("k", loader))
    await wait_for_calls(loader, 1)
    leader.cancel()
    loader.release.set()
    with pytest.raises(asyncio.CancelledError):
        await leader
    await asyncio.sleep(0.01)
    assert cache.peek_near("k") is not None


async def test_a_lone_cancelled_failing_load_is_quiet(make_cache: MakeCache) -> None:
    cache = await make_cache()
    failing = CountingLoader(fail=RuntimeError("boom"))
    failing.release = asyncio.Event()
    leader = asyncio.create_task(cache.get_or_load("k", failing))
    await wait_for_calls(failing, 1)
    leader.cancel()
    failing.release.set()
    with pytest.raises(asyncio.CancelledError):
        await leader
    await asyncio.sleep(0.01)
    assert cache.peek_near("k") is None and cache.stats.load_errors == 1


class _Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(cache_module, "_monotonic", fake)
    monkeypatch.setattr(cache_module, "_wall_clock", lambda: fake.now + 1.7e9)
    return fake


async def test_stale_is_served_at_once_and_refreshed_once(
    make_cache: MakeCache, clock: _Clock
) -> None:
    cache = await make_cache(ttl_s=10, stale_grace_s=5)
    first = CountingLoader(b"old")
    await cache.get_or_load("k", first)
    clock.now += 12  # expired, inside the grace
    refresher = CountingLoader(b"new")
    refresher.release = asyncio.Event()
    results = [await cache.get_or_load("k", refresher) for _ in range(10)]
    assert all(source is CacheSource.STALE for _, source in results)
    assert all(entry.body == b"old" for entry, _ in results)
    await wait_for_calls(refresher, 1)
    refresher.release.set()
    await asyncio.sleep(0.01)
    assert refresher.calls == 1
    fresh, source = await cache.get_or_load("k", refresher)
    assert (fresh.body, source) == (b"new", CacheSource.NEAR)
    assert cache.stats.stale_served == 10


async def test_failed_refresh_is_not_cached_and_stale_stays_servable(
    make_cache: MakeCache, clock: _Clock
) -> None:
    cache = await make_cache(ttl_s=10, stale_grace_s=5)
    await cache.get_or_load("k", CountingLoader(b"old"))
    clock.now += 11
    failing = CountingLoader(fail=RuntimeError("down"))
    entry, source = await cache.get_or_load("k", failing)
    assert (entry.body, source) == (b"old", CacheSource.STALE)
    await asyncio.sleep(0.01)
    assert failing.calls == 1 and cache.stats.load_errors == 1
    entry, source = await cache.get_or_load("k", failing)
    assert source is CacheSource.STALE  # still inside the grace; another refresh starts
    await asyncio.sleep(0.01)
    clock.now += 5
    with pytest.raises(RuntimeError):
        await cache.get_or_load("k", failing)


async def test_close_cancels_background_loads(make_cache: MakeCache) -> None:
    cache = await make_cache()
    loader = CountingLoader()
    loader.release = asyncio.Event()
    caller = asyncio.create_task(cache.get_or_load("k", loader))
    await wait_for_calls(loader, 1)
    await cache.close()
    with pytest.raises(asyncio.CancelledError):
        await caller
