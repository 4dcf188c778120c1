"""A value for every request member of botocore's sagemaker-runtime model, and the view of a
recorded request that clients must agree on (shared by the compat and sidecar contract tests)."""

from __future__ import annotations

from typing import Any

from gateway._invoke.api import operations
from gateway.emulator._service import RecordedRequest

# A value for every request member of every operation (EndpointName and Body aside).
MEMBER_VALUES: dict[str, object] = {
    "ContentType": "application/json",
    "Accept": "application/json",
    "CustomAttributes": "trace=abc,tenant=7",
    "TargetModel": "a.tar.gz",
    "TargetVariant": "AllTraffic",
    "TargetContainerHostname": "container-1",
    "InferenceId": "inference-42",
    "EnableExplanations": "`true`",
    "InferenceComponentName": "component-1",
    "PrefixAwareId": "prefix-9",
    "InputLocation": "s3://bucket/input.json",
    "S3OutputPathExtension": "run-7/outputs",
    "Filename": "result.json",
    "RequestTTLSeconds": 600,
    "InvocationTimeoutSeconds": 90,
}
# Members whose value depends on the call (a live session id, a body).
CALL_MEMBERS = {"EndpointName", "Body", "SessionId"}
# Which emulated endpoint takes each operation with all its members.
ENDPOINTS = {
    "InvokeEndpoint": "mme",
    "InvokeEndpointWithResponseStream": "echo",
    "InvokeEndpointAsync": "echo",
}
BOTO_METHODS = {
    "InvokeEndpoint": "invoke_endpoint",
    "InvokeEndpointWithResponseStream": "invoke_endpoint_with_response_stream",
    "InvokeEndpointAsync": "invoke_endpoint_async",
}


def wire_view(request: RecordedRequest, operation: str | None = None) -> dict[str, Any]:
    """Path, body, host and the model's headers (of ``operation``, else of any) as sent.

    Only the model's headers: an HTTP client's own defaults (aiohttp adds
    ``accept: */*`` where the operation has no Accept header) are not the request.
    """
    model = (
        {m.header for m in operations()[operation].headers}
        if operation is not None
        else MODEL_HEADERS
    )
    headers = sorted(
        (name, value)
        for name, value in request.headers
        if name in model or name == "host" or name.startswith("x-amzn-")
    )
    return {"path": request.path, "headers": headers, "body": request.body}


MODEL_HEADERS = {m.header for op in operations().values() for m in op.headers}


def model_has(operation: str, member: str) -> bool:
    """Whether the installed botocore's model of ``operation`` has ``member``.

    Older models lack some (``gateway._aws.models.MEMBER_SINCE``): SessionId before 1.35.15,
    Filename before 1.42.54, PrefixAwareId before 1.43.68...
    """
    return member in operations()[operation].by_name


# Stateful sessions (SessionId, botocore >= 1.35.15) in the installed model.
SESSIONS = model_has("InvokeEndpoint", "SessionId")


def call_members(operation: str, session_id: str, body: bytes) -> dict[str, object]:
    """botocore names -> values for every member of ``operation``."""
    values: dict[str, object] = {"EndpointName": ENDPOINTS[operation]}
    if model_has(operation, "Body"):  # InvokeEndpointAsync's inline Body: botocore >= 1.43.29
        values["Body"] = body
    for member in operations()[operation].request:
        if member.name == "SessionId":
            values["SessionId"] = session_id
        elif member.name not in CALL_MEMBERS:
            values[member.name] = MEMBER_VALUES[member.name]
    return values
