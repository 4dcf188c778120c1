# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""A small HTTP/1.1 server core: asyncio protocol + ``httptools`` parser.

Shared by the emulator and the sidecar, so it is general and sits on a hot
path. One :class:`asyncio.Protocol` per connection parses with
``httptools.HttpRequestParser``; complete requests go into a per-connection
queue and are answered one at a time, in order (pipelining is safe, never
concurrent).

Defences against slow or hostile clients: a head-size limit counted on the
raw bytes fed to the parser (414 / 431 before a byte past it is parsed), a
body-size limit (413, answered as soon as a declared length is too large),
bounded per-connection queues (reading pauses while requests wait or the
peer is not reading its answers), a header-read timeout, a body-read
timeout, an idle keep-alive timeout and a write-progress timeout, all
enforced by one periodic sweep per server rather than a timer per request. Handler
exceptions become a 500 and the server carries on; raising
:class:`AbortConnection` resets the connection (RST) for fault injection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any, cast

from gateway._server.messages import (
    AbortConnection,
    BodyLimits,
    Handler,
    HeadCheck,
    Request,
    Response,
    ServerLimits,
    StreamingResponse,
    UnsafeHeader,
    _Reject,
)
from gateway._server.parsing import (
    _BODY,
    _HEADERS,
    _IDLE,
    _LINGER,
    _LINGER_S,
    _WAIT_FIRST,
)
from gateway._server.writing import _ResponseWriting, logger

__all__ = [
    "AbortConnection",
    "BodyLimits",
    "Handler",
    "HeadCheck",
    "Request",
    "Response",
    "Server",
    "ServerLimits",
    "StreamingResponse",
    "UnsafeHeader",
    "start_server",
]


class _Connection(_ResponseWriting):
    """One client connection: an ``asyncio.Protocol`` by its methods.

    Not a subclass of asyncio.Protocol: mypyc compiles this module, and only
    a class without a Python base becomes a native class (fixed attribute
    slots, direct method calls). Its reading half (parsing, limits) is
    :mod:`gateway._server.parsing`'s, its writing half (responses, flow
    control) :mod:`gateway._server.writing`'s; this class owns the queue
    between them, the lifecycle and the timeouts.
    """

    __slots__ = ()

    # asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self._client = (str(peer[0]), int(peer[1]))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server._connections.add(self)
        if self._server.closing:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._forget(self)
        self._queue.clear()
        if self._worker is not None:
            self._worker.cancel()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("connection lost"))
            self._drain_waiter.exception()  # mark retrieved: nobody may await it
        self._transport = None
        self._release()

    # request queue ---------------------------------------------------------

    def _enqueue(self, item: Request | _Reject) -> None:
        self._queue.append(item)
        if isinstance(item, Request):
            self._queued_bytes += len(item.body)
        if not self._serving:
            self._serving = True
            wakeup = self._wakeup
            if wakeup is not None and not wakeup.done():
                wakeup.set_result(None)
            elif self._worker is None:
                self._worker = self._loop.create_task(self._serve_queue())
            return
        limits = self._server.limits
        if len(self._queue) >= limits.max_pipelined or self._queued_bytes > limits.max_queued_bytes:
            self._update_reading()

    async def _serve_queue(self) -> None:
        try:
            while self._transport is not None:
                if self._queue:
                    item = self._queue.popleft()
                    if isinstance(item, _Reject):
                        self._reject(self._transport, item)
                        return
                    self._queued_bytes -= len(item.body)
                    if self._reading_paused or self._backlog:
                        self._update_reading()
                    await self._respond(item)
                elif not self._idle():
                    return
                else:
                    # Woken by _enqueue; cancelled by connection_lost.
                    wakeup = self._wakeup = self._loop.create_future()
                    await wakeup
                    self._wakeup = None
        except (asyncio.CancelledError, ConnectionError):
            pass  # the connection is gone; nothing to answer
        except Exception:
            logger.exception("connection worker failed")
            self.reset()
        finally:
            self._worker = None
            self._wakeup = None
            self._serving = False

    def _idle(self) -> bool:
        """Everything queued is answered: close if asked to; False once closing."""
        self._serving = False
        if self._transport is None:
            return False
        if self._close_after and not self._backlog:
            self._transport.close()
            return False
        if self._phase == _IDLE:
            self._phase_since = self._loop.time()
        return True

    # control ---------------------------------------------------------------

    def check_timeouts(self, now: float, limits: ServerLimits) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._write_paused and now - self._write_paused_since > limits.write_timeout:
            # The peer has read nothing for write_timeout: what it has not
            # read (and whatever it queued) is dropped with the connection.
            self.reset()
            return
        elapsed = now - self._phase_since
        phase = self._phase
        if phase < 0:
            if phase == _LINGER and elapsed > min(_LINGER_S, limits.body_timeout):
                transport.close()
            return
        if phase in (_HEADERS, _WAIT_FIRST):
            timed_out = elapsed > limits.header_timeout
        elif phase == _BODY:
            timed_out = elapsed > limits.body_timeout
        else:
            timed_out = not self.busy and elapsed > limits.keepalive_timeout
            if timed_out:
                transport.close()
                return
        if not timed_out:
            return
        if phase == _WAIT_FIRST:
            transport.close()
        else:
            # Queued after any request in flight, whose answer still goes out.
            self._fail(_Reject(408, "request timeout"))

    def shutdown(self) -> None:
        """Close now if idle; otherwise answer what is queued, the last answer saying ``close``.

        Requests already parsed (pipelined behind the one in flight) are
        answered; nothing more is read, and bytes read but not yet parsed are
        dropped: the client sees ``connection: close`` after its last answer
        and knows the rest went unanswered (and may retry it elsewhere).
        """
        transport = self._transport
        if transport is None:
            return
        if not self.busy:
            if self._phase in (_IDLE, _WAIT_FIRST):
                transport.close()
            return
        self._close_after = True
        self._backlog = b""
        if self._phase >= 0 and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()


