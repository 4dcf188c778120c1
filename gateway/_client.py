"""The public client: ``Gateway``.

The success path of ``invoke`` is deliberately plain: build the sorted
header list, wait for a pooled connection, sign, write, parse. No botocore
object, no retry wrapper, no task, no log formatting per call.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import orjson

from gateway import errors
from gateway._config import GatewayConfig, PoolConfig
from gateway._credentials import CredentialSource, botocore_fetcher
from gateway._eventstream import EventStreamDecoder, Message
from gateway._httpx_transport import HttpxTransport
from gateway._signing import Credentials, SigV4Signer
from gateway._transport import NativeTransport, Transport
from gateway._wire import (
    INVOKE_HEADERS,
    AsyncInvocation,
    InvokeResult,
    Origin,
    PreparedRequest,
    RawResponse,
    RequestSigner,
    async_invocation_from_response,
    check_endpoint_name,
    check_header_value,
    check_payload,
    decode_error,
    result_from_response,
)

__all__ = ["Gateway"]

# Generous upper bound for a call with no timeout: SageMaker's own 60 s
# container limit plus transfer time.
_NO_TIMEOUT_S = 70.0
_MAX_CACHED_VALUES = 4096


class _EndpointPath:
    """Per-endpoint strings computed once: request paths and SigV4 prefixes."""

    __slots__ = (
        "async_path",
        "async_prefix",
        "invoke_path",
        "invoke_prefix",
        "stream_path",
        "stream_prefix",
    )

    def __init__(self, name: str) -> None:
        check_endpoint_name(name)
        base = f"/endpoints/{name}"
        self.invoke_path = f"{base}/invocations"
        self.stream_path = f"{base}/invocations-response-stream"
        self.async_path = f"{base}/async-invocations"
        self.invoke_prefix = SigV4Signer.request_prefix("POST", self.invoke_path)
        self.stream_prefix = SigV4Signer.request_prefix("POST", self.stream_path)
        self.async_prefix = SigV4Signer.request_prefix("POST", self.async_path)


class Gateway:
    """An async SageMaker Runtime client built for per-call CPU and tail latency.

    Use it as an async context manager; ``start()``/``aclose()`` do the same.
    """

    def __init__(
        self,
        region: str | None = None,
        *,
        endpoint_url: str | None = None,
        credentials: Credentials | tuple[str, str] | tuple[str, str, str] | None = None,
        profile: str | None = None,
        transport: str | Transport = "native",
        pool: PoolConfig | Mapping[str, Any] | None = None,
        timeout: float | None = None,
        use_fips_endpoint: bool = False,
        use_dualstack_endpoint: bool = False,
        config: GatewayConfig | None = None,
    ) -> None:
        if config is None:
            config = GatewayConfig(
                region=region,
                endpoint_url=endpoint_url,
                credentials=_as_credentials(credentials),
                profile=profile,
                transport=transport if isinstance(transport, str) else "native",
                use_fips_endpoint=use_fips_endpoint,
                use_dualstack_endpoint=use_dualstack_endpoint,
                pool=_as_pool(pool),
                default_timeout_ms=timeout * 1000 if timeout is not None else None,
            )
        self.config = config
        self._transport: Transport = (
            transport if not isinstance(transport, str) else self._make_transport(config)
        )
        self._default_timeout = (
            config.default_timeout_ms / 1000 if config.default_timeout_ms else _NO_TIMEOUT_S
        )
        self._paths: dict[str, _EndpointPath] = {}
        self._checked_values: dict[str, str] = {}
        self._origin: Origin | None = None
        self._host_header = ""
        self._signer: RequestSigner | None = None
        self._credentials: CredentialSource | None = None
        self._started = False

    @classmethod
    def from_config(cls, source: str | Path | Mapping[str, Any]) -> Gateway:
        """Build from a TOML file path or an already-parsed mapping."""
        if isinstance(source, Mapping):
            return cls(config=GatewayConfig.from_mapping(source))
        return cls(config=GatewayConfig.from_toml(source))

    @staticmethod
    def _make_transport(config: GatewayConfig) -> Transport:
        options = config.pool.transport_options()
        if config.transport == "httpx":
            return HttpxTransport(options)
        return NativeTransport(options)

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        if self._started:
            return
        region, url, fetch = await asyncio.to_thread(self._resolve_with_botocore)
        self._origin = Origin.from_url(url)
        self._host_header = self._origin.host_header
        if self.config.credentials is not None:
            self._credentials = CredentialSource.static(self.config.credentials)
        else:
            assert fetch is not None
            self._credentials = CredentialSource(fetch)
        await self._credentials.start()
        self._signer = RequestSigner(SigV4Signer(region), self._credentials.current)
        await self._transport.start([self._origin])
        self._started = True

    def _resolve_with_botocore(self) -> tuple[str, str, Any]:
        """Region, runtime URL and credential chain, resolved as botocore would.

        Runs once, in a thread: building a botocore client costs tens of
        milliseconds, which is fine at start and never acceptable per call.
        """
        import botocore.config
        import botocore.session

        session = botocore.session.get_session()
        if self.config.profile:
            session.set_config_variable("profile", self.config.profile)
        region = self.config.region or session.get_config_variable("region")
        if not region:
            raise errors.ConfigError(
                "region: not set (pass region=, set it in the config, or set AWS_DEFAULT_REGION)"
            )
        url = self.config.endpoint_url or _endpoint_from_environment()
        if url is None:
            client = session.create_client(
                "sagemaker-runtime",
                region_name=region,
                aws_access_key_id="unused",
                aws_secret_access_key="unused",
                config=botocore.config.Config(
                    use_fips_endpoint=self.config.use_fips_endpoint,
                    use_dualstack_endpoint=self.config.use_dualstack_endpoint,
                ),
            )
            url = str(client.meta.endpoint_url)
        fetch = botocore_fetcher(session) if self.config.credentials is None else None
        return region, url, fetch

    async def aclose(self) -> None:
        await self._transport.aclose()
        if self._credentials is not None:
            await self._credentials.aclose()
        self._started = False

    # -- calls ---------------------------------------------------------------

    async def invoke(
        self,
        endpoint: str,
        body: bytes,
        *,
        content_type: str | None = None,
        accept: str | None = None,
        target_model: str | None = None,
        target_variant: str | None = None,
        target_container_hostname: str | None = None,
        inference_id: str | None = None,
        custom_attributes: str | None = None,
        enable_explanations: str | None = None,
        inference_component: str | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> InvokeResult:
        """InvokeEndpoint. Raises a :class:`gateway.errors.GatewayError` subclass on failure."""
        deadline = time.monotonic() + (timeout if timeout is not None else self._default_timeout)
        paths = self._paths.get(endpoint) or self._endpoint_paths(endpoint)
        headers = self._base_headers(content_type, accept)
        if (
            target_model
            or target_variant
            or custom_attributes
            or inference_id
            or session_id
            or target_container_hostname
            or enable_explanations
            or inference_component
        ):
            self._add_sagemaker_headers(
                headers,
                {
                    "custom_attributes": custom_attributes,
                    "enable_explanations": enable_explanations,
                    "inference_component": inference_component,
                    "inference_id": inference_id,
                    "session_id": session_id,
                    "target_container_hostname": target_container_hostname,
                    "target_model": target_model,
                    "target_variant": target_variant,
                },
            )
        response = await self._send(paths.invoke_path, paths.invoke_prefix, headers, body, deadline)
        if response.status == 200:
            return result_from_response(response, endpoint)
        raise decode_error(response)

    async def invoke_stream(
        self,
        endpoint: str,
        body: bytes,
        *,
        content_type: str | None = None,
        accept: str | None = None,
        target_variant: str | None = None,
        target_container_hostname: str | None = None,
        inference_id: str | None = None,
        custom_attributes: str | None = None,
        inference_component: str | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[bytes]:
        """InvokeEndpointWithResponseStream: yields each ``PayloadPart``'s bytes.

        A ``ModelStreamError`` or ``InternalStreamFailure`` event mid-stream
        raises ModelError / InternalFailure.
        """
        deadline = time.monotonic() + (timeout if timeout is not None else self._default_timeout)
        paths = self._paths.get(endpoint) or self._endpoint_paths(endpoint)
        # The stream API names its accept header differently from InvokeEndpoint.
        headers = self._base_headers(content_type, None)
        extra = {
            "custom_attributes": custom_attributes,
            "inference_component": inference_component,
            "inference_id": inference_id,
            "session_id": session_id,
            "target_container_hostname": target_container_hostname,
            "target_variant": target_variant,
        }
        self._add_sagemaker_headers(headers, extra, accept=accept)
        request = self._prepare(paths.stream_path, paths.stream_prefix, headers, body)
        await self._ensure_credentials()
        stream = await self._transport.stream(request, deadline)
        try:
            if stream.status != 200:
                raise decode_error(RawResponse(stream.status, stream.headers, await stream.read()))
            decoder = EventStreamDecoder()
            async for chunk in stream.chunks():
                for message in decoder.feed(chunk):
                    payload = _payload_or_raise(message)
                    if payload is not None:
                        yield payload
        finally:
            await stream.aclose()

    async def invoke_async(
        self,
        endpoint: str,
        *,
        input_location: str,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        request_ttl_seconds: int | None = None,
        invocation_timeout_seconds: int | None = None,
        timeout: float | None = None,
    ) -> AsyncInvocation:
        """InvokeEndpointAsync: queue a request whose input is already in S3."""
        deadline = time.monotonic() + (timeout if timeout is not None else self._default_timeout)
        paths = self._paths.get(endpoint) or self._endpoint_paths(endpoint)
        headers = self._base_headers(None, None)
        pairs = [
            ("x-amzn-sagemaker-accept", accept),
            ("x-amzn-sagemaker-content-type", content_type),
            ("x-amzn-sagemaker-custom-attributes", custom_attributes),
            ("x-amzn-sagemaker-inference-id", inference_id),
            ("x-amzn-sagemaker-inputlocation", input_location),
            ("x-amzn-sagemaker-invocationtimeoutseconds", _opt_str(invocation_timeout_seconds)),
            ("x-amzn-sagemaker-requestttlseconds", _opt_str(request_ttl_seconds)),
        ]
        headers.extend(
            (name, check_header_value(name, value)) for name, value in pairs if value is not None
        )
        response = await self._send(paths.async_path, paths.async_prefix, headers, b"", deadline)
        if response.status in (200, 202):
            return async_invocation_from_response(response)
        raise decode_error(response)

    # -- internals -----------------------------------------------------------

    def _endpoint_paths(self, endpoint: str) -> _EndpointPath:
        paths = _EndpointPath(endpoint)
        if len(self._paths) < _MAX_CACHED_VALUES:
            self._paths[endpoint] = paths
        return paths

    def _checked(self, name: str, value: str) -> str:
        # Most callers send the same few content types: validate each once.
        checked = self._checked_values.get(value)
        if checked is None:
            checked = check_header_value(name, value)
            if len(self._checked_values) < _MAX_CACHED_VALUES:
                self._checked_values[value] = checked
        return checked

    def _base_headers(self, content_type: str | None, accept: str | None) -> list[tuple[str, str]]:
        """The signable headers up to ``host``, in SigV4's sorted order."""
        headers: list[tuple[str, str]] = []
        if accept is not None:
            headers.append(("accept", self._checked("accept", accept)))
        if content_type is not None:
            headers.append(("content-type", self._checked("content-type", content_type)))
        headers.append(("host", self._host_header))
        return headers

    @staticmethod
    def _add_sagemaker_headers(
        headers: list[tuple[str, str]], values: Mapping[str, str | None], accept: str | None = None
    ) -> None:
        # x-amzn-sagemaker-* sort after host and x-amz-*; INVOKE_HEADERS is sorted.
        if accept is not None:
            headers.append(("x-amzn-sagemaker-accept", check_header_value("accept", accept)))
        for argument, header in INVOKE_HEADERS:
            value = values.get(argument)
            if value is not None:
                headers.append((header, check_header_value(argument, value)))

    def _prepare(
        self, path: str, prefix: str, headers: list[tuple[str, str]], body: bytes
    ) -> PreparedRequest:
        if not self._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        check_payload(body)
        assert self._origin is not None
        return PreparedRequest(self._origin, path, prefix, headers, body, self._signer)

    async def _ensure_credentials(self) -> None:
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh()

    async def _send(
        self,
        path: str,
        prefix: str,
        headers: list[tuple[str, str]],
        body: bytes,
        deadline: float,
    ) -> RawResponse:
        request = self._prepare(path, prefix, headers, body)
        await self._ensure_credentials()
        return await self._transport.request(request, deadline)

    @property
    def transport(self) -> Transport:
        return self._transport

    @property
    def origin(self) -> Origin | None:
        return self._origin


