"""One contract with AWS: boto3 (straight to the emulator, and through the sidecar) and
the gateway send the same request for every member of every operation of botocore's
``sagemaker-runtime`` model, and fail with the same error class for each error shape.

The emulator records each request as it arrived; the comparison covers the path, the
body, ``host`` and every header the model defines (any ``x-amzn-*`` header too).
"""

from __future__ import annotations

import asyncio
from typing import Any

import botocore.exceptions
import botocore.session
import pytest

from gateway import Gateway, errors
from gateway._invoke.api import operations
from gateway.emulator import Emulator
from gateway.sidecar import Sidecar
from tests._boto import ClientFactory
from tests._sagemaker_members import (
    BOTO_METHODS,
    CALL_MEMBERS,
    ENDPOINTS,
    MEMBER_VALUES,
    SESSIONS,
    call_members,
    model_has,
    wire_view,
)

ASYNC = "InvokeEndpointAsync"


def test_every_member_of_the_model_has_a_value_here() -> None:
    """A botocore upgrade that adds a member fails here until it is sent end to end."""
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    assert set(model.operation_names) == set(ENDPOINTS)
    for name in model.operation_names:
        members = set(model.operation_model(name).input_shape.members)
        assert members - CALL_MEMBERS <= set(MEMBER_VALUES), name


async def boto_call(client: Any, operation: str, params: dict[str, object]) -> Any:
    def call() -> Any:
        response = getattr(client, BOTO_METHODS[operation])(**params)
        body = response.get("Body")
        if operation == "InvokeEndpointWithResponseStream":
            return [event["PayloadPart"]["Bytes"] for event in body]
        return body.read() if body is not None else response

    return await asyncio.to_thread(call)


async def gateway_call(gateway: Gateway, operation: str, params: dict[str, object]) -> Any:
    members = {m.name: m.keyword for m in operations()[operation].request}
    keywords = {members[name]: value for name, value in params.items() if name != "EndpointName"}
    endpoint = str(params["EndpointName"])
    if operation == "InvokeEndpoint":
        return await gateway.invoke(endpoint, cache=False, **keywords)
    if operation == "InvokeEndpointWithResponseStream":
        return [part async for part in gateway.invoke_stream(endpoint, **keywords)]
    return await gateway.invoke_async(endpoint, **keywords)


async def new_session(gateway: Gateway) -> str:
    result = await gateway.invoke("echo", b"{}", session_id="NEW_SESSION")
    assert result.new_session_id is not None
    return result.new_session_id.split(";")[0]


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        ("InvokeEndpoint", b'{"features": [1, 2, 3]}'),
        ("InvokeEndpointWithResponseStream", b'{"prompt": "hello"}'),
        ("InvokeEndpointAsync", b'{"inline": true}'),
    ],
)
async def test_the_same_request_on_the_wire(
    emulator: Emulator,
    gateway: Gateway,
    sidecar: Sidecar,
    boto_client: ClientFactory,
    operation: str,
    body: bytes,
) -> None:
    session = await new_session(gateway) if SESSIONS else ""  # SessionId: botocore >= 1.35.15
    params = call_members(operation, session, body)
    direct = boto_client(emulator.url, access_key="AK", secret="SK")
    through_sidecar = boto_client(sidecar.url)
    seen: list[dict[str, Any]] = []
    answers = []
    for call in (
        boto_call(direct, operation, params),
        boto_call(through_sidecar, operation, params),
        gateway_call(gateway, operation, params),
    ):
        before = len(emulator.recorded)
        answers.append(await call)
        assert len(emulator.recorded) == before + 1  # one request each, no retry
        seen.append(wire_view(emulator.recorded[-1]))
    boto3_direct, boto3_sidecar, ours = seen
    # Every member the model has reached the emulator...
    names = {name for name, _ in boto3_direct["headers"]}
    assert {m.header for m in operations()[operation].headers} <= names
    # ...and each client sent exactly what boto3 sends.
    assert boto3_sidecar == boto3_direct
    assert ours == boto3_direct


