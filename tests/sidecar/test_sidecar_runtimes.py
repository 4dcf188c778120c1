"""One sidecar port serves all three runtimes: unmodified boto3 clients of the inference
router runtime and the Global Inference Gateway runtime, pointed at the sidecar, get what
the same client pointed at the emulator (AWS's stand-in) gets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError

from gateway import Gateway
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import GATEWAY_OWN_ERROR_CODES, ROUTER_ERROR_CODES
from gateway.sidecar import Sidecar
from tests._boto import ClientFactory

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2lnbmF0dXJl"
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}
CONFIG: dict[str, Any] = {
    "seed": 5,
    "auth": {"credentials": {"AK": "SK"}},
    "endpoints": {"local-a": {}, "remote-eu": {}},
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "local-a"}]},
                "t-eu": {"destinations": [{"endpoint": "remote-eu", "region": "eu-west-1"}]},
                "t-async": {"mode": "async", "destinations": [{"endpoint": "local-a"}]},
            }
        }
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}
# Keys the emulator accepts, so the same client code runs direct and through the sidecar.
KEYS = {"access_key": "AK", "secret": "SK"}
# Headers that differ per answer (ids, dates) or per hop (connection handling).
_PER_ANSWER = {"x-amzn-requestid", "date", "connection", "keep-alive", "server", "content-length"}


@pytest.fixture
async def stack() -> AsyncIterator[tuple[Emulator, Sidecar]]:
    async with (
        Emulator(EmulatorConfig.from_dict(CONFIG)) as emulator,
        Gateway(
            "us-east-1",
            endpoint_url=emulator.url,
            credentials=("AK", "SK"),
            defaults={"retry": {"max_attempts": 1}},
        ) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
    ):
        yield emulator, sidecar


async def both(
    stack: tuple[Emulator, Sidecar],
    boto_client: ClientFactory,
    service: str,
    call: Callable[[Any], Any],
) -> tuple[Any, Any]:
    """``call(client)`` direct to the emulator, then through the sidecar."""
    emulator, sidecar = stack
    direct = boto_client(emulator.url, service=service, **KEYS)
    relayed = boto_client(sidecar.url, service=service, **KEYS)
    return await asyncio.to_thread(call, direct), await asyncio.to_thread(call, relayed)


def _outcome(call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The call's answer, or its ClientError as what botocore parsed from it."""

    def run(client: Any) -> Any:
        try:
            return call(client)
        except ClientError as error:
            response = error.response
            return {
                "Error": response["Error"],
                "Status": response["ResponseMetadata"]["HTTPStatusCode"],
                "RetryAfter": response["ResponseMetadata"]["HTTPHeaders"].get("retry-after"),
                **{k: v for k, v in response.items() if k not in ("Error", "ResponseMetadata")},
            }

    return run


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    answer = dict(answer)
    metadata = answer.pop("ResponseMetadata", None)
    if metadata is not None:
        answer["Status"] = metadata["HTTPStatusCode"]
        answer["Headers"] = {
            k: v for k, v in metadata["HTTPHeaders"].items() if k not in _PER_ANSWER
        }
    if "InferenceId" in answer:
        answer["InferenceId"] = bool(answer["InferenceId"])
    for key in ("OutputLocation", "FailureLocation"):
        if key in answer:
            answer[key] = answer[key].rsplit("/", 1)[0]  # the object's name is per call
    return answer


def _router_call(client: Any, target: str = "t") -> dict[str, Any]:
    answer = client.invoke_inference_router(
        InferenceRouterName="r1",
        RoutingTargetName=target,
        Body=b'{"x": 1}',
        ContentType="application/json",
        Accept="application/json",
        CustomAttributes="c=1",
        InferenceId="inf-1",
        PrefixAwareId="p-1",
    )
    answer["Body"] = answer["Body"].read()
    return dict(answer)


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("target", ["t", "t-eu"])
async def test_invoke_inference_router(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory, target: str
) -> None:
    direct, relayed = await both(
        stack, boto_client, INFERENCE_ROUTER_RUNTIME, lambda c: _router_call(c, target)
    )
    assert relayed["Body"] == b'{"x": 1}'
    assert relayed["InvokedRoutedResourceArn"].endswith(
        "endpoint/local-a" if target == "t" else "endpoint/remote-eu"
    )
    assert _comparable(relayed) == _comparable(direct)


@pytest.mark.newer_runtimes
async def test_invoke_inference_router_async(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory
) -> None:
    def call(client: Any) -> dict[str, Any]:
        return dict(
            client.invoke_inference_router_async(
                InferenceRouterName="r1",
                RoutingTargetName="t-async",
                InputLocation="s3://bucket/in.json",
                ContentType="application/json",
                Accept="application/json",
                CustomAttributes="c=1",
                InferenceId="inf-2",
                RequestTTLSeconds=600,
                InvocationTimeoutSeconds=30,
                Filename="out.json",
                S3OutputPathExtension="runs/1",
            )
        )

    direct, relayed = await both(stack, boto_client, INFERENCE_ROUTER_RUNTIME, call)
    assert relayed["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert relayed["OutputLocation"]
    assert _comparable(relayed) == _comparable(direct)


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(ROUTER_ERROR_CODES))
async def test_router_errors(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory, code: str
) -> None:
    emulator, _ = stack
    if code == "ModelError":
        emulator.set_faults("local-a", error_rates={"ModelError": 1.0})
    else:
        emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    direct, relayed = await both(
        stack, boto_client, INFERENCE_ROUTER_RUNTIME, _outcome(_router_call)
    )
    assert relayed["Error"]["Code"] == code
    assert relayed["Status"] == direct["Status"]
    assert relayed["Error"] == direct["Error"]
    for member in ("OriginalStatusCode", "OriginalMessage", "LogStreamArn"):
        assert relayed.get(member) == direct.get(member)


