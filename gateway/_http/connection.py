# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""One keep-alive HTTP/1.1 connection: an asyncio protocol, httptools parsing the answer.

A connection carries one request at a time. It belongs to the pool of its
origin (``pool.py``): it hands itself back there when a response completes
and the socket may be reused, and tells the pool when it closes. A response
read as it arrives (a response stream) is a :class:`NativeStream`.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections import deque
from collections.abc import AsyncIterator, Callable
from time import monotonic
from types import ModuleType
from typing import Final, NoReturn, Protocol, cast

import httptools

from gateway import errors
from gateway._http.deadlines import Slot
from gateway._http.interfaces import MAX_ERROR_BODY_BYTES
from gateway._http.message import RawResponse, headers_from_raw, split_head

__all__ = [
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "MAX_RESPONSE_BYTES",
    "Connection",
    "ConnectionOwner",
    "NativeStream",
]

# A response larger than this is refused: SageMaker caps payloads at 6 MB
# (25 MB for streams, which never buffer).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# Limits on a response head, as the servers in this project apply to requests.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
_SHORT_HEAD: Final = 4 * MAX_HEADERS
# poll(2), for the check before reuse; Windows has none (the check is skipped there).
_CAN_POLL = hasattr(select, "poll")
# Bytes buffered on a streaming response before the socket stops reading.
_STREAM_HIGH_WATER = 1024 * 1024


# The answer-head scans in C (_heads.c) where it was built. head_end: a few memchr calls
# rather than bytes.find's method call and search set-up, a tenth of the instructions.
# plain_answer: a read that is exactly one plain 200 answer, recognised in one pass
# rather than through llhttp's five callbacks (see Connection._plain_answer).
def _native_heads() -> ModuleType | None:
    try:
        from gateway._http import _heads
    except ImportError:
        return None
    return _heads


# Final: compiled, each a C static rather than a look-up in the module's dict per call.
_HEADS: Final = _native_heads()
_native_head_end: Final[Callable[[bytes, int], int] | None] = (
    None if _HEADS is None else _HEADS.head_end
)
_native_plain_answer: Final[Callable[[bytes], int] | None] = (
    None if _HEADS is None else _HEADS.plain_answer
)
# unread: the poll(2) before a reuse, without select.poll's release of the GIL.
_native_unread: Final[Callable[[int], bool] | None] = (
    None if _HEADS is None else getattr(_HEADS, "unread", None)
)


def head_end(received: bytes, start: int) -> int:
    """Where the head starting at ``start`` ends: its blank line's first byte, or -1."""
    native = _native_head_end
    if native is not None:
        return native(received, start)
    return python_head_end(received, start)


