# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py): keep it compilable
# (no async generators, no monkeypatching, re-check attributes narrowed before an await).
"""Reading a connection: request parsing with its limits, and read flow control.

The connection (:mod:`gateway._server.http`) owns one :class:`RequestReader`,
which feeds the raw bytes to ``httptools`` in pieces that never let a head
grow past ``max_header_size``, enforces the header-count and body-size limits,
builds :class:`Request` objects and hands them to the connection, and pauses
reading while the connection says so (requests wait, or the peer is not
reading its answers). It knows nothing of how answers are written
(:mod:`gateway._server.writing`), and sees its server and its connection only
through :class:`ServerSettings` and :class:`ReaderOwner`, so it imports neither.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import httptools

from gateway._server.messages import BodyLimits, HeadCheck, Request, ServerLimits, _Reject

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
# One string per name, whichever spelling it came in: dicts keyed by it compare by identity.
_LOWER_NAMES: Final = tuple(name.lower() for name in _COMMON_HEADER_NAMES)
_HEADER_NAMES: Final = {
    spelling.encode("latin-1"): lower
    for name, lower in zip(_COMMON_HEADER_NAMES, _LOWER_NAMES, strict=True)
    for spelling in (name, lower)
}

_REPEATED_VALUES: Final = (
    "host",
    "content-type",
    "content-length",
    "accept",
    "accept-encoding",
    "user-agent",
    "cache-control",
    "x-amz-date",
    "amz-sdk-request",
    "x-amzn-sagemaker-target-model",
    "x-amzn-sagemaker-target-variant",
    "x-amzn-sagemaker-target-container-hostname",
    "x-amzn-sagemaker-enable-explanations",
    "x-amzn-sagemaker-inference-component",
    "x-amzn-sagemaker-accept",
    "x-amzn-sagemaker-content-type",
)

# A read that is exactly one plain request, in one pass in C (_request_heads.c) where it
# was built, rather than through llhttp's callbacks (see RequestReader._plain_request).
_PlainRequest = tuple[str, str, dict[str, str], bytes]


def _bound_plain_request() -> Callable[[bytes, int, int, int], _PlainRequest | None] | None:
    try:
        from gateway._server import _request_heads
    except ImportError:
        return None
    # The names' strings the callbacks use, so that both paths share them; and the
    # names whose values a client repeats from request to request, whose last value is
    # shared (never a credential's, a signature's or a per-request id's).
    _request_heads.bind_names(_LOWER_NAMES, _REPEATED_VALUES)
    return _request_heads.plain_request


# Final: compiled, a C static rather than a look-up in the module's dict per call.
_native_plain_request: Final = _bound_plain_request()

# The end of an HTTP/1.1 request line, from the space after its target.
_HTTP_1_1_LINE_END: Final = b" HTTP/1.1\r\n"

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


# The server's logger (the writer's too): the reader logs only its own failures.
logger = logging.getLogger("gateway.http_server")

_MALFORMED: Final = _Reject(400, "malformed HTTP request")
_INTERNAL_ERROR: Final = _Reject(500, "internal server error")


def _unsupported_version(version: str) -> _Reject:
    if version.startswith("0."):
        return _Reject(400, "HTTP/0.9 is not supported")
    return _Reject(505, f"HTTP/{version} is not supported: use HTTP/1.1")


class ServerSettings:
    """What a reader reads of its server (:class:`gateway._server.http.Server` derives
    from it): the server's own fields.

    A base class rather than a protocol: compiled, each read is a native field's
    (a request reads the head check and the body limits); through a protocol each
    was a generic attribute look-up. ``body_limits`` is set after the server
    listens, so readers read it here rather than keep a copy.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limits: ServerLimits,
        head_check: HeadCheck | None,
    ) -> None:
        self.loop = loop
        self.limits = limits
        self.head_check = head_check
        # Per-path body limits under limits.max_body_size, and their refusals.
        self.body_limits: BodyLimits | None = None


class ReaderOwner:
    """What a reader asks of the connection that owns it.

    That connection (:class:`gateway._server.http._Connection`) implements it.
    A base class with no state rather than a protocol: compiled, a call through
    it (one a request) is a direct native call, as a protocol's is not.
    """

    __slots__ = ()

    @property
    def busy(self) -> bool:
        """A request is queued or being answered (or read bytes wait to be parsed)."""
        raise NotImplementedError

    def enqueue(self, item: Request | _Reject) -> None:
        """Take a parsed request, or a refusal, to be answered in order."""
        raise NotImplementedError

    def must_pause(self) -> bool:
        """Stop reading: too much is queued, or the peer is not reading its answers."""
        raise NotImplementedError


