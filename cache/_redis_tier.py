"""The Redis tier: shared across processes, strictly fail-open.

Rules this module keeps:

* Nothing here raises to the caller for a Redis problem. Down, slow, full,
  garbage: the answer is a miss (or a dropped write), and a counter moves.
* One deadline per operation. redis-py applies ``socket_timeout`` to a send
  with ``asyncio.wait_for`` (a Task per command) and again to the read, and
  a reconnect inside a command adds the connect timeout on top. Instead the
  data-path clients get no socket timeout and every operation (slot wait,
  pool checkout, reconnect, send, read) runs inside one ``asyncio.timeout``
  of ``redis_socket_timeout_ms``. redis-py disconnects a connection whose
  command was cancelled, so a late reply can never be read by the next one.
* No hidden retries: every redis-py client and connection gets
  ``Retry(NoBackoff(), 0)`` (redis-py 8 defaults to 10 retries with backoff,
  and the Sentinel's own clients too). Failures are counted and feed the
  circuit breaker instead.
* Our own concurrency limit (an ``asyncio.Semaphore``, waited on briefly) in
  front of a pool of the same size, so redis-py's pool never has to block or
  raise; a request that finds no slot in time is a miss.
* Writes never make a caller wait: they go to a bounded queue drained by one
  background writer that pipelines them (``SET key value PX ttl+grace``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from ._circuit import CircuitBreaker
from ._codec import CodecError, Entry, UnknownFormatError, decode_entry
from ._config import CacheConfig, RedisTarget
from ._stats import CacheStats

__all__ = ["RedisTier"]

_T = TypeVar("_T")
_WRITE_BATCH = 64
_CLOSE_FLUSH_S = 1.0


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


class RedisTier:
    """GET / MGET / background SET against one Redis, a Sentinel set or a Cluster."""

    def __init__(self, config: CacheConfig, target: RedisTarget, stats: CacheStats) -> None:
        self._config = config
        self._target = target
        self._stats = stats
        self._op_timeout_s = config.redis_socket_timeout_ms / 1000.0
        self._connect_timeout_s = config.redis_connect_timeout_ms / 1000.0
        self._slot_wait_s = config.redis_slot_wait_ms / 1000.0
        self._slots = asyncio.Semaphore(config.redis_max_connections)
        self.circuit = CircuitBreaker(config.circuit_failures, config.circuit_reset_s, stats)
        self._sentinel: Sentinel | None = None
        self._client: Any = None  # Redis | RedisCluster; typed loosely, see _command
        self._pending: deque[tuple[str, bytes, int]] = deque()
        self._max_pending = config.redis_max_pending_writes
        self._wake_writer = asyncio.Event()
        self._writer_idle = asyncio.Event()
        self._writer_idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Connect and open ``redis_prewarm`` connections; never raises for Redis trouble."""
        self._client = self._build_client()
        self._writer = asyncio.create_task(self._write_loop(), name="cache-redis-writer")
        if not await self._warm_up():
            self.circuit.trip()

    async def close(self) -> None:
        self._closing = True
        self._wake_writer.set()
        if self._writer is not None:
            await self._stop_writer(self._writer)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._close_clients()

    # -- reads ---------------------------------------------------------------

    async def get(self, key: str) -> Entry | None:
        if not self._usable():
            return None
        raw = await self._run(self._command, "GET", key)
        return None if raw is None else self._decode(raw)

    async def get_many(self, keys: Sequence[str]) -> list[Entry | None]:
        if not keys or not self._usable():
            return [None] * len(keys)
        raws = await self._run(self._mget, keys)
        if raws is None:
            return [None] * len(keys)
        decode = self._decode
        return [None if raw is None else decode(raw) for raw in raws]

    # -- writes --------------------------------------------------------------

    def submit_write(self, key: str, blob: bytes, px_ms: int) -> None:
        """Queue ``SET key blob PX px_ms`` for the background writer; never waits."""
        if self._closing or not self._usable() or len(self._pending) >= self._max_pending:
            self._stats.writes_dropped += 1
            return
        self._pending.append((key, blob, px_ms))
        self._writer_idle.clear()
        self._wake_writer.set()

    async def flush(self) -> None:
        """Wait until queued writes have been sent (tests and orderly shutdown)."""
        if self._writer is not None and not self._writer.done():
            await self._writer_idle.wait()

    # -- internals: circuit and deadline -------------------------------------

    def _usable(self) -> bool:
        if self.circuit.closed:
            return True
        if self.circuit.trial_due():
            self._spawn(self._trial())
        self._stats.redis_skipped += 1
        return False

    async def _run(
        self,
        operation: Callable[..., Awaitable[_T]],
        *args: Any,
        slot_wait_s: float | None = None,
    ) -> _T | None:
        """``operation(*args)`` under a connection slot and the deadline; None on any failure."""
        if not await self._acquire_slot(self._slot_wait_s if slot_wait_s is None else slot_wait_s):
            self._stats.redis_pool_exhausted += 1
            return None
        try:
            async with asyncio.timeout(self._op_timeout_s):
                result = await operation(*args)
        except TimeoutError:
            self._stats.redis_timeouts += 1
            self.circuit.record_failure()
            return None
        except Exception:
            # Fail-open by design: whatever redis-py raises (connection,
            # protocol, cluster topology, auth, OOM replies...) is a miss.
            self._stats.redis_errors += 1
            self.circuit.record_failure()
            return None
        finally:
            self._slots.release()
        self.circuit.record_success()
        return result

    async def _acquire_slot(self, wait_s: float) -> bool:
        if not self._slots.locked():
            await self._slots.acquire()  # returns at once: a slot is free
            return True
        try:
            async with asyncio.timeout(wait_s):
                await self._slots.acquire()
        except TimeoutError:
            return False
        return True

    def _decode(self, raw: bytes) -> Entry | None:
        try:
            return decode_entry(raw)
        except UnknownFormatError:
            self._stats.unknown_format += 1
        except CodecError:
            self._stats.decode_errors += 1
        return None

    # -- internals: commands -------------------------------------------------

    async def _command(self, *args: Any) -> Any:
        return await self._client.execute_command(*args)

    async def _mget(self, keys: Sequence[str]) -> list[bytes | None]:
        if isinstance(self._client, RedisCluster):
            # Keys hash to many slots; redis-py groups them per slot and
            # pipelines one MGET per slot to each node.
            result: list[bytes | None] = await self._client.mget_nonatomic(keys)
        else:
            result = await self._client.execute_command("MGET", *keys)
        return result

    async def _set_batch(self, batch: list[tuple[str, bytes, int]]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for key, blob, px_ms in batch:
            pipe.set(key, blob, px=px_ms)
        replies: list[Any] = await pipe.execute()
        return replies

    async def _ping_many(self, count: int) -> None:
        """``count`` concurrent PINGs: each needs its own connection, so this warms the pool."""
        client = self._client
        if isinstance(client, RedisCluster):
            await client.initialize()
            nodes = client.get_primaries()
            pings = [
                client.execute_command("PING", target_nodes=node)
                for node in nodes
                for _ in range(count)
            ]
        else:
            pings = [client.execute_command("PING") for _ in range(count)]
        await asyncio.gather(*pings)

    async def _drop_idle_connections(self) -> None:
        client = self._client
        if isinstance(client, RedisCluster):
            for node in client.get_nodes():
                await node.disconnect()
        else:
            await client.connection_pool.disconnect(inuse_connections=False)

    async def _warm_up(self) -> bool:
        deadline = self._connect_timeout_s + self._op_timeout_s
        try:
            async with asyncio.timeout(deadline):
                await self._ping_many(max(1, self._config.redis_prewarm))
        except Exception:
            self._stats.redis_errors += 1
            return False
        return True

    async def _trial(self) -> None:
        """The half-open trial: reconnect and re-warm off the call path."""
        # Idle connections may point at a server that has since restarted;
        # reusing one would fail a command and reopen the circuit.
        with contextlib.suppress(Exception):
            await self._drop_idle_connections()
        if await self._warm_up():
            self.circuit.record_success()
        else:
            self.circuit.record_failure()

    # -- internals: background writer ----------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wake_writer.wait()
            while self._pending:
                batch = [
                    self._pending.popleft() for _ in range(min(len(self._pending), _WRITE_BATCH))
                ]
                await self._write_batch(batch)
            self._wake_writer.clear()
            self._writer_idle.set()
            if self._closing:
                return

    async def _write_batch(self, batch: list[tuple[str, bytes, int]]) -> None:
        if not self._usable():
            self._stats.writes_dropped += len(batch)
            return
        # Unlike a lookup nobody waits on this, so it may wait for a slot as
        # long as a command may take rather than giving up at once.
        done = await self._run(self._set_batch, batch, slot_wait_s=self._op_timeout_s)
        if done is None:
            self._stats.writes_dropped += len(batch)
        else:
            self._stats.writes += len(batch)

    async def _stop_writer(self, writer: asyncio.Task[None]) -> None:
        try:
            async with asyncio.timeout(_CLOSE_FLUSH_S):
                await asyncio.shield(writer)
        except TimeoutError:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def _spawn(self, coro: Awaitable[None]) -> None:
        if self._closing:
            return
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- internals: clients --------------------------------------------------

    def _build_client(self) -> Any:
        target, config = self._target, self._config
        common: dict[str, Any] = {
            "socket_timeout": None,  # see the module docstring: one deadline per op
            "socket_connect_timeout": self._connect_timeout_s,
            "retry": _no_retry(),
            "max_connections": config.redis_max_connections,
            "health_check_interval": 0,
        }
        if target.kind == "cluster":
            nodes = [ClusterNode(host, port) for host, port in target.cluster_nodes]
            # Partial coverage keeps the cache useful when one master is down.
            return RedisCluster(startup_nodes=nodes, require_full_coverage=False, **common)
        common["retry_on_error"] = []
        if target.kind == "sentinel":
            # redis-py's Sentinel is untyped.
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call]
                list(target.sentinels),
                sentinel_kwargs={
                    "socket_timeout": self._op_timeout_s,
                    "socket_connect_timeout": self._connect_timeout_s,
                    "retry": _no_retry(),
                },
            )
            return self._sentinel.master_for(
                target.service_name,
                db=target.db,
                username=target.username,
                password=target.password,
                **common,
            )
        assert target.url is not None
        return Redis.from_url(target.url, **common)

    async def _close_clients(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
        if self._sentinel is not None:
            with contextlib.suppress(Exception):
                await self._sentinel.aclose()
