# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The native transport: a pool per origin, a request per connection, one silent retry.

Read it top down: :class:`NativeTransport` takes a connection from the
origin's pool (``pool.py``), writes the signed request on it and awaits the
answer the connection parses (``connection.py``). It keeps one shared
``SSLContext`` for every origin.

A request that fails on a *reused* connection before any response byte
arrived is retried once on a fresh connection: that is the stale
keep-alive race (the server closed the socket while it sat idle). Nothing
else is retried here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from time import monotonic

from gateway import errors
from gateway._http.connection import AnswerWaiter, Connection, NativeStream, Settlement
from gateway._http.deadlines import Slot
from gateway._http.interfaces import TransportStats, make_ssl_context
from gateway._http.message import Origin, RawResponse
from gateway._http.options import PoolConfig
from gateway._http.pool import Opener, OriginPool
from gateway._http.request import PreparedRequest

__all__ = ["NativeTransport", "Opener"]


def _expired() -> errors.DeadlineExceeded:
    return errors.DeadlineExceeded(
        "the call's deadline passed before the request was sent", sent=False
    )


def _unexpired(pool: OriginPool, connection: Connection, deadline: float) -> float:
    """The time now; raises (handing the socket back unused) if the deadline passed."""
    now = monotonic()
    if now >= deadline:
        pool.release(connection, True)
        raise _expired()
    return now


