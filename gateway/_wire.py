"""SageMaker Runtime wire format: request heads, responses, rest-json errors.

Sans-IO: bytes and header pairs in, typed values out. The transports move
the bytes; this module knows what they mean.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson

from gateway import errors
from gateway._signing import AmzDateClock, Credentials, SigV4Signer, payload_sha256

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
USER_AGENT = "sagemaker-gateway/0.1"

# SageMaker endpoint names: letters, digits and inner hyphens, at most 63.
_ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}")
# A header value may hold any visible Latin-1 character, space and tab, but
# never CR, LF or NUL: those would let a caller inject headers. Other control
# characters are not valid in a field value either (RFC 9110 5.5).
_FORBIDDEN_IN_HEADER = re.compile(r"[\r\n\x00]")
_CONTROL_IN_HEADER = re.compile(r"[\x01-\x08\x0e-\x1b\x7f]")

# InvokeEndpoint's optional request headers: keyword argument -> header name.
INVOKE_HEADERS: tuple[tuple[str, str], ...] = (
    ("custom_attributes", "x-amzn-sagemaker-custom-attributes"),
    ("enable_explanations", "x-amzn-sagemaker-enable-explanations"),
    ("inference_component", "x-amzn-sagemaker-inference-component"),
    ("inference_id", "x-amzn-sagemaker-inference-id"),
    ("session_id", "x-amzn-sagemaker-session-id"),
    ("target_container_hostname", "x-amzn-sagemaker-target-container-hostname"),
    ("target_model", "x-amzn-sagemaker-target-model"),
    ("target_variant", "x-amzn-sagemaker-target-variant"),
)


def check_endpoint_name(name: str) -> None:
    # The pattern's repetition counts hyphen runs as one step: check the length too.
    if len(name) > 63 or not _ENDPOINT_NAME.fullmatch(name):
        raise errors.InvalidRequest(
            f"invalid endpoint name {name[:80]!r}: letters, digits and hyphens, at most 63"
        )


def check_header_value(name: str, value: str) -> str:
    """Refuse values that would corrupt or inject headers; return the trimmed value."""
    if _FORBIDDEN_IN_HEADER.search(value):
        raise errors.InvalidRequest(f"header {name} contains CR, LF or NUL")
    if _CONTROL_IN_HEADER.search(value):
        raise errors.InvalidRequest(f"header {name} contains a control character")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise errors.InvalidRequest(f"header {name} is not Latin-1 text") from None
    # SigV4 folds every run of whitespace (tabs too) into one space; sending the
    # value folded keeps the signature and the bytes on the wire in agreement.
    return " ".join(value.split())


def check_payload(body: bytes) -> None:
    if len(body) > MAX_PAYLOAD_BYTES:
        raise errors.InvalidRequest(
            f"payload of {len(body)} bytes exceeds SageMaker's limit of {MAX_PAYLOAD_BYTES}"
        )


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host and port, plus the Host header to send."""

    scheme: str
    host: str
    port: int
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @classmethod
    def from_url(cls, url: str) -> Origin:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https"):
            raise errors.ConfigError(f"endpoint_url must start with http:// or https://: {url!r}")
        authority = rest.split("/", 1)[0]
        host, port_sep, port_text = authority.rpartition(":")
        if not port_sep or "]" in port_text:
            host, port_text = authority, ""
        if not host:
            raise errors.ConfigError(f"endpoint_url has no host: {url!r}")
        default_port = 443 if scheme == "https" else 80
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            raise errors.ConfigError(f"endpoint_url has a bad port: {url!r}") from None
        if not 0 < port < 65536 or (port_text and not port_text.isdigit()):
            raise errors.ConfigError(f"endpoint_url has a bad port: {url!r}")
        host_header = host if port == default_port else f"{host}:{port}"
        return cls(scheme, host.strip("[]"), port, host_header)


