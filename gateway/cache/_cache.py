"""PredictionCache: near tier -> Redis tier -> loader, with single-flight and SWR.

Hot path: ``peek_near`` is synchronous and allocation-free, so a caller can
answer a near hit before its first ``await``. Everything else is the miss
path, where a few microseconds of bookkeeping are small next to a network
round trip.

Single-flight: the first caller to miss a key (the leader) registers a
``_Flight``; identical concurrent misses (followers) await its outcome. The
leader reads Redis itself; if Redis has nothing, the loader runs in a Task
of its own so that cancelling any caller, the leader included, never
cancels the load the others are waiting for. For the same reason no waiter
awaits a future another one also awaits: followers await theirs through
``asyncio.shield``, the leader one of its own. Loader errors reach every
waiter and are never stored.

A flight is released on every path: settled with an entry or the loader's
error, handed over to a background task when its leader is cancelled or
fails, and released by that task's done callback however the task ends
(even cancelled before it ran). A follower waits no longer than its own
``deadline``.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

from ._codec import Entry, encode_entry
from ._config import CacheConfig, ConfigError
from ._keys import make_key
from ._near import NearTier
from ._redis_target import redis_target
from ._stats import CacheStats
from ._versions import VersionTags

if TYPE_CHECKING:
    from ._redis_target import RedisTarget
    from ._redis_tier import RedisTier

__all__ = ["CacheSource", "Loader", "PredictionCache", "PredictionCacheProtocol"]

Loader = Callable[[], Awaitable[Entry]]

_monotonic = time.monotonic
_wall_clock = time.time


class CacheSource(enum.Enum):
    """Where the value returned by ``get_or_load`` came from."""

    NEAR = "near"
    REDIS = "redis"
    LOADED = "loaded"
    STALE = "stale"
    COALESCED = "coalesced"


class PredictionCacheProtocol(Protocol):
    """What the gateway needs from a prediction cache."""

    def key_for(
        self,
        route: str,
        model: str | None,
        variant: str | None,
        content_type: str | None,
        accept: str | None,
        version_tag: str | None,
        body: bytes | bytearray | memoryview,
    ) -> str: ...

    def peek_near(self, key: str) -> Entry | None: ...

    async def get_or_load(
        self,
        key: str,
        loader: Loader,
        *,
        ttl_s: float | None = None,
        use_cache: bool = True,
        deadline: float | None = None,
    ) -> tuple[Entry, CacheSource]: ...

    async def get_many(
        self, keys: Sequence[str], *, ttl_s: float | None = None
    ) -> list[Entry | None]: ...

    def put(self, key: str, entry: Entry, ttl_s: float | None = None) -> Entry: ...

    @property
    def stats(self) -> CacheStats: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class _Flight:
    """One in-progress resolution of a key, shared by every concurrent caller.

    The leader that started the load awaits ``leader``, a future of its own,
    settled in the same step as the followers' ``shared`` one: cancelling the
    leader cancels only its future, and it wakes one loop pass sooner than
    through ``asyncio.shield``. ``shared`` is made by the first follower, so
    a miss that nobody joins makes no future for it.
    """

    __slots__ = ("followers", "leader", "settled", "shared")

    def __init__(self) -> None:
        self.followers = 0
        self.settled = False
        self.leader: asyncio.Future[Entry] | None = None
        self.shared: asyncio.Future[Entry] | None = None

    def joined(self) -> asyncio.Future[Entry]:
        """The future followers await (through ``asyncio.shield``)."""
        shared = self.shared
        if shared is None:
            shared = self.shared = asyncio.get_running_loop().create_future()
        return shared

    def set_result(self, entry: Entry) -> None:
        if self.settled:
            return
        self.settled = True
        for future in (self.leader, self.shared):
            if future is not None and not future.done():
                future.set_result(entry)

    def set_exception(self, error: BaseException) -> None:
        if self.settled:
            return
        self.settled = True
        for future in (self.leader, self.shared):
            if future is not None and not future.done():
                future.add_done_callback(_consume_exception)
                future.set_exception(error)

    def cancel(self) -> None:
        if self.settled:
            return
        self.settled = True
        for future in (self.leader, self.shared):
            if future is not None:
                future.cancel()


def _consume_exception(future: asyncio.Future[Entry]) -> None:
    # A failed load nobody awaits any more (all callers cancelled) must not
    # log "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class PredictionCache:
    """Two-tier prediction cache. See the package docstring for the call sequence."""

    def __init__(self, config: CacheConfig | None = None) -> None:
        self._config = config = config or CacheConfig()
        self._stats = CacheStats()
        self._enabled = config.enabled
        self._namespace = config.namespace
        self._ttl_s = config.ttl_s
        self._grace_s = config.stale_grace_s
        self._near = NearTier(
            config.near_max_entries if config.enabled else 0,
            config.near_max_bytes,
            config.effective_near_ttl_s,
            config.stale_grace_s,
        )
        # Bound once: the hit path then costs no attribute chain lookups.
        self._near_slots = self._near.slots
        self._near_touch = self._near.slots.move_to_end
        target = redis_target(config)
        self._redis = _redis_tier(config, target, self._stats) if target is not None else None
        self._flights: dict[str, _Flight] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.versions = VersionTags(
            config.namespace, self._redis, config.version_ttl_s, self._stats, self._spawn
        )

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Connect and pre-warm Redis. A dead Redis does not fail this: the circuit opens."""
        if self._redis is not None:
            await self._redis.start()
        self.versions.start()

    async def close(self) -> None:
        """Cancel background loads and refreshes, flush queued writes, close pools."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._redis is not None:
            await self._redis.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- introspection -------------------------------------------------------

    @property
    def config(self) -> CacheConfig:
        return self._config

    @property
    def stats(self) -> CacheStats:
        return self._stats

    @property
    def near_size(self) -> tuple[int, int]:
        """(entries, estimated bytes) held by the near tier."""
        return len(self._near), self._near.nbytes

    def observe_circuit(self, observer: Callable[[str], None] | None) -> None:
        """Call ``observer(state)`` when Redis is lost or back.

        ``state`` is the summary in ``stats.circuit_state``: ``"open"`` (the
        tier is skipped), ``"partial"`` (some Cluster nodes are), or
        ``"closed"`` (back). Half-open trials are not reported.
        """
        if self._redis is not None:
            self._redis.observer = observer

    def clear_near(self) -> None:
        self._near.clear()

    async def flush_writes(self) -> None:
        """Wait for queued Redis writes to be sent (tests, benchmarks, shutdown)."""
        await self.versions.flush()
        if self._redis is not None:
            await self._redis.flush()

    # -- the API the gateway uses ------------------------------------------------

    def key_for(
        self,
        route: str,
        model: str | None,
        variant: str | None,
        content_type: str | None,
        accept: str | None,
        version_tag: str | None,
        body: bytes | bytearray | memoryview,
    ) -> str:
        """:func:`cache.make_key` in this cache's namespace."""
        return make_key(
            self._namespace, route, model, variant, content_type, accept, version_tag, body
        )

    def peek_near(self, key: str) -> Entry | None:
        """A fresh near-tier entry, or None. Synchronous; call it before any await."""
        slot = self._near_slots.get(key)
        if slot is None or slot.fresh_until <= _monotonic():
            return None
        self._near_touch(key)
        self._stats.near_hits += 1
        return slot.entry

    async def get_or_load(
        self,
        key: str,
        loader: Loader,
        *,
        ttl_s: float | None = None,
        use_cache: bool = True,
        deadline: float | None = None,
    ) -> tuple[Entry, CacheSource]:
        """The cached entry for ``key``, or ``loader()``'s result (then stored).

        ``use_cache=False`` bypasses the cache both ways. Redis problems are
        misses; the loader's exceptions propagate and are never cached.
        ``deadline`` (``time.monotonic()`` seconds) bounds the wait for
        another caller's load of the same key: past it, ``TimeoutError``.
        (The loader bounds its own work.)
        """
        if not use_cache or not self._enabled:
            return await self._load_uncached(loader), CacheSource.LOADED
        now = _monotonic()
        slot = self._near.lookup(key, now)
        if slot is not None:
            if slot.fresh_until > now:
                self._stats.near_hits += 1
                return slot.entry, CacheSource.NEAR
            self._stats.stale_served += 1
            self._refresh_in_background(key, loader, ttl_s)
            return slot.entry, CacheSource.STALE
        flight = self._flights.get(key)
        if flight is not None:
            return await self._follow(flight, deadline), CacheSource.COALESCED
        return await self._lead(key, loader, ttl_s)

    async def get_many(
        self, keys: Sequence[str], *, ttl_s: float | None = None
    ) -> list[Entry | None]:
        """Fresh entries for ``keys`` (None where absent): near first, one MGET for the rest.

        ``ttl_s`` (default: the configured TTL) caps how long after it was
        stored a Redis entry counts as fresh, whatever its own expiry says.
        """
        if not self._enabled:
            return [None] * len(keys)
        results: list[Entry | None] = []
        missing: list[int] = []
        near_slots, now = self._near_slots, _monotonic()
        for index, key in enumerate(keys):
            slot = near_slots.get(key)
            if slot is not None and slot.fresh_until > now:
                self._near_touch(key)
                results.append(slot.entry)
            else:
                results.append(None)
                missing.append(index)
        self._stats.near_hits += len(keys) - len(missing)
        if missing and self._redis is not None:
            found = await self._redis.get_many([keys[i] for i in missing])
            ttl = self._ttl_s if ttl_s is None else ttl_s
            self._fill_from_redis(keys, missing, found, results, ttl)
        self._stats.misses += sum(1 for i in missing if results[i] is None)
        return results

    def put(self, key: str, entry: Entry, ttl_s: float | None = None) -> Entry:
        """Store ``entry`` in the near tier now and in Redis in the background.

        Returns the stored entry, stamped with ``stored_at``/``expires_at``.
        """
        if not self._enabled:
            return entry
        return self._store(key, entry, self._ttl_s if ttl_s is None else ttl_s)

    # -- single-flight -------------------------------------------------------

    async def _follow(self, flight: _Flight, deadline: float | None) -> Entry:
        self._stats.coalesced += 1
        flight.followers += 1
        try:
            if deadline is None:
                return await asyncio.shield(flight.joined())
            async with asyncio.timeout(deadline - _monotonic()):
                return await asyncio.shield(flight.joined())
        finally:
            flight.followers -= 1

    async def _lead(
        self, key: str, loader: Loader, ttl_s: float | None
    ) -> tuple[Entry, CacheSource]:
        flight = _Flight()
        self._flights[key] = flight
        if self._redis is not None:
            found = await self._lead_from_redis(key, loader, ttl_s, flight)
            if found is not None:
                return found
        self._stats.misses += 1
        loop = asyncio.get_running_loop()
        leader = flight.leader = loop.create_future()
        self._fly(key, flight, self._load_into(key, loader, ttl_s, flight), loop)
        return await leader, CacheSource.LOADED

    async def _lead_from_redis(
        self, key: str, loader: Loader, ttl_s: float | None, flight: _Flight
    ) -> tuple[Entry, CacheSource] | None:
        """The leader's Redis read: an answer from it (fresh or stale), or None to load."""
        try:
            found = await self._read_redis(key, ttl_s)
        except BaseException:  # cancelled (or a bug): the followers still get an answer
            self._hand_over(key, loader, ttl_s, flight)
            raise
        if found is None:
            return None
        entry, fresh = found
        self._settle(key, flight, entry)
        if fresh:
            self._stats.redis_hits += 1
            return entry, CacheSource.REDIS
        self._stats.stale_served += 1
        self._refresh_in_background(key, loader, ttl_s)
        return entry, CacheSource.STALE

    def _hand_over(self, key: str, loader: Loader, ttl_s: float | None, flight: _Flight) -> None:
        """The leader left while reading Redis: finish for the followers, if any."""
        if flight.followers:
            self._fly(key, flight, self._resolve(key, loader, ttl_s, flight))
        else:
            self._drop_flight(key, flight)
            flight.cancel()

    def _refresh_in_background(self, key: str, loader: Loader, ttl_s: float | None) -> None:
        """Stale-while-revalidate: at most one refresh per key at a time."""
        if key in self._flights or self._closed:
            return
        flight = _Flight()
        self._flights[key] = flight
        self._fly(key, flight, self._resolve(key, loader, ttl_s, flight, accept_stale=False))

    def _fly(
        self,
        key: str,
        flight: _Flight,
        work: Coroutine[Any, Any, None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Run ``work``, which settles ``flight``, as a task that releases it however it ends."""
        task = (loop or asyncio.get_running_loop()).create_task(work)
        self._tasks.add(task)
        # One done callback, not two: it forgets the task too.
        task.add_done_callback(functools.partial(self._land, key, flight))

    def _land(self, key: str, flight: _Flight, task: asyncio.Task[None]) -> None:
        """``task`` owned ``flight`` and ended: if it left it unsettled, nobody else will."""
        self._tasks.discard(task)
        self._drop_flight(key, flight)
        if flight.settled:
            return
        if task.cancelled():  # close(), possibly before the task ever ran
            flight.cancel()
            return
        error = task.exception()
        flight.set_exception(error or RuntimeError("the load ended without an entry"))

    async def _resolve(
        self,
        key: str,
        loader: Loader,
        ttl_s: float | None,
        flight: _Flight,
        *,
        accept_stale: bool = True,
    ) -> None:
        """Redis, then the loader, settling ``flight``; runs as a background task."""
        found = await self._read_redis(key, ttl_s)
        if found is not None and (accept_stale or found[1]):
            if found[1]:
                self._stats.redis_hits += 1
            self._settle(key, flight, found[0])
            return
        await self._load_into(key, loader, ttl_s, flight)

    async def _load_into(
        self, key: str, loader: Loader, ttl_s: float | None, flight: _Flight
    ) -> None:
        self._stats.loads += 1
        try:
            entry = await loader()
        except Exception as exc:
            self._stats.load_errors += 1
            self._drop_flight(key, flight)
            flight.set_exception(exc)
            return
        except BaseException:  # cancelled by close(), or the process is exiting
            self._drop_flight(key, flight)
            flight.cancel()
            raise
        stored = self._store(key, entry, self._ttl_s if ttl_s is None else ttl_s)
        self._settle(key, flight, stored)

    def _settle(self, key: str, flight: _Flight, entry: Entry) -> None:
        self._drop_flight(key, flight)
        flight.set_result(entry)

    def _drop_flight(self, key: str, flight: _Flight) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]

    # -- tiers ---------------------------------------------------------------

    async def _read_redis(self, key: str, ttl_s: float | None) -> tuple[Entry, bool] | None:
        """A usable Redis entry (filled into the near tier) and whether it is fresh."""
        if self._redis is None:
            return None
        entry = await self._redis.get(key)
        if entry is None:
            return None
        entry = self._clamped(entry, self._ttl_s if ttl_s is None else ttl_s, _wall_clock())
        if entry is None:
            return None
        fresh_for_s = entry.expires_at - _wall_clock()
        if fresh_for_s <= -self._grace_s:
            return None  # Redis keeps it for the grace period only; a clock skew edge
        self._near.put(key, entry, fresh_for_s, _monotonic())
        return entry, fresh_for_s > 0

    def _clamped(self, entry: Entry, ttl_s: float, wall_now: float) -> Entry | None:
        """``entry`` fresh for at most ``ttl_s`` after it was stored, or None if implausible.

        The expiry in a shared entry is only what its writer claims: a
        reader never trusts it beyond its own TTL, and an entry stamped as
        stored further ahead than that TTL is no entry a sane writer made.
        """
        stored_at = entry.stored_at
        if stored_at > wall_now + ttl_s:
            self._stats.corrupt_entries += 1
            return None
        latest = stored_at + ttl_s
        if entry.expires_at > latest:
            return entry._replace(expires_at=latest)
        return entry

    def _fill_from_redis(
        self,
        keys: Sequence[str],
        missing: list[int],
        found: list[Entry | None],
        results: list[Entry | None],
        ttl_s: float,
    ) -> None:
        wall_now, now = _wall_clock(), _monotonic()
        put_near = self._near.put
        hits = 0
        for index, found_entry in zip(missing, found, strict=True):
            if found_entry is None:
                continue
            entry = self._clamped(found_entry, ttl_s, wall_now)
            if entry is None:
                continue
            fresh_for_s = entry.expires_at - wall_now
            if fresh_for_s > -self._grace_s:
                put_near(keys[index], entry, fresh_for_s, now)
            if fresh_for_s > 0:
                results[index] = entry
                hits += 1
        self._stats.redis_hits += hits

    def _store(self, key: str, entry: Entry, ttl_s: float) -> Entry:
        wall_now = _wall_clock()
        stored = Entry(entry.body, entry.content_type, entry.meta, wall_now, wall_now + ttl_s)
        self._near.put(key, stored, ttl_s, _monotonic())
        if self._redis is not None:
            self._write_to_redis(key, stored, ttl_s)
        return stored

    def _write_to_redis(self, key: str, entry: Entry, ttl_s: float) -> None:
        assert self._redis is not None
        try:
            blob = encode_entry(entry)
        except ValueError:
            self._stats.writes_dropped += 1
            return
        if len(blob) > self._config.max_value_bytes:
            self._stats.writes_dropped += 1  # readers would refuse it
            return
        # Redis keeps the value through the stale grace so other processes
        # can serve it stale while one of them refreshes it.
        px_ms = max(1, int((ttl_s + self._grace_s) * 1000))
        self._redis.submit_write(key, blob, px_ms)

    async def _load_uncached(self, loader: Loader) -> Entry:
        self._stats.loads += 1
        try:
            return await loader()
        except Exception:
            self._stats.load_errors += 1
            raise

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _redis_tier(config: CacheConfig, target: RedisTarget, stats: CacheStats) -> RedisTier:
    # redis is an optional dependency (the "redis" extra): imported only
    # when a Redis tier is configured.
    try:
        from ._redis_tier import RedisTier
    except ImportError:
        raise ConfigError(
            "cache: a Redis tier is configured (redis_url or cluster) but the redis package "
            "is not installed: pip install 'sagemaker-gateway[redis]'"
        ) from None
    return RedisTier(config, target, stats)
