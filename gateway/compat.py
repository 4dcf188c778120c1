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
``InvalidHeaderValue`` (CR, LF, control chars)  ``botocore.exceptions.HTTPClientError`` (as
                                                aiohttp refuses to send it)
other ``InvalidRequest`` (refused before        ``client.exceptions.ValidationError`` (400),
sending: name, length, size)                    as SageMaker answers the request botocore
                                                would have sent
any other ``GatewayError``                      ``botocore.exceptions.HTTPClientError``
==============================================  =========================================

Parameters are validated by botocore's own validator (``ParamValidationError``
with botocore's report) against the same service model the gateway's
vocabulary comes from, so every member of every operation is accepted.

The gateway error is kept as ``__cause__``. Differences from aiobotocore:
an error's ``ResponseMetadata["HTTPHeaders"]`` holds only the request id
(the gateway's errors do not keep the response headers); the stream call
returns once the first event arrived rather than after the response head.
The extra keyword ``Timeout=`` (seconds) sets the call's deadline.
``Config`` options the gateway cannot honour are refused when the client is
created (``botocore.exceptions.InvalidConfigError``), never ignored.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar, overload

import botocore.exceptions
import botocore.session
import botocore.validate
from botocore.hooks import HierarchicalEmitter

from gateway import errors
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, service_model
from gateway._client import Gateway
from gateway._invoke import api
from gateway._invoke.api import AsyncInvocation, InvokeResult

__all__ = [
    "ClientMeta",
    "EventStream",
    "GatewayRuntimeClient",
    "InferenceRouterRuntimeClient",
    "SageMakerRuntimeClient",
    "Session",
    "StreamingBody",
    "create_client",
    "get_session",
]

SERVICE_NAME: Final = "sagemaker-runtime"
_T = TypeVar("_T")
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

_STR, _INT, _BLOB, _SECONDS = "str", "int", "blob", "seconds"
_KINDS: Final = {"string": _STR, "integer": _INT, "blob": _BLOB}


@dataclass(frozen=True, slots=True)
class _Operation:
    """One API operation's parameters, precomputed so a call costs a dict lookup each."""

    name: str
    path: str  # after /endpoints/{name}, for error messages
    operation: api.Operation
    uri_member: str  # the resource the path names: EndpointName, InferenceRouterName...
    positional: frozenset[str]  # that member and a required Body: read apart from the rest
    has_body: bool  # Body is required and passed positionally (not async's inline Body)
    # API name -> (place, kind), every member of the model but EndpointName and a
    # required Body, plus our Timeout. The place is the member's in the call's
    # member tuple (Operation.headers), or _INLINE_BODY / _TIMEOUT.
    params: Mapping[str, tuple[int, str]]
    required_params: tuple[str, ...]  # required, other than EndpointName and Body
    nonempty: frozenset[str]  # string members the model gives a minimum length
    input_shape: Any  # botocore's, for its own validation report


_INLINE_BODY, _TIMEOUT = -1, -2


def _operation(operation: api.Operation) -> _Operation:
    """The compat view of one operation of the SageMaker vocabulary."""
    body = operation.by_name.get("Body")
    has_body = body is not None and body.required
    params = {
        m.name: (
            operation.index(m.name) if m.location == "header" else _INLINE_BODY,
            _KINDS[m.kind],
        )
        for m in operation.request
        if m.location != "uri" and not (has_body and m.name == "Body")
    }
    params["Timeout"] = (_TIMEOUT, _SECONDS)  # our extension: the call's deadline
    return _Operation(
        operation.name,
        operation.action,
        operation,
        operation.uri_member,
        frozenset({operation.uri_member, "Body"}),
        has_body,
        params,
        tuple(m.name for m in operation.request if m.required and m.location == "header"),
        frozenset(m.name for m in operation.request if m.kind == "string" and m.min_length),
        operation.input_shape,
    )


_INVOKE: Final = _operation(api.INVOKE)
_STREAM: Final = _operation(api.INVOKE_STREAM)
_ASYNC: Final = _operation(api.INVOKE_ASYNC)
_VALIDATOR: Final = botocore.validate.ParamValidator()


@dataclass(slots=True)
class _Call:
    """One call's arguments as Gateway's ``*_members`` methods take them."""

    endpoint: str
    body: bytes  # the payload (b"" for InvokeEndpointAsync: see ``inline_body``)
    members: tuple[object, ...]  # in the operation's Operation.headers order
    timeout: float | None
    inline_body: bytes | None = None  # InvokeEndpointAsync's optional inline Body


def _call(operation: _Operation, endpoint: str, body: bytes, options: dict[str, Any]) -> _Call:
    """The parsed parameters as a call: the members in their places, as given."""
    values: list[object] = [None] * len(operation.operation.headers)
    call = _Call(endpoint, body, (), None)
    for key, value in options.items():
        index = operation.params[key][0]
        if index >= 0:
            values[index] = value
        elif index == _TIMEOUT:
            call.timeout = value
        else:
            call.inline_body = value
    call.members = tuple(values)
    return call


def _parse(operation: _Operation, params: dict[str, Any]) -> _Call:
    """The call's arguments, or ParamValidationError as botocore reports it.

    ``params`` is the caller's fresh ``**kwargs`` dict, so popping from it is
    safe. The usual call (str values, bytes Body) costs one lookup per
    parameter; anything else takes the slow path, which coerces or reports.
    """
    endpoint = params.get(operation.uri_member, _MISSING)
    body = params.get("Body", _MISSING) if operation.has_body else b""
    ok = (
        type(endpoint) is str
        and (endpoint or operation.uri_member not in operation.nonempty)
        and type(body) is bytes
    )
    options: dict[str, Any] = {}
    for key, value in params.items():
        spec = operation.params.get(key)
        if spec is not None and (
            (spec[1] == _STR and type(value) is str and (value or key not in operation.nonempty))
            or (spec[1] == _SECONDS and type(value) in (float, int))
        ):
            options[key] = value
        elif spec is None and key in operation.positional:
            continue  # EndpointName (or the like), or a required Body: read above
        else:
            ok = False
    if ok and (
        not operation.required_params or all(name in params for name in operation.required_params)
    ):
        return _call(operation, endpoint, body, options)
    return _parse_slowly(operation, endpoint, body, params)


def _parse_slowly(operation: _Operation, endpoint: Any, body: Any, params: dict[str, Any]) -> _Call:
    """botocore's own validation report, then coercions (bytearray, str, file-like blobs)."""
    # In the caller's order, as botocore reports problems in it.
    given = {key: value for key, value in params.items() if key != "Timeout"}
    report = _VALIDATOR.validate(given, operation.input_shape)
    problems = [report.generate_report()] if report.has_errors() else []
    timeout = params.get("Timeout", _MISSING)
    if timeout is not _MISSING and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float)
    ):
        problems.append(_type_problem("Timeout", timeout, "<class 'int'>, <class 'float'>"))
    if problems:
        raise botocore.exceptions.ParamValidationError(report="\n".join(problems))
    options: dict[str, Any] = {}
    for key, value in params.items():
        if key not in operation.params:
            continue  # EndpointName, or a required Body
        kind = operation.params[key][1]
        options[key] = _coerce_blob(value) if kind == _BLOB else value
    return _call(operation, endpoint, _coerce_blob(body) if operation.has_body else b"", options)


