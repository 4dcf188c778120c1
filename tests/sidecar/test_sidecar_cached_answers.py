"""What the cache holds reaches SDK clients only as safe header values.

An entry in Redis whose content type holds CR/LF made every sidecar call for
that key a 500, and a bare CR was relayed for botocore to read as another
header. Such an entry is a miss: the call is answered from upstream.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from redis.asyncio import Redis

from gateway.emulator import Emulator
from gateway.sidecar import Sidecar
from tests.cache._cache_support import faulty_writer_entry
from tests.sidecar.conftest import ClientFactory, make_gateway


@pytest.mark.parametrize(
    "content_type", ["text/csv\r\nx-injected: 1", "text/csv\rx-injected: 1", "text/csv\n"]
)
async def test_a_cached_content_type_with_line_breaks_is_a_miss_not_a_500(
    emulator: Emulator, boto_client: ClientFactory, redis_url: str, content_type: str
) -> None:
    cache = {
        "namespace": f"t-{uuid.uuid4().hex[:12]}",
        "redis_url": redis_url,
        "redis_socket_timeout_ms": 2000,
    }
    async with (
        make_gateway(emulator, cache=cache) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
    ):
        prediction_cache = gateway.prediction_cache
        assert prediction_cache is not None
        key = prediction_cache.key_for("echo", None, None, "text/csv", None, None, b"1,2")
        now = time.time()
        async with Redis.from_url(redis_url) as raw:
            await raw.set(key, faulty_writer_entry(b"0.99", content_type, now, now + 60), ex=60)

        client = boto_client(sidecar.url)
        response = await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="echo", Body=b"1,2", ContentType="text/csv"
        )

    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["Body"].read() == b"1,2"  # the emulator's answer, not the entry's
    assert response["ContentType"] == "text/csv"
    assert "x-injected" not in response["ResponseMetadata"]["HTTPHeaders"]