def _gateway_call(client: Any) -> dict[str, Any]:
    answer = client.invoke_global_inference_gateway(
        GatewayId="gw1",
        Body=json.dumps(CHAT).encode(),
        ContentType="application/json",
        Accept="application/json",
        CustomerIdentityToken=TOKEN,
    )
    answer["Body"] = json.loads(answer["Body"].read())
    for key in ("id", "created"):
        answer["Body"].pop(key)
    return dict(answer)


@pytest.mark.newer_runtimes
async def test_invoke_global_inference_gateway(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory
) -> None:
    emulator, _ = stack
    direct, relayed = await both(stack, boto_client, GATEWAY_RUNTIME, _gateway_call)
    assert relayed["Body"]["choices"][0]["message"]["content"] == "bid on this one"
    assert _comparable(relayed) == _comparable(direct)
    assert [f.identity_token for f in emulator.runtimes.gateways.forwarded] == [TOKEN, TOKEN]


def _stream_call(client: Any) -> list[Any]:
    answer = client.invoke_global_inference_gateway_with_response_stream(
        GatewayId="gw1",
        Body=json.dumps(CHAT).encode(),
        ContentType="application/json",
        CustomerIdentityToken=TOKEN,
    )
    events: list[Any] = []
    try:
        for event in answer["Body"]:
            events.append(event["PayloadPart"]["Bytes"])  # noqa: PERF401  (kept on error)
    except EventStreamError as error:
        events.append((error.response["Error"]["Code"], error.response["Error"]["Message"]))
    finally:
        answer["Body"].close()  # the connection, mid-stream after an error
    return [_without_ids(event) for event in events]


def _without_ids(event: Any) -> Any:
    if isinstance(event, bytes) and event.startswith(b"data: {"):
        chunk = json.loads(event[6:])
        chunk.pop("id")
        chunk.pop("created")
        return chunk
    return event


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("failure", [None, "InternalStreamFailure", "ModelStreamError"])
async def test_invoke_global_inference_gateway_stream(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory, failure: str | None
) -> None:
    emulator, _ = stack
    if failure is not None:
        emulator.runtimes.gateways.set_faults(
            "gw1", {"stream_failure_rate": 1.0, "stream_failure_event": failure}
        )
    direct, relayed = await both(stack, boto_client, GATEWAY_RUNTIME, _stream_call)
    assert relayed == direct
    if failure is None:
        assert relayed[-1] == b"data: [DONE]\n\n"
    else:
        assert len(relayed) == 2 and relayed[-1][0] == failure


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(GATEWAY_OWN_ERROR_CODES))
async def test_global_gateway_errors(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory, code: str
) -> None:
    emulator, _ = stack
    emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}})
    direct, relayed = await both(stack, boto_client, GATEWAY_RUNTIME, _outcome(_gateway_call))
    assert relayed["Error"]["Code"] == code
    assert relayed["Error"]["Message"].startswith("Global Inference Gateway:")
    assert (relayed["Status"], relayed["Error"], relayed["RetryAfter"]) == (
        direct["Status"],
        direct["Error"],
        direct["RetryAfter"],
    )


def _unmodeled_refusal(**params: Any) -> Callable[[Any], Any]:
    """An InvokeGlobalInferenceGateway call with ``params`` changed: what botocore raised."""

    def run(client: Any) -> Any:
        call = {"GatewayId": "gw1", "Body": json.dumps(CHAT).encode()}
        call["ContentType"] = "application/json"
        try:
            client.invoke_global_inference_gateway(**{**call, **params})
        except ClientError as error:
            response = error.response
            return {
                "Class": type(error),
                "Error": response["Error"],
                "Status": response["ResponseMetadata"]["HTTPStatusCode"],
                "TopLevel": sorted(k for k in response if k not in ("Error", "ResponseMetadata")),
            }
        raise AssertionError("served")

    return run


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"ContentType": "text/plain"}, 415, "UnsupportedMediaTypeException"),
        ({"Body": b"[1, 2]"}, 400, "ValidationException"),
    ],
)
async def test_global_gateway_documented_but_unmodeled_errors_are_plain_client_errors(
    stack: tuple[Emulator, Sidecar],
    boto_client: ClientFactory,
    params: dict[str, Any],
    status: int,
    code: str,
) -> None:
    # The docs give a bad content type a 415 and a bad body a 400, naming no shape:
    # boto3 raises ClientError itself (no modeled class), with the status and Message.
    call = _unmodeled_refusal(**params)
    direct, relayed = await both(stack, boto_client, GATEWAY_RUNTIME, call)
    assert relayed == direct
    assert relayed["Class"] is ClientError
    assert (relayed["Status"], relayed["Error"]["Code"]) == (status, code)
    assert relayed["Error"]["Message"].startswith("Global Inference Gateway: ")
    assert relayed["TopLevel"] == []


