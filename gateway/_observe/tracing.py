"""OpenTelemetry tracing: a hook on the instrumentation stream, and W3C context for servers.

Optional (``pip install 'sagemaker-gateway[otel]'``) and off unless
configured: the gateway traces when a real tracer provider is installed --
by the application (``trace.set_tracer_provider``), by
``opentelemetry-instrument``, or by the sidecar command when an ``OTEL_*``
variable asks for it (``configure_from_environment``: exporter, endpoint,
sampler, service name all through the SDK's own environment variables).
Without the packages or a provider no hook is registered and calls pay
nothing.

Spans: one CLIENT span per call, named ``<service id>.<Operation>`` as the
OpenTelemetry semantic conventions for AWS SDK calls ask (``rpc.system=aws-api``,
``rpc.service`` the service's id in botocore's model -- ``SageMaker Runtime``,
``SageMaker Inference Router Runtime``, ``SageMaker Gateway Runtime`` --,
``rpc.method``, ``aws.request_id``, ``cloud.region``), for every operation of
the three runtimes, streams included: a child of the current span, e.g. the
sidecar's server span continuing an inbound ``traceparent``. No member's
value is an attribute: ``CustomerIdentityToken`` and ``CustomAttributes``
never reach a span.
One ``sagemaker_gateway.attempt`` child per attempt (primary, hedge, retry,
with its outcome), streams included; events for a fired hedge and a
scheduled retry.
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, SAGEMAKER_RUNTIME
from gateway._invoke.api import operation_table
from gateway._observe.events import (
    AttemptFinished,
    CacheLookup,
    CallFinished,
    CallStarted,
    Event,
    HedgeFired,
    RetryScheduled,
)

__all__ = [
    "SERVICE_IDS",
    "ServerTracing",
    "TracingHook",
    "configure_from_environment",
    "gateway_tracer",
    "trace_id_of_traceparent",
    "tracing_hook",
]

log = logging.getLogger("gateway.tracing")

_INSTRUMENTATION = "sagemaker_gateway"
# Each runtime's ``metadata.serviceId`` in botocore's model: rpc.service and the
# span name's prefix (written out so a span costs no model lookup; a test compares).
SERVICE_IDS: Final = {
    SAGEMAKER_RUNTIME: "SageMaker Runtime",
    INFERENCE_ROUTER_RUNTIME: "SageMaker Inference Router Runtime",
    GATEWAY_RUNTIME: "SageMaker Gateway Runtime",
}
RPC_SERVICE: Final = SERVICE_IDS[SAGEMAKER_RUNTIME]
# The service id of each operation outside sagemaker-runtime, from the operation table
# (operation names are unique across the runtimes; one botocore lacks is never called).
_SERVICE_OF: Final = {
    operation.name: SERVICE_IDS[service]
    for (service, _), operation in operation_table().items()
    if service != SAGEMAKER_RUNTIME
}
# The variables that ask for tracing when no provider is installed yet.
_ASKING = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def gateway_tracer() -> Any | None:
    """The gateway's tracer when a real provider is installed, else None."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    from gateway._host.version import __version__

    return provider.get_tracer(_INSTRUMENTATION, __version__)


