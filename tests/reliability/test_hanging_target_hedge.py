"""A hedged route where one target never answers must keep answering.

One origin, one pool of 8, two targets on it: ``hang`` (a tenth of the
traffic) accepts requests and never answers them; ``good`` answers at once.
The hedge takes every ``hang`` call to ``good``. Expected: every call gets
its own answer; the losers' sockets never fill the pool (no PoolTimeout),
pool exhaustion is never charged to ``good``, and the lost attempts are
charged to ``hang``, which gets ejected while ``good`` never does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway.routing import TargetHealth
from tests.gateway.conftest import TRANSPORTS, gateway_for
from tests.reliability.conftest import bounded, eventually, no_client_tasks, open_connections

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)

POOL_SIZE = 8
CALLERS = 4
CALLS_PER_CALLER = 60
CALL_TIMEOUT_S = 1.0


@dataclass
class HalfDeadServer:
    """Answers ``/endpoints/good/...`` at once (the body echoed); never answers anything else."""

    port: int = 0
    hung_open: int = 0  # connections holding an unanswered request right now
    answered: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> HalfDeadServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._answer(reader, writer)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                if not head.startswith(b"POST /endpoints/good/"):
                    await self._hold(reader)
                    return
                self.answered += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()

    async def _hold(self, reader: asyncio.StreamReader) -> None:
        """Never answer; notice when the client lets the socket go."""
        self.hung_open += 1
        try:
            while await reader.read(65536):
                pass
        finally:
            self.hung_open -= 1

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        await eventually(lambda: not self._writers, "every server connection closed")


@pytest.fixture
async def server() -> AsyncIterator[HalfDeadServer]:
    half_dead = await HalfDeadServer().start()
    yield half_dead
    await half_dead.close()


def _routes(url: str) -> dict[str, Any]:
    return {
        "pair": {
            "targets": [
                {"endpoint": "hang", "url": url, "weight": 1},
                {"endpoint": "good", "url": url, "weight": 9},
            ],
            "hedge": {
                "enabled": True,
                "max_extra_load": 0.5,
                "quantile": 0.5,
                "initial_delay_ms": 5,
                "min_delay_ms": 5,
            },
            "retry": {"max_attempts": 1, "budget_ratio": 1.0},
        }
    }


async def _caller(gw: Gateway, number: int, failures: list[BaseException]) -> None:
    for n in range(CALLS_PER_CALLER):
        body = b"caller-%d-call-%d" % (number, n)
        try:
            result = await bounded(gw.invoke("pair", body, timeout=CALL_TIMEOUT_S), CALL_TIMEOUT_S)
        except errors.GatewayError as error:
            failures.append(error)
            continue
        assert result.body == body
        assert result.target == "good"


async def test_a_hanging_target_under_hedging_never_takes_the_route_down(
    kind: str, server: HalfDeadServer
) -> None:
    gw: Gateway
    async with gateway_for(
        server.url,
        transport=kind,
        routes=_routes(server.url),
        pool={"max_connections": POOL_SIZE, "prewarm": 0, "pool_timeout_ms": 200},
    ) as gw:
        failures: list[BaseException] = []
        await asyncio.gather(*(_caller(gw, number, failures) for number in range(CALLERS)))
        assert [type(error).__name__ for error in failures] == []
        assert server.answered >= CALLERS * CALLS_PER_CALLER
        assert open_connections(gw.transport) <= POOL_SIZE
        targets = {state.target.endpoint: state for state in gw.route("pair").targets}
        # The lost attempts were charged to the target that never answered ...
        assert targets["hang"].ejections >= 1
        assert targets["hang"].state is not TargetHealth.HEALTHY
        # ... and nothing was ever charged to the one that did.
        assert targets["good"].ejections == 0
        assert targets["good"].consecutive_failures == 0
    await no_client_tasks()


async def test_pool_exhaustion_is_charged_to_no_target(kind: str, server: HalfDeadServer) -> None:
    routes = {"solo": {"targets": [{"endpoint": "hang", "url": server.url}]}}
    gw: Gateway
    async with gateway_for(
        server.url,
        transport=kind,
        routes=routes,
        pool={"max_connections": 1, "prewarm": 0, "pool_timeout_ms": 20},
    ) as gw:
        holder = asyncio.ensure_future(gw.invoke("solo", b"holds the only socket", timeout=30))
        await eventually(lambda: server.hung_open == 1, "the holder's request arrived")
        (target,) = gw.route("solo").targets
        # The pool timeout first, then the call's deadline while waiting for the pool.
        with pytest.raises(errors.PoolTimeout):
            await bounded(gw.invoke("solo", b"one", timeout=5), 5)
        if kind == "native":  # httpx: its pool wait and the deadline's timer race
            with pytest.raises(errors.DeadlineExceeded) as waited:
                await bounded(gw.invoke("solo", b"two", timeout=0.01), 0.01)
            assert not waited.value.sent
        assert target.consecutive_failures == 0
        assert target.outstanding == 1  # only the holder
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
    await no_client_tasks()
