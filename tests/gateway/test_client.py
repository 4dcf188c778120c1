"""The Gateway against the emulator: headers, results, streams, async, signing, config,
endpoint resolution, and side by side with an unmodified boto3 client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from gateway import Gateway, errors
from gateway._server.http import Request, Response, start_server
from gateway.emulator import Emulator
from tests._sagemaker_members import SESSIONS
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, TRANSPORTS, gateway_for

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)


async def recording_server(seen: list[Request]) -> Any:
    async def handler(request: Request) -> Response:
        if request.method == "POST":  # not the httpx transport's prewarm pings
            seen.append(request)
        return Response(
            200,
            (
                ("Content-Type", "text/plain"),
                ("x-Amzn-Invoked-Production-Variant", "v1"),
                ("X-Amzn-SageMaker-Custom-Attributes", "back=1"),
                ("x-amzn-RequestId", "abc-123"),
                ("X-Amzn-SageMaker-New-Session-Id", "sess-9; Expires=2030-01-01T00:00:00Z"),
                ("X-Amzn-SageMaker-Closed-Session-Id", "sess-8"),
            ),
            b"answer",
        )

    return await start_server(handler, "127.0.0.1", 0)


async def test_every_header_arrives_and_every_field_returns(kind: str) -> None:
    seen: list[Request] = []
    server = await recording_server(seen)
    port = server.port
    try:
        async with gateway_for(f"http://127.0.0.1:{port}", transport=kind) as gw:
            result = await gw.invoke(
                "my-endpoint",
                b"1,2,3",
                content_type="text/csv",
                accept="application/json",
                target_model="m.tar.gz",
                target_variant="v1",
                target_container_hostname="c1",
                inference_id="inf-1",
                custom_attributes="a=1;  b=2",
                enable_explanations="`true`",
                inference_component="ic-1",
                **({"session_id": "sess-8"} if SESSIONS else {}),
            )
    finally:
        await server.close()
    (request,) = seen
    assert request.path == "/endpoints/my-endpoint/invocations" and request.body == b"1,2,3"
    headers = request.headers
    expected = {
        "content-type": "text/csv",
        "accept": "application/json",
        "x-amzn-sagemaker-target-model": "m.tar.gz",
        "x-amzn-sagemaker-target-variant": "v1",
        "x-amzn-sagemaker-target-container-hostname": "c1",
        "x-amzn-sagemaker-inference-id": "inf-1",
        "x-amzn-sagemaker-custom-attributes": "a=1;  b=2",  # as given: only SigV4 folds it
        "x-amzn-sagemaker-enable-explanations": "`true`",
        "x-amzn-sagemaker-inference-component": "ic-1",
        "x-amzn-sagemaker-session-id": "sess-8" if SESSIONS else None,
        "host": f"127.0.0.1:{port}",
    }
    assert {name: headers.get(name) for name in expected} == expected
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=" + ACCESS_KEY)
    assert "x-amz-date" in headers and "x-amz-security-token" not in headers
    assert result.body == b"answer" and result.content_type == "text/plain"
    assert result.invoked_variant == "v1" and result.custom_attributes == "back=1"
    assert result.request_id == "abc-123"
    if SESSIONS:  # the session members are the model's from botocore 1.35.15
        assert result.new_session_id == "sess-9; Expires=2030-01-01T00:00:00Z"
        assert result.closed_session_id == "sess-8"
    else:
        assert result.new_session_id is None and result.closed_session_id is None


async def test_no_accept_header_unless_asked(kind: str) -> None:
    seen: list[Request] = []
    server = await recording_server(seen)
    try:
        async with gateway_for(f"http://127.0.0.1:{server.port}", transport=kind) as gw:
            await gw.invoke("e", b"x")
    finally:
        await server.close()
    names = {name for name, _ in seen[0].header_pairs}
    assert "accept" not in names and "accept-encoding" not in names
    assert "content-type" not in names


async def test_against_the_emulator(kind: str, emulator: Emulator) -> None:
    async with gateway_for(emulator.url, transport=kind) as gw:
        result = await gw.invoke(
            "echo", b'{"a": 1}', content_type="application/json", custom_attributes="c=1"
        )
        assert result.body == b'{"a": 1}' and result.content_type == "application/json"
        assert result.invoked_variant == "AllTraffic" and result.custom_attributes == "c=1"
        assert result.request_id and len(result.request_id) == 36
        mme = await gw.invoke("mme", b"x", target_model="a.tar.gz")
        assert mme.body == b"x"
        pinned = await gw.invoke("ab", b"x", target_variant="green")
        assert pinned.invoked_variant == "green"
        if SESSIONS:
            session = await gw.invoke("echo", b"x", session_id="NEW_SESSION")
            assert session.new_session_id and "; Expires=" in session.new_session_id
        else:  # botocore < 1.35.15: refused, naming the release
            with pytest.raises(errors.MemberUnavailable, match=r"1\.35\.15"):
                await gw.invoke("echo", b"x", session_id="NEW_SESSION")
    assert emulator.stats.count(endpoint="mme", model="a.tar.gz") == 1


async def test_invoke_stream(kind: str, emulator: Emulator) -> None:
    payload = b"The quick brown fox jumps over the lazy dog"
    async with gateway_for(emulator.url, transport=kind) as gw:
        parts = [part async for part in gw.invoke_stream("streamer", payload, accept="text/plain")]
        assert len(parts) == 4 and b"".join(parts) == payload
        emulator.set_faults("streamer", stream_error_rate=1.0)
        received: list[bytes] = []
        with pytest.raises(errors.ModelError) as caught:
            async for part in gw.invoke_stream("streamer", payload):
                received.append(part)  # noqa: PERF401 - the parts before the error count
        assert caught.value.code == "ModelStreamError"
        assert received == [parts[0]]
        with pytest.raises(errors.ValidationError):
            async for _ in gw.invoke_stream("missing", payload):
                pass
        # the pool is fine afterwards
        assert (await gw.invoke("echo", b"after")).body == b"after"


async def test_invoke_async(kind: str, emulator: Emulator) -> None:
    async with gateway_for(emulator.url, transport=kind) as gw:
        answer = await gw.invoke_async(
            "echo",
            input_location="s3://bucket/in.json",
            inference_id="job-7",
            request_ttl_seconds=60,
        )
        assert answer.inference_id == "job-7"
        assert answer.output_location and answer.output_location.endswith("/echo/job-7.out")
        assert answer.failure_location and answer.failure_location.endswith("/job-7-error.out")
        assert answer.request_id
        generated = await gw.invoke_async("echo", input_location="s3://bucket/in.json")
        assert generated.inference_id and len(generated.inference_id) == 36
        with pytest.raises(errors.ValidationError):
            await gw.invoke_async("missing", input_location="s3://b/i")
    assert emulator.stats.async_invocations["echo"] == 2


async def test_signatures_checked_by_the_emulator(kind: str, emulator: Emulator) -> None:
    async with gateway_for(emulator.url, transport=kind) as gw:
        assert (await gw.invoke("echo", b"ok")).body == b"ok"
    async with gateway_for(emulator.url, transport=kind, credentials=(ACCESS_KEY, "wrong")) as gw:
        with pytest.raises(errors.SignatureError) as caught:
            await gw.invoke("echo", b"x")
        assert caught.value.code == "InvalidSignatureException" and caught.value.status == 403
        assert not caught.value.retryable
    async with gateway_for(emulator.url, transport=kind, credentials=("AKIDNOPE", "x")) as gw:
        with pytest.raises(errors.SignatureError) as caught:
            await gw.invoke("echo", b"x")
        assert caught.value.code == "UnrecognizedClientException"
    assert emulator.stats.count() == 1


async def test_session_token_is_sent_and_signed(kind: str) -> None:
    seen: list[Request] = []
    server = await recording_server(seen)
    try:
        async with gateway_for(
            f"http://127.0.0.1:{server.port}",
            transport=kind,
            credentials=(ACCESS_KEY, SECRET_KEY, "the-session-token"),
        ) as gw:
            await gw.invoke("e", b"x")
    finally:
        await server.close()
    headers = seen[0].headers
    assert headers["x-amz-security-token"] == "the-session-token"
    assert "x-amz-security-token" in headers["authorization"]


async def test_from_config_toml(kind: str, emulator: Emulator, tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f"""
region = "us-east-1"
endpoint_url = "{emulator.url}"
transport = "{kind}"
default_timeout_ms = 5000

