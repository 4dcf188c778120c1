"""The emulated inference routers, driven by unmodified boto3 clients of their runtime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from gateway._aws.models import INFERENCE_ROUTER_RUNTIME, service_model
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import ROUTER_ERROR_CODES
from gateway.errors import ConfigError
from gateway.rtb import load_bundled_spec
from tests._boto import ClientFactory
from tests.emulator.conftest import ACCESS_KEY, SECRET_KEY

SERVICE = INFERENCE_ROUTER_RUNTIME
# A CSV row of the bundled bid-filter model's width (the emulator checks it).
FEATURE_ROW = ",".join("1" for _ in load_bundled_spec().names).encode()
ACCOUNT = "123456789012"


def _arn(region: str, resource: str, account: str = ACCOUNT) -> str:
    return f"arn:aws:sagemaker:{region}:{account}:{resource}"


CONFIG: dict[str, Any] = {
    "seed": 11,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {
        "local-a": {},
        "remote-eu": {},
        "remote-ap": {},
        "csv": {"model": {"type": "constant", "body": "0.5", "content_type": "text/csv"}},
    },
    "inference_routers": {
        "r1": {
            "attempt_timeout_s": 0.3,
            "routing_targets": {
                "t-local": {
                    "destinations": [
                        {"endpoint": "local-a"},
                        {"endpoint": "remote-eu", "region": "eu-west-1"},
                    ]
                },
                "t-remote": {
                    "destinations": [
                        {"endpoint": "remote-eu", "region": "eu-west-1"},
                        {"endpoint": "remote-ap", "region": "ap-south-1"},
                    ]
                },
                "t-one": {"destinations": [{"endpoint": "remote-eu", "region": "eu-west-1"}]},
                "t-ic": {
                    "destinations": [
                        {
                            "endpoint": "csv",
                            "region": "us-west-2",
                            "account_id": "210987654321",
                            "inference_component": "scorer-ic",
                        }
                    ]
                },
                "t-async": {
                    "mode": "async",
                    "destinations": [{"endpoint": "local-a"}],
                },
            },
        }
    },
}
LOCAL_A = _arn("us-east-1", "endpoint/local-a")
REMOTE_EU = _arn("eu-west-1", "endpoint/remote-eu")
REMOTE_AP = _arn("ap-south-1", "endpoint/remote-ap")


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emu:
        yield emu


@pytest.fixture
def router(emulator: Emulator, boto_client: ClientFactory) -> Any:
    return boto_client(emulator.url, service=SERVICE)


async def call(router: Any, target: str = "t-local", **params: Any) -> dict[str, Any]:
    params.setdefault("Body", b'{"x": 1}')
    response = await asyncio.to_thread(
        router.invoke_inference_router,
        InferenceRouterName=params.pop("InferenceRouterName", "r1"),
        RoutingTargetName=target,
        **params,
    )
    response["Body"] = response["Body"].read()
    return response


async def failure(router: Any, target: str = "t-local", **params: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        await call(router, target, **params)
    return caught.value


def invocations(emulator: Emulator, endpoint: str) -> int:
    return sum(n for key, n in emulator.stats.invocations.items() if key[0] == endpoint)


# -- routing ---------------------------------------------------------------------


@pytest.mark.newer_runtimes
async def test_the_local_destination_is_preferred(router: Any, emulator: Emulator) -> None:
    response = await call(
        router,
        Body=b'{"x": 1}',
        ContentType="application/json",
        Accept="application/json",
        CustomAttributes="trace=abc",
        InferenceId="inf-1",
        PrefixAwareId="app-1",
    )
    assert response["Body"] == b'{"x": 1}'
    assert response["ContentType"] == "application/json"
    assert response["InvokedRoutedResourceArn"] == LOCAL_A
    assert response["RoutingReason"] == "local-preferred"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert response["CustomAttributes"] == "trace=abc"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert (invocations(emulator, "local-a"), invocations(emulator, "remote-eu")) == (1, 0)
    recorded = emulator.recorded[-1]
    assert (recorded.method, recorded.path) == ("POST", "/inference-routers/r1/invocations")
    headers = dict(recorded.headers)
    assert headers["x-amzn-sagemaker-routing-target-name"] == "t-local"
    assert headers["x-amzn-sagemaker-prefix-aware-id"] == "app-1"
    assert headers["x-amzn-sagemaker-inference-id"] == "inf-1"
    routed = emulator.runtimes.stats()["routers"]["routed"]
    assert routed == [["r1", "t-local", LOCAL_A, "local-preferred", 1]]


@pytest.mark.newer_runtimes
async def test_two_remote_destinations_with_capacity(router: Any) -> None:
    seen = {
        (r["InvokedRoutedResourceArn"], r["RoutingReason"])
        for r in [await call(router, "t-remote") for _ in range(12)]
    }
    assert seen == {(REMOTE_EU, "capacity-available"), (REMOTE_AP, "capacity-available")}


@pytest.mark.newer_runtimes
async def test_a_single_remote_destination_is_only_healthy(router: Any) -> None:
    response = await call(router, "t-one")
    assert (response["InvokedRoutedResourceArn"], response["RoutingReason"]) == (
        REMOTE_EU,
        "only-healthy",
    )


@pytest.mark.newer_runtimes
async def test_an_unhealthy_local_destination_fails_over(router: Any, emulator: Emulator) -> None:
    emulator.runtimes.routers.set_destination("r1", "t-local", "local-a", healthy=False)
    response = await call(router)
    assert (response["InvokedRoutedResourceArn"], response["RoutingReason"]) == (
        REMOTE_EU,
        "failover",
    )
    emulator.runtimes.restore()
    assert (await call(router))["RoutingReason"] == "local-preferred"


@pytest.mark.newer_runtimes
async def test_with_none_healthy_one_is_tried_anyway(router: Any, emulator: Emulator) -> None:
    for endpoint in ("local-a", "remote-eu"):
        emulator.runtimes.routers.set_destination("r1", "t-local", endpoint, healthy=False)
    response = await call(router)
    assert response["RoutingReason"] == "failover"
    assert response["InvokedRoutedResourceArn"] in (LOCAL_A, REMOTE_EU)


async def _wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition never held")


@pytest.mark.newer_runtimes
async def test_a_full_local_destination_sends_the_call_elsewhere(
    router: Any, emulator: Emulator
) -> None:
    emulator.runtimes.routers.set_destination("r1", "t-local", "local-a", max_in_flight=1)
    emulator.set_latency("local-a", base_ms=250)
    first = asyncio.create_task(call(router))
    await _wait_for(lambda: invocations(emulator, "local-a") == 1)
    second = await call(router)
    assert (second["InvokedRoutedResourceArn"], second["RoutingReason"]) == (
        REMOTE_EU,
        "only-healthy",
    )
    assert (await first)["RoutingReason"] == "local-preferred"


@pytest.mark.newer_runtimes
async def test_an_inference_component_in_another_account_and_region(router: Any) -> None:
    response = await call(router, "t-ic", ContentType="text/csv")
    assert response["InvokedRoutedResourceArn"] == _arn(
        "us-west-2", "inference-component/scorer-ic", "210987654321"
    )
    assert response["RoutingReason"] == "only-healthy"
    assert (response["Body"], response["ContentType"]) == (b"0.5", "text/csv")


# -- the single retry -------------------------------------------------------------


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    "endpoint_error",
    [
        "ThrottlingException",
        "ModelNotReadyException",
        "InternalFailure",
        "ServiceUnavailable",
        "InternalDependencyException",
    ],
)
async def test_a_retryable_error_is_retried_once_elsewhere(
    router: Any, emulator: Emulator, endpoint_error: str
) -> None:
    emulator.set_faults("local-a", error_rates={endpoint_error: 1.0})
    response = await call(router)
    assert (response["InvokedRoutedResourceArn"], response["RoutingReason"]) == (
        REMOTE_EU,
        "failover",
    )
    assert emulator.runtimes.stats()["routers"]["retries"] == [["r1", "t-local", 1]]


@pytest.mark.newer_runtimes
async def test_only_one_retry(router: Any, emulator: Emulator) -> None:
    for endpoint in ("local-a", "remote-eu"):
        emulator.set_faults(endpoint, error_rates={"ThrottlingException": 1.0})
    error = await failure(router)
    assert error.response["Error"]["Code"] == "ThrottlingException"
    assert isinstance(error, router.exceptions.ThrottlingException)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert (invocations(emulator, "local-a"), invocations(emulator, "remote-eu")) == (1, 1)


@pytest.mark.newer_runtimes
async def test_a_model_error_is_not_retried(router: Any, emulator: Emulator) -> None:
    emulator.set_faults("local-a", error_rates={"ModelError": 1.0})
    error = await failure(router)
    assert isinstance(error, router.exceptions.ModelError)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error.response["OriginalStatusCode"] == 500
    assert error.response["OriginalMessage"] == "Injected model failure"
    assert error.response["LogStreamArn"].startswith("arn:aws:logs:us-east-1:")
    assert invocations(emulator, "remote-eu") == 0


@pytest.mark.newer_runtimes
async def test_an_attempt_that_times_out_is_not_retried(router: Any, emulator: Emulator) -> None:
    emulator.set_latency("local-a", base_ms=2000)
    error = await failure(router)
    assert isinstance(error, router.exceptions.ServiceUnavailableException)
    assert "did not respond within 0.3 seconds" in error.response["Error"]["Message"]
    assert invocations(emulator, "remote-eu") == 0


# -- errors and limits ------------------------------------------------------------


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(ROUTER_ERROR_CODES))
async def test_every_modeled_error_of_invoke(router: Any, emulator: Emulator, code: str) -> None:
    emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    error = await failure(router)
    assert isinstance(error, getattr(router.exceptions, code))
    assert error.response["Error"]["Code"] == code
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == ROUTER_ERROR_CODES[code]
    assert error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
def test_the_injectable_errors_are_the_models() -> None:
    model = service_model(SERVICE)
    modeled = {
        shape.name: shape.metadata["error"]["httpStatusCode"]
        for name in model.operation_names
        for shape in model.operation_model(name).error_shapes
    }
    assert modeled == ROUTER_ERROR_CODES


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"InferenceRouterName": "nope"}, "Inference router nope of account"),
        ({"target": "missing"}, "Routing target missing not found in inference router r1"),
        ({"target": "t-async"}, "is not configured for real-time inference"),
        ({"Body": b""}, "The request body can't be empty."),
        ({"InferenceId": "i" * 65}, "at 'inferenceId'"),
        ({"CustomAttributes": "s3cr" + "x" * 1021}, "at 'customAttributes'"),
    ],
)
async def test_validation_errors(router: Any, params: dict[str, Any], message: str) -> None:
    target = params.pop("target", "t-local")
    error = await failure(router, target, **params)
    assert isinstance(error, router.exceptions.ValidationException)
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert message in error.response["Error"]["Message"]
    assert "s3cr" not in error.response["Error"]["Message"]  # CustomAttributes never quoted


@pytest.mark.newer_runtimes
async def test_a_body_over_6_mb_is_413(router: Any) -> None:
    error = await failure(router, Body=b"x" * (6 * 1024 * 1024 + 1))
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert error.response["Error"]["Code"] == "PayloadTooLargeException"
    assert "limit of 6291456 bytes" in error.response["Error"]["Message"]


@pytest.mark.newer_runtimes
async def test_a_bad_signature_is_refused(emulator: Emulator, boto_client: ClientFactory) -> None:
    router = boto_client(emulator.url, service=SERVICE, secret="wrong")
    error = await failure(router)
    assert error.response["Error"]["Code"] == "InvalidSignatureException"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403


async def test_http_1_0_is_refused(emulator: Emulator) -> None:
    request = (
        b"POST /inference-routers/r1/invocations HTTP/1.0\r\nHost: x\r\n"
        b"X-Amzn-SageMaker-Routing-Target-Name: t-local\r\nContent-Length: 1\r\n\r\nx"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port)
    writer.write(request)
    head = await reader.readline()
    writer.close()
    assert head.startswith(b"HTTP/1.1 505 ")


# -- InvokeInferenceRouterAsync ---------------------------------------------------


async def call_async(router: Any, **params: Any) -> dict[str, Any]:
    params.setdefault("RoutingTargetName", "t-async")
    params.setdefault("InputLocation", "s3://bucket/input.json")
    return await asyncio.to_thread(
        router.invoke_inference_router_async, InferenceRouterName="r1", **params
    )


@pytest.mark.newer_runtimes
async def test_async_with_every_member(router: Any, emulator: Emulator) -> None:
    response = await call_async(
        router,
        ContentType="application/json",
        Accept="application/json",
        CustomAttributes="a=b",
        InferenceId="job-7",
        S3OutputPathExtension="daily/2026",
        Filename="result.json",
        RequestTTLSeconds=600,
        InvocationTimeoutSeconds=120,
    )
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert response["InferenceId"] == "job-7"
    bucket = f"s3://sagemaker-emulator-us-east-1-{ACCOUNT}"
    assert response["OutputLocation"] == (
        f"{bucket}/inference-router-outputs/r1/t-async/daily/2026/result.json"
    )
    assert response["FailureLocation"] == (
        f"{bucket}/inference-router-failures/r1/t-async/job-7-error.out"
    )
    headers = dict(emulator.recorded[-1].headers)
    assert emulator.recorded[-1].path == "/inference-routers/r1/async-invocations"
    assert headers["x-amzn-sagemaker-inputlocation"] == "s3://bucket/input.json"
    assert headers["x-amzn-sagemaker-requestttlseconds"] == "600"
    assert emulator.runtimes.stats()["routers"]["async_routed"] == [["r1", "t-async", LOCAL_A, 1]]


@pytest.mark.newer_runtimes
async def test_async_generates_an_inference_id(router: Any) -> None:
    response = await call_async(router)
    assert len(response["InferenceId"]) == 36
    assert response["OutputLocation"].endswith(f"/t-async/{response['InferenceId']}.out")


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"RoutingTargetName": "t-local"}, "not configured for asynchronous inference"),
        ({"RequestTTLSeconds": 21601}, "at 'requestTTLSeconds'"),
        ({"InvocationTimeoutSeconds": 3601}, "at 'invocationTimeoutSeconds'"),
        ({"InputLocation": "ftp://bucket/x"}, "at 'inputLocation'"),
        ({"Filename": "a.b.c"}, "at 'filename'"),
    ],
)
async def test_async_validation(router: Any, params: dict[str, Any], message: str) -> None:
    with pytest.raises(router.exceptions.ValidationException) as caught:
        await call_async(router, **params)
    assert message in caught.value.response["Error"]["Message"]


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", ["ThrottlingException", "AccessDeniedException"])
async def test_async_errors(router: Any, emulator: Emulator, code: str) -> None:
    emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    with pytest.raises(getattr(router.exceptions, code)):
        await call_async(router)


# -- control, configuration, the default set-up -----------------------------------


@pytest.mark.newer_runtimes
async def test_control_over_http(router: Any, emulator: Emulator) -> None:
    async with httpx.AsyncClient(base_url=emulator.url) as http:
        changed = await http.post(
            "/_emulator/runtimes/destination/r1/t-local/local-a", json={"healthy": False}
        )
        assert changed.status_code == 200
        assert (await call(router))["RoutingReason"] == "failover"
        faults = await http.post(
            "/_emulator/runtimes/router-faults/r1",
            json={"error_rates": {"AccessDeniedException": 1.0}},
        )
        assert faults.status_code == 200
        assert isinstance(await failure(router), router.exceptions.AccessDeniedException)
        assert (await http.post("/_emulator/runtimes/restore")).status_code == 200
        stats = (await http.get("/_emulator/runtimes/stats")).json()["routers"]
        assert ["r1", "AccessDeniedException", 1] in stats["errors"]
        unknown = await http.post("/_emulator/runtimes/router-faults/nope", json={})
        assert unknown.status_code == 400 and "nope" in unknown.json()["message"]
    assert (await call(router))["RoutingReason"] == "local-preferred"


def test_a_destination_must_name_an_endpoint() -> None:
    config = {
        "endpoints": {"a": {}},
        "inference_routers": {
            "r": {"routing_targets": {"t": {"destinations": [{"endpoint": "b"}]}}}
        },
    }
    with pytest.raises(ConfigError, match=r"inference_routers\.r\.routing_targets\.t"):
        EmulatorConfig.from_dict(config)


def test_an_unknown_injected_error_is_refused() -> None:
    config = {"inference_routers": {"r": {"faults": {"error_rates": {"ValidationError": 1}}}}}
    with pytest.raises(ConfigError, match="unknown error"):
        EmulatorConfig.from_dict(config)


@pytest.mark.newer_runtimes
async def test_the_default_bid_router(boto_client: ClientFactory) -> None:
    async with Emulator(EmulatorConfig.default(seed=1)) as emu:
        router = boto_client(emu.url, service=SERVICE)
        row = FEATURE_ROW
        local = await call(
            router, "bid-filter", InferenceRouterName="bid-router", Body=row, ContentType="text/csv"
        )
        assert local["InvokedRoutedResourceArn"] == _arn("us-east-1", "endpoint/bid-filter")
        assert local["RoutingReason"] == "local-preferred"
        emu.runtimes.routers.set_destination(
            "bid-router", "bid-filter", "bid-filter", healthy=False
        )
        remote = await call(
            router, "bid-filter", InferenceRouterName="bid-router", Body=row, ContentType="text/csv"
        )
        assert remote["InvokedRoutedResourceArn"] == _arn("eu-west-1", "endpoint/bid-filter-eu")
        assert remote["RoutingReason"] == "failover"
        assert 0.0 <= float(remote["Body"]) <= 1.0


@pytest.mark.newer_runtimes
async def test_the_command_line_emulator_serves_both_runtimes(boto_client: ClientFactory) -> None:
    """The default set-up survives the trip to a child process (its config as a file)."""
    with Emulator.start_subprocess(EmulatorConfig.default(seed=2)) as process:
        router = boto_client(process.url, service=SERVICE)
        routed = await call(
            router,
            "bid-filter",
            InferenceRouterName="bid-router",
            Body=FEATURE_ROW,
            ContentType="text/csv",
        )
        assert routed["RoutingReason"] == "local-preferred"
        gateway = boto_client(process.url, service="sagemaker-gateway-runtime")
        answer = await asyncio.to_thread(
            gateway.invoke_global_inference_gateway,
            GatewayId="demo",
            ContentType="application/json",
            Body=b'{"model": "echo", "prompt": "over the wire"}',
        )
        assert b"over the wire" in answer["Body"].read()
        async with httpx.AsyncClient(base_url=process.url) as http:
            stats = (await http.get("/_emulator/runtimes/stats")).json()
        assert stats["routers"]["routed"][0][:2] == ["bid-router", "bid-filter"]
