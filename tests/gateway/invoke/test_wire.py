"""Request validation before anything is sent, and decoding of every SageMaker error shape."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import MAX_PAYLOAD_BYTES, errors
from gateway._http.message import Origin, RawResponse, encode_head
from gateway._invoke.api import check_endpoint_name, check_header_value, check_payload, decode_error
from gateway.emulator import Emulator
from tests._faultproxy import FaultProxy
from tests.gateway.conftest import TRANSPORTS, gateway_for

SUFFIX = ":http://internal.amazon.com/coral/com.amazon.sagemaker/"


# -- header values --------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a\rb", "a\nb", "a\r\nx-injected: 1", "a\x00b", "\n"])
def test_cr_lf_nul_refused(bad: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="CR, LF or NUL"):
        check_header_value("x-amzn-sagemaker-custom-attributes", bad)


@pytest.mark.parametrize("bad", ["a\x01b", "\x1b[31m", "del\x7f"])
def test_other_control_characters_refused(bad: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="control character"):
        check_header_value("accept", bad)


@pytest.mark.parametrize("bad", ["caf\u00e9\u20ac", "\u4e2d\u6587", "emoji \U0001f600"])
def test_non_latin1_refused(bad: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="Latin-1"):
        check_header_value("content-type", bad)


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("application/json", "application/json"),
        # The whitespace around a field value is not part of it (RFC 9110 5.5).
        ("  padded \t", "padded"),
        ("a   b\t\tc", "a   b\t\tc"),
        ("caf\u00e9 \u00a0x", "caf\u00e9 \u00a0x"),
        ("", ""),
    ],
)
def test_values_sent_as_given_inner_whitespace_kept(value: str, sent: str) -> None:
    assert check_header_value("x", value) == sent


@pytest.mark.parametrize("bad", ["a\x0bb", "a\x0cb", "a\x1cb", "a\x1fb"])
def test_control_characters_that_are_whitespace_to_python_are_refused(bad: str) -> None:
    # Once folded into a space before sending; sent as given they would be invalid HTTP.
    with pytest.raises(errors.InvalidRequest, match="control character"):
        check_header_value("x-amzn-sagemaker-custom-attributes", bad)


ATTRIBUTES_WITH_WHITESPACE = '{"q": "a  b",\t"k": 1} '


def _field_values(received: bytes, name: bytes) -> list[bytes]:
    """Every ``name`` field's value in a byte stream of request heads, OWS around it dropped."""
    values = []
    for line in received.split(b"\r\n"):
        field, sep, value = line.partition(b":")
        if sep and field.lower() == name:
            values.append(value.strip(b" \t"))
    return values


async def test_custom_attributes_reach_the_server_as_boto3_sends_them_and_verify(
    emulator: Emulator,
) -> None:
    """The signature's canonical form folds whitespace; the wire keeps the caller's bytes
    (the emulator verifies SigV4 for its configured credentials)."""
    from tests._boto import boto_clients
    from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

    name = b"x-amzn-sagemaker-custom-attributes"
    expected = ATTRIBUTES_WITH_WHITESPACE.strip().encode()
    async with FaultProxy("127.0.0.1", emulator.port) as theirs:
        make = boto_clients(ACCESS_KEY, SECRET_KEY)
        client = next(make)(theirs.url)
        answer = await asyncio.to_thread(
            client.invoke_endpoint,
            EndpointName="echo",
            Body=b"x",
            CustomAttributes=ATTRIBUTES_WITH_WHITESPACE,
        )
        next(make, None)
        assert _field_values(bytes(theirs.received), name) == [expected]
    assert answer["CustomAttributes"].strip(" \t") == expected.decode()
    for kind in TRANSPORTS:
        async with (
            FaultProxy("127.0.0.1", emulator.port) as ours,
            gateway_for(ours.url, transport=kind, pool={"prewarm": 0}) as gateway,
        ):
            result = await gateway.invoke(
                "echo", b"x", custom_attributes=ATTRIBUTES_WITH_WHITESPACE
            )
            assert _field_values(bytes(ours.received), name) == [expected], kind
            assert result.custom_attributes == expected.decode()
    from gateway import compat

    async with (
        FaultProxy("127.0.0.1", emulator.port) as ours,
        compat.create_client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=ours.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        ) as client,
    ):
        compat_answer = await client.invoke_endpoint(
            EndpointName="echo", Body=b"x", CustomAttributes=ATTRIBUTES_WITH_WHITESPACE
        )
        assert _field_values(bytes(ours.received), name) == [expected]
        assert compat_answer["CustomAttributes"] == expected.decode()
    sent = [r for r in emulator.recorded if r.path == "/endpoints/echo/invocations"]
    assert len(sent) == 2 + len(TRANSPORTS)
    # (this server keeps the OWS after a value, which RFC 9110 has a recipient exclude)
    values = {dict((k.lower(), v) for k, v in r.headers)[name.decode()] for r in sent}
    assert {value.strip(" \t") for value in values} == {expected.decode()}


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize(
    "arguments",
    [
        {"custom_attributes": "a\r\nx-amzn-sagemaker-target-variant: evil"},
        {"content_type": "text/csv\n"},
        {"accept": "\x00"},
        {"inference_id": "id-\u2603"},
        {"target_variant": "v\rx"},
    ],
)
async def test_bad_headers_never_reach_the_server(
    kind: str, arguments: dict[str, str], emulator: Emulator, proxy: FaultProxy
) -> None:
    async with gateway_for(proxy.url, transport=kind, pool={"prewarm": 0}) as gateway:
        with pytest.raises(errors.InvalidRequest):
            await gateway.invoke("echo", b"x", **arguments)
    assert proxy.requests == 0 and proxy.accepted == 0
    assert emulator.stats.count() == 0


