"""An endpoint that goes away and comes back, and one restarted under load.

The emulator runs as a child process; stopping it closes every connection
the gateway holds and refuses new ones until a new process listens on the
same port. Expected outcome: while it is gone, calls fail fast with a
retryable transport error or DeadlineExceeded within their deadline; after
it is back, calls succeed on the same Gateway (the pool recovers by itself);
no call hangs, no socket or task is left behind.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import errors
from gateway.emulator import Emulator, EmulatorProcess
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, gateway_for
from tests.reliability.conftest import (
    bounded,
    no_client_tasks,
    open_connections,
    socket_fds,
    sockets_back_to,
)

CONFIG: dict[str, Any] = {
    "seed": 7,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"echo": {}},
}
POOL = {"prewarm": 2, "connect_timeout_ms": 300}
# Calls that fail while the endpoint is down fail with one of these.
DOWN_ERRORS = (errors.TransportError, errors.TimeoutError)


class Holder:
    def __init__(self) -> None:
        self.process = Emulator.start_subprocess(CONFIG)
        self.port = self.process.port

    def stop(self) -> None:
        self.process.stop()

    def restart(self) -> None:
        self.process = Emulator.start_subprocess(CONFIG, "127.0.0.1", self.port)


@pytest.fixture
def endpoint() -> Iterator[Holder]:
    holder = Holder()
    try:
        yield holder
    finally:
        holder.stop()


def _is_down_error(error: BaseException) -> bool:
    return isinstance(error, DOWN_ERRORS)


@pytest.mark.parametrize("kind", ["native", "httpx"])
async def test_endpoint_goes_away_and_comes_back(kind: str, endpoint: Holder) -> None:
    sockets_before = socket_fds()
    process: EmulatorProcess = endpoint.process
    async with gateway_for(process.url, transport=kind, pool=POOL) as gw:
        for i in range(5):
            assert (await bounded(gw.invoke("echo", b"up%d" % i, timeout=2), 2)).body == b"up%d" % i

        await asyncio.to_thread(endpoint.stop)
        for i in range(6):
            started = time.monotonic()
            with pytest.raises(DOWN_ERRORS) as caught:
                await bounded(gw.invoke("echo", b"down%d" % i, timeout=0.5), 0.5)
            assert _is_down_error(caught.value)
            # fails fast: by its deadline (plus scheduling slack on a busy machine)
            assert time.monotonic() - started < 0.5 + 1.0
        await no_client_tasks()
        assert open_connections(gw.transport) == 0  # every socket to the dead server is gone

        await asyncio.to_thread(endpoint.restart)
        # The same gateway, no restart: the first call after the endpoint is back succeeds.
        for i in range(10):
            result = await bounded(gw.invoke("echo", b"back%d" % i, timeout=2), 2)
            assert result.body == b"back%d" % i
        await no_client_tasks()
        assert 1 <= open_connections(gw.transport) <= gw.config.pool.max_connections
    await no_client_tasks()
    await sockets_back_to(sockets_before)


async def test_restart_under_load(endpoint: Holder) -> None:
    sockets_before = socket_fds()
    outcomes: Counter[str] = Counter()
    unexpected: list[BaseException] = []
    stop = asyncio.Event()

    async def worker(gw: Any, number: int) -> None:
        sequence = 0
        while not stop.is_set():
            sequence += 1
            body = b"w%d-%d" % (number, sequence)
            try:
                result = await bounded(gw.invoke("echo", body, timeout=1.0), 1.0)
            except DOWN_ERRORS as error:
                outcomes[type(error).__name__] += 1
                await asyncio.sleep(0.01)
                continue
            except BaseException as error:  # Hung or anything unexpected
                unexpected.append(error)
                return
            assert result.body == body
            outcomes["ok"] += 1

    async with gateway_for(endpoint.process.url, pool=POOL) as gw:
        workers = [asyncio.create_task(worker(gw, n)) for n in range(12)]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(endpoint.stop)
        await asyncio.sleep(0.3)
        before_restart = outcomes["ok"]
        await asyncio.to_thread(endpoint.restart)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*workers)
        assert unexpected == []
        assert before_restart > 0 and outcomes["ok"] > before_restart
        assert sum(n for name, n in outcomes.items() if name != "ok") > 0  # the restart was felt
        # Afterwards every call succeeds.
        results = await asyncio.gather(
            *(bounded(gw.invoke("echo", b"after%d" % i, timeout=2), 2) for i in range(20))
        )
        assert [r.body for r in results] == [b"after%d" % i for i in range(20)]
        await no_client_tasks()
    await no_client_tasks()
    await sockets_back_to(sockets_before)
