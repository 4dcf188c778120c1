"""EnableExplanations through the library: a cached answer without explanations is never
served to a call that asks for them, nor the reverse, in the near tier or through Redis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway import Gateway
from tests._explaining_upstream import (
    EXPLAIN,
    EXPLAINED_BODY,
    PLAIN_BODY,
    ExplainingUpstream,
    explaining_upstream,
    wait_for_redis_entries,
)
from tests.gateway.conftest import gateway_for


def _gateway(upstream: ExplainingUpstream, cache: dict[str, Any]) -> Gateway:
    return gateway_for(upstream.url, cache={"ttl_s": 60, **cache})


async def _call(gw: Gateway, explain: str | None) -> tuple[bytes, str | None]:
    result = await gw.invoke(
        "ep", b"1,2", content_type="text/csv", enable_explanations=explain, timeout=5
    )
    return result.body, result.cache


@pytest.mark.parametrize("first", [None, EXPLAIN], ids=["plain-first", "explained-first"])
async def test_the_near_tier_keeps_explained_and_plain_answers_apart(first: str | None) -> None:
    second = EXPLAIN if first is None else None
    expected = {None: PLAIN_BODY, EXPLAIN: EXPLAINED_BODY}
    async with (
        explaining_upstream() as upstream,
        _gateway(upstream, {"namespace": f"t-{uuid.uuid4().hex[:12]}"}) as gw,
    ):
        assert await _call(gw, first) == (expected[first], None)
        assert await _call(gw, second) == (expected[second], None)  # not the cached one
        assert await _call(gw, first) == (expected[first], "near")
        assert await _call(gw, second) == (expected[second], "near")
    assert upstream.calls == [first, second]


@pytest.mark.parametrize("first", [None, EXPLAIN], ids=["plain-first", "explained-first"])
async def test_redis_keeps_explained_and_plain_answers_apart(
    redis_url: str, first: str | None
) -> None:
    second = EXPLAIN if first is None else None
    expected = {None: PLAIN_BODY, EXPLAIN: EXPLAINED_BODY}
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    # A 1 s connect deadline: the 100 ms default can miss on a busy machine, which opens
    # the circuit and turns the Redis hit this test is about into a load.
    cache = {
        "namespace": namespace,
        "redis_url": redis_url,
        "redis_socket_timeout_ms": 2000,
        "redis_connect_timeout_ms": 1000,
    }
    async with explaining_upstream() as upstream:
        async with _gateway(upstream, cache) as filler:
            assert await _call(filler, first) == (expected[first], None)
            await wait_for_redis_entries(redis_url, namespace, 1)
        # Another process: its near tier is empty, Redis holds the first answer.
        async with _gateway(upstream, cache) as reader:
            assert await _call(reader, second) == (expected[second], None)
            assert await _call(reader, first) == (expected[first], "redis")
    assert upstream.calls == [first, second]
