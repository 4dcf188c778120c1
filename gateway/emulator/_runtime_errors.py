"""Error answers of the inference router and Global Inference Gateway runtimes (rest-json).

As for SageMaker Runtime, botocore reads the code from ``x-amzn-ErrorType`` and the
modeled members from the JSON body; these models name the message member
``Message``. A 429 may carry ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from gateway._server.http import Response

__all__ = ["WireError", "wire_error_response"]

_ERROR_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.sagemaker/"


class WireError(Exception):
    """One error answer: status, code, message, further modeled members and headers."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: Mapping[str, object] | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}
        self.headers = headers


def wire_error_response(error: WireError, request_id: str) -> Response:
    payload: dict[str, object] = {"Message": error.message, **error.fields}
    return Response(
        error.status,
        (
            ("x-amzn-RequestId", request_id),
            ("x-amzn-ErrorType", error.code + _ERROR_TYPE_SUFFIX),
            ("Content-Type", "application/json"),
            *error.headers,
        ),
        orjson.dumps(payload),
    )
