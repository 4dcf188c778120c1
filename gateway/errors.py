"""The gateway's error tree, grouped by what the caller can do about it.

Every error the public API raises derives from :class:`GatewayError` and says
whether retrying the same request elsewhere could succeed (``retryable``).
Errors are translated once, at the boundary where they are caught.
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "BadGateway",
    "BodyTooLarge",
    "CacheUnavailable",
    "ConfigError",
    "ConnectError",
    "ConnectTimeout",
    "DeadlineExceeded",
    "GatewayError",
    "GatewayTimeout",
    "InternalDependency",
    "InternalFailure",
    "InternalServerError",
    "InternalStreamFailure",
    "InvalidHeaderValue",
    "InvalidRequest",
    "MemberUnavailable",
    "ModelError",
    "ModelNotReady",
    "NoHealthyTarget",
    "PayloadTooLarge",
    "PoolTimeout",
    "ProtocolError",
    "ReadError",
    "ReadTimeout",
    "RequestTimeout",
    "ResourceNotFound",
    "ResponseStreamError",
    "ServiceError",
    "ServiceModelUnavailable",
    "ServiceUnavailable",
    "SignatureError",
    "StaleConnection",
    "Throttling",
    "TimeoutError",
    "TransportError",
    "ValidationError",
    "WriteError",
]


class GatewayError(Exception):
    """Root of every error raised by the gateway."""

    retryable: bool = False
    # Requests the call sent before it failed (retries and hedges included).
    attempts: int = 1


class ConfigError(GatewayError, ValueError):
    """A configuration value is missing or wrong; the message names the key."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    @classmethod
    def at(cls, key: str, problem: str) -> ConfigError:
        return cls(f"config error at {key}: {problem}", key)


class InvalidRequest(GatewayError, ValueError):
    """The request was refused before anything was sent (bad header, too large)."""


class BodyTooLarge(InvalidRequest):
    """The body is over the operation's limit; refused before sending, as the service would."""


class InvalidHeaderValue(InvalidRequest):
    """A header value no HTTP request may carry (CR, LF, NUL, control characters)."""


class ServiceModelUnavailable(GatewayError):
    """The installed botocore predates the service's model; the message names the release."""

    def __init__(self, service: str, required: str, installed: str) -> None:
        super().__init__(
            f"{service} needs botocore >= {required}, which ships its model; this environment "
            f"has botocore {installed} (pip install 'botocore>={required}')"
        )
        self.service = service
        self.required = required
        self.installed = installed


class MemberUnavailable(ServiceModelUnavailable):
    """The call sets a member the installed botocore's model of its operation lacks.

    The member is never dropped or sent in another header: the message names the
    member and the botocore release whose model has it (``required``; empty when
    the installed model is newer than the release and lacks it all the same).
    """

    def __init__(
        self, service: str, operation: str, member: str, required: str, installed: str
    ) -> None:
        if required:
            message = (
                f"{operation}'s {member} needs botocore >= {required}, whose {service} model "
                f"has it; this environment has botocore {installed} "
                f"(pip install 'botocore>={required}')"
            )
        else:  # a model newer than this library that dropped or renamed the member
            message = (
                f"{operation} has no member {member} in the {service} model of the installed "
                f"botocore {installed}"
            )
        GatewayError.__init__(self, message)
        self.service = service
        self.operation = operation
        self.member = member
        self.required = required
        self.installed = installed


# -- transport --------------------------------------------------------------


class TransportError(GatewayError):
    """The connection failed; ``sent`` says whether the request may have reached the server."""

    retryable = True

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class ConnectError(TransportError):
    def __init__(self, message: str) -> None:
        super().__init__(message, sent=False)


class ReadError(TransportError):
    """The connection broke while waiting for or reading the response."""


class WriteError(TransportError):
    """The connection broke while sending the request."""


class StaleConnection(ReadError):
    """A reused keep-alive connection was dead before any response byte arrived."""


class ProtocolError(TransportError):
    """The server sent something that is not valid HTTP/1.1."""

    retryable = False


class ResponseStreamError(ProtocolError):
    """A response stream broke its event framing: a corrupt message, or the body ended mid-message.

    ``parts`` counts the payload parts already delivered to the caller. Once
    any was, the stream cannot be replayed: the error is not retryable.
    """

    def __init__(self, message: str, *, parts: int) -> None:
        super().__init__(message, sent=True)
        self.parts = parts
        self.retryable = parts == 0


# -- timeouts ---------------------------------------------------------------


class TimeoutError(GatewayError):  # shadows the builtin inside this module only
    retryable = True


