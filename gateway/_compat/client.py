"""The compat client: one class for every runtime, its methods built from the operation table.

As botocore builds a client class per service from its model, :func:`client_class`
builds one per runtime from the gateway's operation table (the same models): a
method per operation, named as botocore names it, that parses the keyword arguments,
calls the Gateway (:func:`call_gateway`) and answers botocore's response dict or
raises botocore's exception. All the behaviour lives in :class:`RuntimeClient`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from gateway import errors
from gateway._aws.models import SAGEMAKER_RUNTIME, service_model
from gateway._client import Gateway
from gateway._compat.errors import botocore_error, is_stream_event
from gateway._compat.events import ClientEvents, with_events
from gateway._compat.request import MethodSpec, method_specs, parse
from gateway._compat.response import EventStream, answer, stream_answer
from gateway._invoke import api
from gateway._invoke.api import AsyncInvocation, InvokeResult
from gateway._invoke.streaming import InvokeStream

__all__ = ["ClientMeta", "RuntimeClient", "call_gateway", "client_class"]


def call_gateway(
    gateway: Gateway,
    operation: api.Operation,
    resource: str,
    body: bytes | None,
    members: tuple[object, ...],
    *,
    timeout: float | None = None,
    user_agent: str | None = None,
) -> Awaitable[InvokeResult | InvokeStream | AsyncInvocation]:
    """The one place compat calls its Gateway: ``operation`` on ``resource`` (an endpoint,
    router or gateway id) with its header ``members`` in ``operation.headers`` order.

    ``body`` is None only for the async operations, whose Body is an optional inline one.
    """
    return gateway.call(operation, resource, body, members, timeout=timeout, user_agent=user_agent)


@dataclass(frozen=True, slots=True)
class ClientMeta:
    """The part of botocore's ``client.meta`` a SageMaker runtime caller reads."""

    service_name: str
    region_name: str
    endpoint_url: str | None
    # botocore's event hooks (see gateway._compat.events).
    events: ClientEvents = field(default_factory=lambda: ClientEvents())


class RuntimeClient:
    """botocore's client of a SageMaker runtime, served by a :class:`Gateway`.

    Its methods are the operations of its service's model, named as botocore names
    them (``invoke_endpoint``, ``invoke_endpoint_with_response_stream``,
    ``invoke_inference_router``...): keyword arguments only, botocore's response dict
    back. Use as an async context manager (or call ``close()``), as with aiobotocore.
    """

    def __init__(
        self, gateway: Gateway, exceptions: Any, meta: ClientMeta, *, owns_gateway: bool
    ) -> None:
        self._gateway = gateway
        # Built once per session (botocore's ClientExceptionsFactory), never per call.
        self.exceptions = exceptions
        self.meta = meta
        self._owns_gateway = owns_gateway

    if TYPE_CHECKING:
        # The operations' methods, built at run time by client_class.
        def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, dict[str, Any]]]: ...

    @property
    def gateway(self) -> Gateway:
        return self._gateway

    async def __aenter__(self) -> Self:
        if self._owns_gateway:
            await self._gateway.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_gateway:
            await self._gateway.aclose()

    async def _call_with_events(self, spec: MethodSpec, params: dict[str, Any]) -> dict[str, Any]:
        """One call of ``spec``'s operation between botocore's events (once any are wanted)."""
        call = functools.partial(self._make_api_call, spec)
        url = functools.partial(self._url, spec.operation)
        return await with_events(self.meta.events, self.meta.region_name, spec, url, params, call)

    async def _make_api_call(self, spec: MethodSpec, params: dict[str, Any]) -> dict[str, Any]:
        call = parse(spec, params)
        operation, resource = spec.operation, call.resource
        try:
            result = await call_gateway(
                self._gateway, operation, resource, call.body, call.members, timeout=call.timeout
            )
            if isinstance(result, InvokeStream):
                return await self._open_stream(spec, resource, result)
        except errors.GatewayError as exc:
            raise self._error(exc, operation, resource) from exc
        return answer(spec, result)

    async def _open_stream(
        self, spec: MethodSpec, resource: str, parts: InvokeStream
    ) -> dict[str, Any]:
        """Take the stream's first step (the gateway sends on it): an HTTP error raises
        from the call, as in botocore; an error event is kept for the iteration."""
        first: bytes | None = None
        pending: errors.GatewayError | None = None
        try:
            first = await anext(parts)
        except StopAsyncIteration:
            pass
        except errors.GatewayError as exc:
            if not is_stream_event(exc):
                raise
            pending = exc
        translate = functools.partial(self._error, operation=spec.operation, resource=resource)
        return stream_answer(spec, parts, EventStream(parts, first, pending, translate))

    def _error(
        self, exc: errors.GatewayError, operation: api.Operation, resource: str
    ) -> Exception:
        return botocore_error(exc, operation, self.exceptions, self._url(operation, resource))

    def _url(self, operation: api.Operation, resource: str) -> str:
        """The request's URL, as botocore names it (in a connection error, an event)."""
        # Gateway.origin is SageMaker Runtime's host; the newer runtimes' hosts are
        # resolved per call, so their URLs start at the client's endpoint_url.
        origin = self._gateway.origin if operation.service.name == SAGEMAKER_RUNTIME else None
        base = f"{origin.scheme}://{origin.host_header}" if origin else self.meta.endpoint_url
        return f"{base or ''}{operation.path(resource)}"


def _api_method(spec: MethodSpec) -> Callable[..., Coroutine[Any, Any, dict[str, Any]]]:
    async def api_call(self: RuntimeClient, **params: Any) -> dict[str, Any]:
        if self.meta.events.active:
            return await self._call_with_events(spec, params)
        return await self._make_api_call(spec, params)

    api_call.__name__ = api_call.__qualname__ = spec.method
    api_call.__doc__ = (
        f"{spec.name}, as botocore's client calls it (``Timeout=``: the call's deadline, s)."
    )
    return api_call


@functools.cache
def client_class(service: str) -> type[RuntimeClient]:
    """The client class of ``service``: :class:`RuntimeClient` with a method per operation.

    Named after the service as botocore names its class, plus ``Client``
    (``SageMakerRuntimeClient``...). Raises
    :class:`~gateway.errors.ServiceModelUnavailable` for a runtime the installed
    botocore lacks.
    """
    name = str(service_model(service).service_id).replace(" ", "") + "Client"
    methods: dict[str, Any] = {spec.method: _api_method(spec) for spec in method_specs(service)}
    return type(name, (RuntimeClient,), {**methods, "__module__": __name__})