def configure_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Install an SDK tracer provider configured by the standard ``OTEL_*`` variables.

    Does nothing (False) when the SDK is missing, a provider is already
    installed, ``OTEL_SDK_DISABLED`` is true, or no variable asks for traces
    (``OTEL_TRACES_EXPORTER`` other than ``none``, or an OTLP endpoint).
    Exporters are the SDK's entry points named by ``OTEL_TRACES_EXPORTER``
    (default ``otlp``); the resource reads ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``, the sampler ``OTEL_TRACES_SAMPLER[_ARG]``.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if names == ["none"] or not any(env.get(key) for key in _ASKING):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* variables are set but opentelemetry-sdk is not installed")
        return False
    if gateway_tracer() is not None:
        return False  # the application configured its own
    provider = TracerProvider(resource=Resource.create())
    for name in names or ["otlp"]:
        exporter = _exporter(name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True


def _exporter(name: str) -> Any | None:
    found = importlib.metadata.entry_points(group="opentelemetry_traces_exporter", name=name)
    for entry in found:
        return entry.load()()
    log.warning(
        "OTEL_TRACES_EXPORTER names %r, which no installed package provides "
        "(otlp: pip install opentelemetry-exporter-otlp)",
        name,
    )
    return None


class _CallSpan:
    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.token: contextvars.Token[_CallSpan | None] | None = None


# The span of the call running in this task (hedge tasks inherit it).
_current: contextvars.ContextVar[_CallSpan | None] = contextvars.ContextVar(
    "sagemaker_gateway_call_span", default=None
)


def tracing_hook(hooks: Sequence[object], region: str | None) -> TracingHook | None:
    """A hook that traces calls, when OpenTelemetry is installed and a tracer provider is
    set and ``hooks`` has none yet; else None."""
    if any(isinstance(hook, TracingHook) for hook in hooks):
        return None
    tracer = gateway_tracer()
    return TracingHook(tracer, region) if tracer is not None else None


class TracingHook:
    """Turns the instrumentation stream into spans (see the module docstring)."""

    def __init__(self, tracer: Any, region: str | None = None) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._tracer = tracer
        self._region = region
        self._trace = trace
        self._client = SpanKind.CLIENT
        self._internal = SpanKind.INTERNAL
        self._error = Status(StatusCode.ERROR)
        self._handlers: dict[type, Callable[[Any], None]] = {
            CallStarted: self._started,
            CallFinished: self._finished,
            AttemptFinished: self._attempt,
            HedgeFired: self._hedge_fired,
            RetryScheduled: self._retry,
            CacheLookup: self._cache,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _started(self, event: CallStarted) -> None:
        service = _SERVICE_OF.get(event.operation, RPC_SERVICE)
        attributes = {
            "rpc.system": "aws-api",
            "rpc.service": service,
            "rpc.method": event.operation,
            "gateway.route": event.route,
        }
        if self._region is not None:
            attributes["cloud.region"] = self._region
        if event.model is not None:
            attributes["gateway.model"] = event.model
        span = self._tracer.start_span(
            f"{service}.{event.operation}", kind=self._client, attributes=attributes
        )
        holder = _CallSpan(span)
        holder.token = _current.set(holder)

    def _finished(self, event: CallFinished) -> None:
        holder = _current.get()
        if holder is None:
            return
        span = holder.span
        span.set_attribute("gateway.attempts", event.attempts)
        span.set_attribute("gateway.hedged", event.hedged)
        if event.endpoint is not None:
            span.set_attribute("gateway.endpoint", event.endpoint)
        if event.cache_source is not None:
            span.set_attribute("gateway.cache.source", event.cache_source)
        if event.request_id is not None:
            span.set_attribute("aws.request_id", event.request_id)
        if event.routing_reason is not None:
            span.set_attribute("gateway.routing.reason", event.routing_reason)
            span.set_attribute("gateway.routing.resource", event.routed_resource or "other")
        if event.error_code is not None:
            span.set_attribute("gateway.error.code", event.error_code)
            span.set_status(self._error)
        span.end()
        if holder.token is not None:
            try:
                _current.reset(holder.token)
            except ValueError:  # finished in another context than it started
                _current.set(None)

    def _attempt(self, event: AttemptFinished) -> None:
        holder = _current.get()
        end = time.time_ns()
        context = self._trace.set_span_in_context(holder.span) if holder is not None else None
        attributes: dict[str, Any] = {
            "gateway.route": event.route,
            "gateway.target": event.target,
            "gateway.endpoint": event.endpoint,
            "gateway.attempt.kind": event.kind,
            "gateway.attempt.outcome": event.outcome,
        }
        if event.error_code is not None:
            attributes["gateway.error.code"] = event.error_code
        span = self._tracer.start_span(
            "sagemaker_gateway.attempt",
            context=context,
            kind=self._internal,
            attributes=attributes,
            start_time=end - int(event.duration_s * 1e9),
        )
        if event.error_code is not None:
            span.set_status(self._error)
        span.end(end_time=end)
        if holder is not None and event.outcome == "won":
            # The call span also names the target that answered.
            holder.span.set_attribute("gateway.target", event.target)

    def _hedge_fired(self, event: HedgeFired) -> None:
        holder = _current.get()
        if holder is not None:
            holder.span.add_event(
                "hedge fired", {"gateway.target": event.target, "gateway.delay_s": event.delay_s}
            )

    def _retry(self, event: RetryScheduled) -> None:
        holder = _current.get()
        if holder is not None:
            holder.span.add_event(
                "retry scheduled",
                {
                    "gateway.attempt": event.attempt,
                    "gateway.backoff_s": event.backoff_s,
                    "gateway.error.code": event.error_code,
                },
            )

    def _cache(self, event: CacheLookup) -> None:
        holder = _current.get()
        if holder is not None:
            holder.span.set_attribute("gateway.cache.source", event.source)


def trace_id_of_traceparent(value: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header value, or None when malformed."""
    if value is None or len(value) < 55 or value[2] != "-" or value[35] != "-":
        return None
    trace_id = value[3:35]
    if trace_id == "0" * 32 or any(c not in "0123456789abcdef" for c in trace_id):
        return None
    return trace_id


class ServerTracing:
    """Server spans that continue an inbound W3C ``traceparent`` (sidecar, RTB proxy)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import SpanKind

        self._tracer = tracer
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._server = SpanKind.SERVER
        self._client = SpanKind.CLIENT

    @contextmanager
    def server_span(self, name: str, headers: Mapping[str, str]) -> Iterator[Any]:
        """A SERVER span, current for the block, whose parent is the inbound context."""
        parent = self._propagate.extract(headers)
        span = self._tracer.start_span(name, context=parent, kind=self._server)
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        try:
            yield span
        finally:
            self._context.detach(token)
            span.end()

    @contextmanager
    def client_span(self, name: str, headers: list[tuple[str, str]]) -> Iterator[Any]:
        """A CLIENT span child of the current one, its context added to ``headers``."""
        span = self._tracer.start_span(name, kind=self._client)
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        headers.extend(carrier.items())
        try:
            yield span
        finally:
            span.end()

    @staticmethod
    def trace_id(span: Any) -> str | None:
        context = span.get_span_context()
        return f"{context.trace_id:032x}" if context.is_valid else None