# -- server -----------------------------------------------------------------


class Server:
    """A listening server; build it with :func:`start_server`."""

    def __init__(
        self, handler: Handler, limits: ServerLimits, head_check: HeadCheck | None = None
    ) -> None:
        self.handler = handler
        self.head_check = head_check
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.closing = False
        # Set while the owner drains: every answer says "Connection: close", so
        # clients reconnect (elsewhere) instead of reusing this connection.
        self.draining = False
        # Told (status, reason) of each request refused by the parser or the
        # limits (400, 408, 413, 431, ...), before its answer is written.
        self.on_reject: Callable[[int, str], None] | None = None
        # Per-path body limits under limits.max_body_size, and their refusals.
        self.body_limits: BodyLimits | None = None
        self.server_line = f"server: {limits.server_header}\r\n" if limits.server_header else ""
        self._connections: set[_Connection] = set()
        self._aio_server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._all_closed = asyncio.Event()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        # Typed as a tuple, but uvloop's servers give a list: read untyped (a
        # compiled build checks a typed read) and converted.
        server: Any = self._aio_server
        return tuple(server.sockets) if server is not None else ()

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    @property
    def host(self) -> str:
        return str(self.sockets[0].getsockname()[0])

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def _listen(
        self,
        host: str | None,
        port: int,
        sock: socket.socket | None,
        backlog: int,
        reuse_port: bool,
    ) -> None:
        if sock is not None:
            self._aio_server = await self.loop.create_server(
                self._new_connection, sock=sock, backlog=backlog
            )
        else:
            self._aio_server = await self.loop.create_server(
                self._new_connection,
                host,
                port,
                backlog=backlog,
                reuse_address=True,
                reuse_port=reuse_port or None,
            )
        self._sweeper = self.loop.create_task(self._sweep())

    def _new_connection(self) -> asyncio.Protocol:
        return cast(asyncio.Protocol, _Connection(self))  # one by its methods

    async def _sweep(self) -> None:
        limits = self.limits
        shortest = min(
            limits.header_timeout,
            limits.body_timeout,
            limits.keepalive_timeout,
            limits.write_timeout,
        )
        interval = min(max(shortest / 4, 0.02), 1.0)
        while True:
            await asyncio.sleep(interval)
            self._check_timeouts(self.loop.time(), limits)

    def _check_timeouts(self, now: float, limits: ServerLimits) -> None:
        # A function of its own: the loop's variable would keep the last connection
        # (and what it holds) alive through the sweep's sleep.
        for connection in list(self._connections):
            connection.check_timeouts(now, limits)

    def _forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        if not self._connections:
            self._all_closed.set()

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close."""
        if self.closing:
            return
        self.closing = True
        if self._aio_server is not None:
            self._aio_server.close()
        for connection in list(self._connections):
            connection.shutdown()
        if self._connections:
            self._all_closed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._all_closed.wait(),
                    self.limits.shutdown_timeout if grace is None else grace,
                )
        for connection in list(self._connections):
            if connection._transport is not None:
                connection._transport.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._aio_server is not None:
            await self._aio_server.wait_closed()
        # Let the transports' connection_lost callbacks run before returning.
        await asyncio.sleep(0)

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def start_server(
    handler: Handler,
    host: str | None = "127.0.0.1",
    port: int = 0,
    *,
    limits: ServerLimits | None = None,
    sock: socket.socket | None = None,
    backlog: int = 1024,
    reuse_port: bool = False,
    head_check: HeadCheck | None = None,
) -> Server:
    """Listen on ``host:port`` (port 0 picks a free one) and serve ``handler``.

    ``head_check`` sees each request's head before its body is read and may
    refuse it there (see :data:`HeadCheck`).
    """
    server = Server(handler, limits or ServerLimits(), head_check)
    await server._listen(host, port, sock, backlog, reuse_port)
    return server
