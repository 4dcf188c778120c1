"""Admission and defences: the in-flight cap, the body limit, slow clients."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway import Gateway
from gateway.sidecar import Sidecar, SidecarConfig
from tests.sidecar.conftest import ClientFactory


async def _wait_for(condition: object, what: str) -> None:
    for _ in range(500):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_in_flight_cap_answers_throttling(
    gateway: Gateway, boto_client: ClientFactory
) -> None:
    config = SidecarConfig(max_in_flight=2)
    async with (
        Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10) as http,
    ):
        # Built and warmed first: a boto3 client's first call takes about as long as
        # the slow endpoint's answer on a busy machine.
        client = boto_client(sidecar.url)
        warm = await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"w")
        assert warm["Body"].read() == b"w"
        held = [
            asyncio.create_task(http.post("/endpoints/slow/invocations", content=b"x"))
            for _ in range(2)
        ]
        await _wait_for(lambda: sidecar.app.in_flight == 2, "two calls in flight")
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
        response = caught.value.response
        assert response["Error"]["Code"] == "ThrottlingException"
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 429
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
        # Below the cap again: served.
        ok = await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"y")
        assert ok["Body"].read() == b"y"
        assert sidecar.app.metrics.rejected == {"in_flight_cap": 1}


async def test_oversized_body_is_413_while_others_are_served(
    sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    big_client = boto_client(sidecar.url)
    small_client = boto_client(sidecar.url)

    def small_calls() -> int:
        served = 0
        for index in range(20):
            body = str(index).encode()
            response = small_client.invoke_endpoint(EndpointName="echo", Body=body)
            served += response["Body"].read() == body
        return served

    big = asyncio.to_thread(
        big_client.invoke_endpoint, EndpointName="echo", Body=b"x" * (6 * 1024 * 1024 + 1)
    )
    results = await asyncio.gather(big, asyncio.to_thread(small_calls), return_exceptions=True)
    error, served = results
    assert isinstance(error, ClientError)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert "HTTP content length exceeded 6291456 bytes" in error.response["Error"]["Message"]
    assert served == 20


async def test_exactly_six_megabytes_is_accepted(
    sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    client = boto_client(sidecar.url)
    body = b"y" * (6 * 1024 * 1024)

    def call() -> bytes:
        # Read in the thread: the sidecar shares this event loop.
        answer: bytes = client.invoke_endpoint(EndpointName="echo", Body=body)["Body"].read()
        return answer

    assert len(await asyncio.to_thread(call)) == len(body)


async def test_slow_clients_are_cut_off_and_do_not_hurt_others(
    gateway: Gateway, boto_client: ClientFactory
) -> None:
    config = SidecarConfig(header_timeout_s=0.3, body_timeout_s=0.3)
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        # One client dribbles its headers a byte at a time, then stalls; another
        # sends its headers and a bit of body, then stalls.
        dribbler = asyncio.create_task(_dribble(sidecar.port))
        staller = asyncio.create_task(
            _send_and_stall(
                sidecar.port,
                b"POST /endpoints/echo/invocations HTTP/1.1\r\nhost: x\r\n"
                b"content-length: 100\r\n\r\n0123456789",
            )
        )
        client = boto_client(sidecar.url)
        for index in range(10):
            body = str(index).encode()
            response = await asyncio.to_thread(
                client.invoke_endpoint, EndpointName="echo", Body=body
            )
            assert response["Body"].read() == body
        dribbled, stalled = await asyncio.wait_for(asyncio.gather(dribbler, staller), 10)
    # Cut off: a 408 or a plain close, never an answer to the half request.
    assert dribbled == b"" or dribbled.startswith(b"HTTP/1.1 408")
    assert stalled.startswith(b"HTTP/1.1 408")


async def _dribble(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for byte in b"POST /endpoints/echo/invocations HTTP/1.1\r\nhost: x\r\nx-slow":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)
        return await reader.read()
    except ConnectionError:
        return b""
    finally:
        writer.close()
        await _closed(writer)


async def _send_and_stall(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await _closed(writer)


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
