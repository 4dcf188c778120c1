"""Each runtime's body limit on the sidecar's one port, and each runtime's answer past it:
boto3 through the sidecar sends a body of exactly the limit (served by the emulator) and
one byte more (refused by the sidecar in that service's shape).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar, SidecarConfig
from tests._boto import ClientFactory

MIB = 1024 * 1024
CONFIG: dict[str, Any] = {
    "seed": 3,
    "auth": {"credentials": {"AK": "SK"}},
    "endpoints": {"local-a": {}},
    "inference_routers": {
        "r1": {"routing_targets": {"t": {"destinations": [{"endpoint": "local-a"}]}}}
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}
KEYS = {"access_key": "AK", "secret": "SK"}
ROUTER = "sagemaker-inference-router-runtime"
GATEWAY = "sagemaker-gateway-runtime"


def _chat(size: int) -> bytes:
    """A chat request of exactly ``size`` bytes (JSON allows the trailing spaces)."""
    chat = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
    return chat.encode().ljust(size, b" ")


def _endpoint(client: Any, size: int) -> int:
    answer = client.invoke_endpoint(EndpointName="local-a", Body=b"x" * size)
    return len(answer["Body"].read())


def _router(client: Any, size: int) -> int:
    answer = client.invoke_inference_router(
        InferenceRouterName="r1", RoutingTargetName="t", Body=b"x" * size
    )
    return len(answer["Body"].read())


def _global(client: Any, size: int) -> int:
    answer = client.invoke_global_inference_gateway(
        GatewayId="gw1", Body=_chat(size), ContentType="application/json"
    )
    return len(answer["Body"].read())


def _global_stream(client: Any, size: int) -> int:
    answer = client.invoke_global_inference_gateway_with_response_stream(
        GatewayId="gw1", Body=_chat(size), ContentType="application/json"
    )
    return sum(len(event["PayloadPart"]["Bytes"]) for event in answer["Body"])


# (service, call, limit, the error code botocore reads past it, its message's start)
CASES = [
    pytest.param(
        "sagemaker-runtime", _endpoint, 6 * MIB, "413", "HTTP content length", id="endpoint"
    ),
    pytest.param(
        ROUTER,
        _router,
        6 * MIB,
        "PayloadTooLargeException",
        "The request body",
        id="router",
        marks=pytest.mark.newer_runtimes,
    ),
    pytest.param(
        GATEWAY,
        _global,
        10 * MIB,
        "PayloadTooLargeException",
        "Global Inference Gateway: ",
        id="global",
        marks=pytest.mark.newer_runtimes,
    ),
    pytest.param(
        GATEWAY,
        _global_stream,
        10 * MIB,
        "PayloadTooLargeException",
        "Global Inference Gateway: ",
        id="global-stream",
        marks=pytest.mark.newer_runtimes,
    ),
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


@pytest.fixture
def client_of(boto_client: ClientFactory) -> Iterator[Callable[[str, str], Any]]:
    yield lambda url, service: boto_client(url, service=service, **KEYS)


def _refusal(call: Callable[[Any, int], int], client: Any, size: int) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(client, size)
    response: dict[str, Any] = caught.value.response
    return response


@pytest.mark.parametrize(("service", "call", "limit", "code", "start"), CASES)
async def test_a_body_of_the_limit_is_served_and_one_byte_more_refused(
    gateway: Gateway,
    client_of: Callable[[str, str], Any],
    service: str,
    call: Callable[[Any, int], int],
    limit: int,
    code: str,
    start: str,
) -> None:
    async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        client = client_of(sidecar.url, service)
        assert await asyncio.to_thread(call, client, limit) > 0
        refused = await asyncio.to_thread(_refusal, call, client, limit + 1)
        assert sidecar.app.metrics.rejected == {"too_large": 1}
        if service == GATEWAY:  # its model has the shape: botocore raises its class
            with pytest.raises(client.exceptions.PayloadTooLargeException):
                await asyncio.to_thread(call, client, limit + 1)
    assert refused["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert refused["Error"]["Code"] == code
    assert refused["Error"]["Message"].startswith(start)
    assert str(limit) in refused["Error"]["Message"]
    if service == GATEWAY:
        # The modeled member Message: botocore sets it at the top too.
        assert refused["Message"] == refused["Error"]["Message"]


@pytest.mark.newer_runtimes
async def test_max_body_bytes_caps_every_runtime(
    gateway: Gateway, client_of: Callable[[str, str], Any]
) -> None:
    config = SidecarConfig.from_mapping({"max_body_bytes": 4096})
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        assert sidecar.limits().max_body_size == 4096
        gateway_client = client_of(sidecar.url, GATEWAY)
        assert await asyncio.to_thread(_global, gateway_client, 4096) > 0
        over = await asyncio.to_thread(_refusal, _global, gateway_client, 4097)
        router = await asyncio.to_thread(_refusal, _router, client_of(sidecar.url, ROUTER), 4097)
        endpoint = await asyncio.to_thread(
            _refusal, _endpoint, client_of(sidecar.url, "sagemaker-runtime"), 4097
        )
    assert over["Error"]["Code"] == router["Error"]["Code"] == "PayloadTooLargeException"
    assert "4096" in over["Error"]["Message"]
    expected = {"Code": "413", "Message": "HTTP content length exceeded 4096 bytes."}
    assert endpoint["Error"] == expected


async def test_the_default_takes_the_largest_runtimes_bodies_only(gateway: Gateway) -> None:
    assert SidecarConfig().max_body_bytes is None
    sidecar = Sidecar(gateway, "127.0.0.1", 0)
    assert sidecar.limits().max_body_size == 10 * MIB
    limits = sidecar.body_limits
    assert limits.limit("/endpoints/e/invocations") == 6 * MIB
    assert limits.limit("/endpoints/e/async-invocations") == 6 * MIB  # 128,000: Gateway's 400
    assert limits.limit("/inference-routers/r/invocations") == 6 * MIB
    assert limits.limit("/global-inference-gateway/g/invocations-response-stream") == 10 * MIB
    assert limits.limit("/openrtb2/auction") == 6 * MIB


async def test_a_chunked_body_past_the_limit_is_refused_in_the_runtimes_shape(
    gateway: Gateway,
) -> None:
    config = SidecarConfig.from_mapping({"max_body_bytes": 64 * 1024})

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the limit is found while reading.
        for _ in range(32):
            yield b" " * 4096

    async with (
        Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10) as http,
    ):
        answer = await http.post(
            "/global-inference-gateway/gw1/invocations",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 413
    assert answer.headers["x-amzn-errortype"].startswith("PayloadTooLargeException:")
    assert answer.json()["Message"].startswith("Global Inference Gateway: ")
