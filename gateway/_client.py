# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The public client: ``Gateway``.

The success path of ``invoke`` is deliberately plain: look in the near
cache, resolve the route, build the sorted header list, wait for a pooled
connection, sign, write, parse. No botocore object, no retry wrapper, no
task, no log formatting per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import os
import ssl
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

from mypy_extensions import mypyc_attr

from gateway import errors
from gateway._api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    MAX_ASYNC_BODY_BYTES,
    AsyncInvocation,
    InvokeResult,
    async_invocation_from_response,
    before_host_headers,
    check_endpoint_name,
    check_header_value,
    check_payload,
    invoke_type_headers,
    request_for,
    sagemaker_headers,
)
from gateway._aws.sigv4 import Credentials, SigV4Signer
from gateway._cached import CachedCalls
from gateway._call import Invoker, code_of, new_event
from gateway._config import GatewayConfig, PoolConfig
from gateway._config_env import apply_environment, explain
from gateway._config_reader import load_toml, read
from gateway._credentials import CredentialSource
from gateway._events import (
    INVOKE_ENDPOINT,
    INVOKE_ENDPOINT_ASYNC,
    INVOKE_ENDPOINT_STREAM,
    CacheLookup,
    CallFinished,
    CallStarted,
    CircuitClosed,
    CircuitOpened,
    Emit,
    Event,
    Hook,
    Instrumentation,
    StateLog,
    TargetEjected,
    TargetReadmitted,
)
from gateway._http.httpx_transport import HttpxTransport
from gateway._http.interfaces import Transport
from gateway._http.message import Origin
from gateway._http.native import NativeTransport
from gateway._metrics import DEFAULT_LABEL_CAP, GatewayMetrics
from gateway._streaming import OpenedStream, payload_parts
from gateway._targets import TargetPlan, Targets
from gateway._tracing import TracingHook, gateway_tracer
from gateway.cache import CacheConfig, PredictionCache
from gateway.routing import (
    Route,
    RouteConfig,
    Router,
    TargetHealth,
    TargetState,
    parse_routes,
)

__all__ = ["Gateway", "InvokeStream"]

# Generous upper bound for a call with no timeout: SageMaker's own 60 s
# container limit plus transfer time.
_NO_TIMEOUT_S = 70.0
# A caller's user agent is cut to this many characters before ours is appended.
_MAX_CALLER_AGENT = 512
_MAX_REMEMBERED_AGENTS = 64


class InvokeStream:
    """The parts of a response stream, and its response headers once they arrived."""

    __slots__ = ("_parts", "response_headers", "target")

    def __init__(self) -> None:
        self._parts: AsyncGenerator[bytes, None] | None = None
        # Lower-case names; empty until the response head has arrived.
        self.response_headers: Mapping[str, str] = {}
        self.target: str | None = None

    def __aiter__(self) -> InvokeStream:
        return self

    async def __anext__(self) -> bytes:
        assert self._parts is not None
        return await self._parts.__anext__()

    async def aclose(self) -> None:
        """Stop early; the connection is closed (it is mid-response)."""
        if self._parts is not None:
            await self._parts.aclose()

    @property
    def content_type(self) -> str | None:
        # The stream API carries the model's content type in its own header.
        return self.response_headers.get("x-amzn-sagemaker-content-type")

    @property
    def invoked_variant(self) -> str | None:
        return self.response_headers.get("x-amzn-invoked-production-variant")

    @property
    def custom_attributes(self) -> str | None:
        return self.response_headers.get("x-amzn-sagemaker-custom-attributes")

    @property
    def request_id(self) -> str | None:
        return self.response_headers.get("x-amzn-requestid")


