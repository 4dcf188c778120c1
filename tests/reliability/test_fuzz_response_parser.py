"""The native transport's response parsing under arbitrary server bytes.

Property: whatever a server sends, in whatever pieces, the call ends with a
``RawResponse`` or a specific ``GatewayError`` (a transport error), never
another exception out of a protocol callback, never a hang, and never
unbounded buffering.

Two drivers: the ``Connection`` protocol's callbacks driven directly on a
real event loop (fast, so hypothesis can try many inputs), and a tiny
scripted TCP server on loopback with the whole ``NativeTransport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import errors
from gateway._http.connection import MAX_RESPONSE_BYTES, Connection
from gateway._http.interfaces import TransportStats
from gateway._http.message import Origin, RawResponse
from gateway._http.native import NativeTransport
from gateway._http.options import PoolConfig
from gateway._http.pool import OriginPool
from gateway._http.request import PreparedRequest


class FakeSocketTransport:
    """Just enough of asyncio.Transport for a Connection."""

    def __init__(self) -> None:
        self.closed = False
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _drive(chunks: list[bytes], lose: bool = True) -> tuple[Any, FakeSocketTransport]:
    """Feed ``chunks`` as the response to one request; the waiter's outcome."""
    pool = OriginPool(
        Origin.from_url("http://127.0.0.1:9"), PoolConfig(prewarm=0), None, TransportStats()
    )
    connection = Connection(pool)
    transport = FakeSocketTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    pool._open.add(connection)
    waiter = connection.send(b"POST / HTTP/1.1\r\n\r\n", reused=False)
    for chunk in chunks:
        connection.data_received(chunk)  # must never raise
        if transport.closed and not connection.closed:  # pragma: no cover - defensive
            break
    if lose:
        connection.connection_lost(None)
    await asyncio.sleep(0)
    return waiter, transport


def _outcome(waiter: asyncio.Future[RawResponse]) -> RawResponse | BaseException:
    assert waiter.done(), "the call is left waiting after the connection closed"
    error = waiter.exception()
    if error is not None:
        return error
    return waiter.result()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


# -- arbitrary bytes ------------------------------------------------------------

_PREFIXES = st.sampled_from(
    [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", b"HTTP/1.0 "]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=_PREFIXES, data=st.binary(max_size=600), cuts=st.lists(st.integers(0, 700)))
def test_arbitrary_bytes_give_a_response_or_a_transport_error(
    prefix: bytes, data: bytes, cuts: list[int]
) -> None:
    async def run() -> None:
        waiter, _ = await _drive(_split(prefix + data, cuts))
        outcome = _outcome(waiter)
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, errors.TransportError), repr(outcome)
        else:
            assert isinstance(outcome, RawResponse)
            assert 200 <= outcome.status <= 999

    asyncio.run(run())


# -- well-formed responses, any framing, any pieces ---------------------------------

_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
_VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    status=st.integers(200, 599).filter(lambda s: s not in (204, 304)),
    headers=st.lists(st.tuples(_TOKEN, _VALUE), max_size=8),
    body=st.binary(max_size=3000),
    framing=st.sampled_from(["length", "chunked", "close"]),
    chunk_size=st.integers(1, 700),
    cuts=st.lists(st.integers(0, 5000), max_size=20),
    interim=st.booleans(),
)
def test_well_formed_responses_parse_exactly(
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    framing: str,
    chunk_size: int,
    cuts: list[int],
    interim: bool,
) -> None:
    reserved = {"content-length", "transfer-encoding", "connection"}
    headers = [(n, v.strip()) for n, v in headers if n not in reserved]
    lines = "".join(f"{n}: {v}\r\n" for n, v in headers)
    if framing == "length":
        head = f"HTTP/1.1 {status} X\r\n{lines}content-length: {len(body)}\r\n\r\n"
        encoded = body
    elif framing == "chunked":
        head = f"HTTP/1.1 {status} X\r\n{lines}transfer-encoding: chunked\r\n\r\n"
        parts = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)]
        encoded = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    else:
        head = f"HTTP/1.1 {status} X\r\n{lines}connection: close\r\n\r\n"
        encoded = body
    wire = (b"HTTP/1.1 100 Continue\r\n\r\n" if interim else b"") + head.encode() + encoded

    async def run() -> None:
        waiter, _ = await _drive(_split(wire, cuts), lose=True)
        outcome = _outcome(waiter)
        assert isinstance(outcome, RawResponse), repr(outcome)
        assert outcome.status == status
        assert outcome.body == body
        for name, value in headers:
            assert value in outcome.headers[name]

    asyncio.run(run())


