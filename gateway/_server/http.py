# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""A small HTTP/1.1 server core: asyncio protocol + ``httptools`` parser.

Shared by the emulator and the sidecar, so it is general and sits on a hot
path. One :class:`asyncio.Protocol` per connection parses with
``httptools.HttpRequestParser``; complete requests go into a per-connection
queue and are answered one at a time, in order (pipelining is safe, never
concurrent). A server's ``relay`` (:class:`Relay`, the sidecar's relay lane)
may take a request first, when nothing is queued or in flight on its
connection, and answer it from its own callbacks; what it cannot finish it
hands back as an awaitable, answered in order like any other. Each connection
composes a reader (:mod:`gateway._server.parsing`) and a writer
(:mod:`gateway._server.writing`); neither imports the other, nor this module.

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
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

from gateway._server.messages import (
    AbortConnection,
    Answered,
    BodyLimits,
    Handler,
    HeadCheck,
    Relay,
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
    ReaderOwner,
    RequestReader,
    ServerSettings,
)
from gateway._server.writing import ResponseWriter, logger, simple_response

__all__ = [
    "AbortConnection",
    "BodyLimits",
    "Handler",
    "HeadCheck",
    "Relay",
    "Request",
    "Response",
    "Server",
    "ServerLimits",
    "StreamingResponse",
    "UnsafeHeader",
    "start_server",
]


class _Awaited:
    """A request a relay took and handed back with an awaitable of its answer."""

    __slots__ = ("answer", "request")

    def __init__(self, request: Request, answer: Awaitable[Response]) -> None:
        self.request = request
        self.answer = answer


def _answered_nowhere(request: Request, answer: Response | Awaitable[Response]) -> None:
    """A closed connection's relay callback: no relay takes its requests any more."""


