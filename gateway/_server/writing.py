# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py): keep it compilable
# (no async generators, no monkeypatching, re-check attributes narrowed before an await).
"""Writing a connection: response encoding and write flow control.

The connection (:mod:`gateway._server.http`) owns one :class:`ResponseWriter`
and decides what is answered and when the connection closes; the writer turns
answers into bytes (a head built as one ``str`` and encoded once), streams
chunked bodies, and waits while the peer is not reading its answers. It knows
nothing of how requests are read (:mod:`gateway._server.parsing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable, Sequence
from email.utils import formatdate
from http import HTTPStatus
from time import time as wall_time
from typing import Final

from gateway._server.messages import (
    Request,
    Response,
    StreamingResponse,
    UnsafeHeader,
    _Reject,
)

logger = logging.getLogger("gateway.http_server")


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


# A relay's answer in one C copy (_request_heads.c) where it was built (see _copied_answer).
def _bound_copied_answer() -> Callable[[bytes, bytes, bytes, bytes, bytes], bytes] | None:
    try:
        from gateway._server import _request_heads
    except ImportError:
        return None
    return _request_heads.copied_answer


# Final: compiled, a C static rather than a look-up in the module's dict per call.
_native_copied_answer: Final = _bound_copied_answer()

# The status lines of answers written from bytes (see _copied_answer), by status.
_STATUS_LINE_BYTES: Final[dict[int, bytes]] = {}


class _DateHeader:
    """The ``Date`` header line, formatted once per second (as text and as bytes)."""

    __slots__ = ("_line", "_line_bytes", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = ""
        self._line_bytes = b""

    def line(self) -> str:
        second = int(wall_time())
        if second != self._second:
            self._second = second
            self._line = f"date: {formatdate(second, usegmt=True)}\r\n"
            self._line_bytes = self._line.encode("latin-1")
        return self._line

    def line_bytes(self) -> bytes:
        second = int(wall_time())
        if second != self._second:
            self.line()
        return self._line_bytes


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


def _copied_answer(status: int, head_lines: bytes, server_line: bytes, body: bytes) -> bytes:
    """A kept-alive answer whose only fields are copied lines (a relay's), and its body:
    one join of bytes, no text formatted or encoded (in C where it was built)."""
    status_line = _STATUS_LINE_BYTES.get(status)
    if status_line is None:
        status_line = _STATUS_LINE_BYTES[status] = _status_line(status).encode("latin-1")
    native = _native_copied_answer
    if native is not None:
        return native(status_line, head_lines, _date.line_bytes(), server_line, body)
    return python_copied_answer(status_line, head_lines, _date.line_bytes(), server_line, body)


def python_copied_answer(
    status_line: bytes, head_lines: bytes, date_line: bytes, server_line: bytes, body: bytes
) -> bytes:
    """``_request_heads.copied_answer`` in Python: where it is not built, and its reference."""
    length = b"content-length: %d\r\n\r\n" % len(body)
    return b"".join((status_line, head_lines, date_line, server_line, length, body))


def simple_response(status: int, message: str, close: bool) -> bytes:
    """A plain-text answer of the server's own (a refusal, an internal error)."""
    body = message.encode()
    framing = f"content-type: text/plain\r\ncontent-length: {len(body)}\r\n"
    framing += "connection: close\r\n\r\n" if close else "\r\n"
    return _encode_head(status, (), framing, "") + body


class ResponseWriter:
    """The writing half of a client connection (see :class:`gateway._server.http._Connection`).

    A plain class: mypyc compiles this module, and only a class without a
    Python base becomes a native class (fixed attribute slots, direct method
    calls).
    """

    __slots__ = (
        "_drain_waiter",
        "_loop",
        "_server_bytes",
        "_server_line",
        "_transport",
        "paused",
        "paused_since",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, server_line: str) -> None:
        self._loop = loop
        self._server_line = server_line
        self._server_bytes = server_line.encode("latin-1")
        self._transport: asyncio.Transport | None = None
        # Set while the peer reads none of its answers (the transport's buffer is full).
        self.paused = False
        self.paused_since = 0.0
        self._drain_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def connection_lost(self) -> None:
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))
            waiter.exception()  # mark retrieved: nobody may await it
        self._transport = None

    # write flow control ----------------------------------------------------

    def pause_writing(self) -> None:
        """The peer is not reading its answers: start the write-progress clock."""
        self.paused = True
        self.paused_since = self._loop.time()

    def wake_drain(self) -> None:
        """Writing may go on (``paused`` is cleared): wake the answer waiting in drain."""
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        if self._transport is None:
            raise ConnectionResetError("connection lost")
        waiter = self._drain_waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None

    # answers ---------------------------------------------------------------

    def encode(self, request: Request, response: Response, keep_alive: bool) -> bytes:
        body = response.body
        status = response.status
        head_lines = response.head_lines
        if (
            head_lines
            and keep_alive
            and not response.headers
            and 200 <= status < 300
            and status != 204
            and request.method != "HEAD"
        ):
            # A relay's answer, kept alive with a body: the common case, written from bytes.
            return _copied_answer(status, head_lines, self._server_bytes, body)
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
            self._server_line,
            response.head_lines,
        )
        if request.method == "HEAD" or bodiless:
            return head
        return head + body

    def encode_refusal(self, reject: _Reject) -> bytes:
        """The answer to a refused request, the last on its connection."""
        response = reject.response
        if response is None:
            return simple_response(reject.status, reject.message, True)
        # A head check's own refusal.
        framing = f"content-length: {len(response.body)}\r\nconnection: close\r\n\r\n"
        try:
            head = _encode_head(
                response.status,
                response.headers,
                framing,
                self._server_line,
                response.head_lines,
            )
        except (UnsafeHeader, ValueError):
            logger.error("refused a head check's response with a bad status or header")
            return simple_response(500, "internal server error", True)
        return head + response.body

    async def send_stream(
        self, request: Request, response: StreamingResponse, keep_alive: bool
    ) -> None:
        chunked = request.http_version != "1.0"
        keep_alive = keep_alive and chunked  # HTTP/1.0: the body ends at close
        framing = "transfer-encoding: chunked\r\n" if chunked else ""
        if not keep_alive:
            framing += "connection: close\r\n"
        head = _encode_head(response.status, response.headers, framing + "\r\n", self._server_line)
        self._write(head)
        try:
            async for chunk in response.chunks:
                if chunk:
                    self._write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                    if self.paused:
                        await self.drain()
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
