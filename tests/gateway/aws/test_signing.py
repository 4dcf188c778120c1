"""The sans-IO signer against botocore's SigV4Auth and aws-requests-auth."""

from __future__ import annotations

import contextlib
import datetime
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from aws_requests_auth import aws_auth
from botocore import auth as botocore_auth
from botocore import compat as botocore_compat
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway._aws.sigv4 import (
    Credentials,
    SigV4Signer,
    canonical_query,
    parse_authorization,
    payload_sha256,
)
from gateway._invoke.api import check_header_value

SAGEMAKER_HEADERS = (
    "x-amzn-sagemaker-custom-attributes",
    "x-amzn-sagemaker-enable-explanations",
    "x-amzn-sagemaker-inference-component",
    "x-amzn-sagemaker-inference-id",
    "x-amzn-sagemaker-session-id",
    "x-amzn-sagemaker-target-container-hostname",
    "x-amzn-sagemaker-target-model",
    "x-amzn-sagemaker-target-variant",
    "x-amzn-sagemaker-accept",
    "accept",
    "content-type",
)

endpoint_names = st.from_regex(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,20}", fullmatch=True)
# Printable Latin-1 with spaces and tabs in odd places (inner runs, edges).
header_values = st.lists(
    st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\t", "  ", "\xa0", "\xe9", "\xff"]),
    max_size=30,
).map("".join)
dates = st.datetimes(
    min_value=datetime.datetime(2015, 1, 1), max_value=datetime.datetime(2040, 12, 31)
)
tokens = st.none() | st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=60
)
regions = st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1"])


def _freeze_botocores_clock(monkeypatch: pytest.MonkeyPatch, when: datetime.datetime) -> None:
    """SigV4Auth reads ``when`` as the time: botocore 1.34 calls ``datetime.datetime.utcnow()``
    in ``botocore.auth``, newer releases ``get_current_datetime()`` of ``botocore.compat``;
    both modules' ``datetime`` is replaced, so either finds the frozen clock."""

    class Frozen(datetime.datetime):
        @classmethod
        def utcnow(cls) -> datetime.datetime:  # type: ignore[override]
            return when

        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:  # type: ignore[override]
            return when if tz is None else when.replace(tzinfo=tz)

    frozen = SimpleNamespace(**{**vars(datetime), "datetime": Frozen})
    for module in (botocore_auth, botocore_compat):
        monkeypatch.setattr(module, "datetime", frozen)


