# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py): keep it compilable
# (no async generators, no monkeypatching, re-check attributes narrowed before an await).
"""Reading a connection: request parsing with its limits, and read flow control.

The base of the server's connection class (:mod:`gateway._server.http`):
it owns the connection's state, feeds the raw bytes to ``httptools`` in
pieces that never let a head grow past ``max_header_size``, enforces the
header-count and body-size limits, builds :class:`Request` objects, and
pauses reading while requests wait or the peer is not reading its answers.
What is answered, and how, is :mod:`gateway._server.writing`'s.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Final

import httptools

from gateway._server.messages import Request, _Reject

if TYPE_CHECKING:
    from gateway._server.http import Server

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
    """Raised inside a parser callback to stop at a limit (see ``_stop``)."""


_MALFORMED: Final = _Reject(400, "malformed HTTP request")


def _unsupported_version(version: str) -> _Reject:
    if version.startswith("0."):
        return _Reject(400, "HTTP/0.9 is not supported")
    return _Reject(505, f"HTTP/{version} is not supported: use HTTP/1.1")


def _merge_repeated(pairs: list[tuple[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in pairs:
        merged[name] = f"{merged[name]},{value}" if name in merged else value
    return merged


class _RequestReading:
    """The reading half of a client connection (see :class:`gateway._server.http._Connection`).

    Not a subclass of asyncio.Protocol: mypyc compiles this module, and only
    a class without a Python base becomes a native class (fixed attribute
    slots, direct method calls).
    """

    __slots__ = (
        "_backlog",
        "_backlog_scheduled",
        "_body_limit",
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
        "_http_version",
        "_loop",
        "_parser",
        "_phase",
        "_phase_since",
        "_queue",
        "_queued_bytes",
        "_reading_paused",
        "_refusal",
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
        # Its callbacks are this object's methods: a cycle, broken by _release at close.
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
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
        self._http_version = "1.1"  # the current request's, checked with its head
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
        # What a limit a parser callback hit answers (see _stop); None: malformed.
        self._refusal: _Reject | None = None
        self._reset_message()

    def _reset_message(self) -> None:
        self._url_parts: list[bytes] = []
        self._header_pairs: list[tuple[str, str]] = []
        self._body_parts: list[bytes] = []
        self._body_size = 0
        self._body_limit = self._server.limits.max_body_size  # this request's (see body_limits)
        self._body_remaining = -1  # declared body bytes still to come; -1: not known
        self._expect_continue = False

    # reading ---------------------------------------------------------------

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
        parser = self._parser
        if parser is None:
            return False  # released: the connection is gone
        try:
            parser.feed_data(data)
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
        except httptools.HttpParserError:
            self._fail(self._refusal or _MALFORMED)
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
            raise self._stop(_Reject(431, "request header fields too large"))
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
        body_limits = self._server.body_limits
        if body_limits is not None and (chunked or declared > body_limits.floor):
            # Only a body that may be large pays for the path's own limit.
            self._body_limit = min(self._body_limit, body_limits.limit(self._path()))
        if declared > self._body_limit:
            # Refused before a byte of it is read; the lingering close lets
            # a client that is still sending read the answer.
            raise self._stop(self._too_large())
        parser = self._parser
        assert parser is not None  # a callback: only called while it is fed
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            # llhttp takes a request line without a version as HTTP/0.9, and
            # any 2.x as 2.x; this server speaks neither.
            raise self._stop(_unsupported_version(version))
        self._http_version = version
        check = self._server.head_check
        if check is not None:
            # Before a byte of the body is read (or 100 Continue invites it).
            refusal = check(self._build_request(b""))
            if refusal is not None:
                body_follows = chunked or declared > 0
                raise self._stop(_Reject(refusal.status, "", refusal, body_follows))
        if not chunked:
            self._body_remaining = declared
        idle = not self._queue and not self._serving
        if self._expect_continue and idle and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._body_remaining > 0:
            self._body_remaining -= len(body)
        self._body_size += len(body)
        if self._body_size > self._body_limit:
            raise self._stop(self._too_large())
        self._body_parts.append(body)

    def on_message_complete(self) -> None:
        parts = self._body_parts
        self._enqueue(self._build_request(parts[0] if len(parts) == 1 else b"".join(parts)))
        self._reset_message()
        # The idle clock starts when the worker has answered (_serve_queue):
        # until then the connection is busy and no idle timeout applies.
        self._phase = _IDLE
        self._head_bytes = 0
        self._completed_in_feed = True

    def _stop(self, reject: _Reject) -> _StopParsing:
        """The exception a callback raises to stop the parser, answering ``reject``.

        The refusal is kept here, not in the exception: httptools hands the
        callback's exception back as its error's ``__context__``, and raising
        that error while the thread handles another exception (a compiled
        coroutine can leave one set) replaces it, turning a 413 into a 400.
        """
        self._refusal = reject
        return _StopParsing()

    def _too_large(self) -> _Reject:
        limit = self._body_limit
        body_limits = self._server.body_limits
        refusal = body_limits.refusal(self._path(), limit) if body_limits is not None else None
        return _Reject(413, f"HTTP content length exceeded {limit} bytes.", refusal, linger=True)

    def _path(self) -> str:
        """The current request's path (its target without the query)."""
        return b"".join(self._url_parts).decode("latin-1").partition("?")[0]

    # request queue ---------------------------------------------------------

    def _build_request(self, body: bytes) -> Request:
        parser = self._parser
        assert parser is not None  # a callback's helper: only called while it is fed
        url = self._url_parts[0] if len(self._url_parts) == 1 else b"".join(self._url_parts)
        target = url.decode("latin-1")
        path, _, query = target.partition("?")
        pairs = self._header_pairs
        headers = dict(pairs)
        if len(headers) != len(pairs):
            headers = _merge_repeated(pairs)
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
            self._http_version,
            parser.should_keep_alive(),
        )

    def _enqueue(self, item: Request | _Reject) -> None:
        """Queue ``item`` for the connection's worker (the subclass's)."""
        raise NotImplementedError

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
        elif self._reading_paused and not self._close_after:
            # Closing (EOF, or the server's shutdown): nothing more is read.
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
        # Nothing more is parsed: a refused or stalled body (megabytes, maybe) goes now,
        # not when the connection does.
        self._body_parts = []
        self._backlog = b""
        if self._transport is not None:
            self._transport.pause_reading()
            self._reading_paused = True
        self._enqueue(reject)

    def _release(self) -> None:
        """The connection is gone: drop its buffers and the parser.

        The parser's callbacks are this object's methods, so the two form a
        cycle: only the cycle collector would free them, and what they hold (a
        refused body of megabytes), and it rarely runs in a busy process (or
        never looks, for what ``gc.freeze`` moved out of its sight).
        """
        self._parser = None
        self._backlog = b""
        self._queue.clear()
        self._queued_bytes = 0
        self._reset_message()

    @property
    def busy(self) -> bool:
        return self._serving or bool(self._queue) or bool(self._backlog)
