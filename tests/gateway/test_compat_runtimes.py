"""``gateway.compat`` clients of the inference router and Global Inference Gateway runtimes
answer as botocore's own clients of those services do, against the emulator over HTTP.

No aiobotocore here (it cannot call these services): the reference is boto3's client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from gateway import compat
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import GATEWAY_OWN_ERROR_CODES, ROUTER_ERROR_CODES
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2lnbmF0dXJl"
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}
CONFIG: dict[str, Any] = {
    "seed": 9,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"local-a": {}},
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "local-a"}]},
                "t-async": {"mode": "async", "destinations": [{"endpoint": "local-a"}]},
            }
        }
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}
ROUTER_PARAMS: dict[str, Any] = {
    "InferenceRouterName": "r1",
    "RoutingTargetName": "t",
    "Body": b'{"x": 1}',
    "ContentType": "application/json",
    "Accept": "application/json",
    "CustomAttributes": "c=1",
    "InferenceId": "inf-1",
    "PrefixAwareId": "p-1",
}
ASYNC_PARAMS: dict[str, Any] = {
    "InferenceRouterName": "r1",
    "RoutingTargetName": "t-async",
    "InputLocation": "s3://bucket/in.json",
    "ContentType": "application/json",
    "Accept": "application/json",
    "CustomAttributes": "c=1",
    "InferenceId": "inf-2",
    "RequestTTLSeconds": 600,
    "InvocationTimeoutSeconds": 30,
    "Filename": "out.json",
    "S3OutputPathExtension": "runs/1",
}
GATEWAY_PARAMS: dict[str, Any] = {
    "GatewayId": "gw1",
    "Body": json.dumps(CHAT).encode(),
    "ContentType": "application/json",
    "Accept": "application/json",
    "CustomerIdentityToken": TOKEN,
}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emu:
        yield emu


@pytest.fixture
def boto(emulator: Emulator) -> Iterator[dict[str, Any]]:
    clients = {
        service: boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=emulator.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(retries={"max_attempts": 0}),
        )
        for service in (INFERENCE_ROUTER_RUNTIME, GATEWAY_RUNTIME)
    }
    yield clients
    for client in clients.values():
        client.close()


def _compat(emulator: Emulator, service: str) -> Any:
    return compat.Session().create_client(
        service,
        region_name="us-east-1",
        endpoint_url=emulator.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 1}),
    )


def _plain(response: dict[str, Any]) -> dict[str, Any]:
    """The members a caller reads; ids, dates and object names differ per call."""
    answer = {k: v for k, v in response.items() if k not in ("ResponseMetadata", "Body")}
    answer["HTTPStatusCode"] = response["ResponseMetadata"]["HTTPStatusCode"]
    if "InferenceId" in answer:
        answer["InferenceId"] = bool(answer["InferenceId"])
    for key in ("OutputLocation", "FailureLocation"):
        if key in answer:
            answer[key] = answer[key].rsplit("/", 1)[0]
    return answer


@pytest.mark.newer_runtimes
async def test_invoke_inference_router(emulator: Emulator, boto: dict[str, Any]) -> None:
    expected = await asyncio.to_thread(
        boto[INFERENCE_ROUTER_RUNTIME].invoke_inference_router, **ROUTER_PARAMS
    )
    async with _compat(emulator, INFERENCE_ROUTER_RUNTIME) as client:
        response = await client.invoke_inference_router(**ROUTER_PARAMS)
        body = await response["Body"].read()
    assert body == expected["Body"].read() == b'{"x": 1}'
    assert _plain(response) == _plain(expected)
    assert response["RoutingReason"] == "local-preferred"


@pytest.mark.newer_runtimes
async def test_invoke_inference_router_async(emulator: Emulator, boto: dict[str, Any]) -> None:
    expected = await asyncio.to_thread(
        boto[INFERENCE_ROUTER_RUNTIME].invoke_inference_router_async, **ASYNC_PARAMS
    )
    async with _compat(emulator, INFERENCE_ROUTER_RUNTIME) as client:
        response = await client.invoke_inference_router_async(**ASYNC_PARAMS)
    assert _plain(response) == _plain(expected)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 202


@pytest.mark.newer_runtimes
async def test_invoke_global_inference_gateway(emulator: Emulator, boto: dict[str, Any]) -> None:
    expected = await asyncio.to_thread(
        boto[GATEWAY_RUNTIME].invoke_global_inference_gateway, **GATEWAY_PARAMS
    )
    async with _compat(emulator, GATEWAY_RUNTIME) as client:
        response = await client.invoke_global_inference_gateway(**GATEWAY_PARAMS)
        body = json.loads(await response["Body"].read())
    expected_body = json.loads(expected["Body"].read())
    assert body["choices"] == expected_body["choices"]
    assert _plain(response) == _plain(expected)


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("failure", [None, "InternalStreamFailure", "ModelStreamError"])
async def test_invoke_global_inference_gateway_stream(
    emulator: Emulator, boto: dict[str, Any], failure: str | None
) -> None:
    if failure is not None:
        emulator.runtimes.gateways.set_faults(
            "gw1", {"stream_failure_rate": 1.0, "stream_failure_event": failure}
        )

    def boto_events() -> list[Any]:
        response = boto[GATEWAY_RUNTIME].invoke_global_inference_gateway_with_response_stream(
            **{k: v for k, v in GATEWAY_PARAMS.items() if k != "Accept"}
        )
        events: list[Any] = []
        try:
            for event in response["Body"]:
                events.append(len(event["PayloadPart"]["Bytes"]) > 0)  # noqa: PERF401
        except botocore.exceptions.EventStreamError as error:
            events.append(error.response["Error"]["Code"])
        finally:
            response["Body"].close()  # the connection, mid-stream after an error
        return events

    expected = await asyncio.to_thread(boto_events)
    events: list[Any] = []
    async with _compat(emulator, GATEWAY_RUNTIME) as client:
        response = await client.invoke_global_inference_gateway_with_response_stream(
            **{k: v for k, v in GATEWAY_PARAMS.items() if k != "Accept"}
        )
        try:
            async for event in response["Body"]:
                events.append(len(event["PayloadPart"]["Bytes"]) > 0)  # noqa: PERF401
        except botocore.exceptions.EventStreamError as error:
            events.append(error.response["Error"]["Code"])
    assert events == expected
    assert events[-1] == (True if failure is None else failure)


def _boto_error(call: Any, **params: Any) -> botocore.exceptions.ClientError:
    try:
        call(**params)
    except botocore.exceptions.ClientError as error:
        return error
    raise AssertionError("no error")


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(ROUTER_ERROR_CODES))
async def test_router_errors_are_botocores_classes(
    emulator: Emulator, boto: dict[str, Any], code: str
) -> None:
    emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    boto_client = boto[INFERENCE_ROUTER_RUNTIME]
    expected = await asyncio.to_thread(
        _boto_error, boto_client.invoke_inference_router, **ROUTER_PARAMS
    )
    async with _compat(emulator, INFERENCE_ROUTER_RUNTIME) as client:
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            await client.invoke_inference_router(**ROUTER_PARAMS)
    assert type(caught.value).__name__ == type(expected).__name__ == code
    assert caught.value.response["Error"] == expected.response["Error"]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(GATEWAY_OWN_ERROR_CODES))
async def test_gateway_errors_are_botocores_classes(
    emulator: Emulator, boto: dict[str, Any], code: str
) -> None:
    emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}})
    boto_client = boto[GATEWAY_RUNTIME]
    expected = await asyncio.to_thread(
        _boto_error, boto_client.invoke_global_inference_gateway, **GATEWAY_PARAMS
    )
    async with _compat(emulator, GATEWAY_RUNTIME) as client:
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            await client.invoke_global_inference_gateway(**GATEWAY_PARAMS)
    assert type(caught.value).__name__ == type(expected).__name__ == code
    assert caught.value.response["Error"] == expected.response["Error"]


@pytest.mark.newer_runtimes
async def test_resource_not_found_members(emulator: Emulator, boto: dict[str, Any]) -> None:
    params = {**GATEWAY_PARAMS, "Body": b'{"model": "nope"}'}
    expected = await asyncio.to_thread(
        _boto_error, boto[GATEWAY_RUNTIME].invoke_global_inference_gateway, **params
    )
    async with _compat(emulator, GATEWAY_RUNTIME) as client:
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            await client.invoke_global_inference_gateway(**params)
    assert type(caught.value).__name__ == "ResourceNotFoundException"
    for key in ("ResourceId", "ResourceType"):
        assert caught.value.response[key] == expected.response[key]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("service", "method", "params"),
    [
        (
            INFERENCE_ROUTER_RUNTIME,
            "invoke_inference_router",
            {**ROUTER_PARAMS, "RoutingTargetName": 7},
        ),
        (
            INFERENCE_ROUTER_RUNTIME,
            "invoke_inference_router",
            {k: v for k, v in ROUTER_PARAMS.items() if k != "RoutingTargetName"},
        ),
        (
            INFERENCE_ROUTER_RUNTIME,
            "invoke_inference_router_async",
            {**ASYNC_PARAMS, "RequestTTLSeconds": "600", "Unknown": 1},
        ),
        (GATEWAY_RUNTIME, "invoke_global_inference_gateway", {**GATEWAY_PARAMS, "GatewayId": ""}),
    ],
)
async def test_parameters_are_validated_as_botocore_does(
    emulator: Emulator, boto: dict[str, Any], service: str, method: str, params: dict[str, Any]
) -> None:
    with pytest.raises(botocore.exceptions.ParamValidationError) as expected:
        getattr(boto[service], method)(**params)
    async with _compat(emulator, service) as client:
        with pytest.raises(botocore.exceptions.ParamValidationError) as caught:
            await getattr(client, method)(**params)
    assert str(caught.value) == str(expected.value)
    assert not [r for r in emulator.recorded if not r.path.startswith("/_emulator")]


def test_unknown_services_are_refused() -> None:
    with pytest.raises(botocore.exceptions.UnknownServiceError):
        compat.Session().create_client("s3", region_name="us-east-1")