[credentials]
access_key_id = "{ACCESS_KEY}"
secret_access_key = "{SECRET_KEY}"

[pool]
max_connections = 4
prewarm = 1
"""
    )
    async with Gateway.from_config(path) as gw:
        assert (await gw.invoke("constant", b"1,2")).body == b"0.25"
        assert gw.config.pool.max_connections == 4


# -- side by side with boto3 ----------------------------------------------------------------


@pytest.fixture
def boto_client(emulator: Emulator) -> Iterator[Any]:
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=emulator.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 0}, read_timeout=10, connect_timeout=5),
    )
    yield client
    client.close()


NO_RETRIES = {
    name: {"targets": [{"endpoint": name}], "retry": {"max_attempts": 1}}
    for name in ("echo", "constant", "ab", "streamer")
}


async def test_same_answers_as_boto3(kind: str, emulator: Emulator, boto_client: Any) -> None:
    async with gateway_for(emulator.url, transport=kind, routes=NO_RETRIES) as gw:
        for endpoint, arguments in [
            ("echo", {"ContentType": "application/json", "CustomAttributes": "k=v; x=y"}),
            ("constant", {"Accept": "text/csv"}),
            ("ab", {"TargetVariant": "blue"}),
        ]:
            theirs = await asyncio.to_thread(
                boto_client.invoke_endpoint, EndpointName=endpoint, Body=b"1,2,3", **arguments
            )
            ours = await gw.invoke(
                endpoint,
                b"1,2,3",
                content_type=arguments.get("ContentType"),
                accept=arguments.get("Accept"),
                custom_attributes=arguments.get("CustomAttributes"),
                target_variant=arguments.get("TargetVariant"),
            )
            assert ours.body == theirs["Body"].read()
            assert ours.content_type == theirs["ContentType"]
            assert ours.invoked_variant == theirs["InvokedProductionVariant"]
            assert ours.custom_attributes == theirs.get("CustomAttributes")

        for code, status in [
            ("ValidationError", 400),
            ("ModelError", 424),
            ("ModelNotReadyException", 429),
            ("InternalFailure", 500),
            ("ServiceUnavailable", 503),
            ("InternalDependencyException", 530),
            ("ThrottlingException", 400),
        ]:
            emulator.set_faults("echo", error_rates={code: 1.0})
            with pytest.raises(ClientError) as boto_caught:
                await asyncio.to_thread(boto_client.invoke_endpoint, EndpointName="echo", Body=b"x")
            with pytest.raises(errors.ServiceError) as caught:
                await gw.invoke("echo", b"x")
            response = boto_caught.value.response
            modeled = getattr(boto_client.exceptions, code, None)
            if modeled is not None:
                assert isinstance(boto_caught.value, modeled)
            assert caught.value.code == response["Error"]["Code"] == code
            assert caught.value.status == response["ResponseMetadata"]["HTTPStatusCode"] == status
            # messages name the request id, which differs between the two calls
            ours_message = caught.value.message.replace(caught.value.request_id or "?", "RID")
            their_rid = response["ResponseMetadata"]["RequestId"]
            assert ours_message == response["Error"]["Message"].replace(their_rid, "RID")
            if code == "ModelError":
                assert isinstance(caught.value, errors.ModelError)
                assert caught.value.original_status_code == response["OriginalStatusCode"]
                assert caught.value.original_message == response["OriginalMessage"]
                assert caught.value.log_stream_arn == response["LogStreamArn"]
        emulator.restore()

        # the same bad signature, both ways
        emulator_error = errors.SignatureError
        async with gateway_for(emulator.url, transport=kind, credentials=(ACCESS_KEY, "x")) as bad:
            with pytest.raises(emulator_error) as caught:
                await bad.invoke("echo", b"x")
        assert caught.value.code == "InvalidSignatureException"


async def test_same_stream_as_boto3(kind: str, emulator: Emulator, boto_client: Any) -> None:
    payload = b"stream me through both clients please"

    def boto_stream(fail: bool) -> tuple[list[bytes], str | None]:
        response = boto_client.invoke_endpoint_with_response_stream(
            EndpointName="streamer", Body=payload, ContentType="text/plain"
        )
        parts: list[bytes] = []
        try:
            parts.extend(event["PayloadPart"]["Bytes"] for event in response["Body"])
        except EventStreamError as exc:
            return parts, exc.response["Error"]["Code"]
        finally:
            response["Body"].close()
        return parts, None

    async with gateway_for(emulator.url, transport=kind, routes=NO_RETRIES) as gw:
        theirs, _ = await asyncio.to_thread(boto_stream, False)
        ours = [
            part async for part in gw.invoke_stream("streamer", payload, content_type="text/plain")
        ]
        assert ours == theirs and b"".join(ours) == payload
        emulator.set_faults("streamer", stream_error_rate=1.0)
        theirs, code = await asyncio.to_thread(boto_stream, True)
        got: list[bytes] = []
        with pytest.raises(errors.ModelError) as caught:
            stream = gw.invoke_stream("streamer", payload, content_type="text/plain")
            async for part in stream:
                got.append(part)  # noqa: PERF401 - the parts before the error count
        assert got == theirs and caught.value.code == code == "ModelStreamError"


async def test_stream_metadata_matches_boto3(
    kind: str, emulator: Emulator, boto_client: Any
) -> None:
    payload = b"metadata travels with the stream"

    def boto_metadata() -> dict[str, Any]:
        response = boto_client.invoke_endpoint_with_response_stream(
            EndpointName="streamer", Body=payload, ContentType="text/plain", CustomAttributes="k=v"
        )
        response["Body"].close()
        return response

    theirs = await asyncio.to_thread(boto_metadata)
    async with gateway_for(emulator.url, transport=kind, routes=NO_RETRIES) as gw:
        stream = gw.invoke_stream(
            "streamer", payload, content_type="text/plain", custom_attributes="k=v"
        )
        assert stream.content_type is None  # nothing has been sent yet
        parts = [part async for part in stream]
    assert b"".join(parts) == payload
    assert stream.content_type == theirs["ContentType"]
    assert stream.invoked_variant == theirs["InvokedProductionVariant"]
    assert stream.custom_attributes == theirs["CustomAttributes"] == "k=v"
    assert stream.request_id and stream.target == "streamer"