# Users (and tests) subclass Gateway; mypyc compiles this module, and a
# compiled class accepts Python subclasses only when told to.
@mypyc_attr(allow_interpreted_subclasses=True)
class Gateway:
    """An async SageMaker Runtime client built for per-call CPU and tail latency.

    Use it as an async context manager; ``start()``/``aclose()`` do the same.
    ``endpoint`` arguments name either a route from the config (``[routes.NAME]``)
    or, failing that, a SageMaker endpoint.
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
        routes: Mapping[str, Any] | None = None,
        cache: CacheConfig | Mapping[str, Any] | None = None,
        use_fips_endpoint: bool | None = None,
        use_dualstack_endpoint: bool | None = None,
        ignore_configured_endpoint_urls: bool | None = None,
        ca_bundle: str | None = None,
        user_agent_extra: str | None = None,
        user_agent_appid: str | None = None,
        defaults: Mapping[str, Any] | None = None,
        config: GatewayConfig | None = None,
        hooks: Sequence[Hook] = (),
    ) -> None:
        if config is None:
            sections: dict[str, Mapping[str, Any]] = {}
            if routes is not None:
                sections["routes"] = routes
            if defaults is not None:
                sections["defaults"] = defaults
            if isinstance(cache, Mapping):
                sections["cache"] = cache
            config = GatewayConfig(
                region=region,
                endpoint_url=endpoint_url,
                credentials=_as_credentials(credentials),
                profile=profile,
                # A str is checked against the choices by GatewayConfig.
                transport=cast(Any, transport) if isinstance(transport, str) else "native",
                use_fips_endpoint=use_fips_endpoint,
                use_dualstack_endpoint=use_dualstack_endpoint,
                ignore_configured_endpoint_urls=ignore_configured_endpoint_urls,
                ca_bundle=ca_bundle,
                user_agent_extra=user_agent_extra,
                user_agent_appid=user_agent_appid,
                pool=_as_pool(pool),
                default_timeout_ms=timeout * 1000 if timeout is not None else None,
                sections=sections,
            )
        self.config = config
        self._transport: Transport = (
            transport if not isinstance(transport, str) else self._make_transport(config)
        )
        self._default_timeout = (
            config.default_timeout_ms / 1000 if config.default_timeout_ms else _NO_TIMEOUT_S
        )
        self._router = Router(
            _route_configs(config),
            observer=self._health_changed,
            default_template=_defaults(config),
        )
        self._targets = Targets(config)
        self._invoker = Invoker(self._transport, self._targets)
        self._cache = _make_cache(cache if isinstance(cache, CacheConfig) else None, config)
        self._cached = CachedCalls(self._cache) if self._cache is not None else None
        # The instrumentation stream (gateway._events): None while no hook is
        # registered, and then the call path builds no event at all.
        self._emit: Emit | None = None
        self._metrics: GatewayMetrics | None = None
        self._state_log = StateLog()
        self._instrumentation = Instrumentation()
        self._instrumentation.subscribe(self._set_emit)
        for hook in hooks:
            self.add_hook(hook)
        self._credentials: CredentialSource | None = None
        # Caller's user agent -> the one sent (see _caller_agent).
        self._agents: dict[str, str | None] = {}
        self._health_task: asyncio.Task[None] | None = None
        self._started = False

    @classmethod
    def from_config(
        cls, source: str | Path | Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Gateway:
        """Build from a TOML file path or an already-parsed mapping, as the sidecar reads it.

        ``SAGEMAKER_GATEWAY__<SECTION>__<KEY>`` variables of ``environ``
        (default ``os.environ``; ``{}`` for none) override the file, and
        ``<key>_file`` keys (``secret_access_key_file``, ``redis_url_file``, ...)
        read secrets from files.
        """
        mapping = dict(source) if isinstance(source, Mapping) else load_toml(source)
        overlay = apply_environment(mapping, os.environ if environ is None else environ)
        try:
            return cls(config=GatewayConfig.from_mapping(overlay.mapping))
        except errors.ConfigError as error:
            raise explain(error, overlay.sources) from None

    @staticmethod
    def _make_transport(config: GatewayConfig) -> Transport:
        pool = config.pool
        if pool.tls_verify and pool.ssl_context is None:
            ca_bundle = config.ca_bundle or _botocore_ca_bundle(config.profile)
            if ca_bundle:
                pool = dataclasses.replace(pool, ssl_context=_ssl_context(ca_bundle))
        if config.transport == "httpx":
            return HttpxTransport(pool)
        return NativeTransport(pool)

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
        regions = {t.region for r in self._router.routes.values() for t in r.config.targets}
        region, url, region_urls, fetch = await asyncio.to_thread(
            self._targets.resolve_with_botocore, {r for r in regions if r}
        )
        if self.config.credentials is not None:
            self._credentials = CredentialSource.static(self.config.credentials)
        else:
            assert fetch is not None
            self._credentials = CredentialSource(
                fetch,
                advisory_s=self.config.credential_refresh_advisory_s,
                mandatory_s=self.config.credential_refresh_mandatory_s,
            )
        self._credentials.observer = self._state_changed
        self._targets.start(region, url, region_urls, self._credentials)
        await self._credentials.start()
        await self._transport.start(self._targets.all_origins(self._router.routes.values()))
        if self._cache is not None:
            self._cache.observe_circuit(self._circuit_changed)
            await self._cache.start()
        self._start_tracing(region)
        checked = [r for r in self._router.routes.values() if r.config.health_check.enabled]
        if checked:
            self._health_task = asyncio.get_running_loop().create_task(
                self._invoker.health_checks(checked)
            )
        self._started = True

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        if self._cache is not None:
            await self._cache.close()
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
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        cache: bool | None = None,
        cache_ttl: float | None = None,
        user_agent: str | None = None,
    ) -> InvokeResult:
        """InvokeEndpoint through the route named ``endpoint``.

        ``timeout`` (seconds) is the call's one deadline: pool waits, attempts,
        hedges, backoffs and retries all spend from it. ``cache=False`` skips
        the prediction cache for this call; ``cache_ttl`` overrides its TTL.
        Both default to the route's ``cache``/``cache_ttl_s``, then the
        ``[cache]`` table's. ``user_agent``: the caller's own (a proxy's
        client's), sent first with the gateway's appended.
        Raises a :class:`gateway.errors.GatewayError` subclass on failure.
        """
        if not self._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        route = self._resolve(endpoint)
        if timeout is None:
            timeout = route.timeout_s or self._default_timeout
        else:
            _check_timeout(timeout)
        check_payload(body)
        agent = None if user_agent is None else self._caller_agent(user_agent)
        before_host = invoke_type_headers(content_type, accept)
        # A session is stateful on the far side: never answer it from a cache.
        key: str | None = None
        cached = self._cached
        if (
            cached is not None
            and session_id is None
            and (route.config.cache if cache is None else cache)
        ):
            if cached.versions_due(route.name):  # the fleet's version tags, re-read
                await cached.refresh_versions(route.name)
            key = cached.key(
                route.name,
                target_model,
                target_variant,
                custom_attributes,
                target_container_hostname,
                inference_component,
                content_type,
                accept,
                body,
            )
            hit = cached.peek(key)
            if hit is not None:
                if self._emit is not None:
                    self._emit_cached_call(self._emit, route.name, target_model, hit)
                return hit  # nothing else to build
        after_host: list[tuple[str, str]] = []
        if (
            target_model
            or target_variant
            or custom_attributes
            or inference_id
            or session_id
            or target_container_hostname
            or enable_explanations
            or inference_component
            or prefix_aware_id
        ):
            after_host = sagemaker_headers(
                INVOKE,
                {
                    "custom_attributes": custom_attributes,
                    "enable_explanations": enable_explanations,
                    "inference_component": inference_component,
                    "inference_id": inference_id,
                    "prefix_aware_id": prefix_aware_id,
                    "session_id": session_id,
                    "target_container_hostname": target_container_hostname,
                    "target_model": target_model,
                    "target_variant": target_variant,
                },
            )
        deadline = time.monotonic() + timeout
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh()  # only inside the mandatory window
        pinned = target_variant is not None
        emit = self._emit
        if key is None or cached is None:
            call = self._invoker.invoke(
                route, target_model, before_host, after_host, pinned, body, deadline, agent
            )
            if emit is None:
                return await call
            return await self._observed(emit, route.name, target_model, call, False)
        load = functools.partial(
            self._invoker.invoke,
            route,
            target_model,
            before_host,
            after_host,
            pinned,
            body,
            deadline,
            agent,
        )
        loaded = cached.get_or_load(load, key, cache_ttl or route.config.cache_ttl_s)
        if emit is None:
            return await loaded
        return await self._observed(emit, route.name, target_model, loaded, True)

    async def _observed(
        self,
        emit: Emit,
        route: str,
        model: str | None,
        call: Awaitable[InvokeResult],
        cached: bool,
    ) -> InvokeResult:
        """One call between CallStarted and CallFinished (only when a hook listens)."""
        emit(new_event(CallStarted, (route, model, INVOKE_ENDPOINT)))
        started = time.monotonic()
        try:
            result = await call
        except BaseException as error:
            duration = time.monotonic() - started
            emit(_call_failed(route, model, None, duration, error, INVOKE_ENDPOINT))
            raise
        if cached:
            emit(CacheLookup(route, result.cache or "miss"))
        emit(
            new_event(
                CallFinished,
                (
                    route,
                    model,
                    result.target,
                    time.monotonic() - started,
                    result.attempts,
                    result.hedged,
                    result.cache,
                    None,
                    INVOKE_ENDPOINT,
                    result.request_id,
                ),
            )
        )
        return result

    @staticmethod
    def _emit_cached_call(emit: Emit, route: str, model: str | None, result: InvokeResult) -> None:
        emit(CallStarted(route, model))
        emit(CacheLookup(route, "near"))
        emit(CallFinished(route, model, result.target, 0.0, 0, False, "near", None))

    def set_cache_version(
        self, endpoint: str, version: str, target_model: str | None = None
    ) -> None:
        """Tag cached answers of ``endpoint`` (or one of its models) with ``version``.

        Bumping the tag after deploying a new model makes every answer cached
        under the old tag unreachable: no stale prediction outlives a deploy.
        With a Redis tier the tag is stored there, and every process sharing
        it follows within ``cache.version_ttl_s``.
        """
        if self._cached is not None:
            self._cached.set_version(endpoint, version, target_model)

    def invoke_stream(
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
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> InvokeStream:
        """InvokeEndpointWithResponseStream: ``async for part in gw.invoke_stream(...)``.

        Each part is a ``PayloadPart``'s bytes. The returned stream's
        ``content_type``, ``invoked_variant``, ``custom_attributes`` and
        ``request_id`` are set once the response head has arrived (after the
        first part). A ``ModelStreamError`` or ``InternalStreamFailure`` event
        mid-stream raises ModelError / InternalFailure. Streams are routed but
        never hedged or retried: a partly delivered stream cannot be replayed.
        """
        stream = InvokeStream()
        stream._parts = payload_parts(
            functools.partial(
                self._open_stream,
                stream,
                endpoint,
                body,
                content_type=content_type,
                accept=accept,
                target_variant=target_variant,
                target_container_hostname=target_container_hostname,
                inference_id=inference_id,
                custom_attributes=custom_attributes,
                inference_component=inference_component,
                session_id=session_id,
                prefix_aware_id=prefix_aware_id,
                timeout=timeout,
                user_agent=user_agent,
            )
        )
        return stream

    async def _open_stream(
        self,
        into: InvokeStream,
        endpoint: str,
        body: bytes,
        *,
        content_type: str | None,
        accept: str | None,
        target_variant: str | None,
        target_container_hostname: str | None,
        inference_id: str | None,
        custom_attributes: str | None,
        inference_component: str | None,
        session_id: str | None,
        prefix_aware_id: str | None,
        timeout: float | None,
        user_agent: str | None,
    ) -> OpenedStream:
        route, state, plan = self._pick_single(endpoint)
        emit = self._emit
        if emit is not None:
            emit(CallStarted(route.name, None, INVOKE_ENDPOINT_STREAM))
        started = time.monotonic()
        try:
            if timeout is None:
                timeout = route.timeout_s or self._default_timeout
            else:
                _check_timeout(timeout)
            deadline = time.monotonic() + timeout
            values = {
                "accept": accept,
                "content_type": content_type,
                "custom_attributes": custom_attributes,
                "inference_component": inference_component,
                "inference_id": inference_id,
                "prefix_aware_id": prefix_aware_id,
                "session_id": session_id,
                "target_container_hostname": target_container_hostname,
                "target_variant": target_variant or plan.variant,
            }
            before_host = before_host_headers(INVOKE_STREAM, values)
            after_host = sagemaker_headers(INVOKE_STREAM, values)
            path = f"/endpoints/{plan.endpoint}/invocations-response-stream"
            check_payload(body)
            prefix = SigV4Signer.request_prefix("POST", path)
            request = request_for(
                plan.origin, path, prefix, plan.signer, before_host, after_host, body
            )
            if user_agent is not None:
                request.caller_agent = self._caller_agent(user_agent)
            await self._ensure_credentials()
            stream, finish = await self._invoker.open_stream(route, state, plan, request, deadline)
        except BaseException as error:
            if emit is not None:
                duration = time.monotonic() - started
                failed = _call_failed(
                    route.name, None, plan.endpoint, duration, error, INVOKE_ENDPOINT_STREAM
                )
                emit(failed)
            raise
        into.response_headers = stream.headers
        into.target = plan.endpoint
        if emit is None:
            return stream, finish
        request_id = stream.headers.get("x-amzn-requestid")
        return stream, _finish_observed(
            emit, finish, route.name, plan.endpoint, started, request_id
        )

    async def invoke_async(
        self,
        endpoint: str,
        *,
        input_location: str | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        request_ttl_seconds: int | None = None,
        invocation_timeout_seconds: int | None = None,
        filename: str | None = None,
        s3_output_path_extension: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> AsyncInvocation:
        """InvokeEndpointAsync: queue a request, its input in S3 (``input_location``) or inline.

        ``body`` (at most 128,000 bytes, as SageMaker allows) is sent inline.
        ``filename`` and ``s3_output_path_extension`` shape the output's S3 key.
        """
        if body is not None and len(body) > MAX_ASYNC_BODY_BYTES:
            raise errors.InvalidRequest(
                f"Body: {len(body)} bytes exceeds InvokeEndpointAsync's limit of "
                f"{MAX_ASYNC_BODY_BYTES}"
            )
        route, state, plan = self._pick_single(endpoint)
        if timeout is None:
            timeout = route.timeout_s or self._default_timeout
        else:
            _check_timeout(timeout)
        deadline = time.monotonic() + timeout
        values: dict[str, object] = {
            "accept": accept,
            "content_type": content_type,
            "custom_attributes": custom_attributes,
            "filename": filename,
            "inference_id": inference_id,
            "input_location": input_location,
            "invocation_timeout_seconds": invocation_timeout_seconds,
            "request_ttl_seconds": request_ttl_seconds,
            "s3_output_path_extension": s3_output_path_extension,
        }
        before_host = before_host_headers(INVOKE_ASYNC, values)
        after_host = sagemaker_headers(INVOKE_ASYNC, values)
        path = f"/endpoints/{plan.endpoint}/async-invocations"
        prefix = SigV4Signer.request_prefix("POST", path)
        request = request_for(
            plan.origin, path, prefix, plan.signer, before_host, after_host, body or b""
        )
        if user_agent is not None:
            request.caller_agent = self._caller_agent(user_agent)
        await self._ensure_credentials()
        sent = self._invoker.send_once(route, state, plan, request, deadline, (200, 202))
        emit = self._emit
        if emit is None:
            return async_invocation_from_response(await sent)
        emit(CallStarted(route.name, None, INVOKE_ENDPOINT_ASYNC))
        started = time.monotonic()
        try:
            answer = async_invocation_from_response(await sent)
        except BaseException as error:
            duration = time.monotonic() - started
            emit(
                _call_failed(
                    route.name, None, plan.endpoint, duration, error, INVOKE_ENDPOINT_ASYNC
                )
            )
            raise
        duration = time.monotonic() - started
        emit(
            CallFinished(
                route.name,
                None,
                plan.endpoint,
                duration,
                1,
                False,
                None,
                None,
                INVOKE_ENDPOINT_ASYNC,
                answer.request_id,
            )
        )
        return answer

    # -- operations ----------------------------------------------------------

    def route_health(self) -> dict[str, bool]:
        """Per configured route: is at least one target taking traffic?"""
        return {
            name: any(t.state is not TargetHealth.EJECTED for t in route.targets)
            for name, route in self._router.routes.items()
        }

    def route(self, name: str) -> Route:
        """The live route for ``name`` (a configured route or an endpoint's default)."""
        return self._router.resolve(name)

    @property
    def router(self) -> Router:
        return self._router

    @property
    def prediction_cache(self) -> PredictionCache | None:
        return self._cache

    @property
    def transport(self) -> Transport:
        return self._transport

    @property
    def origin(self) -> Origin | None:
        return self._targets.origin

    # -- instrumentation -----------------------------------------------------

    def add_hook(self, hook: Hook) -> None:
        """Send every instrumentation event (``gateway._events``) to ``hook`` from now on."""
        self._instrumentation.add(hook)

    def remove_hook(self, hook: Hook) -> None:
        self._instrumentation.remove(hook)

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return self._instrumentation.hooks

    def _start_tracing(self, region: str | None) -> None:
        """Trace calls when OpenTelemetry is installed and a tracer provider is set."""
        if any(isinstance(hook, TracingHook) for hook in self.hooks):
            return
        tracer = gateway_tracer()
        if tracer is not None:
            self.add_hook(TracingHook(tracer, region))

    def _set_emit(self, emit: Emit | None) -> None:
        self._emit = emit
        self._invoker.emit = emit

    def enable_metrics(self, label_cap: int = DEFAULT_LABEL_CAP) -> GatewayMetrics:
        """Count calls from now on (a ``GatewayMetrics`` hook); returns the counters.

        Idempotent: the first call decides ``label_cap`` (distinct error-code
        label values kept before new ones fold into ``other``). Route and
        target labels are the configured names; any other name counts as
        ``unconfigured``.
        """
        if self._metrics is None:
            routes = {name: [t.key for t in r.targets] for name, r in self._router.routes.items()}
            self._metrics = GatewayMetrics(label_cap, routes, cache=self._cache is not None)
            self.add_hook(self._metrics)
        return self._metrics

    @property
    def metrics(self) -> GatewayMetrics:
        """The Prometheus counters (enabled on first access, see ``enable_metrics``)."""
        return self.enable_metrics()

    def prometheus_collector(self) -> Any:
        """A ``prometheus_client`` collector of the gateway's own metrics (enables them)."""
        return self.enable_metrics().collector(self._extra_metrics)

    def _extra_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        # Configured routes only: their count is fixed by the config file.
        state = GaugeMetricFamily(
            "sagemaker_gateway_target_healthy",
            "1 when the target takes traffic",
            labels=["route", "target"],
        )
        for name, route in self._router.routes.items():
            for target in route.targets:
                state.add_metric([name, target.key], float(target.state is TargetHealth.HEALTHY))
        yield state
        if self._cache is not None:
            stats = self._cache.stats
            yield CounterMetricFamily(
                "sagemaker_gateway_cache_redis_errors",
                "Redis errors and timeouts (the cache failed open)",
                value=stats.redis_errors + stats.redis_timeouts,
            )
            yield GaugeMetricFamily(
                "sagemaker_gateway_cache_circuit_open",
                "1 while the whole Redis tier is skipped (circuit open or half-open)",
                value=float(stats.circuit_state in ("open", "half_open")),
            )
            yield GaugeMetricFamily(
                "sagemaker_gateway_cache_circuit_open_nodes",
                "Redis Cluster nodes whose circuit is open or half-open (their keys skipped)",
                value=stats.circuit_open_nodes,
            )

    # State changes are rare: always logged (rate-limited), then streamed.

    def _state_changed(self, event: Event) -> None:
        self._state_log(event)
        emit = self._emit
        if emit is not None:
            emit(event)

    def _health_changed(self, route: Route, state: TargetState) -> None:
        if state.state is TargetHealth.EJECTED:
            until = state.ejected_until or 0.0
            duration = max(0.0, until - time.monotonic())
            self._state_changed(TargetEjected(route.name, state.key, duration, state.ejections))
        elif state.state is TargetHealth.HEALTHY:
            self._state_changed(TargetReadmitted(route.name, state.key))

    def _circuit_changed(self, state: str) -> None:
        # "open": the whole Redis tier is skipped; "partial": some Cluster nodes.
        event: Event
        if state == "closed":
            event = CircuitClosed("redis")
        else:
            event = CircuitOpened("redis" if state == "open" else "redis-nodes")
        self._state_changed(event)

    # -- internals -----------------------------------------------------------

    def _pick_single(self, endpoint: str) -> tuple[Route, TargetState, TargetPlan]:
        if not self._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        route = self._resolve(endpoint)
        return (route, *self._invoker.single(route))

    def _resolve(self, endpoint: str) -> Route:
        try:
            return self._router.resolve(endpoint)
        except errors.ConfigError:
            # Only a bad name gets here (a default route for it failed to build).
            check_endpoint_name(endpoint)
            raise

    def _caller_agent(self, caller: str) -> str | None:
        """``caller``'s user agent (its first 512 characters) with the gateway's appended.

        Remembered: a proxy's callers send a handful of agents, each on
        every call, and checking one costs microseconds.
        """
        agents = self._agents
        if caller in agents:
            return agents[caller]
        own: str = self._targets.user_agent
        checked = check_header_value("user-agent", caller[:_MAX_CALLER_AGENT])
        if len(agents) >= _MAX_REMEMBERED_AGENTS:
            agents.clear()
        agent = agents[caller] = f"{checked} {own}" if checked else None
        return agent

    async def _ensure_credentials(self) -> None:
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh()


def _call_failed(
    route: str,
    model: str | None,
    endpoint: str | None,
    duration: float,
    error: BaseException,
    operation: str,
) -> CallFinished:
    request_id = getattr(error, "request_id", None)
    return CallFinished(
        route,
        model,
        endpoint,
        duration,
        0 if endpoint is None else 1,
        False,
        None,
        code_of(error),
        operation,
        request_id if isinstance(request_id, str) else None,
    )


def _finish_observed(
    emit: Emit,
    finish: Callable[[BaseException | None], None],
    route: str,
    endpoint: str,
    started: float,
    request_id: str | None,
) -> Callable[[BaseException | None], None]:
    """A stream's ``finish`` that also ends its call (CallFinished) after the attempt."""

    def finished(error: BaseException | None) -> None:
        finish(error)
        duration = time.monotonic() - started
        if error is None:
            emit(
                CallFinished(
                    route,
                    None,
                    endpoint,
                    duration,
                    1,
                    False,
                    None,
                    None,
                    INVOKE_ENDPOINT_STREAM,
                    request_id,
                )
            )
        else:
            emit(_call_failed(route, None, endpoint, duration, error, INVOKE_ENDPOINT_STREAM))

    return finished


def _route_configs(config: GatewayConfig) -> list[RouteConfig]:
    routes = config.sections.get("routes")
    if not routes:
        return []
    return list(parse_routes(routes).values())


def _defaults(config: GatewayConfig) -> RouteConfig | None:
    """The ``[defaults]`` route template for bare endpoint names (its own targets unused)."""
    section = config.sections.get("defaults")
    if section is None:
        return None
    if "targets" in section:
        raise errors.ConfigError.at("defaults.targets", "a template has no targets")
    # Router replaces the placeholder target with the endpoint called.
    template = {**section, "targets": ["template"]}
    return read(RouteConfig, template, "defaults", name="defaults")


def _botocore_ca_bundle(profile: str | None) -> str | None:
    """AWS_CA_BUNDLE or the profile's ca_bundle, as botocore resolves it."""
    import botocore.exceptions
    import botocore.session

    session = botocore.session.get_session()
    if profile:
        session.set_config_variable("profile", profile)
    try:
        value = session.get_config_variable("ca_bundle")
    except botocore.exceptions.ProfileNotFound as exc:
        raise errors.ConfigError(f"profile: {exc}") from None
    return str(value) if value else None


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as exc:
        raise errors.ConfigError(f"ca_bundle: cannot load {ca_bundle!r}: {exc}") from None


def _make_cache(explicit: CacheConfig | None, config: GatewayConfig) -> PredictionCache | None:
    if explicit is None:
        section = config.sections.get("cache")
        if section is None:
            return None
        explicit = CacheConfig.from_mapping(section)
    return PredictionCache(explicit) if explicit.enabled else None


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


def _check_timeout(timeout: float) -> None:
    """A call's timeout must be a duration: NaN, infinity or a negative number is refused."""
    try:
        valid = 0.0 <= timeout < math.inf  # False for NaN
    except TypeError:
        valid = False
    if not valid:
        raise errors.InvalidRequest(
            f"timeout must be a finite number of seconds >= 0, got {timeout!r}"
        )
