"""The C plain-request scan (``gateway._server._request_heads``) against llhttp.

Where it is built (every build but a pure one), the server's reader takes a
read that is exactly one plain request in one C pass instead of llhttp's
callbacks. These tests hold every request it takes to llhttp's reading of the
same bytes (generated requests, and any bytes after a request line): one
message, the same method, target, fields and body, kept alive. What it leaves
to llhttp is always safe. A pure build has nothing to test here: the tests skip,
and llhttp reads every request.
"""

from __future__ import annotations

from collections.abc import Iterator

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._server import parsing, writing
from gateway._server.writing import python_copied_answer
from tests.gateway._plain_messages import fields, messages

native = pytest.importorskip("gateway._server._request_heads", reason="a pure build: no C helper")

_LIMITS = (4096, 16, 10_000)  # head bytes, fields, body bytes

_LINES = st.sampled_from(
    [
        b"POST /endpoints/my-endpoint/invocations HTTP/1.1",
        b"POST /endpoints/e/invocations?a=1&b=%20 HTTP/1.1",
        b"GET /ping HTTP/1.1",
        b"POST / HTTP/1.1",
        b"POST /a:b@c!$&'()*+,;=-._~ HTTP/1.1",
        b"POST /a#frag HTTP/1.1",
        b"POST /a b HTTP/1.1",
        b"POST /caf\xe9 HTTP/1.1",
        b'POST /a"b HTTP/1.1',
        b"POST /a{b} HTTP/1.1",
        b"POST http://host/a HTTP/1.1",
        b"POST * HTTP/1.1",
        b"POST /a HTTP/1.0",
        b"POST /a HTTP/2.0",
        b"POST /a  HTTP/1.1",
        b"PUT /a HTTP/1.1",
        b"post /a HTTP/1.1",
        b"\r\nPOST /a HTTP/1.1",
    ]
)
_FIELDS = fields(
    b"Host: 127.0.0.1:8080",
    b"Content-Type: application/json",
    b"Accept: application/json",
    b"User-Agent: Boto3/1.34.0 md/Botocore#1.34.0 ua/2.0 os/linux#6.1 lang/python#3.11.7",
    b"X-Amz-Date: 20261205T101010Z",
    b"Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261205/us-east-1/sagemaker/aws4",
    b"amz-sdk-invocation-id: 3b1c2d9e-0f5a-4c8e-9a71-2f3e4d5c6b7a",
    b"X-Amzn-SageMaker-Custom-Attributes: a=1 \t ",
    b"x-amzn-sagemaker-custom-attributes:b",
    b"Weird-Name_1: ",
    b"Expect: 100-continue",
)
_REQUESTS = messages(_LINES, _FIELDS, b"GET /next HTTP/1.1\r\n\r\n")


def _llhttp_reads(data: bytes) -> list[tuple[str, str, list[tuple[str, str]], bytes, bool]] | None:
    """Each request llhttp completes in ``data``: method, target, fields (lower-case names,
    as the reader keeps them), body and keep-alive; None if it refuses the bytes or leaves
    a request unfinished."""
    completed: list[tuple[str, str, list[tuple[str, str]], bytes, bool]] = []
    url: list[bytes] = []
    pairs: list[tuple[str, str]] = []
    body: list[bytes] = []
    started = [0]

    class Requests:
        def on_message_begin(self) -> None:
            started[0] += 1

        def on_url(self, part: bytes) -> None:
            url.append(part)

        def on_header(self, name: bytes, value: bytes) -> None:
            pairs.append((name.decode("latin-1").lower(), value.decode("latin-1")))

        def on_body(self, part: bytes) -> None:
            body.append(part)

        def on_message_complete(self) -> None:
            method = parser.get_method().decode("latin-1")
            version = parser.get_http_version()
            keep = parser.should_keep_alive() and version == "1.1"
            completed.append((method, b"".join(url).decode(), list(pairs), b"".join(body), keep))
            url.clear(), pairs.clear(), body.clear()

    parser = httptools.HttpRequestParser(Requests())
    try:
        parser.feed_data(data)
    except httptools.HttpParserError:
        return None
    return completed if started[0] == len(completed) else None


def _taken_as_llhttp_reads_it(data: bytes) -> None:
    read = native.plain_request(data, *_LIMITS)
    if read is None:
        return  # left to llhttp: always safe
    method, target, headers, body = read
    # No field came twice (llhttp's pairs are the dict's items, in order).
    assert _llhttp_reads(data) == [(method, target, list(headers.items()), body, True)]
    names = set(headers)
    assert not names & {"connection", "transfer-encoding", "upgrade", "expect"}
    assert len(headers) < _LIMITS[1] and len(body) <= _LIMITS[2]
    assert data.index(b"\r\n\r\n") + 4 < _LIMITS[0]


@settings(max_examples=3000)
@given(_REQUESTS)
def test_a_plain_request_is_one_llhttp_reads_the_same(data: bytes) -> None:
    _taken_as_llhttp_reads_it(data)


