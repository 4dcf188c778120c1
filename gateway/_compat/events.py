"""botocore's call-level event hooks on ``client.meta.events``.

X-Ray, OpenTelemetry and home-grown instrumentation register handlers on
``client.meta.events`` (botocore's HierarchicalEmitter). The compat client has no
botocore request pipeline, so it emits the call-level events itself, with botocore's
names and keyword arguments, only once a handler is registered (until then a call
pays one attribute check):

  provide-client-params.<service>.<Operation>  params, model, context
      (a handler may return new params, as in botocore)
  before-parameter-build.<service>.<Operation> params, model, context
  before-call.<service>.<Operation>            model, params (the request dict:
      url_path, query_string, method, headers, body, url, context),
      request_signer=None, context
  after-call.<service>.<Operation>             http_response, parsed, model, context
  after-call-error.<service>.<Operation>       exception, context

``<service>`` is the client's (``sagemaker-runtime``...).
``parsed["ResponseMetadata"]["RetryAttempts"]`` counts the gateway's extra attempts
(hedges and retries). Per-HTTP-attempt events (before-send, needs-retry, ...) are not
emitted: the gateway signs, sends, hedges and retries itself; observe those through
``client.gateway.add_hook`` (gateway._observe.events) instead.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.hooks import HierarchicalEmitter

from gateway._aws.models import service_model
from gateway._compat.request import MethodSpec

__all__ = ["ClientEvents", "with_events"]


class ClientEvents(HierarchicalEmitter):  # type: ignore[misc]
    """``client.meta.events``: botocore's own emitter, with an ``active`` flag."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False

    def register(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register(event_name, handler, *args, **kwargs)
        self.active = True

    def register_first(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register_first(event_name, handler, *args, **kwargs)
        self.active = True

    def register_last(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register_last(event_name, handler, *args, **kwargs)
        self.active = True


@dataclass(frozen=True, slots=True)
class _HttpResponse:
    """What ``after-call`` handlers read of botocore's AWSResponse."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes = b""


@functools.cache
def _operation_model(service: str, operation: str) -> Any:
    """botocore's OperationModel (loaded once, when a handler first needs it)."""
    return service_model(service).operation_model(operation)


async def with_events(
    events: ClientEvents,
    region: str,
    spec: MethodSpec,
    url: Callable[[str], str],
    params: dict[str, Any],
    call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``call(params)`` between botocore's events; ``url`` names a resource's request URL."""
    operation = spec.operation
    suffix = f"{operation.service.name}.{operation.name}"
    model = _operation_model(operation.service.name, operation.name)
    context: dict[str, Any] = {"client_region": region}
    _, replaced = events.emit_until_response(
        f"provide-client-params.{suffix}", params=params, model=model, context=context
    )
    if replaced is not None:
        params = replaced
    events.emit(f"before-parameter-build.{suffix}", params=params, model=model, context=context)
    resource = str(params.get(spec.uri_member))
    request = {
        "url_path": operation.path(resource),
        "query_string": "",
        "method": "POST",
        "headers": {},
        "body": params.get("Body", b""),
        "url": url(resource),
        "context": context,
    }
    events.emit(
        f"before-call.{suffix}", model=model, params=request, request_signer=None, context=context
    )
    try:
        response = await call(params)
    except Exception as exc:
        events.emit(f"after-call-error.{suffix}", exception=exc, context=context)
        raise
    found = response.get("ResponseMetadata", {})
    http_response = _HttpResponse(found.get("HTTPStatusCode", 200), found.get("HTTPHeaders", {}))
    events.emit(
        f"after-call.{suffix}",
        http_response=http_response,
        parsed=response,
        model=model,
        context=context,
    )
    return response
