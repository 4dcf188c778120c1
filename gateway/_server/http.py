# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""A small HTTP/1.1 server core: asyncio protocol + ``httptools`` parser.

Shared by the emulator and the sidecar, so it is general and sits on a hot
path. One :class:`asyncio.Protocol` per connection parses with
``httptools.HttpRequestParser``; complete requests go into a per-connection
queue and are answered one at a time, in order (pipelining is safe, never
concurrent). A response head is built as one ``str`` and encoded once.

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
import logging
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final, cast

import httptools

__all__ = [
    "AbortConnection",
    "Handler",
    "Request",
    "Response",
    "Server",
    "ServerLimits",
    "StreamingResponse",
    "UnsafeHeader",
    "start_server",
]

logger = logging.getLogger("gateway.http_server")


class AbortConnection(Exception):
    """Raise from a handler to reset the connection (RST, no response)."""


class UnsafeHeader(ValueError):
    """A response header name or value holds CR, LF or NUL: never written."""


class Request:
    """One parsed request, as the handler sees it.

    A plain class rather than a dataclass: compiled, it is a native class
    built without a Python-level ``__init__`` (one per request).
    """

    __slots__ = (
        "body",
        "client",
        "header_pairs",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "path",
        "query",
    )

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        header_pairs: list[tuple[str, str]],
        body: bytes,
        client: tuple[str, int] | None,
        http_version: str = "1.1",
        keep_alive: bool = True,
    ) -> None:
        self.method = method
        self.path = path  # as received: still percent-encoded, without the query
        self.query = query  # the text after '?', or ""
        self.headers = headers  # lower-case names; repeated names joined with ","
        self.header_pairs = header_pairs  # lower-case names, in arrival order
        self.body = body
        self.client = client
        self.http_version = http_version
        self.keep_alive = keep_alive

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path}, {len(self.body)} bytes)"


