"""The sidecar's request body limit per operation, and each runtime's answer past it.

Every operation takes what its service takes (the model's ``Body`` maximum):
InvokeEndpoint and its stream and async forms 6 MiB (InvokeEndpointAsync's
128,000-byte inline limit is the Gateway's to refuse, as SageMaker does, with a
400 ValidationError), an inference router 6 MiB, a Global Inference Gateway
10 MiB. ``max_body_bytes``, when set, caps every path on the port, these and the
OpenRTB path alike; unset, a path that is no operation takes 6 MiB.

A body over its limit is refused before it is read when its length is declared
(else as soon as it passes the limit), in the shape its service answers:

* SageMaker Runtime: its front end's 413, plain text, ``HTTP content length
  exceeded N bytes.`` (botocore: code ``413``, that message);
* inference router: 413 ``PayloadTooLargeException`` with a JSON ``Message``
  (its model names no such shape; its documentation says only "413");
* Global Inference Gateway: its modeled ``PayloadTooLargeException`` (413), the
  ``Message`` starting ``Global Inference Gateway:`` as the service's own do.
"""

from __future__ import annotations

from typing import Final

from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME
from gateway._invoke.api import (
    INVOKE_GLOBAL_GATEWAY,
    INVOKE_GLOBAL_GATEWAY_STREAM,
    INVOKE_ROUTER,
    INVOKE_ROUTER_ASYNC,
    MAX_PAYLOAD_BYTES,
    body_limit,
    operation_table,
)
from gateway._server.http import Response
from gateway.sidecar._errors import payload_too_large

__all__ = ["OperationBodyLimits", "operation_limits"]

_MIB: Final = 1024 * 1024
# What the runtimes' documentation states, for a botocore whose model lacks them.
_DOCUMENTED: Final = {INFERENCE_ROUTER_RUNTIME: 6 * _MIB, GATEWAY_RUNTIME: 10 * _MIB}
ENDPOINTS: Final = "/endpoints/"
ROUTERS: Final = "/inference-routers/"
GATEWAYS: Final = "/global-inference-gateway/"
# (service, operation) per path prefix and action, as the app routes them.
_RUNTIME_PATHS: Final = {
    (ROUTERS, "invocations"): (INFERENCE_ROUTER_RUNTIME, INVOKE_ROUTER),
    (ROUTERS, "async-invocations"): (INFERENCE_ROUTER_RUNTIME, INVOKE_ROUTER_ASYNC),
    (GATEWAYS, "invocations"): (GATEWAY_RUNTIME, INVOKE_GLOBAL_GATEWAY),
    (GATEWAYS, "invocations-response-stream"): (GATEWAY_RUNTIME, INVOKE_GLOBAL_GATEWAY_STREAM),
}
# The prefix of every message the Global Inference Gateway answers of its own.
_GATEWAY_OWN: Final = "Global Inference Gateway: "
_ENDPOINT_ACTIONS: Final = ("invocations", "invocations-response-stream", "async-invocations")


def operation_limits() -> dict[tuple[str, str], int]:
    """Each operation's own limit, by (path prefix, action)."""
    limits = {(ENDPOINTS, action): MAX_PAYLOAD_BYTES for action in _ENDPOINT_ACTIONS}
    table = operation_table()
    for key, (service, operation) in _RUNTIME_PATHS.items():
        op = table.get((service, operation))
        limits[key] = body_limit(op) if op is not None else _DOCUMENTED[service]
    return limits


class OperationBodyLimits:
    """The server's ``BodyLimits``: each operation's limit under an optional cap."""

    __slots__ = ("_by_path", "_other", "floor", "largest")

    def __init__(self, cap: int | None) -> None:
        def capped(limit: int) -> int:
            return limit if cap is None else min(limit, cap)

        self._by_path = {key: capped(limit) for key, limit in operation_limits().items()}
        self._other = MAX_PAYLOAD_BYTES if cap is None else cap
        limits = [*self._by_path.values(), self._other]
        self.floor = min(limits)
        # The server's own max_body_size: no path takes more.
        self.largest = max(limits)

    def limit(self, path: str) -> int:
        prefix = _prefix(path)
        if prefix is None:
            return self._other
        action = path[len(prefix) :].partition("/")[2]
        return self._by_path.get((prefix, action), self._other)

    def refusal(self, path: str, limit: int) -> Response | None:
        prefix = _prefix(path)
        if prefix == ROUTERS:
            message = f"The request body exceeds the inference router's limit of {limit} bytes."
            return payload_too_large(message)
        if prefix == GATEWAYS:
            message = f"{_GATEWAY_OWN}the request body exceeds the limit of {limit} bytes"
            return payload_too_large(message)
        return None  # SageMaker Runtime's own 413, and the OpenRTB path's


def _prefix(path: str) -> str | None:
    for prefix in (ENDPOINTS, ROUTERS, GATEWAYS):
        if path.startswith(prefix):
            return prefix
    return None
