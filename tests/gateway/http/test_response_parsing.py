"""How the native transport reads an HTTP/1.1 response, over scripted sockets.

Heads and bodies arrive in the fragments each test chooses; every answer is
either the exact response or a typed error, and a socket goes back to the pool
only after a response it could delimit. The same rules over real sockets are
in test_transport.py, test_transport_head.py and test_hostile_upstream.py; the
splits at every byte, the close-delimited body and unsolicited answers are in
test_native_pool.py.
"""

from __future__ import annotations

import pytest

from gateway import errors
from gateway._http.connection import MAX_HEAD_BYTES, MAX_HEADERS, MAX_RESPONSE_BYTES
from gateway._http.interfaces import MAX_ERROR_BODY_BYTES
from tests._virtual_time import virtual_time
from tests.gateway._scripted_socket import ScriptedSocket, chunked_response, response
from tests.gateway.http._scripted_native import Native, head, scripted_native


async def _reused_next(native: Native, sock: ScriptedSocket) -> None:
    """The next request goes out on ``sock`` and is answered there."""
    call = native.start(b"next")
    assert await sock.next_request() == head(4) + b"next"
    sock.feed(response(b"next"))
    assert (await call).body == b"next"


async def _fresh_next(native: Native, sock: ScriptedSocket) -> None:
    """``sock`` was closed: the next request gets a new socket and its own answer."""
    assert sock.closed_by_client or sock.lost
    assert sock.unread() == b""
    fresh = await native.serve(b"next")
    assert fresh is not sock


# -- heads in fragments ----------------------------------------------------------------

INTERIM_THEN_FINAL = (
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 5\r\n\r\nfinal"
)


@virtual_time
async def test_interim_heads_split_anywhere_leave_only_the_final_head() -> None:
    async with scripted_native() as native:
        sock = None
        for cut in range(1, len(INTERIM_THEN_FINAL)):
            call = native.start()
            sock = sock or await native.network.next_socket()
            await sock.next_request()
            sock.feed(INTERIM_THEN_FINAL[:cut], INTERIM_THEN_FINAL[cut:])
            answer = await call
            assert (answer.status, answer.body) == (200, b"final"), cut
            assert answer.headers == {"x-final": "yes", "content-length": "5"}, cut
        assert len(native.network.sockets) == 1  # every answer complete: one socket


@virtual_time
async def test_a_large_body_in_many_fragments_arrives_whole() -> None:
    body = bytes(range(256)) * 20_000  # 5 MB, as the real-socket test sends
    raw = response(body)
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(*(raw[index : index + 65_536] for index in range(0, len(raw), 65_536)))
        assert (await call).body == body
        await _reused_next(native, sock)


# -- chunked bodies ----------------------------------------------------------------------

CHUNKED = {
    "extensions": b"2;name=value\r\nok\r\n3;x\r\n!!!\r\n0\r\n\r\n",
    "trailer-fields": b"2\r\nok\r\n3\r\n!!!\r\n0\r\nx-checksum: 1\r\nx-other: 2\r\n\r\n",
    "upper-case-hex": b"A\r\n0123456789\r\n0\r\n\r\n",
    "one-byte-chunks": b"".join(b"1\r\n%c\r\n" % byte for byte in b"ok!!!") + b"0\r\n\r\n",
    "leading-zeros": b"0002\r\nok\r\n00003\r\n!!!\r\n0000\r\n\r\n",
}
CHUNKED_BODY = {"upper-case-hex": b"0123456789"}


@pytest.mark.parametrize("framing", list(CHUNKED))
@virtual_time
async def test_a_chunked_body_fed_byte_by_byte_reads_the_same(framing: str) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNKED[framing]
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed_bytewise(raw[:-1])
        assert not call.done()
        sock.feed(raw[-1:])
        assert (await call).body == CHUNKED_BODY.get(framing, b"ok!!!")
        await _reused_next(native, sock)


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param(b"zz\r\nok\r\n0\r\n\r\n", id="size-not-hex"),
        pytest.param(b"2\r\nokX\r\n0\r\n\r\n", id="data-longer-than-its-size"),
        pytest.param(b"-2\r\nok\r\n0\r\n\r\n", id="negative-size"),
    ],
)
@virtual_time
async def test_a_malformed_chunk_is_a_protocol_error_and_the_socket_is_closed(
    chunks: bytes,
) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", chunks)
        with pytest.raises(errors.ProtocolError, match="invalid HTTP response"):
            await call
        assert sock.closed_by_client
        await _fresh_next(native, sock)


