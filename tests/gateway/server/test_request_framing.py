"""How the server frames and reads requests, however their bytes arrive, over real sockets.

A request read whole in one read is the same request read a byte at a time;
messages of every framing pipelined in one write are each answered in order,
a body's bytes are never taken for a request, and a head whose framing is
ambiguous is refused with nothing after it served.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httptools
import orjson
import pytest

from gateway._server.http import Request, Response, Server, ServerLimits, start_server

LIMITS = ServerLimits(max_header_size=4096, max_body_size=10_000, max_headers=16)


async def _echo(request: Request) -> Response:
    """The request as the server built it, as JSON."""
    seen = {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "headers": request.headers,
        "pairs": request.header_pairs,
        "body": request.body.decode("latin-1"),
        "version": request.http_version,
        "keep_alive": request.keep_alive,
    }
    return Response(200, [("content-type", "application/json")], orjson.dumps(seen))


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    server = await start_server(_echo, "127.0.0.1", 0, limits=LIMITS)
    yield server
    await server.close(grace=1.0)


async def _send(server: Server, data: bytes, byte_by_byte: bool) -> bytes:
    """Everything the server answers to ``data``, sent whole or a byte a write."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        try:
            if byte_by_byte:
                for index in range(len(data)):
                    writer.write(data[index : index + 1])
                    await writer.drain()
                    await asyncio.sleep(0)  # each byte its own read, mostly
            else:
                writer.write(data)
            writer.write_eof()
        except ConnectionError:
            pass  # the server closed after an answer (Connection: close): read it
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()


def _answers(raw: bytes) -> list[tuple[int, bytes]]:
    """Each answer's status and body, in order."""
    answers: list[tuple[int, bytes]] = []

    class Answers:
        def __init__(self) -> None:
            self.body = b""

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            answers.append((parser.get_status_code(), self.body))
            self.body = b""

    parser = httptools.HttpResponseParser(Answers())
    parser.feed_data(raw)
    return answers


SDK_HEAD = (
    b"POST /endpoints/my-endpoint/invocations?x=1 HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\n"
    b"Accept-Encoding: identity\r\n"
    b"Content-Type: application/json\r\n"
    b"Accept: application/json\r\n"
    b"User-Agent: Boto3/1.34.0 md/Botocore#1.34.0 ua/2.0 os/linux#6.1 lang/python#3.11.7\r\n"
    b"X-Amz-Date: 20261205T101010Z\r\n"
    b"X-Amzn-SageMaker-Custom-Attributes: a=1 \t \r\n"
    b"x-amzn-sagemaker-custom-attributes:b=caf\xe9\r\n"
    b"Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261205/us-east-1/sagemaker/aws4_request,"
    b" SignedHeaders=host;x-amz-date, Signature=abc\r\n"
    b"amz-sdk-invocation-id: 3b1c2d9e-0f5a-4c8e-9a71-2f3e4d5c6b7a\r\n"
    b"amz-sdk-request: attempt=1\r\n"
    b"Weird-Name_1: \r\n"
    b"Content-Length: 11\r\n"
    b"\r\n"
    b"hello world"
)


@pytest.mark.parametrize(
    "request_bytes",
    [
        SDK_HEAD,
        b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /a HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
        b"POST /a HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
        b"POST /a HTTP/1.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"POST /chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        # Plain (each field once, plain bytes): read whole, in one pass where that is built.
        SDK_HEAD.replace(b"x-amzn-sagemaker-custom-attributes:b=caf\xe9\r\n", b""),
        b"POST /endpoints/e/invocations HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=[
        "sdk",
        "get",
        "http-1.0",
        "http-1.0-keep-alive",
        "close",
        "chunked",
        "sdk-plain",
        "empty-body-plain",
    ],
)
async def test_a_request_read_whole_is_the_request_read_a_byte_at_a_time(
    server: Server, request_bytes: bytes
) -> None:
    whole = _answers(await _send(server, request_bytes, byte_by_byte=False))
    split = _answers(await _send(server, request_bytes, byte_by_byte=True))
    assert whole == split
    assert [status for status, _ in whole] == [200]
    seen = orjson.loads(whole[0][1])
    assert len(seen["pairs"]) == request_bytes.split(b"\r\n\r\n")[0].count(b"\r\n")


