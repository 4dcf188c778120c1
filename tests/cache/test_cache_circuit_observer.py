"""The cache tells its observer when Redis is lost and when it is back (real redis-server)."""

from __future__ import annotations

import asyncio

from gateway.cache import CacheConfig, Entry, PredictionCache
from tests._redis_procs import RedisServer


async def test_redis_lost_at_start_then_back_then_lost_again() -> None:
    server = RedisServer()  # its port, not listening yet
    told: list[str] = []
    cache = PredictionCache(
        CacheConfig(redis_url=server.url, circuit_reset_s=0.05, circuit_failures=1)
    )
    cache.observe_circuit(told.append)
    try:
        await cache.start()  # unreachable: the circuit opens at once
        assert told == ["open"]
        server.start()
        for _ in range(200):  # lookups run the half-open trial in the background
            await cache.get_many(["k"])
            if told[-1] == "closed":
                break
            await asyncio.sleep(0.02)
        assert told == ["open", "closed"]  # trials in between are not reported
        cache.put("k", Entry(b"v", "text/plain"))
        server.kill()
        for _ in range(200):
            await cache.get_many(["other"])
            if told[-1] == "open":
                break
            await asyncio.sleep(0.02)
        assert told == ["open", "closed", "open"]
    finally:
        await cache.close()
        server.cleanup()