@pytest.mark.parametrize("body", ["1,2,3", 123, None], ids=["str", "int", "none"])
async def test_a_body_that_is_not_bytes_is_an_input_error(
    body: object, emulator: Emulator, proxy: FaultProxy
) -> None:
    """Not a TypeError from deep inside: the gateway's own input error, nothing sent."""
    async with gateway_for(proxy.url, pool={"prewarm": 0}, cache={"ttl_s": 60}) as gateway:
        calls = {
            "invoke": lambda: gateway.invoke("echo", body),  # type: ignore[arg-type]
            "stream": lambda: anext(aiter(gateway.invoke_stream("echo", body))),  # type: ignore[arg-type]
            "async": lambda: gateway.invoke_async("echo", body=body or 7),  # type: ignore[arg-type]
        }
        for name, call in calls.items():
            with pytest.raises(errors.InvalidRequest, match="Body: must be bytes") as raised:
                await call()
            assert raised.value.retryable is False, name
        # Other binary buffers are bodies like bytes.
        answer = await gateway.invoke("echo", bytearray(b"7,8"), content_type="text/csv")
        assert answer.body == b"7,8"
        answer = await gateway.invoke("echo", memoryview(b"9"), content_type="text/csv")
        assert answer.body == b"9"
    assert emulator.stats.count() == 2


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_oversized_payload_refused_before_sending(
    kind: str, emulator: Emulator, proxy: FaultProxy
) -> None:
    async with gateway_for(proxy.url, transport=kind, pool={"prewarm": 0}) as gateway:
        with pytest.raises(errors.InvalidRequest, match="exceeds"):
            await gateway.invoke("echo", b"x" * (MAX_PAYLOAD_BYTES + 1))
        with pytest.raises(errors.InvalidRequest, match="exceeds"):
            async for _ in gateway.invoke_stream("echo", b"x" * (MAX_PAYLOAD_BYTES + 1)):
                pass
        assert proxy.requests == 0 and proxy.accepted == 0
        assert emulator.stats.count() == 0
        # exactly at the limit is fine
        result = await gateway.invoke("echo", b"y" * MAX_PAYLOAD_BYTES)
        assert len(result.body) == MAX_PAYLOAD_BYTES
    check_payload(b"z" * MAX_PAYLOAD_BYTES)


# -- endpoint names -------------------------------------------------------------------


@pytest.mark.parametrize("good", ["a", "echo", "my-endpoint-1", "A--b", "x" * 63, "a-" * 31 + "b"])
def test_good_endpoint_names(good: str) -> None:
    check_endpoint_name(good)


@pytest.mark.parametrize(
    "bad",
    ["", "-a", "a-", "a_b", "a/b", "a b", "x" * 64, "a" + "-" * 70 + "b", "a-" * 40 + "a", "é"],
)
def test_bad_endpoint_names(bad: str) -> None:
    with pytest.raises(errors.InvalidRequest, match="invalid endpoint name"):
        check_endpoint_name(bad)


async def test_bad_endpoint_name_not_sent(emulator: Emulator, proxy: FaultProxy) -> None:
    async with gateway_for(proxy.url, pool={"prewarm": 0}) as gateway:
        with pytest.raises(errors.InvalidRequest):
            await gateway.invoke("../admin", b"x")
    assert proxy.accepted == 0


# -- origins and heads --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://runtime.sagemaker.us-east-1.amazonaws.com",
            (
                "https",
                "runtime.sagemaker.us-east-1.amazonaws.com",
                443,
                "runtime.sagemaker.us-east-1.amazonaws.com",
            ),
        ),
        ("http://127.0.0.1:8080/", ("http", "127.0.0.1", 8080, "127.0.0.1:8080")),
        ("http://[::1]:9000", ("http", "::1", 9000, "[::1]:9000")),
        ("https://[::1]", ("https", "::1", 443, "[::1]")),
        ("http://h:80", ("http", "h", 80, "h")),
    ],
)
def test_origin_from_url(url: str, expected: tuple[str, str, int, str]) -> None:
    origin = Origin.from_url(url)
    assert (origin.scheme, origin.host, origin.port, origin.host_header) == expected


