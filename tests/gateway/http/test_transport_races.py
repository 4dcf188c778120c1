"""Races between a request's cancellation and its socket's next user.

A hedge loser can be cancelled after its response already completed: the
socket went back to the pool and on to another request before the loser's
task ran again. Giving up must then leave the socket (and the other
request) alone. Found by ``python -m bench.tail``, which hung on it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway import errors
from gateway._http.message import Origin, RawResponse
from gateway._http.native import NativeTransport
from tests.gateway.conftest import StubRequest, StubServer, TransportFactory, prepared, response


async def _echo(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(response(request.body))
    return True


async def _race_until_the_answer_is_in_but_not_delivered(
    transport: NativeTransport, server: StubServer, task: asyncio.Task[object]
) -> None:
    """Return in the loop turn where the socket is idle again but ``task`` has not resumed."""
    pool = transport._pools[Origin.from_url(server.url)]
    for _ in range(10_000):
        await asyncio.sleep(0)
        if pool.idle_connections == 1 and not task.done():
            return
        if task.done():
            break
    pytest.fail("could not observe the answer before the caller resumed")


async def test_a_late_cancellation_never_orphans_the_next_request(
    stub_server: object, make_transport: TransportFactory
) -> None:
    server = await stub_server(_echo)  # type: ignore[operator]
    transport = make_transport("native", max_connections=1)
    assert isinstance(transport, NativeTransport)
    deadline = time.monotonic() + 5
    await transport.request(prepared(server.url, body=b"warm"), deadline)

    loser = asyncio.ensure_future(transport.request(prepared(server.url, body=b"loser"), deadline))

    async def cancel_then_reuse() -> RawResponse:
        await _race_until_the_answer_is_in_but_not_delivered(transport, server, loser)
        loser.cancel()  # delivered only when the loser's task runs next
        # Awaited inline, so the next request takes the same socket and sends
        # before the loser's task sees its cancellation.
        return await transport.request(prepared(server.url, body=b"next"), deadline)

    answer = await asyncio.wait_for(cancel_then_reuse(), 3)

    assert answer.body == b"next"
    with pytest.raises(asyncio.CancelledError):
        await loser
    # The socket stays healthy and in use: one connection for everything.
    assert (await transport.request(prepared(server.url, body=b"after"), deadline)).body == b"after"
    assert server.accepted == 1


async def test_a_timer_firing_on_the_right_request_still_fails_it(
    stub_server: object, make_transport: TransportFactory
) -> None:
    async def never(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(10)
        return False

    server = await stub_server(never)  # type: ignore[operator]
    transport = make_transport("native")
    with pytest.raises(errors.DeadlineExceeded):
        await transport.request(prepared(server.url), time.monotonic() + 0.05)
