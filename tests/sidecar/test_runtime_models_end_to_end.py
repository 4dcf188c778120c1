"""Every operation, member and error shape of the inference router and Global Inference
Gateway models, read from the installed botocore at collection, driven end to end on
four paths against the emulator over HTTP:

* boto3 straight to the emulator (AWS's stand-in: the reference);
* boto3 through the sidecar;
* ``gateway.compat`` through the sidecar;
* ``Gateway`` straight to the emulator.

An operation, input member or error shape a future model adds becomes a new case
here; it fails until the tables below say how to send it or how to make the emulator
raise it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from gateway import Gateway, compat, errors
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME
from gateway._invoke.api import error_origin, operation_table
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import GATEWAY_OWN_ERROR_CODES, ROUTER_ERROR_CODES
from gateway.sidecar import Sidecar
from gateway.sidecar._config import SidecarConfig
from tests.gateway.invoke.test_runtimes_client import _EchoingServer
from tests.gateway.test_errors_runtimes import EXPECTED as RETRYABLE_BY_CODE

pytestmark = pytest.mark.newer_runtimes

SERVICES = (INFERENCE_ROUTER_RUNTIME, GATEWAY_RUNTIME)
# Read at collection; a botocore without these models (the lowest-versions pass, which
# deselects this module) collects no cases instead of failing to import.
_SESSION = botocore.session.get_session()
MODELS = {
    service: _SESSION.get_service_model(service)
    for service in SERVICES
    if service in _SESSION.get_available_services()
}
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2VjcmV0c2lnbmF0dXJl"
ATTRIBUTES = "tenant=acme-secret-attrs"
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}
KEYS = ("AK", "SK")
CONFIG: dict[str, Any] = {
    "seed": 11,
    "auth": {"credentials": {"AK": "SK"}},
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
_OVER_10_MIB = json.dumps(
    {"model": "echo", "messages": [{"role": "user", "content": "x" * (10 * 1024 * 1024)}]}
).encode()

# Every input member of every operation, as a botocore caller passes it.
PARAMS: dict[str, dict[str, Any]] = {
    "InvokeInferenceRouter": {
        "InferenceRouterName": "r1",
        "RoutingTargetName": "t",
        "Body": b'{"x": 1}',
        "ContentType": "application/json",
        "Accept": "application/json",
        "CustomAttributes": ATTRIBUTES,
        "InferenceId": "inf-1",
        "PrefixAwareId": "p-1",
    },
    "InvokeInferenceRouterAsync": {
        "InferenceRouterName": "r1",
        "RoutingTargetName": "t-async",
        "InputLocation": "s3://bucket/in.json",
        "ContentType": "application/json",
        "Accept": "application/json",
        "CustomAttributes": ATTRIBUTES,
        "InferenceId": "inf-2",
        "RequestTTLSeconds": 600,
        "InvocationTimeoutSeconds": 30,
        "Filename": "out.json",
        "S3OutputPathExtension": "runs/1",
    },
    "InvokeGlobalInferenceGateway": {
        "GatewayId": "gw1",
        "Body": json.dumps(CHAT).encode(),
        "ContentType": "application/json",
        "Accept": "application/json",
        "CustomerIdentityToken": TOKEN,
    },
    "InvokeGlobalInferenceGatewayWithResponseStream": {
        "GatewayId": "gw1",
        "Body": json.dumps(CHAT).encode(),
        "ContentType": "application/json",
        "Accept": "text/event-stream",
        "CustomerIdentityToken": TOKEN,
    },
}
# A header-bound output member -> the attribute of Gateway's result that answers it.
RESULT_ATTRIBUTES = {
    "ContentType": "content_type",
    "InvokedRoutedResourceArn": "routed_resource_arn",
    "RoutingReason": "routing_reason",
    "InvokedProductionVariant": "invoked_variant",
    "CustomAttributes": "custom_attributes",
    "InferenceId": "inference_id",
    "OutputLocation": "output_location",
    "FailureLocation": "failure_location",
}
# Event-stream error events: after the first PayloadPart, not an HTTP answer.
STREAM_EVENTS = ("InternalStreamFailure", "ModelStreamError")


def _operations() -> Iterator[Any]:
    for service, model in MODELS.items():
        for name in model.operation_names:
            yield pytest.param(service, name, id=name)


def _error_cases() -> Iterator[Any]:
    for service, model in MODELS.items():
        for name in model.operation_names:
            for shape in model.operation_model(name).error_shapes:
                yield pytest.param(service, name, shape.name, id=f"{name}-{shape.name}")


@pytest.fixture
async def stack() -> AsyncIterator[tuple[Emulator, Sidecar]]:
    # By default the sidecar takes each runtime's own body limit (the Global Inference
    # Gateway's 10 MiB), and answers a body past it as that runtime does.
    async with (
        Emulator(EmulatorConfig.from_dict(CONFIG)) as emulator,
        _gateway(emulator.url) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
    ):
        yield emulator, sidecar


def _gateway(url: str) -> Gateway:
    return Gateway(
        "us-east-1", endpoint_url=url, credentials=KEYS, defaults={"retry": {"max_attempts": 1}}
    )


@pytest.fixture
def boto() -> Iterator[Callable[[str, str], Any]]:
    clients: list[Any] = []

    def make(url: str, service: str) -> Any:
        client = boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=url,
            aws_access_key_id=KEYS[0],
            aws_secret_access_key=KEYS[1],
            config=Config(retries={"max_attempts": 0}, read_timeout=30),
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def _compat(url: str, service: str) -> Any:
    return compat.Session().create_client(
        service,
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id=KEYS[0],
        aws_secret_access_key=KEYS[1],
        config=Config(retries={"max_attempts": 1}),
    )


def _method(operation: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in operation).lstrip("_")


# -- answers, in one comparable form per path ------------------------------------------


def _plain_body(operation: str, body: bytes) -> Any:
    """The body without what differs per call (a completion's id and time)."""
    if operation == "InvokeGlobalInferenceGateway":
        completion = json.loads(body)
        return {k: v for k, v in completion.items() if k not in ("id", "created")}
    return body


def _plain_part(part: bytes) -> Any:
    if part.startswith(b"data: {"):
        chunk = json.loads(part[6:])
        return {k: v for k, v in chunk.items() if k not in ("id", "created")}
    return part


def _plain_member(member: str, value: Any) -> Any:
    if member == "InferenceId":
        return bool(value)  # a fresh id per call
    if member in ("OutputLocation", "FailureLocation"):
        return value.rsplit("/", 1)[0]  # the object's name is per call
    return value


def _boto_answer(client: Any, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    response = getattr(client, _method(operation))(**params)
    answer: dict[str, Any] = {"Status": response["ResponseMetadata"]["HTTPStatusCode"]}
    for member, value in response.items():
        if member == "ResponseMetadata":
            continue
        if member == "Body" and hasattr(value, "read"):
            answer[member] = _plain_body(operation, value.read())
        elif member == "Body":  # an event stream
            try:
                answer[member] = [_plain_part(event["PayloadPart"]["Bytes"]) for event in value]
            finally:
                value.close()  # the connection, mid-stream after an error event
        else:
            answer[member] = _plain_member(member, value)
    return answer


async def _compat_answer(url: str, service: str, operation: str, params: dict[str, Any]) -> Any:
    async with _compat(url, service) as client:
        response = await getattr(client, _method(operation))(**params)
        answer: dict[str, Any] = {"Status": response["ResponseMetadata"]["HTTPStatusCode"]}
        for member, value in response.items():
            if member == "ResponseMetadata":
                continue
            if member == "Body" and hasattr(value, "read"):
                answer[member] = _plain_body(operation, await value.read())
            elif member == "Body":
                answer[member] = [_plain_part(e["PayloadPart"]["Bytes"]) async for e in value]
            else:
                answer[member] = _plain_member(member, value)
    return answer


async def _direct_call(gw: Gateway, service: str, operation: str, params: dict[str, Any]) -> Any:
    op = operation_table()[(service, operation)]
    name = params[op.uri_member]
    members = op.values(params)
    # Gateway.call takes the model's member tuple, for any operation.
    answer = await gw.call(op, name, params.get("Body"), members)
    if op.response[0].kind == "structure":  # an event stream: the parts
        return [part async for part in answer]
    return answer


async def _direct_answer(url: str, service: str, operation: str, params: dict[str, Any]) -> Any:
    async with _gateway(url) as gw:
        result = await _direct_call(gw, service, operation, params)
    op = operation_table()[(service, operation)]
    if isinstance(result, list):
        return {"Status": op.success_status, "Body": [_plain_part(part) for part in result]}
    answer: dict[str, Any] = {"Status": op.success_status}
    for member in op.response:
        if member.name == "Body":
            answer["Body"] = _plain_body(operation, result.body)
            continue
        value = getattr(result, RESULT_ATTRIBUTES[member.name])
        if value is not None:
            answer[member.name] = _plain_member(member.name, value)
    return answer


def _sent_headers(emulator: Emulator, path: str) -> list[dict[str, str]]:
    return [dict(r.headers) for r in emulator.recorded if r.path == path]


@pytest.mark.parametrize(("service", "operation"), list(_operations()))
async def test_every_operation_and_member_end_to_end(
    stack: tuple[Emulator, Sidecar], boto: Callable[[str, str], Any], service: str, operation: str
) -> None:
    emulator, sidecar = stack
    params = PARAMS[operation]
    model = MODELS[service].operation_model(operation)
    assert set(params) == set(model.input_shape.members), "PARAMS must name every input member"

    reference = await asyncio.to_thread(
        _boto_answer, boto(emulator.url, service), operation, params
    )
    relayed = await asyncio.to_thread(_boto_answer, boto(sidecar.url, service), operation, params)
    via_compat = await _compat_answer(sidecar.url, service, operation, params)
    direct = await _direct_answer(emulator.url, service, operation, params)

    # Every output member the model has, answered (an event stream: its PayloadParts).
    assert set(reference) - {"Status"} == set(model.output_shape.members)
    assert relayed == reference
    assert via_compat == reference
    assert direct == reference
    # Every header member reached the emulator, the same on every path.
    op = operation_table()[(service, operation)]
    sent = _sent_headers(emulator, op.path(params[op.uri_member]))
    assert len(sent) == 4
    for member in op.headers:
        values = {headers.get(member.header) for headers in sent}
        assert values == {str(params[member.name])}, member.name


# -- errors ------------------------------------------------------------------------


def _arrange(emulator: Emulator, service: str, code: str) -> dict[str, Any]:
    """Make the emulator answer ``code``; the parameters that draw it out."""
    if service == INFERENCE_ROUTER_RUNTIME and code == "ModelError":
        # From the destination's model, with OriginalStatusCode and its friends.
        emulator.set_faults("local-a", error_rates={"ModelError": 1.0})
    elif service == INFERENCE_ROUTER_RUNTIME:
        assert code in ROUTER_ERROR_CODES, f"teach the emulator's routers to raise {code}"
        emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    elif code in STREAM_EVENTS:
        faults = {"stream_failure_rate": 1.0, "stream_failure_event": code}
        emulator.runtimes.gateways.set_faults("gw1", faults)
    elif code == "ResourceNotFoundException":
        return {"Body": b'{"model": "nope", "messages": []}'}
    elif code == "PayloadTooLargeException":
        return {"Body": _OVER_10_MIB}
    else:
        assert code in GATEWAY_OWN_ERROR_CODES, f"teach the emulator's gateways to raise {code}"
        emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}})
    return {}


