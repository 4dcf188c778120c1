"""Which operation a request path names, read from the operation table.

Each operation's ``uri`` in botocore's model (``/endpoints/{EndpointName}/invocations``)
gives the path prefix and the action the sidecar serves it on; its answer's shape
(a body, a stream, a queued invocation), its body limit, its metrics label and its
span route follow from the same entry. An operation a newer botocore adds to a
runtime is served on its own path with no change here.

A botocore without a model of a runtime still has that runtime's prefix routed:
its calls answer the error naming the release that has it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, SAGEMAKER_RUNTIME
from gateway._invoke.api import (
    BODY,
    MAX_PAYLOAD_BYTES,
    Operation,
    answer_of,
    body_limit,
    operation_table,
)

__all__ = ["PATHS", "Action", "Paths", "label_of"]

_MIB: Final = 1024 * 1024
# An operation's metrics label is its runtime's part and its action's ("router_async");
# SageMaker Runtime's operations are named by their action alone ("stream"), and its
# plain InvokeEndpoint is "invoke". An action not below reads as itself ("batch_jobs").
_SERVICE_LABELS: Final = {
    SAGEMAKER_RUNTIME: "",
    INFERENCE_ROUTER_RUNTIME: "router",
    GATEWAY_RUNTIME: "global_gateway",
}
_ACTION_LABELS: Final = {
    "invocations": "",
    "invocations-response-stream": "stream",
    "async-invocations": "async",
}
# For a botocore with no model of a newer runtime: where its paths start, its actions
# and the body limit its documentation states.
_WITHOUT_MODEL: Final = {
    INFERENCE_ROUTER_RUNTIME: (
        "/inference-routers/",
        ("invocations", "async-invocations"),
        6 * _MIB,
    ),
    GATEWAY_RUNTIME: (
        "/global-inference-gateway/",
        ("invocations", "invocations-response-stream"),
        10 * _MIB,
    ),
}


@dataclass(frozen=True, slots=True)
class Action:
    """One operation as the sidecar serves it."""

    label: str  # the metrics label: "invoke", "router_async"...
    service: str
    operation: Operation | None  # None: the installed botocore has no model of its runtime
    answer: str  # BODY, STREAM or QUEUED
    limit: int  # the largest request body its path takes
    routed: bool  # its answer says where an inference router routed the call
    span_route: str  # a low-cardinality span name: "/endpoints/{name}/invocations"
    # Whether its errors take the newer runtimes' shape (the message as ``Message``).
    runtime_errors: bool


def label_of(service: str, action: str) -> str:
    """The metrics label of ``service``'s operation on ``action`` (its path's last part)."""
    own = _ACTION_LABELS.get(action, action.replace("-", "_"))
    parts = [_SERVICE_LABELS.get(service, service.replace("-", "_")), own]
    return "_".join(part for part in parts if part) or "invoke"


def _action_of(operation: Operation) -> tuple[str, str, Action]:
    uri = operation.uri
    prefix = uri[: uri.index("{")]
    action = uri.partition("}/")[2]
    answer = answer_of(operation)
    # A path takes at least SageMaker's 6 MiB: a smaller limit of the operation's own
    # (InvokeEndpointAsync's inline body) is refused by the call, in its service's shape.
    limit = max(body_limit(operation), MAX_PAYLOAD_BYTES)
    placeholder = "{id}" if operation.uri_member.endswith("Id") else "{name}"
    label = label_of(operation.service.name, action)
    routed = operation.service.name == INFERENCE_ROUTER_RUNTIME and answer == BODY
    span_route = f"{prefix}{placeholder}/{action}"
    service = operation.service.name
    runtime_errors = service != SAGEMAKER_RUNTIME
    served = Action(label, service, operation, answer, limit, routed, span_route, runtime_errors)
    return prefix, action, served


class Paths:
    """Every operation's path prefix and action, from the installed botocore's models."""

    __slots__ = ("by_prefix", "services")

    def __init__(self) -> None:
        self.by_prefix: dict[str, dict[str, Action]] = {}
        self.services: dict[str, str] = {}  # prefix -> its runtime
        for operation in operation_table().values():
            prefix, action, served = _action_of(operation)
            self.by_prefix.setdefault(prefix, {})[action] = served
            self.services[prefix] = served.service
        # A runtime the installed botocore lacks: its documented actions answer the error
        # naming the release that has it.
        modelled = {op.service.name for op in operation_table().values()}
        for service, (prefix, actions, limit) in _WITHOUT_MODEL.items():
            if service not in modelled:
                self.services[prefix] = service
                self.by_prefix[prefix] = {
                    action: Action(
                        label_of(service, action),
                        service,
                        None,
                        BODY,
                        limit,
                        False,
                        f"{prefix}{{name}}/{action}",
                        True,
                    )
                    for action in actions
                }

    def find(self, path: str) -> tuple[Action | None, str, str] | None:
        """``path``'s action (None: an action its runtime has not), the name it holds and
        its runtime; None for a path under no runtime's prefix."""
        for prefix, actions in self.by_prefix.items():
            if path.startswith(prefix):
                name, _, action = path[len(prefix) :].partition("/")
                served = actions.get(action)
                return served, name, self.services[prefix]
        return None

    def prefixes(self) -> tuple[tuple[str, int, dict[str, Action], str], ...]:
        """Each prefix with its length, its actions and its runtime: the sidecar's routing."""
        return tuple(
            (prefix, len(prefix), actions, self.services[prefix])
            for prefix, actions in self.by_prefix.items()
        )

    def actions(self) -> Iterator[Action]:
        for actions in self.by_prefix.values():
            yield from actions.values()


PATHS: Final = Paths()