async def test_async_with_an_input_location_only(
    emulator: Emulator, gateway: Gateway, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    # Where the output goes: members of the model from botocore 1.42.54.
    placed = {"S3OutputPathExtension": "daily", "Filename": "scores.csv"}
    placed = {name: value for name, value in placed.items() if model_has(ASYNC, name)}
    params = {"EndpointName": "echo", "InputLocation": "s3://bucket/in.csv", **placed}
    keywords = {operations()[ASYNC].by_name[name].keyword: value for name, value in placed.items()}
    direct = boto_client(emulator.url, access_key="AK", secret="SK")
    responses = [
        await asyncio.to_thread(direct.invoke_endpoint_async, **params),
        await asyncio.to_thread(boto_client(sidecar.url).invoke_endpoint_async, **params),
    ]
    views = [wire_view(request) for request in emulator.recorded]
    ours = await gateway.invoke_async("echo", input_location="s3://bucket/in.csv", **keywords)
    views.append(wire_view(emulator.recorded[-1]))
    assert views[0] == views[1] == views[2]
    # The emulator honours both: the output's key carries the extension and the file name.
    locations = [r["OutputLocation"] for r in responses] + [ours.output_location or ""]
    where = "/async-endpoint-outputs/echo/"
    if placed:
        assert all(loc.endswith(where + "daily/scores.csv") for loc in locations)
    else:
        assert all(where in loc for loc in locations)


# -- errors ----------------------------------------------------------------------------

SERVICE_ERRORS = {
    "ValidationError": errors.ValidationError,
    "ModelError": errors.ModelError,
    "ModelNotReadyException": errors.ModelNotReady,
    "InternalFailure": errors.InternalFailure,
    "ServiceUnavailable": errors.ServiceUnavailable,
    "InternalDependencyException": errors.InternalDependency,
}


def test_every_error_shape_is_covered() -> None:
    shapes = {shape for op in operations().values() for shape in op.errors}
    assert shapes == set(SERVICE_ERRORS) | {"ModelStreamError", "InternalStreamFailure"}


def boto_error(client: Any, **params: Any) -> Exception:
    try:
        client.invoke_endpoint(**params)
    except Exception as exc:  # the point: whatever boto3 raises
        return exc
    raise AssertionError("no error")


@pytest.mark.parametrize("code", sorted(SERVICE_ERRORS))
async def test_the_same_error_class_for_each_error_shape(
    emulator: Emulator,
    gateway: Gateway,
    sidecar: Sidecar,
    boto_client: ClientFactory,
    code: str,
) -> None:
    emulator.set_faults("echo", error_rates={code: 1.0})
    params = {"EndpointName": "echo", "Body": b"{}"}
    direct = boto_client(emulator.url, access_key="AK", secret="SK")
    expected = await asyncio.to_thread(boto_error, direct, **params)
    via_sidecar = await asyncio.to_thread(boto_error, boto_client(sidecar.url), **params)
    assert isinstance(expected, botocore.exceptions.ClientError)
    assert isinstance(via_sidecar, botocore.exceptions.ClientError)
    assert type(via_sidecar).__name__ == type(expected).__name__ == code
    assert via_sidecar.response["Error"]["Code"] == code
    with pytest.raises(errors.ServiceError) as ours:
        await gateway.invoke("echo", b"{}", cache=False)
    assert type(ours.value) is SERVICE_ERRORS[code]
    assert ours.value.code == code


@pytest.mark.parametrize("error_code", ["StreamBroken", "ModelInvocationTimeExceeded"])
async def test_a_stream_error_keeps_its_error_code(
    emulator: Emulator,
    gateway: Gateway,
    sidecar: Sidecar,
    boto_client: ClientFactory,
    error_code: str,
) -> None:
    """ModelStreamError: the same class everywhere, its ErrorCode passed on unchanged."""
    emulator.set_faults("echo", stream_error_rate=1.0, stream_error_code=error_code)

    def boto_stream(client: Any) -> Exception:
        response = client.invoke_endpoint_with_response_stream(EndpointName="echo", Body=b"abc")
        try:
            for _ in response["Body"]:
                pass
        except botocore.exceptions.EventStreamError as exc:
            return exc
        finally:
            response["Body"].close()
        raise AssertionError("no stream error")

    direct = boto_client(emulator.url, access_key="AK", secret="SK")
    for client in (direct, boto_client(sidecar.url)):
        exc = await asyncio.to_thread(boto_stream, client)
        assert exc.response["Error"]["Code"] == "ModelStreamError"
    with pytest.raises(errors.ModelError) as ours:
        async for _ in gateway.invoke_stream("echo", b"abc"):
            pass
    assert (ours.value.code, ours.value.error_code) == ("ModelStreamError", error_code)
    # What the sidecar puts on the wire: the upstream's ErrorCode, not a rewrite.
    raw = await asyncio.to_thread(_sidecar_stream_bytes, sidecar.url)
    assert f'"ErrorCode":"{error_code}"'.encode() in raw


def _sidecar_stream_bytes(url: str) -> bytes:
    import httpx

    with httpx.Client() as client:
        response = client.post(f"{url}/endpoints/echo/invocations-response-stream", content=b"abc")
        return response.content
