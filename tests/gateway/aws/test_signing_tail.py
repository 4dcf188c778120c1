"""The C signing tail (``gateway._aws._sigv4_tail``) against hashlib and botocore.

Where it is built (every build but a pure one), presigned heads are finished
by it; these tests hold its heads to the hashlib path's, byte for byte, and
its signatures to botocore's. A pure build has no tail to test: there the
tests that need it skip, and the hashlib path is what every other test runs.
"""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._aws import sigv4
from gateway._aws._libcrypto import sha256_functions
from gateway._aws.sigv4 import Credentials, SigV4Signer, payload_sha256
from tests.gateway.aws.test_signing import botocore_sign

tail = pytest.importorskip("gateway._aws._sigv4_tail", reason="a pure build: no signing tail")

_ORIGIN_HOST = "runtime.sagemaker.us-east-1.amazonaws.com"
_PATH = "/endpoints/my-endpoint/invocations"


def test_a_built_tail_is_the_one_signing() -> None:
    """Built, it finds the libcrypto hashlib loaded here, passes its self-test and signs."""
    assert sigv4.NATIVE_SIGNING
    assert Path(tail.__file__).parent == Path(sigv4.__file__).parent
    functions = sha256_functions()
    assert functions is not None
    assert all(address > 0 for address in functions)
    tail.bind(*functions)  # binding again to the same functions: still one signing
    assert tail.sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()


@pytest.mark.parametrize(
    ("addresses", "error"),
    [((1, 2, 3), TypeError), ((1, 2, 3, "4"), TypeError), ((1, 2, 3, 0), ValueError)],
    ids=["three", "a-string", "a-null"],
)
def test_binding_refuses_what_is_not_four_addresses_and_keeps_its_functions(
    addresses: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        tail.bind(*addresses)
    assert tail.sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_the_body_hash_is_hashlibs(body: bytes) -> None:
    assert tail.sha256_hex(body) == hashlib.sha256(body).hexdigest()
    assert payload_sha256(body) == hashlib.sha256(body).hexdigest()


_VALUES = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=40
)


def _presigned(
    signer: SigV4Signer,
    secret: str,
    amz_date: str,
    headers: list[tuple[str, str]],
) -> sigv4.PresignedHead:
    ordered = sorted([*headers, ("host", _ORIGIN_HOST), ("x-amz-date", amz_date)])
    start = f"POST {_PATH} HTTP/1.1\r\nhost: {_ORIGIN_HOST}\r\nx-amz-date: {amz_date}\r\n"
    return signer.presign_head(
        SigV4Signer.request_prefix("POST", _PATH),
        ordered,
        Credentials("AKIDEXAMPLE", secret),
        amz_date,
        start,
    )


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=3000),
    secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/+", min_size=1, max_size=40),
    second=st.integers(min_value=0, max_value=59),
    content_type=_VALUES,
    attributes=_VALUES,
)
def test_a_head_the_tail_finishes_is_the_hashlib_paths(
    body: bytes, secret: str, second: int, content_type: str, attributes: str
) -> None:
    amz_date = f"20261205T1010{second:02d}Z"
    headers = [
        ("content-type", content_type),
        ("x-amzn-sagemaker-custom-attributes", attributes),
    ]
    native = _presigned(SigV4Signer("us-east-1"), secret, amz_date, headers)
    plain = _presigned(SigV4Signer("us-east-1", native=False), secret, amz_date, headers)
    payload_hash = payload_sha256(body)
    assert native.head(payload_hash, len(body)) == plain.head(payload_hash, len(body))


@pytest.mark.parametrize("length", [0, 1, 9, 10, 99, 100, 65_536, 10**12])
def test_the_tail_states_each_content_length_in_decimal(length: int) -> None:
    amz_date = "20261205T101010Z"
    headers = [("content-type", "application/json")]
    native = _presigned(SigV4Signer("us-east-1"), "secret", amz_date, headers)
    plain = _presigned(SigV4Signer("us-east-1", native=False), "secret", amz_date, headers)
    payload_hash = payload_sha256(b"")
    head = native.head(payload_hash, length)
    assert head == plain.head(payload_hash, length)
    assert head.endswith(b"\r\ncontent-length: %d\r\n\r\n" % length)


def test_a_head_the_tail_finishes_is_signed_as_botocore_signs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = b'{"instances": [[1.0, 2.0]]}'
    when = datetime.datetime(2026, 12, 5, 10, 10, 10)
    headers = [("accept", "application/json"), ("content-type", "application/json")]
    signed = botocore_sign(
        url=f"https://{_ORIGIN_HOST}{_PATH}",
        headers=headers,
        body=body,
        credentials=Credentials("AKIDEXAMPLE", "very-secret"),
        region="us-east-1",
        when=when,
        monkeypatch=monkeypatch,
    )
    amz_date = signed.headers["X-Amz-Date"]
    presigned = _presigned(SigV4Signer("us-east-1"), "very-secret", amz_date, headers)
    head = presigned.head(payload_sha256(body), len(body))
    lines = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if line)
    assert lines["content-length"] == str(len(body))
    assert lines["authorization"] == signed.headers["Authorization"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((b"start", b"short", "0" * 64, 1), ValueError),
        ((b"start", tail.sha256_state(b"x") * 3, "0" * 64, -1), ValueError),
        (("start", tail.sha256_state(b"x") * 3, "0" * 64, 1), TypeError),
        ((b"start", tail.sha256_state(b"x") * 3, b"0" * 64, 1), TypeError),
        ((b"start", tail.sha256_state(b"x") * 3, "0" * 64), TypeError),
    ],
    ids=["states-length", "negative-length", "start-str", "hash-bytes", "three-arguments"],
)
def test_the_tail_refuses_what_it_cannot_finish(
    arguments: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        tail.signed_head(*arguments)
