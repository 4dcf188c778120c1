"""A Redis that answers wrongly, through a Gateway and the sidecar: calls go on, none hangs.

Redis is ``bench.bad_redis.MisbehavingRedis`` (a real RESP server answering
data commands with integers, short arrays, garbage, or not at all); the
upstream is the emulator over HTTP.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bench.bad_redis import MisbehavingRedis
from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar
from gateway.sidecar._config import SidecarConfig
from tests.reliability.conftest import bounded, no_client_tasks

CALL_TIMEOUT_S = 2.0
SLOW_MS = 3000.0


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = {"seed": 3, "endpoints": {"echo": {}, "slow": {"latency": {"base_ms": SLOW_MS}}}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


@pytest.fixture
async def bad_redis() -> AsyncIterator[MisbehavingRedis]:
    async with MisbehavingRedis(seed=5) as server:
        yield server


def _gateway(emulator: Emulator, redis_url: str | None) -> Gateway:
    cache: dict[str, Any] = {
        "namespace": f"bad-{uuid.uuid4().hex[:10]}",
        "near_max_entries": 1,  # nearly every lookup goes to Redis
        "redis_socket_timeout_ms": 100,
        "circuit_failures": 1000,  # keep asking the bad Redis
    }
    if redis_url is not None:
        cache["redis_url"] = redis_url
    return Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), cache=cache)


async def test_calls_through_a_redis_answering_at_random_wrongly_all_succeed(
    emulator: Emulator, bad_redis: MisbehavingRedis
) -> None:
    bad_redis.mode = "mixed"
    async with _gateway(emulator, bad_redis.url) as gw:

        async def call(n: int) -> None:
            body = b"same-%d" % (n % 4)  # identical concurrent calls share one load
            result = await bounded(gw.invoke("echo", body, timeout=CALL_TIMEOUT_S), CALL_TIMEOUT_S)
            assert result.body == body

        for _ in range(5):
            await asyncio.gather(*(call(n) for n in range(16)))
        cache = gw.prediction_cache
        assert cache is not None
        assert cache.stats.redis_bad_replies > 0 and cache.stats.redis_timeouts > 0
    assert sum(bad_redis.done.values()) > 0
    await no_client_tasks()


async def test_a_call_waiting_for_an_identical_one_gives_up_at_its_own_deadline(
    emulator: Emulator,
) -> None:
    async with _gateway(emulator, None) as gw:
        cache = gw.prediction_cache
        assert cache is not None
        first = asyncio.create_task(gw.invoke("slow", b"same", timeout=SLOW_MS / 1000 * 3))
        await asyncio.sleep(0)
        assert cache.stats.misses == 1  # the first call leads a load (the emulator holds it)

        with pytest.raises(errors.DeadlineExceeded):
            await bounded(gw.invoke("slow", b"same", timeout=0.2), 0.2)

        assert not first.done()  # it gave up at its own deadline, not at the first call's end
        assert (await bounded(first, SLOW_MS / 1000 * 3)).body == b"same"


async def test_after_a_bad_reply_the_sidecar_keeps_serving_with_a_small_in_flight_limit(
    emulator: Emulator, bad_redis: MisbehavingRedis
) -> None:
    bad_redis.mode = "integer"
    async with (
        _gateway(emulator, bad_redis.url) as gw,
        Sidecar(gw, "127.0.0.1", 0, config=SidecarConfig(max_in_flight=2)) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=CALL_TIMEOUT_S + 2) as http,
    ):

        async def call(body: bytes) -> httpx.Response:
            return await http.post(
                "/endpoints/echo/invocations",
                content=body,
                headers={"content-type": "text/plain", "x-gateway-timeout-ms": "2000"},
            )

        first = await call(b"key-1")
        assert (first.status_code, first.content) == (200, b"key-1")
        # The same key (its Redis read got the integer) and others, up to the in-flight
        # limit at once, many times the limit in all.
        for pair in [(1, 1), (2, 3)] * 4:
            answers = await asyncio.gather(*(call(b"key-%d" % n) for n in pair))
            assert [(a.status_code, a.content) for a in answers] == [
                (200, b"key-%d" % n) for n in pair
            ]
    assert bad_redis.done["integer"] > 0