def _boto_error(client: Any, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        _boto_answer(client, operation, params)
    except EventStreamError as error:
        return {"Error": error.response["Error"], "Event": True}
    except ClientError as error:
        response = error.response
        return {
            "Error": response["Error"],
            "Status": response["ResponseMetadata"]["HTTPStatusCode"],
            "RetryAfter": response["ResponseMetadata"]["HTTPHeaders"].get("retry-after"),
            **{k: v for k, v in response.items() if k not in ("Error", "ResponseMetadata")},
        }
    raise AssertionError(f"{operation} answered without an error")


async def _compat_error(url: str, service: str, operation: str, params: dict[str, Any]) -> Any:
    try:
        await _compat_answer(url, service, operation, params)
    except EventStreamError as error:
        return {"Error": error.response["Error"], "Event": True}
    except ClientError as error:
        # botocore's own class for a code of the model, ClientError for any other.
        code = error.response["Error"]["Code"]
        modeled = code in {shape.name for shape in MODELS[service].error_shapes}
        assert type(error).__name__ == (code if modeled else "ClientError")
        response = error.response
        metadata = response["ResponseMetadata"]
        return {
            "Error": response["Error"],
            "Status": metadata["HTTPStatusCode"],
            "RetryAfter": metadata["HTTPHeaders"].get("retry-after"),
            **{k: v for k, v in response.items() if k not in ("Error", "ResponseMetadata")},
        }
    raise AssertionError(f"{operation} answered without an error")


async def _direct_error(
    url: str, service: str, operation: str, params: dict[str, Any]
) -> errors.GatewayError:
    try:
        await _direct_answer(url, service, operation, params)
    except errors.GatewayError as error:
        return error
    raise AssertionError(f"{operation} answered without an error")


def _snake(member: str) -> str:
    return _method(member)


async def test_identity_token_and_attributes_never_leave_the_sidecar_in_text(
    boto: Callable[[str, str], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A far side that quotes every request header back: boto3 through the sidecar
    (access log on) reads the secrets redacted, and no log line holds them."""
    caplog.set_level(logging.DEBUG)
    access_log = SidecarConfig.from_mapping({"access_log": True})
    async with (
        _EchoingServer() as server,
        _gateway(f"http://127.0.0.1:{server.port}") as gateway,
        Sidecar(gateway, "127.0.0.1", 0, config=access_log) as sidecar,
    ):
        for operation in PARAMS:
            service = GATEWAY_RUNTIME if "Global" in operation else INFERENCE_ROUTER_RUNTIME
            client = boto(sidecar.url, service)
            refused = await asyncio.to_thread(_boto_error, client, operation, PARAMS[operation])
            text = json.dumps(refused)
            assert "<redacted>" in text, operation  # the far side did quote them
            assert TOKEN not in text and ATTRIBUTES not in text, operation
    # The sidecar's and gateway's own loggers (botocore's DEBUG lines are the client's).
    ours = [r for r in caplog.records if r.name.split(".")[0] == "gateway"]
    assert "gateway.access" in {record.name for record in ours}
    text = "\n".join(f"{record.getMessage()} {vars(record)}" for record in ours)
    assert TOKEN not in text and ATTRIBUTES not in text


@pytest.mark.parametrize(("service", "operation", "code"), list(_error_cases()))
async def test_every_error_shape_end_to_end(
    stack: tuple[Emulator, Sidecar],
    boto: Callable[[str, str], Any],
    service: str,
    operation: str,
    code: str,
) -> None:
    emulator, sidecar = stack
    params = {**PARAMS[operation], **_arrange(emulator, service, code)}
    reference = await asyncio.to_thread(_boto_error, boto(emulator.url, service), operation, params)
    relayed = await asyncio.to_thread(_boto_error, boto(sidecar.url, service), operation, params)
    via_compat = await _compat_error(sidecar.url, service, operation, params)
    direct = await _direct_error(emulator.url, service, operation, params)

    assert reference["Error"]["Code"] == code
    shape = MODELS[service].shape_for(code)
    modeled = {name: reference.get(name) for name in shape.members if name != "Message"}
    if code == "PayloadTooLargeException":
        # Refused before sending, by Gateway as by the sidecar (its listener), in the
        # model's terms.
        assert isinstance(direct, errors.InvalidRequest)
        for answer in (relayed, via_compat):
            assert (answer["Error"]["Code"], answer["Status"]) == (code, reference["Status"])
        return
    assert relayed == reference
    assert via_compat == reference
    assert isinstance(direct, errors.ServiceError)
    assert (direct.code, direct.message) == (code, reference["Error"]["Message"])
    if code in STREAM_EVENTS:
        assert reference["Event"]
        assert not direct.retryable  # parts were delivered: not replayable
    else:
        assert direct.status == reference["Status"]
        assert direct.retryable is RETRYABLE_BY_CODE[code][1]
        retry_after = reference["RetryAfter"]
        assert direct.retry_after == (float(retry_after) if retry_after else None)
    origin = error_origin(direct.message) if service == GATEWAY_RUNTIME else None
    assert direct.origin == origin
    for member, value in modeled.items():
        if member == "ErrorCode":  # ModelStreamError's: botocore does not surface it
            assert getattr(direct, "error_code", None)
            continue
        assert getattr(direct, _snake(member)) == value, member