@pytest.mark.parametrize(
    "url",
    ["ftp://h", "h:80", "http://", "http://h:port", "http://h:0", "http://h:70000", "http://h:-1"],
)
def test_bad_origins(url: str) -> None:
    with pytest.raises(errors.ConfigError, match="endpoint_url"):
        Origin.from_url(url)


def test_encode_head() -> None:
    head = encode_head("/endpoints/e/invocations", [("host", "h"), ("content-type", "t")], 3)
    assert head.startswith(b"POST /endpoints/e/invocations HTTP/1.1\r\nhost: h\r\n")
    assert head.endswith(b"content-length: 3\r\n\r\n")


# -- errors -------------------------------------------------------------------------------


def error(
    status: int, code: str | None, body: object = None, request_id: str | None = "beef-0001"
) -> RawResponse:
    headers = {"content-type": "application/json"}
    if code is not None:
        headers["x-amzn-errortype"] = code
    if request_id is not None:
        headers["x-amzn-requestid"] = request_id
    raw = body if isinstance(body, bytes) else orjson.dumps(body) if body is not None else b""
    return RawResponse(status, headers, raw)


@pytest.mark.parametrize(
    ("status", "code", "cls", "retryable"),
    [
        (400, "ValidationError", errors.ValidationError, False),
        (429, "ModelNotReadyException", errors.ModelNotReady, True),
        (500, "InternalFailure", errors.InternalFailure, True),
        (503, "ServiceUnavailable", errors.ServiceUnavailable, True),
        (530, "InternalDependencyException", errors.InternalDependency, True),
        (400, "ThrottlingException", errors.Throttling, True),
        (403, "InvalidSignatureException", errors.SignatureError, False),
        (403, "UnrecognizedClientException", errors.SignatureError, False),
        (403, "MissingAuthenticationTokenException", errors.SignatureError, False),
        (400, "IncompleteSignatureException", errors.SignatureError, False),
        (403, "ExpiredTokenException", errors.SignatureError, False),
        (403, "AccessDeniedException", errors.SignatureError, False),
    ],
)
def test_every_error_shape(status: int, code: str, cls: type, retryable: bool) -> None:
    decoded = decode_error(error(status, code + SUFFIX, {"message": f"{code} happened"}))
    assert type(decoded) is cls
    assert (decoded.code, decoded.status, decoded.request_id) == (code, status, "beef-0001")
    assert decoded.message == f"{code} happened"
    assert decoded.retryable is retryable
    assert code in str(decoded) and "beef-0001" in str(decoded)


def test_model_error_fields() -> None:
    body = {
        "Message": "Received server error (500) from primary",
        "OriginalStatusCode": 500,
        "OriginalMessage": "boom",
        "LogStreamArn": "arn:aws:logs:us-east-1:1:log-group:/aws/sagemaker/Endpoints/e",
        "ErrorCode": "SERVER_ERROR_FROM_MODEL",
    }
    decoded = decode_error(error(424, "ModelError" + SUFFIX, body))
    assert isinstance(decoded, errors.ModelError)
    assert decoded.original_status_code == 500
    assert decoded.original_message == "boom"
    assert decoded.log_stream_arn == body["LogStreamArn"]
    assert decoded.message == body["Message"]
    assert decoded.status == 424 and not decoded.retryable


@pytest.mark.parametrize("value", ["503", 503])
def test_model_error_status_as_text_or_number(value: object) -> None:
    decoded = decode_error(error(424, "ModelError", {"OriginalStatusCode": value}))
    assert isinstance(decoded, errors.ModelError) and decoded.original_status_code == 503


@pytest.mark.parametrize("value", ["\u00b2", "1" * 5000, True, 1.5, [], "-1", ""])
def test_model_error_odd_status_values(value: object) -> None:
    decoded = decode_error(error(424, "ModelError", {"OriginalStatusCode": value}))
    assert isinstance(decoded, errors.ModelError) and decoded.original_status_code is None


@pytest.mark.parametrize(
    "type_field",
    [
        "ValidationError",
        "com.amazon.coral.validate#ValidationError",
        "ValidationError:http://internal.amazon.com/coral/",
        "com.amazon#ValidationError:http://x/",
    ],
)
def test_code_from_the_body(type_field: str) -> None:
    decoded = decode_error(error(400, None, {"__type": type_field, "Message": "bad"}))
    assert type(decoded) is errors.ValidationError
    assert decoded.code == "ValidationError" and decoded.message == "bad"