class RequestSigner:
    """Signs at send time with whatever credentials are current then."""

    __slots__ = ("_clock", "_credentials", "_signer")

    def __init__(self, signer: SigV4Signer, credentials: Callable[[], Credentials]) -> None:
        self._signer = signer
        self._credentials = credentials
        self._clock = AmzDateClock()

    @property
    def signer(self) -> SigV4Signer:
        return self._signer

    def sign(
        self, sign_prefix: str, headers: list[tuple[str, str]], payload_hash: str
    ) -> list[tuple[str, str]]:
        """Insert x-amz-date, the token and Authorization into sorted ``headers``.

        ``headers`` holds the sorted signable headers *before* ``host``'s
        successors are added: accept, content-type, host, then the
        ``x-amzn-sagemaker-*`` ones (which sort after ``x-amz-*``).
        """
        credentials = self._credentials()
        amz_date = self._clock.now()
        signed = headers.copy()
        position = _after_host(signed)
        extra = [("x-amz-date", amz_date)]
        if credentials.token:
            extra.append(("x-amz-security-token", credentials.token))
        signed[position:position] = extra
        authorization = self._signer.authorization_presorted(
            sign_prefix, signed, payload_hash, credentials, amz_date
        )
        signed.append(("authorization", authorization))
        return signed


def _after_host(headers: list[tuple[str, str]]) -> int:
    for index, (name, _) in enumerate(headers):
        if name == "host":
            return index + 1
    raise AssertionError("headers lack host")


@dataclass(slots=True)
class PreparedRequest:
    """A request whose signature is computed only when a connection is ready."""

    origin: Origin
    path: str
    sign_prefix: str
    headers: list[tuple[str, str]]  # sorted, signable, includes host
    body: bytes
    signer: RequestSigner | None
    payload_hash: str = ""

    def final_headers(self) -> list[tuple[str, str]]:
        if self.signer is None:
            return self.headers
        if not self.payload_hash:
            self.payload_hash = payload_sha256(self.body)
        return self.signer.sign(self.sign_prefix, self.headers, self.payload_hash)


def encode_head(path: str, headers: list[tuple[str, str]], body_length: int) -> bytes:
    lines = "".join([f"{name}: {value}\r\n" for name, value in headers])
    return (
        f"POST {path} HTTP/1.1\r\n{lines}user-agent: {USER_AGENT}\r\n"
        f"content-length: {body_length}\r\n\r\n"
    ).encode("latin-1")


@dataclass(slots=True)
class RawResponse:
    """A complete HTTP response; header names are lower-case."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class InvokeResult:
    """What InvokeEndpoint returned, plus where and how the gateway got it."""

    body: bytes
    content_type: str | None
    invoked_variant: str | None = None
    custom_attributes: str | None = None
    request_id: str | None = None
    new_session_id: str | None = None
    closed_session_id: str | None = None
    target: str | None = None  # the SageMaker endpoint that answered
    hedged: bool = False  # a hedge attempt was sent during this call
    attempts: int = 1
    cache: str | None = None  # "near", "redis", "stale", "coalesced" or None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


def result_from_response(response: RawResponse, target: str | None) -> InvokeResult:
    headers = response.headers
    return InvokeResult(
        body=response.body,
        content_type=headers.get("content-type"),
        invoked_variant=headers.get("x-amzn-invoked-production-variant"),
        custom_attributes=headers.get("x-amzn-sagemaker-custom-attributes"),
        request_id=headers.get("x-amzn-requestid"),
        new_session_id=headers.get("x-amzn-sagemaker-new-session-id"),
        closed_session_id=headers.get("x-amzn-sagemaker-closed-session-id"),
        target=target,
        headers=headers,
    )


@dataclass(frozen=True, slots=True)
class AsyncInvocation:
    """InvokeEndpointAsync's answer: where the output will be written."""

    inference_id: str | None
    output_location: str | None
    failure_location: str | None
    request_id: str | None = None


def async_invocation_from_response(response: RawResponse) -> AsyncInvocation:
    body = _json_object(response.body)
    inference_id = body.get("InferenceId") if body else None
    return AsyncInvocation(
        inference_id=inference_id if isinstance(inference_id, str) else None,
        output_location=response.headers.get("x-amzn-sagemaker-outputlocation"),
        failure_location=response.headers.get("x-amzn-sagemaker-failurelocation"),
        request_id=response.headers.get("x-amzn-requestid"),
    )


# -- errors -----------------------------------------------------------------

