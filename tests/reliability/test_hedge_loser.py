"""A hedge whose loser is mid-response when the winner returns.

Target ``a`` sits behind the fault proxy in ``slow`` mode: its response head
arrives at once and the body dribbles in over about half a second. Target
``b`` is the emulator directly. ``a`` is weighted so the balancer always
picks it first; the hedge goes to ``b`` and wins. Expected outcome: the
caller gets the winner's answer to *its own* request; the loser's socket,
left mid-body, is drained or closed, never handed to another call while
dirty, so every later call on the pool gets its own correct body; no task
or socket is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from tests._faultproxy import FaultProxy
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, TRANSPORTS, gateway_for
from tests.reliability.conftest import (
    bounded,
    eventually,
    no_client_tasks,
    open_connections,
    socket_fds,
    sockets_back_to,
)

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = {
        "seed": 3,
        "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
        "endpoints": {"a": {}, "b": {}},
    }
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


def _routes(proxy: FaultProxy, emulator: Emulator) -> dict[str, Any]:
    return {
        "pair": {
            "targets": [
                {"endpoint": "a", "url": proxy.url, "weight": 1000},
                {"endpoint": "b", "url": emulator.url, "weight": 1},
            ],
            "hedge": {"enabled": True, "max_extra_load": 0.5, "min_delay_ms": 20},
            "retry": {"max_attempts": 1},
        }
    }


def _body(tag: str, n: int) -> bytes:
    # Long enough that the dribble takes a while; unique so a mixed-up answer shows.
    return (f"{tag}-{n:04d}|" * 400).encode()


def _server_connections(emulator: Emulator) -> int:
    server: Any = emulator._server
    count: int = server.connection_count
    return count


async def test_hedge_loser_mid_body_is_never_reused_dirty(kind: str, emulator: Emulator) -> None:
    sockets_before = socket_fds()
    async with FaultProxy("127.0.0.1", emulator.port) as proxy:
        gw: Gateway
        async with gateway_for(
            emulator.url, transport=kind, routes=_routes(proxy, emulator), pool={"prewarm": 0}
        ) as gw:
            # Warm-up: latency samples for the hedge delay, all answered by ``a``.
            for n in range(40):
                result = await bounded(gw.invoke("pair", _body("warm", n), timeout=5), 5)
                assert result.body == _body("warm", n)
            proxy.slow_chunk, proxy.slow_delay = 256, 0.02  # ~8 KB over ~0.6 s
            await proxy.set_mode("slow")

            losers_mid_body = 0
            for n in range(8):
                dribbled_before = proxy.dribbled
                body = _body("race", n)
                result = await bounded(gw.invoke("pair", body, timeout=5), 5)
                assert result.body == body  # the winner's answer, to this request
                # A hedge won while the loser was mid-response (its head and some body on
                # the way); on a busy machine a loser may not have started yet.
                if result.hedged and result.target == "b" and proxy.dribbled > dribbled_before:
                    losers_mid_body += 1
            assert losers_mid_body >= 1

            # Loser sockets end drained (back in the pool) or closed; never reused dirty.
            await proxy.set_mode("pass")
            for round_ in range(3):
                bodies = [_body(f"after{round_}", n) for n in range(12)]
                results = await asyncio.gather(
                    *(bounded(gw.invoke("pair", b, timeout=10), 10) for b in bodies)
                )
                assert [r.body for r in results] == bodies
            await no_client_tasks()
            # Every socket the client holds is one a server sees (no half-dead leftovers).
            await eventually(
                lambda: open_connections(gw.transport) == _server_connections(emulator),
                "client sockets == server sockets",
            )
    await no_client_tasks()
    await sockets_back_to(sockets_before)
