"""An aiobotocore-shaped ``sagemaker-runtime`` client on top of :class:`gateway.Gateway`.

Moving a service over is a one-line change::

    # from aiobotocore.session import get_session
    from gateway.compat import get_session

    async with get_session().create_client("sagemaker-runtime", region_name="us-east-1") as client:
        response = await client.invoke_endpoint(EndpointName="ep", Body=b"...")
        body = await response["Body"].read()

The calls take the same keyword arguments and return the same dicts as
aiobotocore, and failures raise botocore's own exception classes with the
same ``response`` dicts, so existing ``except client.exceptions.ModelError``
and ``except botocore.exceptions.ClientError`` handlers keep working.

Errors, as aiobotocore 3.x raises them:

==============================================  =========================================
gateway error                                   botocore exception
==============================================  =========================================
``ServiceError`` with a modeled code            ``client.exceptions.<Code>`` (ModelError,
                                                ValidationError, ModelNotReadyException,
                                                InternalFailure, ServiceUnavailable,
                                                InternalDependencyException)
``ServiceError``, any other code                ``botocore.exceptions.ClientError``
stream ``ModelStreamError`` /                   ``botocore.exceptions.EventStreamError``
``InternalStreamFailure`` (while iterating)
``ConnectError``, ``ReadError``, ``WriteError``, ``botocore.exceptions.EndpointConnectionError``
``StaleConnection``, ``NoHealthyTarget``        (aiohttp's connect errors and resets map
                                                there too)
``ProtocolError``                               ``botocore.exceptions.ConnectionClosedError``
``ConnectTimeout``, ``PoolTimeout``             ``botocore.exceptions.ConnectTimeoutError``
``ReadTimeout``, ``DeadlineExceeded``           ``botocore.exceptions.ReadTimeoutError``
``InvalidRequest`` (refused before sending)     ``botocore.exceptions.ParamValidationError``
any other ``GatewayError``                      ``botocore.exceptions.HTTPClientError``
==============================================  =========================================

The gateway error is kept as ``__cause__``. Differences from aiobotocore:
an error's ``ResponseMetadata["HTTPHeaders"]`` holds only the request id
(the gateway's errors do not keep the response headers); the stream call
returns once the first event arrived rather than after the response head;
``PrefixAwareId`` and InvokeEndpointAsync's ``Body``,
``Filename`` and ``S3OutputPathExtension`` are refused with
``ParamValidationError`` because the gateway does not send them yet.
The extra keyword ``Timeout=`` (seconds) sets the call's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import botocore.exceptions
import botocore.session

from gateway import errors
from gateway._client import Gateway
from gateway._wire import AsyncInvocation, InvokeResult

__all__ = [
    "ClientMeta",
    "EventStream",
    "SageMakerRuntimeClient",
    "Session",
    "StreamingBody",
    "create_client",
    "get_session",
]

SERVICE_NAME: Final = "sagemaker-runtime"
_STREAM_ERROR_CODES: Final = frozenset({"ModelStreamError", "InternalStreamFailure"})
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
_MISSING: Final[Any] = object()

# -- parameters -------------------------------------------------------------

_STR, _INT, _SECONDS, _UNSUPPORTED = "str", "int", "seconds", "unsupported"


@dataclass(frozen=True, slots=True)
class _Operation:
    """One API operation's parameters, precomputed so a call costs a dict lookup each."""

    name: str
    path: str  # after /endpoints/{name}, for error messages
    has_body: bool
    # API name -> (Gateway keyword, kind)
    params: Mapping[str, tuple[str, str]]
    required: tuple[str, ...]
    required_params: tuple[str, ...]  # required, other than EndpointName and Body
    members: str  # for "Unknown parameter", in botocore's order


def _operation(
    name: str, path: str, has_body: bool, params: dict[str, tuple[str, str]], *required: str
) -> _Operation:
    params["Timeout"] = ("timeout", _SECONDS)  # our extension: the call's deadline
    names = ["EndpointName", *(["Body"] if has_body else []), *params]
    return _Operation(
        name,
        path,
        has_body,
        params,
        ("EndpointName", *required),
        tuple(name for name in required if name != "Body"),
        ", ".join(names),
    )


