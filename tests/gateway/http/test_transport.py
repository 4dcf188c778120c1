"""Both transports over real sockets: framing, pooling, timeouts, cancellation, TLS."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from bench._stub import make_certificate
from gateway import errors
from gateway._http.message import Origin
from gateway._http.native import NativeTransport
from gateway.emulator import Emulator
from tests._faultproxy import FaultProxy
from tests.gateway.conftest import (
    TRANSPORTS,
    StubRequest,
    StubServer,
    TransportFactory,
    gateway_for,
    prepared,
    response,
    settle,
)

StartStub = Callable[..., Awaitable[StubServer]]

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)


def deadline(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


async def arrived(server: StubServer, count: int) -> None:
    """Wait (bounded) until the server has read ``count`` requests."""
    for _ in range(500):
        if len(server.requests) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("requests did not arrive")


async def echo_reply(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(response(request.body or request.path.encode()))
    return True


# -- framing ----------------------------------------------------------------------


async def test_content_length_body(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    server = await stub_server(echo_reply)
    transport = make_transport(kind)
    answer = await transport.request(prepared(server.url, body=b"hello"), deadline())
    assert (answer.status, answer.body) == (200, b"hello")
    assert answer.headers["content-length"] == "5"


async def test_chunked_body(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def chunked(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-Multi: a\r\n")
        writer.write(b"x-multi: b\r\n\r\n")
        for part in (b"abc", b"", b"defgh"):
            if part:
                writer.write(b"%x\r\n%b\r\n" % (len(part), part))
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        return True

    server = await stub_server(chunked)
    transport = make_transport(kind)
    for _ in range(2):
        answer = await transport.request(prepared(server.url), deadline())
        assert answer.body == b"abcdefgh"
        assert answer.headers["x-multi"].replace(" ", "") == "a,b"
    assert server.accepted == 1


async def test_connection_close_response_is_not_reused(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def close_each(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(b"bye", headers=(("connection", "close"),)))
        return False

    server = await stub_server(close_each)
    transport = make_transport(kind)
    for _ in range(3):
        answer = await transport.request(prepared(server.url), deadline())
        assert answer.body == b"bye"
    assert server.accepted == 3
    assert all(request.index == 1 for request in server.requests)
    await settle(transport, expected_open=0)


async def test_body_delimited_by_close(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def no_length(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"part two")
        return False

    server = await stub_server(no_length)
    transport = make_transport(kind)
    answer = await transport.request(prepared(server.url), deadline())
    assert answer.body == b"part one, part two"
    await settle(transport, expected_open=0)


async def test_truncated_content_length_body_is_an_error(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def truncated(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly a few bytes")
        await writer.drain()
        await asyncio.sleep(0.01)
        return False

    server = await stub_server(truncated)
    transport = make_transport(kind)
    with pytest.raises(errors.ReadError):
        await transport.request(prepared(server.url), deadline())
    await settle(transport, expected_open=0)


async def test_large_response(
    kind: str, make_transport: TransportFactory, emulator: Emulator
) -> None:
    # the emulator echoes: 5 MB each way, through the real SageMaker route
    body = bytes(range(256)) * (5 * 1024 * 4)
    async with gateway_for(emulator.url, transport=kind) as gateway:
        result = await gateway.invoke("echo", body, content_type="application/octet-stream")
    assert result.body == body


async def test_interim_1xx_responses(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def interim(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n")
        writer.write(response(b"final", headers=(("x-final", "1"),)))
        return True

    server = await stub_server(interim)
    transport = make_transport(kind)
    for _ in range(2):
        answer = await transport.request(prepared(server.url), deadline())
        assert (answer.status, answer.body, answer.headers.get("x-final")) == (200, b"final", "1")
        assert "link" not in answer.headers
    assert server.accepted == 1


async def test_head_arriving_a_few_bytes_at_a_time(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    whole = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + response(
        b"split", headers=(("x-amzn-requestid", "rid-1"), ("x-multi", "a"), ("x-multi", "b"))
    )

    async def dribble(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        for index in range(0, len(whole), 7):
            writer.write(whole[index : index + 7])
            await writer.drain()
            await asyncio.sleep(0.001)
        return True

    server = await stub_server(dribble)
    transport = make_transport(kind)
    for _ in range(2):
        answer = await transport.request(prepared(server.url), deadline())
        assert (answer.status, answer.body) == (200, b"split")
        assert answer.headers["x-amzn-requestid"] == "rid-1"
        assert answer.headers["x-multi"].replace(" ", "") == "a,b"  # httpx joins with ", "
        assert "link" not in answer.headers


# -- pooling ---------------------------------------------------------------------------


async def test_keep_alive_reuse_opens_no_new_connections(
    kind: str, make_transport: TransportFactory, proxy: FaultProxy
) -> None:
    async with gateway_for(proxy.url, transport=kind) as gateway:
        await gateway.invoke("echo", b"warm")
        warm = proxy.accepted
        for index in range(20):
            assert (await gateway.invoke("echo", b"%d" % index)).body == b"%d" % index
        assert warm == 2  # pool.prewarm = 2, for both transports
        assert proxy.accepted == warm
        # httpx opens its prewarmed connections with one GET /ping each.
        assert proxy.requests == 21 + (2 if kind == "httpx" else 0)


async def test_prewarm_opens_n_connections_at_start(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    server = await stub_server(echo_reply)
    transport = make_transport(kind, prewarm=3)
    await transport.start([Origin.from_url(server.url)])
    assert transport.open_connections() == 3
    assert transport.stats.connections_opened == 3
    for _ in range(5):
        await transport.request(prepared(server.url), deadline())
    assert server.accepted == 3
    assert transport.stats.connections_opened == 3


async def test_lifo_reuse(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    release = asyncio.Event()

    async def held(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        if request.path == "/hold":
            await release.wait()
        writer.write(response(str(request.connection).encode()))
        return True

    server = await stub_server(held)
    transport = make_transport(kind)
    url = server.url
    first = asyncio.create_task(transport.request(prepared(url, "/hold"), deadline()))
    second = asyncio.create_task(transport.request(prepared(url, "/hold"), deadline()))
    await arrived(server, 2)
    release.set()
    answers = {(await first).body, (await second).body}
    assert answers == {b"1", b"2"}
    bodies = {(await transport.request(prepared(url), deadline())).body for _ in range(5)}
    assert server.accepted == 2  # sequential calls reuse the idle sockets
    if kind == "native":
        # LIFO: the most recently released socket answers every sequential call.
        assert len(bodies) == 1


async def test_idle_timeout_closes_idle_sockets(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    server = await stub_server(echo_reply)
    transport = make_transport(kind, idle_timeout_s=0.1)
    await asyncio.gather(*(transport.request(prepared(server.url), deadline()) for _ in range(3)))
    assert server.open_count >= 1
    for _ in range(200):
        if server.open_count == 0:
            break
        await asyncio.sleep(0.01)
    if kind == "native":
        assert server.open_count == 0  # closed in the background, not only when next used
        assert transport.open_connections() == 0
    before = server.accepted
    await transport.request(prepared(server.url), deadline())
    assert server.accepted == before + 1


async def test_pool_limit_and_pool_timeout(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    release = asyncio.Event()

    async def held(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        if request.path == "/hold":
            await release.wait()
        writer.write(response(b"done"))
        return True

    server = await stub_server(held)
    transport = make_transport(kind, max_connections=2, pool_timeout_ms=100)
    url = server.url
    busy = [
        asyncio.create_task(transport.request(prepared(url, "/hold"), deadline())) for _ in range(2)
    ]
    await arrived(server, 2)
    with pytest.raises(errors.PoolTimeout):
        await transport.request(prepared(url), deadline())
    # a waiter gets the socket the moment one is released
    waiter = asyncio.create_task(transport.request(prepared(url), deadline()))
    await asyncio.sleep(0.01)
    release.set()
    assert (await waiter).body == b"done"
    for task in busy:
        assert (await task).body == b"done"
    assert server.accepted == 2
    await settle(transport)


async def test_pool_wait_bounded_by_the_deadline(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    release = asyncio.Event()

    async def held(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        await release.wait()
        writer.write(response(b"done"))
        return True

    server = await stub_server(held)
    transport = make_transport(kind, max_connections=1, pool_timeout_ms=30000)
    busy = asyncio.create_task(transport.request(prepared(server.url), deadline()))
    await arrived(server, 1)
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded):
        await transport.request(prepared(server.url), deadline(0.1))
    assert time.monotonic() - started < 5.0  # a hang check, not a benchmark
    release.set()
    await busy


async def test_connect_refused(kind: str, make_transport: TransportFactory) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    transport = make_transport(kind)
    with pytest.raises(errors.ConnectError) as caught:
        await transport.request(prepared(f"http://127.0.0.1:{port}"), deadline())
    assert caught.value.retryable and not caught.value.sent
    await settle(transport, expected_open=0)


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A listener whose accept queue is full: connects hang in SYN-SENT."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_connect_timeout(kind: str, make_transport: TransportFactory, blackhole: str) -> None:
    transport = make_transport(kind, connect_timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(errors.ConnectTimeout):
        await transport.request(prepared(blackhole), deadline(10))
    assert time.monotonic() - started < 5.0
    with pytest.raises(errors.DeadlineExceeded):
        await transport.request(prepared(blackhole), deadline(0.1))
    await settle(transport, expected_open=0)


async def test_read_timeout_and_deadline(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def silent(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        if request.path == "/silent":
            await asyncio.sleep(30)
        writer.write(response(b"ok"))
        return True

    server = await stub_server(silent)
    transport = make_transport(kind, read_timeout_ms=100)
    started = time.monotonic()
    with pytest.raises(errors.ReadTimeout):
        await transport.request(prepared(server.url, "/silent"), deadline(10))
    assert time.monotonic() >= started + 0.1  # never early
    await settle(transport, expected_open=0)
    transport = make_transport(kind, read_timeout_ms=10000)
    call_deadline = deadline(0.1)
    with pytest.raises(errors.DeadlineExceeded):
        await transport.request(prepared(server.url, "/silent"), call_deadline)
    assert call_deadline <= time.monotonic() < call_deadline + 5.0
    await settle(transport, expected_open=0)
    # and the transport still works
    assert (await transport.request(prepared(server.url), deadline())).body == b"ok"


async def test_cancelled_request_never_poisons_the_pool(
    kind: str, make_transport: TransportFactory, stub_server: StartStub
) -> None:
    async def slow_then_fast(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        if request.path.startswith("/slow"):
            await asyncio.sleep(0.1)
        writer.write(response(request.path.encode()))
        return True

    server = await stub_server(slow_then_fast)
    transport = make_transport(kind, max_connections=1)
    loser = asyncio.create_task(transport.request(prepared(server.url, "/slow-1"), deadline()))
    await arrived(server, 1)
    loser.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loser
    # the next call gets its own answer, never the abandoned one
    for index in range(3):
        answer = await transport.request(prepared(server.url, f"/next-{index}"), deadline())
        assert answer.body == f"/next-{index}".encode()
    if kind == "native":
        # The pool's only slot was wanted: the loser's socket was closed at once
        # instead of holding the slot while its answer drained.
        assert transport.stats.drained_after_cancel == 0
        assert server.accepted == 2
    await settle(transport)


# -- TLS ------------------------------------------------------------------------------


async def test_tls_with_a_shared_context(
    kind: str, make_transport: TransportFactory, stub_server: StartStub, tmp_path: Path
) -> None:
    certificate = make_certificate(tmp_path)
    server = await stub_server(echo_reply, ssl=certificate.server_context())

    client_context = ssl.create_default_context(cafile=certificate.cert_file)
    transport = make_transport(kind, ssl_context=client_context)
    await asyncio.gather(
        *(transport.request(prepared(server.url, body=b"tls"), deadline()) for _ in range(3))
    )
    for _ in range(3):
        assert (await transport.request(prepared(server.url, body=b"tls"), deadline())).body == (
            b"tls"
        )
    assert server.accepted == 3
    if isinstance(transport, NativeTransport):
        assert transport._ssl is client_context  # one context, shared by every connection

    untrusting = make_transport(kind, tls_verify=True)
    with pytest.raises(errors.ConnectError):
        await untrusting.request(prepared(server.url), deadline())
    await settle(untrusting, expected_open=0)
