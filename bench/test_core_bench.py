"""Micro-benchmarks of the gateway's per-call hot path.

Run with:  python -m pytest bench/test_core_bench.py --benchmark-enable
(pyproject's addopts disables benchmarks by default; each body then runs
once as a plain test, and still checks its result). Timings are recorded,
never asserted. The invoke benchmarks run ``BATCH`` sequential calls per
round against ``bench._stub`` (its own process): per call = mean / BATCH.

For the side-by-side comparison with boto3, aiobotocore, httpx and the raw
floor, see ``python -m bench.compare``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httptools
import orjson
import pytest
import uvloop
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from bench._stub import BODY as STUB_BODY
from bench._stub import RESPONSE as STUB_RESPONSE
from bench._stub import StubServer
from gateway import Gateway, errors
from gateway._aws.sigv4 import Credentials, SigV4Signer, payload_sha256
from gateway._http.connection import Connection
from gateway._http.message import RawResponse, encode_head
from gateway._http.request import RequestSigner
from gateway._invoke.api import decode_error

BATCH = 100
REGION = "us-east-1"
HOST = "runtime.sagemaker.us-east-1.amazonaws.com"
PATH = "/endpoints/bench-endpoint/invocations"
BODY = b"3,14,1042,77,5,811,2"
ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


# -- signing -------------------------------------------------------------------


class SigningCase:
    """One request, signed by botocore once; ours must produce the same header."""

    def __init__(self) -> None:
        self.request = AWSRequest(
            method="POST",
            url=f"https://{HOST}{PATH}",
            data=BODY,
            headers={"Content-Type": "text/csv", "Accept": "application/json"},
        )
        self.auth = SigV4Auth(BotoCredentials(ACCESS_KEY, SECRET_KEY), "sagemaker", REGION)
        self.auth.add_auth(self.request)
        self.amz_date = str(self.request.headers["X-Amz-Date"])
        self.expected = str(self.request.headers["Authorization"])
        self.signer = SigV4Signer(REGION)
        self.credentials = Credentials(ACCESS_KEY, SECRET_KEY)
        self.prefix = SigV4Signer.request_prefix("POST", PATH)
        self.base = [("accept", "application/json"), ("content-type", "text/csv"), ("host", HOST)]
        self.headers = [*self.base, ("x-amz-date", self.amz_date)]
        self.payload_hash = payload_sha256(BODY)


@pytest.fixture(scope="module")
def case() -> SigningCase:
    return SigningCase()


def test_sign_ours_presorted(benchmark: Any, case: SigningCase) -> None:
    sign = case.signer.authorization_presorted
    args = (case.prefix, case.headers, case.payload_hash, case.credentials, case.amz_date)
    assert benchmark(sign, *args) == case.expected


def test_sign_ours_general(benchmark: Any, case: SigningCase) -> None:
    sign = case.signer.authorization
    args = ("POST", PATH, case.headers, case.payload_hash, case.credentials, case.amz_date)
    assert benchmark(sign, *args) == case.expected


def test_sign_botocore_add_auth(benchmark: Any, case: SigningCase) -> None:
    # add_auth replaces X-Amz-Date and Authorization on every call.
    benchmark(case.auth.add_auth, case.request)
    amz_date = str(case.request.headers["X-Amz-Date"])
    ours = case.signer.authorization_presorted(
        case.prefix,
        [*case.base, ("x-amz-date", amz_date)],
        case.payload_hash,
        case.credentials,
        amz_date,
    )
    assert case.request.headers["Authorization"] == ours


# -- the request head ------------------------------------------------------------


def test_sign_and_encode_head(benchmark: Any, case: SigningCase) -> None:
    """What the native transport does per call before writing: sign, then encode."""
    request_signer = RequestSigner(case.signer, lambda: case.credentials)

    def build() -> bytes:
        headers = request_signer.sign(case.prefix, case.base, payload_sha256(BODY))
        return encode_head(PATH, headers, len(BODY))

    head = benchmark(build)
    assert head.startswith(f"POST {PATH} HTTP/1.1\r\n".encode())
    assert head.endswith(f"content-length: {len(BODY)}\r\n\r\n".encode())
    assert b"\r\nauthorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/" in head
    assert b"\r\nx-amz-date: " in head and b"\r\nhost: " + HOST.encode() in head


# -- response parsing -------------------------------------------------------------


class _FakeTransport:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


class _FakePool:
    """Just what ``Connection`` asks of its pool."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.released = 0

    def options_apply(self, transport: object) -> None:
        pass

    def release(self, connection: object, reusable: bool) -> None:
        assert reusable
        self.released += 1

    def forget(self, connection: object) -> None:
        pass