class _Connection(ReaderOwner):
    """One client connection: an ``asyncio.Protocol`` by its methods.

    Not a subclass of asyncio.Protocol: mypyc compiles this module, and only a
    class without a Python base (ReaderOwner is a compiled one, with no state)
    becomes a native class (fixed attribute slots, direct method calls).

    It owns a reader (:mod:`gateway._server.parsing`: parsing, limits, pausing
    reads) and a writer (:mod:`gateway._server.writing`: encoding, waiting for
    the peer to read), which know nothing of each other; this class runs the
    handler, owns the queue between them, the lifecycle and the timeouts.
    """

    __slots__ = (
        "_loop",
        "_queue",
        "_queued_bytes",
        "_reader",
        "_relayed_to",
        "_server",
        "_serving",
        "_transport",
        "_wakeup",
        "_worker",
        "_writer",
    )

    def __init__(self, server: Server) -> None:
        self._server = server
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._queue: deque[Request | _Reject | _Awaited] = deque()
        self._queued_bytes = 0  # body bytes of the requests waiting in _queue
        # One worker task per connection, started with its first request and
        # kept: between requests it waits on a future, which costs less than
        # a task per request (3.11 registers every task in a WeakSet).
        self._worker: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._serving = False  # the worker has a request (or a refusal) to answer
        self._reader = RequestReader(server, self)
        self._writer = ResponseWriter(server.loop, server.server_line)
        # The bound method handed to the relay with each request it takes, made once
        # (not per request); a cycle, broken at close as the reader's is.
        self._relayed_to: Answered = self._relayed

    # asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        client: tuple[str, int] | None = None
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            client = (str(peer[0]), int(peer[1]))
        self._reader.connection_made(transport, client)
        self._writer.connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server._connections.add(self)
        if self._server.closing:
            transport.close()

    def data_received(self, data: bytes) -> None:
        self._reader.data_received(data)

    def eof_received(self) -> bool | None:
        # A half-closed client may still be waiting for its responses.
        reader = self._reader
        if self.busy and reader.phase != _LINGER:
            reader.close_after = True
            return True
        return None

    def pause_writing(self) -> None:
        # The peer is not reading its answers: stop reading its requests too.
        self._writer.pause_writing()
        self._reader.update_reading()

    def resume_writing(self) -> None:
        writer = self._writer
        writer.paused = False
        self._reader.update_reading()
        writer.wake_drain()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._forget(self)
        self._queue.clear()
        self._queued_bytes = 0
        if self._worker is not None:
            self._worker.cancel()
        self._writer.connection_lost()
        self._transport = None
        self._reader.release()
        self._relayed_to = _answered_nowhere  # (a relay's call holds the bound method itself)

    # request queue ---------------------------------------------------------

    def enqueue(self, item: Request | _Reject) -> None:
        """Queue ``item`` for the worker (the reader's requests and refusals come here).

        With nothing queued or in flight, the server's relay may take a request
        first: then the connection is serving until it answers (``_relayed``).
        """
        if not self._serving:
            self._serving = True
            relay = self._server.relay
            taken = (
                relay is not None
                and isinstance(item, Request)
                and not self._queue
                and relay.take(item, self._relayed_to)
            )
            if taken:
                return
            self._queue.append(item)
            if isinstance(item, Request):
                self._queued_bytes += len(item.body)
            self._wake_worker()
            return
        self._queue.append(item)
        if isinstance(item, Request):
            self._queued_bytes += len(item.body)
        limits = self._server.limits
        if len(self._queue) >= limits.max_pipelined or self._queued_bytes > limits.max_queued_bytes:
            self._reader.update_reading()

    def _wake_worker(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        elif self._worker is None:
            self._worker = self._loop.create_task(self._serve_queue())

    def _relayed(self, request: Request, answer: Response | Awaitable[Response]) -> None:
        """The relay's answer to the request it took (see :class:`Relay`)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return  # the client left (or is reset); a task goes on alone (it records its call)
        if not isinstance(answer, Response):
            # Answered before anything pipelined behind it.
            self._queue.appendleft(_Awaited(request, answer))
            self._wake_worker()
            return
        self._write(transport, request, answer)
        if self._queue or self._writer.paused:
            self._wake_worker()  # it drains first, then answers what waits
        else:
            self._idle()

    def must_pause(self) -> bool:
        """Reading pauses while requests wait or the peer is not reading its answers."""
        limits = self._server.limits
        return self._writer.paused or (
            len(self._queue) >= limits.max_pipelined or self._queued_bytes > limits.max_queued_bytes
        )

    @property
    def busy(self) -> bool:
        return self._serving or bool(self._queue) or bool(self._reader.backlog)

    async def _serve_queue(self) -> None:
        try:
            while self._transport is not None:
                if self._writer.paused:
                    await self._writer.drain()  # a relayed answer left the peer behind
                elif self._queue:
                    item = self._queue.popleft()
                    if isinstance(item, _Reject):
                        self._reject(self._transport, item)
                        return
                    if isinstance(item, _Awaited):
                        await self._respond(item.request, item.answer)
                        continue
                    self._queued_bytes -= len(item.body)
                    reader = self._reader
                    if reader.reading_paused or reader.backlog:
                        reader.update_reading()
                    await self._respond(item)
                elif not self._idle():
                    return
                else:
                    # Woken by enqueue; cancelled by connection_lost.
                    wakeup = self._wakeup = self._loop.create_future()
                    await wakeup
                    self._wakeup = None
        except (asyncio.CancelledError, ConnectionError):
            pass  # the connection is gone; nothing to answer
        except Exception:
            logger.exception("connection worker failed")
            self._writer.reset()
        finally:
            self._worker = None
            self._wakeup = None
            self._serving = False

    def _idle(self) -> bool:
        """Everything queued is answered: close if asked to; False once closing."""
        self._serving = False
        if self._transport is None:
            return False
        reader = self._reader
        if reader.close_after and not reader.backlog:
            self._transport.close()
            return False
        if reader.phase == _IDLE:
            reader.phase_since = self._loop.time()
        return True

    # answers ---------------------------------------------------------------

    async def _respond(self, request: Request, answer: Awaitable[Response] | None = None) -> None:
        response: Response | StreamingResponse
        try:
            if answer is None:
                response = await self._server.handler(request)
            else:
                response = await answer
        except AbortConnection:
            self._writer.reset()
            return
        except Exception:
            logger.exception("request handler failed: %s %s", request.method, request.path)
            response = Response(500, (("content-type", "text/plain"),), b"internal server error")
        transport = self._transport
        if transport is None:
            return
        writer = self._writer
        if isinstance(response, StreamingResponse):
            keep_alive = self._keep_alive(request)
            try:
                await writer.send_stream(request, response, keep_alive)
                return
            except Exception as error:
                data = self._unwritable(request, error, keep_alive)
            keep_alive = self._send(transport, data, keep_alive)
        else:
            keep_alive = self._write(transport, request, response)
        if keep_alive and writer.paused:
            await writer.drain()

    def _keep_alive(self, request: Request) -> bool:
        # Closing (the server, or this connection after EOF): the last queued
        # answer says "close"; those before it keep the connection for the rest.
        server = self._server
        return request.keep_alive and not (
            (server.closing or server.draining or self._reader.close_after) and not self._queue
        )

    def _write(self, transport: asyncio.Transport, request: Request, response: Response) -> bool:
        """Write ``response`` whole; False if the connection closes after it."""
        keep_alive = self._keep_alive(request)
        try:
            data = self._writer.encode(request, response, keep_alive)
        except Exception as error:
            data = self._unwritable(request, error, keep_alive)
        return self._send(transport, data, keep_alive)

    def _unwritable(self, request: Request, error: Exception, keep_alive: bool) -> bytes:
        """The 500 that replaces an answer that could not be encoded."""
        if isinstance(error, UnsafeHeader):
            # Fail closed: the header is never written. Not a traceback: the
            # value came from elsewhere (an upstream, a cache) and is refused.
            logger.error(
                "refused a response header holding CR, LF or NUL for %s %s",
                request.method,
                request.path,
            )
        else:
            logger.error("bad response for %s %s", request.method, request.path, exc_info=error)
        return simple_response(500, "internal server error", not keep_alive)

    def _send(self, transport: asyncio.Transport, data: bytes, keep_alive: bool) -> bool:
        transport.write(data)
        if keep_alive:
            return True
        if self._server.closing:
            # The client may be sending a request right now: it gets to
            # read this answer and its "close" rather than a reset.
            self._close_lingering(transport)
        else:
            transport.close()
        return False

    def _reject(self, transport: asyncio.Transport, reject: _Reject) -> None:
        on_reject = self._server.on_reject
        if on_reject is not None:
            on_reject(reject.status, reject.message)
        transport.write(self._writer.encode_refusal(reject))
        # Nothing to linger for when the client has already stopped sending.
        if not reject.linger or self._reader.close_after:
            transport.close()
            return
        self._close_lingering(transport)

    def _close_lingering(self, transport: asyncio.Transport) -> None:
        """Half-close, then read and drop what the client is still sending.

        Bounded in bytes and time; the client reads the last answer instead of
        the reset a close with unread bytes would send.
        """
        if not transport.can_write_eof():
            transport.close()
            return
        try:
            transport.write_eof()
        except OSError:
            # The client is gone already (ENOTCONN: it reset or timed out and closed
            # while its answer was written): an ordinary close, not a worker failure.
            transport.close()
            return
        self._reader.linger(transport)

    # control ---------------------------------------------------------------

    def check_timeouts(self, now: float, limits: ServerLimits) -> None:
        transport = self._transport
        if transport is None:
            return
        writer = self._writer
        if writer.paused and now - writer.paused_since > limits.write_timeout:
            # The peer has read nothing for write_timeout: what it has not
            # read (and whatever it queued) is dropped with the connection.
            writer.reset()
            return
        reader = self._reader
        elapsed = now - reader.phase_since
        phase = reader.phase
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
            reader.fail(_Reject(408, "request timeout"))

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
            if self._reader.phase in (_IDLE, _WAIT_FIRST):
                transport.close()
            return
        self._reader.stop_reading(transport)


# -- server -----------------------------------------------------------------


class Server(ServerSettings):
    """A listening server; build it with :func:`start_server`."""

    def __init__(
        self, handler: Handler, limits: ServerLimits, head_check: HeadCheck | None = None
    ) -> None:
        super().__init__(asyncio.get_running_loop(), limits, head_check)
        self.handler = handler
        self.closing = False
        # Set while the owner drains: every answer says "Connection: close", so
        # clients reconnect (elsewhere) instead of reusing this connection.
        self.draining = False
        # Told (status, reason) of each request refused by the parser or the
        # limits (400, 408, 413, 431, ...), before its answer is written.
        self.on_reject: Callable[[int, str], None] | None = None
        # Answers what it can from the protocol callbacks (see Relay); None: the handler all.
        self.relay: Relay | None = None
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
