"""The native transport's connection and pool rules, over scripted sockets.

Each test drives both sides in one event loop (tests/gateway/_scripted_socket.py):
what the client writes is read back byte for byte, and the server's answer
arrives when and in the fragments the test chooses. No socket is opened and
nothing sleeps (``asyncio.sleep(0)`` only lets other tasks take a loop turn);
the deadline tests wait only for the transport's own timers, of 20-50 ms.
The end-to-end tests over real sockets stay in test_transport*.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import gateway
from gateway import errors
from gateway._http.connection import Connection
from gateway._http.message import Origin, RawResponse
from gateway._http.native import NativeTransport
from gateway._http.options import PoolConfig
from gateway._http.pool import OriginPool
from gateway._http.request import PreparedRequest
from tests.gateway._scripted_socket import (
    ScriptedNetwork,
    ScriptedSocket,
    chunked_response,
    response,
)
from tests.gateway.conftest import prepared

URL = "http://127.0.0.1:8080"
ORIGIN = Origin.from_url(URL)
# A bound on waits for the transport's own events, so a bug fails instead of hanging.
GUARD_S = 5.0

Make = Callable[..., NativeTransport]


@pytest.fixture
def network() -> ScriptedNetwork:
    return ScriptedNetwork()


@pytest.fixture
async def make(network: ScriptedNetwork) -> AsyncIterator[Make]:
    """``make(**PoolConfig)``: a native transport whose connections are scripted sockets."""
    made: list[NativeTransport] = []

    def build(**options: Any) -> NativeTransport:
        transport = NativeTransport(PoolConfig(**{"prewarm": 0, **options}), network.connect)
        made.append(transport)
        return transport

    yield build
    for transport in made:
        await transport.aclose()


def request(body: bytes = b"") -> PreparedRequest:
    return prepared(URL, body=body)


def head(body_size: int) -> bytes:
    return (
        b"POST /x HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n"
        b"user-agent: sagemaker-gateway/" + gateway.__version__.encode() + b"\r\n"
        b"content-length: " + str(body_size).encode() + b"\r\n\r\n"
    )


def later(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def start(
    transport: NativeTransport, body: bytes = b"", deadline: float = 0.0
) -> asyncio.Task[RawResponse]:
    return asyncio.ensure_future(transport.request(request(body), deadline or later()))


async def answered(call: asyncio.Task[RawResponse]) -> RawResponse:
    return await asyncio.wait_for(call, GUARD_S)


async def serve(
    network: ScriptedNetwork, transport: NativeTransport, body: bytes
) -> ScriptedSocket:
    """One request answered with an echo of ``body``; the socket (new or reused) it went out on."""
    call = start(transport, body)
    sock = await network.socket_with_request()
    assert await sock.next_request() == head(len(body)) + body
    sock.feed(response(body))
    assert (await answered(call)).body == body
    return sock


def pool_of(transport: NativeTransport) -> OriginPool:
    return transport._pools[ORIGIN]


# -- what goes out ---------------------------------------------------------------------


async def test_the_request_goes_out_as_exact_head_and_body_bytes(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b'{"x": 1}')
    sock = await network.next_socket()
    assert await sock.next_request() == head(8) + b'{"x": 1}'
    assert sock.writes == [head(8) + b'{"x": 1}']  # a small request: one write
    assert network.connects == [("127.0.0.1", 8080, False, None)]
    sock.feed(response(b"0.5"))
    answer = await answered(call)
    assert (answer.status, answer.body) == (200, b"0.5")


async def test_a_large_body_is_written_apart_from_its_head_and_arrives_whole(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    body = bytes(range(256)) * 300  # 76,800 bytes: written apart from the head
    call = start(transport, body)
    sock = await network.next_socket()
    assert await sock.next_request(len(head(len(body))) + len(body)) == head(len(body)) + body
    assert sock.writes == [head(len(body)), body]  # not copied into one buffer
    sock.feed(response(b"ok"))
    assert (await answered(call)).body == b"ok"


async def test_a_tls_origin_connects_with_the_shared_context_and_its_host_as_sni(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = asyncio.ensure_future(
        transport.request(prepared("https://127.0.0.1:8443", body=b"q"), later())
    )
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(response(b"tls"))
    assert (await answered(call)).body == b"tls"
    assert network.connects == [("127.0.0.1", 8443, True, "127.0.0.1")]


# -- keep-alive ------------------------------------------------------------------------


async def test_keep_alive_reuses_the_socket_for_the_next_request(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    first = await serve(network, transport, b"one")
    call = start(transport, b"two")
    assert await first.next_request() == head(3) + b"two"
    first.feed(response(b"two"))
    assert (await answered(call)).body == b"two"
    assert len(network.sockets) == 1
    assert (transport.stats.requests, transport.stats.reused) == (2, 1)


async def test_the_idle_stack_is_lifo_the_last_released_socket_goes_first(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=2)
    calls = [start(transport, b"a"), start(transport, b"b")]
    a, b = await network.next_socket(), await network.next_socket()
    a.feed(response((await a.next_request())[-1:]))
    b.feed(response((await b.next_request())[-1:]))
    # a was released first, b last: b is on top of the stack.
    answers = await asyncio.wait_for(asyncio.gather(*calls), GUARD_S)
    assert [answer.body for answer in answers] == [b"a", b"b"]
    call = start(transport, b"c")
    assert await b.next_request() == head(1) + b"c"
    assert a.unread() == b""
    b.feed(response(b"c"))
    assert (await answered(call)).body == b"c"
    assert pool_of(transport)._idle == [_conn(a), _conn(b)]


def _conn(sock: ScriptedSocket) -> Connection:
    protocol = sock.protocol
    assert isinstance(protocol, Connection)
    return protocol


async def test_a_connection_close_response_is_not_reused(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"x")
    first = await network.next_socket()
    await first.next_request()
    first.feed(response(b"bye", 200, "Connection: close"))
    assert (await answered(call)).body == b"bye"
    assert first.closed_by_client
    await serve(network, transport, b"y")
    assert len(network.sockets) == 2


# -- framing: a response in any fragments ------------------------------------------------

SPLIT_RESPONSE = response(b"hello world", 200, "Content-Type: text/plain")
SPLIT_CHUNKED = chunked_response(b"hello ", b"world")


@pytest.mark.parametrize("raw", [SPLIT_RESPONSE, SPLIT_CHUNKED], ids=["content-length", "chunked"])
async def test_a_response_split_at_every_byte_boundary_reads_the_same(
    network: ScriptedNetwork, make: Make, raw: bytes
) -> None:
    transport = make()
    for cut in range(1, len(raw)):
        call = start(transport, b"q")
        sock = network.sockets[0] if network.sockets else await network.next_socket()
        await sock.next_request()
        sock.feed(raw[:cut])
        assert not call.done()
        sock.feed(raw[cut:])
        answer = await answered(call)
        assert (answer.status, answer.body) == (200, b"hello world"), cut
    # Every answer was complete and clean: one socket served them all.
    assert len(network.sockets) == 1
    assert not network.sockets[0].closed_by_client


async def test_a_response_fed_one_byte_at_a_time_reads_the_same(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + SPLIT_RESPONSE
    sock.feed_bytewise(raw[:-1])
    assert not call.done()
    sock.feed(raw[-1:])
    answer = await answered(call)
    assert (answer.status, answer.body) == (200, b"hello world")
    assert answer.headers["content-type"] == "text/plain"
    await serve(network, transport, b"again")
    assert len(network.sockets) == 1


async def test_a_close_delimited_body_ends_when_the_server_closes(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport)
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(b"HTTP/1.1 200 OK\r\n\r\npart one, ", b"part two")
    assert not call.done()
    sock.close_from_server()
    assert (await answered(call)).body == b"part one, part two"
    await serve(network, transport, b"next")
    assert len(network.sockets) == 2


async def test_a_body_cut_short_by_a_close_is_a_read_error(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport)
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(response(b"0123456789")[:-4])
    sock.close_from_server()
    with pytest.raises(errors.ReadError, match="middle of the response body"):
        await answered(call)


# -- unsolicited bytes ------------------------------------------------------------------


async def test_a_second_response_in_the_same_bytes_closes_the_socket_and_is_never_delivered(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(response(b"mine") + response(b"nobody's"))
    assert (await answered(call)).body == b"mine"
    assert sock.closed_by_client
    assert pool_of(transport).idle_connections == 0
    # The next request gets its own socket and its own answer.
    fresh = await serve(network, transport, b"next")
    assert fresh is not sock


async def test_bytes_on_an_idle_socket_close_it_before_anyone_reads_them(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    sock = await serve(network, transport, b"one")
    assert pool_of(transport).idle_connections == 1
    sock.feed(response(b"unsolicited"))
    assert sock.closed_by_client
    fresh = await serve(network, transport, b"two")
    assert fresh is not sock
    assert transport.stats.stale_retries == 0


# -- the stale keep-alive retry -----------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_a_reused_socket_dying_before_any_byte_is_retried_once_on_a_fresh_one(
    network: ScriptedNetwork, make: Make, how: str
) -> None:
    transport = make()
    stale = await serve(network, transport, b"warm")
    call = start(transport, b"retry me")
    sent = await stale.next_request()
    assert sent == head(8) + b"retry me"
    stale.close_from_server() if how == "close" else stale.reset()
    fresh = await network.next_socket()
    assert await fresh.next_request() == sent  # the same bytes, signature and all
    fresh.feed(response(b"done"))
    assert (await answered(call)).body == b"done"
    assert transport.stats.stale_retries == 1
    assert len(network.sockets) == 2


async def test_no_retry_once_a_response_byte_arrived_on_the_reused_socket(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    sock = await serve(network, transport, b"warm")
    call = start(transport, b"q")
    await sock.next_request()
    sock.feed(b"H")
    sock.reset()
    with pytest.raises(errors.ReadError):
        await answered(call)
    assert transport.stats.stale_retries == 0
    assert len(network.sockets) == 1


async def test_no_retry_when_a_fresh_socket_dies_before_the_response(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    sock.close_from_server()
    with pytest.raises(errors.ReadError) as caught:
        await answered(call)
    assert not isinstance(caught.value, errors.StaleConnection)
    assert transport.stats.stale_retries == 0
    assert len(network.sockets) == 1


async def test_the_retry_is_made_once_a_dying_fresh_socket_is_not_retried_again(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    stale = await serve(network, transport, b"warm")
    call = start(transport, b"q")
    await stale.next_request()
    stale.reset()
    fresh = await network.next_socket()
    await fresh.next_request()
    fresh.reset()
    with pytest.raises(errors.ReadError):
        await answered(call)
    assert transport.stats.stale_retries == 1
    assert len(network.sockets) == 2


# -- max_connections and waiters ----------------------------------------------------------


async def test_a_waiter_is_woken_by_a_release_and_takes_that_socket(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1)
    first = start(transport, b"1")
    sock = await network.next_socket()
    await sock.next_request()
    second = start(transport, b"2")
    await asyncio.sleep(0)  # let the second call reach the pool: no socket is free
    assert len(pool_of(transport)._waiters) == 1
    sock.feed(response(b"1"))
    assert (await answered(first)).body == b"1"
    assert await sock.next_request() == head(1) + b"2"
    sock.feed(response(b"2"))
    assert (await answered(second)).body == b"2"
    assert len(network.connects) == 1


async def test_the_pool_never_exceeds_max_connections_when_sockets_reset(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=2)
    calls = [start(transport, bytes([65 + i])) for i in range(8)]
    outcomes: dict[bytes, str] = {}
    # Serve every request; every third socket resets after the first response
    # byte (so no retry): a waiter must then get the freed slot.
    served = 0
    while len(outcomes) < len(calls):
        sock = await network.socket_with_request()
        sent = await sock.next_request()
        body = sent[-1:]
        served += 1
        if served % 3 == 0:
            sock.feed(b"HTTP/1.1 2")
            sock.reset()
            outcomes[body] = "reset"
        else:
            sock.feed(response(body))
            outcomes[body] = "ok"
        assert network.peak_open <= 2
    results = await asyncio.gather(*calls, return_exceptions=True)
    for call_body, result in zip([bytes([65 + i]) for i in range(8)], results, strict=True):
        if outcomes[call_body] == "ok":
            assert isinstance(result, RawResponse) and result.body == call_body
        else:
            assert isinstance(result, errors.ReadError)
    assert network.peak_open == 2
    assert list(outcomes.values()).count("reset") == 2
    assert len(network.sockets) == 4  # two to start, one per reset
    assert transport.open_connections() <= 2


async def test_a_reset_hands_its_slot_to_a_waiter_which_connects(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1)
    first = start(transport, b"1")
    sock = await network.next_socket()
    await sock.next_request()
    second = start(transport, b"2")
    await asyncio.sleep(0)
    assert len(network.connects) == 1  # waiting, not connecting
    sock.reset()
    with pytest.raises(errors.ReadError):
        await answered(first)
    fresh = await network.next_socket()
    assert await fresh.next_request() == head(1) + b"2"
    fresh.feed(response(b"2"))
    assert (await answered(second)).body == b"2"
    assert network.peak_open == 1


async def test_a_refused_connect_frees_its_slot(network: ScriptedNetwork, make: Make) -> None:
    transport = make(max_connections=1)
    network.refuse_next(ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(errors.ConnectError, match="refused"):
        await transport.request(request(b"x"), later())
    await serve(network, transport, b"y")
    assert len(network.connects) == 2


# -- cancellation ----------------------------------------------------------------------


async def test_cancelling_mid_response_drains_the_socket_then_reuses_it(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    raw = response(b"late answer")
    sock.feed(raw[:20])
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # Mid-response the socket is not idle: nobody can read the rest as theirs.
    assert pool_of(transport).idle_connections == 0
    sock.feed(raw[20:])
    assert transport.stats.drained_after_cancel == 1
    assert pool_of(transport).idle_connections == 1
    nxt = start(transport, b"next")
    assert await sock.next_request() == head(4) + b"next"
    sock.feed(response(b"next"))
    assert (await answered(nxt)).body == b"next"
    assert len(network.sockets) == 1


async def test_a_request_after_a_cancelled_one_never_takes_the_dirty_socket(
    network: ScriptedNetwork, make: Make
) -> None:
    # The drain allowance is the read timeout; the response never completes.
    transport = make(read_timeout_ms=50)
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    fresh = await serve(network, transport, b"other")
    assert fresh is not sock
    assert sock.unread() == b""  # nothing was written on the dirty socket
    await asyncio.wait_for(sock.client_closed.wait(), GUARD_S)  # given up after the allowance
    assert transport.stats.drained_after_cancel == 0


async def test_a_draining_socket_gives_its_slot_to_the_next_request_at_once(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1, pool_timeout_ms=10_000)
    call = start(transport, b"q")
    sock = await network.next_socket()
    await sock.next_request()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # The only slot is wanted: the abandoned answer is not waited for.
    fresh = await serve(network, transport, b"next")
    assert fresh is not sock
    assert sock.closed_by_client
    assert transport.stats.drained_after_cancel == 0


async def test_a_cancelled_attempt_with_a_request_queued_closes_its_socket_at_once(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1, pool_timeout_ms=10_000)
    first = start(transport, b"1")
    sock = await network.next_socket()
    await sock.next_request()
    second = start(transport, b"2")
    await asyncio.sleep(0)  # the second call queues: no slot is free
    assert len(pool_of(transport)._waiters) == 1
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert sock.closed_by_client
    fresh = await network.next_socket()
    assert fresh is not sock
    assert await fresh.next_request() == head(1) + b"2"
    fresh.feed(response(b"2"))
    assert (await answered(second)).body == b"2"


async def test_an_abandoned_answer_is_drained_no_longer_than_the_call_had_left(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(read_timeout_ms=60_000)
    call = start(transport, b"q", later(0.05))
    sock = await network.next_socket()
    await sock.next_request()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not sock.closed_by_client  # draining: the pool can spare the slot
    # Closed once the call's own deadline passes, not after the read timeout.
    await asyncio.wait_for(sock.client_closed.wait(), GUARD_S)
    assert pool_of(transport).open_connections == 0


async def test_closing_an_unfinished_stream_closes_its_socket(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    opening = asyncio.ensure_future(transport.stream(request(b"q"), later()))
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"3\r\nabc\r\n")
    stream = await asyncio.wait_for(opening, GUARD_S)
    assert await stream.chunks().__anext__() == b"abc"
    await stream.aclose()
    assert sock.closed_by_client
    assert (await serve(network, transport, b"next")) is not sock


async def test_a_stream_past_the_high_water_mark_pauses_reading_until_consumed(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    opening = asyncio.ensure_future(transport.stream(request(b"q"), later()))
    sock = await network.next_socket()
    await sock.next_request()
    part = b"x" * 65536
    sock.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    stream = await asyncio.wait_for(opening, GUARD_S)
    chunk = b"%x\r\n%s\r\n" % (len(part), part)
    for _ in range(17):  # 17 x 64 KiB: past the 1 MiB high-water mark
        sock.feed(chunk)
    assert not sock.reading
    sock.feed(b"0\r\n\r\n")  # held by the paused socket
    body = await asyncio.wait_for(stream.read(), GUARD_S)
    assert body == part * 17
    assert sock.reading
    assert pool_of(transport).idle_connections == 1


# -- deadlines ---------------------------------------------------------------------------


async def test_a_deadline_already_past_sends_nothing(network: ScriptedNetwork, make: Make) -> None:
    transport = make()
    with pytest.raises(errors.DeadlineExceeded, match="before the request was sent"):
        await transport.request(request(b"q"), time.monotonic() - 1)
    assert network.connects == []


async def test_the_deadline_passing_while_waiting_for_a_connection(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1, pool_timeout_ms=10_000)
    first = start(transport, b"1")
    sock = await network.next_socket()
    await sock.next_request()
    with pytest.raises(errors.DeadlineExceeded, match="waiting for a connection"):
        await transport.request(request(b"2"), later(0.02))
    # The socket goes back to the stack, not to the waiter that gave up.
    sock.feed(response(b"1"))
    assert (await answered(first)).body == b"1"
    assert pool_of(transport).idle_connections == 1
    assert sock.unread() == b""


async def test_the_pool_timeout_when_it_is_shorter_than_the_deadline(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=1, pool_timeout_ms=20)
    first = start(transport, b"1")
    sock = await network.next_socket()
    await sock.next_request()
    with pytest.raises(errors.PoolTimeout):
        await transport.request(request(b"2"), later())
    sock.feed(response(b"1"))
    assert (await answered(first)).body == b"1"


async def test_the_deadline_passing_while_connecting(network: ScriptedNetwork, make: Make) -> None:
    transport = make(connect_timeout_ms=10_000)
    network.hold_connects()
    with pytest.raises(errors.DeadlineExceeded, match="while connecting"):
        await transport.request(request(b"q"), later(0.02))
    network.release_connects()
    assert pool_of(transport)._has_free_slot()


async def test_the_deadline_passing_while_reading_closes_the_socket(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make()
    call = start(transport, b"q", later(0.02))
    sock = await network.next_socket()
    await sock.next_request()
    sock.feed(b"HTTP/1.1 200 OK\r\nContent-Le")
    with pytest.raises(errors.DeadlineExceeded, match="deadline"):
        await answered(call)
    assert sock.closed_by_client  # mid-response: never reused
    assert (await serve(network, transport, b"next")) is not sock


async def test_the_read_timeout_when_it_comes_before_the_deadline(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(read_timeout_ms=20)
    call = start(transport, b"q", later(60))
    sock = await network.next_socket()
    await sock.next_request()
    with pytest.raises(errors.ReadTimeout):
        await answered(call)
    assert sock.closed_by_client


# -- idle timeout ------------------------------------------------------------------------


async def test_a_socket_idle_past_the_idle_timeout_is_closed_not_used(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(idle_timeout_s=30)
    old = await serve(network, transport, b"one")
    _conn(old).last_used -= 31  # as if it sat idle for 31 s
    fresh = await serve(network, transport, b"two")
    assert fresh is not old
    assert old.closed_by_client
    assert old.unread() == b""
    assert transport.stats.reused == 0


async def test_a_socket_idle_just_under_the_idle_timeout_is_reused(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(idle_timeout_s=30)
    sock = await serve(network, transport, b"one")
    _conn(sock).last_used -= 29
    call = start(transport, b"two")
    assert await sock.next_request() == head(3) + b"two"
    sock.feed(response(b"two"))
    assert (await answered(call)).body == b"two"


async def test_pop_idle_skips_expired_and_closed_sockets_for_a_live_one(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=3, idle_timeout_s=30)
    await _three_idle_sockets(network, transport)
    pool = pool_of(transport)
    bottom, middle, top = (_conn(sock) for sock in network.sockets[:3])
    assert pool._idle == [bottom, middle, top]
    top.last_used = bottom.last_used = 1000.0
    middle.last_used = 999.0
    network.sockets[0].close_from_server()  # bottom: closed by the server meanwhile
    assert pool.pop_idle(1025.0) is top  # all within 30 s; top first
    assert pool.pop_idle(1025.0) is middle
    assert pool.pop_idle(1025.0) is None  # bottom is closed
    pool._push_idle(top)
    pool._push_idle(middle)
    assert pool.pop_idle(1031.0) is None  # both expired: closed, not returned
    assert top.closed and middle.closed


async def test_the_reaper_closes_sockets_idle_past_the_timeout_and_keeps_the_rest(
    network: ScriptedNetwork, make: Make
) -> None:
    transport = make(max_connections=3, idle_timeout_s=30)
    await _three_idle_sockets(network, transport)
    pool = pool_of(transport)
    stale = network.sockets[1]
    _conn(stale).last_used -= 31
    assert pool._reaper is not None
    pool._reaper.cancel()  # run it now rather than in 15 s
    pool._reap()
    assert stale.closed_by_client
    assert [sock.closed_by_client for sock in network.sockets] == [False, True, False]
    assert pool.idle_connections == 2
    assert pool._reaper is not None  # rescheduled for the sockets still idle


async def _three_idle_sockets(network: ScriptedNetwork, transport: NativeTransport) -> None:
    calls = [start(transport, body) for body in (b"a", b"b", b"c")]
    for _ in calls:
        sock = await network.next_socket()
        sent = await sock.next_request()
        sock.feed(response(sent[-1:]))
    answers = await asyncio.wait_for(asyncio.gather(*calls), GUARD_S)
    assert sorted(answer.body for answer in answers) == [b"a", b"b", b"c"]
