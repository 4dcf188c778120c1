"""The HTTP/1.1 server core over real sockets, with well- and ill-behaved clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway._server.http import (
    AbortConnection,
    Request,
    Response,
    Server,
    ServerLimits,
    StreamingResponse,
    start_server,
)

LIMITS = ServerLimits(
    max_header_size=2048,
    max_body_size=1000,
    max_discard_size=4000,
    header_timeout=0.3,
    body_timeout=0.3,
    keepalive_timeout=0.5,
)


async def _handler(request: Request) -> Response | StreamingResponse:
    if request.path == "/sleep":
        await asyncio.sleep(float(request.query.partition("=")[2]))
    elif request.path == "/boom":
        raise RuntimeError("handler bug")
    elif request.path == "/reset":
        raise AbortConnection
    elif request.path == "/stream":
        return StreamingResponse(_parts(), headers=[("content-type", "text/plain")])
    echo = f"{request.method} {request.path}?{request.query} {request.headers.get('x-tag', '')}"
    return Response(200, [("content-type", "text/plain"), ("x-echo", echo)], request.body)


async def _parts() -> AsyncIterator[bytes]:
    for index in range(3):
        await asyncio.sleep(0)
        yield f"part{index};".encode()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = await start_server(_handler, "127.0.0.1", 0, limits=LIMITS)
    yield server
    await server.close(grace=1.0)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def _exchange(server: Server, data: bytes) -> bytes:
    """Send raw bytes, return everything until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()


async def _still_serving(server: Server) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"http://127.0.0.1:{server.port}/ok", content=b"alive")
    assert response.status_code == 200 and response.content == b"alive"


async def test_keep_alive_with_lower_case_headers_and_query(server: Server) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        for index in range(3):
            response = await client.post(
                "/path/x%2Fy", params={"a": index}, content=b"body", headers={"X-Tag": "t"}
            )
            assert response.status_code == 200
            assert response.headers["x-echo"] == f"POST /path/x%2Fy?a={index} t"
            assert response.content == b"body"
            assert "date" in response.headers
    assert server.connection_count <= 1


async def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"GET /sleep?s=0.05 HTTP/1.1\r\nHost: x\r\nX-Tag: first\r\n\r\n"
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    answers = [await _read_response(reader) for _ in range(3)]
    writer.close()
    await writer.wait_closed()
    paths = [headers["x-echo"].split(" ")[1].partition("?")[0] for _, headers, _ in answers]
    assert paths == ["/sleep", "/b", "/c"]
    assert answers[1][2] == b"abc"


async def test_chunked_request_body(server: Server) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"hello "
        yield b"world"

    async with httpx.AsyncClient() as client:
        response = await client.post(f"http://127.0.0.1:{server.port}/c", content=body())
    assert response.content == b"hello world"


async def test_oversized_body_gets_413_and_close(server: Server) -> None:
    raw = await _exchange(
        server, b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 1500\r\n\r\n" + b"x" * 1500
    )
    assert raw.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in raw
    chunked = b"".join(b"64\r\n" + b"y" * 100 + b"\r\n" for _ in range(12)) + b"0\r\n\r\n"
    raw = await _exchange(
        server, b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    )
    assert raw.startswith(b"HTTP/1.1 413 ")
    await _still_serving(server)


async def test_header_too_large_gets_431(server: Server) -> None:
    raw = await _exchange(server, b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 431 ")
    await _still_serving(server)


@pytest.mark.parametrize(
    "garbage",
    [b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"\x16\x03\x01\x02\x00"],
)
async def test_malformed_request_gets_400_and_close(server: Server, garbage: bytes) -> None:
    raw = await _exchange(server, garbage)
    assert raw.startswith(b"HTTP/1.1 400 ")
    await _still_serving(server)


async def test_slow_headers_time_out(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()
    assert raw.startswith(b"HTTP/1.1 408 ")
    await _still_serving(server)


async def test_silent_and_idle_connections_are_closed(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # connected, never spoke
    writer.close()
    await writer.wait_closed()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, _ = await _read_response(reader)
    assert status == 200
    assert await asyncio.wait_for(reader.read(), 5) == b""  # idle past keepalive_timeout
    writer.close()
    await writer.wait_closed()


async def test_handler_exception_is_500_and_connection_survives(server: Server) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
        assert (await client.get("/boom")).status_code == 500
        assert (await client.get("/after")).status_code == 200


async def test_connection_close_and_http10(server: Server) -> None:
    raw = await _exchange(server, b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200 ") and b"connection: close" in raw
    raw = await _exchange(server, b"GET /a HTTP/1.0\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200 ")


async def test_streaming_response_is_chunked(server: Server) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{server.port}/stream")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.content == b"part0;part1;part2;"


async def test_abort_resets_the_connection(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /reset HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    with pytest.raises(ConnectionResetError):
        await writer.wait_closed()
    await _still_serving(server)


async def test_graceful_close_finishes_in_flight_requests() -> None:
    server = await start_server(_handler, "127.0.0.1", 0, limits=LIMITS)
    port = server.port
    async with httpx.AsyncClient() as client:
        in_flight = asyncio.create_task(client.get(f"http://127.0.0.1:{port}/sleep?s=0.2"))
        await asyncio.sleep(0.05)
        await server.close(grace=2.0)
        response = await in_flight
        assert response.status_code == 200
        assert response.headers["connection"] == "close"
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