class Response:
    """A complete response. The server adds Content-Length, Date, Connection.

    ``head_lines`` are header lines already encoded, each ending in CRLF, sent
    before ``headers``: a relay copies an upstream's lines there unchanged.
    Unlike ``headers`` they are sent unchecked, so whoever builds them checks
    them (``InvokeResult.field_lines`` does: no bare CR or LF, no NUL, no
    folded line).
    """

    __slots__ = ("body", "head_lines", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        head_lines: bytes = b"",
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.head_lines = head_lines


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
    # After a 413 (sent at once), what the client still sends is read and
    # dropped up to this much (and for 2 s at most), so it gets to read the
    # 413 instead of a reset while it is still sending.
    max_discard_size: int = 16 * 1024 * 1024
    header_timeout: float = 10.0  # first byte of a request to end of headers
    body_timeout: float = 60.0  # end of headers to end of body
    keepalive_timeout: float = 75.0  # idle between requests
    max_pipelined: int = 16  # queued requests before reading pauses
    # Request bodies waiting behind the one being answered: past this, reading
    # pauses, so a client that pipelines and never reads pins little memory.
    max_queued_bytes: int = 1024 * 1024
    # A peer that reads none of its answers for this long is cut off.
    write_timeout: float = 30.0
    shutdown_timeout: float = 5.0  # in-flight grace on close()
    server_header: str | None = None


# -- response encoding ------------------------------------------------------

_EXTRA_REASONS: Final = {530: "Internal Dependency Failure"}


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _EXTRA_REASONS.get(status, "Unknown")


_STATUS_LINES: Final[dict[int, str]] = {}


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


_date: Final = _DateHeader()


def _header_block(headers: Sequence[tuple[str, str]]) -> str:
    """The handler's header lines, checked: never a CR, LF or NUL of their own."""
    if not headers:
        return ""
    block = "".join([f"{name}: {value}\r\n" for name, value in headers])
    # Every header line contributes exactly one CR and one LF; more means a
    # name or a value carried one (response splitting; a bare CR is read as a
    # line end by some clients). C-level counts check every line at once; the
    # status, Date, Server and framing lines are the server's own and unchecked.
    lines = len(headers)
    if block.count("\n") != lines or block.count("\r") != lines or "\x00" in block:
        raise UnsafeHeader("CR, LF or NUL in a response header")
    return block


def _encode_head(
    status: int,
    headers: Sequence[tuple[str, str]],
    framing: str,
    server_line: str,
    head_lines: bytes = b"",
) -> bytes:
    if head_lines:
        rest = f"{_header_block(headers)}{_date.line()}{server_line}{framing}"
        return b"%b%b%b" % (
            _status_line(status).encode("latin-1"),
            head_lines,
            rest.encode("latin-1"),
        )
    text = f"{_status_line(status)}{_header_block(headers)}{_date.line()}{server_line}{framing}"
    return text.encode("latin-1")


def _simple_response(status: int, message: str, close: bool) -> bytes:
    body = message.encode()
    framing = f"content-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    framing += "connection: close\r\n\r\n" if close else "\r\n"
    return _encode_head(status, (), framing, "") + body


# -- connection -------------------------------------------------------------

# Decoded once: the methods and the header names clients send on every request
# (botocore's spelling and lower case), so the common case is one dict lookup.
# Fixed at import: names from a client never grow it.
_METHODS: Final = {
    m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")
}
_COMMON_HEADER_NAMES = (
    "Host",
    "Content-Type",
    "Content-Length",
    "Accept",
    "Accept-Encoding",
    "Connection",
    "User-Agent",
    "Authorization",
    "Expect",
    "Transfer-Encoding",
    "Cache-Control",
    "X-Amz-Date",
    "X-Amz-Security-Token",
    "X-Amz-Content-SHA256",
    "amz-sdk-invocation-id",
    "amz-sdk-request",
    "X-Amzn-SageMaker-Custom-Attributes",
    "X-Amzn-SageMaker-Target-Model",
    "X-Amzn-SageMaker-Target-Variant",
    "X-Amzn-SageMaker-Target-Container-Hostname",
    "X-Amzn-SageMaker-Inference-Id",
    "X-Amzn-SageMaker-Enable-Explanations",
    "X-Amzn-SageMaker-Inference-Component",
    "X-Amzn-SageMaker-Session-Id",
    "X-Amzn-SageMaker-Accept",
    "X-Amzn-SageMaker-Content-Type",
    "X-Amzn-Trace-Id",
    "traceparent",
    "tracestate",
)
_HEADER_NAMES: Final = {
    spelling.encode("latin-1"): name.lower()
    for name in _COMMON_HEADER_NAMES
    for spelling in (name, name.lower())
}

# Final: compiled, they are constants rather than module-dict lookups.
_WAIT_FIRST: Final = 0
_IDLE: Final = 1
_HEADERS: Final = 2
_BODY: Final = 3
_STOPPED: Final = -1  # parsing stopped: answer what is queued, then close
_LINGER: Final = -2  # answered 413 and half-closed: drop what the client still sends
# How long a lingering close keeps reading (at most) before it closes.
_LINGER_S: Final = 2.0


class _StopParsing(Exception):
    """Raised inside a parser callback to stop at a limit."""


@dataclass(frozen=True, slots=True)
class _Reject:
    status: int
    message: str


class _Connection:
    """One client connection: an ``asyncio.Protocol`` by its methods.

    Not a subclass of asyncio.Protocol: mypyc compiles this module, and only
    a class without a Python base becomes a native class (fixed attribute
    slots, direct method calls).
    """

    __slots__ = (
        "_backlog",
        "_backlog_scheduled",
        "_body_parts",
        "_body_remaining",
        "_body_size",
        "_client",
        "_close_after",
        "_completed_in_feed",
        "_discarded",
        "_drain_waiter",
        "_expect_continue",
        "_head_bytes",
        "_header_pairs",
        "_loop",
        "_parser",
        "_phase",
        "_phase_since",
        "_queue",
        "_queued_bytes",
        "_reading_paused",
        "_server",
        "_serving",
        "_transport",
        "_url_parts",
        "_wakeup",
        "_worker",
        "_write_paused",
        "_write_paused_since",
    )

    def __init__(self, server: Server) -> None:
        self._server = server
        self._loop = server.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._client: tuple[str, int] | None = None
        self._queue: deque[Request | _Reject] = deque()
        self._queued_bytes = 0  # body bytes of the requests waiting in _queue
        # One worker task per connection, started with its first request and
        # kept: between requests it waits on a future, which costs less than
        # a task per request (3.11 registers every task in a WeakSet).
        self._worker: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._serving = False  # the worker has a request (or a refusal) to answer
        self._phase = _WAIT_FIRST
        self._phase_since = self._loop.time()
        # Raw bytes fed to the parser for the current head, and whether a
        # message ended inside the last piece fed (see data_received).
        self._head_bytes = 0
        self._completed_in_feed = False
        self._discarded = 0  # bytes dropped by a lingering close
        self._reading_paused = False
        # Bytes read but not yet parsed because the queue was full.
        self._backlog = b""
        self._backlog_scheduled = False
        self._write_paused = False
        self._write_paused_since = 0.0
        self._drain_waiter: asyncio.Future[None] | None = None
        # Set on client EOF or an unsupported upgrade: answer what is queued, then close.
        self._close_after = False
        self._reset_message()

    def _reset_message(self) -> None:
        self._url_parts: list[bytes] = []
        self._header_pairs: list[tuple[str, str]] = []
        self._body_parts: list[bytes] = []
        self._body_size = 0
        self._body_remaining = -1  # declared body bytes still to come; -1: not known
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
        # The peer is not reading its answers: stop reading its requests too,
        # and start the write-progress clock.
        self._write_paused = True
        self._write_paused_since = self._loop.time()
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        if self._phase < 0:
            if self._phase == _LINGER:
                self._discard(len(data))
            return
        limit = self._server.limits.max_header_size
        # Feed in pieces so that no head byte past the limit ever reaches the
        # parser (httptools buffers a header or a URL whole, re-copying it on
        # every fragment). A piece ends where the head may reach the limit, or
        # where a declared body ends; bytes after a message that ends inside a
        # piece are counted from the next piece on, so a head is bounded by
        # twice the limit at worst.
        while True:
            if self._phase == _BODY:
                take = self._body_remaining
            else:
                take = limit - self._head_bytes
                if take <= 0:
                    self._fail(self._head_too_large())
                    return
            if 0 <= take < len(data):
                piece, data = data[:take], data[take:]
            else:
                piece, data = data, b""
            self._completed_in_feed = False
            if not self._feed(piece):
                return
            if self._phase != _BODY and not self._completed_in_feed:
                self._head_bytes += len(piece)
            if not data:
                return
            if self._must_pause():
                # One read can hold many requests: keep the rest unparsed
                # until the queue has room again.
                self._backlog = data
                self._update_reading()
                return

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False once parsing has stopped."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request itself was complete and is queued; we never switch
            # protocols, so answer it as plain HTTP/1.1 and close.
            self._phase = _STOPPED
            self._close_after = True
            if self._transport is not None:
                self._transport.pause_reading()
            if not self.busy and self._transport is not None:
                self._transport.close()
            return False
        except httptools.HttpParserError as exc:
            pending = exc.__context__
            if isinstance(pending, _StopParsing):
                self._fail(pending.args[0])
            else:
                self._fail(_Reject(400, "malformed HTTP request"))
            return False
        return self._phase >= 0 and self._transport is not None

    def _head_too_large(self) -> _Reject:
        # Mostly request target: the URI is what is too long.
        url_size = sum(len(part) for part in self._url_parts)
        if not self._header_pairs and url_size * 2 > self._head_bytes:
            return _Reject(414, "request target too long")
        return _Reject(431, "request header fields too large")

    def _discard(self, size: int) -> None:
        """Lingering close: drop the rest of a refused body, up to a bound."""
        self._discarded += size
        if self._discarded > self._server.limits.max_discard_size and self._transport:
            self._transport.close()

    def eof_received(self) -> bool | None:
        # A half-closed client may still be waiting for its responses.
        if self.busy and self._phase != _LINGER:
            self._close_after = True
            return True
        return None

    # httptools callbacks ---------------------------------------------------

    def on_message_begin(self) -> None:
        self._phase = _HEADERS
        self._phase_since = self._loop.time()

    def on_url(self, url: bytes) -> None:
        # Bounded: data_received never feeds a head past max_header_size.
        self._url_parts.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self._header_pairs) >= self._server.limits.max_headers:
            raise _StopParsing(_Reject(431, "request header fields too large"))
        lower = _HEADER_NAMES.get(name)
        if lower is None:
            lower = name.decode("latin-1").lower()
        self._header_pairs.append((lower, value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._phase_since = self._loop.time()
        declared = -1
        chunked = False
        for name, value in self._header_pairs:
            if name == "content-length":
                # llhttp has checked the value; the length check keeps int() cheap.
                digits = value.strip()
                declared = int(digits) if len(digits) < 19 and digits.isdecimal() else 1 << 62
            elif name == "transfer-encoding":
                chunked = True
            elif name == "expect" and value.lower() == "100-continue":
                self._expect_continue = True
        if declared > self._server.limits.max_body_size:
            # Refused before a byte of it is read; the lingering close lets
            # a client that is still sending read the answer.
            raise _StopParsing(self._too_large())
        if not chunked:
            self._body_remaining = declared
        idle = not self._queue and not self._serving
        if self._expect_continue and idle and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._body_remaining > 0:
            self._body_remaining -= len(body)
        self._body_size += len(body)
        if self._body_size > self._server.limits.max_body_size:
            raise _StopParsing(self._too_large())
        self._body_parts.append(body)

    def on_message_complete(self) -> None:
        self._enqueue(self._build_request())
        self._reset_message()
        # The idle clock starts when the worker has answered (_serve_queue):
        # until then the connection is busy and no idle timeout applies.
        self._phase = _IDLE
        self._head_bytes = 0
        self._completed_in_feed = True

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
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("ascii")
        return Request(
            method,
            path,
            query,
            headers,
            pairs,
            body,
            self._client,
            parser.get_http_version(),
            parser.should_keep_alive(),
        )

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

    def _must_pause(self) -> bool:
        limits = self._server.limits
        return self._write_paused or (
            len(self._queue) >= limits.max_pipelined or self._queued_bytes > limits.max_queued_bytes
        )

    def _update_reading(self) -> None:
        """Read only while the peer reads its answers and little is queued."""
        transport = self._transport
        if transport is None or self._phase < 0:
            return
        if self._must_pause():
            if not self._reading_paused:
                self._reading_paused = True
                transport.pause_reading()
        elif self._backlog:
            if not self._backlog_scheduled:
                self._backlog_scheduled = True
                self._loop.call_soon(self._feed_backlog)
        elif self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _feed_backlog(self) -> None:
        self._backlog_scheduled = False
        data, self._backlog = self._backlog, b""
        if data and self._transport is not None and self._phase >= 0:
            self.data_received(data)
        self._update_reading()

    def _fail(self, reject: _Reject) -> None:
        """Stop parsing; answer ``reject`` after the requests already queued."""
        self._phase = _STOPPED
        if self._transport is not None:
            self._transport.pause_reading()
            self._reading_paused = True
        self._enqueue(reject)

    def _reject(self, transport: asyncio.Transport, reject: _Reject) -> None:
        on_reject = self._server.on_reject
        if on_reject is not None:
            on_reject(reject.status, reject.message)
        transport.write(_simple_response(reject.status, reject.message, True))
        # Nothing to linger for when the client has already stopped sending.
        if reject.status != 413 or self._close_after or not transport.can_write_eof():
            transport.close()
            return
        # Lingering close: half-close, then read and drop what the client is
        # still sending (bounded in bytes and time), so it reads the 413
        # instead of a reset.
        transport.write_eof()
        self._phase = _LINGER
        self._phase_since = self._loop.time()
        self._reading_paused = False
        transport.resume_reading()

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
        server = self._server
        keep_alive = request.keep_alive and not (
            server.closing or server.draining or (self._close_after and not self._queue)
        )
        try:
            if isinstance(response, StreamingResponse):
                await self._send_stream(request, response, keep_alive)
                return
            data = self._encode(request, response, keep_alive)
        except UnsafeHeader:
            # Fail closed: the header is never written. Not a traceback: the
            # value came from elsewhere (an upstream, a cache) and is refused.
            logger.error(
                "refused a response header holding CR, LF or NUL for %s %s",
                request.method,
                request.path,
            )
            data = _simple_response(500, "internal server error", not keep_alive)
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
        status = response.status
        # 1xx and 204 never carry Content-Length (RFC 9110 8.6); nor does our
        # 304, which has no representation to describe.
        bodiless = status in (204, 304) or status < 200
        framing = "" if bodiless else f"content-length: {len(body)}\r\n"
        if not keep_alive:
            framing += "connection: close\r\n"
        head = _encode_head(
            status,
            response.headers,
            framing + "\r\n",
            self._server.server_line,
            response.head_lines,
        )
        if request.method == "HEAD" or bodiless:
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
        return self._serving or bool(self._queue) or bool(self._backlog)

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
        # Set while the owner drains: every answer says "Connection: close", so
        # clients reconnect (elsewhere) instead of reusing this connection.
        self.draining = False
        # Told (status, reason) of each request refused by the parser or the
        # limits (400, 408, 413, 431, ...), before its answer is written.
        self.on_reject: Callable[[int, str], None] | None = None
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
