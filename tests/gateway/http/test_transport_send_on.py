"""A request written from a protocol callback (``NativeTransport.send_on``), over real sockets.

The sidecar's relay lane sends a call's first attempt this way: on a warm
socket taken with ``idle_connection``, and is called back (``then``) with a
:class:`Settlement` once the answer or the failure is in, from the
connection's own callback; nothing awaits it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway import errors
from gateway._http.connection import AnswerWaiter, Settlement
from gateway._http.message import RawResponse
from gateway._http.native import NativeTransport
from gateway._http.request import PreparedRequest
from tests.gateway.conftest import TransportFactory, prepared, response

_ANSWER = RawResponse(200, None, b"body", b"HTTP/1.1 200 OK")


def test_a_settlement_settles_once_with_an_answer() -> None:
    settled = Settlement()
    assert not settled.done()
    with pytest.raises(asyncio.InvalidStateError):
        settled.result()
    settled.set_result(_ANSWER)
    assert settled.done() and settled.result() is _ANSWER
    with pytest.raises(asyncio.InvalidStateError):
        settled.set_result(_ANSWER)
    with pytest.raises(asyncio.InvalidStateError):
        settled.set_exception(errors.ReadTimeout("late"))
    assert settled.result() is _ANSWER


def test_a_settlement_raises_its_failure_each_time_it_is_read() -> None:
    settled = Settlement()
    failure = errors.DeadlineExceeded("the call's deadline passed")
    settled.set_exception(failure)
    assert settled.done()
    for _ in range(2):  # the lane reads it, then the rest of the call reads it again
        with pytest.raises(errors.DeadlineExceeded) as raised:
            settled.result()
        assert raised.value is failure
    with pytest.raises(asyncio.InvalidStateError):
        settled.set_result(_ANSWER)


class _Upstream:
    """Answers each request with its path, unless told to hold the answers back."""

    def __init__(self) -> None:
        self.hold = False
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> _Upstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not self.hold:
                    writer.write(response(head.split(b" ", 2)[1]))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def upstream() -> AsyncIterator[_Upstream]:
    server = await _Upstream().start()
    yield server
    await server.close()


async def _warm(make_transport: TransportFactory, upstream: _Upstream) -> NativeTransport:
    transport = make_transport("native")
    assert isinstance(transport, NativeTransport)
    url = f"http://127.0.0.1:{upstream.port}"
    first = await transport.request(prepared(url, "/warm"), time.monotonic() + 5)
    assert first.body == b"/warm"
    return transport


def _request(upstream: _Upstream, path: str) -> PreparedRequest:
    return prepared(f"http://127.0.0.1:{upstream.port}", path)


async def _called_back(
    transport: NativeTransport, request: PreparedRequest, deadline_s: float
) -> tuple[AnswerWaiter, AnswerWaiter]:
    """What send_on returned and what ``then`` was called with (once)."""
    now = time.monotonic()
    connection = transport.idle_connection(request.origin, now)
    assert connection is not None
    called: asyncio.Future[AnswerWaiter] = asyncio.get_running_loop().create_future()
    waiter, slot = transport.send_on(connection, request, now + deadline_s, now, called.set_result)
    assert isinstance(waiter, Settlement)
    assert not called.done()  # never from inside send_on
    settled = await asyncio.wait_for(called, 5)
    slot.pop(waiter, None)
    return waiter, settled


async def test_then_is_called_with_the_settled_answer(
    make_transport: TransportFactory, upstream: _Upstream
) -> None:
    transport = await _warm(make_transport, upstream)
    waiter, settled = await _called_back(transport, _request(upstream, "/lane"), 5.0)
    assert settled is waiter and settled.done()
    assert settled.result().body == b"/lane"
    # The socket went back to the pool for the next call.
    assert transport.idle_connection(_request(upstream, "/").origin, time.monotonic()) is not None


async def test_then_is_called_with_the_deadlines_failure(
    make_transport: TransportFactory, upstream: _Upstream
) -> None:
    transport = await _warm(make_transport, upstream)
    upstream.hold = True
    _, settled = await _called_back(transport, _request(upstream, "/held"), 0.05)
    with pytest.raises(errors.DeadlineExceeded):
        settled.result()


async def test_a_socket_closed_before_the_write_sends_nothing_and_says_so(
    make_transport: TransportFactory, upstream: _Upstream
) -> None:
    transport = await _warm(make_transport, upstream)
    request = _request(upstream, "/never")
    now = time.monotonic()
    connection = transport.idle_connection(request.origin, now)
    assert connection is not None
    connection.close()
    called: asyncio.Future[AnswerWaiter] = asyncio.get_running_loop().create_future()
    waiter, _ = transport.send_on(connection, request, now + 5, now, called.set_result)
    assert not called.done()  # called back later, from the loop
    settled = await asyncio.wait_for(called, 5)
    assert settled is waiter
    with pytest.raises(errors.StaleConnection) as raised:
        settled.result()
    assert raised.value.sent is False
