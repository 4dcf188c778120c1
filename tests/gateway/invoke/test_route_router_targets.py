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
        "r-eu": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "remote-eu"}]},
                "t-async": {"mode": "async", "destinations": [{"endpoint": "remote-eu"}]},
            }
        }
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


@pytest.mark.newer_runtimes
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


@pytest.mark.newer_runtimes
async def test_router_target_errors_are_retried_on_the_endpoint(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [_router_target(eu, weight=100), {"endpoint": "local-a", "weight": 1}]
    eu.runtimes.routers.set_faults("r-eu", {"ServiceUnavailableException": 1.0})
    async with _gateway(emulator, targets, retry={"max_attempts": 2}) as gw:
        result = await gw.invoke("bid", b"{}")
    assert (result.target, result.attempts) == ("local-a", 2)


@pytest.mark.newer_runtimes
async def test_members_a_router_does_not_take_are_refused(emulator: Emulator, eu: Emulator) -> None:
    async with _gateway(emulator, [_router_target(eu)]) as gw:
        with pytest.raises(errors.InvalidRequest, match="x-amzn-sagemaker-target-model"):
            await gw.invoke("bid", b"{}", target_model="m.tar.gz")
        with pytest.raises(errors.InvalidRequest, match="InvokeEndpointWithResponseStream"):
            async for _ in gw.invoke_stream("bid", b"{}"):
                pass
    assert not [r for r in eu.recorded if r.path.startswith("/inference-routers/")]


@pytest.mark.newer_runtimes
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


@pytest.mark.newer_runtimes
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
    async with _gateway(emulator, targets, retry={"max_attempts": 1}) as gw:
        with pytest.raises(expected) as caught:
            await gw.invoke("bid", b"{}")
        assert type(caught.value) is expected and caught.value.attempts == 1
    # Either is the router's state (a timeout, our credentials refused): retried on the
    # endpoint, retryable or not.
    async with _gateway(emulator, targets, retry={"max_attempts": 2}) as gw:
        result = await gw.invoke("bid", b"{}")
        assert (result.target, result.attempts) == ("local-a", 2)


# -- a cross-Region router as the fallback priority --------------------------------

EJECT_AT_ONCE = {"consecutive_failures": 1, "base_ejection_s": 60.0}


def _router_calls(eu: Emulator) -> int:
    return sum(1 for r in eu.recorded if r.path.startswith("/inference-routers/"))


@pytest.mark.newer_runtimes
async def test_a_healthy_endpoint_leaves_the_fallback_router_idle(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = ["local-a", _router_target(eu, priority=1)]
    async with _gateway(emulator, targets) as gw:
        results = [await gw.invoke("bid", b"{}") for _ in range(30)]
    assert {(r.target, r.attempts, r.routing_reason) for r in results} == {("local-a", 1, None)}
    assert _router_calls(eu) == 0


@pytest.mark.newer_runtimes
async def test_an_ejected_endpoint_falls_back_to_the_router_in_another_region(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = ["local-a", _router_target(eu, priority=1)]
    async with _gateway(emulator, targets, ejection=EJECT_AT_ONCE) as gw:
        emulator.set_faults("local-a", error_rates={"ServiceUnavailable": 1.0})
        first = await gw.invoke("bid", b'{"n": 1}')
        assert gw.route("bid").level_loads() == {0: 0.0, 1: 1.0}
        emulator.restore("local-a")  # still ejected: calls keep going to the fallback
        later = [await gw.invoke("bid", b"{}") for _ in range(5)]
    assert (first.target, first.attempts) == ("r-eu", 2)  # the retry fell back
    assert first.routed_resource_arn == REMOTE_EU
    assert first.routing_reason == "local-preferred"  # the router's own Region
    assert {(r.target, r.attempts, r.routed_resource_arn) for r in later} == {
        ("r-eu", 1, REMOTE_EU)
    }
    assert _router_calls(eu) == 6


@pytest.mark.newer_runtimes
async def test_a_hedge_lands_on_the_fallback_router(emulator: Emulator, eu: Emulator) -> None:
    targets = ["local-a", _router_target(eu, priority=1)]
    hedge = {"enabled": True, "initial_delay_ms": 20.0, "max_extra_load": 0.5}
    emulator.set_latency("local-a", base_ms=3000.0)  # the primary hangs past the hedge delay
    async with _gateway(emulator, targets, hedge=hedge, timeout_ms=10_000) as gw:
        result = await gw.invoke("bid", b'{"hedged": true}')
    assert result.hedged and result.target == "r-eu"
    assert result.routed_resource_arn == REMOTE_EU
    assert result.body == b'{"hedged": true}'


@pytest.mark.newer_runtimes
async def test_the_fallback_takes_a_retry_of_the_healthy_primary(
    emulator: Emulator, eu: Emulator
) -> None:
    # One failure does not eject (5 in a row would): the retry still falls back.
    targets = ["local-a", _router_target(eu, priority=1)]
    async with _gateway(emulator, targets) as gw:
        emulator.set_faults("local-a", error_rates={"InternalFailure": 1.0})
        result = await gw.invoke("bid", b"{}")
        emulator.restore("local-a")
        after = await gw.invoke("bid", b"{}")
    assert (result.target, result.attempts, result.routing_reason) == ("r-eu", 2, "local-preferred")
    assert (after.target, after.attempts) == ("local-a", 1)  # still the primary's traffic


# -- streams and async invocations on routes with router targets ----------------------


@pytest.mark.newer_runtimes
async def test_a_stream_uses_the_routes_endpoint_targets_only(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [_router_target(eu, weight=100), {"endpoint": "local-a", "weight": 1}]
    async with _gateway(emulator, targets) as gw:
        for _ in range(5):
            stream = gw.invoke_stream("bid", b'{"s": 1}')
            parts = [part async for part in stream]
            assert parts and stream.target == "local-a"
    assert _router_calls(eu) == 0


@pytest.mark.newer_runtimes
async def test_a_stream_on_a_route_of_routers_only_is_refused_typed(
    emulator: Emulator, eu: Emulator
) -> None:
    async with _gateway(emulator, [_router_target(eu)]) as gw:
        with pytest.raises(errors.InvalidRequest, match="no other target"):
            async for _ in gw.invoke_stream("bid", b"{}"):
                pass
    assert _router_calls(eu) == 0


@pytest.mark.newer_runtimes
async def test_an_async_invocation_goes_to_a_router_target_as_invoke_inference_router_async(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [_router_target(eu, routing_target="t-async", weight=100), "local-a"]
    async with _gateway(emulator, targets) as gw:
        job = await gw.invoke_async("bid", input_location="s3://bucket/in.json")
    assert job.output_location is not None
    assert "/inference-router-outputs/r-eu/t-async/" in job.output_location
    routed = [r for r in eu.recorded if r.path.startswith("/inference-routers/")]
    assert [r.path for r in routed] == ["/inference-routers/r-eu/async-invocations"]
    headers = {name.lower(): value for name, value in routed[0].headers}
    assert headers["x-amzn-sagemaker-routing-target-name"] == "t-async"
    assert headers["x-amzn-sagemaker-inputlocation"] == "s3://bucket/in.json"


@pytest.mark.newer_runtimes
async def test_an_inline_async_body_skips_the_router_targets(
    emulator: Emulator, eu: Emulator
) -> None:
    targets = [_router_target(eu, routing_target="t-async", weight=100), "local-a"]
    async with _gateway(emulator, targets) as gw:
        jobs = [await gw.invoke_async("bid", body=b'{"inline": 1}') for _ in range(3)]
        with pytest.raises(errors.InvalidRequest, match="no other target"):
            async with _gateway(emulator, [_router_target(eu)]) as only_routers:
                await only_routers.invoke_async("bid", body=b"{}")
    assert all("local-a" in (job.output_location or "") for job in jobs)
    assert _router_calls(eu) == 0