@settings(max_examples=500)
@given(st.binary(max_size=120))
def test_any_bytes_taken_as_a_plain_request_are_one_llhttp_reads_the_same(data: bytes) -> None:
    _taken_as_llhttp_reads_it(b"POST /a HTTP/1.1\r\n" + data)


_SDK_REQUEST = (
    b"POST /endpoints/my-endpoint/invocations HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\n"
    b"Accept: application/json\r\nUser-Agent: Boto3/1.34.0 md/Botocore#1.34.0\r\n"
    b"X-Amz-Date: 20261205T101010Z\r\nX-Amzn-SageMaker-Custom-Attributes: a=1 \t \r\n"
    b"amz-sdk-invocation-id: 3b1c2d9e\r\namz-sdk-request: attempt=1\r\n"
    b"Content-Length: 11\r\n\r\nhello world"
)


def test_a_plain_request_gives_what_the_reader_keeps() -> None:
    read = native.plain_request(_SDK_REQUEST, *_LIMITS)
    assert read is not None
    method, target, headers, body = read
    assert (method, target, body) == ("POST", "/endpoints/my-endpoint/invocations", b"hello world")
    assert headers["x-amzn-sagemaker-custom-attributes"] == "a=1 \t "
    assert headers["content-length"] == "11"
    assert list(headers)[:3] == ["host", "accept-encoding", "content-type"]
    # The common names are the strings the reader's callbacks use: shared, not made.
    common = {name: name for name in parsing._HEADER_NAMES.values()}
    assert all(name is common[name] for name in headers if name in common)
    _taken_as_llhttp_reads_it(_SDK_REQUEST)


def _values(data: bytes) -> tuple[str, dict[str, str]]:
    read = native.plain_request(data, *_LIMITS)
    assert read is not None
    return read[1], read[2]


def test_a_value_sent_again_is_the_str_the_last_request_got() -> None:
    target, headers = _values(_SDK_REQUEST)
    again_target, again = _values(_SDK_REQUEST)
    # Repeated values are shared: what the cache key and the route look-up hash once.
    assert again_target is target
    for name in ("host", "content-type", "content-length", "accept", "user-agent"):
        assert again[name] is headers[name], name
    # Never kept: a per-request id, and values nobody repeats (nor a credential).
    for name in ("amz-sdk-invocation-id", "x-amzn-sagemaker-custom-attributes"):
        assert again[name] == headers[name] and again[name] is not headers[name], name


def test_a_new_value_is_read_whole_and_kept_for_the_next() -> None:
    _values(_SDK_REQUEST)
    # The same length, one byte apart; a prefix; a longer value: each read as sent.
    for accept in (b"application/jsoN", b"application/", b"application/json+x"):
        data = _SDK_REQUEST.replace(b"Accept: application/json", b"Accept: " + accept)
        _, headers = _values(data)
        assert headers["accept"] == accept.decode()
        _, again = _values(data)
        assert again["accept"] is headers["accept"]
    target, _ = _values(_SDK_REQUEST.replace(b"my-endpoint", b"my-endpoinT"))
    assert target == "/endpoints/my-endpoinT/invocations"
    _taken_as_llhttp_reads_it(_SDK_REQUEST)


def test_a_long_value_is_not_kept() -> None:
    long_agent = b"a" * 600  # over the 512 bytes kept
    data = _SDK_REQUEST.replace(b"Boto3/1.34.0 md/Botocore#1.34.0", long_agent)
    _, headers = _values(data)
    _, again = _values(data)
    assert (
        again["user-agent"] == long_agent.decode()
        and again["user-agent"] is not headers["user-agent"]
    )


@pytest.fixture
def rebind() -> Iterator[None]:
    yield
    native.bind_names(parsing._LOWER_NAMES, parsing._REPEATED_VALUES)


def test_rebinding_forgets_the_kept_values(rebind: None) -> None:
    _, headers = _values(_SDK_REQUEST)
    native.bind_names(parsing._LOWER_NAMES, ())
    _, again = _values(_SDK_REQUEST)
    assert again["content-type"] is not headers["content-type"]
    _, third = _values(_SDK_REQUEST)
    assert third["content-type"] is not again["content-type"]  # none kept now


