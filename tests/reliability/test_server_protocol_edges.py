"""The shared server kit (sidecar and emulator) at the protocol's edges, over real sockets."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import re
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from gateway._server.http import (
    Request,
    Response,
    Server,
    ServerLimits,
    StreamingResponse,
    _Connection,
    start_server,
)

LIMITS = ServerLimits(
    max_header_size=2048,
    max_body_size=1000,
    header_timeout=0.3,
    body_timeout=0.3,
    keepalive_timeout=5.0,
    write_timeout=0.5,
)


async def _handler(request: Request) -> Response | StreamingResponse:
    if request.path == "/sleep":
        await asyncio.sleep(float(request.query.partition("=")[2]))
        return Response(200, [("x-done", "slept")], b"slept")
    if request.path == "/no-content":
        return Response(204, [("x-kind", "none")])
    if request.path == "/header":
        # The value to send back comes from the caller: CR, LF and NUL included.
        value = bytes.fromhex(request.query).decode("latin-1")
        return Response(200, [("x-echo", value)], b"body")
    if request.path == "/stream-header":
        value = bytes.fromhex(request.query).decode("latin-1")
        return StreamingResponse(_parts(), headers=[("x-echo", value)])
    if request.path == "/big":
        return Response(200, [], b"b" * 4_000_000)
    if request.path == "/copied":  # a relay's answer: its field lines copied as received
        return Response(200, [], b"copied", b"x-copied: 1\r\nX-Other: two\r\n")
    return Response(200, [], request.body)


async def _parts() -> AsyncIterator[bytes]:
    yield b"part"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = await start_server(_handler, "127.0.0.1", 0, limits=LIMITS)
    yield server
    await server.close(grace=1.0)


async def _exchange(server: Server, data: bytes, timeout: float = 5) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_partial_pipelined_request_does_not_drop_the_answer_in_flight(
    server: Server,
) -> None:
    """A stalled second request times out (408) only after the first is answered."""
    raw = await _exchange(
        server,
        b"GET /sleep?s=0.8 HTTP/1.1\r\nhost: x\r\n\r\n"  # outlives the 0.3 s header timeout
        b"GET /second HTTP/1.1\r\nhost: x\r\nx-part",  # and is never finished
    )
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\n\r\nslept" in raw
    assert raw.index(b"HTTP/1.1 408 ") > raw.index(b"slept")


async def test_no_content_answer_has_no_content_length(server: Server) -> None:
    raw = await _exchange(
        server, b"GET /no-content HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    head = raw.partition(b"\r\n\r\n")[0].lower()
    assert raw.startswith(b"HTTP/1.1 204 ")
    assert b"content-length" not in head and b"transfer-encoding" not in head


@pytest.mark.parametrize("path", ["/header", "/stream-header"])
@pytest.mark.parametrize("bad", ["a\rb", "a\nb", "a\r\nx-injected: 1", "a\x00b"])
async def test_cr_lf_or_nul_in_a_response_header_is_never_written(
    server: Server, path: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    query = bad.encode("latin-1").hex()
    with caplog.at_level(logging.ERROR, logger="gateway.http_server"):
        raw = await _exchange(
            server, f"GET {path}?{query} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode()
        )
    assert raw.startswith(b"HTTP/1.1 500 ")
    assert b"x-echo" not in raw and b"x-injected" not in raw
    # A clean error for the operator: one line, no traceback.
    records = [record for record in caplog.records if "CR, LF or NUL" in record.getMessage()]
    assert records and all(record.exc_info is None for record in records)


async def test_declared_oversized_body_is_answered_at_once(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 ")
        # Lingering close: the client may go on sending without a reset...
        writer.write(b"z" * 100_000)
        await writer.drain()
        # ...and the server half-closed after its answer.
        rest = await asyncio.wait_for(reader.read(), 5)
        assert b"exceeded 1000 bytes" in rest
    finally:
        writer.close()
        await writer.wait_closed()


async def test_head_limit_counts_raw_bytes_across_pipelined_requests(server: Server) -> None:
    """Small requests pipelined past the head limit are all served (no false 431)."""
    request = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc"
    count = 3 * LIMITS.max_header_size // len(request)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(request * count + b"GET /last HTTP/1.1\r\nconnection: close\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    assert raw.count(b"HTTP/1.1 200 OK") == count + 1
    assert b" 431 " not in raw


async def test_a_client_that_never_reads_is_cut_off(
    server: Server,
) -> None:
    """The write-progress timeout frees a connection whose peer reads nothing."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=1024)
    transport = writer.transport
    transport.pause_reading()  # the client reads nothing
    request = b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n"
    try:
        for _ in range(200):
            writer.write(request)
        await asyncio.sleep(0.2)
        assert server.connection_count == 1
        for _ in range(100):
            if not server._connections:
                break
            await asyncio.sleep(0.05)
        assert server.connection_count == 0
    finally:
        writer.close()