@pytest.mark.newer_runtimes
async def test_global_gateway_resource_not_found(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory
) -> None:
    def call(client: Any) -> Any:
        return client.invoke_global_inference_gateway(
            GatewayId="gw1", Body=b'{"model": "nope"}', ContentType="application/json"
        )

    direct, relayed = await both(stack, boto_client, GATEWAY_RUNTIME, _outcome(call))
    assert relayed["Error"]["Code"] == "ResourceNotFoundException"
    assert (relayed["Status"], relayed["Error"]) == (direct["Status"], direct["Error"])
    assert (relayed.get("ResourceId"), relayed.get("ResourceType")) == ("nope", "model")
    assert (relayed.get("ResourceId"), relayed.get("ResourceType")) == (
        direct.get("ResourceId"),
        direct.get("ResourceType"),
    )


async def test_unknown_runtime_action_is_refused(
    stack: tuple[Emulator, Sidecar], boto_client: ClientFactory
) -> None:
    import httpx

    _, sidecar = stack
    async with httpx.AsyncClient(base_url=sidecar.url) as client:
        response = await client.post("/inference-routers/r1/nope", content=b"{}")
    assert response.status_code == 404
    assert response.headers["x-amzn-errortype"].startswith("UnknownOperationException")


@pytest.mark.newer_runtimes
async def test_the_sidecars_own_errors_in_each_runtimes_vocabulary(
    stack: tuple[Emulator, Sidecar],
) -> None:
    import httpx

    emulator, sidecar = stack
    emulator.runtimes.gateways.set_latency("gw1", {"base_ms": 300.0})
    async with httpx.AsyncClient(base_url=sidecar.url) as client:
        late = await client.post(
            "/global-inference-gateway/gw1/invocations",
            content=json.dumps(CHAT).encode(),
            headers={"content-type": "application/json", "x-gateway-timeout-ms": "20"},
        )
        unsupported = await client.post(
            "/inference-routers/r1/invocations",
            content=b"{}",
            headers={
                "x-amzn-sagemaker-routing-target-name": "t",
                "x-amzn-sagemaker-target-model": "m.tar.gz",
            },
        )
        missing = await client.post("/inference-routers/r1/invocations", content=b"{}")
    assert late.status_code == 504
    assert late.headers["x-amzn-errortype"].startswith("GatewayTimeoutException:")
    assert unsupported.status_code == 400
    assert unsupported.headers["x-amzn-errortype"].startswith("ValidationException:")
    assert "x-amzn-sagemaker-target-model" in unsupported.json()["Message"]
    assert missing.status_code == 400
    assert missing.headers["x-amzn-errortype"].startswith("ValidationException:")
    assert "RoutingTargetName" in missing.json()["Message"]  # the models name it so


@pytest.mark.newer_runtimes
async def test_router_and_gateway_calls_are_logged_with_their_route_and_bad_names_named(
    stack: tuple[Emulator, Sidecar],
) -> None:
    """The access log's route is the router name or gateway id (it was null), and a bad
    one is refused as what it is (it read "invalid endpoint name")."""
    import io
    import logging

    import httpx
    import orjson

    from gateway.sidecar import SidecarConfig
    from gateway.sidecar._logging import JsonFormatter

    _, sidecar = stack
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gateway.access")
    logger.addHandler(handler)
    chat = json.dumps(CHAT).encode()
    routed = {"x-amzn-sagemaker-routing-target-name": "t"}
    as_json = {"content-type": "application/json"}
    try:
        async with (
            Sidecar(sidecar.gateway, "127.0.0.1", 0, config=SidecarConfig(access_log=True)) as ours,
            httpx.AsyncClient(base_url=ours.url) as client,
        ):
            router = await client.post(
                "/inference-routers/r1/invocations", content=b"{}", headers=routed
            )
            gateway = await client.post(
                "/global-inference-gateway/gw1/invocations", content=chat, headers=as_json
            )
            bad_router = await client.post(
                "/inference-routers/bad_router/invocations", content=b"{}", headers=routed
            )
            bad_gateway = await client.post(
                "/global-inference-gateway/GW-1/invocations", content=chat, headers=as_json
            )
    finally:
        logger.removeHandler(handler)
    assert (router.status_code, gateway.status_code) == (200, 200)
    assert bad_router.status_code == bad_gateway.status_code == 400
    assert "invalid inference router name 'bad_router'" in bad_router.json()["Message"]
    assert "invalid Global Inference Gateway id 'GW-1'" in bad_gateway.json()["Message"]
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["route"], line["status"]) for line in lines] == [
        ("r1", 200),
        ("gw1", 200),
        ("bad_router", 400),
        ("GW-1", 400),
    ]