def _type_problem(key: str, value: Any, valid: str) -> str:
    return (
        f"Invalid type for parameter {key}, value: {value}, type: {type(value)}, "
        f"valid types: {valid}"
    )


def _coerce_blob(body: Any) -> bytes:
    # botocore's blob type (validated already): bytes, bytearray, str (UTF-8) or read().
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    data = body.read()
    return data.encode() if isinstance(data, str) else bytes(data)


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
        client: _Client,
        endpoint: str,
        parts: AsyncIterator[bytes],
        first: bytes | None,
        pending: errors.GatewayError | None,
        operation: _Operation = _STREAM,
    ) -> None:
        self._client = client
        self._operation = operation
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
            raise self._client._translate(exc, self._operation, self._endpoint) from exc

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


# InvokeEndpoint's header-bound response members: (member, result field).
_INVOKE_FIELDS: Final = tuple((member.name, field) for member, field in api.RESULT_MEMBERS)


def _invoke_response(
    result: InvokeResult, fields: tuple[tuple[str, str], ...] = _INVOKE_FIELDS
) -> dict[str, Any]:
    """A body answer: ``Body``, the header-bound ``fields`` that were sent, the metadata."""
    headers = result.headers
    response: dict[str, Any] = {"Body": StreamingBody(result.body)}
    # botocore includes a header-bound member only when the header was sent.
    for member, field_name in fields:
        value = result.field(field_name)
        if value is not None:
            response[member] = value
    response["ResponseMetadata"] = _metadata(
        result.request_id,
        200,
        headers if type(headers) is dict else dict(headers),
        result.attempts - 1,
    )
    return response