def _payload_or_raise(message: Message) -> bytes | None:
    """PayloadPart bytes, None for other events, or the error a stream carries."""
    if message.message_type == "event":
        return message.payload if message.event_type == "PayloadPart" else None
    code = message.exception_type or "InternalStreamFailure"
    try:
        detail = orjson.loads(message.payload) if message.payload else {}
    except orjson.JSONDecodeError:
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    text = str(detail.get("Message") or detail.get("message") or "")
    if code == "ModelStreamError":
        raise errors.ModelError(text or "model stream error", code=code, status=200)
    raise errors.InternalFailure(text or "internal stream failure", code=code, status=200)


def _endpoint_from_environment() -> str | None:
    # botocore honours these too; reading them here skips building a client.
    return os.environ.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME") or os.environ.get(
        "AWS_ENDPOINT_URL"
    )


def _as_credentials(
    value: Credentials | tuple[str, str] | tuple[str, str, str] | None,
) -> Credentials | None:
    if value is None or isinstance(value, Credentials):
        return value
    return Credentials(*value)


def _as_pool(value: PoolConfig | Mapping[str, Any] | None) -> PoolConfig:
    if value is None:
        return PoolConfig()
    if isinstance(value, PoolConfig):
        return value
    return PoolConfig.from_mapping(value)


def _opt_str(value: int | None) -> str | None:
    return None if value is None else str(value)
