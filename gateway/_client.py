"""The public client: ``Gateway``.

The success path of ``invoke`` is deliberately plain: look in the near
cache, resolve the route, build the sorted header list, wait for a pooled
connection, sign, write, parse. No botocore object, no retry wrapper, no
task, no log formatting per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from mypy_extensions import mypyc_attr

from cache import CacheConfig, CacheConfigError, CacheSource, Entry, PredictionCache
from gateway import errors
from gateway._config import GatewayConfig, PoolConfig
from gateway._credentials import CredentialSource, botocore_fetcher
from gateway._httpx_transport import HttpxTransport
from gateway._metrics import GatewayMetrics
from gateway._pipeline import Invoker, TargetPlan, outcome_of
from gateway._signing import Credentials, SigV4Signer
from gateway._streaming import OpenedStream, payload_parts
from gateway._transport import NativeTransport, Transport
from gateway._wire import (
    INVOKE_HEADERS,
    AsyncInvocation,
    InvokeResult,
    Origin,
    PreparedRequest,
    RequestSigner,
    async_invocation_from_response,
    check_endpoint_name,
    check_header_value,
    check_payload,
    decode_error,
)
from routing import (
    Outcome,
    Route,
    RouteConfig,
    RouteConfigError,
    Router,
    TargetHealth,
    TargetState,
    parse_routes,
)

__all__ = ["Gateway", "InvokeStream"]

# Generous upper bound for a call with no timeout: SageMaker's own 60 s
# container limit plus transfer time.
_NO_TIMEOUT_S = 70.0
_MAX_CACHED_VALUES = 4096
# Metadata a cached answer must give back, as cache.Entry.meta names it.
_META_VARIANT = "variant"
_META_ATTRIBUTES = "custom-attributes"
_META_TARGET = "target"


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
        use_fips_endpoint: bool = False,
        use_dualstack_endpoint: bool = False,
        config: GatewayConfig | None = None,
    ) -> None:
        if config is None:
            sections: dict[str, Mapping[str, Any]] = {}
            if routes is not None:
                sections["routes"] = routes
            if isinstance(cache, Mapping):
                sections["cache"] = cache
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
                sections=sections,
            )
        self.config = config
        self._transport: Transport = (
            transport if not isinstance(transport, str) else self._make_transport(config)
        )
        self._default_timeout = (
            config.default_timeout_ms / 1000 if config.default_timeout_ms else _NO_TIMEOUT_S
        )
        self._router = Router(_route_configs(config))
        self.metrics = GatewayMetrics()
        self._invoker = Invoker(self._transport, self._plan_for, self.metrics)
        self._cache = _make_cache(cache if isinstance(cache, CacheConfig) else None, config)
        self._versions: dict[tuple[str, str | None], str] = {}
        self._before_host_cache: dict[
            tuple[str | None, str | None], tuple[tuple[str, str], ...]
        ] = {}
        self._origin: Origin | None = None
        self._region = ""
        self._region_urls: dict[str, str] = {}
        self._origins: dict[str, Origin] = {}
        self._signers: dict[str, RequestSigner] = {}
        self._credentials: CredentialSource | None = None
        self._health_task: asyncio.Task[None] | None = None
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
        regions = {t.region for r in self._router.routes.values() for t in r.config.targets}
        region, url, region_urls, fetch = await asyncio.to_thread(
            self._resolve_with_botocore, {r for r in regions if r}
        )
        self._region, self._region_urls = region, region_urls
        self._origin = Origin.from_url(url)
        if self.config.credentials is not None:
            self._credentials = CredentialSource.static(self.config.credentials)
        else:
            assert fetch is not None
            self._credentials = CredentialSource(fetch)
        await self._credentials.start()
        await self._transport.start(self._all_origins())
        if self._cache is not None:
            await self._cache.start()
        if any(r.config.health_check.enabled for r in self._router.routes.values()):
            self._health_task = asyncio.get_running_loop().create_task(self._health_checks())
        self._started = True

    def _all_origins(self) -> list[Origin]:
        assert self._origin is not None
        origins = {self._origin}
        for route in self._router.routes.values():
            for state in route.targets:
                origins.add(self._target_origin(state.target.url, state.target.region))
        return list(origins)

    def _resolve_with_botocore(self, regions: set[str]) -> tuple[str, str, dict[str, str], Any]:
        """Region, runtime URLs and credential chain, resolved as botocore would.

        Runs once, in a thread: building a botocore client costs tens of
        milliseconds, which is fine at start and never acceptable per call.
        """
        import botocore.session

        session = botocore.session.get_session()
        if self.config.profile:
            session.set_config_variable("profile", self.config.profile)
        region = self.config.region or session.get_config_variable("region")
        if not region:
            raise errors.ConfigError(
                "region: not set (pass region=, set it in the config, or set AWS_DEFAULT_REGION)"
            )
        configured = self.config.endpoint_url or _endpoint_from_environment()
        url = configured or self._botocore_endpoint(session, region)
        # Targets in other regions need their own regional runtime host.
        region_urls = {r: self._botocore_endpoint(session, r) for r in regions if r != region}
        fetch = botocore_fetcher(session) if self.config.credentials is None else None
        return region, url, region_urls, fetch

    def _botocore_endpoint(self, session: Any, region: str) -> str:
        import botocore.config

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
        return str(client.meta.endpoint_url)

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

    # -- targets -------------------------------------------------------------

    def _target_origin(self, url: str | None, region: str | None) -> Origin:
        assert self._origin is not None
        if url is None and (region is None or region == self._region):
            return self._origin
        if url is None:
            assert region is not None
            url = (
                self._region_urls.get(region) or f"https://runtime.sagemaker.{region}.amazonaws.com"
            )
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = Origin.from_url(url)
        return origin

    def _signer_for(self, region: str | None) -> RequestSigner:
        region = region or self._region
        signer = self._signers.get(region)
        if signer is None:
            assert self._credentials is not None
            signer = RequestSigner(SigV4Signer(region), self._credentials.current)
            self._signers[region] = signer
        return signer

    def _plan_for(self, route: Route, state: TargetState) -> TargetPlan:
        target = state.target
        check_endpoint_name(target.endpoint)
        return TargetPlan(
            target.endpoint,
            self._target_origin(target.url, target.region),
            self._signer_for(target.region),
            target.variant,
            self.metrics.target(route.name, state.key),
        )

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
        cache: bool | None = None,
        cache_ttl: float | None = None,
    ) -> InvokeResult:
        """InvokeEndpoint through the route named ``endpoint``.

        ``timeout`` (seconds) is the call's one deadline: pool waits, attempts,
        hedges, backoffs and retries all spend from it. ``cache=False`` skips
        the prediction cache for this call; ``cache_ttl`` overrides its TTL.
        Both default to the route's ``cache``/``cache_ttl_s``, then the
        ``[cache]`` table's.
        Raises a :class:`gateway.errors.GatewayError` subclass on failure.
        """
        if not self._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        route = self._router.resolve(endpoint)
        if timeout is None:
            timeout = route.timeout_s or self._default_timeout
        check_payload(body)
        before_host = self._before_host_cache.get((content_type, accept))
        if before_host is None:
            before_host = self._before_host(content_type, accept)
        # A session is stateful on the far side: never answer it from a cache.
        key: str | None = None
        cache_store = self._cache
        if (
            cache_store is not None
            and session_id is None
            and (route.config.cache if cache is None else cache)
        ):
            variant_key = _variant_key(
                target_variant, custom_attributes, target_container_hostname, inference_component
            )
            key = self._cache_key(route.name, target_model, variant_key, content_type, accept, body)
            entry = cache_store.peek_near(key)
            if entry is not None:
                return _result_from_entry(entry, "near")  # nothing else to build
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
        ):
            self._add_sagemaker_headers(
                after_host,
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
        deadline = time.monotonic() + timeout
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh()  # only inside the mandatory window
        pinned = target_variant is not None
        if key is None:
            return await self._invoker.invoke(
                route, target_model, before_host, after_host, pinned, body, deadline
            )
        load = functools.partial(
            self._invoker.invoke,
            route,
            target_model,
            before_host,
            after_host,
            pinned,
            body,
            deadline,
        )
        return await self._invoke_cached(load, key, cache_ttl or route.config.cache_ttl_s)

    def _cache_key(
        self,
        route: str,
        model: str | None,
        variant_key: str | None,
        content_type: str | None,
        accept: str | None,
        body: bytes,
    ) -> str:
        assert self._cache is not None
        versions = self._versions
        version = (
            (versions.get((route, model)) or versions.get((route, None))) if versions else None
        )
        return self._cache.key_for(route, model, variant_key, content_type, accept, version, body)

    async def _invoke_cached(
        self, invoke: Callable[[], Awaitable[InvokeResult]], key: str, ttl: float | None
    ) -> InvokeResult:
        cache = self._cache
        assert cache is not None
        loaded: list[InvokeResult] = []

        async def load() -> Entry:
            result = await invoke()
            loaded.append(result)
            return _entry_from_result(result)

        entry, source = await cache.get_or_load(key, load, ttl_s=ttl)
        if source is CacheSource.LOADED and loaded:
            return loaded[0]
        return _result_from_entry(entry, source.value)

    def set_cache_version(
        self, endpoint: str, version: str, target_model: str | None = None
    ) -> None:
        """Tag cached answers of ``endpoint`` (or one of its models) with ``version``.

        Bumping the tag after deploying a new model makes every answer cached
        under the old tag unreachable: no stale prediction outlives a deploy.
        """
        self._versions[(endpoint, target_model)] = version

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
        timeout: float | None = None,
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
                timeout=timeout,
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
        timeout: float | None,
    ) -> OpenedStream:
        route, state, plan = self._pick_single(endpoint)
        if timeout is None:
            timeout = route.timeout_s or self._default_timeout
        deadline = time.monotonic() + timeout
        # The stream API names its accept header differently from InvokeEndpoint.
        headers = [*self._before_host(content_type, None), ("host", plan.host)]
        extra = {
            "custom_attributes": custom_attributes,
            "inference_component": inference_component,
            "inference_id": inference_id,
            "session_id": session_id,
            "target_container_hostname": target_container_hostname,
            "target_variant": target_variant or plan.variant,
        }
        self._add_sagemaker_headers(headers, extra, accept=accept)
        path = f"/endpoints/{plan.endpoint}/invocations-response-stream"
        check_payload(body)
        request = PreparedRequest(
            plan.origin, path, SigV4Signer.request_prefix("POST", path), headers, body, plan.signer
        )
        await self._ensure_credentials()
        started = route.start(state)
        finish = functools.partial(self._finish_single, route, state, plan, started)
        try:
            stream = await self._transport.stream(request, deadline)
        except BaseException as error:
            finish(error)
            raise
        into.response_headers = stream.headers
        into.target = plan.endpoint
        return stream, finish

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
        route, state, plan = self._pick_single(endpoint)
        if timeout is None:
            timeout = route.timeout_s or self._default_timeout
        deadline = time.monotonic() + timeout
        headers = [("host", plan.host)]
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
        path = f"/endpoints/{plan.endpoint}/async-invocations"
        request = PreparedRequest(
            plan.origin, path, SigV4Signer.request_prefix("POST", path), headers, b"", plan.signer
        )
        await self._ensure_credentials()
        started = route.start(state)
        error: BaseException | None = None
        try:
            response = await self._transport.request(request, deadline)
            if response.status not in (200, 202):
                raise decode_error(response)
            return async_invocation_from_response(response)
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._finish_single(route, state, plan, started, error)

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
        return self._origin

    def prometheus_collector(self) -> Any:
        """A ``prometheus_client`` collector of the gateway's own metrics."""
        return self.metrics.collector(self._extra_metrics)

    def _extra_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ejections = CounterMetricFamily(
            "sagemaker_gateway_ejections", "Times a target was ejected", labels=["route", "target"]
        )
        state = GaugeMetricFamily(
            "sagemaker_gateway_target_healthy",
            "1 when the target takes traffic",
            labels=["route", "target"],
        )
        for name, route in self._router.routes.items():
            for target in route.targets:
                ejections.add_metric([name, target.key], target.ejections)
                state.add_metric([name, target.key], float(target.state is TargetHealth.HEALTHY))
        yield ejections
        yield state
        if self._cache is not None:
            stats = self._cache.stats
            hits = CounterMetricFamily(
                "sagemaker_gateway_cache_hits", "Cache hits by tier", labels=["tier"]
            )
            hits.add_metric(["near"], stats.near_hits)
            hits.add_metric(["redis"], stats.redis_hits)
            hits.add_metric(["stale"], stats.stale_served)
            hits.add_metric(["coalesced"], stats.coalesced)
            yield hits
            yield CounterMetricFamily(
                "sagemaker_gateway_cache_misses", "Cache misses", value=stats.misses
            )
            yield CounterMetricFamily(
                "sagemaker_gateway_cache_redis_errors",
                "Redis errors and timeouts (the cache failed open)",
                value=stats.redis_errors + stats.redis_timeouts,
            )

    # -- internals -----------------------------------------------------------

    def _pick_single(self, endpoint: str) -> tuple[Route, TargetState, TargetPlan]:
        if not self._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        route = self._router.resolve(endpoint)
        state = route.pick(None)
        if state is None:
            raise errors.NoHealthyTarget(f"route {route.name}: every target is ejected")
        return route, state, self._invoker.plan(route, state)

    def _finish_single(
        self,
        route: Route,
        state: TargetState,
        plan: TargetPlan,
        started: float,
        error: BaseException | None,
    ) -> None:
        if error is None:
            route.finish(state, started, Outcome.SUCCESS)
            plan.metrics.record_success(time.monotonic() - started)
        elif isinstance(error, asyncio.CancelledError | GeneratorExit):
            route.finish(state, started, Outcome.CANCELLED)
        else:
            route.finish(state, started, outcome_of(error))
            plan.metrics.record_error(getattr(error, "code", type(error).__name__))

    async def _health_checks(self) -> None:
        """Optional active checks: a cheap invocation to each target when it is due."""
        routes = [r for r in self._router.routes.values() if r.config.health_check.enabled]
        tick = max(0.05, min(r.config.health_check.interval_s for r in routes) / 2)
        while True:
            await asyncio.sleep(tick)
            for route in routes:
                route.refresh_health()
                check = route.config.health_check
                for state in route.targets:
                    if route.due_for_health_check(state) or route.needs_probe(state):
                        healthy = await self._check_target(
                            route, state, check.body, check.content_type
                        )
                        route.record_health_check(state, healthy)

    async def _check_target(
        self, route: Route, state: TargetState, body: bytes, content_type: str
    ) -> bool:
        plan = self._invoker.plan(route, state)
        headers = [("content-type", content_type), ("host", plan.host)]
        request = PreparedRequest(
            plan.origin, plan.invoke_path, plan.invoke_prefix, headers, body, plan.signer
        )
        try:
            response = await self._transport.request(request, time.monotonic() + 1.0)
        except errors.GatewayError:
            return False
        return response.status == 200

    def _before_host(
        self, content_type: str | None, accept: str | None
    ) -> tuple[tuple[str, str], ...]:
        """The signable headers that sort before ``host``, in SigV4's order.

        Most callers send the same few content types: each pair is validated
        once and its headers kept.
        """
        key = (content_type, accept)
        headers = self._before_host_cache.get(key)
        if headers is None:
            headers = ()
            if accept is not None:
                headers += (("accept", check_header_value("accept", accept)),)
            if content_type is not None:
                headers += (("content-type", check_header_value("content-type", content_type)),)
            if len(self._before_host_cache) < _MAX_CACHED_VALUES:
                self._before_host_cache[key] = headers
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

    async def _ensure_credentials(self) -> None:
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh()