_INVOKE: Final = _operation(
    "InvokeEndpoint",
    "invocations",
    True,
    {
        "ContentType": ("content_type", _STR),
        "Accept": ("accept", _STR),
        "CustomAttributes": ("custom_attributes", _STR),
        "TargetModel": ("target_model", _STR),
        "TargetVariant": ("target_variant", _STR),
        "TargetContainerHostname": ("target_container_hostname", _STR),
        "InferenceId": ("inference_id", _STR),
        "EnableExplanations": ("enable_explanations", _STR),
        "InferenceComponentName": ("inference_component", _STR),
        "SessionId": ("session_id", _STR),
        "PrefixAwareId": ("", _UNSUPPORTED),
    },
    "Body",
)
_STREAM: Final = _operation(
    "InvokeEndpointWithResponseStream",
    "invocations-response-stream",
    True,
    {
        "ContentType": ("content_type", _STR),
        "Accept": ("accept", _STR),
        "CustomAttributes": ("custom_attributes", _STR),
        "TargetVariant": ("target_variant", _STR),
        "TargetContainerHostname": ("target_container_hostname", _STR),
        "InferenceId": ("inference_id", _STR),
        "InferenceComponentName": ("inference_component", _STR),
        "SessionId": ("session_id", _STR),
        "PrefixAwareId": ("", _UNSUPPORTED),
    },
    "Body",
)
_ASYNC: Final = _operation(
    "InvokeEndpointAsync",
    "async-invocations",
    False,
    {
        "ContentType": ("content_type", _STR),
        "Accept": ("accept", _STR),
        "CustomAttributes": ("custom_attributes", _STR),
        "InferenceId": ("inference_id", _STR),
        "InputLocation": ("input_location", _STR),
        "S3OutputPathExtension": ("", _UNSUPPORTED),
        "Filename": ("", _UNSUPPORTED),
        "RequestTTLSeconds": ("request_ttl_seconds", _INT),
        "InvocationTimeoutSeconds": ("invocation_timeout_seconds", _INT),
        "Body": ("", _UNSUPPORTED),
    },
    # botocore lets Body stand in for InputLocation; the gateway needs the S3 URI.
    "InputLocation",
)


def _parse(operation: _Operation, params: dict[str, Any]) -> tuple[str, bytes, dict[str, Any]]:
    """(endpoint, body, Gateway keywords), or ParamValidationError as botocore reports it.

    ``params`` is the caller's fresh ``**kwargs`` dict, so popping from it is
    safe. The usual call (str values, bytes Body) costs one lookup per
    parameter; anything else takes the slow path, which coerces or reports.
    """
    endpoint = params.pop("EndpointName", _MISSING)
    body = params.pop("Body", _MISSING) if operation.has_body else b""
    ok = type(endpoint) is str and type(body) is bytes
    options: dict[str, Any] = {}
    for key, value in params.items():
        spec = operation.params.get(key)
        if spec is not None and (
            (spec[1] == _STR and type(value) is str)
            or (spec[1] == _SECONDS and type(value) in (float, int))
        ):
            options[spec[0]] = value
        else:
            ok = False
    if ok and (
        not operation.required_params or all(name in params for name in operation.required_params)
    ):
        return endpoint, body, options
    return _parse_slowly(operation, endpoint, body, params)


def _parse_slowly(
    operation: _Operation, endpoint: Any, body: Any, params: dict[str, Any]
) -> tuple[str, bytes, dict[str, Any]]:
    """Coercions (bytearray, str, file-like Body; int/float values) and botocore's report."""
    problems: list[str] = []
    given = {"EndpointName": endpoint, "Body": body, **params}
    problems += [
        f'Missing required parameter in input: "{name}"'
        for name in operation.required
        if given.get(name, _MISSING) is _MISSING
    ]
    problems += [
        f'Unknown parameter in input: "{key}", must be one of: {operation.members}'
        for key in params
        if key not in operation.params
    ]
    if endpoint is not _MISSING and type(endpoint) is not str:
        problems.append(_type_problem("EndpointName", endpoint, "<class 'str'>"))
    if operation.has_body and body is not _MISSING:
        body = _coerce_body(body, problems)
    options: dict[str, Any] = {}
    for key, value in params.items():
        spec = operation.params.get(key)
        if spec is not None:
            _check_value(key, value, spec, options, problems)
    if problems:
        raise botocore.exceptions.ParamValidationError(report="\n".join(problems))
    return endpoint, body, options