def test_header_code_wins_over_body_and_hash_prefix_is_dropped() -> None:
    decoded = decode_error(
        error(503, "aws#ServiceUnavailable:http://x", {"__type": "ValidationError"})
    )
    assert type(decoded) is errors.ServiceUnavailable and decoded.code == "ServiceUnavailable"


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (502, b"<html>Bad Gateway</html>", errors.ServiceUnavailable),
        (500, b"", errors.InternalFailure),
        (503, b"{truncated", errors.ServiceUnavailable),
        (504, b"[1, 2]", errors.ServiceUnavailable),
        (530, b"null", errors.InternalDependency),
        (403, b"Forbidden", errors.SignatureError),
    ],
)
def test_non_json_and_empty_bodies(status: int, body: bytes, cls: type) -> None:
    decoded = decode_error(error(status, None, body, request_id=None))
    assert type(decoded) is cls
    assert decoded.status == status and decoded.request_id is None
    assert f"HTTP {status}" in decoded.message
    assert decoded.retryable is (status != 403)


@pytest.mark.parametrize(
    ("status", "retryable"), [(404, False), (409, False), (429, True), (501, True), (599, True)]
)
def test_unknown_codes_fall_back_to_the_status(status: int, retryable: bool) -> None:
    decoded = decode_error(error(status, "SomethingNew", {"message": "?"}))
    assert type(decoded) in (errors.ServiceError, errors.ModelNotReady)
    assert decoded.code == "SomethingNew" and decoded.retryable is retryable


header_text = st.text(st.characters(min_codepoint=1, max_codepoint=255), max_size=60)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "message",
                    "Message",
                    "__type",
                    "code",
                    "Code",
                    "OriginalStatusCode",
                    "OriginalMessage",
                    "LogStreamArn",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@given(
    status=st.integers(min_value=0, max_value=999),
    headers=st.dictionaries(
        st.sampled_from(["x-amzn-errortype", "x-amzn-requestid", "content-type", "other"]),
        header_text,
        max_size=4,
    ),
    body=st.binary(max_size=300) | json_values.map(orjson.dumps),
)
def test_decode_error_never_raises(status: int, headers: dict[str, str], body: bytes) -> None:
    decoded = decode_error(RawResponse(status, headers, body))
    assert isinstance(decoded, errors.ServiceError)
    assert decoded.status == status
    assert isinstance(decoded.code, str) and decoded.code
    assert isinstance(decoded.message, str)
    str(decoded)


def _head_fields(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """A head's request line and its headers by name (wire order set aside)."""
    request_line, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    fields = dict(line.split(b": ", 1) for line in lines)
    assert len(fields) == len(lines), "a header appears twice"
    return request_line, fields


@pytest.mark.parametrize("token", [None, "session-token"])
def test_presigned_heads_equal_the_plain_signing(
    token: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native transport's presigned heads carry exactly the plain path's headers."""
    from gateway._aws.sigv4 import Credentials, SigV4Signer
    from gateway._http.message import encode_head
    from gateway._http.request import PreparedRequest, RequestSigner

    now = [1_790_000_000.0]
    monkeypatch.setattr("gateway._aws.sigv4.wall_time", lambda: now[0])
    current = [Credentials("AKID", "secret", token)]
    signer = RequestSigner(SigV4Signer("us-east-1"), lambda: current[0])
    origin = Origin.from_url("https://runtime.sagemaker.us-east-1.amazonaws.com")
    path = "/endpoints/ep/invocations"
    prefix = SigV4Signer.request_prefix("POST", path)
    authorizations: set[bytes] = set()
    # A repeat is served from the cache; a new second or new credentials are not.
    for second, secret, model in [
        (0, "secret", "m1"),
        (0, "secret", "m2"),
        (0, "secret", "m1"),
        (1, "secret", "m1"),
        (1, "rotated", "m1"),
    ]:
        now[0] = 1_790_000_000.0 + second
        if secret != current[0].secret_key:
            current[0] = Credentials("AKID", secret, token)
        headers = [
            ("accept", "application/json"),
            ("content-type", "text/csv"),
            ("host", origin.host_header),
            ("x-amzn-sagemaker-target-model", model),
        ]
        for body in (b"1,2,3", b"4,5,6,7"):
            fast = PreparedRequest(origin, path, prefix, list(headers), body, signer, "", 3)
            plain = PreparedRequest(origin, path, prefix, list(headers), body, signer)
            fast_head = _head_fields(fast.encoded_head())
            assert fast_head == _head_fields(encode_head(path, plain.final_headers(), len(body)))
            assert fast_head[1][b"content-length"] == str(len(body)).encode()
            authorizations.add(fast_head[1][b"authorization"])
    # Only the repeated (second 0, m1) calls sign alike: 4 distinct shapes x 2 bodies.
    assert len(authorizations) == 4 * 2