async def test_a_repeated_field_is_one_header_of_joined_values_and_each_request_has_its_own(
    server: Server,
) -> None:
    """A field sent twice reads as its values joined with commas, in the order sent,
    while the pairs keep each line; the next request on the connection starts afresh."""
    second = b"POST /b HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    answers = _answers(await _send(server, SDK_HEAD + second, byte_by_byte=False))
    first, after = (orjson.loads(body) for _, body in answers)
    attributes = "x-amzn-sagemaker-custom-attributes"
    assert first["headers"][attributes] == "a=1 \t ,b=caf\u00e9"
    assert [v for name, v in first["pairs"] if name == attributes] == ["a=1 \t ", "b=caf\u00e9"]
    assert first["headers"]["weird-name_1"] == ""
    assert after["headers"] == {"content-length": "0"}
    assert after["pairs"] == [["content-length", "0"]]


async def test_pipelined_requests_of_every_kind_in_one_read_are_each_answered_in_order(
    server: Server,
) -> None:
    """Back to back in one write: each is framed as llhttp frames it."""
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    requests = [
        b"POST /one HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled),
        b"POST /two HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"GET /three HTTP/1.1\r\nHost: x\r\n\r\n",
        SDK_HEAD,
        b"POST /five HTTP/1.1\r\nContent-Length: 4\r\n\r\nfive",
    ]
    answers = _answers(await _send(server, b"".join(requests), byte_by_byte=False))
    seen = [orjson.loads(body) for _, body in answers]
    assert [entry["path"] for entry in seen] == [
        "/one",
        "/two",
        "/three",
        "/endpoints/my-endpoint/invocations",
        "/five",
    ]
    assert [entry["body"] for entry in seen] == [
        smuggled.decode(),
        "hello",
        "",
        "hello world",
        "five",
    ]


async def test_heads_split_over_reads_and_whole_heads_alternate_on_one_connection(
    server: Server,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        bodies = []
        for index in range(4):
            request = b"POST /n%d HTTP/1.1\r\nX-Index: %d\r\nContent-Length: 1\r\n\r\n%d" % (
                index,
                index,
                index,
            )
            if index % 2:
                writer.write(request[:10])  # the head split over two reads
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(request[10:])
            else:
                writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            bodies.append(orjson.loads(await reader.readexactly(length)))
        assert [body["headers"]["x-index"] for body in bodies] == ["0", "1", "2", "3"]
        assert [body["body"] for body in bodies] == ["0", "1", "2", "3"]
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize(
    "head",
    [
        b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n continued\r\n\r\n",
        b"POST /x HTTP/1.1\r\nX: a\nContent-Length: 5\r\n\r\n",
    ],
    ids=["length-and-chunked", "length-twice", "space-before-colon", "folded", "bare-lf"],
)
async def test_ambiguous_framing_is_refused_and_nothing_after_it_is_served(
    server: Server, head: bytes
) -> None:
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    raw = await _send(server, head + b"hello" + smuggled, byte_by_byte=False)
    answers = _answers(raw)
    assert [status for status, _ in answers] == [400]
    assert b"/smuggled" not in raw


async def test_too_many_fields_in_a_head_read_whole_is_431(server: Server) -> None:
    many = b"".join(b"f%d: v\r\n" % index for index in range(LIMITS.max_headers + 1))
    raw = await _send(server, b"GET / HTTP/1.1\r\n" + many + b"\r\n", byte_by_byte=False)
    assert [status for status, _ in _answers(raw)] == [431]


@pytest.mark.parametrize(
    "split_at", [None, 5, 0], ids=["one-write", "second-head-split", "second-whole-later"]
)
async def test_a_request_after_one_that_closes_is_not_served(split_at: int | None) -> None:
    """Whether the second arrives with the first, its head split over later reads, or
    whole in a read of its own (a plain request, read in one pass where that is built)
    while the first is still being answered."""
    seen: list[str] = []

    async def slow_first(request: Request) -> Response:
        seen.append(request.path)
        if request.path == "/a":
            await asyncio.sleep(0.2)
        return await _echo(request)

    closing = b"POST /a HTTP/1.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    after = b"POST /after HTTP/1.1\r\nContent-Length: 2\r\n\r\nno"
    server = await start_server(slow_first, "127.0.0.1", 0, limits=LIMITS)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    raw = b""
    try:
        if split_at is None:
            writer.write(closing + after)
        else:
            writer.write(closing + after[:split_at])
            await writer.drain()
            await asyncio.sleep(0.05)  # read, and being answered
            writer.write(after[split_at:])
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            raw += chunk
    except ConnectionError:
        pass  # closed with the rest unread: a reset, after the answer
    finally:
        writer.close()
        await server.close(grace=1.0)
    assert seen == ["/a"]
    assert [orjson.loads(body)["path"] for _, body in _answers(raw)] == ["/a"]
