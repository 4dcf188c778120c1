# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The native transport: connections, the pool, and the transport that ties them.

It is an ``asyncio.Protocol`` per connection with
``httptools`` parsing the response: HTTP/1.1 keep-alive, one request per
connection at a time, a LIFO stack of idle connections per origin (the
most recently used socket is the one least likely to have been closed by
the server), pre-warmed connections, TCP_NODELAY and TCP keepalive, and one
shared ``SSLContext``.

A request that fails on a *reused* connection before any response byte
arrived is retried once on a fresh connection: that is the stale
keep-alive race (the server closed the socket while it sat idle). Nothing
else is retried here.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, Protocol, cast

import httptools

from gateway import errors
from gateway._http.interfaces import (
    MAX_ERROR_BODY_BYTES,
    TransportStats,
    make_ssl_context,
)
from gateway._http.message import Origin, RawResponse, headers_from_raw, split_head
from gateway._http.options import PoolConfig
from gateway._http.request import PreparedRequest

__all__ = ["NativeTransport", "Opener"]

# A response larger than this is refused: SageMaker caps payloads at 6 MB
# (25 MB for streams, which never buffer).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# Limits on a response head, as the servers in this project apply to requests.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
# Bytes buffered on a streaming response before the socket stops reading.
_STREAM_HIGH_WATER = 1024 * 1024


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


