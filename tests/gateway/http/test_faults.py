"""Each fault the network can throw, through a real TCP proxy, with its defined outcome."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway._http.native import NativeTransport
from gateway.emulator import Emulator
from tests._faultproxy import FaultProxy
from tests.gateway.conftest import TRANSPORTS, client_tasks, gateway_for

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)

BODY = b"x" * 20_000


# The client's own retries are off: these tests are about what the transport does.
NO_RETRY_ROUTES = {
    name: {"targets": [{"endpoint": name}], "retry": {"max_attempts": 1}}
    for name in ("echo", "dribble")
}


def gateway(url: str, kind: str, prewarm: int = 0, **pool: Any) -> Gateway:
    return gateway_for(
        url, transport=kind, pool={"prewarm": prewarm, **pool}, routes=NO_RETRY_ROUTES
    )


async def no_leaks(gw: Gateway, proxy: FaultProxy) -> None:
    """Nothing left running on the client, and every socket it holds is one the proxy sees."""
    transport: Any = gw.transport
    stable = 0
    for _ in range(300):
        if not client_tasks() and transport.open_connections() == proxy.open_links:
            stable += 1
            if stable == 5:
                break
        else:
            stable = 0
        await asyncio.sleep(0.01)
    assert client_tasks() == []
    assert transport.open_connections() == proxy.open_links


async def test_stale_reused_connection_is_retried_once(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        assert (await gw.invoke("echo", b"first")).body == b"first"
        await proxy.set_mode("close_on_reuse", close_after=1)
        if kind == "native":
            result = await gw.invoke("echo", b"second")
            assert result.body == b"second"
            assert gw.transport.stats.stale_retries == 1
            assert proxy.accepted == 2
        else:
            # httpx has no stale retry of its own: the failure surfaces, retryable,
            # for the gateway's retry policy to handle
            with pytest.raises(errors.ReadError) as caught:
                await gw.invoke("echo", b"second")
            assert caught.value.retryable
        # after a stale retry everything is normal again
        assert (await gw.invoke("echo", b"third")).body == b"third"
        await no_leaks(gw, proxy)


async def test_stale_prewarmed_connection_is_retried_once(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind, prewarm=2) as gw:
        assert proxy.accepted == 2
        await proxy.set_mode("close_on_reuse", close_after=0)
        if kind == "httpx":
            # httpx cannot tell a reused socket from a fresh one, so it never
            # resends silently: the stale case is a retryable error that the
            # gateway's retry policy (off in this test) would handle.
            with pytest.raises(errors.ReadError) as caught:
                await gw.invoke("echo", b"one")
            assert caught.value.retryable
            await proxy.set_mode("pass")
            assert (await gw.invoke("echo", b"two")).body == b"two"
            await no_leaks(gw, proxy)
            return
        assert (await gw.invoke("echo", b"one")).body == b"one"
        transport = gw.transport
        assert isinstance(transport, NativeTransport)
        assert transport.stats.stale_retries == 1
        assert proxy.accepted == 3
        await no_leaks(gw, proxy)


async def test_reset_before_head_on_a_fresh_connection(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("reset_before_head")
        with pytest.raises(errors.ReadError) as caught:
            await gw.invoke("echo", b"x")
        assert caught.value.retryable
        assert not isinstance(caught.value, errors.StaleConnection)
        assert proxy.requests == 1  # no silent retry
        assert gw.transport.stats.stale_retries == 0
        await no_leaks(gw, proxy)
        await proxy.set_mode("pass")
        assert (await gw.invoke("echo", b"again")).body == b"again"


async def test_reset_mid_body(kind: str, proxy: FaultProxy, emulator: Emulator) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("reset_mid_body")
        with pytest.raises(errors.ReadError):
            await gw.invoke("echo", BODY)
        assert emulator.stats.count(endpoint="echo") == 1
        await no_leaks(gw, proxy)


async def test_stall_ends_at_the_deadline(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("stall")
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            await gw.invoke("echo", b"x", timeout=0.3)
        assert time.monotonic() - started < 0.3 + 1.0  # a hang check
        await no_leaks(gw, proxy)


async def test_stall_mid_stream_ends_at_the_deadline(kind: str, emulator: Emulator) -> None:
    async with gateway(emulator.url, kind) as gw:
        parts: list[bytes] = []
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            async for part in gw.invoke_stream("dribble", b"abcdef", timeout=0.5):
                parts.append(part)  # noqa: PERF401 - the parts before the error count
        assert time.monotonic() - started < 0.5 + 1.0
        assert parts == [b"ab"]
        assert client_tasks() == []


async def test_half_close_is_an_error_not_a_hang(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("half_close")
        started = time.monotonic()
        with pytest.raises(errors.ReadError):
            await gw.invoke("echo", b"x", timeout=10)
        assert time.monotonic() - started < 5
        assert proxy.half_closed >= 1
        await no_leaks(gw, proxy)


async def test_slow_reads_within_the_deadline(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("slow")
        for _ in range(2):
            result = await gw.invoke("echo", b"dribbled " * 30, timeout=20)
            assert result.body == b"dribbled " * 30
            assert result.invoked_variant == "AllTraffic"
        assert proxy.accepted == 1
        await no_leaks(gw, proxy)


async def test_refused_connection(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind) as gw:
        await proxy.set_mode("refuse")
        with pytest.raises(errors.ConnectError) as caught:
            await gw.invoke("echo", b"x")
        assert caught.value.retryable and not caught.value.sent
        await no_leaks(gw, proxy)
        await proxy.set_mode("pass")
        assert (await gw.invoke("echo", b"back")).body == b"back"


async def test_server_closing_idle_connections(kind: str, proxy: FaultProxy) -> None:
    async with gateway(proxy.url, kind, prewarm=0) as gw:
        await asyncio.gather(*(gw.invoke("echo", b"%d" % i) for i in range(4)))
        proxy.drop_all()  # an idle timeout on the server side
        await no_leaks(gw, proxy)
        assert proxy.open_links == 0
        assert (await gw.invoke("echo", b"after")).body == b"after"
        assert gw.transport.stats.stale_retries == 0  # noticed while idle, never used
