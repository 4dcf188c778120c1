"""The native transport's pool over scripted sockets, on virtual time.

Reuse, the connection limit and its queue, sockets the peer closes while
idle, and eviction by the idle timeout, each at the virtual moment it must
happen. The same rules over real sockets are in test_transport.py and
test_transport_reuse.py; LIFO order, draining and the stale retry are in
test_native_pool.py.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway import errors
from tests._virtual_time import VirtualClock, virtual_time
from tests.gateway._scripted_socket import response
from tests.gateway.http._scripted_native import ORIGIN, head, scripted_native

# -- reuse --------------------------------------------------------------------------------


@virtual_time
async def test_prewarmed_connections_open_at_start_and_serve_every_later_call() -> None:
    async with scripted_native(prewarm=3) as native:
        await native.transport.start([ORIGIN])
        assert len(native.network.connects) == 3
        assert native.transport.open_connections() == native.pool.idle_connections == 3
        for index in range(5):
            await native.serve(b"%d" % index)
        assert len(native.network.connects) == 3
        stats = native.transport.stats
        assert (stats.connections_opened, stats.requests, stats.reused) == (3, 5, 5)


@virtual_time
async def test_a_burst_opens_one_socket_per_concurrent_call_and_keeps_them_all() -> None:
    async with scripted_native(max_connections=8) as native:
        calls = [native.start(b"%d" % index) for index in range(4)]
        for _ in calls:
            sock = await native.network.next_socket()
            sock.feed(response((await sock.next_request())[-1:]))
        assert sorted(a.body for a in await asyncio.gather(*calls)) == [b"0", b"1", b"2", b"3"]
        assert native.pool.idle_connections == 4
        # Four calls again, at once: the four idle sockets, no new one.
        again = [native.start(b"%d" % index) for index in range(4)]
        for _ in again:
            sock = await native.network.socket_with_request()
            sock.feed(response((await sock.next_request())[-1:]))
        assert sorted(a.body for a in await asyncio.gather(*again)) == [b"0", b"1", b"2", b"3"]
        assert len(native.network.connects) == 4
        assert native.transport.stats.reused == 4


# -- the connection limit ------------------------------------------------------------------


@virtual_time
async def test_calls_past_max_connections_queue_and_are_served_in_arrival_order(
    clock: VirtualClock,
) -> None:
    async with scripted_native(max_connections=2, pool_timeout_ms=60_000) as native:
        calls = [native.start(b"%d" % index) for index in range(6)]
        await clock.idle()
        assert len(native.pool._waiters) == 4
        # Calls 0 and 1 open the two connections, in whichever order their connects ran.
        opened = [(await sock.next_request(), sock) for sock in native.network.sockets]
        (sent_0, first), (sent_1, second) = sorted(opened, key=lambda pair: pair[0])
        order = [sent_0[-1:], sent_1[-1:]]
        first.feed(response(sent_0[-1:]))
        second.feed(response(sent_1[-1:]))
        # The queued calls take the released connections in the order they arrived.
        for sock in (first, second, first, second):
            sent = await sock.next_request()
            order.append(sent[-1:])
            sock.feed(response(sent[-1:]))
        assert order == [b"0", b"1", b"2", b"3", b"4", b"5"]
        assert [(await call).body for call in calls] == order
        assert native.network.peak_open == 2
        assert len(native.network.connects) == 2


@virtual_time
async def test_a_released_socket_goes_to_a_waiter_before_the_idle_stack(
    clock: VirtualClock,
) -> None:
    async with scripted_native(max_connections=1, pool_timeout_ms=60_000) as native:
        busy = native.start(b"1")
        sock = await native.sent(busy)
        waiting = native.start(b"2")
        await clock.advance(5.0)  # the waiter waits, however long
        assert not waiting.done()
        sock.feed(response(b"1"))
        assert (await busy).body == b"1"
        # Handed over directly: never idle, so no newcomer could have taken it.
        assert native.pool.idle_connections == 0
        assert await sock.next_request() == head(1) + b"2"
        sock.feed(response(b"2"))
        assert (await waiting).body == b"2"
        assert native.pool.idle_connections == 1


@virtual_time
async def test_a_waiter_that_gave_up_never_receives_the_next_socket(clock: VirtualClock) -> None:
    async with scripted_native(max_connections=1, pool_timeout_ms=60_000) as native:
        busy = native.start(b"1")
        sock = await native.sent(busy)
        leaving = native.start(b"2", deadline=clock.now() + 1.0)
        staying = native.start(b"3", deadline=clock.now() + 3.0)
        await clock.advance(2.0)
        assert isinstance(leaving.exception(), errors.DeadlineExceeded)
        assert not staying.done()
        sock.feed(response(b"1"))
        assert (await busy).body == b"1"
        assert await sock.next_request() == head(1) + b"3"
        sock.feed(response(b"3"))
        assert (await staying).body == b"3"
        assert not native.pool.slot_wanted()


@pytest.mark.parametrize("how", ["close", "reset"])
@virtual_time
async def test_a_socket_lost_mid_call_hands_its_slot_to_a_waiter(how: str) -> None:
    async with scripted_native(max_connections=1, pool_timeout_ms=60_000) as native:
        busy = native.start(b"1")
        sock = await native.sent(busy)
        sock.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart")
        waiting = native.start(b"2")
        await asyncio.sleep(0)
        sock.close_from_server() if how == "close" else sock.reset()
        with pytest.raises(errors.ReadError):
            await busy
        fresh = await native.network.next_socket()
        assert await fresh.next_request() == head(1) + b"2"
        fresh.feed(response(b"2"))
        assert (await waiting).body == b"2"
        assert native.network.peak_open == 1


# -- closed by the peer while idle -----------------------------------------------------------


@pytest.mark.parametrize("how", ["close", "reset"])
@virtual_time
async def test_a_socket_the_peer_closed_while_idle_leaves_the_pool_at_once(
    how: str, clock: VirtualClock
) -> None:
    async with scripted_native() as native:
        sock = await native.serve(b"one")
        await clock.advance(10.0)
        sock.close_from_server() if how == "close" else sock.reset()
        await clock.idle()
        assert native.pool.open_connections == 0
        assert native.transport.stats.connections_closed == 1
        # Never offered to a call: no request lands on it, and no stale retry is needed.
        fresh = await native.serve(b"two")
        assert fresh is not sock
        assert native.transport.stats.stale_retries == 0
        assert native.transport.stats.reused == 0


@virtual_time
async def test_only_the_socket_the_peer_closed_is_dropped() -> None:
    async with scripted_native(max_connections=3) as native:
        calls = [native.start(b"%d" % index) for index in range(3)]
        socks = [await native.network.next_socket() for _ in calls]
        for sock in socks:
            sock.feed(response((await sock.next_request())[-1:]))
        await asyncio.gather(*calls)
        socks[2].close_from_server()  # the top of the idle stack
        assert await native.serve(b"next") is socks[1]  # the next one down
        assert not socks[0].closed_by_client and not socks[1].closed_by_client
        assert native.pool.open_connections == 2
        assert native.transport.stats.reused == 1
        assert len(native.network.connects) == 3


# -- eviction by the idle timeout --------------------------------------------------------------


@virtual_time
async def test_the_reaper_closes_idle_sockets_between_one_and_one_and_a_half_timeouts(
    clock: VirtualClock,
) -> None:
    async with scripted_native(max_connections=2, idle_timeout_s=30) as native:
        started = clock.now()
        calls = [native.start(b"a"), native.start(b"b")]
        for _ in calls:
            sock = await native.network.next_socket()
            sock.feed(response((await sock.next_request())[-1:]))
        await asyncio.gather(*calls)
        old, used = native.network.sockets
        await clock.advance(20.0)
        assert await native.serve(b"again") is used  # the LIFO top, 20 s later
        await clock.advance_to(started + 30.0)
        assert not old.closed_by_client  # never before its idle timeout
        await clock.advance_to(started + 45.0)  # the reaper runs every 15 s
        assert old.closed_by_client
        await clock.advance_to(started + 20.0 + 30.0)
        assert not used.closed_by_client
        await clock.advance_to(started + 20.0 + 45.0)
        assert used.closed_by_client
        assert native.pool.open_connections == 0
        assert native.pool._reaper is None  # nothing idle: no timer left running


@virtual_time
async def test_a_socket_past_its_idle_timeout_before_the_reaper_runs_is_never_used(
    clock: VirtualClock,
) -> None:
    async with scripted_native(idle_timeout_s=30) as native:
        started = clock.now()
        await clock.advance(14.0)
        old = await native.serve(b"one")  # idle from 14 s; the reaper looks at 29, 44 s
        await clock.advance_to(started + 44.5 - 0.001)
        assert not old.closed_by_client
        fresh = await native.serve(b"two")  # 30.5 s idle: past the timeout
        assert fresh is not old
        assert old.closed_by_client
        assert old.unread() == b""
        assert native.transport.stats.reused == 0


@virtual_time
async def test_a_socket_used_just_inside_its_idle_timeout_is_reused(clock: VirtualClock) -> None:
    async with scripted_native(idle_timeout_s=30) as native:
        sock = await native.serve(b"one")
        for _ in range(4):  # every use restarts its idle time
            await clock.advance(29.9)
            assert await native.serve(b"again") is sock
        assert native.transport.stats.reused == 4
        assert len(native.network.connects) == 1