def _check_value(
    key: str, value: Any, spec: tuple[str, str], options: dict[str, Any], problems: list[str]
) -> None:
    target, kind = spec
    if kind == _UNSUPPORTED:
        problems.append(f"Parameter {key} is not supported by gateway.compat")
    elif kind == _STR and type(value) is not str:
        problems.append(_type_problem(key, value, "<class 'str'>"))
    elif kind == _INT and (type(value) is not int):
        problems.append(_type_problem(key, value, "<class 'int'>"))
    elif kind == _SECONDS and (isinstance(value, bool) or not isinstance(value, int | float)):
        problems.append(_type_problem(key, value, "<class 'int'>, <class 'float'>"))
    else:
        options[target] = value


def _type_problem(key: str, value: Any, valid: str) -> str:
    return (
        f"Invalid type for parameter {key}, value: {value}, type: {type(value)}, "
        f"valid types: {valid}"
    )


def _coerce_body(body: Any, problems: list[str]) -> bytes:
    # botocore's blob type: bytes, bytearray, str (UTF-8) or anything with read().
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    read = getattr(body, "read", None)
    if callable(read):
        data = read()
        return data.encode() if isinstance(data, str) else bytes(data)
    problems.append(
        _type_problem("Body", body, "<class 'bytes'>, <class 'bytearray'>, file-like object")
    )
    return b""


# -- responses --------------------------------------------------------------


