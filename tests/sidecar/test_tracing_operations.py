"""Every operation through the sidecar is one trace: the server span, a client span
named and attributed per the OpenTelemetry AWS SDK conventions, its attempts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway._aws.models import SAGEMAKER_RUNTIME, service_model
from gateway._observe.tracing import SERVICE_IDS
from gateway.emulator import Emulator, EmulatorConfig
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


def _one_trace(
    spans: Any,
    operation: str,
    request_id: str,
    service: str = "SageMaker Runtime",
    server: str | None = None,
) -> None:
    finished = list(spans.get_finished_spans())
    assert {f"{s.context.trace_id:032x}" for s in finished} == {TRACE_ID}  # one trace
    by_name: dict[str, list[Any]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (server_span,) = [s for s in finished if s.kind.name == "SERVER"]
    assert f"{server_span.parent.span_id:016x}" == PARENT_ID
    if server is not None:
        assert server_span.name == server
    (call,) = by_name[f"{service}.{operation}"]
    assert call.kind.name == "CLIENT"
    assert call.parent.span_id == server_span.context.span_id
    expected = {
        "rpc.system": "aws-api",
        "rpc.service": service,
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


# -- the inference router and Global Inference Gateway runtimes ---------------------------

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0cmFjZWQifQ.c2VjcmV0LXNpZ25hdHVyZQ"
ATTRIBUTES = "tenant=secret-tenant-7"
RUNTIMES_EMULATOR: dict[str, Any] = {
    "seed": 5,
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
CHAT = b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}'
ROUTER_ID = "SageMaker Inference Router Runtime"
GATEWAY_ID = "SageMaker Gateway Runtime"
# (service id, operation, sidecar path, headers, body, status, server span name)
RUNTIME_CALLS = [
    (
        ROUTER_ID,
        "InvokeInferenceRouter",
        "/inference-routers/r1/invocations",
        {
            "X-Amzn-SageMaker-Routing-Target-Name": "t",
            "Content-Type": "application/json",
            "X-Amzn-SageMaker-Custom-Attributes": ATTRIBUTES,
        },
        b'{"x": 1}',
        200,
        "POST /inference-routers/{name}/invocations",
    ),
    (
        ROUTER_ID,
        "InvokeInferenceRouterAsync",
        "/inference-routers/r1/async-invocations",
        {
            "X-Amzn-SageMaker-Routing-Target-Name": "t-async",
            "X-Amzn-SageMaker-InputLocation": "s3://bucket/in.json",
            "X-Amzn-SageMaker-Custom-Attributes": ATTRIBUTES,
        },
        b"",
        202,
        "POST /inference-routers/{name}/async-invocations",
    ),
    (
        GATEWAY_ID,
        "InvokeGlobalInferenceGateway",
        "/global-inference-gateway/gw1/invocations",
        {"Content-Type": "application/json", "X-Amzn-SageMaker-Customer-Identity-Token": TOKEN},
        CHAT,
        200,
        "POST /global-inference-gateway/{id}/invocations",
    ),
    (
        GATEWAY_ID,
        "InvokeGlobalInferenceGatewayWithResponseStream",
        "/global-inference-gateway/gw1/invocations-response-stream",
        {"Content-Type": "application/json", "X-Amzn-SageMaker-Customer-Identity-Token": TOKEN},
        CHAT,
        200,
        "POST /global-inference-gateway/{id}/invocations-response-stream",
    ),
]


@pytest.fixture
async def traced_runtimes(spans: Any) -> AsyncIterator[tuple[Emulator, httpx.AsyncClient]]:
    async with (
        Emulator(EmulatorConfig.from_dict(RUNTIMES_EMULATOR)) as emulator,
        make_gateway(emulator) as gateway,
        Sidecar(gateway, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        assert sidecar.app.tracing is not None
        yield emulator, http


def _secret_free(spans: list[Any]) -> None:
    """Neither the identity token nor the custom attributes in any attribute or event."""
    for span in spans:
        values = [*span.attributes.values(), span.name]
        for event in span.events:
            values.extend([event.name, *event.attributes.values()])
        for value in map(str, values):
            assert TOKEN not in value and "secret-tenant" not in value, (span.name, value)


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("service", "operation", "path", "headers", "body", "status", "server_name"),
    RUNTIME_CALLS,
    ids=[call[1] for call in RUNTIME_CALLS],
)
async def test_each_runtime_operation_is_named_and_attributed_by_its_own_service(
    traced_runtimes: tuple[Emulator, httpx.AsyncClient],
    spans: Any,
    service: str,
    operation: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    server_name: str,
) -> None:
    _, http = traced_runtimes
    answer = await http.post(path, content=body, headers={**TRACEPARENT, **headers})
    assert answer.status_code == status, answer.text
    assert answer.content or status == 202  # a stream read to its end
    finished = list(spans.get_finished_spans())
    _one_trace(
        spans, operation, answer.headers["x-amzn-requestid"], service=service, server=server_name
    )
    _secret_free(finished)


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("service", "operation", "path", "headers", "body", "status", "server_name"),
    RUNTIME_CALLS,
    ids=[call[1] for call in RUNTIME_CALLS],
)
async def test_a_failed_runtime_call_keeps_its_secrets_out_of_the_spans(
    traced_runtimes: tuple[Emulator, httpx.AsyncClient],
    spans: Any,
    service: str,
    operation: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    server_name: str,
) -> None:
    emulator, http = traced_runtimes
    if service == ROUTER_ID:
        emulator.runtimes.routers.set_faults("r1", {"AccessDeniedException": 1.0})
    else:
        faults = {"error_rates": {"AccessDeniedException": 1.0}}
        emulator.runtimes.gateways.set_faults("gw1", faults)
    answer = await http.post(path, content=body, headers={**TRACEPARENT, **headers})
    assert answer.status_code == 403, answer.text
    finished = list(spans.get_finished_spans())
    (call,) = [s for s in finished if s.name == f"{service}.{operation}"]
    assert call.status.status_code.name == "ERROR"
    assert call.attributes["gateway.error.code"] == "AccessDeniedException"
    assert call.attributes["aws.request_id"] == answer.headers["x-amzn-requestid"]
    (attempt,) = [s for s in finished if s.name == "sagemaker_gateway.attempt"]
    assert attempt.parent.span_id == call.context.span_id
    assert attempt.attributes["gateway.attempt.outcome"] == "failed"
    _secret_free(finished)


@pytest.mark.newer_runtimes
async def test_a_stream_failing_mid_way_ends_its_span_in_error_inside_the_trace(
    traced_runtimes: tuple[Emulator, httpx.AsyncClient], spans: Any
) -> None:
    emulator, http = traced_runtimes
    emulator.runtimes.gateways.set_faults("gw1", {"stream_failure_rate": 1.0})
    service, operation, path, headers, body, _, _ = RUNTIME_CALLS[3]
    answer = await http.post(path, content=body, headers={**TRACEPARENT, **headers})
    assert answer.status_code == 200 and answer.content  # the failure is an event in the body
    finished = list(spans.get_finished_spans())
    assert {f"{s.context.trace_id:032x}" for s in finished} == {TRACE_ID}
    (server,) = [s for s in finished if s.kind.name == "SERVER"]
    (call,) = [s for s in finished if s.name == f"{service}.{operation}"]
    assert call.parent.span_id == server.context.span_id
    assert call.status.status_code.name == "ERROR"
    assert call.attributes["gateway.error.code"] == "InternalStreamFailure"
    assert call.attributes["aws.request_id"] == answer.headers["x-amzn-requestid"]
    (attempt,) = [s for s in finished if s.name == "sagemaker_gateway.attempt"]
    assert attempt.parent.span_id == call.context.span_id
    _secret_free(finished)


@pytest.mark.parametrize(
    ("service", "service_id"),
    [
        pytest.param(
            service,
            service_id,
            id=service,
            marks=[] if service == SAGEMAKER_RUNTIME else [pytest.mark.newer_runtimes],
        )
        for service, service_id in SERVICE_IDS.items()
    ],
)
def test_the_span_names_use_each_runtimes_service_id_from_botocores_model(
    service: str, service_id: str
) -> None:
    assert service_model(service).metadata["serviceId"] == service_id
