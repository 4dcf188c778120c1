"""Routes whose targets include an inference router's routing target, beside endpoints:
the in-Region endpoint first, a cross-Region router as the fallback, against the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from gateway.routing import RouteConfig
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

ACCOUNT = "123456789012"
# Two Regions, each its own emulator: the in-Region endpoint here, the router there.
HOME: dict[str, Any] = {
    "seed": 4,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"local-a": {}},
}
EU: dict[str, Any] = {
    "seed": 5,
    "region": "eu-west-1",
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"remote-eu": {}},
    "inference_routers": {
        "r-eu": {"routing_targets": {"t": {"destinations": [{"endpoint": "remote-eu"}]}}}
    },
}
REMOTE_EU = f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:endpoint/remote-eu"


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(HOME)) as emu:
        yield emu


@pytest.fixture
async def eu() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(EU)) as emu:
        yield emu


def _router_target(eu: Emulator, **extra: Any) -> dict[str, Any]:
    return {
        "inference_router": "r-eu",
        "routing_target": "t",
        "region": "eu-west-1",
        "url": eu.url,  # eu-west-1's inference router host
        **extra,
    }


def _gateway(emulator: Emulator, targets: list[Any], **route: Any) -> Gateway:
    return Gateway(
        "us-east-1",
        endpoint_url=emulator.url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        routes={"bid": {"targets": targets, **route}},
    )


async def test_in_region_endpoint_first_then_the_cross_region_router(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [{"endpoint": "local-a", "weight": 100}, _router_target(eu, weight=1)]
    async with _gateway(emulator, targets, retry={"max_attempts": 2}) as gw:
        direct = await gw.invoke("bid", b'{"n": 1}')
        assert direct.target == "local-a" and direct.routed_resource_arn is None
        emulator.set_faults("local-a", error_rates={"ServiceUnavailable": 1.0})
        fallback = await gw.invoke("bid", b'{"n": 2}', custom_attributes="c=1")
    assert fallback.body == b'{"n": 2}'
    assert fallback.attempts == 2
    assert fallback.target == "r-eu"
    assert fallback.routed_resource_arn == REMOTE_EU
    assert fallback.routing_reason == "local-preferred"  # the router's own Region
    assert fallback.custom_attributes == "c=1"
    routed = [r for r in eu.recorded if r.path.startswith("/inference-routers/")]
    assert [r.path for r in routed] == ["/inference-routers/r-eu/invocations"]
    headers = {name.lower(): value for name, value in routed[0].headers}
    assert headers["x-amzn-sagemaker-routing-target-name"] == "t"
    assert "/eu-west-1/sagemaker/aws4_request" in headers["authorization"]


async def test_router_target_errors_are_retried_on_the_endpoint(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [_router_target(eu, weight=100), {"endpoint": "local-a", "weight": 1}]
    eu.runtimes.routers.set_faults("r-eu", {"ServiceUnavailableException": 1.0})
    async with _gateway(emulator, targets, retry={"max_attempts": 2}) as gw:
        result = await gw.invoke("bid", b"{}")
    assert (result.target, result.attempts) == ("local-a", 2)


async def test_members_a_router_does_not_take_are_refused(emulator: Emulator, eu: Emulator) -> None:
    async with _gateway(emulator, [_router_target(eu)]) as gw:
        with pytest.raises(errors.InvalidRequest, match="x-amzn-sagemaker-target-model"):
            await gw.invoke("bid", b"{}", target_model="m.tar.gz")
        with pytest.raises(errors.InvalidRequest, match="InvokeEndpointWithResponseStream"):
            async for _ in gw.invoke_stream("bid", b"{}"):
                pass
    assert not [r for r in eu.recorded if r.path.startswith("/inference-routers/")]


def test_router_host_per_region_without_a_url() -> None:
    gw = Gateway(
        "us-east-1",
        credentials=(ACCESS_KEY, SECRET_KEY),
        routes={
            "bid": {
                "targets": [
                    "local-a",
                    {"inference_router": "r", "routing_target": "t", "region": "ap-south-1"},
                ]
            }
        },
    )
    region, url, _, _ = gw._targets.resolve_with_botocore({"ap-south-1"})
    gw._targets.region = region
    origin = gw._targets.router_origin(None, "ap-south-1")
    assert origin.host_header == "inferencerouter-runtime.sagemaker.ap-south-1.amazonaws.com"
    assert url == "https://runtime.sagemaker.us-east-1.amazonaws.com"


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ({"endpoint": "a", "inference_router": "r", "routing_target": "t"}, "endpoint"),
        ({"inference_router": "r"}, "routing_target"),
        ({"endpoint": "a", "routing_target": "t"}, "routing_target"),
        ({"inference_router": "r", "routing_target": "t", "variant": "v"}, "variant"),
        ({"region": "eu-west-1"}, "endpoint"),
    ],
)
def test_a_target_is_an_endpoint_or_a_router(target: dict[str, Any], problem: str) -> None:
    with pytest.raises(errors.ConfigError, match=problem):
        RouteConfig.from_mapping("bid", {"targets": [target]})


def test_router_target_key_labels_where() -> None:
    config = RouteConfig.from_mapping(
        "bid",
        {"targets": [{"inference_router": "r", "routing_target": "t", "region": "eu-west-1"}]},
    )
    assert config.targets[0].key == "router/r/t@eu-west-1"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("RequestTimeoutException", errors.RequestTimeout),
        ("AccessDeniedException", errors.AccessDenied),
    ],
)
async def test_router_target_errors_are_read_in_the_routers_vocabulary(
    emulator: Emulator, eu: Emulator, code: str, expected: type[errors.ServiceError]
) -> None:
    eu.runtimes.routers.set_faults("r-eu", {code: 1.0})
    targets = [_router_target(eu, weight=100), {"endpoint": "local-a", "weight": 1}]
    async with _gateway(emulator, targets, retry={"max_attempts": 2}) as gw:
        if expected.retryable:
            result = await gw.invoke("bid", b"{}")  # retried on the endpoint
            assert (result.target, result.attempts) == ("local-a", 2)
        else:
            with pytest.raises(expected) as caught:
                await gw.invoke("bid", b"{}")
            assert type(caught.value) is expected and caught.value.attempts == 1
