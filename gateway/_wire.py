"""SageMaker Runtime wire format: request heads, responses, rest-json errors.

Sans-IO: bytes and header pairs in, typed values out. The transports move
the bytes; this module knows what they mean.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from gateway import errors
from gateway._signing import (
    AmzDateClock,
    Credentials,
    PresignedHead,
    SigV4Signer,
    payload_sha256,
)

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


# Presigned heads kept per RequestSigner (see RequestSigner.signed_head).
_MAX_PRESIGNED_HEADS = 512


class RequestSigner:
    """Signs at send time with whatever credentials are current then."""

    __slots__ = ("_clock", "_credentials", "_heads", "_signer")

    def __init__(self, signer: SigV4Signer, credentials: Callable[[], Credentials]) -> None:
        self._signer = signer
        self._credentials = credentials
        self._clock = AmzDateClock()
        self._heads: dict[tuple[object, ...], PresignedHead] = {}

    @property
    def signer(self) -> SigV4Signer:
        return self._signer

    def sign(
        self,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        payload_hash: str,
        after_host: int = -1,
    ) -> list[tuple[str, str]]:
        """A signed copy of sorted ``headers``: x-amz-date, the token, Authorization added.

        ``headers`` holds the sorted signable headers: accept, content-type,
        host, then the ``x-amzn-sagemaker-*`` ones (which sort after
        ``x-amz-*``). ``after_host`` is the index just past ``host`` when the
        caller knows it (the hot path does), else it is looked up.
        """
        credentials = self._credentials()
        amz_date = self._clock.now()
        signed = self._with_date(headers, credentials, amz_date, after_host)
        authorization = self._signer.authorization_presorted(
            sign_prefix, signed, payload_hash, credentials, amz_date
        )
        signed.append(("authorization", authorization))
        return signed

    def signed_head(
        self,
        path: str,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        payload_hash: str,
        body_length: int,
        after_host: int = -1,
    ) -> bytes:
        """The signed request's whole head, as bytes (the native transport's hot path).

        Within a second, calls to one target mostly carry identical headers
        (the date changes once a second), so everything but the payload
        hash is prepared once per (path, headers, second) in a
        :class:`PresignedHead`, and each call pays for three short hash
        updates and a join.
        """
        credentials = self._credentials()
        amz_date = self._clock.now()
        key: tuple[object, ...] = (path, *headers)
        head = self._heads.get(key)
        if head is None or head.amz_date != amz_date or head.credentials is not credentials:
            signed = self._with_date(headers, credentials, amz_date, after_host)
            head_start = (
                f"POST {path} HTTP/1.1\r\n{header_lines(signed)}user-agent: {USER_AGENT}\r\n"
            )
            head = self._signer.presign_head(sign_prefix, signed, credentials, amz_date, head_start)
            if len(self._heads) >= _MAX_PRESIGNED_HEADS:
                self._heads.clear()  # rare shapes pile up otherwise
            self._heads[key] = head
        return head.head(payload_hash, body_length)

    @staticmethod
    def _with_date(
        headers: list[tuple[str, str]], credentials: Credentials, amz_date: str, after_host: int
    ) -> list[tuple[str, str]]:
        """``headers`` with x-amz-date and the session token in their sorted place."""
        position = after_host if after_host >= 0 else _after_host(headers)
        signed = headers[:position]
        signed.append(("x-amz-date", amz_date))
        if credentials.token:
            signed.append(("x-amz-security-token", credentials.token))
        signed += headers[position:]
        return signed


def _after_host(headers: list[tuple[str, str]]) -> int:
    for index, (name, _) in enumerate(headers):
        if name == "host":
            return index + 1
    raise AssertionError("headers lack host")


class PreparedRequest:
    """A request whose signature is computed only when a connection is ready.

    ``headers`` are sorted, signable, with ``host``. They are signed once;
    a transparent resend (the stale keep-alive case) reuses the signature.
    """

    __slots__ = (
        "_final",
        "_head",
        "after_host",
        "body",
        "headers",
        "origin",
        "path",
        "payload_hash",
        "sign_prefix",
        "signer",
    )

    def __init__(
        self,
        origin: Origin,
        path: str,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        body: bytes,
        signer: RequestSigner | None,
        payload_hash: str = "",
        after_host: int = -1,
    ) -> None:
        self.origin = origin
        self.path = path
        self.sign_prefix = sign_prefix
        self.headers = headers
        self.body = body
        self.signer = signer
        self.payload_hash = payload_hash
        self.after_host = after_host
        self._final: list[tuple[str, str]] | None = None
        self._head: bytes | None = None

    def encoded_head(self) -> bytes:
        """The whole signed head as bytes (native transport); signed once, like final_headers."""
        head = self._head
        if head is None:
            if self.signer is None:
                head = encode_head(self.path, self.headers, len(self.body))
            else:
                if not self.payload_hash:
                    self.payload_hash = payload_sha256(self.body)
                head = self.signer.signed_head(
                    self.path,
                    self.sign_prefix,
                    self.headers,
                    self.payload_hash,
                    len(self.body),
                    self.after_host,
                )
            self._head = head
        return head

    def final_headers(self) -> list[tuple[str, str]]:
        final = self._final
        if final is None:
            if self.signer is None:
                final = self.headers
            else:
                if not self.payload_hash:
                    self.payload_hash = payload_sha256(self.body)
                final = self.signer.sign(
                    self.sign_prefix, self.headers, self.payload_hash, self.after_host
                )
            self._final = final
        return final


def header_lines(headers: Sequence[tuple[str, str]]) -> str:
    """``name: value`` lines of an HTTP head, each ending in CRLF."""
    return "".join([f"{name}: {value}\r\n" for name, value in headers])


def encode_head(path: str, headers: list[tuple[str, str]], body_length: int) -> bytes:
    """A POST head; header order on the wire follows ``headers``."""
    return (
        f"POST {path} HTTP/1.1\r\n{header_lines(headers)}user-agent: {USER_AGENT}\r\n"
        f"content-length: {body_length}\r\n\r\n"
    ).encode("latin-1")


RawHeaders = list[tuple[bytes, bytes]]


def split_head(head: bytes) -> RawHeaders:
    """The (name, value) pairs of a raw response head; values stripped.

    The head was already accepted by httptools, so this only splits it. An
    obs-fold continuation line joins the previous value with one space.
    """
    pairs: RawHeaders = []
    for line in head.split(b"\n")[1:]:
        line = line.rstrip(b"\r")
        if line[:1] in (b" ", b"\t") and pairs:
            name, value = pairs[-1]
            pairs[-1] = (name, value + b" " + line.strip())
            continue
        name, _, value = line.partition(b":")
        pairs.append((name, value.strip()))
    return pairs


class RawResponse:
    """A complete HTTP response.

    The native transport hands over the response head undecoded (``raw``:
    the status line and header lines exactly as received, without the blank
    line that ends them); the lower-cased ``headers`` dict is built only if
    someone asks (error decoding does, the success path does not).
    """

    __slots__ = ("_headers", "body", "raw", "status")

    def __init__(
        self,
        status: int,
        headers: dict[str, str] | None,
        body: bytes,
        raw: bytes | None = None,
    ) -> None:
        self.status = status
        self._headers = headers
        self.body = body
        self.raw = raw

    @property
    def headers(self) -> dict[str, str]:
        headers = self._headers
        if headers is None:
            headers = self._headers = headers_from_raw(self.raw or b"")
        return headers

    def __repr__(self) -> str:
        return f"RawResponse(status={self.status}, body={self.body[:64]!r})"


def headers_from_raw(head: bytes) -> dict[str, str]:
    """A raw response head as a dict: lower-case names, repeated headers joined by ","."""
    headers: dict[str, str] = {}
    for name, value in split_head(head):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous},{text}"
    return headers


# Response headers InvokeResult exposes, by the raw lower-case name.
_RESULT_FIELDS = {
    b"content-type": "content_type",
    b"x-amzn-invoked-production-variant": "invoked_variant",
    b"x-amzn-sagemaker-custom-attributes": "custom_attributes",
    b"x-amzn-requestid": "request_id",
    b"x-amzn-sagemaker-new-session-id": "new_session_id",
    b"x-amzn-sagemaker-closed-session-id": "closed_session_id",
}
_FIELD_NAMES = tuple(_RESULT_FIELDS.values())
_NO_FIELDS = (None,) * len(_FIELD_NAMES)


class InvokeResult:
    """What InvokeEndpoint returned, plus where and how the gateway got it.

    The header-derived fields (``content_type``, ``invoked_variant``,
    ``custom_attributes``, ``request_id``, ``new_session_id``,
    ``closed_session_id``) are decoded on first access: a caller that only
    reads ``body`` never pays for them.
    """

    __slots__ = ("_fields", "_raw", "attempts", "body", "cache", "hedged", "target")

    def __init__(
        self,
        body: bytes,
        content_type: str | None = None,
        *,
        invoked_variant: str | None = None,
        custom_attributes: str | None = None,
        request_id: str | None = None,
        new_session_id: str | None = None,
        closed_session_id: str | None = None,
        target: str | None = None,
        hedged: bool = False,
        attempts: int = 1,
        cache: str | None = None,
    ) -> None:
        self.body = body
        self.target = target  # the SageMaker endpoint that answered
        self.hedged = hedged  # a hedge attempt was sent during this call
        self.attempts = attempts
        self.cache = cache  # "near", "redis", "stale", "coalesced" or None
        self._raw: bytes | None = None  # a response head, decoded into _fields on first read
        given = (
            content_type,
            invoked_variant,
            custom_attributes,
            request_id,
            new_session_id,
            closed_session_id,
        )
        # None: decode the fields from _raw on first read (the hot path sets _raw).
        self._fields: dict[str, str] | None = None
        if given != _NO_FIELDS:
            self._fields = {
                name: value
                for name, value in zip(_FIELD_NAMES, given, strict=True)
                if value is not None
            }

    @classmethod
    def from_fields(
        cls, body: bytes, fields: dict[str, str], target: str | None, cache: str | None
    ) -> InvokeResult:
        """A result from already-decoded fields (a cached answer): no parsing at all."""
        result = cls(body, target=target, attempts=0, cache=cache)
        result._fields = fields
        return result

    def _field(self, name: str) -> str | None:
        fields = self._fields
        if fields is None:
            fields = self._fields = {}
            for raw_name, raw_value in split_head(self._raw or b""):
                field_name = _RESULT_FIELDS.get(raw_name.lower())
                if field_name is not None:
                    fields[field_name] = raw_value.decode("latin-1")
        return fields.get(name)

    @property
    def content_type(self) -> str | None:
        return self._field("content_type")

    @property
    def invoked_variant(self) -> str | None:
        return self._field("invoked_variant")

    @property
    def custom_attributes(self) -> str | None:
        return self._field("custom_attributes")

    @property
    def request_id(self) -> str | None:
        return self._field("request_id")

    @property
    def new_session_id(self) -> str | None:
        return self._field("new_session_id")

    @property
    def closed_session_id(self) -> str | None:
        return self._field("closed_session_id")

    @property
    def headers(self) -> Mapping[str, str]:
        """Every response header, lower-case names (empty for cached answers)."""
        return headers_from_raw(self._raw) if self._raw is not None else {}

    def _public(self) -> tuple[object, ...]:
        fields = tuple(self._field(name) for name in _FIELD_NAMES)
        return (self.body, *fields, self.target, self.hedged, self.attempts, self.cache)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InvokeResult):
            return NotImplemented
        return self._public() == other._public()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaced

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{name}={value!r}"
            for name, value in zip(
                ("body", *_FIELD_NAMES, "target", "hedged", "attempts", "cache"),
                self._public(),
                strict=True,
            )
        )
        return f"InvokeResult({parts})"


def result_from_response(response: RawResponse, target: str | None) -> InvokeResult:
    raw = response.raw
    if raw is not None:
        # The hot path: headers decoded only if read.
        result = InvokeResult(response.body, target=target)
        result._raw = raw
        return result
    headers = response.headers
    return InvokeResult(
        response.body,
        headers.get("content-type"),
        invoked_variant=headers.get("x-amzn-invoked-production-variant"),
        custom_attributes=headers.get("x-amzn-sagemaker-custom-attributes"),
        request_id=headers.get("x-amzn-requestid"),
        new_session_id=headers.get("x-amzn-sagemaker-new-session-id"),
        closed_session_id=headers.get("x-amzn-sagemaker-closed-session-id"),
        target=target,
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