def _route_configs(config: GatewayConfig) -> list[RouteConfig]:
    routes = config.sections.get("routes")
    if not routes:
        return []
    try:
        return list(parse_routes(routes).values())
    except RouteConfigError as exc:
        raise errors.ConfigError(str(exc)) from None


def _make_cache(explicit: CacheConfig | None, config: GatewayConfig) -> PredictionCache | None:
    if explicit is None:
        section = config.sections.get("cache")
        if section is None:
            return None
        try:
            explicit = CacheConfig.from_mapping(section)
        except CacheConfigError as exc:
            raise errors.ConfigError(str(exc)) from None
    return PredictionCache(explicit) if explicit.enabled else None


def _variant_key(
    variant: str | None, attributes: str | None, hostname: str | None, component: str | None
) -> str | None:
    """Everything besides the body that can change a model's answer, as one key part."""
    if attributes is None and hostname is None and component is None:
        return variant
    return "\x1f".join(part or "" for part in (variant, attributes, hostname, component))


def _entry_from_result(result: InvokeResult) -> Entry:
    meta: list[tuple[str, str]] = []
    if result.invoked_variant is not None:
        meta.append((_META_VARIANT, result.invoked_variant))
    if result.custom_attributes is not None:
        meta.append((_META_ATTRIBUTES, result.custom_attributes))
    if result.target is not None:
        meta.append((_META_TARGET, result.target))
    return Entry(result.body, result.content_type or "", tuple(meta))


_META_FIELDS = {_META_VARIANT: "invoked_variant", _META_ATTRIBUTES: "custom_attributes"}


def _result_from_entry(entry: Entry, source: str) -> InvokeResult:
    fields = {"content_type": entry.content_type} if entry.content_type else {}
    target = None
    for name, value in entry.meta:
        if name == _META_TARGET:
            target = value
        else:
            field = _META_FIELDS.get(name)
            if field is not None:
                fields[field] = value
    return InvokeResult.from_fields(entry.body, fields, target, source)


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
