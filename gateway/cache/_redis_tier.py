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
* One circuit breaker per Redis; for a Cluster also one per node, so a
  dead node costs the keys in its slots, not the whole tier. A key whose
  node's circuit is open is a miss (or a dropped write) without a command.
* No hidden retries: every redis-py client and connection gets
  ``Retry(NoBackoff(), 0)`` (redis-py 8 defaults to 10 retries with backoff,
  and the Sentinel's own clients too). Failures are counted and feed the
  circuit breaker instead.
* Our own concurrency limit (an ``asyncio.Semaphore``, waited on briefly) in
  front of a pool of the same size, so redis-py's pool never has to block or
  raise; a request that finds no slot in time is a miss.
* Writes never make a caller wait: they go to a bounded queue drained by one
  background writer that pipelines them (``SET key value PX ttl+grace``).
* Every reply is checked for the type and shape its command calls for (a
  value or nil for GET, exactly one of those per key for MGET, ...).
  Anything else is a miss (or a dropped write), counted in
  ``redis_bad_replies`` and fed to the circuit breaker like any error, and
  the idle connections are dropped: the one it came on may be out of step.
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

from ._circuit import CLOSED, CircuitBreaker
from ._codec import CodecError, CorruptEntryError, Entry, UnknownFormatError, decode_entry
from ._config import CacheConfig
from ._redis_target import RedisTarget
from ._stats import CacheStats

__all__ = ["RedisTier"]

_T = TypeVar("_T")
_WRITE_BATCH = 64
_CLOSE_FLUSH_S = 1.0


class _BadReply(Exception):
    """Redis answered a command with a reply no Redis sends for it."""


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
        self._cluster = target.kind == "cluster"
        self._node_circuits: dict[str, CircuitBreaker] = {}
        # Told the summary state when Redis is lost ("open", "partial") or back
        # ("closed"); see PredictionCache.observe_circuit.
        self.observer: Callable[[str], None] | None = None
        self._reported = CLOSED
        # Tier-wide: Redis unreachable at start, or (single Redis) failing.
        self.circuit = self._new_circuit("")
        self._sentinel: Sentinel | None = None
        self._client: Any = None  # Redis | RedisCluster: redis-py's types are loose anyway
        self._pending: deque[tuple[str, bytes | None, int]] = deque()
        self._max_pending = config.redis_max_pending_writes
        self._max_value_bytes = config.max_value_bytes
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
        circuit = self._guard(key)
        if circuit is None:
            return None
        raw = await self._run(self._get, key, circuit=circuit)
        return None if raw is None else self._decode(key, raw)

    async def get_many(self, keys: Sequence[str]) -> list[Entry | None]:
        if not keys or not self._usable():
            return [None] * len(keys)
        if self._cluster:
            return await self._get_many_per_node(keys)
        raws = await self._run(self._mget, keys)
        if raws is None:
            return [None] * len(keys)
        decode = self._decode
        pairs = zip(keys, raws, strict=True)
        return [None if raw is None else decode(key, raw) for key, raw in pairs]

    async def hgetall(self, key: str) -> dict[Any, Any] | None:
        """The hash at ``key`` ({} when absent), or None when Redis is unavailable."""
        circuit = self._guard(key)
        if circuit is None:
            return None
        result: dict[Any, Any] | None = await self._run(self._hgetall, key, circuit=circuit)
        return result

    async def hset_many(self, key: str, fields: dict[str, str]) -> bool:
        """``HSET key field value ...``; False when Redis is unavailable."""
        circuit = self._guard(key) if fields else None
        if circuit is None:
            return False
        flat = [item for pair in fields.items() for item in pair]
        return await self._run(self._hset, key, flat, circuit=circuit) is not None

    async def _get_many_per_node(self, keys: Sequence[str]) -> list[Entry | None]:
        """One MGET group per Cluster node, each under its node's circuit, concurrently."""
        groups: dict[CircuitBreaker, list[int]] = {}
        for index, key in enumerate(keys):
            circuit = self._node_guard(key)
            if circuit is not None:
                groups.setdefault(circuit, []).append(index)
        results: list[Entry | None] = [None] * len(keys)

        async def fetch(circuit: CircuitBreaker, indices: list[int]) -> None:
            raws = await self._run(self._mget, [keys[i] for i in indices], circuit=circuit)
            if raws is not None:
                for index, raw in zip(indices, raws, strict=True):
                    if raw is not None:
                        results[index] = self._decode(keys[index], raw)

        await asyncio.gather(*(fetch(circuit, indices) for circuit, indices in groups.items()))
        return results

    # -- writes --------------------------------------------------------------

    def submit_write(self, key: str, blob: bytes | None, px_ms: int) -> None:
        """Queue ``SET key blob PX px_ms`` (``DEL key`` for None) for the background writer.

        Never waits.
        """
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
        """Whether the tier as a whole takes commands (see ``_guard`` for one key)."""
        if self.circuit.closed:
            return True
        if self.circuit.trial_due():
            self._spawn(self._trial())
        self._stats.redis_skipped += 1
        return False

    def _guard(self, key: str) -> CircuitBreaker | None:
        """The circuit a command on ``key`` runs under, or None to skip it (a miss)."""
        if not self._usable():
            return None
        if not self._cluster:
            return self.circuit
        return self._node_guard(key)

    def _node_guard(self, key: str) -> CircuitBreaker | None:
        """The circuit of the Cluster node owning ``key``, if it is closed."""
        try:
            node = self._client.get_node_from_key(key)
        except Exception:  # a slot no known node owns (yet): nothing to send it to
            node = None
        if node is None:
            self._stats.redis_skipped += 1
            return None
        circuit = self._node_circuits.get(node.name)
        if circuit is None:
            circuit = self._node_circuits[node.name] = self._new_circuit(node.name)
        if circuit.closed:
            return circuit
        if circuit.trial_due():
            self._spawn(self._trial_node(circuit))
        self._stats.redis_skipped += 1
        return None

    def _new_circuit(self, name: str) -> CircuitBreaker:
        config = self._config
        return CircuitBreaker(
            config.circuit_failures,
            config.circuit_reset_s,
            self._stats,
            on_change=self._summarise_circuits,
            name=name,
        )

    def _summarise_circuits(self) -> None:
        stats = self._stats
        open_nodes = sum(1 for circuit in self._node_circuits.values() if not circuit.closed)
        stats.circuit_open_nodes = open_nodes
        if self.circuit.state != CLOSED:
            stats.circuit_state = self.circuit.state
        else:
            stats.circuit_state = "partial" if open_nodes else CLOSED
        self._report(stats.circuit_state)

    def _report(self, state: str) -> None:
        # Lost: closed -> open/partial; back: -> closed. A half-open trial, or
        # open <-> partial, is not news to an operator.
        if state == "half_open" or (state != CLOSED) == (self._reported != CLOSED):
            return
        self._reported = state
        if self.observer is not None:
            self.observer(state)

    async def _run(
        self,
        operation: Callable[..., Awaitable[_T]],
        *args: Any,
        slot_wait_s: float | None = None,
        circuit: CircuitBreaker | None = None,
    ) -> _T | None:
        """``operation(*args)`` under a connection slot and the deadline; None on any failure.

        The outcome is recorded on ``circuit`` (default: the tier's).
        """
        breaker = self.circuit if circuit is None else circuit
        if not await self._acquire_slot(self._slot_wait_s if slot_wait_s is None else slot_wait_s):
            self._stats.redis_pool_exhausted += 1
            return None
        try:
            async with asyncio.timeout(self._op_timeout_s):
                result = await operation(*args)
        except TimeoutError:
            self._stats.redis_timeouts += 1
            breaker.record_failure()
            return None
        except _BadReply:
            self._stats.redis_bad_replies += 1
            breaker.record_failure()
            return None
        except Exception:
            # Fail-open by design: whatever redis-py raises (connection,
            # protocol, cluster topology, auth, OOM replies...) is a miss.
            self._stats.redis_errors += 1
            breaker.record_failure()
            return None
        finally:
            self._slots.release()
        breaker.record_success()
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

    def _decode(self, key: str, raw: bytes) -> Entry | None:
        """The entry in ``raw``, or None (counted) for anything that is not a usable entry.

        A damaged value is deleted, so no other reader pays to decode it
        again; the caller's load will usually overwrite it first anyway.
        """
        if len(raw) > self._max_value_bytes:
            self._stats.oversize_entries += 1
            self.submit_write(key, None, 0)
            return None
        try:
            return decode_entry(raw)
        except UnknownFormatError:
            # Another codec version's entry (a rolling deploy): a miss, left alone.
            self._stats.unknown_format += 1
            return None
        except CorruptEntryError:
            self._stats.corrupt_entries += 1
        except CodecError:
            self._stats.decode_errors += 1
        self.submit_write(key, None, 0)
        return None

    # -- internals: commands -------------------------------------------------

    async def _get(self, key: str) -> bytes | None:
        reply = await self._client.execute_command("GET", key)
        if reply is None or type(reply) is bytes:
            return reply
        raise await self._bad_reply("GET")

    async def _mget(self, keys: Sequence[str]) -> list[bytes | None]:
        if isinstance(self._client, RedisCluster):
            # Keys hash to many slots; redis-py groups them per slot and
            # pipelines one MGET per slot to each node.
            reply = await self._client.mget_nonatomic(keys)
        else:
            reply = await self._client.execute_command("MGET", *keys)
        if (
            type(reply) is list
            and len(reply) == len(keys)
            and all(item is None or type(item) is bytes for item in reply)
        ):
            return reply
        raise await self._bad_reply("MGET")

    async def _hgetall(self, key: str) -> dict[bytes, bytes]:
        reply = await self._client.execute_command("HGETALL", key)
        if type(reply) is dict and all(
            type(field) is bytes and type(value) is bytes for field, value in reply.items()
        ):
            return reply
        raise await self._bad_reply("HGETALL")

    async def _hset(self, key: str, flat: list[str]) -> int:
        reply = await self._client.execute_command("HSET", key, *flat)
        if type(reply) is int:
            return reply
        raise await self._bad_reply("HSET")

    async def _set_batch(self, batch: list[tuple[str, bytes | None, int]]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for key, blob, px_ms in batch:
            if blob is None:
                pipe.delete(key)
            else:
                pipe.set(key, blob, px=px_ms)
        replies: list[Any] = await pipe.execute()
        # SET answers OK (True once redis-py has read it), DEL a count.
        if len(replies) == len(batch) and all(
            reply is True if blob is not None else type(reply) is int
            for reply, (_, blob, _) in zip(replies, batch, strict=True)
        ):
            return replies
        raise await self._bad_reply("SET")

    async def _bad_reply(self, command: str) -> _BadReply:
        """The error for a reply of the wrong type or shape, once the idle connections are gone.

        The connection the reply came on may be out of step with its
        commands (a late or extra reply in its stream): it went back to the
        pool just now, without an await since, so it is among the idle
        connections closed here, before any other command can take it.
        """
        client = self._client
        with contextlib.suppress(Exception):
            if isinstance(client, RedisCluster):
                for node in client.get_nodes():
                    await node.disconnect_free_connections()
            else:
                await client.connection_pool.disconnect(inuse_connections=False)
        return _BadReply(f"unexpected reply to {command}")

    async def _ping_many(self, count: int) -> None:
        """``count`` concurrent PINGs: each needs its own connection, so this warms the pool."""
        client = self._client
        if isinstance(client, RedisCluster):
            await client.initialize()
            targets = [{"target_nodes": node} for node in client.get_primaries()]
        else:
            targets = [{}]
        # A task group, not gather: when one PING fails the others are
        # cancelled, instead of connecting on after the warm-up has given up.
        async with asyncio.TaskGroup() as group:
            for target in targets:
                for _ in range(count):
                    group.create_task(client.execute_command("PING", **target))

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

    async def _trial_node(self, circuit: CircuitBreaker) -> None:
        """The half-open trial of one Cluster node: reconnect to it and PING it."""
        client = self._client
        try:
            async with asyncio.timeout(self._connect_timeout_s + self._op_timeout_s):
                node = client.get_node(node_name=circuit.name)
                if node is None:
                    raise LookupError(circuit.name)
                await node.disconnect()  # connections from before it failed are dead
                await client.execute_command("PING", target_nodes=node)
        except Exception:
            circuit.record_failure()
            return
        circuit.record_success()

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

    async def _write_batch(self, batch: list[tuple[str, bytes | None, int]]) -> None:
        if not self._usable():
            self._stats.writes_dropped += len(batch)
            return
        if not self._cluster:
            await self._send_writes(batch, self.circuit)
            return
        groups: dict[CircuitBreaker, list[tuple[str, bytes | None, int]]] = {}
        for item in batch:
            circuit = self._node_guard(item[0])
            if circuit is None:
                self._stats.writes_dropped += 1
            else:
                groups.setdefault(circuit, []).append(item)
        await asyncio.gather(*(self._send_writes(items, c) for c, items in groups.items()))

    async def _send_writes(
        self, batch: list[tuple[str, bytes | None, int]], circuit: CircuitBreaker
    ) -> None:
        # Unlike a lookup nobody waits on this, so it may wait for a slot as
        # long as a command may take rather than giving up at once.
        done = await self._run(
            self._set_batch, batch, slot_wait_s=self._op_timeout_s, circuit=circuit
        )
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
            # redis-py's Sentinel is untyped in older releases, typed in newer ones (8.2).
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
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
            if isinstance(self._client, RedisCluster):
                await _disconnect_every_node(self._client)
        if self._sentinel is not None:
            # The clients Sentinel made to ask each sentinel; Sentinel.aclose() does the
            # same but came in redis-py 8.1.
            clients = self._sentinel.sentinels
            await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)


async def _disconnect_every_node(client: RedisCluster) -> None:
    """Close every connection ``client`` opened, even if it never finished initialising.

    redis-py's ``aclose`` does nothing for a client whose first ``initialize``
    was cut short (a warm-up past its deadline): the nodes it had connected
    to would keep their sockets open until garbage collection.
    """
    manager = client.nodes_manager
    # A startup node and the node discovered under the same name can be two objects.
    nodes = [*manager.startup_nodes.values(), *manager.nodes_cache.values()]
    await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)
