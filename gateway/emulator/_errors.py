"""SageMaker Runtime's rest-json error responses.

botocore reads the code from the ``x-amzn-ErrorType`` header (the text
before ':'), the message from the JSON body's ``message`` or ``Message``,
the request id from ``x-amzn-RequestId``, and then parses the body again
with the modeled error shape, which is how ``OriginalStatusCode``,
``OriginalMessage`` and ``LogStreamArn`` reach a ``ModelError``.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from gateway._server.http import Response

__all__ = ["SageMakerError", "error_response"]

_ERROR_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.sagemaker/"

# Status of every code the emulator answers with. ThrottlingException is a
# 400 in SageMaker as in most AWS JSON services (botocore's retry handlers
# recognise it by code, not status); signature errors are 403, except a
# malformed Authorization header, which AWS answers 400.
STATUS_BY_CODE: dict[str, int] = {
    "ValidationError": 400,
    "ThrottlingException": 400,
    "IncompleteSignatureException": 400,
    "XAmzContentSHA256Mismatch": 400,
    "InvalidSignatureException": 403,
    "UnrecognizedClientException": 403,
    "MissingAuthenticationTokenException": 403,
    "UnknownOperationException": 404,
    "ModelError": 424,
    "ModelNotReadyException": 429,
    "InternalFailure": 500,
    "ServiceUnavailable": 503,
    "InternalDependencyException": 530,
}

# Errors that fault injection may produce ([endpoints.<name>.faults] error_rates).
ERROR_CODES: dict[str, int] = {
    code: STATUS_BY_CODE[code]
    for code in (
        "ValidationError",
        "ThrottlingException",
        "ModelError",
        "ModelNotReadyException",
        "InternalFailure",
        "ServiceUnavailable",
        "InternalDependencyException",
    )
}


class SageMakerError(Exception):
    """An error answer: code, message and any extra modeled fields."""

    def __init__(self, code: str, message: str, fields: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = STATUS_BY_CODE[code]
        self.fields = fields or {}


def error_response(error: SageMakerError, request_id: str) -> Response:
    if error.fields:
        # ModelError's body carries its modeled members, "Message" capitalised.
        payload: dict[str, object] = {"Message": error.message, **error.fields}
    else:
        payload = {"message": error.message}
    return Response(
        error.status,
        (
            ("x-amzn-RequestId", request_id),
            ("x-amzn-ErrorType", error.code + _ERROR_TYPE_SUFFIX),
            ("Content-Type", "application/json"),
        ),
        orjson.dumps(payload),
    )
