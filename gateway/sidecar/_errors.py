"""Every gateway error as a SageMaker rest-json error, so botocore raises its own class.

botocore reads the code from ``x-amzn-ErrorType`` (the text before ':'),
the message from the body's ``message``/``Message``, the request id from
``x-amzn-RequestId``, and a ``ModelError``'s modeled members
(``OriginalStatusCode``, ``OriginalMessage``, ``LogStreamArn``) from the body.

Errors the gateway raised itself, not SageMaker, are mapped so that a
botocore user reads them the way they would read SageMaker's:

=============================================  ===================================  ====
gateway error                                  answered as                          HTTP
=============================================  ===================================  ====
ServiceError subclasses (from upstream)        their own code, status, message      same
DeadlineExceeded, ReadTimeout                  ModelError, OriginalStatusCode 504   424
PoolTimeout, ConnectTimeout                    ServiceUnavailable                   503
NoHealthyTarget                                ServiceUnavailable                   503
ConnectError / TransportError not yet sent     ServiceUnavailable                   503
TransportError after sending, ProtocolError    InternalDependencyException          530
InvalidRequest                                 ValidationError                      400
any other GatewayError / unexpected exception  InternalFailure                      500
=============================================  ===================================  ====

Why these: SageMaker itself reports an invocation that ran out of time as
a ``ModelError`` (424), which botocore does not retry — right for a caller
whose deadline has passed. 503 means "nothing was sent, try again", which
botocore's retry modes do retry; 530 means "the request may have reached
the model", which they do not, so an invocation is never silently doubled.
"""

from __future__ import annotations

import itertools
import math
import os

import orjson

from gateway import errors
from gateway._server.http import Response

__all__ = [
    "error_response",
    "gateway_error_response",
    "new_request_id",
    "payload_too_large",
    "rest_json_error",
    "runtime_error_response",
    "runtime_refusal",
]

_ERROR_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.sagemaker/"
_JSON = ("Content-Type", "application/json")

# The status SageMaker pairs with each code, for errors whose own status is
# unknown (0) or not an error (a ModelError decoded from a stream event: 200).
_DEFAULT_STATUS: dict[str, int] = {
    "ValidationError": 400,
    "ModelError": 424,
    "ModelStreamError": 424,
    "ModelNotReadyException": 429,
    "ThrottlingException": 429,
    "InternalFailure": 500,
    "InternalStreamFailure": 500,
    "ServiceUnavailable": 503,
    "InternalDependencyException": 530,
    "InvalidSignatureException": 403,
}

# Request ids for answers that never reached SageMaker: UUID-shaped (some SDKs
# log them as such), unique per process, without paying for uuid4 each time.
_ID_PREFIX = os.urandom(10).hex()
_id_counter = itertools.count()


def new_request_id() -> str:
    n = next(_id_counter) & 0xFFFFFFFFFFFF
    p = _ID_PREFIX
    return f"{p[:8]}-{p[8:12]}-{p[12:16]}-{p[16:20]}-{n:012x}"


def rest_json_error(
    code: str, status: int, message: str, request_id: str | None, fields: dict[str, object] | None
) -> Response:
    if fields:
        # ModelError's body carries its modeled members, "Message" capitalised.
        payload: dict[str, object] = {"Message": message, **fields}
    else:
        payload = {"message": message}
    return Response(
        status,
        (
            ("x-amzn-RequestId", request_id or new_request_id()),
            ("x-amzn-ErrorType", code + _ERROR_TYPE_SUFFIX),
            _JSON,
        ),
        orjson.dumps(payload),
    )


def error_response(code: str, message: str, status: int | None = None) -> Response:
    """An error the sidecar answers itself (throttling, auth, unknown operation)."""
    return rest_json_error(code, status or _DEFAULT_STATUS.get(code, 400), message, None, None)


def gateway_error_response(error: BaseException) -> Response:
    """The SageMaker-shaped answer for anything ``Gateway`` raised."""
    if isinstance(error, errors.ServiceError):
        return _service_error(error)
    code, status, message, fields = _translate(error)
    return rest_json_error(code, status, message, None, fields)


def _service_error(error: errors.ServiceError) -> Response:
    code = error.code
    status = error.status if error.status >= 400 else _DEFAULT_STATUS.get(code, 500)
    fields: dict[str, object] | None = None
    if isinstance(error, errors.ModelError):
        fields = _model_fields(
            error.original_status_code, error.original_message, error.log_stream_arn
        )
        if code == "ModelStreamError":
            # A stream error before the first byte: InvokeEndpoint's vocabulary.
            code = "ModelError"
    return rest_json_error(code, status, error.message, error.request_id, fields)


def _model_fields(
    status: int | None, message: str | None, log_stream_arn: str | None
) -> dict[str, object]:
    fields: dict[str, object] = {}
    if status is not None:
        fields["OriginalStatusCode"] = status
    if message is not None:
        fields["OriginalMessage"] = message
    if log_stream_arn is not None:
        fields["LogStreamArn"] = log_stream_arn
    return fields


