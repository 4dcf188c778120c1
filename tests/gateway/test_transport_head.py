"""The native transport's response-head limits and raw-head decoding.

The native transport keeps a response head undecoded and splits it into
headers only when they are read, so its limits (64 KiB, 128 headers) are
checked on the raw bytes. httpx applies h11's own limits instead.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway import errors
from gateway._http.connection import MAX_HEAD_BYTES, MAX_HEADERS
from gateway._http.message import split_head
from tests.gateway.conftest import StubRequest, StubServer, TransportFactory, prepared, settle


def _deadline() -> float:
    return time.monotonic() + 5.0


def _headers(count: int) -> bytes:
    return b"".join(b"x-h%d: v\r\n" % index for index in range(count))


@pytest.mark.parametrize(
    ("head", "in_pieces"),
    [
        pytest.param(_headers(MAX_HEADERS + 1), False, id="too-many-headers"),
        pytest.param(b"x-big: " + b"v" * MAX_HEAD_BYTES + b"\r\n", False, id="too-large-at-once"),
        pytest.param(b"x-big: " + b"v" * MAX_HEAD_BYTES + b"\r\n", True, id="too-large-in-pieces"),
    ],
)
async def test_oversized_response_head_is_refused(
    stub_server: object, make_transport: TransportFactory, head: bytes, in_pieces: bool
) -> None:
    async def huge(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        whole = b"HTTP/1.1 200 OK\r\n" + head + b"content-length: 2\r\n\r\nok"
        step = 4096 if in_pieces else len(whole)
        for index in range(0, len(whole), step):
            writer.write(whole[index : index + step])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    server: StubServer = await stub_server(huge)  # type: ignore[operator]
    transport = make_transport("native")
    with pytest.raises(errors.ProtocolError, match="header limits"):
        await transport.request(prepared(server.url), _deadline())
    await settle(transport, expected_open=0)


async def test_a_head_at_the_limits_is_accepted(
    stub_server: object, make_transport: TransportFactory
) -> None:
    async def full(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        head = _headers(MAX_HEADERS - 1) + b"content-length: 2\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\n" + head + b"\r\nok")
        return True

    server: StubServer = await stub_server(full)  # type: ignore[operator]
    transport = make_transport("native")
    answer = await transport.request(prepared(server.url), _deadline())
    assert answer.body == b"ok"
    assert len(answer.headers) == MAX_HEADERS
    assert answer.headers[f"x-h{MAX_HEADERS - 2}"] == "v"


def test_split_head_pairs_values_and_folds() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type:  text/csv \r\nX-Long: one\r\n\ttwo\r\nX-Empty:"
    assert split_head(head) == [
        (b"Content-Type", b"text/csv"),
        (b"X-Long", b"one two"),
        (b"X-Empty", b""),
    ]
    assert split_head(b"HTTP/1.1 204 No Content") == []
    assert split_head(b"HTTP/1.1 200 OK\nx-a: 1\nx-b: 2") == [(b"x-a", b"1"), (b"x-b", b"2")]
