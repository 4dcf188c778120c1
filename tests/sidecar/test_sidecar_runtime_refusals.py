"""What the sidecar refuses of its own on the inference router and Global Inference Gateway
paths reads as botocore reads those services' errors: the body's member is ``Message``, so
``response["Error"]["Message"]`` is set, and for a shape the model names botocore raises
its class with the top-level ``Message`` too. One test per kind of refusal, each on both
runtimes, boto3 through the sidecar (httpx where boto3 cannot send the request).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar, SidecarConfig
from tests._boto import ClientFactory

CONFIG: dict[str, Any] = {
    "seed": 7,
    "auth": {"credentials": {"AK": "SK"}},
    "endpoints": {"local-a": {}, "slow": {"latency": {"base_ms": 400.0}}},
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "local-a"}]},
                "t-slow": {"destinations": [{"endpoint": "slow"}]},
                "t-async": {"mode": "async", "destinations": [{"endpoint": "local-a"}]},
            }
        }
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}
ROUTER = "sagemaker-inference-router-runtime"
GATEWAY = "sagemaker-gateway-runtime"
CHAT = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}).encode()
KEYS = {"access_key": "AK", "secret": "SK"}


def _router(client: Any, target: str = "t") -> Any:
    answer = client.invoke_inference_router(
        InferenceRouterName="r1", RoutingTargetName=target, Body=b"{}"
    )
    return answer["Body"].read()


def _router_async(client: Any) -> Any:
    return client.invoke_inference_router_async(
        InferenceRouterName="r1", RoutingTargetName="t-async", InputLocation="s3://b/in.json"
    )


def _global(client: Any) -> Any:
    answer = client.invoke_global_inference_gateway(
        GatewayId="gw1", Body=CHAT, ContentType="application/json"
    )
    return answer["Body"].read()


def _global_stream(client: Any) -> Any:
    answer = client.invoke_global_inference_gateway_with_response_stream(
        GatewayId="gw1", Body=CHAT, ContentType="application/json"
    )
    return list(answer["Body"])


# Every operation of both runtimes: (service, call).
OPERATIONS = [
    pytest.param(ROUTER, _router, id="router"),
    pytest.param(ROUTER, _router_async, id="router-async"),
    pytest.param(GATEWAY, _global, id="global"),
    pytest.param(GATEWAY, _global_stream, id="global-stream"),
]


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as running:
        yield running


@pytest.fixture
async def gateway(emulator: Emulator) -> AsyncIterator[Gateway]:
    retry = {"retry": {"max_attempts": 1}}
    async with Gateway(
        "us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), defaults=retry
    ) as gw:
        yield gw


def _with_header(client: Any, name: str, value: str) -> Any:
    """The client sends ``name: value`` on every call (signed, as a caller's hook would)."""

    def add(request: Any, **_: Any) -> None:
        request.headers[name] = value

    client.meta.events.register("before-sign.*.*", add)
    return client


def _refused(call: Callable[[Any], Any], client: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call(client)
    return caught.value


def _reads_as_the_service(client: Any, error: ClientError, code: str, status: int) -> None:
    response = error.response
    assert response["Error"]["Code"] == code
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert response["Error"]["Message"]
    modeled = {shape.name for shape in client.meta.service_model.error_shapes}
    if code in modeled:
        assert isinstance(error, getattr(client.exceptions, code))
        assert response["Message"] == response["Error"]["Message"]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(("service", "call"), OPERATIONS)
async def test_an_unsupported_header_is_a_validation_exception(
    gateway: Gateway, boto_client: ClientFactory, service: str, call: Callable[[Any], Any]
) -> None:
    async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        client = _with_header(
            boto_client(sidecar.url, service=service, **KEYS),
            "X-Amzn-SageMaker-Target-Model",
            "m.tar.gz",
        )
        error = await asyncio.to_thread(_refused, call, client)
    _reads_as_the_service(client, error, "ValidationException", 400)
    assert "x-amzn-sagemaker-target-model" in error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(("service", "call"), OPERATIONS)
async def test_a_malformed_timeout_header_is_a_validation_exception(
    gateway: Gateway, boto_client: ClientFactory, service: str, call: Callable[[Any], Any]
) -> None:
    async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        client = _with_header(
            boto_client(sidecar.url, service=service, **KEYS), "x-gateway-timeout-ms", "-5"
        )
        error = await asyncio.to_thread(_refused, call, client)
    _reads_as_the_service(client, error, "ValidationException", 400)
    assert "x-gateway-timeout-ms" in error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
async def test_a_malformed_integer_member_is_a_validation_exception(
    gateway: Gateway, boto_client: ClientFactory
) -> None:
    async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        client = _with_header(
            boto_client(sidecar.url, service=ROUTER, **KEYS),
            "X-Amzn-SageMaker-RequestTTLSeconds",
            "ten",
        )
        error = await asyncio.to_thread(_refused, _router_async, client)
    _reads_as_the_service(client, error, "ValidationException", 400)
    assert "'ten'" in error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(("service", "call"), OPERATIONS)
async def test_a_refused_signature_reads_as_the_services_auth_error(
    gateway: Gateway, boto_client: ClientFactory, service: str, call: Callable[[Any], Any]
) -> None:
    config = SidecarConfig.from_mapping({"auth": {"mode": "sigv4", "credentials": {"AK": "SK"}}})
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        unknown = boto_client(sidecar.url, service=service, access_key="NOPE", secret="SK")
        wrong = boto_client(sidecar.url, service=service, access_key="AK", secret="not-SK")
        unknown_error = await asyncio.to_thread(_refused, call, unknown)
        wrong_error = await asyncio.to_thread(_refused, call, wrong)
    # AWS's front door's codes (no model names them): the message is read all the same.
    _reads_as_the_service(unknown, unknown_error, "UnrecognizedClientException", 403)
    _reads_as_the_service(wrong, wrong_error, "InvalidSignatureException", 403)


@pytest.mark.newer_runtimes
async def test_the_in_flight_cap_is_the_runtimes_throttling_exception(
    gateway: Gateway, boto_client: ClientFactory
) -> None:
    config = SidecarConfig(max_in_flight=1)
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        held = asyncio.create_task(
            asyncio.to_thread(_router, boto_client(sidecar.url, service=ROUTER, **KEYS), "t-slow")
        )
        for _ in range(500):
            if sidecar.app.in_flight == 1:
                break
            await asyncio.sleep(0.01)
        assert sidecar.app.in_flight == 1
        router = boto_client(sidecar.url, service=ROUTER, **KEYS)
        gateway_client = boto_client(sidecar.url, service=GATEWAY, **KEYS)
        router_error = await asyncio.to_thread(_refused, _router, router)
        gateway_error = await asyncio.to_thread(_refused, _global, gateway_client)
        assert await held == b"{}"
    _reads_as_the_service(router, router_error, "ThrottlingException", 429)
    _reads_as_the_service(gateway_client, gateway_error, "ThrottlingException", 429)


@pytest.mark.parametrize(
    "path",
    [
        "/inference-routers/r1/nope",
        "/global-inference-gateway/gw1/invocations-stream",
        "/global-inference-gateway/gw1",
    ],
)
async def test_an_unknown_operation_says_message(gateway: Gateway, path: str) -> None:
    async with (
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url) as http,
    ):
        answer = await http.post(path, content=b"{}")
        listed = await http.get(path.rsplit("/", 1)[0] + "/invocations")
    for response in (answer, listed):
        assert response.status_code == 404
        assert response.headers["x-amzn-errortype"].startswith("UnknownOperationException:")
        assert response.json() == {"Message": "Unknown operation"}


class _BuggyGateway(Gateway):
    """A Gateway whose new runtimes' calls fail as a bug of ours would (not a GatewayError).

    A subclass, not a patched instance: the compiled build's Gateway has no
    writable method attributes.
    """

    def call(self, operation: Any, *args: Any, **kwargs: Any) -> Any:
        if operation.service.name == "sagemaker-runtime":
            return super().call(operation, *args, **kwargs)
        raise RuntimeError("a bug")


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("service", "call", "code"),
    [
        pytest.param(ROUTER, _router, "InternalFailure", id="router"),
        pytest.param(GATEWAY, _global, "InternalServerException", id="global"),
    ],
)
async def test_a_bug_in_the_sidecar_is_the_runtimes_internal_error(
    emulator: Emulator,
    boto_client: ClientFactory,
    service: str,
    call: Callable[[Any], Any],
    code: str,
) -> None:
    buggy = _BuggyGateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
    async with buggy, Sidecar(buggy, "127.0.0.1", 0) as sidecar:
        client = boto_client(sidecar.url, service=service, **KEYS)
        error = await asyncio.to_thread(_refused, call, client)
    _reads_as_the_service(client, error, code, 500)
