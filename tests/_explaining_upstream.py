"""A real HTTP upstream whose answer depends on EnableExplanations, and a wait for Redis.

Shared by the library and sidecar tests that a cached answer without explanations is
never served to a call that asks for them, nor the reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

from tests.gateway.conftest import StubRequest, StubServer, response

EXPLAIN: str = "`true`"
PLAIN_BODY = b'{"score": 0.5}'
EXPLAINED_BODY = b'{"score": 0.5, "explanations": {"kernel_shap": [0.1]}}'


@dataclass
class ExplainingUpstream:
    """Answers InvokeEndpoint with explanations exactly when the call asks for them."""

    server: StubServer | None = None
    calls: list[str | None] = field(default_factory=list)  # each call's EnableExplanations

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def reply(self, request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        explain = request.headers.get("x-amzn-sagemaker-enable-explanations")
        self.calls.append(explain)
        body = EXPLAINED_BODY if explain else PLAIN_BODY
        headers = (("content-type", "application/json"), ("x-amzn-requestid", "r-1"))
        writer.write(response(body, headers=headers))
        return True


@contextlib.asynccontextmanager
async def explaining_upstream() -> AsyncIterator[ExplainingUpstream]:
    upstream = ExplainingUpstream()
    upstream.server = await StubServer(upstream.reply).start()
    try:
        yield upstream
    finally:
        await upstream.server.close()


async def wait_for_redis_entries(redis_url: str, namespace: str, count: int) -> None:
    """Until ``count`` answers are stored under ``namespace`` (the tier writes behind)."""
    async with Redis.from_url(redis_url) as raw:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            keys = [key async for key in raw.scan_iter(match=f"{namespace}:k1:*")]
            if len(keys) >= count:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} entries reached Redis under {namespace}")