def _translate(error: BaseException) -> tuple[str, int, str, dict[str, object] | None]:
    text = str(error) or type(error).__name__
    if isinstance(error, errors.DeadlineExceeded | errors.ReadTimeout):
        original = f"gateway timeout: {text}"
        message = (
            f'Received server error (504) from primary with message "{original}". '
            "The call ran out of time in the gateway sidecar."
        )
        return "ModelError", 424, message, _model_fields(504, original, None)
    if isinstance(error, errors.PoolTimeout | errors.ConnectTimeout | errors.NoHealthyTarget):
        return "ServiceUnavailable", 503, f"The service is unavailable ({text}).", None
    if isinstance(error, errors.TransportError):
        if isinstance(error, errors.ProtocolError) or error.sent:
            message = f"Your request caused an exception with an internal dependency ({text})."
            return "InternalDependencyException", 530, message, None
        return "ServiceUnavailable", 503, f"The service is unavailable ({text}).", None
    if isinstance(error, errors.InvalidRequest):
        return "ValidationError", 400, text, None
    return (
        "InternalFailure",
        500,
        f"An internal error occurred in the gateway sidecar ({text}).",
        None,
    )


# -- the inference router and Global Inference Gateway runtimes ---------------------

# Codes the sidecar answers with for its own errors, in each runtime's vocabulary.
_RUNTIME_CODES: dict[str, dict[str, tuple[str, int]]] = {
    "sagemaker-inference-router-runtime": {
        "ValidationError": ("ValidationException", 400),
        "ServiceUnavailable": ("ServiceUnavailableException", 503),
    },
    "sagemaker-gateway-runtime": {
        "ValidationError": ("ValidationException", 400),
        "ServiceUnavailable": ("ServiceUnavailableException", 503),
        # A call that ran out of time, or may have reached the model: not retried.
        "ModelError": ("GatewayTimeoutException", 504),
        "InternalDependencyException": ("BadGatewayException", 502),
        "InternalFailure": ("InternalServerException", 500),
    },
}


def runtime_error_response(error: BaseException, service: str) -> Response:
    """The answer for an error of an inference router or Global Inference Gateway call.

    The far side's errors pass on as they came (code, status, message, a
    throttle's ``Retry-After``, a missing resource's ``ResourceId``/``ResourceType``);
    the sidecar's own are named in that runtime's vocabulary. The body names the
    message ``Message``, as these models do, so botocore also sets ``response["Message"]``.
    """
    if isinstance(error, errors.ServiceError):
        code = error.code
        status = error.status if error.status >= 400 else _DEFAULT_STATUS.get(code, 500)
        extra: tuple[tuple[str, str], ...] = ()
        if error.retry_after is not None:
            extra = (("Retry-After", str(math.ceil(error.retry_after))),)
        return _runtime_json_error(
            code, status, error.message, error.request_id, _modeled_members(error), extra
        )
    if isinstance(error, errors.BodyTooLarge):
        return payload_too_large(str(error))
    code, status, message, fields = _translate(error)
    code, status = _RUNTIME_CODES.get(service, {}).get(code, (code, status))
    if code != "ModelError":
        fields = None  # only InvokeEndpoint's ModelError has those members
    return _runtime_json_error(code, status, message, None, fields or {}, ())


def runtime_refusal(code: str, message: str, status: int) -> Response:
    """An error the sidecar answers itself on an inference router or Global Inference
    Gateway path (throttling, auth, a bad header): the body's member is ``Message``."""
    return _runtime_json_error(code, status, message, None, {}, ())


def payload_too_large(message: str) -> Response:
    """Both runtimes answer an oversized body so, whether or not their model names it."""
    return _runtime_json_error("PayloadTooLargeException", 413, message, None, {}, ())


def _modeled_members(error: errors.ServiceError) -> dict[str, object]:
    """An error's members beyond its message, as its model names them."""
    if isinstance(error, errors.ModelError):
        return _model_fields(
            error.original_status_code, error.original_message, error.log_stream_arn
        )
    if isinstance(error, errors.ResourceNotFound):
        return {
            key: value
            for key, value in (
                ("ResourceId", error.resource_id),
                ("ResourceType", error.resource_type),
            )
            if value is not None
        }
    return {}


def _runtime_json_error(
    code: str,
    status: int,
    message: str,
    request_id: str | None,
    fields: dict[str, object],
    extra: tuple[tuple[str, str], ...],
) -> Response:
    return Response(
        status,
        (
            ("x-amzn-RequestId", request_id or new_request_id()),
            ("x-amzn-ErrorType", code + _ERROR_TYPE_SUFFIX),
            _JSON,
            *extra,
        ),
        orjson.dumps({"Message": message, **fields}),
    )
