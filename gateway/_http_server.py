"""A small HTTP/1.1 server core: asyncio protocol + ``httptools`` parser.

Shared by the emulator and the sidecar, so it is general and sits on a hot
path. One :class:`asyncio.Protocol` per connection parses with
``httptools.HttpRequestParser``; complete requests go into a per-connection
queue and are answered one at a time, in order (pipelining is safe, never
concurrent). A response head is built as one ``str`` and encoded once.

Defences against slow or hostile clients: a header-size limit (431), a
body-size limit (413, then the connection is closed), a header-read timeout,
a body-read timeout and an idle keep-alive timeout, all enforced by one
periodic sweep per server rather than a timer per request. Handler
exceptions become a 500 and the server carries on; raising
:class:`AbortConnection` resets the connection (RST) for fault injection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import cast

import httptools

__all__ = [
    "AbortConnection",
    "Handler",
    "Request",
    "Response",
    "Server",
    "ServerLimits",
    "StreamingResponse",
    "start_server",
]

logger = logging.getLogger("gateway.http_server")


class AbortConnection(Exception):
    """Raise from a handler to reset the connection (RST, no response)."""


@dataclass(slots=True)
class Request:
    method: str
    path: str  # as received: still percent-encoded, without the query
    query: str  # the text after '?', or ""
    headers: dict[str, str]  # lower-case names; repeated names joined with ","
    header_pairs: list[tuple[str, str]]  # lower-case names, in arrival order
    body: bytes
    client: tuple[str, int] | None
    http_version: str = "1.1"
    keep_alive: bool = True


class Response:
    """A complete response. The server adds Content-Length, Date, Connection."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int = 200, headers: Sequence[tuple[str, str]] = (), body: bytes = b""
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class StreamingResponse:
    """A response whose body is sent as it is produced (chunked encoding)."""

    __slots__ = ("chunks", "headers", "status")

    def __init__(
        self,
        chunks: AsyncIterable[bytes],
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.status = status
        self.headers = headers
        self.chunks = chunks


Handler = Callable[[Request], Awaitable[Response | StreamingResponse]]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_header_size: int = 64 * 1024  # request line + all header lines
    max_headers: int = 128
    max_body_size: int = 8 * 1024 * 1024
    # An oversized body is read and dropped up to this much, so the client
    # gets to read the 413 instead of a reset while it is still sending.
    max_discard_size: int = 16 * 1024 * 1024
    header_timeout: float = 10.0  # first byte of a request to end of headers
    body_timeout: float = 60.0  # end of headers to end of body
    keepalive_timeout: float = 75.0  # idle between requests
    max_pipelined: int = 16  # queued requests before reading pauses
    shutdown_timeout: float = 5.0  # in-flight grace on close()
    server_header: str | None = None


# -- response encoding ------------------------------------------------------

_EXTRA_REASONS = {530: "Internal Dependency Failure"}


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _EXTRA_REASONS.get(status, "Unknown")


_STATUS_LINES: dict[int, str] = {}


def _status_line(status: int) -> str:
    line = _STATUS_LINES.get(status)
    if line is None:
        if not 100 <= status <= 999:
            raise ValueError(f"bad HTTP status {status}")
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {_reason(status)}\r\n"
    return line


class _DateHeader:
    """The ``Date`` header line, formatted once per second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = ""

    def line(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._line = f"date: {formatdate(second, usegmt=True)}\r\n"
        return self._line


_date = _DateHeader()


def _encode_head(
    status: int, headers: Sequence[tuple[str, str]], framing: str, server_line: str
) -> bytes:
    parts = [_status_line(status)]
    parts.extend([f"{name}: {value}\r\n" for name, value in headers])
    parts.append(_date.line())
    parts.append(server_line)
    parts.append(framing)
    text = "".join(parts)
    # Every header line contributes exactly one LF; more means a name or a
    # value carried CR/LF (response splitting). One C-level count checks all.
    if text.count("\n") != len(headers) + 2 + (1 if server_line else 0) + framing.count("\n"):
        raise ValueError("CR or LF in a response header")
    return text.encode("latin-1")


def _simple_response(status: int, message: str, close: bool) -> bytes:
    body = message.encode()
    framing = f"content-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    framing += "connection: close\r\n\r\n" if close else "\r\n"
    return _encode_head(status, (), framing, "") + body


# -- connection -------------------------------------------------------------

_WAIT_FIRST, _IDLE, _HEADERS, _BODY = range(4)


class _StopParsing(Exception):
    """Raised inside a parser callback to stop at a limit."""


@dataclass(frozen=True, slots=True)
class _Reject:
    status: int
    message: str


class _Connection(asyncio.Protocol):
    __slots__ = (
        "_body_parts",
        "_body_size",
        "_client",
        "_close_after",
        "_discarded",
        "_drain_waiter",
        "_expect_continue",
        "_header_pairs",
        "_header_size",
        "_loop",
        "_parser",
        "_phase",
        "_phase_since",
        "_queue",
        "_reading_paused",
        "_server",
        "_transport",
        "_url_parts",
        "_worker",
        "_write_paused",
    )

    def __init__(self, server: Server) -> None:
        self._server = server
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._client: tuple[str, int] | None = None
        self._queue: deque[Request | _Reject] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._phase = _WAIT_FIRST
        self._phase_since = self._loop.time()
        self._reading_paused = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # Set on client EOF or an unsupported upgrade: answer what is queued, then close.
        self._close_after = False
        self._reset_message()

    def _reset_message(self) -> None:
        self._url_parts: list[bytes] = []
        self._header_pairs: list[tuple[str, str]] = []
        self._header_size = 0
        self._body_parts: list[bytes] = []
        self._body_size = 0
        self._discarded = -1  # >= 0 while dropping an oversized body
        self._expect_continue = False

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

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._phase < 0:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request itself was complete and is queued; we never switch
            # protocols, so answer it as plain HTTP/1.1 and close.
            self._phase = -1
            self._close_after = True
            if self._transport is not None:
                self._transport.pause_reading()
            if not self.busy and self._transport is not None:
                self._transport.close()
        except httptools.HttpParserError as exc:
            pending = exc.__context__
            if isinstance(pending, _StopParsing):
                self._fail(pending.args[0])
            else:
                self._fail(_Reject(400, "malformed HTTP request"))

    def eof_received(self) -> bool | None:
        # A half-closed client may still be waiting for its responses.
        if self.busy:
            self._close_after = True
            return True
        return None

    # httptools callbacks ---------------------------------------------------

    def on_message_begin(self) -> None:
        self._phase = _HEADERS
        self._phase_since = self._loop.time()

    def on_url(self, url: bytes) -> None:
        self._header_size += len(url)
        self._url_parts.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_size += len(name) + len(value) + 4
        limits = self._server.limits
        if self._header_size > limits.max_header_size or (
            len(self._header_pairs) >= limits.max_headers
        ):
            raise _StopParsing(_Reject(431, "request header fields too large"))
        self._header_pairs.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self._header_size > self._server.limits.max_header_size:
            raise _StopParsing(_Reject(431, "request header fields too large"))
        self._phase = _BODY
        self._phase_since = self._loop.time()
        for name, value in self._header_pairs:
            if name == "content-length":
                if value.isdigit() and int(value) > self._server.limits.max_body_size:
                    self._discarded = 0
            elif name == "expect" and value.lower() == "100-continue":
                self._expect_continue = True
        if self._expect_continue:
            if self._discarded >= 0:
                # The client waits before sending: answer now, never read it.
                raise _StopParsing(self._too_large())
            if not self._queue and self._worker is None and self._transport is not None:
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._discarded < 0:
            self._body_size += len(body)
            if self._body_size <= self._server.limits.max_body_size:
                self._body_parts.append(body)
                return
            self._body_parts = []
            self._discarded = self._body_size
            return
        self._discarded += len(body)
        if self._discarded > self._server.limits.max_discard_size:
            raise _StopParsing(self._too_large())

    def on_message_complete(self) -> None:
        if self._discarded >= 0:
            raise _StopParsing(self._too_large())
        self._enqueue(self._build_request())
        self._reset_message()
        self._phase = _IDLE
        self._phase_since = self._loop.time()

    def _too_large(self) -> _Reject:
        limit = self._server.limits.max_body_size
        return _Reject(413, f"HTTP content length exceeded {limit} bytes.")

    # request queue ---------------------------------------------------------

    def _build_request(self) -> Request:
        parser = self._parser
        url = self._url_parts[0] if len(self._url_parts) == 1 else b"".join(self._url_parts)
        target = url.decode("latin-1")
        path, _, query = target.partition("?")
        pairs = self._header_pairs
        headers = dict(pairs)
        if len(headers) != len(pairs):
            headers = _merge_repeated(pairs)
        parts = self._body_parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return Request(
            method=parser.get_method().decode("ascii"),
            path=path,
            query=query,
            headers=headers,
            header_pairs=pairs,
            body=body,
            client=self._client,
            http_version=parser.get_http_version(),
            keep_alive=parser.should_keep_alive(),
        )

    def _enqueue(self, item: Request | _Reject) -> None:
        self._queue.append(item)
        if self._worker is None:
            self._worker = self._loop.create_task(self._serve_queue())
        elif len(self._queue) >= self._server.limits.max_pipelined and self._transport:
            self._transport.pause_reading()
            self._reading_paused = True

    def _fail(self, reject: _Reject) -> None:
        """Stop parsing; answer ``reject`` after the requests already queued."""
        self._phase = -1
        if self._transport is not None:
            self._transport.pause_reading()
        self._enqueue(reject)

    async def _serve_queue(self) -> None:
        try:
            while self._queue and self._transport is not None:
                item = self._queue.popleft()
                if self._reading_paused and len(self._queue) < self._server.limits.max_pipelined:
                    self._reading_paused = False
                    if self._phase >= 0:
                        self._transport.resume_reading()
                if isinstance(item, _Reject):
                    self._transport.write(_simple_response(item.status, item.message, True))
                    self._transport.close()
                    return
                await self._respond(item)
        except (asyncio.CancelledError, ConnectionError):
            pass  # the connection is gone; nothing to answer
        except Exception:
            logger.exception("connection worker failed")
            self.reset()
        finally:
            self._worker = None
        if self._close_after and self._transport is not None:
            self._transport.close()
        elif self._phase == _IDLE:
            self._phase_since = self._loop.time()

    async def _respond(self, request: Request) -> None:
        try:
            response = await self._server.handler(request)
        except AbortConnection:
            self.reset()
            return
        except Exception:
            logger.exception("request handler failed: %s %s", request.method, request.path)
            response = Response(500, (("content-type", "text/plain"),), b"internal server error")
        transport = self._transport
        if transport is None:
            return
        keep_alive = request.keep_alive and not (
            self._server.closing or (self._close_after and not self._queue)
        )
        try:
            if isinstance(response, StreamingResponse):
                await self._send_stream(request, response, keep_alive)
                return
            data = self._encode(request, response, keep_alive)
        except Exception:
            logger.exception("bad response for %s %s", request.method, request.path)
            data = _simple_response(500, "internal server error", not keep_alive)
        transport.write(data)
        if not keep_alive:
            transport.close()
        elif self._write_paused:
            await self._drain()

    def _encode(self, request: Request, response: Response, keep_alive: bool) -> bytes:
        body = response.body
        framing = f"content-length: {len(body)}\r\n"
        if not keep_alive:
            framing += "connection: close\r\n"
        head = _encode_head(
            response.status, response.headers, framing + "\r\n", self._server.server_line
        )
        if request.method == "HEAD" or response.status in (204, 304):
            return head
        return head + body

    async def _send_stream(
        self, request: Request, response: StreamingResponse, keep_alive: bool
    ) -> None:
        chunked = request.http_version != "1.0"
        keep_alive = keep_alive and chunked  # HTTP/1.0: the body ends at close
        framing = "transfer-encoding: chunked\r\n" if chunked else ""
        if not keep_alive:
            framing += "connection: close\r\n"
        head = _encode_head(
            response.status, response.headers, framing + "\r\n", self._server.server_line
        )
        self._write(head)
        try:
            async for chunk in response.chunks:
                if chunk:
                    self._write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                    if self._write_paused:
                        await self._drain()
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception:
            # The status line is gone already: all we can say is "cut short".
            logger.exception("streaming handler failed: %s %s", request.method, request.path)
            self.reset()
            return
        if chunked:
            self._write(b"0\r\n\r\n")
        if not keep_alive and self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        if self._transport is None:
            raise ConnectionResetError("connection lost")
        self._transport.write(data)

    async def _drain(self) -> None:
        if self._transport is None:
            raise ConnectionResetError("connection lost")
        waiter = self._drain_waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None

    # control ---------------------------------------------------------------

    def reset(self) -> None:
        """Abort with RST: SO_LINGER 0 makes close() drop the connection."""
        transport = self._transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    @property
    def busy(self) -> bool:
        return self._worker is not None or bool(self._queue)

    def check_timeouts(self, now: float, limits: ServerLimits) -> None:
        transport = self._transport
        if transport is None or self._phase < 0:
            return
        elapsed = now - self._phase_since
        phase = self._phase
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
        if phase == _WAIT_FIRST or self.busy:
            transport.close()
        else:
            self._fail(_Reject(408, "request timeout"))

    def shutdown(self) -> None:
        """Close now if idle; otherwise the in-flight response says ``close``."""
        if self._transport is not None and not self.busy and self._phase in (_IDLE, _WAIT_FIRST):
            self._transport.close()


def _merge_repeated(pairs: list[tuple[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in pairs:
        merged[name] = f"{merged[name]},{value}" if name in merged else value
    return merged


# -- server -----------------------------------------------------------------


class Server:
    """A listening server; build it with :func:`start_server`."""

    def __init__(self, handler: Handler, limits: ServerLimits) -> None:
        self.handler = handler
        self.limits = limits
        self.loop = asyncio.get_running_loop()
        self.closing = False
        self.server_line = f"server: {limits.server_header}\r\n" if limits.server_header else ""
        self._connections: set[_Connection] = set()
        self._aio_server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._all_closed = asyncio.Event()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._aio_server.sockets) if self._aio_server else ()

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
                lambda: _Connection(self), sock=sock, backlog=backlog
            )
        else:
            self._aio_server = await self.loop.create_server(
                lambda: _Connection(self),
                host,
                port,
                backlog=backlog,
                reuse_address=True,
                reuse_port=reuse_port or None,
            )
        self._sweeper = self.loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        limits = self.limits
        shortest = min(limits.header_timeout, limits.body_timeout, limits.keepalive_timeout)
        interval = min(max(shortest / 4, 0.02), 1.0)
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
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
) -> Server:
    """Listen on ``host:port`` (port 0 picks a free one) and serve ``handler``."""
    server = Server(handler, limits or ServerLimits())
    await server._listen(host, port, sock, backlog, reuse_port)
    return server