class NativeTransport:
    """The default transport: see the module docstring."""

    def __init__(self, options: PoolConfig | None = None, connect: Opener | None = None) -> None:
        self.options = options or PoolConfig()
        self.stats = TransportStats()
        self._ssl = self.options.ssl_context
        # How a connection is opened: the loop's create_connection unless a
        # test supplies scripted sockets. Used only when a socket opens.
        self._connect = connect
        self._pools: dict[Origin, OriginPool] = {}
        self._last_pool: OriginPool | None = None

    def _pool(self, origin: Origin) -> OriginPool:
        pool = self._pools.get(origin)
        if pool is None:
            if origin.tls and self._ssl is None:
                self._ssl = make_ssl_context(self.options.tls_verify)
            pool = OriginPool(origin, self.options, self._ssl, self.stats, self._connect)
            self._pools[origin] = pool
        return pool

    async def start(self, origins: list[Origin]) -> None:
        for origin in origins:
            pool = self._pool(origin)
            with contextlib.suppress(OSError):
                await pool.resolve()
            if self.options.prewarm:
                await pool.prewarm(self.options.prewarm)

    def open_connections(self) -> int:
        return sum(pool.open_connections for pool in self._pools.values())

    def _pool_of(self, origin: Origin) -> OriginPool:
        pool = self._last_pool
        if pool is None or pool.origin is not origin:
            # Most gateways send everything to one origin: skip the lookup.
            pool = self._last_pool = self._pool(origin)
        return pool

    def idle_connection(self, origin: Origin, now: float) -> Connection | None:
        """A warm socket to ``origin``, taken now without suspending; None if none is ready.

        For :meth:`send_on`: a caller that can only go on without suspending
        (a protocol callback) takes its socket first, then commits to the call.
        """
        return self._pool_of(origin).pop_idle(now)

    def send_on(
        self,
        connection: Connection,
        request: PreparedRequest,
        deadline: float,
        now: float,
        then: Callable[[AnswerWaiter], None],
    ) -> tuple[AnswerWaiter, Slot]:
        """Write ``request`` on ``connection`` (from :meth:`idle_connection`); its answer's
        waiter and the deadline slot to pop it from when the answer is in. ``then(waiter)``
        is called once the waiter is done: from the connection's own callback as the
        answer completes (see :meth:`Connection.send_then`), never from inside this call.

        The waiter fails with :class:`~gateway.errors.StaleConnection` where the
        socket died while idle (before any answer byte, or before the write):
        :meth:`request` with ``fresh=True`` is then the one silent retry.
        """
        try:
            head = request.encoded_head()
        except BaseException:
            self._pool_of(request.origin).release(connection, True)  # unused: signing failed
            raise
        return self.send_bytes_on(
            connection, request.origin, head + request.body, deadline, now, then
        )

    def send_bytes_on(
        self,
        connection: Connection,
        origin: Origin,
        data: bytes,
        deadline: float,
        now: float,
        then: Callable[[AnswerWaiter], None],
    ) -> tuple[AnswerWaiter, Slot]:
        """:meth:`send_on` for a request already encoded and signed: ``data`` is all of it.
        Nothing awaits the waiter it returns (a :class:`Settlement`): ``then`` reads it."""
        pool = self._pool_of(origin)
        waiter = connection.send_then(data, then)
        if waiter is None:
            # Closed between the pop and the write: nothing was sent.
            waiter = Settlement()
            waiter.set_exception(
                errors.StaleConnection("connection closed before the request was sent", sent=False)
            )
            pool.loop.call_soon(then, waiter)
            return waiter, {}
        stats = self.stats
        stats.requests += 1
        stats.reused += 1
        return waiter, pool.deadlines.arm(connection, waiter, deadline, now)

    async def request(
        self, request: PreparedRequest, deadline: float, fresh: bool = False
    ) -> RawResponse:
        """``request``'s answer; ``fresh``: on a new socket, with no silent retry left
        (a resend after :meth:`send_on`'s socket went stale)."""
        origin = request.origin
        pool = self._last_pool
        if pool is None or pool.origin is not origin:
            pool = self._pool_of(origin)  # inlined above: every call comes here
        now = monotonic()
        if now >= deadline:
            raise _expired()
        # The common case takes a warm socket without suspending.
        connection = None if fresh else pool.pop_idle(now)
        reused = True
        if connection is None:
            if fresh:
                connection, reused = await pool.acquire_fresh(deadline, now)
            else:
                connection, reused = await pool.acquire(deadline)
            now = _unexpired(pool, connection, deadline)
        stats = self.stats
        retried = fresh
        while True:
            body = request.body
            if len(body) < 65536:
                waiter = connection.send(request.encoded_head() + body, reused)
            else:
                waiter = connection.send(request.encoded_head(), reused)
                if waiter is not None:
                    connection.write(body)
            if waiter is not None:
                stats.requests += 1
                if reused:
                    stats.reused += 1
                slot = pool.deadlines.arm(connection, waiter, deadline, now)
                try:
                    return await waiter
                except errors.StaleConnection:
                    if not reused or retried:
                        raise
                except asyncio.CancelledError:
                    # Read out until the attempt's own time was up, no longer.
                    allowance = min(deadline, now + self.options.read_timeout) - monotonic()
                    connection.abandon(waiter, allowance)
                    raise
                finally:
                    slot.pop(waiter, None)
                # The one silent retry: the socket died while idle, the request never landed.
                stats.stale_retries += 1
                retried = True
            # (A socket closed between its release and this request: nothing was sent.)
            # The retry takes a slot like any other request: it may wait for one.
            connection, reused = await pool.acquire_fresh(deadline, monotonic())
            now = _unexpired(pool, connection, deadline)

    async def stream(self, request: PreparedRequest, deadline: float) -> NativeStream:
        if monotonic() >= deadline:
            raise _expired()
        pool = self._pool(request.origin)
        connection, reused = await pool.acquire(deadline)
        _unexpired(pool, connection, deadline)
        retried = False
        while True:
            try:
                return await self._open_stream(pool, connection, request, deadline, reused)
            except errors.StaleConnection as stale:
                if not reused or retried:
                    raise
                if stale.sent:
                    # The one silent retry, as for request().
                    self.stats.stale_retries += 1
                    retried = True
            connection, reused = await pool.acquire_fresh(deadline, monotonic())
            _unexpired(pool, connection, deadline)

    async def _open_stream(
        self,
        pool: OriginPool,
        connection: Connection,
        request: PreparedRequest,
        deadline: float,
        reused: bool,
    ) -> NativeStream:
        stream = connection.send_streaming(request.encoded_head() + request.body, reused)
        if stream is None:
            raise errors.StaleConnection(
                "connection closed before the request was sent", sent=False
            )
        self.stats.requests += 1
        if reused:
            self.stats.reused += 1
        # Armed until the body is complete: the deadline covers the whole stream.
        stream.deadline_slot = pool.deadlines.arm(connection, stream, deadline, monotonic())
        try:
            await stream.wait_head()
        except BaseException:
            stream.stop_timer()
            connection.close()
            raise
        return stream

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()
        self._last_pool = None
