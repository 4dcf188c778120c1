"""The client against a hostile or broken upstream: no wrong answers, no hangs, bounded memory.

The upstream is a small asyncio server of the tests' own (``StubServer``)
that misbehaves on cue: two answers to one request, resets on reuse, an
endless error body, corrupt or truncated event streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway._aws.eventstream import encode_payload_part
from gateway._http.interfaces import MAX_ERROR_BODY_BYTES
from gateway._http.message import Origin
from gateway._http.native import NativeTransport
from tests.gateway.conftest import (
    StubRequest,
    StubServer,
    TransportFactory,
    gateway_for,
    prepared,
    response,
)

StartStub = Callable[..., Awaitable[StubServer]]

# A call still running this long after its own deadline is hung.
_HANG_SLACK_S = 3.0


async def _bounded(call: Awaitable[Any], deadline_s: float) -> Any:
    try:
        async with asyncio.timeout(deadline_s + _HANG_SLACK_S):
            return await call
    except TimeoutError as exc:
        if isinstance(exc, errors.GatewayError):
            raise
        raise AssertionError(f"hung: still running {_HANG_SLACK_S} s after its deadline") from None


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# -- pool poisoning: an answer nobody asked for ------------------------------------


async def _answer_twice(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    # Both answers in one write: they reach the client in the same bytes.
    writer.write(response(request.body) * 2)
    return True


async def test_a_second_answer_never_reaches_another_caller(
    stub_server: StartStub, make_transport: TransportFactory
) -> None:
    server = await stub_server(_answer_twice)
    transport = make_transport("native", max_connections=8, pool_timeout_ms=5000.0)

    async def call(n: int) -> tuple[bytes, bytes]:
        body = b"id-%05d" % n
        answer = await _bounded(
            transport.request(prepared(server.url, body=body), time.monotonic() + 3), 3
        )
        return body, answer.body

    outcomes = await asyncio.gather(*(call(n) for n in range(300)))

    wrong = [(sent, got) for sent, got in outcomes if sent != got]
    assert wrong == []
    # Each socket that carried a double answer was closed, never pooled.
    assert isinstance(transport, NativeTransport)
    pool = transport._pools[Origin.from_url(server.url)]
    assert pool.idle_connections == 0
    assert transport.stats.connections_closed >= 300


async def test_a_second_answer_never_reaches_another_gateway_caller(
    stub_server: StartStub,
) -> None:
    server = await stub_server(_answer_twice)
    gw: Gateway
    async with gateway_for(server.url, pool={"max_connections": 4, "pool_timeout_ms": 5000}) as gw:

        async def call(n: int) -> tuple[bytes, bytes]:
            body = b'{"id": %d}' % n
            result = await _bounded(gw.invoke("echo", body, timeout=3), 3)
            return body, bytes(result.body)

        outcomes = await asyncio.gather(*(call(n) for n in range(200)))
    assert [(sent, got) for sent, got in outcomes if sent != got] == []


async def test_an_unsolicited_answer_on_an_idle_socket_closes_it(
    stub_server: StartStub, make_transport: TransportFactory
) -> None:
    pushed = asyncio.Event()

    async def answer_then_push(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(response(request.body))
        if request.index == 1:
            await writer.drain()
            await asyncio.sleep(0.05)  # the socket is idle in the client's pool by now
            writer.write(response(b"nobody-asked"))
            pushed.set()
        return True

    server = await stub_server(answer_then_push)
    transport = make_transport("native", max_connections=1)
    deadline = time.monotonic() + 5
    assert (await transport.request(prepared(server.url, body=b"one"), deadline)).body == b"one"
    await pushed.wait()
    await asyncio.sleep(0.05)
    answer = await transport.request(prepared(server.url, body=b"two"), deadline)
    assert answer.body == b"two"
    assert server.accepted == 2  # the pushed-to socket was dropped


async def test_the_deadline_wheel_fails_an_orphaned_request(
    stub_server: StartStub, make_transport: TransportFactory
) -> None:
    async def never(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(10)
        return False

    server = await stub_server(never)
    transport = make_transport("native")
    assert isinstance(transport, NativeTransport)
    task = asyncio.ensure_future(
        transport.request(prepared(server.url, body=b"a"), time.monotonic() + 5)
    )
    await asyncio.sleep(0.05)
    connection = next(iter(transport._pools[Origin.from_url(server.url)]._open))
    # A second send on the busy socket is refused: the first waiter stays its owner.
    assert connection.send(b"GET / HTTP/1.1\r\n\r\n", False) is None
    orphan: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    connection.timed_out(orphan, True, 60.0)  # an owner the socket no longer serves
    with pytest.raises(errors.DeadlineExceeded):
        await orphan
    assert not task.done()  # the socket's real request is untouched
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


# -- endless error bodies: bounded memory -------------------------------------------


def _peak_rss_reset() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM, the peak resident set


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/self/status")


async def _endless_error(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(
        b"HTTP/1.1 500 X\r\ncontent-type: application/json\r\n"
        b"x-amzn-errortype: InternalFailure\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%b\r\n" % (256 * 1024, b"e" * 256 * 1024)
    while True:
        writer.write(chunk)
        await writer.drain()  # raises once the client has closed


async def test_an_endless_error_body_on_a_stream_is_read_to_a_bounded_prefix(
    stub_server: StartStub,
) -> None:
    server = await stub_server(_endless_error)
    gw: Gateway
    async with gateway_for(server.url) as gw:
        _peak_rss_reset()
        before = _peak_rss_mib()
        with pytest.raises(errors.ServiceError) as caught:
            await _bounded(_drain(gw.invoke_stream("echo", b"x", timeout=2)), 2)
        grown = _peak_rss_mib() - before
    assert caught.value.status == 500
    assert grown < 48, f"peak RSS grew {grown:.0f} MiB reading one error body"


async def test_an_endless_error_body_on_invoke_is_read_to_a_bounded_prefix(
    stub_server: StartStub,
) -> None:
    server = await stub_server(_endless_error)
    gw: Gateway
    async with gateway_for(
        server.url,
        routes={"echo": {"targets": [{"endpoint": "echo"}], "retry": {"max_attempts": 1}}},
    ) as gw:
        with pytest.raises(errors.ServiceError) as caught:
            await _bounded(gw.invoke("echo", b"x", timeout=2), 2)
    # The error is the upstream's (not a "response too large" transport error).
    assert caught.value.status == 500
    assert isinstance(caught.value, errors.InternalFailure)
    assert len(caught.value.message) <= MAX_ERROR_BODY_BYTES


async def _drain(stream: Any) -> list[bytes]:
    return [part async for part in stream]


# -- max_connections under resets ------------------------------------------------------


async def test_max_connections_holds_when_the_upstream_resets_reused_sockets(
    stub_server: StartStub, make_transport: TransportFactory
) -> None:
    peak = 0
    server: StubServer

    async def reset_on_reuse(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        nonlocal peak
        peak = max(peak, server.open_count)
        if request.index >= 2:
            _reset(writer)  # the client sees a stale keep-alive socket
            return False
        await asyncio.sleep(0.002)  # keeps requests overlapping
        writer.write(response(request.body))
        return True

    server = await stub_server(reset_on_reuse)
    limit = 16
    transport = make_transport("native", max_connections=limit, pool_timeout_ms=10000.0)

    async def worker(n: int) -> int:
        failures = 0
        for i in range(25):
            body = b"%d-%d" % (n, i)
            try:
                answer = await _bounded(
                    transport.request(prepared(server.url, body=body), time.monotonic() + 10), 10
                )
                assert answer.body == body
            except errors.TransportError:
                failures += 1
        return failures

    await asyncio.gather(*(worker(n) for n in range(64)))

    assert peak <= limit, f"{peak} connections open at once; the limit is {limit}"
    assert server.accepted > limit  # the resets did force reconnects
    assert isinstance(transport, NativeTransport)
    assert transport.open_connections() <= limit


# -- deadlines and timeouts ------------------------------------------------------------------


async def _echo(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(response(request.body))
    return True


@pytest.mark.parametrize("kind", ["native", "httpx"])
async def test_an_expired_deadline_is_never_sent(
    kind: str, stub_server: StartStub, make_transport: TransportFactory
) -> None:
    server = await stub_server(_echo)
    transport = make_transport(kind)
    await transport.request(prepared(server.url, body=b"warm"), time.monotonic() + 5)
    sent = len(server.requests)
    with pytest.raises(errors.DeadlineExceeded):
        await transport.request(prepared(server.url, body=b"late"), time.monotonic() - 0.001)
    with pytest.raises(errors.DeadlineExceeded):
        stream = await transport.stream(prepared(server.url, body=b"late"), time.monotonic())
        await stream.aclose()
    await asyncio.sleep(0.05)
    assert len(server.requests) == sent


async def test_a_zero_timeout_fails_without_sending(stub_server: StartStub) -> None:
    server = await stub_server(_echo)
    gw: Gateway
    async with gateway_for(server.url) as gw:
        await gw.invoke("echo", b"warm", timeout=5)
        sent = len(server.requests)
        with pytest.raises(errors.DeadlineExceeded):
            await gw.invoke("echo", b"late", timeout=0)
        with pytest.raises(errors.DeadlineExceeded):
            await _drain(gw.invoke_stream("echo", b"late", timeout=0))
        with pytest.raises(errors.DeadlineExceeded):
            await gw.invoke_async("echo", input_location="s3://b/k", timeout=0)
    await asyncio.sleep(0.05)
    assert len(server.requests) == sent


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -1.0, -0.001])
async def test_a_timeout_that_is_not_a_duration_is_refused(
    timeout: float, stub_server: StartStub
) -> None:
    server = await stub_server(_echo)
    gw: Gateway
    async with gateway_for(server.url) as gw:
        with pytest.raises(errors.InvalidRequest, match="timeout"):
            await gw.invoke("echo", b"x", timeout=timeout)
        with pytest.raises(errors.InvalidRequest, match="timeout"):
            await _drain(gw.invoke_stream("echo", b"x", timeout=timeout))
        with pytest.raises(errors.InvalidRequest, match="timeout"):
            await gw.invoke_async("echo", input_location="s3://b/k", timeout=timeout)
    assert server.requests == []


# -- corrupt and truncated event streams -------------------------------------------------------


def _stream_reply(body: bytes, *, chunked: bool = True) -> Any:
    async def reply(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
        if chunked:
            writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
            return True
        # Delimited by the close itself: the body's end is the connection's.
        writer.write(head + b"connection: close\r\n\r\n" + body)
        return False

    return reply


def _corrupt(frame: bytes) -> bytes:
    # Flip a payload byte: the message CRC no longer matches.
    middle = len(frame) - 6
    return frame[:middle] + bytes([frame[middle] ^ 0xFF]) + frame[middle + 1 :]


async def _parts_then_error(gw: Gateway) -> tuple[list[bytes], BaseException | None]:
    parts: list[bytes] = []
    try:
        async for part in gw.invoke_stream("echo", b"x", timeout=3):
            parts.append(part)  # noqa: PERF401 - kept one by one: the error comes mid-loop
    except Exception as exc:  # the assertion is on its type
        return parts, exc
    return parts, None


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "close-delimited"])
async def test_a_corrupt_event_stream_raises_a_typed_error(
    chunked: bool, stub_server: StartStub
) -> None:
    first, second = encode_payload_part(b"one"), encode_payload_part(b"two")
    server = await stub_server(_stream_reply(first + _corrupt(second), chunked=chunked))
    gw: Gateway
    async with gateway_for(server.url) as gw:
        parts, error = await _bounded(_parts_then_error(gw), 3)
    assert parts == [b"one"]
    assert isinstance(error, errors.ResponseStreamError)
    assert error.parts == 1
    assert not error.retryable  # a part was delivered: the stream cannot be replayed


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "close-delimited"])
async def test_a_stream_cut_mid_message_is_an_error_not_an_end(
    chunked: bool, stub_server: StartStub
) -> None:
    first, second = encode_payload_part(b"one"), encode_payload_part(b"two")
    server = await stub_server(_stream_reply(first + second[:-7], chunked=chunked))
    gw: Gateway
    async with gateway_for(server.url) as gw:
        parts, error = await _bounded(_parts_then_error(gw), 3)
    assert parts == [b"one"]
    assert isinstance(error, errors.ResponseStreamError)
    assert "unfinished message" in str(error)
    assert not error.retryable


async def test_a_corrupt_stream_before_any_part_may_be_retried(stub_server: StartStub) -> None:
    server = await stub_server(_stream_reply(_corrupt(encode_payload_part(b"one"))))
    gw: Gateway
    async with gateway_for(server.url) as gw:
        parts, error = await _bounded(_parts_then_error(gw), 3)
    assert parts == []
    assert isinstance(error, errors.ResponseStreamError)
    assert error.parts == 0 and error.retryable


async def test_a_stream_broken_after_a_part_is_not_retryable(stub_server: StartStub) -> None:
    async def part_then_reset(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        first = encode_payload_part(b"one")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
            b"transfer-encoding: chunked\r\n\r\n%x\r\n%b\r\n" % (len(first), first)
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        _reset(writer)  # the connection drops mid-body
        return False

    server = await stub_server(part_then_reset)
    gw: Gateway
    async with gateway_for(server.url) as gw:
        parts, error = await _bounded(_parts_then_error(gw), 3)
    assert parts == [b"one"]
    assert isinstance(error, errors.TransportError)
    assert not error.retryable  # a part was delivered: the stream cannot be replayed


# -- the httpx transport after a burst of abandoned calls ------------------------------------


async def test_httpx_serves_normally_after_a_burst_of_cancelled_calls(
    stub_server: StartStub, make_transport: TransportFactory
) -> None:
    async def late(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.004)  # later than most of the burst's deadlines
        writer.write(response(request.body))
        return True

    server = await stub_server(late)
    limit = 4
    transport = make_transport("httpx", max_connections=limit)

    async def call(n: int, budget: float) -> str:
        try:
            await transport.request(prepared(server.url, body=b"%d" % n), time.monotonic() + budget)
        except errors.GatewayError as error:
            return type(error).__name__
        return "ok"

    async def abandoned(n: int) -> None:
        # A caller that gives up by cancellation (a hedge's loser, say).
        task = asyncio.ensure_future(call(n, 5.0))
        await asyncio.sleep(0.001 * (n % 7))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    budgets = (0.0002, 0.0008, 0.002, 0.005)
    for _ in range(5):
        await asyncio.gather(
            *(call(n, budgets[n % len(budgets)]) for n in range(200)),
            *(abandoned(n) for n in range(60)),
        )
    await asyncio.sleep(0.1)

    after = await asyncio.gather(*(_bounded(call(n, 2.0), 2.0) for n in range(40)))
    assert after == ["ok"] * 40
    assert transport.open_connections() <= limit