class _Gone(ReaderOwner):
    """The connection of a released reader: takes nothing, lets nothing more be read."""

    __slots__ = ()

    @property
    def busy(self) -> bool:
        return False

    def enqueue(self, item: Request | _Reject) -> None:
        pass

    def must_pause(self) -> bool:
        return True


_GONE: Final = _Gone()


class RequestReader:
    """The reading half of a client connection (see :class:`gateway._server.http._Connection`).

    A plain class: mypyc compiles this module, and only a class without a
    Python base becomes a native class (fixed attribute slots, direct method
    calls). Its parser's callbacks are its methods.
    """

    __slots__ = (
        "_at_start",
        "_backlog_scheduled",
        "_begun_in",
        "_body_limit",
        "_body_parts",
        "_body_remaining",
        "_body_size",
        "_client",
        "_completed_in_feed",
        "_connection",
        "_discarded",
        "_expect_continue",
        "_feeds",
        "_head_bytes",
        "_header_pairs",
        "_headers",
        "_http_version",
        "_kept_alive",
        "_limits",
        "_line_at_start",
        "_loop",
        "_parser",
        "_piece",
        "_raw_method",
        "_refusal",
        "_server",
        "_transport",
        "_url_parts",
        "backlog",
        "close_after",
        "phase",
        "phase_since",
        "reading_paused",
    )

    def __init__(self, server: ServerSettings, connection: ReaderOwner) -> None:
        self._server = server
        self._limits = server.limits  # fixed for the server's life
        self._loop = server.loop
        # It holds this reader as this reader holds it: a cycle, broken by release at close.
        self._connection = connection
        self._transport: asyncio.Transport | None = None
        # Its callbacks are this object's methods: a cycle too.
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self._client: tuple[str, int] | None = None
        self.phase = _WAIT_FIRST
        self.phase_since = self._loop.time()
        # Raw bytes fed to the parser for the current head, and whether a
        # message ended inside the last piece fed (see data_received).
        self._head_bytes = 0
        self._completed_in_feed = False
        # Pieces fed so far, and the one the current message began in: a head
        # complete in that same piece keeps the begin's clock reading.
        self._feeds = 0
        self._begun_in = -1
        # The piece being fed, and whether the current message's request line starts
        # it: then its version is read from the bytes (see _version).
        self._piece = b""
        self._line_at_start = False
        self._at_start = False
        self._http_version = "1.1"  # the current request's, checked with its head
        # The last request asked to keep the connection: none may follow one that did not.
        self._kept_alive = True
        self._discarded = 0  # bytes dropped by a lingering close
        self.reading_paused = False
        # Bytes read but not yet parsed because the connection said to pause.
        self.backlog = b""
        self._backlog_scheduled = False
        # Set on client EOF, an unsupported upgrade or the server's shutdown:
        # nothing more is read; what is queued is answered, then the connection closes.
        self.close_after = False
        # What a limit a parser callback hit answers (see _stop); None: malformed.
        self._refusal: _Reject | None = None
        self._reset_message()

    def _reset_message(self) -> None:
        self._url_parts: list[bytes] = []
        self._header_pairs: list[tuple[str, str]] = []
        # The same fields by name, a repeated one's values joined with commas: built as
        # they come (one look-up and one store each), not from the pairs afterwards.
        self._headers: dict[str, str] = {}
        self._body_parts: list[bytes] = []
        self._body_size = 0
        self._body_limit = self._limits.max_body_size  # this request's (see body_limits)
        self._body_remaining = -1  # declared body bytes still to come; -1: not known
        self._expect_continue = False
        self._raw_method = b""  # its method as llhttp names it, read with its head

    def connection_made(self, transport: asyncio.Transport, client: tuple[str, int] | None) -> None:
        self._transport = transport
        self._client = client

    def release(self) -> None:
        """The connection is gone: drop its buffers, the parser and the connection.

        The parser and the connection each hold this reader as it holds them:
        only the cycle collector would free them, and what they hold (a refused
        body of megabytes), and it rarely runs in a busy process (or never
        looks, for what ``gc.freeze`` moved out of its sight).
        """
        self._transport = None
        self._parser = None
        self._connection = _GONE
        self.backlog = b""
        self._reset_message()

    # reading ---------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        if self.phase < 0:
            if self.phase == _LINGER:
                self._discard(len(data))
            return
        if self.phase <= _IDLE and self._plain_request(data):
            return
        limit = self._limits.max_header_size
        # Feed in pieces so that no head byte past the limit ever reaches the
        # parser (httptools buffers a header or a URL whole, re-copying it on
        # every fragment). A piece ends where the head may reach the limit, or
        # where a declared body ends; bytes after a message that ends inside a
        # piece are counted from the next piece on, so a head is bounded by
        # twice the limit at worst.
        while True:
            if self.phase == _BODY:
                take = self._body_remaining
            else:
                take = limit - self._head_bytes
                if take <= 0:
                    self.fail(self._head_too_large())
                    return
            if 0 <= take < len(data):
                piece, data = data[:take], data[take:]
            else:
                piece, data = data, b""
            self._completed_in_feed = False
            if not self._feed(piece):
                return
            if self.phase != _BODY and not self._completed_in_feed:
                self._head_bytes += len(piece)
            if not data:
                return
            if self._connection.must_pause():
                # One read can hold many requests: keep the rest unparsed
                # until the queue has room again.
                self.backlog = data
                self.update_reading()
                return

    def _plain_request(self, data: bytes) -> bool:
        """Take ``data`` if it is exactly one plain request; False if not.

        What llhttp's callbacks do with such a request, in one step: the same
        ``Request``, enqueued the same way. Only between messages (the parser
        has none under way, before or after), after a request that kept the
        connection, and with no head check; anything else, or any limit that the
        request comes near, goes to llhttp (``plain_request`` refuses it).
        """
        native = _native_plain_request
        if native is None or not self._kept_alive or self._server.head_check is not None:
            return False
        limits = self._limits
        largest = limits.max_body_size
        body_limits = self._server.body_limits
        if body_limits is not None:
            floor = body_limits.floor
            if floor < largest:
                largest = floor  # a larger body: its path's limit, llhttp's path
        read = native(data, limits.max_header_size, limits.max_headers, largest)
        if read is None:
            return False
        method, target, headers, body = read
        if "?" in target:
            path, _, query = target.partition("?")
        else:
            path, query = target, ""
        # (No field came twice: the pairs are the headers' items, made if asked for.)
        request = Request(method, path, query, headers, None, body, self._client, "1.1", True)
        try:
            self._connection.enqueue(request)
        except Exception:
            logger.exception("handling the complete request failed")
            self.fail(_INTERNAL_ERROR)
            return True
        self.phase = _IDLE
        return True

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; False once parsing has stopped."""
        parser = self._parser
        if parser is None:
            return False  # released: the connection is gone
        self._feeds += 1
        # A message that starts here starts at the piece's first byte unless one is
        # under way (its rest comes first).
        self._line_at_start = self.phase <= _IDLE
        self._piece = data
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request itself was complete and is queued; we never switch
            # protocols, so answer it as plain HTTP/1.1 and close.
            self.phase = _STOPPED
            self.close_after = True
            if self._transport is not None:
                self._transport.pause_reading()
            if not self._connection.busy and self._transport is not None:
                self._transport.close()
            return False
        except httptools.HttpParserError:
            self.fail(self._refusal or _MALFORMED)
            return False
        finally:
            self._piece = b""  # not kept past its feed
        return self.phase >= 0 and self._transport is not None

    def _head_too_large(self) -> _Reject:
        # Mostly request target: the URI is what is too long.
        url_size = sum(len(part) for part in self._url_parts)
        if not self._header_pairs and url_size * 2 > self._head_bytes:
            return _Reject(414, "request target too long")
        return _Reject(431, "request header fields too large")

    def _discard(self, size: int) -> None:
        """Lingering close: drop the rest of a refused body, up to a bound."""
        self._discarded += size
        if self._discarded > self._limits.max_discard_size and self._transport:
            self._transport.close()

    # httptools callbacks ---------------------------------------------------

    def on_message_begin(self) -> None:
        self.phase = _HEADERS
        self.phase_since = self._loop.time()
        self._begun_in = self._feeds
        self._at_start = self._line_at_start
        self._line_at_start = False  # a second message in this piece starts further on

    def on_url(self, url: bytes) -> None:
        # Bounded: data_received never feeds a head past max_header_size.
        self._url_parts.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self._header_pairs) >= self._limits.max_headers:
            raise self._stop(_Reject(431, "request header fields too large"))
        lower = _HEADER_NAMES.get(name)
        if lower is None:
            lower = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self._header_pairs.append((lower, text))
        headers = self._headers
        earlier = headers.get(lower)
        headers[lower] = text if earlier is None else f"{earlier},{text}"

    def on_headers_complete(self) -> None:
        try:
            self._head_complete()
        except _StopParsing:
            raise
        except Exception:
            raise self._callback_failed("request head") from None

    def _callback_failed(self, stage: str) -> _StopParsing:
        """A bug in the server or its head check, not a malformed request: a 500, logged.

        Left to httptools, the exception would come back as a parser error and be
        answered "400 malformed HTTP request", blaming the client and hiding the trace.
        """
        logger.exception("handling the %s failed", stage)
        return self._stop(_INTERNAL_ERROR)

    def _head_complete(self) -> None:
        self.phase = _BODY
        if self._begun_in != self._feeds:
            # (Within the piece the message began in, the body's clock starts from
            # the begin's reading: the same parser call, microseconds before.)
            self.phase_since = self._loop.time()
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
        self._raw_method = parser.get_method()
        version = self._version(parser)
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
        # Not while an earlier request is queued or answered: the 100 would go
        # out amid its answer. (Nothing waits in the backlog while a feed runs.)
        expect_continue = self._expect_continue and not self._connection.busy
        if expect_continue and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _version(self, parser: httptools.HttpRequestParser) -> str:
        """The request's HTTP version: read off its request line where that is whole in
        the piece being fed and starts it (nearly always), else asked of the parser
        (a string built per call, several times the cost)."""
        if self._at_start and self._begun_in == self._feeds and len(self._url_parts) == 1:
            # "METHOD SP target SP HTTP/1.1 CRLF", as llhttp has just parsed it.
            end_of_target = len(self._raw_method) + 1 + len(self._url_parts[0])
            # (A slice and a compare: compiled, cheaper than a generic startswith call.)
            line_end = self._piece[end_of_target : end_of_target + len(_HTTP_1_1_LINE_END)]
            if line_end == _HTTP_1_1_LINE_END:
                return "1.1"
        return str(parser.get_http_version())

    def on_body(self, body: bytes) -> None:
        if self._body_remaining > 0:
            self._body_remaining -= len(body)
        self._body_size += len(body)
        if self._body_size > self._body_limit:
            raise self._stop(self._too_large())
        self._body_parts.append(body)

    def on_message_complete(self) -> None:
        parts = self._body_parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            request = self._build_request(body)
            self._kept_alive = request.keep_alive
            self._connection.enqueue(request)
        except Exception:
            raise self._callback_failed("complete request") from None
        self._reset_message()
        # The idle clock starts when the worker has answered (the connection's
        # _serve_queue): until then the connection is busy and no idle timeout applies.
        self.phase = _IDLE
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

    def _build_request(self, body: bytes) -> Request:
        parser = self._parser
        assert parser is not None  # a callback's helper: only called while it is fed
        url = self._url_parts[0] if len(self._url_parts) == 1 else b"".join(self._url_parts)
        target = url.decode("latin-1")
        if "?" in target:
            path, _, query = target.partition("?")
        else:
            path, query = target, ""  # the common case: no generic call to partition
        raw_method = self._raw_method or parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("ascii")
        return Request(
            method,
            path,
            query,
            self._headers,
            self._header_pairs,
            body,
            self._client,
            self._http_version,
            parser.should_keep_alive(),
        )

    # read flow control -----------------------------------------------------

    def update_reading(self) -> None:
        """Read only while the connection does not say to pause."""
        transport = self._transport
        if transport is None or self.phase < 0:
            return
        if self._connection.must_pause():
            if not self.reading_paused:
                self.reading_paused = True
                transport.pause_reading()
        elif self.backlog:
            if not self._backlog_scheduled:
                self._backlog_scheduled = True
                self._loop.call_soon(self._feed_backlog)
        elif self.reading_paused and not self.close_after:
            # Closing (EOF, or the server's shutdown): nothing more is read.
            self.reading_paused = False
            transport.resume_reading()

    def _feed_backlog(self) -> None:
        self._backlog_scheduled = False
        data, self.backlog = self.backlog, b""
        if data and self._transport is not None and self.phase >= 0:
            self.data_received(data)
        self.update_reading()

    def fail(self, reject: _Reject) -> None:
        """Stop parsing; answer ``reject`` after the requests already queued."""
        self.phase = _STOPPED
        # Nothing more is parsed: a refused or stalled body (megabytes, maybe) goes now,
        # not when the connection does.
        self._body_parts = []
        self.backlog = b""
        if self._transport is not None:
            self._transport.pause_reading()
            self.reading_paused = True
        self._connection.enqueue(reject)

    def stop_reading(self, transport: asyncio.Transport) -> None:
        """Read nothing more, and drop what is read but not parsed; what is queued is answered."""
        self.close_after = True
        self.backlog = b""
        if self.phase >= 0 and not self.reading_paused:
            self.reading_paused = True
            transport.pause_reading()

    def linger(self, transport: asyncio.Transport) -> None:
        """The connection has half-closed: read and drop what the client is still sending."""
        self.phase = _LINGER
        self.phase_since = self._loop.time()
        self.reading_paused = False
        transport.resume_reading()
