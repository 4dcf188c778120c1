"""Redaction at decode: a secret an upstream echoes (``CustomAttributes``,
``CustomerIdentityToken``) into any field of its answer reaches none of the library's
sinks: the error's text and attributes, the events, the Prometheus exposition, log
lines, spans. A code or request id that is not well-formed (or holds a secret) reads
``other``. Every operation of the three runtimes, against a real HTTP upstream."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway import Gateway, errors
from gateway._invoke.api import OTHER, decode_error, safe_code, safe_request_id
from gateway._observe.events import CallFinished, Event
from tests._echoing_upstream import (
    ERROR_FIELDS,
    OK_FIELDS,
    REQUEST_ID,
    RUNTIME_FIELDS,
    SECRETS,
    STREAM_FIELDS,
    EchoingUpstream,
    echoing_upstream,
    holds,
)
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

Call = Callable[[Gateway, str], Awaitable[Any]]
CHAT = b'{"model": "m", "messages": []}'


async def _drain(stream: Any) -> str | None:
    async for _ in stream:
        pass
    return stream.request_id  # type: ignore[no-any-return]


# Each operation, called with the secret in its sensitive member(s); its answer's request id.
OPERATIONS: dict[str, Call] = {
    "InvokeEndpoint": lambda gw, s: gw.invoke("ep", b"x", custom_attributes=s),
    "InvokeEndpointWithResponseStream": lambda gw, s: _drain(
        gw.invoke_stream("ep", b"x", custom_attributes=s)
    ),
    "InvokeEndpointAsync": lambda gw, s: gw.invoke_async(
        "ep", input_location="s3://b/k", custom_attributes=s
    ),
    "InvokeInferenceRouter": lambda gw, s: gw.invoke_router(
        "r1", b"{}", routing_target="t", custom_attributes=s
    ),
    "InvokeInferenceRouterAsync": lambda gw, s: gw.invoke_router_async(
        "r1", routing_target="t", input_location="s3://b/k", custom_attributes=s
    ),
    "InvokeGlobalInferenceGateway": lambda gw, s: gw.invoke_global_gateway(
        "gw1", CHAT, customer_identity_token=s
    ),
    "InvokeGlobalInferenceGatewayWithResponseStream": lambda gw, s: _drain(
        gw.invoke_global_gateway_stream("gw1", CHAT, customer_identity_token=s)
    ),
}
STREAMS = ("InvokeEndpointWithResponseStream", "InvokeGlobalInferenceGatewayWithResponseStream")
RUNTIME = (
    "InvokeInferenceRouter",
    "InvokeInferenceRouterAsync",
    "InvokeGlobalInferenceGateway",
    "InvokeGlobalInferenceGatewayWithResponseStream",
)


def _fields(operation: str) -> tuple[str, ...]:
    fields = (*ERROR_FIELDS, *OK_FIELDS)
    if operation in RUNTIME:
        fields += RUNTIME_FIELDS
    if operation in STREAMS:
        fields += STREAM_FIELDS
    return fields


@pytest.fixture
def spans() -> Iterator[Any]:
    """A global SDK tracer provider with an in-memory exporter, removed afterwards."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None


def _span_text(exporter: Any) -> str:
    parts = []
    for span in exporter.get_finished_spans():
        parts.append(f"{span.name} {dict(span.attributes or {})} {span.status.description}")
        parts += [f"{event.name} {dict(event.attributes or {})}" for event in span.events]
    return "\n".join(parts)


def _error_text(error: BaseException) -> str:
    chain = []
    current: BaseException | None = error
    while current is not None:
        chain.append(f"{current} {current!r} {current.args} {vars(current)}")
        current = current.__cause__ or current.__context__
    return "\n".join(chain)


