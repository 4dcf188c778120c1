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
from gateway._invoke.api import MAX_PAYLOAD_BYTES
from gateway._server.http import Response
from gateway.sidecar._errors import payload_too_large
from gateway.sidecar._paths import PATHS

__all__ = ["OperationBodyLimits", "operation_limits"]

# The prefix of every message the Global Inference Gateway answers of its own.
_GATEWAY_OWN: Final = "Global Inference Gateway: "


def operation_limits() -> dict[str, int]:
    """Each operation's own limit, by its span route (``/endpoints/{name}/invocations``),
    read from the operation table."""
    return {action.span_route: action.limit for action in PATHS.actions()}


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
        found = PATHS.find(path)
        action = None if found is None else found[0]
        if action is None:
            return self._other
        return self._by_path.get(action.span_route, self._other)

    def refusal(self, path: str, limit: int) -> Response | None:
        found = PATHS.find(path)
        service = None if found is None else found[2]
        if service == INFERENCE_ROUTER_RUNTIME:
            message = f"The request body exceeds the inference router's limit of {limit} bytes."
            return payload_too_large(message)
        if service == GATEWAY_RUNTIME:
            message = f"{_GATEWAY_OWN}the request body exceeds the limit of {limit} bytes"
            return payload_too_large(message)
        return None  # SageMaker Runtime's own 413, and the OpenRTB path's