@pytest.fixture
def bare_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = uvloop.new_event_loop()
    yield loop
    loop.close()


def test_parse_response_native(benchmark: Any, bare_loop: asyncio.AbstractEventLoop) -> None:
    """The native transport's own parse: ``Connection`` + httptools, fed the stub's answer."""
    pool = _FakePool(bare_loop)
    connection = Connection(pool)  # type: ignore[arg-type]
    connection.connection_made(_FakeTransport())  # type: ignore[arg-type]

    def exchange() -> RawResponse:
        waiter = connection.send(b"", True)
        connection.data_received(STUB_RESPONSE)
        return waiter.result()

    response = benchmark(exchange)
    assert response.status == 200 and response.body == STUB_BODY
    assert response.headers["x-amzn-invoked-production-variant"] == "AllTraffic"
    assert pool.released >= 1


def test_parse_response_httptools_only(benchmark: Any) -> None:
    """The floor of parsing: httptools with a body callback and nothing else."""

    class Sink:
        def __init__(self) -> None:
            self.body: list[bytes] = []
            self.done = 0

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            self.done += 1

    sink = Sink()
    parser = httptools.HttpResponseParser(sink)
    benchmark(parser.feed_data, STUB_RESPONSE)
    assert sink.done >= 1 and sink.body[-1] == STUB_BODY
    assert parser.get_status_code() == 200


# -- error decoding --------------------------------------------------------------

MODEL_ERROR = RawResponse(
    424,
    {
        "content-type": "application/json",
        "x-amzn-errortype": "ModelError:http://internal.amazon.com/coral/com.amazon.sagemaker/",
        "x-amzn-requestid": "11111111-2222-3333-4444-555555555555",
    },
    orjson.dumps(
        {
            "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
            "LogStreamArn": "arn:aws:logs:us-east-1:123456789012:log-group:/aws/sagemaker/x",
            "Message": "Received server error (500) from primary with message ...",
            "OriginalMessage": "boom",
            "OriginalStatusCode": 500,
        }
    ),
)


def test_decode_model_error(benchmark: Any) -> None:
    error = benchmark(decode_error, MODEL_ERROR)
    assert isinstance(error, errors.ModelError)
    assert error.status == 424 and error.code == "ModelError"
    assert error.original_status_code == 500 and error.original_message == "boom"
    assert error.request_id == "11111111-2222-3333-4444-555555555555"


# -- one whole call against the stub ------------------------------------------------


@pytest.fixture(scope="module")
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


def _invoke_batch(
    benchmark: Any, stub: StubServer, transport: str
) -> tuple[list[bytes], dict[str, int]]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        gateway = Gateway(
            REGION,
            endpoint_url=stub.url,
            credentials=(ACCESS_KEY, SECRET_KEY),
            transport=transport,
            pool={"max_connections": 64, "prewarm": 1},
        )
        runner.run(gateway.start())
        invoke = gateway.invoke

        async def batch() -> list[bytes]:
            return [
                (
                    await invoke(
                        "bench-endpoint",
                        BODY,
                        content_type="text/csv",
                        accept="application/json",
                        timeout=1.0,
                    )
                ).body
                for _ in range(BATCH)
            ]

        run: Callable[[], list[bytes]] = lambda: runner.run(batch())  # noqa: E731
        try:
            run()  # warm: the connection is open, the endpoint's strings cached
            bodies = benchmark(run)
            stats = gateway.transport.stats
            counts = {"opened": stats.connections_opened, "requests": stats.requests}
        finally:
            runner.run(gateway.aclose())
    return bodies, counts


def test_invoke_native(benchmark: Any, stub: StubServer) -> None:
    benchmark.extra_info["calls_per_round"] = BATCH
    bodies, counts = _invoke_batch(benchmark, stub, "native")
    assert bodies == [STUB_BODY] * BATCH
    # Sequential calls on a warm pool reuse the one prewarmed socket.
    assert counts["opened"] == 1
    assert counts["requests"] >= 2 * BATCH


def test_invoke_httpx(benchmark: Any, stub: StubServer) -> None:
    benchmark.extra_info["calls_per_round"] = BATCH
    bodies, counts = _invoke_batch(benchmark, stub, "httpx")
    assert bodies == [STUB_BODY] * BATCH
    assert counts["requests"] >= 2 * BATCH
