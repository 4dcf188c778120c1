"""Redis killed, made slow, and restarted while calls go through a Gateway with a cache.

The cache fails open. Expected outcome: no call fails; no call waits for
Redis much past the Redis operation timeout (a hang check: a call taking
a large part of the time Redis is stalled would mean it waited on Redis);
after Redis is back the Redis tier serves hits again; nothing leaks.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from tests._redis_procs import RedisServer
from tests.reliability.conftest import bounded, no_client_tasks, socket_fds, sockets_back_to

STALL_S = 5.0
# A call must finish well inside the stall; the Redis op timeout is 50 ms. The margin is
# wide: on a loaded 2-core machine a worker can be off the CPU for a second or two.
NOT_WAITING_ON_REDIS_S = 2.5


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = EmulatorConfig.from_dict({"seed": 2, "endpoints": {"echo": {}}})
    async with Emulator(config) as emu:
        yield emu


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    # A dedicated server (never the shared one): it gets killed and stalled.
    with RedisServer.running("--enable-debug-command", "yes") as server:
        yield server


def _gateway(emulator: Emulator, redis_url: str) -> Gateway:
    cache: dict[str, Any] = {
        "namespace": f"rel-{uuid.uuid4().hex[:10]}",
        "redis_url": redis_url,
        "ttl_s": 60,
        "near_max_entries": 1,  # nearly every lookup goes to Redis
        "redis_socket_timeout_ms": 50,
        "redis_connect_timeout_ms": 100,
        "circuit_failures": 3,
        "circuit_reset_s": 0.2,
    }
    return Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), cache=cache)


async def _calls(gw: Gateway, tag: str, count: int) -> list[float]:
    """``count`` calls (half repeats of earlier keys, half new); each one's duration."""
    durations = []
    for n in range(count):
        body = f"{tag}-{n % max(1, count // 2)}".encode()
        started = time.monotonic()
        result = await bounded(gw.invoke("echo", body, timeout=2), 2)
        durations.append(time.monotonic() - started)
        assert result.body == body
    return durations


async def _during(gw: Gateway, tag: str, fault: Any) -> list[float]:
    """Calls while ``fault`` (a blocking function, run in a thread) is in progress."""
    stalled = asyncio.create_task(asyncio.to_thread(fault))
    await asyncio.sleep(0.2)  # let the fault take hold
    durations: list[float] = []
    while not stalled.done():
        durations += await _calls(gw, tag, 4)
        await asyncio.sleep(0.02)
    await stalled
    return durations


async def _until_redis_serves(gw: Gateway, tag: str) -> None:
    cache = gw.prediction_cache
    assert cache is not None
    for n in range(100):
        await _calls(gw, f"{tag}{n}", 2)
        if cache.stats.circuit_state == "closed":
            break
        await asyncio.sleep(0.05)
    assert cache.stats.circuit_state == "closed"
    body = f"{tag}-served".encode()
    await gw.invoke("echo", body)
    await cache.flush_writes()
    cache.clear_near()
    again = await gw.invoke("echo", body)
    assert again.cache == "redis" and again.body == body


async def test_redis_killed_slowed_and_restarted(
    emulator: Emulator, redis_server: RedisServer
) -> None:
    sockets_before = socket_fds()
    async with _gateway(emulator, redis_server.url) as gw:
        cache = gw.prediction_cache
        assert cache is not None
        # Warm up until Redis serves a hit. On a loaded machine one warm-up command can
        # miss the 50 ms op timeout and open the circuit; it closes again by itself.
        await _calls(gw, "warm", 20)
        await _until_redis_serves(gw, "warm")
        assert cache.stats.redis_hits > 0

        # 1. killed: every call is answered by the emulator.
        redis_server.kill()
        durations = await _calls(gw, "killed", 30)
        assert max(durations) < NOT_WAITING_ON_REDIS_S
        assert cache.stats.redis_errors + cache.stats.redis_timeouts > 0

        # 2. restarted on the same port: the Redis tier comes back by itself.
        await asyncio.to_thread(redis_server.start)
        await _until_redis_serves(gw, "restarted")

        # 3. slow: the whole server blocks in DEBUG SLEEP.
        timeouts_before = cache.stats.redis_timeouts
        durations = await _during(
            gw, "debug-sleep", lambda: redis_server.cli("DEBUG", "SLEEP", str(STALL_S))
        )
        assert durations and max(durations) < NOT_WAITING_ON_REDIS_S
        assert cache.stats.redis_timeouts > timeouts_before
        await _until_redis_serves(gw, "after-sleep")

        # 4. slow again: every client paused (CLIENT PAUSE), the server itself fine.
        timeouts_before = cache.stats.redis_timeouts

        def pause() -> None:
            redis_server.cli("CLIENT", "PAUSE", str(int(STALL_S * 1000)), "ALL")
            time.sleep(STALL_S)

        durations = await _during(gw, "client-pause", pause)
        assert durations and max(durations) < NOT_WAITING_ON_REDIS_S
        assert cache.stats.redis_timeouts > timeouts_before
        await _until_redis_serves(gw, "after-pause")
        # (the cache's own writer task runs until the gateway closes)
    await no_client_tasks()
    await sockets_back_to(sockets_before)
