"""Every error reaches boto3 as the botocore exception a SageMaker user expects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from gateway import Gateway, errors
from gateway._invoke.api import InvokeResult
from gateway.emulator import Emulator
from gateway.sidecar import Sidecar, SidecarConfig
from tests.sidecar.conftest import ClientFactory, make_gateway

SAGEMAKER_ERRORS = [
    ("ValidationError", 400),
    ("ThrottlingException", 400),  # the emulator's (and AWS JSON services') status
    ("ModelNotReadyException", 429),
    ("InternalFailure", 500),
    ("ServiceUnavailable", 503),
    ("InternalDependencyException", 530),
]


@pytest.mark.parametrize(("code", "status"), SAGEMAKER_ERRORS)
async def test_upstream_errors_keep_code_status_and_message(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory, code: str, status: int
) -> None:
    emulator.set_faults("echo", error_rates={code: 1.0})
    client = boto_client(sidecar.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    modeled = getattr(client.exceptions, code, None)
    if modeled is not None:  # ThrottlingException is not in the service model
        assert isinstance(caught.value, modeled)
    response = caught.value.response
    assert response["Error"]["Code"] == code
    assert response["Error"]["Message"]
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status


async def test_model_error_fields(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", error_rates={"ModelError": 1.0})
    client = boto_client(sidecar.url)
    with pytest.raises(client.exceptions.ModelError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert response["OriginalStatusCode"] == 500
    assert response["OriginalMessage"] == "Injected model failure"
    assert response["LogStreamArn"].startswith("arn:aws:logs:us-east-1:123456789012:log-group:")
    assert "Received server error (500)" in response["Error"]["Message"]


async def test_deadline_is_a_model_error_with_504(
    gateway: Gateway, boto_client: ClientFactory
) -> None:
    config = SidecarConfig(default_timeout_ms=50)
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        client = boto_client(sidecar.url)
        with pytest.raises(client.exceptions.ModelError) as caught:
            await asyncio.to_thread(client.invoke_endpoint, EndpointName="slow", Body=b"x")
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert response["OriginalStatusCode"] == 504
    assert "gateway timeout" in response["OriginalMessage"]


async def test_connection_reset_upstream_is_a_5xx(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("echo", reset_rate=1.0)
    client = boto_client(sidecar.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    error = caught.value.response
    assert error["Error"]["Code"] in ("InternalDependencyException", "ServiceUnavailable")
    assert error["ResponseMetadata"]["HTTPStatusCode"] in (530, 503)
    emulator.restore("echo")
    ok = await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"ok")
    assert ok["Body"].read() == b"ok"


async def test_route_with_one_failing_target(
    emulator: Emulator, boto_client: ClientFactory
) -> None:
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = {
        "targets": [{"endpoint": "a"}, {"endpoint": "b"}],
        "retry": {"max_attempts": 3, "budget_ratio": 0.5, "min_per_second": 50},
    }
    async with (
        make_gateway(emulator, routes={"pair": route}) as gw,
        Sidecar(gw, "127.0.0.1", 0) as sidecar,
    ):
        client = boto_client(sidecar.url)
        for _ in range(12):
            response = await asyncio.to_thread(
                client.invoke_endpoint, EndpointName="pair", Body=b"x"
            )
            assert response["Body"].read() == b"x"
    assert emulator.stats.count(endpoint="a") == 12


class _RaisingGateway(Gateway):
    """A Gateway whose InvokeEndpoint raises a chosen error: the errors only the gateway makes."""

    error: BaseException = errors.GatewayError("unset")

    async def call(self, *args: Any, **kwargs: Any) -> InvokeResult:
        raise self.error


@pytest.fixture
async def raising(emulator: Emulator) -> AsyncIterator[tuple[_RaisingGateway, Sidecar]]:
    gw = _RaisingGateway(region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
    async with gw, Sidecar(gw, "127.0.0.1", 0) as sidecar:
        yield gw, sidecar


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (errors.DeadlineExceeded("deadline of 5 ms exceeded"), "ModelError", 424),
        (errors.ReadTimeout("read timed out"), "ModelError", 424),
        (errors.PoolTimeout("no free connection"), "ServiceUnavailable", 503),
        (errors.ConnectTimeout("connect timed out"), "ServiceUnavailable", 503),
        (errors.NoHealthyTarget("every target ejected"), "ServiceUnavailable", 503),
        (errors.ConnectError("connection refused"), "ServiceUnavailable", 503),
        (errors.ReadError("connection reset"), "InternalDependencyException", 530),
        (errors.ProtocolError("garbage"), "InternalDependencyException", 530),
        (errors.InvalidRequest("header x contains CR"), "ValidationError", 400),
        (errors.CacheUnavailable("redis down"), "InternalFailure", 500),
        (errors.ModelNotReady("loading", status=429), "ModelNotReadyException", 429),
        (errors.SignatureError("bad upstream key", status=403), "InvalidSignatureException", 403),
        (RuntimeError("a bug"), "InternalFailure", 500),
    ],
)
async def test_gateway_errors_mapping(
    raising: tuple[_RaisingGateway, Sidecar],
    boto_client: ClientFactory,
    error: BaseException,
    code: str,
    status: int,
) -> None:
    gw, sidecar = raising
    gw.error = error
    client = boto_client(sidecar.url)
    with pytest.raises(ClientError) as caught:
        await asyncio.to_thread(client.invoke_endpoint, EndpointName="echo", Body=b"x")
    response = caught.value.response
    assert response["Error"]["Code"] == code
    assert response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert response["ResponseMetadata"]["RequestId"]
    modeled = getattr(client.exceptions, code, None)
    if modeled is not None:
        assert isinstance(caught.value, modeled)
    if code == "ModelError":
        assert response["OriginalStatusCode"] == 504