async def test_queued_bodies_are_bounded_per_connection() -> None:
    limits = ServerLimits(max_body_size=100_000, max_queued_bytes=150_000)
    gate = asyncio.Event()

    async def held(request: Request) -> Response:
        await gate.wait()
        return Response(200, [], b"ok")

    server = await start_server(held, "127.0.0.1", 0, limits=limits)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = b"q" * 90_000
        request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
        writer.write(request * 12)
        await asyncio.sleep(0.3)
        (connection,) = server._connections
        # One in the handler, at most two waiting (150 kB), the rest unread.
        assert connection._queued_bytes <= limits.max_queued_bytes + len(body)
        assert len(connection._queue) <= 2
        gate.set()
        answers = b""
        while answers.count(b"HTTP/1.1 200") < 12:
            answers += await asyncio.wait_for(reader.read(65536), 5)
        writer.close()
        await writer.wait_closed()
    finally:
        await server.close(grace=1.0)


async def test_many_pipelined_requests_then_eof_are_all_answered(server: Server) -> None:
    """More requests in one read than the queue takes, then a half-close: none lost."""
    count = 3 * LIMITS.max_pipelined
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /n HTTP/1.1\r\nhost: x\r\n\r\n" * count)
        writer.write_eof()
        raw = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    assert raw.count(b"HTTP/1.1 200 OK") == count


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> bytes:
    writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await asyncio.wait_for(reader.readexactly(length), 5)


async def test_one_worker_task_serves_a_connection_and_one_per_connection() -> None:
    """A keep-alive connection's requests share one task (no task per request),
    and connections do not share theirs."""
    tasks: list[asyncio.Task[object] | None] = []

    async def handler(request: Request) -> Response:
        tasks.append(asyncio.current_task())
        return Response(200, [], b"ok")

    server = await start_server(handler, "127.0.0.1", 0, limits=LIMITS)
    try:
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            for _ in range(4):
                assert (await _ask(reader, writer, "/")).endswith(b"\r\n\r\nok")
            writer.close()
            await writer.wait_closed()
    finally:
        await server.close(grace=1.0)
    assert len(tasks) == 8
    assert len(set(tasks[:4])) == 1 and len(set(tasks[4:])) == 1
    assert tasks[0] is not tasks[4]


async def test_a_served_connection_left_idle_is_closed_by_the_keepalive_timeout() -> None:
    """The worker waiting for the next request does not count as busy."""
    limits = ServerLimits(keepalive_timeout=0.2, header_timeout=5.0)
    server = await start_server(_handler, "127.0.0.1", 0, limits=limits)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await _ask(reader, writer, "/")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        writer.close()
        await writer.wait_closed()
        assert server.connection_count == 0
    finally:
        await server.close(grace=1.0)


