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

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._http import connection
from gateway._http.connection import head_end, python_head_end
from gateway._invoke import api
from gateway._invoke.api import field_lines, python_field_lines

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
    assert Path(native.__file__).parent == Path(connection.__file__).parent
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
