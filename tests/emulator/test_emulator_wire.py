"""Wire-format proofs: an unmodified boto3 client against the emulator."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError, EventStreamError, ParamValidationError

from gateway._aws.eventstream import EventStreamDecoder
from gateway._invoke.api import operations
from gateway.emulator import Emulator, EmulatorConfig
from tests._sagemaker_members import SESSIONS
from tests.emulator.conftest import ClientFactory, signed_headers


async def test_echo_round_trip_with_all_headers(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    client = boto_client(emulator.url)
    response = await asyncio.to_thread(
        client.invoke_endpoint,
        EndpointName="echo",
        Body=b'{"features": [1, 2, 3]}',
        ContentType="application/json",
        Accept="application/json",
        CustomAttributes="trace-id=abc",
        TargetContainerHostname="c1",
        InferenceId="inf-1",
        EnableExplanations="`false`",
        InferenceComponentName="ic-1",
        **({"SessionId": "NEW_SESSION"} if SESSIONS else {}),
    )
    assert response["Body"].read() == b'{"features": [1, 2, 3]}'
    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert response["CustomAttributes"] == "trace-id=abc"
    metadata = response["ResponseMetadata"]
    assert len(metadata["RequestId"]) == 36 and "date" in metadata["HTTPHeaders"]
    if not SESSIONS:  # botocore < 1.35.15: boto3 has no SessionId to send
        assert "NewSessionId" not in response
        return
    session_id, _, expires = response["NewSessionId"].partition("; Expires=")
    assert session_id and expires.endswith("Z")
    # the new session is then accepted; an unknown one is not
    again = await asyncio.to_thread(
        client.invoke_endpoint, EndpointName="echo", Body=b"x", SessionId=session_id
    )
    assert again["Body"].read() == b"x"
    with pytest.raises(client.exceptions.ValidationError):
        await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="echo", Body=b"x", SessionId="unknown-1"
        )
    assert emulator.stats.count(endpoint="echo") == 2


async def test_constant_model(emulator: Emulator, boto_client: ClientFactory) -> None:
    client = boto_client(emulator.url)
    response = await asyncio.to_thread(client.invoke_endpoint, EndpointName="constant", Body=b"1,2")
    assert response["Body"].read() == b"0.25"
    assert response["ContentType"] == "text/csv"


async def test_unknown_endpoint_is_validation_error(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    client = boto_client(emulator.url)
    with pytest.raises(client.exceptions.ValidationError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="missing", Body=b"x")
    error = caught.value.response
    assert error["Error"]["Message"] == "Endpoint missing of account 123456789012 not found."
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["ResponseMetadata"]["RequestId"]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ModelNotReadyException", 429),
        ("InternalFailure", 500),
        ("ServiceUnavailable", 503),
        ("InternalDependencyException", 530),
        ("ValidationError", 400),
        ("ThrottlingException", 400),
    ],
)
async def test_injected_errors_as_botocore_sees_them(
    emulator: Emulator, boto_client: ClientFactory, code: str, status: int
) -> None:
    emulator.set_faults("echo", error_rates={code: 1.0})
    client = boto_client(emulator.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    modeled = getattr(client.exceptions, code, None)
    if modeled is not None:  # ThrottlingException is not in the service model
        assert isinstance(caught.value, modeled)
    response = caught.value.response
    assert response["Error"]["Code"] == code
    assert response["Error"]["Message"]
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert emulator.stats.error_count("echo", code) == 1


async def test_model_error_fields(emulator: Emulator, boto_client: ClientFactory) -> None:
    emulator.set_faults("echo", error_rates={"ModelError": 1.0})
    client = boto_client(emulator.url)
    with pytest.raises(client.exceptions.ModelError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert response["OriginalStatusCode"] == 500
    assert response["OriginalMessage"] == "Injected model failure"
    assert response["LogStreamArn"].startswith("arn:aws:logs:us-east-1:123456789012:log-group:")
    assert "Received server error (500)" in response["Error"]["Message"]


async def test_response_stream_parsed_by_boto3_and_our_decoder(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    client = boto_client(emulator.url)
    payload = b"The quick brown fox jumps over the lazy dog"

    def read_stream() -> tuple[dict[str, Any], list[bytes]]:
        response = client.invoke_endpoint_with_response_stream(
            EndpointName="echo", Body=payload, ContentType="text/plain", CustomAttributes="c=1"
        )
        parts = [event["PayloadPart"]["Bytes"] for event in response["Body"]]
        return response, parts

    response, parts = await asyncio.to_thread(read_stream)
    assert len(parts) == 3 and b"".join(parts) == payload
    assert response["ContentType"] == "text/plain"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert response["CustomAttributes"] == "c=1"

    path = "/endpoints/echo/invocations-response-stream"
    async with httpx.AsyncClient() as http:
        raw = await http.post(
            emulator.url + path,
            content=payload,
            headers=signed_headers(emulator.url, path, payload),
        )
    assert raw.headers["content-type"] == "application/vnd.amazon.eventstream"
    messages = EventStreamDecoder().feed(raw.content)
    assert [m.event_type for m in messages] == ["PayloadPart"] * 3
    assert b"".join(m.payload for m in messages) == payload


async def test_model_stream_error_mid_stream(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", stream_error_rate=1.0)
    client = boto_client(emulator.url)

    def read_stream() -> list[bytes]:
        response = client.invoke_endpoint_with_response_stream(EndpointName="echo", Body=b"abcdef")
        try:
            return [event["PayloadPart"]["Bytes"] for event in response["Body"]]
        finally:
            response["Body"].close()

    with pytest.raises(EventStreamError) as caught:
        await asyncio.to_thread(read_stream)
    assert caught.value.response["Error"]["Code"] == "ModelStreamError"
    assert emulator.stats.stream_errors["echo"] == 1


async def test_async_invocation(emulator: Emulator, boto_client: ClientFactory) -> None:
    client = boto_client(emulator.url)
    response = await asyncio.to_thread(
        client.invoke_endpoint_async,
        EndpointName="echo",
        InputLocation="s3://bucket/input.json",
        InferenceId="job-42",
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert response["InferenceId"] == "job-42"
    assert response["OutputLocation"].endswith("/echo/job-42.out")
    assert response["FailureLocation"].endswith("/echo/job-42-error.out")
    # Neither an input location nor a body: the emulator refuses it, or botocore itself where
    # its model requires InputLocation (before the inline Body, 1.43.29).
    refusal: type[Exception] = (
        ParamValidationError
        if operations()["InvokeEndpointAsync"].by_name["InputLocation"].required
        else client.exceptions.ValidationError
    )
    with pytest.raises(refusal):
        await asyncio.to_thread(client.invoke_endpoint_async, EndpointName="echo")
    assert emulator.stats.async_invocations["echo"] == 1


async def test_signatures_verified(emulator: Emulator, boto_client: ClientFactory) -> None:
    wrong_secret = boto_client(emulator.url, secret="not-the-secret")
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(wrong_secret.invoke_endpoint, EndpointName="echo", Body=b"x")
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    unknown_key = boto_client(emulator.url, access_key="AKIDUNKNOWN")
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(unknown_key.invoke_endpoint, EndpointName="echo", Body=b"x")
    assert caught.value.response["Error"]["Code"] == "UnrecognizedClientException"

    # tamper with the body after signing
    client = boto_client(emulator.url)

    def tamper(request: Any, **_: Any) -> None:
        request.body = b"tampered"

    client.meta.events.register_last("before-send.sagemaker-runtime.InvokeEndpoint", tamper)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"original")
    assert caught.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert emulator.stats.count() == 0


async def test_stale_signature_rejected(emulator: Emulator, boto_client: ClientFactory) -> None:
    client = boto_client(emulator.url)
    stale = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 600))

    def backdate(request: Any, **_: Any) -> None:
        request.headers["X-Amz-Date"] = stale

    client.meta.events.register_last("before-send.sagemaker-runtime.InvokeEndpoint", backdate)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    error = caught.value.response["Error"]
    assert error["Code"] == "InvalidSignatureException"
    assert error["Message"].startswith("Signature expired")


async def test_unsigned_and_malformed_requests() -> None:
    config = EmulatorConfig.from_dict({"endpoints": {"echo": {}}})  # no credentials
    async with Emulator(config) as emu, httpx.AsyncClient(base_url=emu.url) as http:
        missing = await http.post("/endpoints/echo/invocations", content=b"x")
        assert missing.status_code == 403
        assert missing.headers["x-amzn-errortype"].startswith(
            "MissingAuthenticationTokenException:"
        )
        malformed = await http.post(
            "/endpoints/echo/invocations",
            content=b"x",
            headers={"Authorization": "Bearer nope", "X-Amz-Date": _now()},
        )
        assert malformed.status_code == 400
        assert malformed.headers["x-amzn-errortype"].startswith("IncompleteSignatureException:")
        well_formed = await http.post(
            "/endpoints/echo/invocations", content=b"x", headers=_signed_looking_headers()
        )
        assert well_formed.status_code == 200 and well_formed.content == b"x"


async def test_oversized_payload(emulator: Emulator, boto_client: ClientFactory) -> None:
    client = boto_client(emulator.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="echo", Body=b"x" * (6 * 1024 * 1024 + 1)
        )
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert "HTTP content length exceeded 6291456 bytes" in response["Error"]["Message"]


async def test_reset_is_a_connection_error(emulator: Emulator, boto_client: ClientFactory) -> None:
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    emulator.set_faults("echo", reset_rate=1.0)
    client = boto_client(emulator.url)
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    assert emulator.stats.resets["echo"] == 1
    emulator.restore("echo")
    response = await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"ok")
    assert response["Body"].read() == b"ok"


def _now() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _signed_looking_headers() -> dict[str, str]:
    """Well-formed SigV4 headers; only emulators without credentials accept them."""
    now = _now()
    return {
        "X-Amz-Date": now,
        "Authorization": f"AWS4-HMAC-SHA256 Credential=AKID/{now[:8]}/us-east-1/sagemaker/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
    }