# -- Content-Length ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", id="zero"),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", id="204-without-length"),
        pytest.param(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", id="204-with-length"),
        pytest.param(b"HTTP/1.1 304 Not Modified\r\n\r\n", id="304"),
    ],
)
@virtual_time
async def test_an_empty_body_ends_with_its_head_and_the_socket_is_reused(raw: bytes) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(raw)
        # Complete at once: a 204 or 304 is never read until the server closes.
        assert (await call).body == b""
        await _reused_next(native, sock)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(b"Content-Length: 2\r\nContent-Length: 3\r\n", id="conflicting"),
        pytest.param(b"Content-Length: 2\r\nContent-Length: 2\r\n", id="repeated"),
        pytest.param(b"Content-Length: 2, 2\r\n", id="list"),
        pytest.param(b"Content-Length: two\r\n", id="not-a-number"),
        pytest.param(b"Content-Length: -2\r\n", id="negative"),
        pytest.param(b"Content-Length: +2\r\n", id="signed"),
        pytest.param(b"Content-Length: 99999999999999999999999\r\n", id="overflow"),
        pytest.param(b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", id="with-chunked"),
    ],
)
@virtual_time
async def test_a_content_length_that_cannot_delimit_the_body_is_refused(fields: bytes) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\nok!")
        with pytest.raises(errors.ProtocolError, match="invalid HTTP response"):
            await call
        await _fresh_next(native, sock)


@virtual_time
async def test_bytes_past_the_content_length_close_the_socket_after_the_answer() -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE")
        assert (await call).body == b"ok"
        await _fresh_next(native, sock)


# -- early close ---------------------------------------------------------------------------

WHOLE = response(b"0123456789", 200, "X-Field: value")
WHOLE_CHUNKED = chunked_response(b"01234", b"56789")


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(WHOLE[:5], id="in-the-status-line"),
        pytest.param(WHOLE[: WHOLE.index(b"X-Field") + 3], id="in-a-field"),
        pytest.param(WHOLE[: WHOLE.index(b"\r\n\r\n") + 2], id="before-the-blank-line"),
        pytest.param(WHOLE[: WHOLE.index(b"\r\n\r\n") + 4], id="after-the-head"),
        pytest.param(WHOLE[:-1], id="one-byte-short"),
        pytest.param(WHOLE_CHUNKED[: WHOLE_CHUNKED.index(b"5\r\n567")], id="between-chunks"),
        pytest.param(WHOLE_CHUNKED[:-5], id="before-the-last-chunk"),
        pytest.param(WHOLE_CHUNKED[:-2], id="in-the-last-chunk"),
    ],
)
@virtual_time
async def test_a_close_before_the_response_ends_is_a_read_error(cut: bytes, how: str) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(cut)
        assert not call.done()
        sock.close_from_server() if how == "close" else sock.reset()
        with pytest.raises(errors.ReadError) as caught:
            await call
        # A fresh socket that answered in part: no silent retry, whatever the error says.
        assert not isinstance(caught.value, errors.StaleConnection)
        assert caught.value.retryable
        assert native.transport.stats.stale_retries == 0
        assert native.pool.open_connections == 0
        await _fresh_next(native, sock)


# -- oversize -----------------------------------------------------------------------------


def _fields(count: int) -> bytes:
    return b"".join(b"x-h%d: v\r\n" % index for index in range(count))


