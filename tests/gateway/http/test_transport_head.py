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
from gateway._http.message import RawResponse, split_head
from gateway._invoke.api import InvokeResult, result_from_response, safe_request_id
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


_FIELDS = (
    "content_type",
    "invoked_variant",
    "custom_attributes",
    "request_id",
    "new_session_id",
    "closed_session_id",
)


def _result(head: bytes) -> InvokeResult:
    return result_from_response(RawResponse(200, None, b"{}", head), target=None)


def _fields(result: InvokeResult) -> dict[str, str | None]:
    return {name: getattr(result, name) for name in _FIELDS}


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"x-Amzn-Invoked-Production-Variant: AllTraffic\r\n"
            b"x-amzn-RequestId: 5a6c0e2e-3b1f-4c55-9f3e-2d6a7b8c9d0e\r\n"
            b"Date: Tue, 24 Nov 2026 05:00:00 GMT\r\nContent-Length: 2",
            id="sagemaker-like",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nCONTENT-TYPE:text/csv\r\n"
            b"X-AMZN-SAGEMAKER-CUSTOM-ATTRIBUTES:  a=b; c=d  \r\n"
            b"x-amzn-sagemaker-new-session-id: s-1; Expires=2026-11-24T06:00:00Z\r\n"
            b"x-amzn-sagemaker-closed-session-id: s-0\r\nX-AMZN-REQUESTID:r-9",
            id="odd-case-and-spacing",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nServer: x\r\nx-amzn-RequestId: r-1\r\nContent-Length: 2",
            id="request-id-only",
        ),
    ],
)
def test_field_lines_say_what_the_fields_say(head: bytes) -> None:
    """Lines a relay copies carry exactly the fields a reader of the result sees."""
    lines = _result(head).field_lines()
    assert lines is not None
    assert lines.endswith(b"\r\n") and b"\r\n\r\n" not in lines
    relayed = _result(b"HTTP/1.1 200 OK\r\n" + lines.removesuffix(b"\r\n"))
    assert _fields(relayed) == _fields(_result(head))
    assert b"Date" not in lines and b"Content-Length" not in lines and b"Server" not in lines


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\nx-amzn-RequestId: r\ncontent-type: a/b", id="bare-lf"),
        pytest.param(b"HTTP/1.1 200 OK\r\nx-a: 1\ncontent-type: a/b", id="one-bare-lf"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-type: a/b\rx-evil: 1", id="bare-cr"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-type: a\x00b", id="nul"),
        # In a line that is not copied, too: the whole head is vouched for, or none of it.
        pytest.param(
            b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r\nServer: a\x00b", id="nul-elsewhere"
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r\nDate: a\rb", id="cr-elsewhere"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-type: a/b\r\n  ;q=1", id="folded"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-type: a/b\r\nContent-Type: c/d", id="twice"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-type: a/b", id="no-request-id"),
        pytest.param(b"HTTP/1.1 200 OK\r\nx-amzn-RequestId:  ", id="empty-request-id"),
        pytest.param(b"HTTP/1.1 200 OK", id="no-headers"),
    ],
)
def test_field_lines_are_refused_where_copying_would_differ(head: bytes) -> None:
    """The relay falls back to reading the fields: it never copies a line it cannot vouch for."""
    assert _result(head).field_lines() is None


def test_a_cached_answer_has_no_field_lines() -> None:
    cached = InvokeResult.from_fields(b"1", {"content_type": "text/csv"}, None, "hit")
    assert cached.field_lines() is None
    assert cached.content_type == "text/csv"


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: ab-1\r\nContent-Length: 2",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-AMZN-REQUESTID:cd-2",
        b"HTTP/1.1 200 OK\nx-amzn-requestid:  ef-3 \ncontent-type: a/b",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: f1\r\nx-amzn-RequestId: f2\r\nx: 1",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: first\r\nx-amzn-RequestId: last\r\nx: 1",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: one\r\n  two\r\n\tthree\r\nx: 1",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: a\r\nx-amzn-RequestId: b\r\n c",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId:",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId : r\r\nx-amzn-requestid-2: r",
        b"HTTP/1.1 200 OK\r\nx-other: x-amzn-requestid: r\r\n x-amzn-requestid: s",
        b"HTTP/1.1 200 OK\r\nContent-Type: a/b",
        b"HTTP/1.1 200 OK",
    ],
)
def test_the_request_id_alone_reads_as_every_field_decoded_reads_it(head: bytes) -> None:
    """Events read only the request id, without decoding the other fields: same answer."""
    alone = _result(head)
    decoded = _result(head)
    assert decoded.content_type == decoded.headers.get("content-type")  # fields decoded first
    assert alone.request_id == decoded.request_id
    # A request id that is not well-formed reads "other" either way (redacted at decode).
    assert alone.request_id == safe_request_id(
        dict((name.lower(), value.decode("latin-1")) for name, value in split_head(head)).get(
            b"x-amzn-requestid"
        )
    )


_PLAIN_ANSWERS = [
    b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r-1\r\nContent-Type: application/json\r\n"
    b'Content-Length: 7\r\n\r\n{"a":1}',
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 Fine\r\ncontent-length:\t2 \r\nx-empty:\r\n\r\nok",
    # Not plain (llhttp reads these whichever way they arrive): the same answers all the same.
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nx-obs: caf\xe9\r\nContent-Length: 2\r\n\r\nok",
]


@pytest.mark.parametrize("answer", _PLAIN_ANSWERS)
async def test_an_answer_read_whole_is_the_answer_read_in_pieces(
    stub_server: object, make_transport: TransportFactory, answer: bytes
) -> None:
    """Whole in one read, a plain answer skips the parser's callbacks: it gives the same
    status, fields and body as the same bytes read a few at a time, and the socket is
    kept for the next call either way."""
    in_pieces = [False]

    async def reply(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        if not in_pieces[0]:
            writer.write(answer)
            return True
        for index in range(0, len(answer), 5):
            writer.write(answer[index : index + 5])
            await writer.drain()
            await asyncio.sleep(0.001)
        return True

    server: StubServer = await stub_server(reply)  # type: ignore[operator]
    transport = make_transport("native")
    whole = await transport.request(prepared(server.url), _deadline())
    in_pieces[0] = True
    split = await transport.request(prepared(server.url), _deadline())
    again = await transport.request(prepared(server.url), _deadline())
    assert (whole.status, dict(whole.headers), whole.body) == (
        split.status,
        dict(split.headers),
        split.body,
    )
    assert again.body == whole.body
    assert server.accepted == 1  # one socket, reused by every call
    await settle(transport, expected_open=1)


async def test_a_second_answer_in_the_same_read_closes_the_socket(
    stub_server: object, make_transport: TransportFactory
) -> None:
    """An answer followed by more bytes is not a plain answer: the parser reads the first,
    finds a second nobody asked for, and the socket is not reused."""

    async def twice(request: StubRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
        )
        return True

    server: StubServer = await stub_server(twice)  # type: ignore[operator]
    transport = make_transport("native")
    first = await transport.request(prepared(server.url), _deadline())
    assert first.body == b"first"
    again = await transport.request(prepared(server.url), _deadline())
    assert again.body == b"first"  # a fresh socket's first answer, not the stray "second"
    assert server.accepted == 2
