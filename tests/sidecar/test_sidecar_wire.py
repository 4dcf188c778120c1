"""boto3 (unmodified) -> sidecar -> Gateway -> emulator: the SageMaker Runtime API, end to end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError

from gateway import Gateway
from gateway.emulator import Emulator
from gateway.sidecar import Sidecar
from tests._sagemaker_members import SESSIONS
from tests.sidecar.conftest import ClientFactory


async def test_plain_call_with_every_header(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    client = boto_client(sidecar.url)
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
    session: dict[str, str] = {}
    if SESSIONS:  # botocore >= 1.35.15
        session_id, _, expires = response["NewSessionId"].partition("; Expires=")
        assert session_id and expires.endswith("Z")
        session["SessionId"] = session_id
    # The upstream's request id reaches the client.
    assert len(response["ResponseMetadata"]["RequestId"]) == 36
    again = await asyncio.to_thread(
        client.invoke_endpoint, EndpointName="echo", Body=b"x", **session
    )
    assert again["Body"].read() == b"x"
    assert emulator.stats.count(endpoint="echo") == 2


async def test_constant_model_content_type(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    client = boto_client(sidecar.url)
    response = await asyncio.to_thread(client.invoke_endpoint, EndpointName="constant", Body=b"1,2")
    assert response["Body"].read() == b"0.25"
    assert response["ContentType"] == "text/csv"


async def test_mme_target_models(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    client = boto_client(sidecar.url)
    for model in ("a.tar.gz", "b.tar.gz", "a.tar.gz"):
        response = await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="mme", Body=model.encode(), TargetModel=model
        )
        assert response["Body"].read() == model.encode()
    assert emulator.stats.count(endpoint="mme", model="a.tar.gz") == 2
    assert emulator.stats.count(endpoint="mme", model="b.tar.gz") == 1
    with pytest.raises(client.exceptions.ValidationError):
        await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="mme", Body=b"x", TargetModel="unknown.tar.gz"
        )


async def test_pinned_variants(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    client = boto_client(sidecar.url)
    for variant in ("blue", "green", "blue"):
        response = await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="ab", Body=b"x", TargetVariant=variant
        )
        assert response["InvokedProductionVariant"] == variant
        assert response["Body"].read() == b"x"
    with pytest.raises(client.exceptions.ValidationError) as caught:
        await asyncio.to_thread(
            client.invoke_endpoint, EndpointName="ab", Body=b"x", TargetVariant="red"
        )
    assert "Variant red not found" in caught.value.response["Error"]["Message"]


async def test_custom_attributes_round_trip(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    client = boto_client(sidecar.url)
    # ASCII only: botocore itself does not round-trip non-ASCII header values.
    attributes = 'a=1; trace="x y"; path=/v1/score?q=1&r=2; empty='

    response = await asyncio.to_thread(
        client.invoke_endpoint, EndpointName="echo", Body=b"x", CustomAttributes=attributes
    )
    assert response["CustomAttributes"] == attributes
    assert response["Body"].read() == b"x"


async def test_response_stream(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    client = boto_client(sidecar.url)
    payload = b"The quick brown fox jumps over the lazy dog"

    def read_stream() -> tuple[dict[str, Any], list[bytes]]:
        response = client.invoke_endpoint_with_response_stream(
            EndpointName="echo", Body=payload, ContentType="text/plain", CustomAttributes="c=1"
        )
        return response, [event["PayloadPart"]["Bytes"] for event in response["Body"]]

    response, parts = await asyncio.to_thread(read_stream)
    assert len(parts) == 3 and b"".join(parts) == payload
    assert response["CustomAttributes"] == "c=1"
    assert response["ResponseMetadata"]["HTTPHeaders"]["content-type"] == (
        "application/vnd.amazon.eventstream"
    )
    assert emulator.stats.stream_invocations["echo"] == 1


async def test_model_stream_error_mid_stream(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", stream_error_rate=1.0)
    client = boto_client(sidecar.url)
    received: list[bytes] = []

    def read_stream() -> None:
        response = client.invoke_endpoint_with_response_stream(EndpointName="echo", Body=b"abcdef")
        try:
            received.extend(event["PayloadPart"]["Bytes"] for event in response["Body"])
        finally:
            response["Body"].close()

    with pytest.raises(EventStreamError) as caught:
        await asyncio.to_thread(read_stream)
    assert caught.value.response["Error"]["Code"] == "ModelStreamError"
    assert received == [b"ab"]  # the part before the failure was relayed


async def test_stream_error_before_first_byte_is_rest_json(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", error_rates={"ModelError": 1.0})
    client = boto_client(sidecar.url)
    with pytest.raises(client.exceptions.ModelError) as caught:
        await asyncio.to_thread(
            client.invoke_endpoint_with_response_stream, EndpointName="echo", Body=b"x"
        )
    assert caught.value.response["OriginalStatusCode"] == 500
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424


async def test_async_invocation(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    client = boto_client(sidecar.url)
    response = await asyncio.to_thread(
        client.invoke_endpoint_async,
        EndpointName="echo",
        InputLocation="s3://bucket/input.json",
        InferenceId="job-42",
        ContentType="application/json",
        RequestTTLSeconds=600,
        InvocationTimeoutSeconds=300,
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert response["InferenceId"] == "job-42"
    assert response["OutputLocation"].endswith("/echo/job-42.out")
    assert response["FailureLocation"].endswith("/echo/job-42-error.out")
    assert emulator.stats.async_invocations["echo"] == 1


async def test_unknown_and_invalid_endpoints(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    client = boto_client(sidecar.url)
    with pytest.raises(client.exceptions.ValidationError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="missing", Body=b"x")
    error = caught.value.response
    assert error["Error"]["Message"] == "Endpoint missing of account 123456789012 not found."
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(client.exceptions.ValidationError):
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="bad_name!", Body=b"x")


async def test_unknown_operation(sidecar: Sidecar, boto_client: ClientFactory) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        response = await http.get("/endpoints/echo/invocations")
    assert response.status_code == 404
    assert response.headers["x-amzn-errortype"].startswith("UnknownOperationException:")


async def test_client_error_shape_is_complete(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", error_rates={"ServiceUnavailable": 1.0})
    client = boto_client(sidecar.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    metadata = caught.value.response["ResponseMetadata"]
    # The upstream's request id, not one the sidecar made up.
    assert len(metadata["RequestId"]) == 36
    assert metadata["HTTPStatusCode"] == 503


class _RawUpstream:
    """An upstream that answers each connection's one request with ``head`` and ``{}``."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.writers: list[asyncio.StreamWriter] = []

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            request_head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in request_head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(self.head + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            await writer.drain()
        except asyncio.IncompleteReadError:
            pass  # a connection opened and closed unused
        finally:
            writer.close()


async def _sidecar_answer_head(head: bytes) -> bytes:
    """The head of the sidecar's answer to an invocation, ``head`` being the upstream's."""
    upstream = _RawUpstream(head)
    server = await asyncio.start_server(upstream.answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    gateway = Gateway(
        region="us-east-1", endpoint_url=f"http://127.0.0.1:{port}", credentials=("AK", "SK")
    )
    try:
        async with gateway, Sidecar(gateway, "127.0.0.1", 0) as sidecar:
            reader, writer = await asyncio.open_connection(sidecar.host, sidecar.port)
            writer.write(
                b"POST /endpoints/e/invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"
            )
            answer = await reader.readuntil(b"\r\n\r\n")
            writer.close()
            await writer.wait_closed()
            return answer
    finally:
        server.close()
        for upstream_writer in upstream.writers:
            upstream_writer.close()
        await server.wait_closed()
        await asyncio.sleep(0.01)  # the handlers see their connections end


async def test_the_upstreams_field_lines_are_relayed_as_sent() -> None:
    """The answer's field lines are the upstream's bytes; framing and Date are the sidecar's."""
    fields = (
        b"CONTENT-TYPE:text/csv\r\n"
        b"x-amzn-invoked-production-variant: blue\r\n"
        b"X-Amzn-SageMaker-Custom-Attributes: a=1;  b=2\r\n"
        b"x-amzn-requestid:r-7\r\n"
    )
    upstream_own = b"Server: upstream\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT"
    head = b"HTTP/1.1 200 OK\r\n" + fields + upstream_own

    answer = await _sidecar_answer_head(head)

    lines = answer.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    assert fields in answer
    assert [line for line in lines if line.lower().startswith(b"date:")] != [
        b"Date: Mon, 01 Jan 2001 00:00:00 GMT"
    ]
    assert b"upstream" not in answer
    assert answer.lower().count(b"x-amzn-requestid:") == 1
    assert answer.lower().count(b"content-length:") == 1


@pytest.mark.parametrize("request_id_line", [b"", b"x-amzn-RequestId: \r\n"])
async def test_an_answer_without_a_request_id_gets_one(request_id_line: bytes) -> None:
    """None or an empty one upstream: the sidecar makes one (SageMaker always sends one)."""
    head = b"HTTP/1.1 200 OK\r\n" + request_id_line + b"CONTENT-TYPE:text/csv"

    answer = await _sidecar_answer_head(head)

    lines = answer.split(b"\r\n")
    request_ids = [line for line in lines if line.lower().startswith(b"x-amzn-requestid:")]
    assert len(request_ids) == 1 and len(request_ids[0].split(b":")[1].strip()) == 36
    assert b"Content-Type: text/csv\r\n" in answer


async def test_a_field_sent_twice_is_relayed_once() -> None:
    """A head the sidecar cannot copy line for line is read and re-encoded instead."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\n"
        b"X-Amzn-SageMaker-Custom-Attributes: a=1\r\nx-amzn-RequestId: r-1\r\n"
        b"X-Amzn-SageMaker-Custom-Attributes: a=2"
    )

    answer = await _sidecar_answer_head(head)

    # What the gateway's reader sees (the last), once; the rest as SageMaker spells it.
    assert answer.lower().count(b"x-amzn-sagemaker-custom-attributes:") == 1
    assert b"X-Amzn-SageMaker-Custom-Attributes: a=2\r\n" in answer
    assert b"x-amzn-RequestId: r-1\r\n" in answer
    assert b"Content-Type: text/csv\r\n" in answer


async def test_custom_attributes_are_relayed_as_the_client_sent_them(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    """Whitespace inside the value is the model's to read: the relay neither folds it nor
    breaks the signature (the emulator verifies the sidecar's)."""
    attributes = '{"q": "a  b",\t"k": 1} '
    client = boto_client(sidecar.url)
    response = await asyncio.to_thread(
        client.invoke_endpoint, EndpointName="echo", Body=b"x", CustomAttributes=attributes
    )
    assert response["CustomAttributes"].strip(" \t") == attributes.strip()
    (sent,) = [r for r in emulator.recorded if r.path == "/endpoints/echo/invocations"]
    headers = {name.lower(): value for name, value in sent.headers}
    assert headers["x-amzn-sagemaker-custom-attributes"].strip(" \t") == attributes.strip()
