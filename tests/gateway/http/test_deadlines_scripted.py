"""The native transport's timeouts on virtual time: each fires when it must, typed.

One deadline per request spans the wait for a pooled connection, the connect
and the response; the pool, connect and read timeouts bound each phase on
their own. Every test checks the moment both ways: not done a millisecond
before, done a millisecond after (a response deadline is kept in 1 ms slots,
never early: see ``DeadlineWheel``). Nothing sleeps: the loop's clock jumps.
The same rules over real sockets are in test_transport.py, test_faults.py
and test_transport_races.py.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway import errors
from gateway._http.message import RawResponse
from tests._virtual_time import VirtualClock, virtual_time
from tests.gateway._scripted_socket import response
from tests.gateway.conftest import prepared
from tests.gateway.http._scripted_native import URL, head, scripted_native

MS = 0.001


async def _ends_at(
    clock: VirtualClock, call: asyncio.Future[object], when: float, slack: float = MS
) -> BaseException | None:
    """Run to just before ``when`` (``call`` still waits), then to just after; its error."""
    await clock.advance_to(when - MS)
    assert not call.done(), f"ended {when - clock.now():.3f} s early"
    await clock.advance_to(when + slack)
    assert call.done(), f"still waiting {slack:.3f} s after it should have ended"
    return call.exception()


# -- waiting for a pooled connection ------------------------------------------------------------


@virtual_time
async def test_the_pool_wait_ends_at_the_deadline_when_that_comes_first(
    clock: VirtualClock,
) -> None:
    async with scripted_native(max_connections=1, pool_timeout_ms=30_000) as native:
        busy = native.start(b"1")
        sock = await native.sent(busy)
        waiting = native.start(b"2", deadline=clock.now() + 0.25)
        error = await _ends_at(clock, waiting, clock.now() + 0.25)
        assert isinstance(error, errors.DeadlineExceeded)
        assert "waiting for a connection" in str(error)
        assert error.sent is False  # nobody's failure: it never left
        # The busy call is untouched, and its socket goes back to the stack.
        sock.feed(response(b"1"))
        assert (await busy).body == b"1"
        assert native.pool.idle_connections == 1
        assert sock.unread() == b""


@virtual_time
async def test_the_pool_timeout_ends_the_wait_when_it_comes_first(clock: VirtualClock) -> None:
    async with scripted_native(max_connections=1, pool_timeout_ms=100) as native:
        busy = native.start(b"1")
        await native.sent(busy)
        waiting = native.start(b"2", deadline=clock.now() + 10)
        error = await _ends_at(clock, waiting, clock.now() + 0.1)
        assert isinstance(error, errors.PoolTimeout)
        assert error.retryable
        assert len(native.network.connects) == 1
        assert not busy.done()


# -- connecting -----------------------------------------------------------------------------


@virtual_time
async def test_the_connect_timeout_fires_when_it_comes_first(clock: VirtualClock) -> None:
    async with scripted_native(connect_timeout_ms=200) as native:
        native.network.hold_connects()
        call = native.start(deadline=clock.now() + 10)
        error = await _ends_at(clock, call, clock.now() + 0.2)
        assert isinstance(error, errors.ConnectTimeout)
        assert error.retryable
        assert "200 ms" in str(error)
        assert native.pool._has_free_slot()  # the attempt gave its slot back
        native.network.release_connects()


@virtual_time
async def test_the_deadline_ends_a_connect_when_it_comes_first(clock: VirtualClock) -> None:
    async with scripted_native(connect_timeout_ms=10_000) as native:
        native.network.hold_connects()
        call = native.start(deadline=clock.now() + 0.05)
        error = await _ends_at(clock, call, clock.now() + 0.05)
        assert isinstance(error, errors.DeadlineExceeded)
        assert "while connecting" in str(error)
        native.network.release_connects()


@virtual_time
async def test_one_deadline_spans_the_pool_wait_and_the_connect_after_it(
    clock: VirtualClock,
) -> None:
    async with scripted_native(
        max_connections=1, pool_timeout_ms=60_000, connect_timeout_ms=1_000
    ) as native:
        busy = native.start(b"1")
        sock = await native.sent(busy)
        started = clock.now()
        waiting = native.start(b"2", deadline=started + 0.5)
        await clock.advance(0.2)
        native.network.hold_connects()
        sock.reset()  # the slot frees up: the waiter connects, with 0.3 s left
        with pytest.raises(errors.ReadError):
            await busy
        error = await _ends_at(clock, waiting, started + 0.5)
        # Not the connect timeout a second later: what was left of the deadline.
        assert isinstance(error, errors.DeadlineExceeded)
        assert "while connecting" in str(error)
        assert len(native.network.connects) == 2
        native.network.release_connects()


# -- the response ------------------------------------------------------------------------------


@virtual_time
async def test_the_read_timeout_fires_when_it_comes_first(clock: VirtualClock) -> None:
    async with scripted_native(read_timeout_ms=500) as native:
        call = native.start(deadline=clock.now() + 60)
        sock = await native.sent(call)
        error = await _ends_at(clock, call, clock.now() + 0.5, slack=2 * MS)
        assert isinstance(error, errors.ReadTimeout)
        assert "500 ms" in str(error)
        assert sock.closed_by_client


@pytest.mark.parametrize(
    "received",
    [
        pytest.param(b"", id="nothing"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Le", id="part-of-the-head"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart", id="part-of-the-body"),
    ],
)
@virtual_time
async def test_the_deadline_ends_a_response_when_it_comes_first(
    received: bytes, clock: VirtualClock
) -> None:
    async with scripted_native(read_timeout_ms=60_000) as native:
        deadline = clock.now() + 0.3
        call = native.start(deadline=deadline)
        sock = await native.sent(call)
        await clock.advance(0.1)
        sock.feed(received)
        error = await _ends_at(clock, call, deadline, slack=2 * MS)
        assert isinstance(error, errors.DeadlineExceeded)
        assert error.sent is True  # the request left: its target had it
        assert sock.closed_by_client  # mid-response: never reused
        fresh = await native.serve(b"next")
        assert fresh is not sock


@virtual_time
async def test_a_finished_requests_timer_never_fails_the_next_request_on_its_socket(
    clock: VirtualClock,
) -> None:
    async with scripted_native() as native:
        first = native.start(b"1", deadline=clock.now() + 1.0)
        sock = await native.sent(first)
        await clock.advance(0.1)
        sock.feed(response(b"1"))
        assert (await first).body == b"1"
        second = native.start(b"2", deadline=clock.now() + 5.0)
        assert await sock.next_request() == head(1) + b"2"
        await clock.advance(2.0)  # well past the first request's deadline
        assert not second.done()
        sock.feed(response(b"2"))
        assert (await second).body == b"2"
        assert not sock.closed_by_client


@virtual_time
async def test_the_deadline_covers_a_stream_until_its_last_byte(clock: VirtualClock) -> None:
    async with scripted_native() as native:
        deadline = clock.now() + 1.0
        opening = asyncio.ensure_future(native.transport.stream(prepared(URL, body=b"q"), deadline))
        sock = await native.network.next_socket()
        await sock.next_request()
        sock.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        stream = await opening
        assert await stream.chunks().__anext__() == b"abc"
        await clock.advance(0.5)
        sock.feed(b"3\r\ndef\r\n")
        assert await stream.chunks().__anext__() == b"def"
        rest = asyncio.ensure_future(stream.read())  # the body stalls from here
        error = await _ends_at(clock, rest, deadline, slack=2 * MS)
        assert isinstance(error, errors.DeadlineExceeded)
        assert sock.closed_by_client


# -- an abandoned answer ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline_s", "read_timeout_ms", "closes_at_s"),
    [
        pytest.param(0.4, 60_000, 0.4, id="until-the-call-deadline"),
        pytest.param(60.0, 200, 0.2, id="until-its-read-timeout-from-sending"),
    ],
)
@virtual_time
async def test_an_abandoned_answer_is_drained_only_while_the_attempt_had_time(
    deadline_s: float, read_timeout_ms: int, closes_at_s: float, clock: VirtualClock
) -> None:
    async with scripted_native(read_timeout_ms=read_timeout_ms) as native:
        sent_at = clock.now()
        call = native.start(deadline=sent_at + deadline_s)
        sock = await native.sent(call)
        await clock.advance(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert not sock.closed_by_client  # draining: nobody needs the slot
        closed = asyncio.ensure_future(sock.client_closed.wait())
        await _ends_at(clock, closed, sent_at + closes_at_s)
        assert native.transport.stats.drained_after_cancel == 0
        assert native.pool.open_connections == 0


@virtual_time
async def test_an_abandoned_answer_that_completes_in_time_frees_its_socket_for_reuse(
    clock: VirtualClock,
) -> None:
    async with scripted_native(read_timeout_ms=60_000) as native:
        call = native.start(deadline=clock.now() + 1.0)
        sock = await native.sent(call)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await clock.advance(0.9)
        sock.feed(response(b"late"))
        assert native.transport.stats.drained_after_cancel == 1
        assert await native.serve(b"next") is sock
        await clock.advance(5.0)  # the drain timer was cancelled with the drain
        assert not sock.closed_by_client


@virtual_time
async def test_a_deadline_already_past_sends_nothing_and_takes_no_socket(
    clock: VirtualClock,
) -> None:
    async with scripted_native() as native:
        sock = await native.serve(b"warm")
        call: asyncio.Future[RawResponse] = native.start(deadline=clock.now())
        with pytest.raises(errors.DeadlineExceeded, match="before the request was sent"):
            await call
        assert sock.unread() == b""
        assert native.pool.idle_connections == 1