# -- one connection ---------------------------------------------------------


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop httptools mid-buffer."""


class _StopParsing(Exception):
    """Raised from a parser callback once the connection is closed: ignore what follows."""


class _Connection:
    """One keep-alive socket; at most one request in flight.

    An asyncio protocol by its methods, not by subclassing asyncio.Protocol:
    mypyc compiles this module, and only a class without a Python base
    becomes a native class (fixed attribute slots, direct method calls).
    """

    def __init__(self, pool: _OriginPool) -> None:
        self._pool = pool
        self._loop = pool.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[RawResponse] | None = None
        self._stream: _NativeStream | None = None
        self._status = 0
        # Bytes received while a response head is incomplete, and where the
        # current head starts in them (after any interim 1xx heads).
        self._head_chunks: list[bytes] = []
        self._head_bytes = 0
        self._head_start = 0
        self._head = b""  # the current response's head, undecoded
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_limit = MAX_RESPONSE_BYTES
        self._got_bytes = False
        self._headers_done = False
        self._keep_alive = True
        # The request in flight went out on a socket taken from the idle stack.
        self._reused = False
        self.closed = False
        # On the pool's idle stack: a socket is pushed there at most once.
        self.idle = False
        # A response completed inside the bytes being parsed: the socket goes
        # back to the pool only after the whole buffer parsed cleanly, so that
        # a second response in the same bytes can still close it.
        self._release_pending = False
        self._release_keep = False
        self.requests_served = 0
        self.last_used = time.monotonic()
        # Set when the caller gave up (hedge loser, cancellation) after the
        # request was written: the response is read and thrown away so the
        # socket can go back to the pool instead of being closed.
        self._abandoned = False
        self._drain_timer: asyncio.TimerHandle | None = None

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self._pool.options_apply(self._transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None and self._stream is None and not self._abandoned:
            # Bytes nobody asked for (an idle socket, or a response after the
            # one just read): the connection's framing cannot be trusted.
            self.close()
            return
        self._got_bytes = True
        if not self._headers_done:
            # The head is kept raw and split into headers only if someone reads
            # them: no parser callback per header.
            self._head_chunks.append(data)
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
            if not self._headers_done and self._head_bytes > MAX_HEAD_BYTES:
                self._fail(errors.ProtocolError("response head exceeds the header limits"))
        except httptools.HttpParserUpgrade:
            self._fail(errors.ProtocolError("unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(errors.ProtocolError(f"invalid HTTP response: {exc}"))
        if self._release_pending:
            self._release_pending = False
            self._pool.release(self, self._release_keep and not self.closed)

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def pause_writing(self) -> None:
        pass  # a request is written whole; nothing waits for the buffer to drain

    def resume_writing(self) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self.closed
        self.closed = True
        if not was_closed:
            self._pool.forget(self)
        if self._headers_done and not self._complete_pending_close():
            return
        if self._waiter is not None or self._stream is not None:
            if not self._got_bytes and self._reused:
                error: errors.TransportError = errors.StaleConnection(
                    "keep-alive connection closed before the response", sent=True
                )
            else:
                error = errors.ReadError(f"connection lost: {exc or 'closed by server'}")
            self._fail(error)

    def _complete_pending_close(self) -> bool:
        """A response delimited by the close itself is complete now; True if not."""
        if self._waiter is None and self._stream is None:
            return True
        if not self._close_delimited():
            # Content-Length or chunked framing cut short: a truncated body.
            self._fail(errors.ReadError("connection closed in the middle of the response body"))
            return False
        with contextlib.suppress(httptools.HttpParserError):
            self._parser.feed_data(b"")
        if self._waiter is not None or self._stream is not None:
            self.on_message_complete()
        if self._release_pending:
            self._release_pending = False
            self._pool.release(self, self._release_keep and not self.closed)
        return False

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self._waiter is None and self._stream is None and not self._abandoned:
            # A response nobody asked for (a second answer to the request just
            # served, in the same bytes): the framing cannot be trusted, and
            # the socket must not reach the pool, where its next user would
            # read this answer as its own.
            self.close()
            raise _StopParsing

    def on_headers_complete(self) -> None:
        chunks = self._head_chunks
        received = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        start = self._head_start
        end = received.find(b"\r\n\r\n", start)
        if end < 0:  # a server ending lines with bare LF
            end = received.find(b"\n\n", start)
        head = self._head = received[start:end]
        if end - start > MAX_HEAD_BYTES or head.count(b"\n") > MAX_HEADERS:
            # A broken or hostile server must not make us buffer without bound.
            self._fail(errors.ProtocolError("response head exceeds the header limits"))
            raise _HeadTooLarge
        self._status = status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        self._headers_done = True
        self._body_limit = MAX_RESPONSE_BYTES if status < 300 else MAX_ERROR_BODY_BYTES
        if status < 200:
            # An interim head: the real one follows it in the same bytes.
            self._head_start = end + (4 if received[end] == 13 else 2)  # CRLF CRLF or LF LF
            self._head_chunks = [received]
        else:
            self._head_chunks = []
        if self._stream is not None and status >= 200:
            self._stream.headers_ready(status, headers_from_raw(head))

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._stream is not None:
            self._stream.feed(body)
            return
        if self._body_size > self._body_limit:
            self._body_over_limit(body)
        self._body.append(body)

    def _body_over_limit(self, body: bytes) -> NoReturn:
        """Refuse a huge answer; answer with the prefix of a long error, then close."""
        if self._status < 300:
            self._fail(errors.ProtocolError(f"response larger than {MAX_RESPONSE_BYTES} bytes"))
            raise _StopParsing
        waiter = self._waiter
        self._waiter = None
        self._abandoned = False
        if waiter is not None and not waiter.done():
            kept = MAX_ERROR_BODY_BYTES - (self._body_size - len(body))
            prefix = b"".join([*self._body, body[:kept]])
            waiter.set_result(RawResponse(self._status, None, prefix, self._head))
        self.close()
        raise _StopParsing

    def on_message_complete(self) -> None:
        if self._status < 200:
            # An interim 1xx response: the real one follows on this socket.
            self._reset_message()
            return
        self.requests_served += 1
        waiter, stream = self._waiter, self._stream
        body = self._body
        response = RawResponse(
            self._status, None, body[0] if len(body) == 1 else b"".join(body), self._head
        )
        self._release_keep = self._keep_alive and not self.closed
        self._release_pending = True
        self._reset_message()
        self._waiter = self._stream = None
        if stream is not None:
            stream.finish()
        if self._abandoned:
            self._abandoned = False
            if self._drain_timer is not None:
                self._drain_timer.cancel()
                self._drain_timer = None
            self._pool.stats.drained_after_cancel += 1
        elif waiter is not None and not waiter.done():
            waiter.set_result(response)
        # The socket goes back to the pool (after the caller has its answer)
        # once the bytes being parsed are all read: see data_received.

    # the request side

    def _busy(self) -> bool:
        """Closed, or serving a request: a request written now would not have it to itself."""
        return (
            self.closed or self._waiter is not None or self._stream is not None or self._abandoned
        )

    def send(self, data: bytes, reused: bool) -> asyncio.Future[RawResponse] | None:
        """Write a request; None (nothing written) if the socket closed meanwhile."""
        # Inline rather than _busy(): this runs on every call.
        if self.closed or self._waiter is not None or self._stream is not None or self._abandoned:
            return None  # never overwrite another request's waiter
        assert self._transport is not None
        waiter = self._waiter = self._loop.create_future()
        self._start_message(reused)
        self._transport.write(data)
        return waiter

    def send_streaming(self, data: bytes, reused: bool) -> _NativeStream | None:
        if self._busy():
            return None
        assert self._transport is not None
        stream = self._stream = _NativeStream(self)
        self._start_message(reused)
        self._transport.write(data)
        return stream

    def abandon(self, waiter: asyncio.Future[RawResponse], drain_timeout: float) -> None:
        """The caller stopped waiting; read the response out, then reuse the socket.

        ``waiter`` names the request giving up. A cancellation can be
        delivered after its response already completed and the socket went
        back to the pool and on to another request: then this is a no-op,
        and must be, or it would orphan that other request's future.
        """
        if self.closed or self._waiter is not waiter:
            return
        self._abandoned = True
        self._waiter = None
        self._drain_timer = self._loop.call_later(drain_timeout, self.close)

    def timed_out(self, owner: object, deadline_bound: bool, read_timeout: float) -> None:
        # The error is built only when the timer fires, not for every request.
        error: errors.GatewayError = (
            errors.DeadlineExceeded("the call's deadline passed")
            if deadline_bound
            else errors.ReadTimeout(f"no response within {read_timeout * 1000:.0f} ms")
        )
        if owner is self._waiter or owner is self._stream:
            self._fail(error)
            return
        # A timer left over from a request this socket already finished must
        # not fail the request it serves now; but a request that is somehow
        # no longer this socket's (an orphan) still gets its timeout.
        if isinstance(owner, asyncio.Future):
            if not owner.done():
                owner.set_exception(error)
        elif isinstance(owner, _NativeStream) and owner.open:
            owner.fail(error)

    def write(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def pause_reading(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()

    def close(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if not self.closed:
            self.closed = True
            self._pool.forget(self)
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: errors.GatewayError) -> None:
        waiter, stream = self._waiter, self._stream
        self._waiter = self._stream = None
        self._abandoned = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if stream is not None:
            stream.fail(error)
        self.close()

    def _close_delimited(self) -> bool:
        """No Content-Length and not chunked: the body ends when the server closes."""
        if self._status in (204, 304):
            return False
        for name, value in split_head(self._head):
            lowered = name.lower()
            if lowered == b"content-length" or (
                lowered == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                return False
        return True

    def _start_message(self, reused: bool) -> None:
        self._got_bytes = False
        self._reused = reused
        self._head_chunks = []
        self._head_bytes = 0
        self._head_start = 0
        self._head = b""

    def _reset_message(self) -> None:
        self._status = 0
        self._body = []
        self._body_size = 0
        self._headers_done = False


class _NativeStream:
    """A response whose body is consumed as it arrives (response streams)."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._loop = connection._loop
        self.status = 0
        self.headers: dict[str, str] = {}
        self._head_waiter: asyncio.Future[None] = self._loop.create_future()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._done = False
        self._error: errors.GatewayError | None = None
        self._wakeup: asyncio.Future[None] | None = None
        # The call's deadline still applies while the body streams in.
        self.deadline_slot: _Slot | None = None

    @property
    def open(self) -> bool:
        """Neither finished nor failed."""
        return not self._done and self._error is None

    def _stop_timer(self) -> None:
        if self.deadline_slot is not None:
            self.deadline_slot.pop(self, None)
            self.deadline_slot = None

    def headers_ready(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if not self._head_waiter.done():
            self._head_waiter.set_result(None)

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > _STREAM_HIGH_WATER and not self._paused:
            self._paused = True
            self._connection.pause_reading()
        self._wake()

    def finish(self) -> None:
        self._done = True
        self._stop_timer()
        self._wake()

    def fail(self, error: errors.GatewayError) -> None:
        self._stop_timer()
        self._error = error
        if not self._head_waiter.done():
            self._head_waiter.set_exception(error)
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def wait_head(self) -> None:
        await self._head_waiter

    def chunks(self) -> AsyncIterator[bytes]:
        return self

    def __aiter__(self) -> _NativeStream:
        return self

    # An iterator class rather than an async generator: mypyc compiles this
    # module, and it does not compile async generators.
    async def __anext__(self) -> bytes:
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                raise StopAsyncIteration
            self._wakeup = self._loop.create_future()
            await self._wakeup
            self._wakeup = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < _STREAM_HIGH_WATER // 2:
            self._paused = False
            self._connection.resume_reading()
        return chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def aclose(self) -> None:
        self._stop_timer()
        if not self._done and self._error is None:
            # An unfinished stream leaves the socket mid-response: close it.
            self._connection.close()


# -- request deadlines --------------------------------------------------------

# Deadlines of requests and of whole response streams are grouped into slots
# of this many seconds; uvloop's own timers have a 1 ms resolution, so a
# request times out no later than it would with a timer of its own.
_SLOT_S = 0.001
_SLOTS_PER_S = 1000

# What a slot holds per request in flight: the waiter (its owner) ->
# (its connection, whether the call's deadline or the read timeout is the bound).
_Slot = dict[object, tuple["_TimesOut", bool]]


class _TimesOut(Protocol):
    """What a slot times out: a connection, told which of its requests ran out."""

    def timed_out(self, owner: object, deadline_bound: bool, read_timeout: float) -> None: ...


class _DeadlineWheel:
    """Every in-flight request's timeout, with one loop timer per 1 ms slot.

    A timer per request (``call_later`` then ``cancel``) costs about 2 us in
    uvloop, a tenth of a whole call; a slot entry costs a dict insert and a
    pop. Entries are removed when their request ends, so a slot that fires
    finds only the requests that truly ran out of time.
    """

    __slots__ = ("_loop", "_read_timeout", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._slots: dict[int, _Slot] = {}

    def arm(self, connection: _TimesOut, owner: object, deadline: float, now: float) -> _Slot:
        """Time ``owner`` out at ``deadline``; pop it from the slot when done.

        ``deadline`` and ``now`` are time.monotonic() values; ``now`` is the
        caller's, read just before, so arming costs no clock call.
        """
        deadline_bound = deadline - now <= self._read_timeout
        if not deadline_bound:
            deadline = now + self._read_timeout
        key = int(deadline * _SLOTS_PER_S) + 1  # the slot's end: never early
        slot = self._slots.get(key)
        if slot is None:
            slot = self._new_slot(key, now)
        slot[owner] = (connection, deadline_bound)
        return slot

    def _new_slot(self, key: int, now: float) -> _Slot:
        slot: _Slot = {}
        self._slots[key] = slot
        self._loop.call_later(key * _SLOT_S - now, self._expire, key)
        return slot

    def _expire(self, key: int) -> None:
        # uvloop's timers run on its own, coarser clock: one can fire a little
        # before time.monotonic() reaches the slot's end. Come back then.
        remaining = key * _SLOT_S - time.monotonic()
        if remaining > 0:
            self._loop.call_later(remaining, self._expire, key)
            return
        slot = self._slots.pop(key, None)
        if not slot:
            return
        read_timeout = self._read_timeout
        for owner, (connection, deadline_bound) in list(slot.items()):
            connection.timed_out(owner, deadline_bound, read_timeout)


# -- the pool of one origin --------------------------------------------------


class _OriginPool:
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
        self._idle: list[_Connection] = []  # LIFO: the top is the warmest socket
        self._open: set[_Connection] = set()
        self._connecting = 0
        # Slots handed to woken waiters that have not started connecting yet:
        # counted as taken, or a newcomer could take the same slot.
        self._granted = 0
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._addresses: list[tuple[str, int]] = []
        self._reaper: asyncio.TimerHandle | None = None
        self.deadlines = _DeadlineWheel(self.loop, options.read_timeout)
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

    async def _open_connection(self, timeout: float, deadline_bound: bool = False) -> _Connection:
        if not self._addresses:
            try:
                await asyncio.wait_for(self.resolve(), timeout)
            except (OSError, TimeoutError) as exc:
                raise errors.ConnectError(f"cannot resolve {self.origin.host}: {exc}") from None
        last_error: Exception | None = None
        for host, port in self._addresses:
            connection = _Connection(self)
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

    async def _connect(self, connection: _Connection, host: str, port: int) -> None:
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
            if isinstance(connection, _Connection):
                self._push_idle(connection)

    # acquire / release

    async def acquire(self, deadline: float) -> tuple[_Connection, bool]:
        """A ready connection and whether it was reused; waits at most until ``deadline``."""
        now = time.monotonic()
        connection = self._pop_idle(now)
        if connection is not None:
            return connection, True
        return await self.acquire_fresh(deadline, now)

    async def acquire_fresh(self, deadline: float, now: float) -> tuple[_Connection, bool]:
        """A new connection if a slot is free, else the next one released."""
        if self._has_free_slot():
            return await self._connect_within(deadline, now), False
        return await self._wait_for_release(deadline, now)

    def _has_free_slot(self) -> bool:
        taken = len(self._open) + self._connecting + self._granted
        return taken < self.options.max_connections

    def _pop_idle(self, now: float) -> _Connection | None:
        idle = self._idle
        expiry = self._idle_timeout
        while idle:
            connection = idle.pop()
            connection.idle = False
            if connection.closed:
                continue
            if now - connection.last_used > expiry:
                connection.close()
                continue
            return connection
        return None

    async def _connect_within(self, deadline: float, now: float) -> _Connection:
        """Open a connection in a slot the caller holds; a failure frees the slot."""
        remaining = deadline - now
        if remaining <= 0:
            self._slot_freed()
            raise errors.DeadlineExceeded("deadline passed before a connection could be opened")
        timeout = min(self.options.connect_timeout, remaining)
        self._connecting += 1
        connection: _Connection | None = None
        try:
            connection = await self._open_connection(
                timeout, remaining < self.options.connect_timeout
            )
            return connection
        finally:
            self._connecting -= 1
            if connection is None:
                self._slot_freed()

    async def _wait_for_release(self, deadline: float, now: float) -> tuple[_Connection, bool]:
        waiter: asyncio.Future[_Connection | None] = self.loop.create_future()
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
            return await self._connect_within(deadline, time.monotonic()), False
        return connection, True

    def _pass_on_if_granted(self, waiter: asyncio.Future[_Connection | None]) -> None:
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

    def release(self, connection: _Connection, reusable: bool) -> None:
        if not reusable or connection.closed or self._closed:
            connection.close()
            return
        if connection.idle:
            return  # already there: a socket is on the stack at most once
        connection.last_used = time.monotonic()
        if not (self._waiters and self._wake_waiter(connection)):
            self._push_idle(connection)

    def _wake_waiter(self, connection: _Connection | None) -> bool:
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

    def _push_idle(self, connection: _Connection) -> None:
        if connection.idle:
            return
        connection.idle = True
        self._idle.append(connection)
        if self._reaper is None:
            self._schedule_reaper()

    def forget(self, connection: _Connection) -> None:
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
        now = time.monotonic()
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


def _expire(waiter: asyncio.Future[_Connection | None], deadline_bound: bool) -> None:
    if not waiter.done():
        if deadline_bound:
            waiter.set_exception(
                errors.DeadlineExceeded("the call's deadline passed waiting for a connection")
            )
        else:
            waiter.set_exception(errors.PoolTimeout("no pooled connection became free in time"))


# -- the transport ----------------------------------------------------------


def _expired() -> errors.DeadlineExceeded:
    return errors.DeadlineExceeded("the call's deadline passed before the request was sent")


def _unexpired(pool: _OriginPool, connection: _Connection, deadline: float) -> float:
    """The time now; raises (handing the socket back unused) if the deadline passed."""
    now = time.monotonic()
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
        self._pools: dict[Origin, _OriginPool] = {}
        self._last_pool: _OriginPool | None = None

    def _pool(self, origin: Origin) -> _OriginPool:
        pool = self._pools.get(origin)
        if pool is None:
            if origin.tls and self._ssl is None:
                self._ssl = make_ssl_context(self.options.tls_verify)
            pool = _OriginPool(origin, self.options, self._ssl, self.stats, self._connect)
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

    async def request(self, request: PreparedRequest, deadline: float) -> RawResponse:
        origin = request.origin
        pool = self._last_pool
        if pool is None or pool.origin is not origin:
            # Most gateways send everything to one origin: skip the lookup.
            pool = self._last_pool = self._pool(origin)
        now = time.monotonic()
        if now >= deadline:
            raise _expired()
        # The common case takes a warm socket without suspending.
        connection = pool._pop_idle(now)
        reused = True
        if connection is None:
            connection, reused = await pool.acquire(deadline)
            now = _unexpired(pool, connection, deadline)
        stats = self.stats
        retried = False
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
                    connection.abandon(waiter, self.options.read_timeout)
                    raise
                finally:
                    slot.pop(waiter, None)
                # The one silent retry: the socket died while idle, the request never landed.
                stats.stale_retries += 1
                retried = True
            # (A socket closed between its release and this request: nothing was sent.)
            # The retry takes a slot like any other request: it may wait for one.
            connection, reused = await pool.acquire_fresh(deadline, time.monotonic())
            now = _unexpired(pool, connection, deadline)

    async def stream(self, request: PreparedRequest, deadline: float) -> _NativeStream:
        if time.monotonic() >= deadline:
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
            connection, reused = await pool.acquire_fresh(deadline, time.monotonic())
            _unexpired(pool, connection, deadline)

    async def _open_stream(
        self,
        pool: _OriginPool,
        connection: _Connection,
        request: PreparedRequest,
        deadline: float,
        reused: bool,
    ) -> _NativeStream:
        stream = connection.send_streaming(request.encoded_head() + request.body, reused)
        if stream is None:
            raise errors.StaleConnection(
                "connection closed before the request was sent", sent=False
            )
        self.stats.requests += 1
        if reused:
            self.stats.reused += 1
        # Armed until the body is complete: the deadline covers the whole stream.
        stream.deadline_slot = pool.deadlines.arm(connection, stream, deadline, time.monotonic())
        try:
            await stream.wait_head()
        except BaseException:
            stream._stop_timer()
            connection.close()
            raise
        return stream

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()
        self._last_pool = None