@pytest.mark.parametrize(
    "operation",
    [
        # The router and Global Inference Gateway operations need their runtimes' models.
        op
        if op.startswith("InvokeEndpoint")
        else pytest.param(op, marks=pytest.mark.newer_runtimes)
        for op in sorted(OPERATIONS)
    ],
)
async def test_an_echoed_secret_reaches_no_sink(
    operation: str, spans: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    call = OPERATIONS[operation]
    events: list[Event] = []
    async with echoing_upstream() as upstream:
        gateway = Gateway(
            "us-east-1",
            endpoint_url=upstream.url,
            credentials=(ACCESS_KEY, SECRET_KEY),
            hooks=[events.append],
            defaults={"retry": {"max_attempts": 1}},
        )
        async with gateway as gw:
            gw.enable_metrics()
            for field in _fields(operation):
                for kind, secret in SECRETS.items():
                    where = f"{operation} {field} {kind}"
                    events.clear()
                    spans.clear()
                    caplog.clear()
                    await _one(upstream, gw, call, field, secret, where, events)
                    registry = CollectorRegistry()
                    registry.register(gw.prometheus_collector())
                    sinks = {
                        "events": "\n".join(repr(event) for event in events),
                        "metrics": generate_latest(registry).decode(),
                        "spans": _span_text(spans),
                        "logs": caplog.text
                        + "\n".join(str(vars(record)) for record in caplog.records),
                    }
                    assert upstream.seen[-1] == secret, where  # the upstream had it to echo
                    for sink, text in sinks.items():
                        assert not holds(text, secret), f"{where}: {sink}"


async def _one(
    upstream: EchoingUpstream,
    gw: Gateway,
    call: Call,
    field: str,
    secret: str,
    where: str,
    events: list[Event],
) -> None:
    upstream.into = field
    try:
        answer = await call(gw, secret)
    except errors.GatewayError as error:
        assert field not in OK_FIELDS, f"{where}: {error!r}"
        assert not holds(_error_text(error), secret), f"{where}: the error"
        if isinstance(error, errors.ServiceError):
            if field in ("error_type", "type_body"):
                assert error.code == OTHER, where
            if field == "request_id":
                assert error.request_id == OTHER, where
            elif field not in STREAM_FIELDS:  # (an event mid-stream carries no request id)
                assert error.request_id == REQUEST_ID, where
        if field in ("model_error", "message", "stream_event"):
            assert "<redacted>" in _error_text(error), where  # the echo was there to redact
        return
    assert field in OK_FIELDS, f"{where}: no error"
    request_id = answer if isinstance(answer, str) or answer is None else answer.request_id
    if safe_request_id(secret) == OTHER:
        assert request_id == OTHER, where
    # (else the caller's own, well-formed secret comes back to the caller only: the
    # answer does not know the call's members; every sink does)
    (finished,) = [event for event in events if isinstance(event, CallFinished)]
    assert finished.request_id == OTHER, where


# -- the checks themselves ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ValidationError", "ValidationError"),
        ("ModelInvocationTimeExceeded", "ModelInvocationTimeExceeded"),
        ("SomethingNewException", "SomethingNewException"),  # unknown, well-formed: kept
        ("TenantSecret7f3a9c", OTHER),  # well-formed, but the call's secret
        ("Tenant", OTHER),  # a piece of it
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIi", OTHER),
        ("a b", OTHER),
        ("x" * 65, OTHER),
        ("Validation\u00e9rror", OTHER),
        (None, None),
    ],
)
def test_codes_that_are_not_well_formed_or_hold_a_secret_read_other(
    code: str | None, expected: str | None
) -> None:
    assert safe_code(code, ("TenantSecret7f3a9c",)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (REQUEST_ID, REQUEST_ID),
        ("ABCDEF01-2345", "ABCDEF01-2345"),
        ("", ""),
        (None, None),
        ("r-1", OTHER),
        ("0" * 65, OTHER),
        ("tok 1", OTHER),
        ("5ec12e7a-0b5e-4d11-9a7c-c0ffee000001", OTHER),  # well-formed, but the secret
    ],
)
def test_request_ids_that_are_not_well_formed_or_hold_a_secret_read_other(
    value: str | None, expected: str | None
) -> None:
    assert safe_request_id(value, ("5ec12e7a-0b5e-4d11-9a7c-c0ffee000001",)) == expected


def test_invoke_endpoints_custom_attributes_are_redacted_in_every_text_field() -> None:
    """Before: InvokeEndpoint's decoder took no secrets at all."""
    from gateway._http.message import RawResponse

    secret = "k=v; tenant=acme"
    body = (
        b'{"message": "echo k=v; tenant=acme", "OriginalMessage": "k=v; tenant=acme",'
        b' "LogStreamArn": "arn:x:k=v; tenant=acme", "OriginalStatusCode": 500}'
    )
    headers = {"x-amzn-errortype": "ModelError", "x-amzn-requestid": REQUEST_ID}
    error = decode_error(RawResponse(424, headers, body), (secret,))
    assert isinstance(error, errors.ModelError)
    assert secret not in _error_text(error)
    assert error.original_message == "<redacted>"
    assert error.log_stream_arn == "arn:x:<redacted>"
