"""The one translation of the gateway's errors into the exceptions botocore raises.

The table in ``gateway.compat``'s docstring says what becomes what. Each runtime's
model names its error shapes; how its answers spell them (which botocore reads) is
in :class:`_Style`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import botocore.exceptions

from gateway import errors
from gateway._aws.models import SAGEMAKER_RUNTIME, service_model
from gateway._compat.response import metadata
from gateway._invoke import api

__all__ = ["botocore_error", "is_stream_event"]

# Error events inside an event stream (raised while iterating, as EventStreamError).
_STREAM_EVENT_CODES: Final = frozenset({"ModelStreamError", "InternalStreamFailure"})
# Errors botocore's retry handler would have retried: with retries exhausted
# (or off) it marks the response MaxAttemptsReached, which changes str(exc).
_RETRIED_STATUSES: Final = frozenset({429, 500, 502, 503, 504, 509})
_RETRIED_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
    }
)
# The first match wins: a subclass before its base.
_TRANSPORT_ERRORS: Final[tuple[tuple[type[errors.GatewayError], Any], ...]] = (
    (errors.ProtocolError, botocore.exceptions.ConnectionClosedError),
    (errors.TransportError, botocore.exceptions.EndpointConnectionError),
    (errors.NoHealthyTarget, botocore.exceptions.EndpointConnectionError),
    (errors.ConnectTimeout, botocore.exceptions.ConnectTimeoutError),
    (errors.PoolTimeout, botocore.exceptions.ConnectTimeoutError),
    (errors.TimeoutError, botocore.exceptions.ReadTimeoutError),
)


@dataclass(frozen=True, slots=True)
class _Style:
    """How a runtime's error answers read beyond its model (the sidecar answers so too)."""

    # The body names the message "Message", as the model's shapes do, so botocore
    # also sets response["Message"] for a modeled code.
    message_member: bool
    refused: tuple[str, int]  # the code and status answering a request it refuses
    oversized: tuple[str, int]  # ... answering a body over its limit


# SageMaker Runtime spells the message "message" (ModelError's alone "Message": see
# _response) and refuses any bad request as ValidationError; the newer runtimes
# spell it "Message" and refuse an oversized body with its own code.
_SAGEMAKER_STYLE: Final = _Style(False, ("ValidationError", 400), ("ValidationError", 400))
_NEWER_STYLE: Final = _Style(True, ("ValidationException", 400), ("PayloadTooLargeException", 413))


def _style(service: str) -> _Style:
    return _SAGEMAKER_STYLE if service == SAGEMAKER_RUNTIME else _NEWER_STYLE


def is_stream_event(exc: errors.GatewayError) -> TypeGuard[errors.ServiceError]:
    """An error event inside a stream (raised while iterating), not an HTTP answer.

    The stream operations list the event codes among their HTTP errors too: an
    answer with a status of 400 or more is one of those, raised as botocore does.
    """
    return (
        isinstance(exc, errors.ServiceError)
        and exc.code in _STREAM_EVENT_CODES
        and exc.status < 400
    )


def botocore_error(
    exc: errors.GatewayError, operation: api.Operation, exceptions: Any, url: str
) -> Exception:
    """The exception botocore's client would have raised where the gateway raised ``exc``.

    ``exceptions`` is the client's modeled classes (``client.exceptions``); ``url``
    the request's, which botocore names in a connection error.
    """
    error: Exception  # botocore's classes are untyped: named here
    if is_stream_event(exc):
        event = {"Error": {"Code": exc.code, "Message": exc.message}}
        error = botocore.exceptions.EventStreamError(event, operation.name)
    elif isinstance(exc, errors.ServiceError):
        error = _client_error(exc, operation, exceptions)
    elif isinstance(exc, errors.InvalidHeaderValue):
        # aiohttp refuses to send such a header: botocore wraps that as HTTPClientError.
        error = botocore.exceptions.HTTPClientError(error=exc)
    elif isinstance(exc, errors.InvalidRequest):
        # botocore sends it; the service refuses it: the same ClientError subclass.
        error = _client_error(_refusal(exc, operation.service.name), operation, exceptions)
    else:
        error = _transport_error(exc, url)
    return error


def _transport_error(exc: errors.GatewayError, url: str) -> Any:
    for gateway_class, botocore_class in _TRANSPORT_ERRORS:
        if isinstance(exc, gateway_class):
            return botocore_class(endpoint_url=url, error=exc)
    return botocore.exceptions.HTTPClientError(error=exc)


def _refusal(exc: errors.InvalidRequest, service: str) -> errors.ServiceError:
    """The service's answer to a request the gateway refused before sending it."""
    style = _style(service)
    code, status = style.oversized if isinstance(exc, errors.BodyTooLarge) else style.refused
    return errors.ServiceError(str(exc), code=code, status=status)


def _client_error(exc: errors.ServiceError, operation: api.Operation, exceptions: Any) -> Any:
    service = operation.service.name
    response = _response(exc)
    if _style(service).message_member and exc.code in _modeled(service):
        # botocore puts a modeled error's members at the top level too.
        response["Message"] = exc.message
    if isinstance(exc, errors.ResourceNotFound):
        for key, value in (("ResourceId", exc.resource_id), ("ResourceType", exc.resource_type)):
            if value is not None:
                response[key] = value
    return exceptions.from_code(exc.code)(response, operation.name)


def _response(exc: errors.ServiceError) -> dict[str, Any]:
    """The ``response`` dict botocore builds for a rest-json error."""
    headers = {"x-amzn-requestid": exc.request_id} if exc.request_id else {}
    if exc.retry_after is not None:
        headers["retry-after"] = f"{exc.retry_after:g}"
    found = metadata(exc.request_id, exc.status, headers, exc.attempts - 1)
    if exc.status in _RETRIED_STATUSES or exc.code in _RETRIED_CODES:
        found["MaxAttemptsReached"] = True
    response: dict[str, Any] = {
        "Error": {"Message": exc.message, "Code": exc.code},
        "ResponseMetadata": found,
    }
    if isinstance(exc, errors.ModelError) and exc.code == "ModelError":
        # Modeled members of the ModelError shape, at the top level as botocore puts them.
        response["Message"] = exc.message
        members = {
            "OriginalStatusCode": exc.original_status_code,
            "OriginalMessage": exc.original_message,
            "LogStreamArn": exc.log_stream_arn,
        }
        response.update({key: value for key, value in members.items() if value is not None})
    return response


@functools.cache
def _modeled(service: str) -> frozenset[str]:
    """The error codes ``service``'s model names (botocore has a class for each)."""
    return frozenset(shape.name for shape in service_model(service).error_shapes)