def test_a_truncated_body_is_a_read_error_not_a_short_answer() -> None:
    async def run() -> None:
        waiter, _ = await _drive([b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"])
        assert isinstance(_outcome(waiter), errors.ReadError)

    asyncio.run(run())


def test_bytes_after_a_complete_response_close_the_connection() -> None:
    async def run() -> None:
        waiter, transport = await _drive(
            [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"], lose=False
        )
        outcome = _outcome(waiter)
        assert isinstance(outcome, RawResponse)
        assert (outcome.status, outcome.body) == (200, b"ok")
        assert transport.closed  # framing can't be trusted: never reused

    asyncio.run(run())


def test_an_oversized_body_is_refused_while_it_streams_in() -> None:
    async def run() -> None:
        head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        piece = b"%x\r\n%s\r\n" % (1 << 20, b"z" * (1 << 20))
        chunks = [head] + [piece] * (MAX_RESPONSE_BYTES // (1 << 20) + 2)
        waiter, transport = await _drive(chunks)
        outcome = _outcome(waiter)
        assert isinstance(outcome, errors.ProtocolError)
        assert transport.closed

    asyncio.run(run())


def test_an_endless_response_head_is_refused() -> None:
    async def run() -> None:
        line = b"x-filler-%d: " + b"v" * 1000 + b"\r\n"
        chunks = [b"HTTP/1.1 200 OK\r\n"] + [line % n for n in range(20_000)]  # ~20 MB
        waiter, transport = await _drive(chunks, lose=False)
        assert waiter.done(), "20 MB of response headers were buffered without complaint"
        assert isinstance(waiter.exception(), errors.ProtocolError)
        assert transport.closed

    asyncio.run(run())


# -- a real socket and the whole transport -------------------------------------------


async def _serve_script(
    script: list[bytes], close: bool, writers: list[asyncio.StreamWriter]
) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                for piece in script:
                    writer.write(piece)
                    await writer.drain()
                if not close:
                    await reader.read()  # hold the connection until the client goes
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=_PREFIXES,
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 400), max_size=5),
    close=st.booleans(),
)
def test_a_scripted_server_over_a_real_socket(
    prefix: bytes, data: bytes, cuts: list[int], close: bool
) -> None:
    async def run() -> None:
        writers: list[asyncio.StreamWriter] = []
        server, port = await _serve_script(_split(prefix + data, cuts), close, writers)
        transport = NativeTransport(PoolConfig(prewarm=0, connect_timeout_ms=1000))
        origin = Origin.from_url(f"http://127.0.0.1:{port}")
        request = PreparedRequest(origin, "/x", "", [("host", origin.host_header)], b"", None)
        started = time.monotonic()
        try:
            async with asyncio.timeout(0.3 + 3.0):  # hang check
                try:
                    response = await transport.request(request, time.monotonic() + 0.3)
                except errors.GatewayError as error:
                    assert isinstance(error, errors.TransportError | errors.TimeoutError)
                else:
                    assert isinstance(response, RawResponse)
            assert time.monotonic() - started < 3.3
        finally:
            await transport.aclose()
            server.close()
            for writer in writers:
                writer.close()
            await server.wait_closed()
            await asyncio.sleep(0.01)
        assert transport.open_connections() == 0

    asyncio.run(run())