_ERROR_CLASSES: dict[str, type[errors.ServiceError]] = {
    "ValidationError": errors.ValidationError,
    "ModelError": errors.ModelError,
    "ModelNotReadyException": errors.ModelNotReady,
    "InternalFailure": errors.InternalFailure,
    "ServiceUnavailable": errors.ServiceUnavailable,
    "InternalDependencyException": errors.InternalDependency,
    "ThrottlingException": errors.Throttling,
    "Throttling": errors.Throttling,
    "TooManyRequestsException": errors.Throttling,
    "RequestLimitExceeded": errors.Throttling,
    "InvalidSignatureException": errors.SignatureError,
    "SignatureDoesNotMatch": errors.SignatureError,
    "UnrecognizedClientException": errors.SignatureError,
    "IncompleteSignature": errors.SignatureError,
    "IncompleteSignatureException": errors.SignatureError,
    "ExpiredToken": errors.SignatureError,
    "InvalidAccessKeyId": errors.SignatureError,
    "MissingAuthenticationToken": errors.SignatureError,
    "MissingAuthenticationTokenException": errors.SignatureError,
    "AccessDeniedException": errors.SignatureError,
    "ExpiredTokenException": errors.SignatureError,
    "InvalidClientTokenId": errors.SignatureError,
}

# When nothing names the error, the status is all there is to go on.
_STATUS_CLASSES: dict[int, type[errors.ServiceError]] = {
    400: errors.ValidationError,
    403: errors.SignatureError,
    424: errors.ModelError,
    429: errors.ModelNotReady,
    500: errors.InternalFailure,
    502: errors.ServiceUnavailable,
    503: errors.ServiceUnavailable,
    504: errors.ServiceUnavailable,
    530: errors.InternalDependency,
}


def _json_object(body: bytes) -> dict[str, object] | None:
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _error_code(headers: Mapping[str, str], body: dict[str, object] | None) -> str | None:
    # As botocore reads it: the header first, then the body; the text before ':'
    # and after the last '#' (``com.amazon.coral.service#ValidationError:http://...``).
    header = headers.get("x-amzn-errortype")
    if header:
        return _bare_code(header)
    if body:
        for key in ("__type", "code", "Code"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return _bare_code(value)
    return None


def _bare_code(value: str) -> str | None:
    return value.split(":", 1)[0].rsplit("#", 1)[-1].strip() or None


def _text(body: dict[str, object] | None, *keys: str) -> str | None:
    if body:
        for key in keys:
            value = body.get(key)
            if isinstance(value, str):
                return value
    return None


def decode_error(response: RawResponse) -> errors.ServiceError:
    """Turn a non-2xx response into the matching typed error.

    Works on SageMaker's rest-json shape and degrades to the HTTP status for
    empty, truncated or non-JSON bodies (a load balancer's 502 page, say).
    """
    body = _json_object(response.body)
    code = _error_code(response.headers, body)
    error_class = _ERROR_CLASSES.get(code or "") or _STATUS_CLASSES.get(response.status)
    if error_class is None:
        error_class = errors.ServiceError
    message = _text(body, "message", "Message") or _fallback_message(response)
    common: dict[str, object] = {
        "code": code or error_class.code,
        "status": response.status,
        "request_id": response.headers.get("x-amzn-requestid"),
    }
    if error_class is errors.ServiceError:
        # An unknown code: 5xx and 429 are worth another try, the rest are not.
        common["retryable"] = response.status >= 500 or response.status == 429
    if error_class is errors.ModelError:
        return errors.ModelError(
            message,
            original_status_code=_int_or_none(body.get("OriginalStatusCode") if body else None),
            original_message=_text(body, "OriginalMessage"),
            log_stream_arn=_text(body, "LogStreamArn"),
            **common,
        )
    return error_class(message, **common)  # type: ignore[arg-type]


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # isdigit() is also true of '²' and other non-ASCII digits int() refuses,
    # and int() refuses strings past 4300 digits: only short ASCII numbers.
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        return int(value)
    return None


def _fallback_message(response: RawResponse) -> str:
    if not response.body:
        return f"HTTP {response.status} with an empty body"
    snippet = response.body[:200].decode("utf-8", "replace").strip()
    return f"HTTP {response.status}: {snippet}"