async def test_expect_continue_after_an_answered_request_gets_100_at_once(server: Server) -> None:
    """Idle again after a first answer: a second request's 100-continue is not held back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        await _ask(reader, writer, "/")
        writer.write(
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"body")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK") and await reader.readexactly(4) == b"body"
    finally:
        writer.close()
        await writer.wait_closed()


# -- HTTP versions this server does not speak -----------------------------------


async def test_an_http_0_9_request_line_is_refused(server: Server) -> None:
    raw = await _exchange(server, b"GET /\r\n\r\n")
    # Before: answered as HTTP/1.1 200 with the handler's response.
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert raw.endswith(b"HTTP/0.9 is not supported")


async def test_http_2_0_is_refused_with_505(server: Server) -> None:
    raw = await _exchange(server, b"GET / HTTP/2.0\r\nhost: x\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 505 HTTP Version Not Supported\r\n")
    assert b"connection: close" in raw


async def test_http_1_0_is_still_answered(server: Server) -> None:
    raw = await _exchange(server, b"GET / HTTP/1.0\r\nhost: x\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


async def test_each_pipelined_request_has_its_own_version(server: Server) -> None:
    # The first starts the bytes read; the second, further on, is still read for itself.
    raw = await _exchange(
        server, b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/2.0\r\nhost: x\r\n\r\n"
    )
    first, _, second = raw.partition(b"HTTP/1.1 505 ")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and second.startswith(
        b"HTTP Version Not Supported"
    )


@pytest.mark.parametrize(
    ("pieces", "answer"),
    [
        ((b"GET / HTTP/2", b".0\r\nhost: x\r\n\r\n"), b"HTTP/1.1 505 "),
        ((b"GET / HTTP/1.0\r", b"\nhost: x\r\n\r\n"), b"HTTP/1.1 200 OK\r\n"),
        ((b"GET /", b"long/target HTTP/1.0\r\nhost: x\r\n\r\n"), b"HTTP/1.1 200 OK\r\n"),
        ((b"\r\nGET / HTTP/2.0\r\nhost: x\r\n\r\n",), b"HTTP/1.1 505 "),
    ],
    ids=["line-split-in-its-version", "line-split-before-its-lf", "target-split", "leading-crlf"],
)
async def test_a_request_lines_version_is_read_however_its_bytes_arrive(
    server: Server, pieces: tuple[bytes, ...], answer: bytes
) -> None:
    """HTTP/1.0 closes after its answer and 2.0 is refused, whichever read holds the line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)  # a read of its own
        raw = await asyncio.wait_for(reader.read(), 5)  # answered, then closed
    finally:
        writer.close()
        await writer.wait_closed()
    assert raw.startswith(answer)


async def test_an_answer_of_copied_lines_is_written_as_any_other(server: Server) -> None:
    # Kept alive, it is joined from bytes; closing, it goes the general way: the same head.
    kept = b"GET /copied HTTP/1.1\r\nhost: x\r\n\r\n"
    last = b"GET /copied HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    raw = await _exchange(server, kept + last)
    *heads, rest = raw.split(b"\r\n\r\ncopied")
    assert len(heads) == 2 and rest == b""  # two answers, each its body, then the close
    assert heads[0].startswith(b"HTTP/1.1 200 OK\r\nx-copied: 1\r\nX-Other: two\r\ndate: ")
    assert heads[0].endswith(b"\r\ncontent-length: 6")
    without_date = [re.sub(rb"date: [^\r]*\r\n", b"", head) for head in heads]
    assert without_date[1] == without_date[0] + b"\r\nconnection: close"


# -- a head check refuses before the body is read --------------------------------


async def test_a_head_check_refuses_before_the_body_and_lets_others_through() -> None:
    seen: list[str] = []

    def check(request: Request) -> Response | None:
        seen.append(f"{request.path} {len(request.body)}")
        if request.headers.get("x-key") != "ok":
            return Response(401, [("x-why", "no key")], b"who are you")
        return None

    server = await start_server(_handler, "127.0.0.1", 0, limits=LIMITS, head_check=check)
    try:
        # 900 bytes announced, never sent: the refusal comes from the head alone.
        refused = await _exchange(
            server, b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 900\r\n\r\n"
        )
        allowed = await _exchange(
            server,
            b"POST /b HTTP/1.1\r\nhost: x\r\nx-key: ok\r\ncontent-length: 4\r\n"
            b"connection: close\r\n\r\nbody",
        )
    finally:
        await server.close(grace=1.0)
    assert refused.startswith(b"HTTP/1.1 401 Unauthorized\r\nx-why: no key\r\n")
    assert b"content-length: 11\r\nconnection: close\r\n\r\nwho are you" in refused
    assert allowed.startswith(b"HTTP/1.1 200 OK\r\n") and allowed.endswith(b"body")
    assert seen == ["/a 0", "/b 0"]  # the check sees heads only