@pytest.mark.parametrize(
    ("data", "limits"),
    [
        (_SDK_REQUEST[:-1], _LIMITS),
        (_SDK_REQUEST + b"!", _LIMITS),
        (_SDK_REQUEST + b"GET /next HTTP/1.1\r\n\r\n", _LIMITS),
        (_SDK_REQUEST, (len(_SDK_REQUEST) - 11, 16, 10_000)),  # the head at the byte limit
        (_SDK_REQUEST, (4096, 10, 10_000)),  # ten fields: at the field limit
        (_SDK_REQUEST, (4096, 16, 10)),  # the body over the size given
        (_SDK_REQUEST.replace(b"HTTP/1.1", b"HTTP/1.0"), _LIMITS),
        (_SDK_REQUEST.replace(b"POST", b"PUT"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept:", b"accept-encoding:"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept: application/json", b"Accept-Encoding: identity"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept: application/json", b"x-one: a\r\nx-one: a"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept:", b"Expect: 100-continue\r\nX:"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept:", b"Connection: keep-alive\r\nX:"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept:", b"Transfer-Encoding: chunked\r\nX:"), _LIMITS),
        (_SDK_REQUEST.replace(b"Accept:", b"Upgrade: h2c\r\nX:"), _LIMITS),
        (_SDK_REQUEST.replace(b"Content-Length: 11", b"Content-Length: 1 1"), _LIMITS),
        (_SDK_REQUEST.replace(b"identity", b"caf\xe9"), _LIMITS),
        (_SDK_REQUEST.replace(b"identity", b"a\x7fb"), _LIMITS),
        (_SDK_REQUEST.replace(b"/invocations", b"/invoc ations"), _LIMITS),
        (_SDK_REQUEST.replace(b"/invocations", b"/invocations#x"), _LIMITS),
        (_SDK_REQUEST.replace(b"\r\nAccept:", b"\r\n Accept:"), _LIMITS),
        (_SDK_REQUEST.replace(b"\r\n", b"\n"), _LIMITS),
    ],
    ids=[
        "body-short",
        "body-long",
        "a-second-request-after",
        "head-at-the-byte-limit",
        "at-the-field-limit",
        "body-over-the-size-given",
        "http-1.0",
        "put",
        "a-field-twice",
        "a-field-twice-with-its-value",
        "a-one-byte-field-twice",
        "expect",
        "connection",
        "chunked",
        "upgrade",
        "length-not-digits",
        "obs-text-in-a-value",
        "del-in-a-value",
        "space-in-the-target",
        "fragment",
        "folded",
        "bare-lf",
    ],
)
def test_anything_else_is_left_to_llhttp(data: bytes, limits: tuple[int, int, int]) -> None:
    assert native.plain_request(data, *limits) is None


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (("POST / HTTP/1.1\r\n\r\n", 10, 10, 10), TypeError),
        ((b"POST / HTTP/1.1\r\n\r\n", 10, 10), TypeError),
        ((b"POST / HTTP/1.1\r\n\r\n", "10", 10, 10), TypeError),
    ],
    ids=["a-str", "three-arguments", "a-str-limit"],
)
def test_plain_request_refuses_bad_arguments(arguments: tuple[object, ...], error: type) -> None:
    with pytest.raises(error):
        native.plain_request(*arguments)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((["a"],), TypeError),
        (((b"a",),), TypeError),
        ((("A",),), ValueError),
        ((("a b",),), ValueError),
        ((("a",), ["a"]), TypeError),
        ((("a",), ("b",)), ValueError),
        ((("a",), (1,)), ValueError),
    ],
    ids=["a-list", "bytes", "upper-case", "a-space", "kept-a-list", "kept-unbound", "kept-an-int"],
)
def test_binding_refuses_what_is_not_lower_case_names(
    arguments: tuple[object, ...], error: type
) -> None:
    with pytest.raises(error):
        native.bind_names(*arguments)
    test_a_plain_request_gives_what_the_reader_keeps()  # the bound names still hold


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=300), min_size=5, max_size=5))
def test_the_c_copied_answer_is_the_python_one(parts: list[bytes]) -> None:
    status_line, lines, date_line, server_line, body = parts
    answer = native.copied_answer(status_line, lines, date_line, server_line, body)
    assert answer == python_copied_answer(status_line, lines, date_line, server_line, body)
    assert answer.endswith(b"content-length: %d\r\n\r\n%b" % (len(body), body))


def test_the_server_writes_the_c_copied_answer() -> None:
    assert writing._native_copied_answer is native.copied_answer
    answer = writing._copied_answer(200, b"x-amzn-RequestId: r-1\r\n", b"server: s\r\n", b"{}")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\nx-amzn-RequestId: r-1\r\ndate: ")
    assert answer.endswith(b"\r\nserver: s\r\ncontent-length: 2\r\n\r\n{}")


@pytest.mark.parametrize(
    "arguments",
    [
        (b"a", b"b", b"c", b"d"),
        (b"a", b"b", b"c", b"d", "e"),
        (b"a", bytearray(b"b"), b"c", b"d", b"e"),
    ],
    ids=["four", "a-str-body", "a-bytearray"],
)
def test_copied_answer_takes_five_bytes(arguments: tuple[object, ...]) -> None:
    with pytest.raises(TypeError):
        native.copied_answer(*arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 9, 10, 99, 100, 65_536, 1_000_001])
def test_the_copied_answer_states_each_length_in_decimal(size: int) -> None:
    body = b"x" * size
    answer = native.copied_answer(b"HTTP/1.1 200 OK\r\n", b"", b"", b"", body)
    assert answer == b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (size, body)