def botocore_sign(
    *,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes,
    credentials: Credentials,
    region: str,
    when: datetime.datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> AWSRequest:
    request = AWSRequest(method="POST", url=url, data=body)
    for name, value in headers:
        request.headers[name] = value
    _freeze_botocores_clock(monkeypatch, when)
    boto_credentials = BotoCredentials(
        credentials.access_key, credentials.secret_key, credentials.token
    )
    botocore_auth.SigV4Auth(boto_credentials, "sagemaker", region).add_auth(request)
    return request


@settings(
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    endpoint=endpoint_names,
    chosen=st.lists(st.sampled_from(SAGEMAKER_HEADERS), unique=True, max_size=6),
    values=st.lists(header_values, min_size=6, max_size=6),
    body=st.binary(max_size=200),
    token=tokens,
    when=dates,
    region=regions,
)
def test_matches_botocore(
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
    chosen: list[str],
    values: list[str],
    body: bytes,
    token: str | None,
    when: datetime.datetime,
    region: str,
) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    host = f"runtime.sagemaker.{region}.amazonaws.com"
    path = f"/endpoints/{endpoint}/invocations"
    headers = list(zip(chosen, values, strict=False))
    signed = botocore_sign(
        url=f"https://{host}{path}",
        headers=headers,
        body=body,
        credentials=credentials,
        region=region,
        when=when,
        monkeypatch=monkeypatch,
    )
    amz_date = signed.headers["X-Amz-Date"]
    assert amz_date == when.strftime("%Y%m%dT%H%M%SZ")
    ours = [("host", host), ("x-amz-date", amz_date), *headers]
    if token:
        ours.append(("x-amz-security-token", token))
    signer = SigV4Signer(region)
    expected = signed.headers["Authorization"]
    assert (
        signer.authorization("POST", path, ours, payload_sha256(body), credentials, amz_date)
        == expected
    )
    # the hot path: values checked (trimmed as sent), names sorted, once each
    presorted = sorted((name, check_header_value(name, value)) for name, value in ours)
    prefix = SigV4Signer.request_prefix("POST", path)
    assert (
        signer.authorization_presorted(
            prefix, presorted, payload_sha256(body), credentials, amz_date
        )
        == expected
    )


def test_repeated_headers_and_unsigned_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    when = datetime.datetime(2024, 5, 1, 12, 0, 0)
    credentials = Credentials("AKID", "secret")
    headers = [
        ("x-amzn-sagemaker-custom-attributes", " a  b "),
        ("user-agent", "ignored/1.0"),
        ("x-amzn-trace-id", "Root=1"),
        ("content-type", "text/csv"),
    ]
    signed = botocore_sign(
        url="https://h.example/endpoints/e/invocations",
        headers=headers,
        body=b"1,2",
        credentials=credentials,
        region="us-east-1",
        when=when,
        monkeypatch=monkeypatch,
    )
    ours = [("host", "h.example"), ("x-amz-date", signed.headers["X-Amz-Date"]), *headers]
    authorization = SigV4Signer("us-east-1").authorization(
        "POST",
        "/endpoints/e/invocations",
        ours,
        payload_sha256(b"1,2"),
        credentials,
        signed.headers["X-Amz-Date"],
    )
    assert authorization == signed.headers["Authorization"]
    assert "user-agent" not in authorization and "x-amzn-trace-id" not in authorization


@settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(endpoint=endpoint_names, body=st.binary(max_size=100), token=tokens, when=dates)
def test_matches_aws_requests_auth(
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
    body: bytes,
    token: str | None,
    when: datetime.datetime,
) -> None:
    # aws-requests-auth signs host, x-amz-date and (if any) the token: sign the same.
    fake_datetime = SimpleNamespace(datetime=SimpleNamespace(utcnow=lambda: when))
    monkeypatch.setattr(aws_auth, "datetime", fake_datetime)
    host = "runtime.sagemaker.us-west-2.amazonaws.com"
    path = f"/endpoints/{endpoint}/invocations"
    auth = aws_auth.AWSRequestsAuth(
        aws_access_key="AKIDEXAMPLE",
        aws_secret_access_key="secret/key+value",
        aws_host=host,
        aws_region="us-west-2",
        aws_service="sagemaker",
        aws_token=token,
    )
    request: Any = requests.Request("POST", f"https://{host}{path}", data=body).prepare()
    theirs = auth.get_aws_request_headers(request, "AKIDEXAMPLE", "secret/key+value", token)
    amz_date = theirs["x-amz-date"]
    headers = [("host", host), ("x-amz-date", amz_date)]
    if token:
        headers.append(("x-amz-security-token", token))
    ours = SigV4Signer("us-west-2").authorization(
        "POST",
        path,
        headers,
        payload_sha256(body),
        Credentials("AKIDEXAMPLE", "secret/key+value", token),
        amz_date,
    )
    assert ours == theirs["Authorization"]


def test_signing_key_cached_per_day_and_secret() -> None:
    signer = SigV4Signer("us-east-1")
    headers = [("host", "h"), ("x-amz-date", "20240101T000000Z")]
    first = signer.authorization(
        "POST", "/", headers, payload_sha256(b""), Credentials("A", "s1"), "20240101T000000Z"
    )
    assert len(signer._key_cache) == 1
    again = signer.authorization(
        "POST", "/", headers, payload_sha256(b""), Credentials("A", "s1"), "20240101T000001Z"
    )
    assert len(signer._key_cache) == 1 and first != again
    signer.authorization(
        "POST", "/", headers, payload_sha256(b""), Credentials("A", "s2"), "20240101T000000Z"
    )
    signer.authorization(
        "POST", "/", headers, payload_sha256(b""), Credentials("A", "s1"), "20240102T000000Z"
    )
    assert set(signer._key_cache) == {
        ("20240101", "s1"),
        ("20240101", "s2"),
        ("20240102", "s1"),
    }
    # a rotated secret gives another signature for the same request
    assert first != signer.authorization(
        "POST", "/", headers, payload_sha256(b""), Credentials("A", "s2"), "20240101T000000Z"
    )
    for day in range(3, 20):
        signer.authorization(
            "POST",
            "/",
            headers,
            payload_sha256(b""),
            Credentials("A", "s1"),
            f"202401{day:02d}T000000Z",
        )
    assert len(signer._key_cache) <= 9  # bounded


def test_canonical_query_sorted_like_botocore() -> None:
    assert canonical_query("") == ""
    assert canonical_query("b=2&a=1&a=0&c") == "a=0&a=1&b=2&c="


def test_parse_authorization_round_trip() -> None:
    value = SigV4Signer("eu-west-1").authorization(
        "POST",
        "/endpoints/e/invocations",
        [("host", "h"), ("x-amz-date", "20240101T000000Z")],
        payload_sha256(b"x"),
        Credentials("AKID", "secret"),
        "20240101T000000Z",
    )
    parsed = parse_authorization(value)
    assert (parsed.access_key, parsed.day, parsed.region, parsed.service) == (
        "AKID",
        "20240101",
        "eu-west-1",
        "sagemaker",
    )
    assert parsed.signed_headers == ("host", "x-amz-date")
    assert len(parsed.signature) == 64


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "unsupported authorization algorithm"),
        ("AWS4-HMAC-SHA1 Credential=a/b/c/d/aws4_request", "unsupported authorization algorithm"),
        ("AWS4-HMAC-SHA256", "malformed authorization header"),
        ("AWS4-HMAC-SHA256 Credential", "malformed authorization header"),
        ("AWS4-HMAC-SHA256 SignedHeaders=host, Signature=ab", "lacks Credential"),
        ("AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, Signature=ab", "lacks SignedHeaders"),
        ("AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, SignedHeaders=host", "lacks Signature"),
        (
            "AWS4-HMAC-SHA256 Credential=a/b/c/aws4_request, SignedHeaders=host, Signature=ab",
            "malformed credential scope",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=ab",
            "malformed credential scope",
        ),
    ],
)
def test_parse_authorization_errors(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_authorization(value)


@given(st.text(max_size=200))
def test_parse_authorization_only_raises_value_error(value: str) -> None:
    with contextlib.suppress(ValueError):
        parse_authorization(value)


def test_credentials_repr_hides_secrets() -> None:
    credentials = Credentials("AKIDVISIBLE", "very-secret-key", "very-secret-token", 123.0)
    for text in (repr(credentials), str(credentials)):
        assert "AKIDVISIBLE" in text
        assert "very-secret" not in text


@settings(max_examples=200, deadline=None)
@given(values=st.lists(header_values, min_size=2, max_size=2))
def test_the_presigned_head_signs_the_folded_values_and_sends_them_as_given(
    values: list[str],
) -> None:
    """The wire keeps a value's inner whitespace; the signature covers its Trimall form."""
    from gateway._http.message import Origin
    from gateway._http.request import PreparedRequest, RequestSigner

    credentials = Credentials("AKID", "secret")
    signer = SigV4Signer("us-east-1")
    origin = Origin.from_url("https://runtime.sagemaker.us-east-1.amazonaws.com")
    path = "/endpoints/ep/invocations"
    headers = [
        ("content-type", check_header_value("content-type", values[0])),
        ("host", origin.host_header),
        ("x-amzn-sagemaker-custom-attributes", check_header_value("x", values[1])),
    ]
    request = PreparedRequest(
        origin,
        path,
        SigV4Signer.request_prefix("POST", path),
        list(headers),
        b"body",
        RequestSigner(signer, lambda: credentials),
        "",
        2,
    )
    head = request.encoded_head().decode("latin-1")
    lines = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if line)
    assert lines["x-amzn-sagemaker-custom-attributes"] == headers[2][1]
    amz_date = lines["x-amz-date"]
    expected = signer.authorization(
        "POST",
        path,
        [*headers, ("x-amz-date", amz_date)],
        payload_sha256(b"body"),
        credentials,
        amz_date,
    )
    assert lines["authorization"] == expected
