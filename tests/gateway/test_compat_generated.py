"""``gateway.compat``'s clients are generated from the operation table, and every runtime's
errors go through one translation: checked without a network, the Gateway call replaced."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import Any

import botocore.exceptions
import pytest
from botocore import xform_name

from gateway import Gateway, compat, errors
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, SAGEMAKER_RUNTIME
from gateway._compat import client as compat_client
from gateway._invoke import api
from gateway._invoke.api import InvokeResult
from gateway._invoke.streaming import InvokeStream

# A call of each operation with its required members.
REQUIRED: dict[str, dict[str, Any]] = {
    "InvokeEndpoint": {"EndpointName": "ep", "Body": b"x"},
    "InvokeEndpointWithResponseStream": {"EndpointName": "ep", "Body": b"x"},
    "InvokeEndpointAsync": {"EndpointName": "ep", "InputLocation": "s3://b/k"},
    "InvokeInferenceRouter": {"InferenceRouterName": "r1", "RoutingTargetName": "t", "Body": b"x"},
    "InvokeInferenceRouterAsync": {
        "InferenceRouterName": "r1",
        "RoutingTargetName": "t",
        "InputLocation": "s3://b/k",
    },
    "InvokeGlobalInferenceGateway": {"GatewayId": "gw1", "Body": b"{}", "ContentType": "a/b"},
    "InvokeGlobalInferenceGatewayWithResponseStream": {
        "GatewayId": "gw1",
        "Body": b"{}",
        "ContentType": "a/b",
    },
}
# The runtimes the installed botocore models.
SERVICES = list(dict.fromkeys(service for service, _ in api.operation_table()))


class Sent:
    """Stands in for compat's one Gateway call: records it, answers ``outcome``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.outcome: Any = InvokeResult(b"answer", request_id="ab-12")

    def __call__(
        self, gateway: Gateway, operation: api.Operation, *args: Any, **kwargs: Any
    ) -> Any:
        self.calls.append((operation.name, *args, kwargs))
        return self._answer()  # awaited, as Gateway.call answers (a stream: unopened)

    async def _answer(self) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def _stream(error: errors.GatewayError) -> InvokeStream:
    """A stream whose first step fails with ``error``."""
    stream = InvokeStream()

    async def parts() -> AsyncGenerator[bytes, None]:
        raise error
        yield b""  # an async generator that never yields

    stream._parts = parts()
    return stream


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sent]:
    recorder = Sent()
    monkeypatch.setattr(compat_client, "call_gateway", recorder)
    yield recorder


def _client(service: str) -> compat.RuntimeClient:
    gateway = Gateway("us-east-1", endpoint_url="http://127.0.0.1:9", credentials=("AK", "SK"))
    return compat.Session().create_client(service, gateway=gateway)


@pytest.mark.parametrize("service", SERVICES)
def test_a_client_has_a_method_per_operation_of_its_service(service: str) -> None:
    client = _client(service)
    expected = {xform_name(name) for s, name in api.operation_table() if s == service}
    every = {xform_name(name) for _, name in api.operation_table()}
    assert {name for name in every if hasattr(client, name)} == expected
    assert isinstance(client, compat.RuntimeClient)


async def test_a_call_reaches_the_gateway_once_with_its_members_in_place(sent: Sent) -> None:
    client = _client(SAGEMAKER_RUNTIME)
    await client.invoke_endpoint(EndpointName="ep", Body=b"x", TargetModel="m", Timeout=2)
    members = api.INVOKE.values({"TargetModel": "m"})
    assert sent.calls == [("InvokeEndpoint", "ep", b"x", members, {"timeout": 2})]


@pytest.mark.parametrize(
    "operation", [(s, name) for s, name in api.operation_table() if name.endswith("Stream")]
)
@pytest.mark.parametrize(("status", "event"), [(200, True), (400, False)])
async def test_a_stream_event_code_with_an_error_status_is_an_http_error(
    sent: Sent, operation: tuple[str, str], status: int, event: bool
) -> None:
    service, name = operation
    sent.outcome = _stream(errors.ServiceError("m", code="ModelStreamError", status=status))
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        response = await getattr(_client(service), xform_name(name))(**REQUIRED[name])
        [part async for part in response["Body"]]
    assert isinstance(raised.value, botocore.exceptions.EventStreamError) is event
    assert raised.value.response["Error"]["Code"] == "ModelStreamError"


@pytest.mark.parametrize("service", SERVICES)
async def test_a_wait_the_answer_asked_for_is_in_the_error_headers(
    sent: Sent, service: str
) -> None:
    operation = next(name for s, name in api.operation_table() if s == service)
    sent.outcome = errors.Throttling("slow", code="ThrottlingException", status=429, retry_after=2)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        await getattr(_client(service), xform_name(operation))(**REQUIRED[operation])
    assert raised.value.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "2"


@pytest.mark.parametrize(
    ("service", "refused", "oversized"),
    [
        (SAGEMAKER_RUNTIME, ("ValidationError", 400), ("ValidationError", 400)),
        (INFERENCE_ROUTER_RUNTIME, ("ValidationException", 400), ("PayloadTooLargeException", 413)),
        (GATEWAY_RUNTIME, ("ValidationException", 400), ("PayloadTooLargeException", 413)),
    ],
)
async def test_a_request_refused_before_sending_reads_as_the_services_answer(
    sent: Sent, service: str, refused: tuple[str, int], oversized: tuple[str, int]
) -> None:
    if service not in SERVICES:
        pytest.skip(f"the installed botocore has no {service} model")
    operation = next(name for s, name in api.operation_table() if s == service)
    client = _client(service)
    for error, (code, status) in (
        (errors.InvalidRequest("bad name"), refused),
        (errors.BodyTooLarge("too large"), oversized),
    ):
        sent.outcome = error
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            await getattr(client, xform_name(operation))(**REQUIRED[operation])
        response = raised.value.response
        assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == (
            code,
            status,
        )
        assert raised.value.__cause__ is error
