"""The emulated Global Inference Gateways, driven by unmodified boto3 clients of their runtime."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError, EventStreamError

from gateway._aws.models import GATEWAY_RUNTIME, service_model
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import GATEWAY_OWN_ERROR_CODES
from tests._boto import ClientFactory
from tests.emulator.conftest import ACCESS_KEY, SECRET_KEY, signed_headers

SERVICE = GATEWAY_RUNTIME
OWN = "Global Inference Gateway: "
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2lnbmF0dXJl"
CONFIG: dict[str, Any] = {
    "seed": 5,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "global_inference_gateways": {
        "gw1": {"models": ["echo", "busy"], "unavailable_models": ["busy"]},
    },
}
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emu:
        yield emu


@pytest.fixture
def client(emulator: Emulator, boto_client: ClientFactory) -> Any:
    return boto_client(emulator.url, service=SERVICE)


async def invoke(client: Any, body: object = CHAT, **params: Any) -> dict[str, Any]:
    params.setdefault("ContentType", "application/json")
    params.setdefault("GatewayId", "gw1")
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await asyncio.to_thread(client.invoke_global_inference_gateway, Body=raw, **params)
    response["Body"] = response["Body"].read()
    return response


async def stream(client: Any, body: object = CHAT, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("ContentType", "application/json")
    params.setdefault("GatewayId", "gw1")
    raw = json.dumps(body).encode()

    def read() -> list[dict[str, Any]]:
        response = client.invoke_global_inference_gateway_with_response_stream(Body=raw, **params)
        with contextlib.closing(response["Body"]) as events:
            return list(events)

    return await asyncio.to_thread(read)


async def failure(client: Any, body: object = CHAT, **params: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        await invoke(client, body, **params)
    return caught.value


def sse_data(events: list[dict[str, Any]]) -> list[bytes]:
    data = []
    for event in events:
        chunk = event["PayloadPart"]["Bytes"]
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
        data.append(chunk[6:-2])
    return data


# -- the two operations -----------------------------------------------------------


@pytest.mark.newer_runtimes
async def test_a_buffered_chat_completion(client: Any, emulator: Emulator) -> None:
    response = await invoke(
        client, {**CHAT, "stream": True}, Accept="application/json", CustomerIdentityToken=TOKEN
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/json"
    completion = json.loads(response["Body"])
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "echo"
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "bid on this one",
    }
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["usage"]["total_tokens"] == 8
    forwarded = emulator.runtimes.gateways.forwarded[-1]
    assert forwarded.body["stream"] is False  # forced: the buffered operation
    assert forwarded.identity_token == TOKEN  # passed through unchanged
    recorded = emulator.recorded[-1]
    assert recorded.path == "/global-inference-gateway/gw1/invocations"
    headers = dict(recorded.headers)
    assert headers["x-amzn-sagemaker-customer-identity-token"] == TOKEN
    assert headers["accept"] == "application/json"
    assert "x-amzn-sagemaker-customer-identity-token" in headers["authorization"]


@pytest.mark.newer_runtimes
async def test_a_text_completion(client: Any) -> None:
    completion = json.loads((await invoke(client, {"model": "echo", "prompt": "hi"}))["Body"])
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["text"] == "hi"


@pytest.mark.newer_runtimes
async def test_a_streamed_completion(client: Any, emulator: Emulator) -> None:
    events = await stream(client, {**CHAT, "stream": False}, CustomerIdentityToken=TOKEN)
    assert all(set(event) == {"PayloadPart"} for event in events)
    data = sse_data(events)
    assert data[-1] == b"[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
    assert text == "bid on this one"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert len({chunk["id"] for chunk in chunks}) == 1
    forwarded = emulator.runtimes.gateways.forwarded[-1]
    assert forwarded.body["stream"] is True  # forced: the streaming operation
    recorded = emulator.recorded[-1]
    assert recorded.path == "/global-inference-gateway/gw1/invocations-response-stream"


@pytest.mark.newer_runtimes
async def test_a_truncated_stream_ends_with_internal_stream_failure(
    client: Any, emulator: Emulator
) -> None:
    emulator.runtimes.gateways.set_faults("gw1", {"stream_failure_rate": 1.0})

    def read() -> tuple[list[dict[str, Any]], EventStreamError]:
        response = client.invoke_global_inference_gateway_with_response_stream(
            GatewayId="gw1", ContentType="application/json", Body=json.dumps(CHAT)
        )
        parts: list[dict[str, Any]] = []
        with contextlib.closing(response["Body"]) as events, pytest.raises(EventStreamError) as e:
            parts.extend(events)
        return parts, e.value

    parts, error = await asyncio.to_thread(read)
    assert len(parts) == 1
    assert error.response["Error"]["Code"] == "InternalStreamFailure"
    assert error.response["Error"]["Message"] == "inference gateway: response ended unexpectedly"


@pytest.mark.newer_runtimes
async def test_the_reserved_model_stream_error_can_be_injected(
    client: Any, emulator: Emulator
) -> None:
    emulator.runtimes.gateways.set_faults(
        "gw1", {"stream_failure_rate": 1.0, "stream_failure_event": "ModelStreamError"}
    )
    with pytest.raises(EventStreamError) as caught:
        await stream(client)
    assert caught.value.response["Error"] == {
        "Code": "ModelStreamError",
        "Message": "inference gateway: the stream broke",
    }


# -- errors ------------------------------------------------------------------------


def modeled_errors() -> dict[str, int]:
    model = service_model(SERVICE)
    return {
        shape.name: shape.metadata.get("error", {}).get("httpStatusCode", 0)
        for name in model.operation_names
        for shape in model.operation_model(name).error_shapes
    }


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(GATEWAY_OWN_ERROR_CODES))
async def test_the_gateways_own_errors(client: Any, emulator: Emulator, code: str) -> None:
    emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}, "retry_after_s": 7})
    for call in (invoke, stream):
        with pytest.raises(ClientError) as caught:
            await call(client)
        error = caught.value
        assert isinstance(error, getattr(client.exceptions, code))
        assert error.response["ResponseMetadata"]["HTTPStatusCode"] == modeled_errors()[code]
        assert error.response["Error"]["Message"].startswith(OWN)
        headers = error.response["ResponseMetadata"]["HTTPHeaders"]
        assert (headers.get("retry-after") == "7") is (code == "ThrottlingException")


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("status", "code", "answered"),
    [
        (400, "ValidationException", 400),
        (422, "ValidationException", 400),
        (401, "AccessDeniedException", 403),
        (403, "AccessDeniedException", 403),
        (404, "ResourceNotFoundException", 404),
        (408, "GatewayTimeoutException", 504),
        (429, "ThrottlingException", 429),
        (500, "BadGatewayException", 502),
        (502, "BadGatewayException", 502),
        (503, "BadGatewayException", 502),
        (504, "GatewayTimeoutException", 504),
    ],
)
async def test_the_inference_gateways_statuses(
    client: Any, emulator: Emulator, status: int, code: str, answered: int
) -> None:
    emulator.runtimes.gateways.set_faults("gw1", {"upstream_error_rates": {str(status): 1.0}})
    error = await failure(client)
    assert error.response["Error"]["Code"] == code
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == answered
    assert error.response["Error"]["Message"].startswith(f"inference gateway: {status} ")
    retry_after = error.response["ResponseMetadata"]["HTTPHeaders"].get("retry-after")
    assert (retry_after == "1") is (status == 429)


@pytest.mark.newer_runtimes
async def test_an_upstream_error_names_its_component(client: Any, emulator: Emulator) -> None:
    emulator.runtimes.gateways.set_faults(
        "gw1", {"upstream_error_rates": {"502": 1.0}, "upstream_component": "model server"}
    )
    error = await failure(client)
    assert error.response["Error"]["Message"].startswith("inference gateway (model server): 502 ")


@pytest.mark.newer_runtimes
async def test_not_found_gateway_and_model(client: Any) -> None:
    gateway = await failure(client, GatewayId="nosuch")
    assert isinstance(gateway, client.exceptions.ResourceNotFoundException)
    assert (gateway.response["ResourceId"], gateway.response["ResourceType"]) == (
        "nosuch",
        "gateway",
    )
    model = await failure(client, {**CHAT, "model": "gpt-x"})
    assert isinstance(model, client.exceptions.ResourceNotFoundException)
    assert (model.response["ResourceId"], model.response["ResourceType"]) == ("gpt-x", "model")
    assert model.response["Error"]["Message"].startswith(OWN)


@pytest.mark.newer_runtimes
async def test_a_model_without_capacity_is_unavailable(client: Any) -> None:
    error = await failure(client, {**CHAT, "model": "busy"})
    assert isinstance(error, client.exceptions.ServiceUnavailableException)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 503


@pytest.mark.newer_runtimes
async def test_a_body_over_10_mib_is_413(client: Any) -> None:
    body = json.dumps({**CHAT, "pad": "x" * (10 * 1024 * 1024)}).encode()
    error = await failure(client, body)
    assert isinstance(error, client.exceptions.PayloadTooLargeException)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert error.response["Error"]["Message"].startswith(OWN)


@pytest.mark.newer_runtimes
async def test_a_body_just_under_10_mib_is_served(client: Any) -> None:
    pad = "x" * (10 * 1024 * 1024 - 200)
    response = await invoke(client, {**CHAT, "pad": pad})
    assert json.loads(response["Body"])["choices"][0]["message"]["content"] == "bid on this one"


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_a_non_json_content_type_is_415(client: Any, content_type: str) -> None:
    error = await failure(client, ContentType=content_type)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 415
    assert error.response["Error"]["Code"] == "UnsupportedMediaTypeException"
    assert error.response["Error"]["Message"].startswith(OWN)


@pytest.mark.newer_runtimes
async def test_json_with_a_charset_is_accepted(client: Any) -> None:
    response = await invoke(client, ContentType="application/json; charset=utf-8")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "one JSON object"),
        (b'{"messages": []}', 'no "model" string'),
        (b'{"model": "echo", "model": "other", "prompt": "x"}', 'repeats "model"'),
    ],
)
async def test_invalid_bodies(client: Any, body: bytes, message: str) -> None:
    error = await failure(client, body)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error.response["Error"]["Code"] == "ValidationException"
    assert error.response["Error"]["Message"].startswith(OWN)
    assert message in error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
async def test_a_repeated_model_with_the_same_value_is_accepted(client: Any) -> None:
    response = await invoke(client, b'{"model": "echo", "model": "echo", "prompt": "x"}')
    assert json.loads(response["Body"])["choices"][0]["text"] == "x"


@pytest.mark.newer_runtimes
async def test_a_body_the_model_server_cannot_use(client: Any) -> None:
    error = await failure(client, {"model": "echo"})
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error.response["Error"]["Message"].startswith("inference gateway (model server): 400 ")


@pytest.mark.newer_runtimes
async def test_a_bad_gateway_id(client: Any) -> None:
    error = await failure(client, GatewayId="Upper")
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error.response["Error"]["Message"].startswith(OWN)


@pytest.mark.newer_runtimes
async def test_an_invalid_identity_token_is_refused_without_quoting_it(client: Any) -> None:
    error = await failure(client, CustomerIdentityToken="not-a-jwt-s3cret")
    assert isinstance(error, client.exceptions.AccessDeniedException)
    assert error.response["Error"]["Message"].startswith("inference gateway: 401 ")
    assert "s3cret" not in str(error.response)


async def test_an_unsigned_identity_token_is_refused_without_quoting_it(
    emulator: Emulator,
) -> None:
    body = json.dumps(CHAT).encode()
    path = "/global-inference-gateway/gw1/invocations"
    headers = signed_headers(emulator.url, path, body, **{"content-type": "application/json"})
    headers["x-amzn-sagemaker-customer-identity-token"] = TOKEN  # added after signing
    async with httpx.AsyncClient(base_url=emulator.url) as http:
        response = await http.post(path, content=body, headers=headers)
    assert response.status_code == 403
    assert response.headers["x-amzn-errortype"].startswith("InvalidSignatureException:")
    assert "not signed: x-amzn-sagemaker-customer-identity-token" in response.json()["message"]
    assert TOKEN not in response.text


@pytest.mark.newer_runtimes
async def test_a_bad_signature_is_refused(emulator: Emulator, boto_client: ClientFactory) -> None:
    client = boto_client(emulator.url, service=SERVICE, secret="wrong")
    error = await failure(client)
    assert error.response["Error"]["Code"] == "InvalidSignatureException"


@pytest.mark.newer_runtimes
def test_every_modeled_error_is_answered_by_the_emulator() -> None:
    """Each error shape of the model has a way to be produced (the tests above use it)."""
    produced = {
        *GATEWAY_OWN_ERROR_CODES,
        "PayloadTooLargeException",
        "ResourceNotFoundException",
        "InternalStreamFailure",
        "ModelStreamError",
    }
    assert set(modeled_errors()) == produced


# -- control, latency, the default set-up ------------------------------------------


@pytest.mark.newer_runtimes
async def test_control_over_http(client: Any, emulator: Emulator) -> None:
    async with httpx.AsyncClient(base_url=emulator.url) as http:
        changed = await http.post(
            "/_emulator/runtimes/gateway-faults/gw1",
            json={"error_rates": {"ThrottlingException": 1.0}, "retry_after_s": 3},
        )
        assert changed.status_code == 200
        error = await failure(client)
        assert error.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "3"
        latency = await http.post("/_emulator/runtimes/gateway-latency/gw1", json={"base_ms": 1})
        assert latency.status_code == 200
        assert (await http.post("/_emulator/runtimes/restore")).status_code == 200
        await invoke(client, CustomerIdentityToken=TOKEN)
        forwarded = (await http.get("/_emulator/runtimes/forwarded")).json()
        assert forwarded[-1]["body"]["model"] == "echo"
        stats = (await http.get("/_emulator/runtimes/stats")).json()["gateways"]
        assert ["gw1", "echo", False, 1] in stats["invocations"]
        assert ["gw1", "ThrottlingException", 1] in stats["errors"]
        bad = await http.post("/_emulator/runtimes/gateway-faults/gw1", json={"retry_after_s": -1})
        assert bad.status_code == 400


@pytest.mark.newer_runtimes
async def test_the_default_demo_gateway(boto_client: ClientFactory) -> None:
    async with Emulator(EmulatorConfig.default(seed=1)) as emu:
        client = boto_client(emu.url, service=SERVICE)
        response = await invoke(client, GatewayId="demo")
        assert json.loads(response["Body"])["choices"][0]["message"]["content"] == (
            "bid on this one"
        )


async def test_sagemaker_runtime_keeps_its_6_mb_limit_beside_a_gateway(
    boto_client: ClientFactory,
) -> None:
    """The server reads up to the gateway's 10 MiB (and a little more); InvokeEndpoint still
    answers past 6 MB as before."""
    config = {**CONFIG, "endpoints": {"echo": {}}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        runtime = boto_client(emu.url)
        with pytest.raises(ClientError) as caught:
            await asyncio.to_thread(
                runtime.invoke_endpoint, EndpointName="echo", Body=b"x" * (6 * 1024 * 1024 + 1)
            )
        response = caught.value.response
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 413
        assert "HTTP content length exceeded 6291456 bytes" in response["Error"]["Message"]
        served = await asyncio.to_thread(
            runtime.invoke_endpoint, EndpointName="echo", Body=b"x" * (1024 * 1024)
        )
        assert len(served["Body"].read()) == 1024 * 1024
