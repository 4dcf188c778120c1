# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The connections of one origin, and the deadline wheel (``deadlines.py``) of their requests.

A LIFO stack of idle connections per origin (the most recently used socket
is the one least likely to have been closed by the server), at most
``max_connections`` open, pre-warmed connections, TCP_NODELAY and TCP
keepalive, idle sockets reaped. Callers that find no free slot queue for the
next released connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any, Protocol, cast

from gateway import errors
from gateway._http.connection import Connection, ConnectionOwner
from gateway._http.deadlines import DeadlineWheel
from gateway._http.interfaces import TransportStats
from gateway._http.message import Origin
from gateway._http.options import PoolConfig

__all__ = ["Opener", "OriginPool"]


class Opener(Protocol):
    """Opens a connection: ``loop.create_connection``'s shape, the arguments the pool passes.

    The transport takes one so that tests can hand it scripted sockets
    (tests/gateway/_scripted_socket.py); it runs only when a connection opens.
    """

    def __call__(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        host: str,
        port: int,
        *,
        ssl: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> Awaitable[tuple[asyncio.BaseTransport, Any]]: ...


class OriginPool(ConnectionOwner):
    def __init__(
        self,
        origin: Origin,
        options: PoolConfig,
        ssl_context: ssl.SSLContext | None,
        stats: TransportStats,
        connect: Opener | None = None,
    ) -> None:
        self.origin = origin
        self.options = options
        self.loop = asyncio.get_running_loop()
        self._create_connection: Opener = connect or self.loop.create_connection
        self.stats = stats
        self._ssl = ssl_context if origin.tls else None
        self._idle: list[Connection] = []  # LIFO: the top is the warmest socket
        self._open: set[Connection] = set()
        self._connecting = 0
        # Slots handed to woken waiters that have not started connecting yet:
        # counted as taken, or a newcomer could take the same slot.
        self._granted = 0
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        # Sockets still reading out an answer their caller gave up on (a hedge
        # loser, a cancelled call), oldest first: they keep their slot only
        # while nobody else needs it.
        self._draining: dict[Connection, None] = {}
        self._addresses: list[tuple[str, int]] = []
        self._reaper: asyncio.TimerHandle | None = None
        self.deadlines = DeadlineWheel(self.loop, options.read_timeout)
        # Read on every acquire: a native attribute, not PoolConfig's (plain Python).
        self._idle_timeout: float = options.idle_timeout_s
        self._closed = False

    # connections

    def options_apply(self, transport: asyncio.Transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is None:
            return
        options = self.options
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if hasattr(socket, "TCP_KEEPIDLE"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, options.keepalive_idle_s)
                sock.setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, options.keepalive_interval_s
                )
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, options.keepalive_count)

    async def resolve(self) -> None:
        """Resolve once up front so new connections skip DNS on the call path."""
        origin = self.origin
        infos = await self.loop.getaddrinfo(
            origin.host, origin.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        self._addresses = [(str(info[4][0]), origin.port) for info in infos]

    async def _open_connection(self, timeout: float, deadline_bound: bool = False) -> Connection:
        if not self._addresses:
            try:
                await asyncio.wait_for(self.resolve(), timeout)
            except (OSError, TimeoutError) as exc:
                raise errors.ConnectError(f"cannot resolve {self.origin.host}: {exc}") from None
        last_error: Exception | None = None
        for host, port in self._addresses:
            connection = Connection(self)
            try:
                async with asyncio.timeout(timeout):
                    await self._connect(connection, host, port)
            except TimeoutError:
                if deadline_bound:
                    raise errors.DeadlineExceeded(
                        "the call's deadline passed while connecting"
                    ) from None
                raise errors.ConnectTimeout(
                    f"connect to {self.origin.host_header} took over {timeout * 1000:.0f} ms"
                ) from None
            except (OSError, ssl.SSLError) as exc:
                last_error = exc
                continue
            self.stats.connections_opened += 1
            self._open.add(connection)
            return connection
        raise errors.ConnectError(f"cannot connect to {self.origin.host_header}: {last_error}")

    async def _connect(self, connection: Connection, host: str, port: int) -> None:
        protocol = cast(asyncio.Protocol, connection)  # one by its methods
        await self._create_connection(
            lambda: protocol,
            host,
            port,
            ssl=self._ssl,
            server_hostname=self.origin.host if self._ssl else None,
        )

    async def prewarm(self, count: int) -> None:
        count = min(count, self.options.max_connections)
        opened = await asyncio.gather(
            *(self._open_connection(self.options.connect_timeout) for _ in range(count)),
            return_exceptions=True,
        )
        for connection in opened:
            if isinstance(connection, Connection):
                self._push_idle(connection)

    # acquire / release

    async def acquire(self, deadline: float) -> tuple[Connection, bool]:
        """A ready connection and whether it was reused; waits at most until ``deadline``."""
        now = monotonic()
        connection = self.pop_idle(now)
        if connection is not None:
            return connection, True
        return await self.acquire_fresh(deadline, now)

    async def acquire_fresh(self, deadline: float, now: float) -> tuple[Connection, bool]:
        """A new connection if a slot is free, else the next one released."""
        if self._has_free_slot() or self._evict_draining():
            return await self._connect_within(deadline, now), False
        return await self._wait_for_release(deadline, now)

    def _has_free_slot(self) -> bool:
        taken = len(self._open) + self._connecting + self._granted
        return taken < self.options.max_connections

    def _evict_draining(self) -> bool:
        """Close draining sockets, oldest first, until a slot is free; False if none is."""
        draining = self._draining
        while draining:
            next(iter(draining)).close()  # forget() drops it from _draining
            if self._has_free_slot():
                return True
        return False

    def slot_wanted(self) -> bool:
        """Whether a request is queued for a slot."""
        return bool(self._waiters)

    def draining(self, connection: Connection) -> None:
        """``connection`` reads out an abandoned answer, in a slot it gives up on demand."""
        self._draining[connection] = None

    def drained(self, connection: Connection) -> None:
        self._draining.pop(connection, None)
        self.stats.drained_after_cancel += 1

    def pop_idle(self, now: float) -> Connection | None:
        idle = self._idle
        expiry = self._idle_timeout
        while idle:
            connection = idle.pop()
            connection.idle = False
            if connection.closed:
                continue
            if now - connection.last_used > expiry or connection.has_unread():
                # Expired, or bytes nobody asked for (or the server's close)
                # wait on it: never hand it to a request.
                connection.close()
                continue
            return connection
        return None

    async def _connect_within(self, deadline: float, now: float) -> Connection:
        """Open a connection in a slot the caller holds; a failure frees the slot."""
        remaining = deadline - now
        if remaining <= 0:
            self._slot_freed()
            raise errors.DeadlineExceeded(
                "deadline passed before a connection could be opened", sent=False
            )
        timeout = min(self.options.connect_timeout, remaining)
        self._connecting += 1
        connection: Connection | None = None
        try:
            connection = await self._open_connection(
                timeout, remaining < self.options.connect_timeout
            )
            return connection
        finally:
            self._connecting -= 1
            if connection is None:
                self._slot_freed()

    async def _wait_for_release(self, deadline: float, now: float) -> tuple[Connection, bool]:
        waiter: asyncio.Future[Connection | None] = self.loop.create_future()
        self._waiters.append(waiter)
        remaining = deadline - now
        limit = min(self.options.pool_timeout, remaining)
        timer = self.loop.call_later(
            max(limit, 0.0), _expire, waiter, remaining < self.options.pool_timeout
        )
        try:
            connection = await waiter
        except asyncio.CancelledError:
            self._pass_on_if_granted(waiter)
            raise
        finally:
            timer.cancel()
        if connection is None:
            # Woken with a free slot rather than a socket (one was closed).
            self._granted -= 1
            return await self._connect_within(deadline, monotonic()), False
        return connection, True

    def _pass_on_if_granted(self, waiter: asyncio.Future[Connection | None]) -> None:
        if waiter.done() and not waiter.cancelled():
            connection = waiter.result()
            if connection is not None:
                self.release(connection, True)
            else:
                self._granted -= 1
                self._slot_freed()
        else:
            waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def release(self, connection: Connection, reusable: bool) -> None:
        if not reusable or connection.closed or self._closed:
            connection.close()
            return
        if connection.idle:
            return  # already there: a socket is on the stack at most once
        connection.last_used = monotonic()
        if not (self._waiters and self._wake_waiter(connection)):
            self._push_idle(connection)

    def _wake_waiter(self, connection: Connection | None) -> bool:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return True
        return False

    def _slot_freed(self) -> None:
        """A slot opened up: grant it to a waiter, which will connect."""
        if self._waiters and self._wake_waiter(None):
            self._granted += 1

    def _push_idle(self, connection: Connection) -> None:
        if connection.idle:
            return
        connection.idle = True
        self._idle.append(connection)
        if self._reaper is None:
            self._schedule_reaper()

    def forget(self, connection: Connection) -> None:
        self._draining.pop(connection, None)
        if connection in self._open:
            self._open.discard(connection)
            self.stats.connections_closed += 1
            self._slot_freed()

    # idle reaping

    def _schedule_reaper(self) -> None:
        if self._reaper is None and not self._closed:
            self._reaper = self.loop.call_later(self.options.idle_timeout_s / 2, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        now = monotonic()
        keep = []
        for connection in self._idle:
            if now - connection.last_used > self.options.idle_timeout_s:
                connection.close()
            elif not connection.closed:
                keep.append(connection)
                continue
            connection.idle = False
        self._idle = keep
        if keep:
            self._schedule_reaper()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        while self._waiters:
            self._waiters.popleft().cancel()
        for connection in list(self._open):
            connection.close()
        for connection in self._idle:
            connection.idle = False
        self._idle.clear()
        # Let the transports run their close callbacks before the loop moves on.
        await asyncio.sleep(0)


def _expire(waiter: asyncio.Future[Connection | None], deadline_bound: bool) -> None:
    if not waiter.done():
        if deadline_bound:
            waiter.set_exception(
                errors.DeadlineExceeded(
                    "the call's deadline passed waiting for a connection", sent=False
                )
            )
        else:
            waiter.set_exception(errors.PoolTimeout("no pooled connection became free in time"))
