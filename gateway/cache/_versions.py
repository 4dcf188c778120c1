"""Version tags shared by every process through Redis.

A version tag is part of every cache key of a route (or of one model on it):
bumping it makes every answer cached under the old tag unreachable. Set in
one process, a tag must reach the whole fleet, or the other processes keep
serving answers of the model that was just replaced. So tags live in Redis,
one hash per route (field: the model, ``""`` for the whole route), and each
process keeps a local view of it that is at most ``version_ttl_s`` old:

* ``due(route)`` (synchronous, on the call path) says whether the view is
  too old to build a key with; the caller then awaits ``refresh(route)``.
  Past half the TTL a refresh starts in the background instead, so under
  steady traffic no call waits for it.
* ``set(route, model, tag)`` applies at once locally and is published to
  Redis in the background. Until Redis has it, the local tag wins over what
  is read back, so a slow or failed publish never undoes a bump here.
* Redis down: the view is kept (fail-open, like the rest of the cache) and
  re-read after another TTL.

Without Redis the tags are local to the process, as they always were.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._keys import _safe_field
from ._stats import CacheStats

if TYPE_CHECKING:  # redis is an optional extra: imported only with a Redis tier
    from ._redis_tier import RedisTier

__all__ = ["VersionTags"]

_ROUTE_WIDE = ""
# A route's hash holds one field per model with a tag of its own; more than
# this is no hash a sane writer made, and reading it would cost every process.
_MAX_FIELDS = 4096
_KEY_SCHEMA = "ver1"
# Views kept per process: one per route a cached call used. Callers may name
# endpoints freely, so the table is bounded; a dropped view is read again.
_MAX_VIEWS = 4096

_monotonic = time.monotonic


class _View:
    """What this process knows of one route's tags, and until when it may use it."""

    __slots__ = ("expires", "refresh_at", "refreshing", "tags")

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.expires = 0.0  # monotonic; 0.0: never read from Redis
        self.refresh_at = 0.0
        self.refreshing: asyncio.Future[None] | None = None


class VersionTags:
    """Per-route (and per-model) version tags; shared through Redis when there is one."""

    __slots__ = (
        "_namespace",
        "_pending",
        "_publishing",
        "_redis",
        "_shared",
        "_spawn",
        "_stats",
        "_ttl_s",
        "_views",
    )

    def __init__(
        self,
        namespace: str,
        redis: RedisTier | None,
        ttl_s: float,
        stats: CacheStats,
        spawn: Callable[[Awaitable[None]], asyncio.Future[Any]],
    ) -> None:
        self._namespace = namespace
        self._redis = redis
        self._ttl_s = ttl_s
        self._stats = stats
        self._spawn = spawn
        self._views: dict[str, _View] = {}
        # Tags set here and not yet acknowledged by Redis: route -> {model: tag}.
        self._pending: dict[str, dict[str, str]] = {}
        self._publishing: set[asyncio.Future[None]] = set()
        # Tags are read from and published to Redis: there is one, and it is started.
        self._shared = False

    def start(self) -> None:
        """Called once Redis is connected: from now on tags are read and published."""
        self._shared = self._redis is not None

    # -- the call path -----------------------------------------------------

    def lookup(self, route: str, model: str | None) -> str | None:
        """The tag for ``model`` on ``route`` (the route-wide tag if it has none)."""
        view = self._views.get(route)
        if view is None:
            return None
        tags = view.tags
        if not tags:
            return None
        return (tags.get(model) if model else None) or tags.get(_ROUTE_WIDE)

    def due(self, route: str) -> bool:
        """True when the view of ``route`` is too old to use: await ``refresh`` first."""
        if not self._shared:
            return False
        view = self._views.get(route)
        if view is None:
            return True
        now = _monotonic()
        if now < view.refresh_at:
            return False
        if now >= view.expires:
            return True
        if view.refreshing is None:
            self._start_refresh(route, view)
        return False

    async def refresh(self, route: str) -> None:
        """Bring the view of ``route`` up to date (one read at a time per route)."""
        view = self._view_for(route)
        if view.refreshing is None:
            self._start_refresh(route, view)
        assert view.refreshing is not None
        await asyncio.shield(view.refreshing)

    # -- bumping -------------------------------------------------------------

    def set(self, route: str, model: str | None, tag: str) -> None:
        """Tag ``route`` (or one model on it) now, here; the fleet follows via Redis."""
        field = model or _ROUTE_WIDE
        view = self._view_for(route)
        view.tags[field] = tag
        if self._redis is None:
            return
        self._pending.setdefault(route, {})[field] = tag
        if self._shared and view.refreshing is None:
            self._start_refresh(route, view)
        # Not started yet: the first refresh of the route publishes it. A
        # refresh in flight: the next one does (``due`` after refresh_at).
        view.refresh_at = 0.0

    async def flush(self) -> None:
        """Wait for publishes and reads in progress (tests and orderly shutdown)."""
        while self._publishing:
            await asyncio.gather(*self._publishing, return_exceptions=True)

    # -- internals -----------------------------------------------------------

    def _view_for(self, route: str) -> _View:
        view = self._views.get(route)
        if view is None:
            if len(self._views) >= _MAX_VIEWS:
                self._drop_oldest_view()
            view = self._views[route] = _View()
        return view

    def _drop_oldest_view(self) -> None:
        for route, view in self._views.items():
            # A view with a refresh in flight or a bump not yet in Redis stays.
            if view.refreshing is None and route not in self._pending:
                del self._views[route]
                return

    def _start_refresh(self, route: str, view: _View) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        view.refreshing = future
        self._publishing.add(future)
        task = self._spawn(self._sync(route, view))

        def settle(_: object) -> None:
            # Also when the task was cancelled before it ran (cache closing):
            # nobody waiting on the refresh may hang.
            if view.refreshing is future:
                view.refreshing = None
            self._publishing.discard(future)
            if not future.done():
                future.set_result(None)

        task.add_done_callback(settle)

    async def _sync(self, route: str, view: _View) -> None:
        await self._publish(route)
        await self._read(route, view)

    async def _publish(self, route: str) -> None:
        pending = self._pending.get(route)
        if not pending:
            return
        assert self._redis is not None
        sent = dict(pending)
        if await self._redis.hset_many(self._key(route), sent):
            for field, tag in sent.items():
                if pending.get(field) == tag:
                    del pending[field]
            if not pending:
                self._pending.pop(route, None)

    async def _read(self, route: str, view: _View) -> None:
        assert self._redis is not None
        raw = await self._redis.hgetall(self._key(route))
        now = _monotonic()
        view.expires = now + self._ttl_s
        view.refresh_at = now + self._ttl_s / 2
        if raw is None:
            return  # Redis unavailable: keep what we know until the next try
        tags = _decode(raw)
        if tags is None:
            self._stats.corrupt_entries += 1
            return
        tags.update(self._pending.get(route, {}))  # our own bumps Redis has not taken yet
        view.tags = tags

    def _key(self, route: str) -> str:
        return f"{self._namespace}:{_KEY_SCHEMA}:{_safe_field(route)}"


def _decode(raw: dict[Any, Any]) -> dict[str, str] | None:
    if len(raw) > _MAX_FIELDS:
        return None
    tags: dict[str, str] = {}
    for field, tag in raw.items():
        try:
            name = field.decode() if isinstance(field, bytes) else str(field)
            value = tag.decode() if isinstance(tag, bytes) else str(tag)
        except UnicodeDecodeError:
            return None
        if value:
            tags[name] = value
    return tags