class StreamingBody:
    """``response["Body"]`` of invoke_endpoint: aiobotocore's AioStreamingBody API over bytes."""

    __slots__ = ("_data", "_position")
    _DEFAULT_CHUNK_SIZE = 1024

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def readable(self) -> bool:
        return self._position < len(self._data)

    async def read(self, amt: int | None = None) -> bytes:
        start = self._position
        end = len(self._data) if amt is None or amt < 0 else min(start + amt, len(self._data))
        self._position = end
        # The common case, one read() of everything, returns the bytes without a copy.
        return self._data if start == 0 and end == len(self._data) else self._data[start:end]

    async def readinto(self, buffer: bytearray) -> int:
        chunk = await self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    async def iter_chunks(self, chunk_size: int = _DEFAULT_CHUNK_SIZE) -> AsyncIterator[bytes]:
        while chunk := await self.read(chunk_size):
            yield chunk

    async def iter_lines(
        self, chunk_size: int = _DEFAULT_CHUNK_SIZE, keepends: bool = False
    ) -> AsyncIterator[bytes]:
        for line in (await self.read()).splitlines(keepends):
            yield line

    async def readlines(self) -> list[bytes]:
        return [line async for line in self.iter_lines()]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.iter_chunks(self._DEFAULT_CHUNK_SIZE)

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._position = len(self._data)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class EventStream:
    """``response["Body"]`` of the stream call: ``{"PayloadPart": {"Bytes": ...}}`` events."""

    def __init__(
        self,
        client: SageMakerRuntimeClient,
        endpoint: str,
        parts: AsyncIterator[bytes],
        first: bytes | None,
        pending: errors.GatewayError | None,
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._parts = parts
        self._first = first
        self._pending = pending
        self._closing: set[asyncio.Task[None]] = set()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        if self._first is not None:
            first, self._first = self._first, None
            yield {"PayloadPart": {"Bytes": first}}
        try:
            if self._pending is not None:
                raise self._pending
            async for part in self._parts:
                yield {"PayloadPart": {"Bytes": part}}
        except errors.GatewayError as exc:
            raise self._client._translate(exc, _STREAM, self._endpoint) from exc

    async def aclose(self) -> None:
        """Release the connection without reading the rest of the stream."""
        aclose = getattr(self._parts, "aclose", None)
        if aclose is not None:
            await aclose()

    def close(self) -> None:
        # botocore's EventStream.close() is synchronous; closing an async
        # generator is not, so it is scheduled (and referenced until done).
        task = asyncio.get_running_loop().create_task(self.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def _metadata(request_id: str | None, status: int, headers: Any, attempts: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {"RequestId": request_id} if request_id is not None else {}
    metadata["HTTPStatusCode"] = status
    metadata["HTTPHeaders"] = headers
    metadata["RetryAttempts"] = attempts
    return metadata


def _invoke_response(result: InvokeResult) -> dict[str, Any]:
    headers = result.headers
    response: dict[str, Any] = {"Body": StreamingBody(result.body)}
    # botocore includes a header-bound member only when the header was sent.
    if result.content_type is not None:
        response["ContentType"] = result.content_type
    if result.invoked_variant is not None:
        response["InvokedProductionVariant"] = result.invoked_variant
    if result.custom_attributes is not None:
        response["CustomAttributes"] = result.custom_attributes
    if result.new_session_id is not None:
        response["NewSessionId"] = result.new_session_id
    if result.closed_session_id is not None:
        response["ClosedSessionId"] = result.closed_session_id
    response["ResponseMetadata"] = _metadata(
        result.request_id,
        200,
        headers if type(headers) is dict else dict(headers),
        result.attempts - 1,
    )
    return response


def _async_response(result: AsyncInvocation) -> dict[str, Any]:
    response: dict[str, Any] = {}
    if result.inference_id is not None:
        response["InferenceId"] = result.inference_id
    if result.output_location is not None:
        response["OutputLocation"] = result.output_location
    if result.failure_location is not None:
        response["FailureLocation"] = result.failure_location
    headers = {"x-amzn-requestid": result.request_id} if result.request_id else {}
    response["ResponseMetadata"] = _metadata(result.request_id, 202, headers, 0)
    return response


# -- errors -----------------------------------------------------------------

_TRANSPORT_ERRORS: Final[tuple[tuple[type[errors.GatewayError], Any], ...]] = (
    (errors.ProtocolError, botocore.exceptions.ConnectionClosedError),
    (errors.TransportError, botocore.exceptions.EndpointConnectionError),
    (errors.NoHealthyTarget, botocore.exceptions.EndpointConnectionError),
    (errors.ConnectTimeout, botocore.exceptions.ConnectTimeoutError),
    (errors.PoolTimeout, botocore.exceptions.ConnectTimeoutError),
    (errors.TimeoutError, botocore.exceptions.ReadTimeoutError),
)


def _service_error_response(exc: errors.ServiceError) -> dict[str, Any]:
    """The ``response`` dict botocore builds for a rest-json error."""
    headers = {"x-amzn-requestid": exc.request_id} if exc.request_id else {}
    metadata = _metadata(exc.request_id, exc.status, headers, 0)
    if exc.status in _RETRIED_STATUSES or exc.code in _RETRIED_CODES:
        metadata["MaxAttemptsReached"] = True
    response: dict[str, Any] = {
        "Error": {"Message": exc.message, "Code": exc.code},
        "ResponseMetadata": metadata,
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


# -- the client -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientMeta:
    """The part of botocore's ``client.meta`` a SageMaker Runtime caller reads."""

    service_name: str
    region_name: str
    endpoint_url: str | None


class SageMakerRuntimeClient:
    """aiobotocore's ``sagemaker-runtime`` client, served by a :class:`Gateway`.

    Use as an async context manager (or call ``close()``), as with aiobotocore.
    """

    def __init__(
        self, gateway: Gateway, exceptions: Any, meta: ClientMeta, *, owns_gateway: bool
    ) -> None:
        self._gateway = gateway
        # Built once per session (botocore's ClientExceptionsFactory), never per call.
        self.exceptions = exceptions
        self.meta = meta
        self._owns_gateway = owns_gateway

    @property
    def gateway(self) -> Gateway:
        return self._gateway

    async def __aenter__(self) -> Self:
        if self._owns_gateway:
            await self._gateway.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_gateway:
            await self._gateway.aclose()

    async def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        """InvokeEndpoint, as ``aiobotocore`` calls it."""
        endpoint, body, options = _parse(_INVOKE, params)
        try:
            result = await self._gateway.invoke(endpoint, body, **options)
        except errors.GatewayError as exc:
            raise self._translate(exc, _INVOKE, endpoint) from exc
        return _invoke_response(result)

    async def invoke_endpoint_with_response_stream(self, **params: Any) -> dict[str, Any]:
        """InvokeEndpointWithResponseStream; iterate ``response["Body"]`` with ``async for``."""
        endpoint, body, options = _parse(_STREAM, params)
        parts = self._gateway.invoke_stream(endpoint, body, **options)
        first: bytes | None = None
        pending: errors.GatewayError | None = None
        # The gateway sends on the first step of its generator. Taking that
        # step here makes HTTP errors raise from this call, as in aiobotocore;
        # an error event inside the stream is kept for the iteration instead.
        try:
            first = await anext(parts)
        except StopAsyncIteration:
            pass
        except errors.ServiceError as exc:
            if exc.code not in _STREAM_ERROR_CODES:
                raise self._translate(exc, _STREAM, endpoint) from exc
            pending = exc
        except errors.GatewayError as exc:
            raise self._translate(exc, _STREAM, endpoint) from exc
        response: dict[str, Any] = {"Body": EventStream(self, endpoint, parts, first, pending)}
        # Header-bound members, as botocore includes them: only when sent.
        response.update(
            (key, value)
            for key, value in (
                ("ContentType", parts.content_type),
                ("InvokedProductionVariant", parts.invoked_variant),
                ("CustomAttributes", parts.custom_attributes),
            )
            if value is not None
        )
        headers = dict(parts.response_headers)
        response["ResponseMetadata"] = _metadata(parts.request_id, 200, headers, 0)
        return response

    async def invoke_endpoint_async(self, **params: Any) -> dict[str, Any]:
        """InvokeEndpointAsync (the input is already in S3 at ``InputLocation``)."""
        endpoint, _, options = _parse(_ASYNC, params)
        try:
            result = await self._gateway.invoke_async(endpoint, **options)
        except errors.GatewayError as exc:
            raise self._translate(exc, _ASYNC, endpoint) from exc
        return _async_response(result)

    def _translate(self, exc: errors.GatewayError, operation: _Operation, endpoint: str) -> Any:
        """The botocore exception aiobotocore would have raised (see the module docstring)."""
        if isinstance(exc, errors.ServiceError):
            if exc.code in _STREAM_ERROR_CODES:
                error = {"Error": {"Code": exc.code, "Message": exc.message}}
                return botocore.exceptions.EventStreamError(error, operation.name)
            error_class = self.exceptions.from_code(exc.code)
            return error_class(_service_error_response(exc), operation.name)
        if isinstance(exc, errors.InvalidRequest):
            return botocore.exceptions.ParamValidationError(report=str(exc))
        for gateway_class, botocore_class in _TRANSPORT_ERRORS:
            if isinstance(exc, gateway_class):
                return botocore_class(endpoint_url=self._url(operation, endpoint), error=exc)
        return botocore.exceptions.HTTPClientError(error=exc)

    def _url(self, operation: _Operation, endpoint: str) -> str:
        origin = self._gateway.origin
        base = f"{origin.scheme}://{origin.host_header}" if origin else self.meta.endpoint_url
        return f"{base or ''}/endpoints/{endpoint}/{operation.path}"


# -- sessions ---------------------------------------------------------------


class Session:
    """Stands in for ``aiobotocore.session.AioSession`` for SageMaker Runtime clients.

    Clients of one session share their exception classes, as in botocore.
    """

    def __init__(self, *, profile: str | None = None, botocore_session: Any = None) -> None:
        self._botocore = botocore_session or botocore.session.get_session()
        self._profile = profile
        if profile is not None:
            self._botocore.set_config_variable("profile", profile)
        self._exceptions: Any = None

    @property
    def exceptions(self) -> Any:
        """botocore's modeled exception classes for sagemaker-runtime, built on first use."""
        if self._exceptions is None:
            model = self._botocore.get_service_model(SERVICE_NAME)
            factory = self._botocore.get_component("exceptions_factory")
            self._exceptions = factory.create_client_exceptions(model)
        return self._exceptions

    def create_client(
        self,
        service_name: str,
        region_name: str | None = None,
        api_version: str | None = None,
        use_ssl: bool = True,
        verify: bool | str | None = None,
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        config: Any = None,
        aws_account_id: str | None = None,
        *,
        gateway: Gateway | None = None,
    ) -> SageMakerRuntimeClient:
        """Same arguments as aiobotocore's; ``gateway=`` wraps a Gateway you own instead.

        ``api_version``, ``use_ssl`` and ``aws_account_id`` are accepted and
        ignored (SageMaker Runtime has one API version and an https endpoint).
        ``config`` (a botocore/aiobotocore ``Config``): the options you set
        explicitly among connect_timeout, read_timeout, max_pool_connections,
        region_name, use_fips_endpoint and use_dualstack_endpoint are applied;
        retries are the gateway's own.
        """
        if service_name != SERVICE_NAME:
            raise botocore.exceptions.UnknownServiceError(
                service_name=service_name, known_service_names=SERVICE_NAME
            )
        options = _explicit_options(config)
        region = (
            region_name
            or options.get("region_name")
            or (gateway.config.region if gateway is not None else None)
            or self._default_region()
        )
        owns_gateway = gateway is None
        if gateway is None:
            gateway = Gateway(
                region,
                endpoint_url=endpoint_url,
                credentials=_credentials(
                    aws_access_key_id, aws_secret_access_key, aws_session_token
                ),
                profile=self._profile,
                pool=_pool(options, verify),
                use_fips_endpoint=bool(options.get("use_fips_endpoint", False)),
                use_dualstack_endpoint=bool(options.get("use_dualstack_endpoint", False)),
            )
        meta = ClientMeta(SERVICE_NAME, region, endpoint_url or gateway.config.endpoint_url)
        return SageMakerRuntimeClient(gateway, self.exceptions, meta, owns_gateway=owns_gateway)

    def _default_region(self) -> str:
        region = self._botocore.get_config_variable("region")
        if not region:
            raise botocore.exceptions.NoRegionError()
        return str(region)


def _explicit_options(config: Any) -> dict[str, Any]:
    # botocore Config remembers which options the caller set; the others are
    # botocore's defaults (10 connections, 60 s timeouts), not the user's wish.
    if config is None:
        return {}
    return dict(getattr(config, "_user_provided_options", {}))


def _pool(options: Mapping[str, Any], verify: bool | str | None) -> dict[str, Any] | None:
    pool: dict[str, Any] = {}
    if options.get("connect_timeout") is not None:
        pool["connect_timeout_ms"] = float(options["connect_timeout"]) * 1000
    if options.get("read_timeout") is not None:
        pool["read_timeout_ms"] = float(options["read_timeout"]) * 1000
    if options.get("max_pool_connections") is not None:
        connections = int(options["max_pool_connections"])
        pool["max_connections"] = connections
        pool["prewarm"] = min(2, connections)
    if verify is False:
        pool["tls_verify"] = False
    return pool or None


def _credentials(
    access_key: str | None, secret_key: str | None, token: str | None
) -> tuple[str, str] | tuple[str, str, str] | None:
    if access_key is None and secret_key is None:
        return None  # the provider chain, as botocore
    if not access_key or not secret_key:
        missing = "aws_secret_access_key" if access_key else "aws_access_key_id"
        raise botocore.exceptions.PartialCredentialsError(provider="explicit", cred_var=missing)
    return (access_key, secret_key, token) if token else (access_key, secret_key)


_default_session: Session | None = None


def get_session() -> Session:
    """A process-wide :class:`Session`, like ``aiobotocore.session.get_session()``."""
    global _default_session
    if _default_session is None:
        _default_session = Session()
    return _default_session


def create_client(service_name: str, **kwargs: Any) -> SageMakerRuntimeClient:
    """``get_session().create_client(...)``: use as ``async with create_client(...) as c``."""
    return get_session().create_client(service_name, **kwargs)