def _async_response(result: AsyncInvocation, attempts: int) -> dict[str, Any]:
    response: dict[str, Any] = {}
    if result.inference_id is not None:
        response["InferenceId"] = result.inference_id
    if result.output_location is not None:
        response["OutputLocation"] = result.output_location
    if result.failure_location is not None:
        response["FailureLocation"] = result.failure_location
    headers = {"x-amzn-requestid": result.request_id} if result.request_id else {}
    response["ResponseMetadata"] = _metadata(result.request_id, 202, headers, attempts - 1)
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
    metadata = _metadata(exc.request_id, exc.status, headers, exc.attempts - 1)
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
    # botocore's event hooks (see "botocore-style event hooks" below).
    events: ClientEvents = field(default_factory=lambda: ClientEvents())


class _Client:
    """What every client shares: its Gateway, lifecycle, error mapping and stream opening."""

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

    def _translate(self, exc: errors.GatewayError, operation: _Operation, name: str) -> Any:
        raise NotImplementedError

    def _is_stream_event(self, exc: errors.ServiceError) -> bool:
        """An error event inside the stream (raised while iterating), not an HTTP answer."""
        return exc.code in _STREAM_ERROR_CODES

    async def _open_stream(
        self, operation: _Operation, name: str, parts: AsyncIterator[bytes]
    ) -> EventStream:
        """Take the stream's first step: HTTP errors raise from the call, as in botocore;
        an error event inside the stream is kept for the iteration instead."""
        first: bytes | None = None
        pending: errors.GatewayError | None = None
        try:
            first = await anext(parts)
        except StopAsyncIteration:
            pass
        except errors.ServiceError as exc:
            if not self._is_stream_event(exc):
                raise self._translate(exc, operation, name) from exc
            pending = exc
        except errors.GatewayError as exc:
            raise self._translate(exc, operation, name) from exc
        return EventStream(self, name, parts, first, pending, operation)


