"""The C head scans (``gateway._http._heads``) against their Python versions.

Where the module is built (every build but a pure one), the native transport
finds each answer's head end with it, and ``field_lines`` (the lines a relay
copies from a received head) runs it. These tests hold it to
``python_head_end`` and ``python_field_lines`` on generated heads (bound names
in any case, unknown ones, folds, blank lines, repeats, stray CR, LF and NUL),
so that what the sidecar relays does not depend on the build. A pure build has
nothing to test here: there the tests skip, and the Python versions are what
every other test runs.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gateway
from gateway._http import connection
from gateway._http.connection import head_end, python_head_end
from gateway._invoke import api
from gateway._invoke.api import field_lines, python_field_lines
from tests.gateway._plain_messages import fields, messages

native = pytest.importorskip("gateway._http._heads", reason="a pure build: no C helper")

_BOUND = (
    b"x-amzn-RequestId",
    b"X-AMZN-REQUESTID",
    b"Content-Type",
    b"x-Amzn-Invoked-Production-Variant",
    b"X-Amzn-SageMaker-Custom-Attributes",
    b"x-amzn-sagemaker-new-session-id",
    b"X-Amzn-SageMaker-Closed-Session-Id",
    b"X-Amzn-SageMaker-Invoked-Routing-Reason",
)
_OTHER = (b"Date", b"Content-Length", b"Server", b"x-amzn-requestid2", b"x-amzn-request", b"")
_NAMES = st.sampled_from(_BOUND + _OTHER) | st.binary(max_size=12)
_VALUES = st.sampled_from([b"", b" ", b"\t", b" \x0b\x0c ", b"r-1", b"  a=b; c=d  "]) | st.binary(
    max_size=16
)
_SEPARATORS = st.sampled_from([b":", b": ", b":\t", b" :", b""])
_STATUS = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 200 ", b"HTTP/1.1 424 Failed"])


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    name = draw(_NAMES)
    line = name + draw(_SEPARATORS) + draw(_VALUES)
    if draw(st.integers(0, 9)) == 0:
        line = draw(st.sampled_from([b" ", b"\t"])) + line  # a fold
    return line


@st.composite
def _heads(draw: st.DrawFn) -> bytes:
    fields = draw(st.lists(_lines(), max_size=12))
    if draw(st.booleans()):
        # Most generated heads lack a valid request id and are refused whatever else
        # they hold: half get one, so that the other rules decide.
        fields.insert(draw(st.integers(0, len(fields))), b"x-amzn-RequestId: r-1")
    head = b"\r\n".join([draw(_STATUS), *fields])
    if draw(st.integers(0, 4)) == 0 and head:
        # A stray byte somewhere: a bare CR or LF, a NUL, or a CRLF out of place.
        at = draw(st.integers(0, len(head)))
        stray = draw(st.sampled_from([b"\r", b"\n", b"\0", b"\r\n", b"\n\r"]))
        head = head[:at] + stray + head[at:]
    return head


def test_a_built_helper_is_the_one_used() -> None:
    assert api.NATIVE_FIELD_LINES
    assert connection._native_head_end is native.head_end
    assert connection._native_unread is getattr(native, "unread", None)
    # (The package's own folder: a compiled module's __file__ names a path of mypyc's.)
    assert Path(native.__file__).parent == Path(gateway.__file__).parent / "_http"
    head = b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r-1\r\nDate: d\r\nContent-Type: a/b"
    assert field_lines(head) == b"x-amzn-RequestId: r-1\r\nContent-Type: a/b\r\n"
    assert native.field_lines(head) == python_field_lines(head)


@settings(max_examples=2000)
@given(_heads())
def test_the_c_lines_are_the_python_ones(head: bytes) -> None:
    assert native.field_lines(head) == python_field_lines(head)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_any_bytes_give_the_python_answer(head: bytes) -> None:
    assert native.field_lines(head) == python_field_lines(head)


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r\n",  # a blank line at the end
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r\n\r\nContent-Type: a",
        b"HTTP/1.1 200 OK\r\n\tx-amzn-RequestId: r",  # a bound name after a fold's blank
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId",  # a bound name with no colon
        b"HTTP/1.1 200 OK\r\nContent-Type\r\nx-amzn-RequestId: r",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId:\x0b\x0c",  # whitespace only, as strip() sees it
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\xff\r\nContent-Type: \xe9",
        b"HTTP/1.1 200 OK\r\nX-AMZN-REQUESTID\xc0: r",
        b"HTTP/1.1 200 OK\r\nx-amzn-requestid: a\r\nx-amzn-requestid: b",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\0",  # a NUL in a kept line
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r\nDate: \0",  # in a dropped one
        b"HTTP/1.1 200\0 OK\r\nx-amzn-RequestId: r",  # in the status line
        b"HTTP/1.1 200\r OK\r\nx-amzn-RequestId: r",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r\r",
        b"\r\nx-amzn-RequestId: r",  # an empty status line
        b"",
    ],
)
def test_edges_give_the_python_answer(head: bytes) -> None:
    assert native.field_lines(head) == python_field_lines(head)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (((b"a",),), TypeError),
        (([b"a"], 0), TypeError),
        (((b"a", "b"), 0), TypeError),
        (((b"a",), 1), ValueError),
        (((b"a",), -1), ValueError),
        (((), 0), ValueError),
        ((tuple(b"n%d" % i for i in range(65)), 0), ValueError),
        (((b"Content-Type",), 0), ValueError),
        (((b"a:b",), 0), ValueError),
        (((b"a b",), 0), ValueError),
        (((b"",), 0), ValueError),
        (((b"a" * 129,), 0), ValueError),
    ],
    ids=[
        "one-argument",
        "a-list",
        "a-str-name",
        "index-past-the-end",
        "negative-index",
        "no-names",
        "65-names",
        "upper-case",
        "a-colon",
        "a-space",
        "empty-name",
        "too-long",
    ],
)
def test_binding_refuses_bad_names_and_keeps_the_bound_ones(
    arguments: tuple[object, ...], error: type[Exception]
) -> None:
    head = b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r-1\r\nContent-Type: a/b\r\nx-other: 1"
    before = native.field_lines(head)
    with pytest.raises(error):
        native.bind_fields(*arguments)
    assert native.field_lines(head) == before == python_field_lines(head)


def test_only_bytes_are_read() -> None:
    with pytest.raises(TypeError):
        native.field_lines("HTTP/1.1 200 OK\r\nx-amzn-RequestId: r")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.field_lines(bytearray(b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r"))  # type: ignore[arg-type]


_HEAD_PIECES = st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\n\r\n", b"\n\n", b"a", b"ok", b":"])


@settings(max_examples=1000)
@given(st.lists(_HEAD_PIECES, max_size=20), st.data())
def test_the_c_head_end_is_the_python_one(pieces: list[bytes], data: st.DataObject) -> None:
    received = b"".join(pieces)
    start = data.draw(st.integers(0, len(received)))
    assert native.head_end(received, start) == python_head_end(received, start)
    assert head_end(received, start) == python_head_end(received, start)


@pytest.mark.parametrize(
    ("received", "start", "end"),
    [
        (b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody", 0, 21),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", 25, 40),
        (b"HTTP/1.1 200 OK\nA: b\n\nbody", 0, 20),
        (b"HTTP/1.1 200 OK\nA: b\n\n\r\n\r\n", 0, 22),  # CRLF CRLF first, wherever
        (b"HTTP/1.1 200 OK\r\nA: b\r\n", 0, -1),
        (b"", 0, -1),
    ],
)
def test_head_ends(received: bytes, start: int, end: int) -> None:
    assert native.head_end(received, start) == end == python_head_end(received, start)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((b"\r\n\r\n", -1), ValueError),
        ((b"\r\n\r\n", 5), ValueError),
        (("\r\n\r\n", 0), TypeError),
        ((b"\r\n\r\n", "0"), TypeError),
        ((b"\r\n\r\n",), TypeError),
    ],
    ids=["negative-start", "start-past-the-end", "a-str", "a-str-start", "no-start"],
)
def test_head_end_refuses_what_is_not_bytes_and_a_start_within(
    arguments: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        native.head_end(*arguments)


# -- plain_answer: a read that is exactly one plain answer, against llhttp --------------

_ANSWER_STATUS = st.sampled_from(
    [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 200 ",
        b"HTTP/1.1 200",
        b"HTTP/1.1 200 All good, thanks",
        b"HTTP/1.1 200 O\tK",
        b"HTTP/1.1 200 O\x80K",
        b"HTTP/1.1 200 O\x7fK",
        b"HTTP/1.0 200 OK",
        b"HTTP/1.1 204 No Content",
        b"HTTP/1.1 201 Created",
        b"HTTP/1.1 2000 OK",
        b"http/1.1 200 OK",
        b"\r\nHTTP/1.1 200 OK",
    ]
)
_ANSWER_FIELDS = fields(
    b"x-amzn-RequestId: 5a6c0e2e-3b1f",
    b"Content-Type: application/json",
    b"X-Amzn-Invoked-Production-Variant: AllTraffic",
    b"Date: Sat, 05 Dec 2026 12:00:00 GMT",
    b"Keep-Alive: timeout=5",
)
_ANSWERS = messages(
    _ANSWER_STATUS, _ANSWER_FIELDS, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 6
)


def _llhttp_reads(data: bytes) -> list[tuple[int, bool, bytes]] | None:
    """Each answer llhttp completes in ``data``: its status, keep-alive and body;
    None if llhttp refuses the bytes or leaves an answer unfinished."""
    import httptools

    completed: list[tuple[int, bool, bytes]] = []
    parts: list[bytes] = []
    started = [0]

    class Answers:
        def on_message_begin(self) -> None:
            started[0] += 1

        def on_body(self, body: bytes) -> None:
            parts.append(body)

        def on_message_complete(self) -> None:
            completed.append(
                (parser.get_status_code(), parser.should_keep_alive(), b"".join(parts))
            )
            parts.clear()

    parser = httptools.HttpResponseParser(Answers())
    try:
        parser.feed_data(data)
    except httptools.HttpParserError:
        return None
    return completed if started[0] == len(completed) else None


def _accepted_as_llhttp_reads_it(data: bytes) -> None:
    end = native.plain_answer(data)
    if end < 0:
        return  # left to llhttp: always safe
    assert end == python_head_end(data, 0)
    assert _llhttp_reads(data) == [(200, True, data[end + 4 :])]
    head_lines = data[:end].split(b"\r\n")
    assert len(head_lines) - 1 <= connection.MAX_HEADERS and end <= connection.MAX_HEAD_BYTES
    names = {line.partition(b":")[0].lower() for line in head_lines[1:]}
    assert not names & {b"connection", b"transfer-encoding", b"upgrade"}
    assert [line for line in head_lines[1:] if line.lower().startswith(b"content-length:")]


@settings(max_examples=3000)
@given(_ANSWERS)
def test_a_plain_answer_is_one_llhttp_reads_the_same(data: bytes) -> None:
    """Whatever plain_answer takes, llhttp takes too, as one 200 answer, kept alive, with
    the same head and body and nothing after it."""
    _accepted_as_llhttp_reads_it(data)


@settings(max_examples=500)
@given(st.binary(max_size=120))
def test_any_bytes_taken_as_a_plain_answer_are_one_llhttp_reads_the_same(data: bytes) -> None:
    _accepted_as_llhttp_reads_it(b"HTTP/1.1 200 OK\r\n" + data)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r-1\r\nContent-Type: application/json\r\n"
        b"X-Amzn-Invoked-Production-Variant: AllTraffic\r\nDate: d\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 \r\ncontent-length:\t3 \r\nx-empty:\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 1\r\n\r\n\n",
    ],
    ids=["minimal", "sagemaker-like", "odd-spacing", "keep-alive-field"],
)
def test_plain_answers_are_taken(data: bytes) -> None:
    end = native.plain_answer(data)
    assert end > 0
    _accepted_as_llhttp_reads_it(data)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n folded\r\n\r\nok",
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-big: " + b"v" * 9000 + b"\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n" + b"x-a: 1\r\n" * 101 + b"Content-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-del: a\x7fb\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-control: a\x01b\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-obs-text: caf\xe9\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx{brace}: v\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx-space-before-colon : v\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=[
        "body-short",
        "body-long",
        "a-second-answer-after",
        "body-missing",
        "head-unfinished",
        "no-length",
        "length-twice",
        "chunked",
        "connection-close",
        "folded",
        "bare-lf",
        "http-1.0",
        "204",
        "interim-first",
        "19-digit-length",
        "head-past-8-kib",
        "101-fields",
        "del-in-a-value",
        "control-in-a-value",
        "obs-text-in-a-value",
        "brace-in-a-name",
        "space-before-colon",
    ],
)
def test_anything_else_is_left_to_llhttp(data: bytes) -> None:
    assert native.plain_answer(data) == -1


def test_plain_answer_reads_only_bytes() -> None:
    with pytest.raises(TypeError):
        native.plain_answer("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")  # type: ignore[arg-type]


def test_unread_sees_bytes_a_close_and_a_closed_descriptor() -> None:
    if not hasattr(native, "unread"):
        pytest.skip("no poll(2) here")  # Windows: select.poll's absence skips the check too
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert native.unread(ours.fileno()) is False  # idle, nothing sent
        theirs.send(b"H")
        assert native.unread(ours.fileno()) is True  # a byte nobody read
        assert ours.recv(1) == b"H"
        assert native.unread(ours.fileno()) is False
        theirs.shutdown(socket.SHUT_WR)
        assert native.unread(ours.fileno()) is True  # the peer's close
        closed = ours.fileno()
    # A descriptor no longer open: never taken for an idle socket.
    assert native.unread(closed) is True


@pytest.mark.parametrize(("fd", "error"), [(-1, ValueError), (2**40, ValueError), ("3", TypeError)])
def test_unread_takes_only_a_descriptor(fd: object, error: type) -> None:
    if not hasattr(native, "unread"):
        pytest.skip("no poll(2) here")
    with pytest.raises(error):
        native.unread(fd)  # type: ignore[arg-type]
