# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py): keep it compilable
# (no async generators, no monkeypatching, re-check attributes narrowed before an await).
"""Answering a connection: response encoding and write flow control.

A response head is built as one ``str`` and encoded once. Handler exceptions
become a 500; raising :class:`AbortConnection` resets the connection (RST).
While the peer is not reading its answers, writing waits (``_drain``) and
reading pauses (see :mod:`gateway._server.parsing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Sequence
from email.utils import formatdate
from http import HTTPStatus
from typing import Final

from gateway._server.messages import (
    AbortConnection,
    Request,
    Response,
    StreamingResponse,
    UnsafeHeader,
    _Reject,
)
from gateway._server.parsing import _LINGER, _RequestReading

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


class _ResponseWriting(_RequestReading):
    """The writing half of a client connection (see :class:`gateway._server.http._Connection`)."""

    __slots__ = ()

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

    def _reject(self, transport: asyncio.Transport, reject: _Reject) -> None:
        on_reject = self._server.on_reject
        if on_reject is not None:
            on_reject(reject.status, reject.message)
        response = reject.response
        if response is None:
            transport.write(_simple_response(reject.status, reject.message, True))
        else:
            transport.write(self._encode_refusal(response))
        # Nothing to linger for when the client has already stopped sending.
        if not reject.linger or self._close_after:
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
        self._phase = _LINGER
        self._phase_since = self._loop.time()
        self._reading_paused = False
        transport.resume_reading()

    def _encode_refusal(self, response: Response) -> bytes:
        """A head check's refusal, the last answer on the connection."""
        framing = f"content-length: {len(response.body)}\r\nconnection: close\r\n\r\n"
        try:
            head = _encode_head(
                response.status,
                response.headers,
                framing,
                self._server.server_line,
                response.head_lines,
            )
        except (UnsafeHeader, ValueError):
            logger.error("refused a head check's response with a bad status or header")
            return _simple_response(500, "internal server error", True)
        return head + response.body

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
        # Closing (the server, or this connection after EOF): the last queued
        # answer says "close"; those before it keep the connection for the rest.
        keep_alive = request.keep_alive and not (
            (self._server.closing or self._server.draining or self._close_after) and not self._queue
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
            if self._server.closing:
                # The client may be sending a request right now: it gets to
                # read this answer and its "close" rather than a reset.
                self._close_lingering(transport)
            else:
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