class SageMakerRuntimeClient(_Client):
    """aiobotocore's ``sagemaker-runtime`` client, served by a :class:`Gateway`.

    Use as an async context manager (or call ``close()``), as with aiobotocore.
    """

    async def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        """InvokeEndpoint, as ``aiobotocore`` calls it."""
        if self.meta.events.active:
            return await _with_events(self, _INVOKE, params, self._invoke_endpoint)
        return await self._invoke_endpoint(params)

    async def _invoke_endpoint(self, params: dict[str, Any]) -> dict[str, Any]:
        call = _parse(_INVOKE, params)
        try:
            result = await _answer(
                self._gateway.call(
                    _INVOKE.operation, call.endpoint, call.body, call.members, timeout=call.timeout
                )
            )
        except errors.GatewayError as exc:
            raise self._translate(exc, _INVOKE, call.endpoint) from exc
        return _invoke_response(result)

    async def invoke_endpoint_with_response_stream(self, **params: Any) -> dict[str, Any]:
        """InvokeEndpointWithResponseStream; iterate ``response["Body"]`` with ``async for``."""
        if self.meta.events.active:
            return await _with_events(self, _STREAM, params, self._invoke_stream)
        return await self._invoke_stream(params)

    async def _invoke_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        call = _parse(_STREAM, params)
        endpoint = call.endpoint
        parts = await _answer(
            self._gateway.call(
                _STREAM.operation, endpoint, call.body, call.members, timeout=call.timeout
            )
        )
        # The gateway sends on the first step of its generator: taken here.
        response: dict[str, Any] = {"Body": await self._open_stream(_STREAM, endpoint, parts)}
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
        if self.meta.events.active:
            return await _with_events(self, _ASYNC, params, self._invoke_async)
        return await self._invoke_async(params)

    async def _invoke_async(self, params: dict[str, Any]) -> dict[str, Any]:
        call = _parse(_ASYNC, params)
        try:
            result = await _answer(
                self._gateway.call(
                    _ASYNC.operation,
                    call.endpoint,
                    call.inline_body,
                    call.members,
                    timeout=call.timeout,
                )
            )
        except errors.GatewayError as exc:
            raise self._translate(exc, _ASYNC, call.endpoint) from exc
        return _async_response(result, 1)

    def _translate(self, exc: errors.GatewayError, operation: _Operation, endpoint: str) -> Any:
        """The botocore exception aiobotocore would have raised (see the module docstring)."""
        if isinstance(exc, errors.ServiceError):
            if self._is_stream_event(exc):
                error = {"Error": {"Code": exc.code, "Message": exc.message}}
                return botocore.exceptions.EventStreamError(error, operation.name)
            error_class = self.exceptions.from_code(exc.code)
            return error_class(_service_error_response(exc), operation.name)
        if isinstance(exc, errors.InvalidHeaderValue):
            # aiohttp refuses to send such a header: botocore wraps that as HTTPClientError.
            return botocore.exceptions.HTTPClientError(error=exc)
        if isinstance(exc, errors.InvalidRequest):
            # botocore sends it; SageMaker refuses it: the same ClientError subclass.
            refused = errors.ValidationError(str(exc), status=400)
            return self.exceptions.ValidationError(_service_error_response(refused), operation.name)
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
        self._runtime_exceptions: dict[str, Any] = {}

    @property
    def exceptions(self) -> Any:
        """botocore's modeled exception classes for sagemaker-runtime, built on first use."""
        if self._exceptions is None:
            model = self._botocore.get_service_model(SERVICE_NAME)
            factory = self._botocore.get_component("exceptions_factory")
            self._exceptions = factory.create_client_exceptions(model)
        return self._exceptions

    @overload
    def create_client(  # type: ignore[overload-overlap]  # a Literal beside str, as typeshed does
        self,
        service_name: Literal["sagemaker-inference-router-runtime"],
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
    ) -> InferenceRouterRuntimeClient: ...

    @overload
    def create_client(  # type: ignore[overload-overlap]
        self,
        service_name: Literal["sagemaker-gateway-runtime"],
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
    ) -> GatewayRuntimeClient: ...

    @overload
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
    ) -> SageMakerRuntimeClient: ...

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
    ) -> SageMakerRuntimeClient | InferenceRouterRuntimeClient | GatewayRuntimeClient:
        """Same arguments as aiobotocore's; ``gateway=`` wraps a Gateway you own instead.

        ``api_version``, ``use_ssl`` and ``aws_account_id`` are accepted and
        ignored (SageMaker Runtime has one API version and an https endpoint).
        ``verify``: False skips TLS verification, a path is a CA bundle.
        ``config`` (a botocore/aiobotocore ``Config``): see ``_SUPPORTED_OPTIONS``;
        any other option set explicitly raises ``InvalidConfigError``.
        """
        if service_name != SERVICE_NAME and service_name not in RUNTIME_SERVICES:
            raise botocore.exceptions.UnknownServiceError(
                service_name=service_name,
                known_service_names=", ".join((SERVICE_NAME, *RUNTIME_SERVICES)),
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
                use_fips_endpoint=options.get("use_fips_endpoint"),
                use_dualstack_endpoint=options.get("use_dualstack_endpoint"),
                ignore_configured_endpoint_urls=options.get("ignore_configured_endpoint_urls"),
                ca_bundle=verify if isinstance(verify, str) else None,
                user_agent_extra=options.get("user_agent_extra"),
                user_agent_appid=options.get("user_agent_appid"),
                defaults=self._retry_template(options.get("retries")),
            )
        elif set(options) - {"region_name"} or verify is not None or endpoint_url is not None:
            raise botocore.exceptions.InvalidConfigError(
                error_msg="gateway.compat: a client that wraps a Gateway takes its settings "
                "from that Gateway; pass only region_name with gateway="
            )
        meta = ClientMeta(service_name, region, endpoint_url or gateway.config.endpoint_url)
        if service_name in RUNTIME_SERVICES:
            runtime = RUNTIME_SERVICES[service_name]
            exceptions = self.exceptions_of(service_name)
            client = runtime(gateway, exceptions, meta, owns_gateway=owns_gateway)
            assert isinstance(client, InferenceRouterRuntimeClient | GatewayRuntimeClient)
            return client
        return SageMakerRuntimeClient(gateway, self.exceptions, meta, owns_gateway=owns_gateway)

    def exceptions_of(self, service_name: str) -> Any:
        """botocore's modeled exception classes of ``service_name``, built once per session."""
        if service_name == SERVICE_NAME:
            return self.exceptions
        built = self._runtime_exceptions.get(service_name)
        if built is None:
            model = service_model(service_name)  # an older botocore: names the release
            factory = self._botocore.get_component("exceptions_factory")
            built = self._runtime_exceptions[service_name] = factory.create_client_exceptions(model)
        return built

    def _default_region(self) -> str:
        region = self._botocore.get_config_variable("region")
        if not region:
            raise botocore.exceptions.NoRegionError()
        return str(region)

    def _retry_template(self, retries: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The route template's retry policy from Config(retries=...), else from botocore.

        botocore counts ``max_attempts`` after the first attempt and
        ``total_max_attempts`` (and AWS_MAX_ATTEMPTS, a profile's
        max_attempts) including it; the gateway's ``retry.max_attempts``
        includes it. Unset everywhere: the gateway's own default policy.
        """
        retries = dict(retries or {})
        mode = retries.get("mode") or self._botocore.get_config_variable("retry_mode")
        if mode == "adaptive":
            raise botocore.exceptions.InvalidConfigError(
                error_msg='gateway.compat: retry mode "adaptive" (client-side rate limiting) '
                'is not supported; use "standard" or "legacy" (the gateway budgets retries)'
            )
        total = retries.get("total_max_attempts")
        if total is None and retries.get("max_attempts") is not None:
            total = int(retries["max_attempts"]) + 1
        if total is None:
            total = self._botocore.get_config_variable("max_attempts")
        if total is None:
            return None
        return {"retry": {"max_attempts": max(1, int(total))}}


# botocore Config options compat applies, or that have no effect on
# sagemaker-runtime in botocore either (no host prefix, endpoint discovery,
# compression, checksums, S3 or account-id endpoints for this service).
_SUPPORTED_OPTIONS: Final = frozenset(
    {
        "region_name",
        "connect_timeout",
        "read_timeout",
        "max_pool_connections",
        "use_fips_endpoint",
        "use_dualstack_endpoint",
        "ignore_configured_endpoint_urls",
        "retries",
        "user_agent_extra",
        "user_agent_appid",
        "inject_host_prefix",
        "endpoint_discovery_enabled",
        "disable_request_compression",
        "request_min_compression_size_bytes",
        "request_checksum_calculation",
        "response_checksum_validation",
        "account_id_endpoint_mode",
        "s3",
        "s3_disable_express_session_auth",
    }
)
# Options with a value compat honours as botocore does.
_ACCEPTED_VALUES: Final[Mapping[str, tuple[object, ...]]] = {
    "signature_version": ("v4", "s3v4"),
    "parameter_validation": (True,),
    "tcp_keepalive": (True,),  # the gateway always sets TCP keepalive
    "defaults_mode": ("legacy",),
}


def _explicit_options(config: Any) -> dict[str, Any]:
    """The options the caller set on ``config``; refuses those compat cannot honour.

    botocore Config remembers which options the caller set; the others are
    botocore's defaults (10 connections, 60 s timeouts), not the user's wish.
    """
    if config is None:
        return {}
    options = dict(getattr(config, "_user_provided_options", {}))
    for name, value in options.items():
        accepted = _ACCEPTED_VALUES.get(name)
        if name in _SUPPORTED_OPTIONS or (accepted is not None and value in accepted):
            continue
        hint = f" (supported: {', '.join(map(repr, accepted))})" if accepted else ""
        raise botocore.exceptions.InvalidConfigError(
            error_msg=f"gateway.compat does not support Config({name}={value!r}){hint}"
        )
    return options


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


@overload
def create_client(
    service_name: Literal["sagemaker-inference-router-runtime"], **kwargs: Any
) -> InferenceRouterRuntimeClient: ...


@overload
def create_client(
    service_name: Literal["sagemaker-gateway-runtime"], **kwargs: Any
) -> GatewayRuntimeClient: ...


@overload
def create_client(service_name: str, **kwargs: Any) -> SageMakerRuntimeClient: ...


def create_client(
    service_name: str, **kwargs: Any
) -> SageMakerRuntimeClient | InferenceRouterRuntimeClient | GatewayRuntimeClient:
    """``get_session().create_client(...)``: use as ``async with create_client(...) as c``."""
    return get_session().create_client(service_name, **kwargs)


# -- botocore-style event hooks ------------------------------------------------------
#
# X-Ray, OpenTelemetry and home-grown instrumentation register handlers on
# ``client.meta.events`` (botocore's HierarchicalEmitter). The compat client
# has no botocore request pipeline, so it emits the call-level events itself,
# with botocore's names and keyword arguments, only once a handler is
# registered (until then a call pays one attribute check):
#
#   provide-client-params.sagemaker-runtime.<Operation>  params, model, context
#       (a handler may return new params, as in botocore)
#   before-parameter-build.sagemaker-runtime.<Operation> params, model, context
#   before-call.sagemaker-runtime.<Operation>            model, params (the request
#       dict: url_path, query_string, method, headers, body, url, context),
#       request_signer=None, context
#   after-call.sagemaker-runtime.<Operation>             http_response, parsed, model,
#       context
#   after-call-error.sagemaker-runtime.<Operation>       exception, context
#
# ``parsed["ResponseMetadata"]["RetryAttempts"]`` counts the gateway's extra
# attempts (hedges and retries). Per-HTTP-attempt events (before-send, needs-retry, ...) are not
# emitted: the gateway signs, sends, hedges and retries itself; observe those
# through ``client.gateway.add_hook`` (gateway._observe.events) instead.


class ClientEvents(HierarchicalEmitter):  # type: ignore[misc]
    """``client.meta.events``: botocore's own emitter, with an ``active`` flag."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False
        self._models: dict[str, Any] = {}

    def register(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register(event_name, handler, *args, **kwargs)
        self.active = True

    def register_first(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register_first(event_name, handler, *args, **kwargs)
        self.active = True

    def register_last(self, event_name: str, handler: Any, *args: Any, **kwargs: Any) -> None:
        super().register_last(event_name, handler, *args, **kwargs)
        self.active = True

    def operation_model(self, name: str) -> Any:
        """botocore's OperationModel of ``name`` (loaded once, when first needed)."""
        model = self._models.get(name)
        if model is None:
            service = botocore.session.get_session().get_service_model(SERVICE_NAME)
            model = self._models[name] = service.operation_model(name)
        return model


@dataclass(frozen=True, slots=True)
class _HttpResponse:
    """What ``after-call`` handlers read of botocore's AWSResponse."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes = b""


async def _with_events(
    client: SageMakerRuntimeClient,
    operation: _Operation,
    params: dict[str, Any],
    call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    events = client.meta.events
    suffix = f"{SERVICE_NAME}.{operation.name}"
    model = events.operation_model(operation.name)
    context: dict[str, Any] = {"client_region": client.meta.region_name}
    _, replaced = events.emit_until_response(
        f"provide-client-params.{suffix}", params=params, model=model, context=context
    )
    if replaced is not None:
        params = replaced
    events.emit(f"before-parameter-build.{suffix}", params=params, model=model, context=context)
    endpoint = params.get("EndpointName")
    request = {
        "url_path": f"/endpoints/{endpoint}/{operation.path}",
        "query_string": "",
        "method": "POST",
        "headers": {},
        "body": params.get("Body", b""),
        "url": client._url(operation, str(endpoint)),
        "context": context,
    }
    events.emit(
        f"before-call.{suffix}", model=model, params=request, request_signer=None, context=context
    )
    try:
        response = await call(params)
    except Exception as exc:
        events.emit(f"after-call-error.{suffix}", exception=exc, context=context)
        raise
    metadata = response.get("ResponseMetadata", {})
    http_response = _HttpResponse(
        metadata.get("HTTPStatusCode", 200), metadata.get("HTTPHeaders", {})
    )
    events.emit(
        f"after-call.{suffix}",
        http_response=http_response,
        parsed=response,
        model=model,
        context=context,
    )
    return response


# -- the inference router and Global Inference Gateway runtimes ---------------------
#
# ``create_client("sagemaker-inference-router-runtime")`` and
# ``create_client("sagemaker-gateway-runtime")`` answer as botocore's clients of
# those services do (botocore >= 1.44.8; aiobotocore cannot call them yet): the same
# parameter validation, response dicts and exception classes, errors mapped as the
# table above says, each service's own codes (``ValidationException``...). They emit
# no botocore event hooks (``client.meta.events``) yet: observe them through
# ``client.gateway.add_hook``.


def _runtime_operation(service: str, name: str) -> _Operation | None:
    operation = api.operation_table().get((service, name))
    return _operation(operation) if operation is not None else None


@functools.cache
def _modeled_errors(service: str) -> frozenset[str]:
    """The error codes ``service``'s model names (botocore has a class for each)."""
    return frozenset(shape.name for shape in service_model(service).error_shapes)


# Result fields by the response member they answer (InvokeInferenceRouter's headers).
_ROUTER_RESULT_FIELDS: Final = (
    ("ContentType", "content_type"),
    ("InvokedRoutedResourceArn", "routed_resource_arn"),
    ("RoutingReason", "routing_reason"),
    ("InvokedProductionVariant", "invoked_variant"),
    ("CustomAttributes", "custom_attributes"),
)


class _RuntimeClient(_Client):
    """What both new runtimes' clients share: the service's operations and error mapping."""

    SERVICE: str = ""

    def _operation(self, name: str) -> _Operation:
        operation = _runtime_operation(self.SERVICE, name)
        if operation is None:
            service_model(self.SERVICE)  # raises, naming the botocore release needed
            raise AssertionError(f"{name} is not in {self.SERVICE}'s model")
        return operation

    def _is_stream_event(self, exc: errors.ServiceError) -> bool:
        # These models also name the event codes as HTTP errors (a status of 400 or more).
        return exc.code in _STREAM_ERROR_CODES and exc.status < 400

    async def _call(self, operation: _Operation, name: str, answer: Awaitable[_T]) -> _T:
        """The gateway's answer, or the botocore exception for its error."""
        try:
            return await answer
        except errors.GatewayError as exc:
            raise self._translate(exc, operation, name) from exc

    def _translate(self, exc: errors.GatewayError, operation: _Operation, name: str) -> Any:
        """The botocore exception botocore's client of this service would have raised."""
        if isinstance(exc, errors.ServiceError):
            if self._is_stream_event(exc):
                error = {"Error": {"Code": exc.code, "Message": exc.message}}
                return botocore.exceptions.EventStreamError(error, operation.name)
            response = _service_error_response(exc)
            if exc.code in _modeled_errors(self.SERVICE):
                # botocore puts a modeled error's members at the top level too.
                response["Message"] = exc.message
            if exc.retry_after is not None:
                seconds = f"{exc.retry_after:g}"
                response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] = seconds
            if isinstance(exc, errors.ResourceNotFound):
                for key, value in (
                    ("ResourceId", exc.resource_id),
                    ("ResourceType", exc.resource_type),
                ):
                    if value is not None:
                        response[key] = value
            return self.exceptions.from_code(exc.code)(response, operation.name)
        if isinstance(exc, errors.InvalidHeaderValue):
            return botocore.exceptions.HTTPClientError(error=exc)
        if isinstance(exc, errors.BodyTooLarge):
            # Both runtimes answer an oversized body so (the router's model does not name it).
            too_large = errors.PayloadTooLarge(str(exc), status=413)
            return self._translate(too_large, operation, name)
        if isinstance(exc, errors.InvalidRequest):
            refused = errors.ValidationError(str(exc), code="ValidationException", status=400)
            error_class = self.exceptions.from_code("ValidationException")
            return error_class(_service_error_response(refused), operation.name)
        for gateway_class, botocore_class in _TRANSPORT_ERRORS:
            if isinstance(exc, gateway_class):
                url = f"{self.meta.endpoint_url or ''}{operation.operation.path(name)}"
                return botocore_class(endpoint_url=url, error=exc)
        return botocore.exceptions.HTTPClientError(error=exc)


class InferenceRouterRuntimeClient(_RuntimeClient):
    """botocore's ``sagemaker-inference-router-runtime`` client, served by a :class:`Gateway`."""

    SERVICE = INFERENCE_ROUTER_RUNTIME

    async def invoke_inference_router(self, **params: Any) -> dict[str, Any]:
        """InvokeInferenceRouter: ``response["Body"]``, the routed resource ARN and reason."""
        operation = self._operation("InvokeInferenceRouter")
        call = _parse(operation, params)
        answer = _answer(
            self._gateway.call(
                operation.operation, call.endpoint, call.body, call.members, timeout=call.timeout
            )
        )
        result = await self._call(operation, call.endpoint, answer)
        return _invoke_response(result, _ROUTER_RESULT_FIELDS)

    async def invoke_inference_router_async(self, **params: Any) -> dict[str, Any]:
        """InvokeInferenceRouterAsync (the input is already in S3 at ``InputLocation``)."""
        operation = self._operation("InvokeInferenceRouterAsync")
        call = _parse(operation, params)
        answer = _answer(
            self._gateway.call(
                operation.operation, call.endpoint, None, call.members, timeout=call.timeout
            )
        )
        return _async_response(await self._call(operation, call.endpoint, answer), 1)


class GatewayRuntimeClient(_RuntimeClient):
    """botocore's ``sagemaker-gateway-runtime`` client, served by a :class:`Gateway`."""

    SERVICE = GATEWAY_RUNTIME

    async def invoke_global_inference_gateway(self, **params: Any) -> dict[str, Any]:
        """InvokeGlobalInferenceGateway: ``response["Body"]`` is the completion's JSON."""
        operation = self._operation("InvokeGlobalInferenceGateway")
        call = _parse(operation, params)
        answer = _answer(
            self._gateway.call(
                operation.operation, call.endpoint, call.body, call.members, timeout=call.timeout
            )
        )
        return _invoke_response(await self._call(operation, call.endpoint, answer), ())

    async def invoke_global_inference_gateway_with_response_stream(
        self, **params: Any
    ) -> dict[str, Any]:
        """...WithResponseStream: ``async for event in response["Body"]`` (SSE bytes)."""
        operation = self._operation("InvokeGlobalInferenceGatewayWithResponseStream")
        call = _parse(operation, params)
        name = call.endpoint
        parts = await _answer(
            self._gateway.call(
                operation.operation, name, call.body, call.members, timeout=call.timeout
            )
        )
        stream = await self._open_stream(operation, name, parts)
        headers = dict(parts.response_headers)
        return {
            "Body": stream,
            "ResponseMetadata": _metadata(parts.request_id, 200, headers, 0),
        }


RUNTIME_SERVICES: Final[dict[str, type[_RuntimeClient]]] = {
    INFERENCE_ROUTER_RUNTIME: InferenceRouterRuntimeClient,
    GATEWAY_RUNTIME: GatewayRuntimeClient,
}


def _answer(call: Awaitable[object]) -> Awaitable[Any]:
    """``Gateway.call``'s answer, in the shape its operation gives (the caller knows which)."""
    return call