def python_head_end(received: bytes, start: int) -> int:
    """:func:`head_end` in Python: where ``_heads.c`` is not built, and its reference."""
    end = received.find(b"\r\n\r\n", start)
    if end < 0:  # a server ending lines with bare LF
        end = received.find(b"\n\n", start)
    return end


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop httptools mid-buffer."""


class _StopParsing(Exception):
    """Raised from a parser callback once the connection is closed: ignore what follows."""


class ConnectionOwner:
    """What a connection needs of the pool it belongs to; ``pool.OriginPool`` provides it.

    A plain class rather than a Protocol: mypyc calls a method of a native base
    class through its vtable, one of a Protocol by a Python attribute lookup,
    and a connection calls its pool on every request.
    """

    loop: asyncio.AbstractEventLoop

    def options_apply(self, transport: asyncio.Transport) -> None:
        """Set the socket options on a transport just connected."""
        raise NotImplementedError

    def release(self, connection: Connection, reusable: bool) -> None:
        """Take back a connection whose response completed, to reuse it or close it."""
        raise NotImplementedError

    def forget(self, connection: Connection) -> None:
        """``connection`` closed: its slot is free."""
        raise NotImplementedError

    def slot_wanted(self) -> bool:
        """Whether a request is queued for a slot."""
        raise NotImplementedError

    def draining(self, connection: Connection) -> None:
        """``connection`` reads out an abandoned answer, in a slot it gives up on demand."""
        raise NotImplementedError

    def drained(self, connection: Connection) -> None:
        """``connection`` finished reading out its abandoned answer."""
        raise NotImplementedError


class AnswerWaiter(Protocol):
    """What settles with a request's answer: an ``asyncio.Future`` that a caller
    awaits, or a :class:`Settlement` that a callback reads (:meth:`Connection.send_then`)."""

    def done(self) -> bool: ...

    def set_result(self, result: RawResponse, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def result(self) -> RawResponse: ...


class Settlement:
    """A request's answer or failure, for a caller that is called back rather than
    awaiting (the sidecar's relay lane): an ``asyncio.Future``'s settling half.

    Making and freeing an ``asyncio.Future`` costs about 2,500 instructions under
    uvloop (a keyword call into its type, the loop's debug flag read, a finaliser);
    nothing awaits this one, so it needs none of that.
    """

    __slots__ = ("_error", "_result", "_settled")

    def __init__(self) -> None:
        self._settled = False
        self._result: RawResponse | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._settled

    def set_result(self, result: RawResponse, /) -> None:
        if self._settled:
            raise asyncio.InvalidStateError("the answer is settled already")
        self._settled = True
        self._result = result

    def set_exception(self, exception: BaseException, /) -> None:
        if self._settled:
            raise asyncio.InvalidStateError("the answer is settled already")
        self._settled = True
        self._error = exception

    def result(self) -> RawResponse:
        """The answer; raises the failure, or InvalidStateError before either."""
        error = self._error
        if error is not None:
            raise error
        result = self._result
        if result is None:
            raise asyncio.InvalidStateError("the answer is not settled yet")
        return result


class Connection:
    """One keep-alive socket; at most one request in flight.

    An asyncio protocol by its methods, not by subclassing asyncio.Protocol:
    mypyc compiles this module, and only a class without a Python base
    becomes a native class (fixed attribute slots, direct method calls).
    """

    def __init__(self, pool: ConnectionOwner) -> None:
        self._pool = pool
        self._loop = pool.loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: AnswerWaiter | None = None
        # Called with the waiter the moment it is settled (see send_then).
        self._then: Callable[[AnswerWaiter], None] | None = None
        self._stream: NativeStream | None = None
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
        self.last_used = monotonic()
        # Set when the caller gave up (hedge loser, cancellation) after the
        # request was written: the response is read and thrown away so the
        # socket can go back to the pool instead of being closed.
        self._abandoned = False
        self._drain_timer: asyncio.TimerHandle | None = None
        # The OS socket, polled for bytes or an EOF the loop has not delivered
        # yet (has_unread); -1 without one (scripted tests). HTTP/1.1 cannot
        # tell whose answer a response is: an answer that shows up on an idle
        # socket (an extra or a late one) would be read as the next request's.
        # The loop closes such a socket when it delivers the bytes; the pool
        # polls (one non-blocking poll(2), as httpcore does) right before
        # reuse for those that arrived since the loop last looked.
        self._fd = -1
        self._unread_poller: select.poll | None = None  # where _heads.c is not built

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self._pool.options_apply(self._transport)
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            if _native_unread is None and _CAN_POLL:
                poller = select.poll()
                poller.register(self._fd, select.POLLIN)
                self._unread_poller = poller

    def has_unread(self) -> bool:
        """Whether bytes nobody asked for, or the server's close, wait on the idle socket
        unread by the loop: one poll(2) now, which never blocks."""
        fd = self._fd
        if fd < 0:
            return False
        native = _native_unread
        if native is not None:
            return native(fd)
        poller = self._unread_poller
        return poller is not None and bool(poller.poll(0))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None and self._stream is None and not self._abandoned:
            # Bytes nobody asked for (an idle socket, or a response after the
            # one just read): the connection's framing cannot be trusted.
            self.close()
            return
        self._got_bytes = True
        if not self._headers_done:
            if not self._head_chunks and self._waiter is not None and self._plain_answer(data):
                return
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

    def _plain_answer(self, data: bytes) -> bool:
        """Answer the waiter from ``data`` if it is exactly one plain answer; False if not.

        What llhttp's callbacks do with such an answer (on_headers_complete, on_body,
        on_message_complete, the release after the feed), in one step: the parser is
        between messages before and after, as it never saw the bytes. Only a response
        whose first byte starts ``data`` gets here (no head is buffered), and only
        the waiter's (a stream, or an abandoned answer, goes to the parser).
        """
        native = _native_plain_answer
        if native is None:
            return False
        end = native(data)
        if end < 0:
            return False
        self.requests_served += 1
        self._head = head = data[:end]
        response = RawResponse(200, None, data[end + 4 :], head)
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)
            self._settled(waiter)
        self._pool.release(self, not self.closed)
        return True

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
        end = head_end(received, start)
        head = self._head = received[start:end]
        size = end - start
        # Only a head this long can hold more than MAX_HEADERS field lines: each is
        # 4 bytes at the least (CRLF, then "a:", the shortest llhttp accepts).
        if size > MAX_HEAD_BYTES or (size > _SHORT_HEAD and head.count(b"\n") > MAX_HEADERS):
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
            self._settled(waiter)
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
            self._pool.drained(self)
        elif waiter is not None and not waiter.done():
            waiter.set_result(response)
            self._settled(waiter)
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
        waiter = self._loop.create_future()
        self._write_request(waiter, data, reused)
        return waiter

    def _write_request(self, waiter: AnswerWaiter, data: bytes, reused: bool) -> None:
        """Write a request on an open, free socket: ``waiter`` settles with its answer."""
        assert self._transport is not None
        self._waiter = waiter
        self._start_message(reused)
        self._transport.write(data)

    def send_streaming(self, data: bytes, reused: bool) -> NativeStream | None:
        if self._busy():
            return None
        assert self._transport is not None
        stream = self._stream = NativeStream(self)
        self._start_message(reused)
        self._transport.write(data)
        return stream

    def send_then(self, data: bytes, then: Callable[[AnswerWaiter], None]) -> Settlement | None:
        """:meth:`send` on a reused socket, and ``then(waiter)`` as soon as the answer (or
        the failure) settles the waiter: from this protocol's own callback, not one
        the loop runs later. ``then`` must not raise; nothing awaits the waiter, a
        :class:`Settlement`. None (nothing written) if the socket closed meanwhile."""
        if self._busy():
            return None  # never overwrite another request's waiter
        waiter = Settlement()
        self._then = then
        self._write_request(waiter, data, True)
        return waiter

    def abandon(self, waiter: AnswerWaiter, drain_timeout: float) -> None:
        """The caller stopped waiting; read the response out, then reuse the socket.

        The socket drains for at most ``drain_timeout`` and only while the
        pool can spare its slot: the pool closes it the moment a request
        needs the slot (see ``OriginPool.draining``).

        ``waiter`` names the request giving up. A cancellation can be
        delivered after its response already completed and the socket went
        back to the pool and on to another request: then this is a no-op,
        and must be, or it would orphan that other request's future.
        """
        if self.closed or self._waiter is not waiter:
            return
        self._waiter = None
        self._then = None
        if drain_timeout <= 0 or self._pool.slot_wanted():
            # Someone waits for a slot (or the answer could only come too late):
            # never make them wait on an answer nobody will read.
            self.close()
            return
        self._abandoned = True
        self._drain_timer = self._loop.call_later(drain_timeout, self.close)
        self._pool.draining(self)

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
        elif isinstance(owner, NativeStream) and owner.open:
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
            self._settled(waiter)
        if stream is not None:
            stream.fail(error)
        self.close()

    def _settled(self, waiter: AnswerWaiter) -> None:
        then = self._then
        if then is not None:
            self._then = None
            then(waiter)

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


class NativeStream:
    """A response whose body is consumed as it arrives (response streams)."""

    def __init__(self, connection: Connection) -> None:
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
        self.deadline_slot: Slot | None = None

    @property
    def open(self) -> bool:
        """Neither finished nor failed."""
        return not self._done and self._error is None

    def stop_timer(self) -> None:
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
        self.stop_timer()
        self._wake()

    def fail(self, error: errors.GatewayError) -> None:
        self.stop_timer()
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

    def __aiter__(self) -> NativeStream:
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
        self.stop_timer()
        if not self._done and self._error is None:
            # An unfinished stream leaves the socket mid-response: close it.
            self._connection.close()