async def test_a_failing_head_check_is_a_logged_500_not_the_clients_400(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in the check (or the server) is the server's failure: answered 500 and
    logged with its trace, where httptools alone would report a malformed request."""

    def check(request: Request) -> Response | None:
        if request.path == "/bug":
            raise LookupError("the check's own bug")
        return None

    server = await start_server(_handler, "127.0.0.1", 0, limits=LIMITS, head_check=check)
    try:
        with caplog.at_level(logging.ERROR, logger="gateway.http_server"):
            failed = await _exchange(
                server, b"POST /bug HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nbody"
            )
        fine = await _exchange(
            server,
            b"POST /ok HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbody",
        )
    finally:
        await server.close(grace=1.0)
    assert failed.startswith(b"HTTP/1.1 500 ")
    assert fine.startswith(b"HTTP/1.1 200 OK\r\n") and fine.endswith(b"body")
    [record] = [r for r in caplog.records if r.name == "gateway.http_server"]
    assert record.getMessage() == "handling the request head failed"
    assert record.exc_info is not None and isinstance(record.exc_info[1], LookupError)


# -- listener close with requests pipelined behind the one in flight ------------


async def test_requests_pipelined_behind_one_in_flight_are_answered_at_close() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(request: Request) -> Response:
        if request.path == "/hold":
            started.set()
            await release.wait()
        return Response(200, [("x-path", request.path)], request.path.encode())

    server = await start_server(handler, "127.0.0.1", 0, limits=LIMITS)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(
            b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /second HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /third HTTP/1.1\r\nhost: x\r\n\r\n"
        )
        await asyncio.wait_for(started.wait(), 5)
        closing = asyncio.create_task(server.close(grace=5.0))
        await asyncio.sleep(0)  # close() has begun: the listener is shut
        release.set()
        raw = await asyncio.wait_for(reader.read(), 5)
        await closing
    finally:
        writer.close()
    answers = raw.split(b"HTTP/1.1 ")[1:]
    # Before: only /hold was answered (with "close"); /second and /third were dropped.
    assert [answer.split(b"\r\n", 1)[0] for answer in answers] == [b"200 OK"] * 3
    assert [answer.rsplit(b"\r\n\r\n", 1)[1] for answer in answers] == [
        b"/hold",
        b"/second",
        b"/third",
    ]
    assert [b"connection: close" in answer for answer in answers] == [False, False, True]


async def test_a_request_arriving_after_close_began_is_not_read() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(request: Request) -> Response:
        started.set()
        await release.wait()
        return Response(200, [], request.path.encode())

    server = await start_server(handler, "127.0.0.1", 0, limits=LIMITS)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /first HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.wait_for(started.wait(), 5)
        closing = asyncio.create_task(server.close(grace=5.0))
        await asyncio.sleep(0)
        writer.write(b"GET /late HTTP/1.1\r\nhost: x\r\n\r\n")
        await writer.drain()
        release.set()
        raw = await asyncio.wait_for(reader.read(), 5)
        await closing
    finally:
        writer.close()
    # The one in flight is answered and says "close"; the late one is left unread.
    assert raw.count(b"HTTP/1.1 ") == 1
    assert b"connection: close" in raw and raw.endswith(b"/first")


# -- what a closed connection keeps ------------------------------------------------


async def test_refused_and_stalled_bodies_are_freed_at_close_without_the_cycle_collector() -> None:
    """The issue's shape, smaller: connections that stall mid-body (408), send a body past
    the limit (413) or vanish mid-body leave nothing behind once closed, with the cycle
    collector off (a busy or gc-frozen process rarely runs it). Before, the parser and
    the connection held each other, and with them every body part read."""
    limits = ServerLimits(max_body_size=4_000_000, body_timeout=0.3, header_timeout=2.0)
    server = await start_server(_handler, "127.0.0.1", 0, limits=limits)
    part = b"z" * 1_000_000
    stalled = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 3900000\r\n\r\n" + part * 3
    chunked = (
        b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        + (b"%x\r\n%b\r\n" % (len(part), part)) * 5
    )
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    before = _live_connections()
    try:
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]
        for round_ in range(3):
            clients = []
            for data in (stalled, chunked, stalled):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(data)
                clients.append((reader, writer))
            await asyncio.sleep(0.1)
            assert len(_live_connections()) == len(before) + 3
            answers = [await asyncio.wait_for(r.read(), 5) for r, _ in clients[:2]]
            assert answers[0].startswith(b"HTTP/1.1 408 ") and answers[1].startswith(
                b"HTTP/1.1 413"
            )
            for _, writer in clients:  # the third goes away mid-body
                writer.transport.abort()
            for _ in range(100):
                if not server._connections:
                    break
                await asyncio.sleep(0.02)
            assert server.connection_count == 0, round_
        await asyncio.sleep(0.05)
        held = tracemalloc.get_traced_memory()[0] - baseline
        tracemalloc.stop()
        assert _live_connections() == before
        assert held < 2_000_000  # 9 connections read 3-4 MB each
    finally:
        if was_enabled:
            gc.enable()
        await server.close(grace=1.0)


def _live_connections() -> list[object]:
    return [o for o in gc.get_objects() if isinstance(o, _Connection)]


class _GoneTransport:
    """A transport whose peer has gone: shutdown(SHUT_WR) fails with ENOTCONN."""

    def __init__(self) -> None:
        self.closed = False
        self.written = b""

    def can_write_eof(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        self.written += data

    def write_eof(self) -> None:
        raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.mark.parametrize("closing", [False, True], ids=["refusal", "last-answer-at-close"])
async def test_a_client_gone_before_the_half_close_is_an_ordinary_close(
    caplog: pytest.LogCaptureFixture, closing: bool
) -> None:
    """write_eof() on a socket whose peer has gone raises ENOTCONN: the connection
    closes quietly (before: "connection worker failed" and a traceback)."""

    async def handler(request: Request) -> Response:
        return Response(200, [], b"ok")

    server = await start_server(handler, "127.0.0.1", 0, limits=LIMITS)
    transport = _GoneTransport()
    try:
        connection = server._new_connection()
        connection.connection_made(transport)  # type: ignore[arg-type]
        caplog.set_level(logging.DEBUG, logger="gateway.http_server")
        if closing:
            server.closing = True  # the last answer says "close" and half-closes
            connection.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        else:
            connection.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n")
        for _ in range(50):
            if transport.closed:
                break
            await asyncio.sleep(0.01)
        assert transport.closed
        assert transport.written.startswith(b"HTTP/1.1 200 " if closing else b"HTTP/1.1 413 ")
        connection.connection_lost(None)
    finally:
        server.closing = False
        await server.close(grace=1.0)
    assert [r for r in caplog.records if r.name == "gateway.http_server"] == []


async def test_a_limit_is_answered_as_such_while_the_thread_handles_an_exception() -> None:
    """httptools returns a callback's exception as its error's ``__context__``, which
    Python replaces when that error is raised while another exception is handled: the
    413 read back from there became "400 malformed HTTP request"."""

    async def handler(request: Request) -> Response:
        return Response(200, [], b"ok")

    server = await start_server(handler, "127.0.0.1", 0, limits=LIMITS)
    transport = _GoneTransport()
    try:
        connection = server._new_connection()
        connection.connection_made(transport)  # type: ignore[arg-type]
        try:
            raise KeyError("handled while the bytes arrive")
        except KeyError:
            connection.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n")
        for _ in range(50):
            if transport.closed:
                break
            await asyncio.sleep(0.01)
        assert transport.written.startswith(b"HTTP/1.1 413 ")
        connection.connection_lost(None)
    finally:
        await server.close(grace=1.0)