@pytest.mark.parametrize(
    ("fields", "piece"),
    [
        pytest.param(_fields(MAX_HEADERS + 1), None, id="too-many-fields"),
        # The shortest field lines llhttp takes: the fewest bytes a head over the count has.
        pytest.param(b"a:\r\n" * (MAX_HEADERS + 1), None, id="too-many-shortest-fields"),
        pytest.param(b"x-big: " + b"v" * MAX_HEAD_BYTES + b"\r\n", None, id="too-large-at-once"),
        pytest.param(b"x-big: " + b"v" * MAX_HEAD_BYTES + b"\r\n", 4096, id="too-large-in-pieces"),
        pytest.param(b"x-big: " + b"v" * (2 * MAX_HEAD_BYTES), 4096, id="never-ending"),
    ],
)
@virtual_time
async def test_an_oversized_head_is_refused_and_the_socket_closed(
    fields: bytes, piece: int | None
) -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: 2\r\n\r\nok"
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        step = piece or len(raw)
        sock.feed(*(raw[index : index + step] for index in range(0, len(raw), step)))
        with pytest.raises(errors.ProtocolError, match="header limits"):
            await call
        assert sock.closed_by_client
        await _fresh_next(native, sock)


@virtual_time
async def test_a_head_at_the_limits_is_read_whole() -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + _fields(MAX_HEADERS - 1) + b"content-length: 2\r\n\r\nok"
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(raw)
        answer = await call
        assert answer.body == b"ok"
        assert len(answer.headers) == MAX_HEADERS
        assert answer.headers[f"x-h{MAX_HEADERS - 2}"] == "v"
        await _reused_next(native, sock)


@virtual_time
async def test_a_body_over_the_response_limit_is_refused_as_it_arrives() -> None:
    piece = b"x" * (1024 * 1024)
    count = MAX_RESPONSE_BYTES // len(piece) + 1
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (count * len(piece)))
        sock.feed(*([piece] * (count - 1)))
        assert not call.done()  # exactly at the limit: still reading
        sock.feed(piece)
        with pytest.raises(errors.ProtocolError, match="larger than"):
            await call
        assert sock.closed_by_client
        await _fresh_next(native, sock)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@virtual_time
async def test_a_long_error_body_answers_with_its_prefix_and_closes_the_socket(
    chunked: bool,
) -> None:
    body = bytes(range(256)) * (2 * MAX_ERROR_BODY_BYTES // 256)
    if chunked:
        raw = chunked_response(body).replace(b"200 OK", b"500 Internal Server Error", 1)
    else:
        raw = response(body, 500)
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(*(raw[index : index + 4096] for index in range(0, len(raw), 4096)))
        answer = await call
        assert answer.status == 500
        assert answer.body == body[:MAX_ERROR_BODY_BYTES]
        assert sock.closed_by_client  # the rest is never read
        await _fresh_next(native, sock)


# -- keep-alive or close --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        pytest.param(response(b"ok"), True, id="http/1.1"),
        pytest.param(response(b"ok", 200, "Connection: keep-alive"), True, id="1.1-keep-alive"),
        pytest.param(response(b"ok", 200, "Connection: Close"), False, id="1.1-close-any-case"),
        pytest.param(response(b"ok").replace(b"1.1", b"1.0", 1), False, id="http/1.0"),
        pytest.param(
            response(b"ok", 200, "Connection: Keep-Alive").replace(b"1.1", b"1.0", 1),
            True,
            id="1.0-keep-alive",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"2\r\nok\r\n0\r\n\r\n",
            False,
            id="chunked-close",
        ),
    ],
)
@virtual_time
async def test_the_socket_is_kept_only_when_the_response_allows_it(raw: bytes, kept: bool) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(raw)
        assert (await call).body == b"ok"
        assert sock.closed_by_client is not kept
        assert native.pool.idle_connections == int(kept)
        await (_reused_next if kept else _fresh_next)(native, sock)


# -- not HTTP/1.1 at all ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade"
            b"\r\n\r\n",
            "upgrade",
            id="upgrade",
        ),
        pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n", "invalid HTTP response", id="not-http"),
        pytest.param(b"HTTP/2 200\r\n\r\n", "invalid HTTP response", id="http/2"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nok",
            "invalid HTTP response",
            id="field-without-colon",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
            "invalid HTTP response",
            id="space-before-colon",
        ),
    ],
)
@virtual_time
async def test_an_answer_that_is_not_http_1_1_is_a_protocol_error(raw: bytes, message: str) -> None:
    async with scripted_native() as native:
        call = native.start()
        sock = await native.sent(call)
        sock.feed(raw)
        with pytest.raises(errors.ProtocolError, match=message) as caught:
            await call
        assert not caught.value.retryable
        await _fresh_next(native, sock)
