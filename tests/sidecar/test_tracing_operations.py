"""Every operation through the sidecar is one trace: the server span, a client span
named and attributed per the OpenTelemetry AWS SDK conventions, its attempts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.emulator import Emulator
from gateway.sidecar import Sidecar
from tests.sidecar.conftest import make_gateway

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}


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


@pytest.fixture
async def traced(emulator: Emulator, spans: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        make_gateway(emulator) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        assert sidecar.app.tracing is not None
        yield http


def _one_trace(spans: Any, operation: str, request_id: str) -> None:
    finished = list(spans.get_finished_spans())
    assert {f"{s.context.trace_id:032x}" for s in finished} == {TRACE_ID}  # one trace
    by_name: dict[str, list[Any]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (server,) = [s for s in finished if s.kind.name == "SERVER"]
    assert f"{server.parent.span_id:016x}" == PARENT_ID
    (call,) = by_name[f"SageMaker Runtime.{operation}"]
    assert call.kind.name == "CLIENT"
    assert call.parent.span_id == server.context.span_id
    expected = {
        "rpc.system": "aws-api",
        "rpc.service": "SageMaker Runtime",
        "rpc.method": operation,
        "aws.request_id": request_id,
        "cloud.region": "us-east-1",
    }
    assert {key: call.attributes.get(key) for key in expected} == expected
    (attempt,) = by_name["sagemaker_gateway.attempt"]
    assert attempt.parent.span_id == call.context.span_id
    assert attempt.attributes["gateway.attempt.outcome"] == "won"


async def test_invoke_is_one_client_span_under_the_server_span(
    traced: httpx.AsyncClient, spans: Any
) -> None:
    answer = await traced.post("/endpoints/echo/invocations", content=b"x", headers=TRACEPARENT)
    assert answer.status_code == 200
    _one_trace(spans, "InvokeEndpoint", answer.headers["x-amzn-requestid"])


async def test_a_stream_and_its_attempt_stay_in_the_callers_trace(
    traced: httpx.AsyncClient, spans: Any
) -> None:
    answer = await traced.post(
        "/endpoints/echo/invocations-response-stream", content=b"abc", headers=TRACEPARENT
    )
    assert answer.status_code == 200 and answer.content  # read to its end
    _one_trace(spans, "InvokeEndpointWithResponseStream", answer.headers["x-amzn-requestid"])


async def test_async_invocation_gets_its_client_span(traced: httpx.AsyncClient, spans: Any) -> None:
    headers = {**TRACEPARENT, "X-Amzn-SageMaker-InputLocation": "s3://bucket/input.json"}
    answer = await traced.post("/endpoints/echo/async-invocations", headers=headers)
    assert answer.status_code == 202, answer.text
    _one_trace(spans, "InvokeEndpointAsync", answer.headers["x-amzn-requestid"])


async def test_a_failed_call_span_has_an_error_status_and_the_request_id(
    emulator: Emulator, traced: httpx.AsyncClient, spans: Any
) -> None:
    emulator.set_faults("echo", error_rates={"ValidationError": 1.0})
    answer = await traced.post("/endpoints/echo/invocations", content=b"x", headers=TRACEPARENT)
    assert answer.status_code == 400
    (call,) = [s for s in spans.get_finished_spans() if s.name.startswith("SageMaker Runtime.")]
    assert call.status.status_code.name == "ERROR"
    assert call.attributes["aws.request_id"] == answer.headers["x-amzn-requestid"]