class PoolTimeout(TimeoutError):
    """No pooled connection became free in time."""


class ConnectTimeout(TimeoutError):
    pass


class ReadTimeout(TimeoutError):
    pass


class DeadlineExceeded(TimeoutError):
    """The call's single deadline passed; nothing it started is still running.

    ``sent`` is False when the request never left (the deadline passed while it
    waited for a pooled connection): then no target is to blame for it.
    """

    retryable = False

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


# -- service ----------------------------------------------------------------


class ServiceError(GatewayError):
    """SageMaker (or the emulator) answered with an error.

    ``origin`` says where an error of a Global Inference Gateway came from, as its
    message's prefix does: ``"Global Inference Gateway"`` (the gateway itself),
    ``"inference gateway"`` (the one serving the model), or ``"inference gateway
    (<component>)"``; None for the other runtimes. ``retry_after`` is the wait, in
    seconds, the answer's ``Retry-After`` asked for (None without one).
    """

    code: str = "ServiceError"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int = 0,
        request_id: str | None = None,
        retryable: bool | None = None,
        origin: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.request_id = request_id
        if retryable is not None:
            self.retryable = retryable
        self.origin = origin
        self.retry_after = retry_after

    def __str__(self) -> str:
        rid = f", request id {self.request_id}" if self.request_id else ""
        return f"{self.code} (HTTP {self.status}{rid}): {self.message}"


class ValidationError(ServiceError):
    code = "ValidationError"


class ModelError(ServiceError):
    """The model container answered with an error of its own (HTTP 424)."""

    code = "ModelError"

    def __init__(
        self,
        message: str,
        *,
        original_status_code: int | None = None,
        original_message: str | None = None,
        log_stream_arn: str | None = None,
        error_code: str | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.original_status_code = original_status_code
        self.original_message = original_message
        self.log_stream_arn = log_stream_arn
        # A stream's ModelStreamError names what broke (ModelInvocationTimeExceeded,
        # StreamBroken, ...) in its ErrorCode member.
        self.error_code = error_code


class ModelNotReady(ServiceError):
    """The target model is still loading (HTTP 429); retry later or elsewhere."""

    code = "ModelNotReadyException"
    retryable = True


class InternalFailure(ServiceError):
    code = "InternalFailure"
    retryable = True


class InternalServerError(InternalFailure):
    """A Global Inference Gateway's own internal failure (HTTP 500); nothing was dispatched."""

    code = "InternalServerException"


class InternalStreamFailure(InternalFailure):
    """A failure event after a response stream started; the stream ends with it.

    Retrying sends the whole request again: whether that is wise once parts were
    delivered is the caller's call.
    """

    code = "InternalStreamFailure"


class ServiceUnavailable(ServiceError):
    code = "ServiceUnavailable"
    retryable = True


class InternalDependency(ServiceError):
    code = "InternalDependencyException"
    retryable = True


class Throttling(ServiceError):
    code = "ThrottlingException"
    retryable = True


class SignatureError(ServiceError):
    """The request's signature or credentials were refused (HTTP 403)."""

    code = "InvalidSignatureException"


class AccessDenied(SignatureError):
    """The caller may not invoke the resource (HTTP 403): IAM, or the identity token."""

    code = "AccessDeniedException"


class RequestTimeout(ServiceError):
    """An inference router did not receive the whole request in time (HTTP 408)."""

    code = "RequestTimeoutException"
    retryable = True


class PayloadTooLarge(ServiceError):
    """The request body is over the runtime's limit (HTTP 413)."""

    code = "PayloadTooLargeException"


class ResourceNotFound(ServiceError):
    """No such Global Inference Gateway, or none of its targets serves the model (HTTP 404)."""

    code = "ResourceNotFoundException"

    def __init__(
        self,
        message: str,
        *,
        resource_id: str | None = None,
        resource_type: str | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.resource_id = resource_id
        self.resource_type = resource_type


class BadGateway(ServiceError):
    """No usable answer from the inference gateway (HTTP 502).

    Not retryable: the inference may have run (and been billed), and the Global
    Inference Gateway may already have tried another inference gateway.
    """

    code = "BadGatewayException"


class GatewayTimeout(ServiceError):
    """The inference gateway did not answer in time (HTTP 504); not retryable, as BadGateway."""

    code = "GatewayTimeoutException"


# -- routing and cache ------------------------------------------------------


class NoHealthyTarget(GatewayError):
    """Every target of the route is ejected or was already tried in this call."""

    retryable = False


class CacheUnavailable(GatewayError):
    """The prediction cache failed; normally swallowed because the cache fails open."""
