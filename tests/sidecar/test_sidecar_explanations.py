"""EnableExplanations through the sidecar, from an unmodified boto3 client: a cached answer
without explanations is never served to a call that asks for them, nor the reverse, in the
near tier or through Redis."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gateway import Gateway
from gateway.sidecar import Sidecar
from tests._boto import ClientFactory
from tests._explaining_upstream import (
    EXPLAIN,
    EXPLAINED_BODY,
    PLAIN_BODY,
    ExplainingUpstream,
    explaining_upstream,
    wait_for_redis_entries,
)


def _gateway(upstream: ExplainingUpstream, cache: dict[str, Any]) -> Gateway:
    return Gateway(
        region="us-east-1",
        endpoint_url=upstream.url,
        credentials=("AK", "SK"),
        # 1 s to connect: the 100 ms default can be missed on a loaded test machine.
        cache={"ttl_s": 60, "redis_connect_timeout_ms": 1000, **cache},
    )


async def _call(client: Any, explain: str | None) -> tuple[bytes, str | None]:
    params: dict[str, Any] = {"EndpointName": "ep", "Body": b"1,2", "ContentType": "text/csv"}
    if explain is not None:
        params["EnableExplanations"] = explain
    response = await asyncio.to_thread(client.invoke_endpoint, **params)
    body = await asyncio.to_thread(response["Body"].read)
    return body, response["ResponseMetadata"]["HTTPHeaders"].get("x-gateway-cache")


@pytest.mark.parametrize("first", [None, EXPLAIN], ids=["plain-first", "explained-first"])
async def test_the_near_tier_keeps_explained_and_plain_answers_apart(
    boto_client: ClientFactory, first: str | None
) -> None:
    second = EXPLAIN if first is None else None
    expected = {None: PLAIN_BODY, EXPLAIN: EXPLAINED_BODY}
    async with (
        explaining_upstream() as upstream,
        _gateway(upstream, {"namespace": f"t-{uuid.uuid4().hex[:12]}"}) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
    ):
        client = boto_client(sidecar.url)
        assert await _call(client, first) == (expected[first], None)
        assert await _call(client, second) == (expected[second], None)
        assert await _call(client, first) == (expected[first], "near")
        assert await _call(client, second) == (expected[second], "near")
    assert upstream.calls == [first, second]


@pytest.mark.parametrize("first", [None, EXPLAIN], ids=["plain-first", "explained-first"])
async def test_redis_keeps_explained_and_plain_answers_apart(
    boto_client: ClientFactory, redis_url: str, first: str | None
) -> None:
    second = EXPLAIN if first is None else None
    expected = {None: PLAIN_BODY, EXPLAIN: EXPLAINED_BODY}
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    cache = {"namespace": namespace, "redis_url": redis_url, "redis_socket_timeout_ms": 2000}
    async with explaining_upstream() as upstream:
        async with (
            _gateway(upstream, cache) as gateway,
            Sidecar(gateway, "127.0.0.1", 0) as sidecar,
        ):
            assert await _call(boto_client(sidecar.url), first) == (expected[first], None)
            await wait_for_redis_entries(redis_url, namespace, 1)
        # A second sidecar: its near tier is empty, Redis holds the first answer.
        async with (
            _gateway(upstream, cache) as gateway,
            Sidecar(gateway, "127.0.0.1", 0) as sidecar,
        ):
            client = boto_client(sidecar.url)
            assert await _call(client, second) == (expected[second], None)
            assert await _call(client, first) == (expected[first], "redis")
    assert upstream.calls == [first, second]
