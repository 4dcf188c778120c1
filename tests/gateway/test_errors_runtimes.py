"""The inference router and Global Inference Gateway errors: the tree, and decoding them
from the emulator's wire answers (every error shape of both models)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from gateway import errors
from gateway._aws.eventstream import (
    EventStreamDecoder,
    internal_stream_failure,
    model_stream_error,
)
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, service_model
from gateway._http.message import RawResponse
from gateway._invoke.api import MAX_RETRY_AFTER_S, decode_runtime_error, error_origin, retry_after
from gateway._invoke.streaming import payload_or_raise
from gateway.emulator import Emulator, EmulatorConfig

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzM2NyZXQifQ.c2lnbmF0dXJl"
CONFIG: dict[str, Any] = {
    "auth": {"required": False},
    "endpoints": {"local": {}, "remote": {}},
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {
                    "destinations": [
                        {"endpoint": "local"},
                        {"endpoint": "remote", "region": "eu-west-1"},
                    ]
                }
            }
        }
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}

# Every error shape of the two models: (class, retryable, status).
EXPECTED: dict[str, tuple[type[errors.ServiceError], bool]] = {
    "ValidationException": (errors.ValidationError, False),
    "AccessDeniedException": (errors.AccessDenied, False),
    "RequestTimeoutException": (errors.RequestTimeout, True),
    "ModelError": (errors.ModelError, False),
    "ThrottlingException": (errors.Throttling, True),
    "ModelNotReadyException": (errors.ModelNotReady, True),
    "InternalFailure": (errors.InternalFailure, True),
    "ServiceUnavailableException": (errors.ServiceUnavailable, True),
    "InternalDependencyException": (errors.InternalDependency, True),
    "InternalServerException": (errors.InternalServerError, True),
    "PayloadTooLargeException": (errors.PayloadTooLarge, False),
    "ResourceNotFoundException": (errors.ResourceNotFound, False),
    "BadGatewayException": (errors.BadGateway, False),
    "GatewayTimeoutException": (errors.GatewayTimeout, False),
    "InternalStreamFailure": (errors.InternalStreamFailure, True),
    "ModelStreamError": (errors.ModelError, False),
}


@pytest.mark.newer_runtimes
def test_every_error_shape_of_both_models_has_a_class() -> None:
    shapes = {
        shape.name
        for service in (INFERENCE_ROUTER_RUNTIME, GATEWAY_RUNTIME)
        for name in service_model(service).operation_names
        for shape in service_model(service).operation_model(name).error_shapes
    }
    assert shapes == set(EXPECTED)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_class_code_and_retryable(code: str) -> None:
    cls, retryable = EXPECTED[code]
    assert issubclass(cls, errors.ServiceError)
    error = cls("m", code=code, status=1)
    assert (error.code, error.retryable) == (code, retryable)


def test_the_new_classes_sit_under_the_ones_callers_already_catch() -> None:
    assert issubclass(errors.AccessDenied, errors.SignatureError)
    assert issubclass(errors.InternalServerError, errors.InternalFailure)
    assert issubclass(errors.InternalStreamFailure, errors.InternalFailure)
    for cls in (errors.BadGateway, errors.GatewayTimeout, errors.PayloadTooLarge):
        assert not cls("x").retryable


@pytest.mark.parametrize(
    ("message", "origin"),
    [
        ("Global Inference Gateway: rate exceeded", "Global Inference Gateway"),
        ("inference gateway: 503 busy", "inference gateway"),
        ("inference gateway (model server): 502 x", "inference gateway (model server)"),
        ("inference gateway (model selector): 404 x", "inference gateway (model selector)"),
        ("Rate exceeded", None),
        ("an inference gateway: 1", None),
    ],
)
def test_origin_from_the_message_prefix(message: str, origin: str | None) -> None:
    assert error_origin(message) == origin


def test_retry_after() -> None:
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after": "0.25"}) == 0.25
    assert retry_after({"retry-after": "-3"}) is None  # delay-seconds has no sign
    assert retry_after({}) is None
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({"retry-after": "nan"}) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = retry_after({"retry-after": later})
    assert seconds is not None and 25 < seconds <= 30


@pytest.mark.parametrize("value", ["1_0", "+5", "-5", "1e3", "inf", "0x10", "\u0661", "5 s", ". 5"])
def test_retry_after_is_delay_seconds_not_pythons_float_grammar(value: str) -> None:
    assert retry_after({"retry-after": value}) is None


def test_retry_after_takes_every_http_date_form_and_clamps_what_it_relays() -> None:
    later = datetime.now(UTC) + timedelta(seconds=60)
    for form in (
        format_datetime(later, usegmt=True),  # IMF-fixdate
        later.strftime("%A, %d-%b-%y %H:%M:%S GMT"),  # RFC 850
        later.strftime("%a %b ") + f"{later.day:2d}" + later.strftime(" %H:%M:%S %Y"),  # asctime
    ):
        seconds = retry_after({"retry-after": form})
        assert seconds is not None and 55 < seconds <= 60, form
    # An upstream's 1e308 (or 400 digits, or the year 9999) is not relayed as 309 digits.
    assert retry_after({"retry-after": "1" + "0" * 400}) == MAX_RETRY_AFTER_S
    assert retry_after({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}) == MAX_RETRY_AFTER_S
    assert retry_after({"retry-after": "1e308"}) is None


# -- decoded from the emulator's answers ---------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[tuple[Emulator, httpx.AsyncClient]]:
    emulator = Emulator(EmulatorConfig.from_dict(CONFIG))
    async with emulator as emu, httpx.AsyncClient(base_url=emu.url) as client:
        yield emu, client


async def answer(client: httpx.AsyncClient, path: str, body: bytes, **headers: str) -> RawResponse:
    response = await client.post(path, content=body, headers=headers)
    return RawResponse(response.status_code, dict(response.headers), response.content)


async def router_answer(client: httpx.AsyncClient, **headers: str) -> RawResponse:
    headers.setdefault("x-amzn-sagemaker-routing-target-name", "t")
    return await answer(client, "/inference-routers/r1/invocations", b"{}", **headers)


async def gateway_answer(
    client: httpx.AsyncClient, body: object = CHAT, **headers: str
) -> RawResponse:
    headers.setdefault("content-type", "application/json")
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await answer(client, "/global-inference-gateway/gw1/invocations", raw, **headers)


@pytest.mark.parametrize(
    "code",
    [
        "ValidationException",
        "AccessDeniedException",
        "RequestTimeoutException",
        "ThrottlingException",
        "ModelNotReadyException",
        "InternalFailure",
        "ServiceUnavailableException",
        "InternalDependencyException",
    ],
)
async def test_router_errors(http: tuple[Emulator, httpx.AsyncClient], code: str) -> None:
    emulator, client = http
    emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    error = decode_runtime_error(await router_answer(client))
    cls, retryable = EXPECTED[code]
    assert type(error) is cls
    assert (error.code, error.retryable, error.origin) == (code, retryable, None)
    assert error.request_id and error.message


async def test_router_model_error(http: tuple[Emulator, httpx.AsyncClient]) -> None:
    emulator, client = http
    for endpoint in ("local", "remote"):
        emulator.set_faults(endpoint, error_rates={"ModelError": 1.0})
    error = decode_runtime_error(await router_answer(client))
    assert isinstance(error, errors.ModelError)
    assert (error.status, error.original_status_code, error.original_message) == (
        424,
        500,
        "Injected model failure",
    )
    assert error.log_stream_arn is not None and error.log_stream_arn.startswith("arn:aws:logs:")


async def test_router_payload_too_large(http: tuple[Emulator, httpx.AsyncClient]) -> None:
    _, client = http
    response = await client.post(
        "/inference-routers/r1/invocations",
        content=b"x" * (6 * 1024 * 1024 + 1),
        headers={"x-amzn-sagemaker-routing-target-name": "t"},
    )
    raw = RawResponse(response.status_code, dict(response.headers), response.content)
    error = decode_runtime_error(raw)
    assert type(error) is errors.PayloadTooLarge and error.status == 413


@pytest.mark.parametrize(
    "code",
    [
        "AccessDeniedException",
        "ThrottlingException",
        "InternalServerException",
        "BadGatewayException",
        "ServiceUnavailableException",
        "GatewayTimeoutException",
    ],
)
async def test_gateway_own_errors(http: tuple[Emulator, httpx.AsyncClient], code: str) -> None:
    emulator, client = http
    emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}, "retry_after_s": 4})
    error = decode_runtime_error(await gateway_answer(client))
    cls, retryable = EXPECTED[code]
    assert type(error) is cls
    assert (error.code, error.retryable) == (code, retryable)
    assert error.origin == "Global Inference Gateway"
    assert error.message.startswith("Global Inference Gateway: ")
    assert error.retry_after == (4.0 if code == "ThrottlingException" else None)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, errors.ValidationError),
        (401, errors.AccessDenied),
        (404, errors.ResourceNotFound),
        (408, errors.GatewayTimeout),
        (429, errors.Throttling),
        (503, errors.BadGateway),
        (504, errors.GatewayTimeout),
    ],
)
async def test_gateway_upstream_errors(
    http: tuple[Emulator, httpx.AsyncClient], status: int, cls: type[errors.ServiceError]
) -> None:
    emulator, client = http
    emulator.runtimes.gateways.set_faults(
        "gw1", {"upstream_error_rates": {str(status): 1.0}, "upstream_component": "scheduler"}
    )
    error = decode_runtime_error(await gateway_answer(client))
    assert type(error) is cls
    assert error.origin == "inference gateway (scheduler)"
    assert error.message.startswith(f"inference gateway (scheduler): {status} ")


async def test_gateway_not_found_and_too_large(http: tuple[Emulator, httpx.AsyncClient]) -> None:
    _, client = http
    missing = decode_runtime_error(await gateway_answer(client, {"model": "nope"}))
    assert isinstance(missing, errors.ResourceNotFound)
    assert (missing.resource_id, missing.resource_type, missing.status) == ("nope", "model", 404)
    large = decode_runtime_error(await gateway_answer(client, b"x" * (10 * 1024 * 1024 + 1)))
    assert type(large) is errors.PayloadTooLarge and large.origin == "Global Inference Gateway"


async def test_gateway_415_is_a_service_error_not_worth_retrying(
    http: tuple[Emulator, httpx.AsyncClient],
) -> None:
    _, client = http
    error = decode_runtime_error(await gateway_answer(client, **{"content-type": "text/plain"}))
    assert type(error) is errors.ServiceError
    assert (error.status, error.code, error.retryable) == (
        415,
        "UnsupportedMediaTypeException",
        False,
    )


def test_stream_failure_events() -> None:
    ended = internal_stream_failure("inference gateway: response ended unexpectedly")
    (failure,) = EventStreamDecoder().feed(ended)
    with pytest.raises(errors.InternalStreamFailure) as caught:
        payload_or_raise(failure)
    assert caught.value.origin == "inference gateway"
    (broken,) = EventStreamDecoder().feed(
        model_stream_error("Global Inference Gateway: x", "StreamBroken")
    )
    with pytest.raises(errors.ModelError) as model:
        payload_or_raise(broken)
    assert (model.value.code, model.value.error_code, model.value.origin) == (
        "ModelStreamError",
        "StreamBroken",
        "Global Inference Gateway",
    )


# -- redaction ------------------------------------------------------------------------


def test_the_identity_token_and_custom_attributes_never_reach_error_text() -> None:
    """Whatever a server echoes back, the call's secrets are not in the error's text."""
    body = json.dumps(
        {
            "Message": f"inference gateway: 401 bad token {TOKEN} for attrs trace=s3cret-7",
            "OriginalMessage": f"container saw {TOKEN}",
        }
    ).encode()
    for code in ("AccessDeniedException", "ModelError"):
        response = RawResponse(
            403, {"x-amzn-errortype": code, "content-type": "application/json"}, body
        )
        error = decode_runtime_error(response, (TOKEN, "trace=s3cret-7"))
        text = f"{error} {error!r} {error.message} {getattr(error, 'original_message', '')}"
        assert TOKEN not in text and "s3cret" not in text
        assert "<redacted>" in error.message
        assert error.origin == "inference gateway"
    html = RawResponse(502, {}, f"<html>{TOKEN}</html>".encode())
    assert TOKEN not in str(decode_runtime_error(html, (TOKEN,)))


async def test_the_emulator_never_quotes_the_token(
    http: tuple[Emulator, httpx.AsyncClient],
) -> None:
    _, client = http
    raw = await gateway_answer(
        client, **{"x-amzn-sagemaker-customer-identity-token": "not-a-jwt-s3cret"}
    )
    error = decode_runtime_error(raw)
    assert isinstance(error, errors.AccessDenied)
    assert "s3cret" not in str(error)
