"""The emulator authenticates from the head, before it reads (and keeps) a body."""

from __future__ import annotations

import asyncio
import time

import httpx

from gateway.emulator import Emulator
from gateway.emulator._stats import OTHER_ENDPOINT
from tests._boto import ClientFactory

SIX_MIB = 6 * 1024 * 1024


async def _head_only(emulator: Emulator, path: str, extra: bytes = b"") -> bytes:
    """Send a head that announces 6 MiB of body, never send the body, read the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {SIX_MIB}\r\n".encode()
            + extra
            + b"\r\n"
        )
        # Before: the emulator waited for the whole body (60 s body timeout) and
        # kept it, answering only then. Now the head alone gets the refusal.
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_an_unsigned_call_is_refused_before_its_body_is_read(emulator: Emulator) -> None:
    raw = await _head_only(emulator, "/endpoints/echo/invocations")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 ")
    assert b"x-amzn-ErrorType: MissingAuthenticationTokenException" in head
    assert b"connection: close" in head
    assert body == b'{"message":"Missing Authentication Token"}'
    assert emulator.stats.error_count("echo", "MissingAuthenticationTokenException") == 1
    assert emulator.stats.count() == 0


async def test_an_unknown_access_key_is_refused_before_its_body_is_read(
    emulator: Emulator,
) -> None:
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    day = amz_date[:8]
    authorization = (
        f"AWS4-HMAC-SHA256 Credential=AKIDSTRANGER/{day}/us-east-1/sagemaker/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64
    )
    extra = f"authorization: {authorization}\r\nx-amz-date: {amz_date}\r\n".encode()
    raw = await _head_only(emulator, "/endpoints/echo/invocations", extra)
    assert raw.startswith(b"HTTP/1.1 403 ")
    assert b"UnrecognizedClientException" in raw


async def test_a_signed_call_still_reads_its_body(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    client = boto_client(emulator.url)
    body = b"x" * 100_000
    answer = await asyncio.to_thread(
        client.invoke_endpoint, EndpointName="echo", Body=body, ContentType="application/json"
    )
    assert answer["Body"].read() == body


async def test_error_statistics_name_configured_endpoints_only(emulator: Emulator) -> None:
    async with httpx.AsyncClient(base_url=emulator.url) as http:
        for index in range(200):
            await http.post(f"/endpoints/stranger-{index}/invocations", content=b"{}")
        await http.post("/endpoints/echo/invocations", content=b"{}")
    errors = emulator.stats.errors
    code = "MissingAuthenticationTokenException"
    # Before: one key per raw name the callers made up (201 keys, never trimmed).
    assert dict(errors) == {(OTHER_ENDPOINT, code): 200, ("echo", code): 1}
    assert emulator.stats.error_count(OTHER_ENDPOINT) == 200
