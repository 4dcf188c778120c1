# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
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
import functools
import os
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from mypy_extensions import mypyc_attr

from gateway import errors
from gateway._aws.sigv4 import Credentials
from gateway._config.assembly import (
    config_from_keywords,
    defaults_template,
    make_cache,
    make_transport,
    route_configs,
)
from gateway._config.env import apply_environment, explain
from gateway._config.options import GatewayConfig, PoolConfig
from gateway._config.reader import load_toml
from gateway._http.interfaces import Transport
from gateway._http.message import Origin
from gateway._invoke import operations
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    AsyncInvocation,
    InvokeResult,
    MemberOrder,
    check_header_value,
    decode_error,
    secrets_in,
)
from gateway._invoke.cached import CachedCalls
from gateway._invoke.call import Invoker
from gateway._invoke.credentials import CredentialSource
from gateway._invoke.runtimes import (
    GATEWAY_RUNTIME,
    INFERENCE_ROUTER_RUNTIME,
    INVOKE_GLOBAL_GATEWAY,
    INVOKE_ROUTER,
    RuntimeCalls,
    RuntimeStream,
)
from gateway._invoke.streaming import InvokeStream, payload_parts
from gateway._invoke.target_plans import TargetPlanner
from gateway._observe.events import Emit, Event, circuit_event, health_event
from gateway._observe.hooks import Hook, Instrumentation
from gateway._observe.logs import StateLog
from gateway._observe.prometheus import GatewayMetrics, gateway_collector, gateway_metrics
from gateway._observe.tracing import tracing_hook
from gateway.cache import CacheConfig, PredictionCache
from gateway.routing import Route, Router, TargetState

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Gateway", "InvokeStream"]

# Generous upper bound for a call with no timeout: SageMaker's own 60 s
# container limit plus transfer time.
_NO_TIMEOUT_S = 70.0
# A caller's user agent is cut to this many characters before ours is appended.
_MAX_CALLER_AGENT = 512
_MAX_REMEMBERED_AGENTS = 64

# Each typed method's members by name, in the order its values are listed. The installed
# botocore's model decides which members an operation has and their order in the call's
# tuple: the values are placed by these names (MemberOrder), never by position.
_INVOKE_MEMBERS = MemberOrder(
    INVOKE,
    (
        "Accept",
        "ContentType",
        "CustomAttributes",
        "EnableExplanations",
        "InferenceComponentName",
        "InferenceId",
        "PrefixAwareId",
        "SessionId",
        "TargetContainerHostname",
        "TargetModel",
        "TargetVariant",
    ),
)
_INVOKE_STREAM_MEMBERS = MemberOrder(
    INVOKE_STREAM,
    (
        "ContentType",
        "Accept",
        "CustomAttributes",
        "InferenceComponentName",
        "InferenceId",
        "PrefixAwareId",
        "SessionId",
        "TargetContainerHostname",
        "TargetVariant",
    ),
)
_INVOKE_ASYNC_MEMBERS = MemberOrder(
    INVOKE_ASYNC,
    (
        "Accept",
        "ContentType",
        "CustomAttributes",
        "Filename",
        "InferenceId",
        "InputLocation",
        "InvocationTimeoutSeconds",
        "RequestTTLSeconds",
        "S3OutputPathExtension",
    ),
)
# The newer runtimes' operations may be missing from the installed botocore: their
# names are placed when the operation's runtime starts.
_ROUTER_MEMBERS = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "InferenceId",
    "PrefixAwareId",
    "RoutingTargetName",
)
_ROUTER_ASYNC_MEMBERS = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "Filename",
    "InferenceId",
    "InputLocation",
    "InvocationTimeoutSeconds",
    "RequestTTLSeconds",
    "RoutingTargetName",
    "S3OutputPathExtension",
)
_GLOBAL_GATEWAY_MEMBERS = ("Accept", "ContentType", "CustomerIdentityToken")


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
            config = config_from_keywords(
                region=region,
                endpoint_url=endpoint_url,
                credentials=credentials,
                profile=profile,
                transport=transport if isinstance(transport, str) else "native",
                pool=pool,
                timeout=timeout,
                routes=routes,
                cache=cache,
                use_fips_endpoint=use_fips_endpoint,
                use_dualstack_endpoint=use_dualstack_endpoint,
                ignore_configured_endpoint_urls=ignore_configured_endpoint_urls,
                ca_bundle=ca_bundle,
                user_agent_extra=user_agent_extra,
                user_agent_appid=user_agent_appid,
                defaults=defaults,
            )
        self.config = config
        self._transport: Transport = (
            transport if not isinstance(transport, str) else make_transport(config)
        )
        self._default_timeout = (
            config.default_timeout_ms / 1000 if config.default_timeout_ms else _NO_TIMEOUT_S
        )
        self._router = Router(
            route_configs(config),
            observer=self._health_changed,
            default_template=defaults_template(config),
        )
        self._targets = TargetPlanner(config)
        self._invoker = Invoker(self._transport, self._targets)
        # The inference router and Global Inference Gateway runtimes, set up on first use.
        self._runtimes = RuntimeCalls(self)
        self._cache = make_cache(cache if isinstance(cache, CacheConfig) else None, config)
        self._cached = CachedCalls(self._cache) if self._cache is not None else None
        # The instrumentation stream (gateway._observe.events): None while no hook is
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
        """Resolve hosts and credentials, open the pools and start health checks.

        ``async with Gateway(...)`` calls it. A route over a runtime the installed
        botocore has no model of raises :class:`gateway.errors.ServiceModelUnavailable`.
        """
        if self._started:
            return
        self._runtimes.check_models()
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
        tracing = tracing_hook(self.hooks, region)
        if tracing is not None:
            self.add_hook(tracing)
        checked = [r for r in self._router.routes.values() if r.config.health_check.enabled]
        if checked:
            self._health_task = asyncio.get_running_loop().create_task(
                self._invoker.health_checks(checked)
            )
        self._started = True

    async def aclose(self) -> None:
        """Stop health checks and close every connection and the cache's clients."""
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

    def invoke(
        self,
        endpoint: str,
        body: Buffer,
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
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeEndpoint through the route named ``endpoint`` (await the result).

        ``timeout`` (seconds) is the call's one deadline: pool waits, attempts,
        hedges, backoffs and retries all spend from it. ``cache=False`` skips
        the prediction cache for this call; ``cache_ttl`` overrides its TTL.
        Both default to the route's ``cache``/``cache_ttl_s``, then the
        ``[cache]`` table's. ``user_agent``: the caller's own (a proxy's
        client's), sent first with the gateway's appended.
        Raises a :class:`gateway.errors.GatewayError` subclass on failure.
        """
        # The values of _INVOKE_MEMBERS' names, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            enable_explanations,
            inference_component,
            inference_id,
            prefix_aware_id,
            session_id,
            target_container_hostname,
            target_model,
            target_variant,
        )
        return operations.invoke_members(
            self, endpoint, body, members, timeout, cache, cache_ttl, user_agent, _INVOKE_MEMBERS
        )

    def invoke_members(
        self,
        endpoint: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None = None,
        cache: bool | None = None,
        cache_ttl: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeEndpoint with its header members as one tuple, in ``_api.INVOKE.headers`` order.

        For relays (the sidecar, ``gateway.compat``) that hold the members by
        name or header: every member of the installed model is sent and keyed,
        none spelled out here.
        """
        return operations.invoke_members(
            self, endpoint, body, members, timeout, cache, cache_ttl, user_agent
        )

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
        body: Buffer,
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
        # The values of _INVOKE_STREAM_MEMBERS' names, in its order.
        members = (
            content_type,
            accept,
            custom_attributes,
            inference_component,
            inference_id,
            prefix_aware_id,
            session_id,
            target_container_hostname,
            target_variant,
        )
        return self._stream(endpoint, body, members, timeout, user_agent, _INVOKE_STREAM_MEMBERS)

    def invoke_stream_members(
        self,
        endpoint: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> InvokeStream:
        """``invoke_stream`` with the members as a tuple (``_api.INVOKE_STREAM.headers`` order)."""
        return self._stream(endpoint, body, members, timeout, user_agent, None)

    def _stream(
        self,
        endpoint: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None,
        user_agent: str | None,
        order: MemberOrder | None,
    ) -> InvokeStream:
        stream = InvokeStream()
        stream._parts = payload_parts(
            functools.partial(
                operations.open_stream,
                self,
                stream,
                endpoint,
                body,
                members,
                timeout,
                user_agent,
                order,
            ),
            decode_error,
            secrets_in(INVOKE_STREAM, members) if order is None else order.secrets(members),
        )
        return stream

    async def invoke_async(
        self,
        endpoint: str,
        *,
        input_location: str | None = None,
        body: Buffer | None = None,
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
        # The values of _INVOKE_ASYNC_MEMBERS' names, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            filename,
            inference_id,
            input_location,
            invocation_timeout_seconds,
            request_ttl_seconds,
            s3_output_path_extension,
        )
        return await operations.invoke_async_members(
            self, endpoint, body, members, timeout, user_agent, _INVOKE_ASYNC_MEMBERS
        )

    def invoke_async_members(
        self,
        endpoint: str,
        body: Buffer | None,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, AsyncInvocation]:
        """``invoke_async`` with the members as one tuple (``_api.INVOKE_ASYNC.headers`` order)."""
        return operations.invoke_async_members(self, endpoint, body, members, timeout, user_agent)

    # -- operations ----------------------------------------------------------

    def route_health(self) -> dict[str, bool]:
        """Per configured route: is at least one target taking traffic and not failing?

        A route never ejects its last targets (never all of them, never a lone
        one), so ejection alone would never show a route whose every target
        fails: a target that has failed as many calls in a row as would eject
        it counts as down too, until a success (``Route.target_up``). Failures
        are its own state: its endpoint not found or its model failing count,
        a caller's malformed request does not.
        """
        return {
            name: any(route.target_up(t) for t in route.targets)
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
        """Send every instrumentation event (``gateway._observe.events``) to ``hook``."""
        self._instrumentation.add(hook)

    def remove_hook(self, hook: Hook) -> None:
        """Stop sending events to ``hook``."""
        self._instrumentation.remove(hook)

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return self._instrumentation.hooks

    def _set_emit(self, emit: Emit | None) -> None:
        self._emit = emit
        self._invoker.emit = emit
        self._runtimes.set_emit(emit)

    # A literal default (DEFAULT_LABEL_CAP's value): the compiled build can then show the
    # signature to help() and inspect (mypyc gives none for a default it cannot print).
    def enable_metrics(self, label_cap: int = 100) -> GatewayMetrics:
        """Count calls from now on (a ``GatewayMetrics`` hook); returns the counters.

        Idempotent: the first call decides ``label_cap`` (distinct error-code
        label values kept before new ones fold into ``other``). Route and
        target labels are the configured names; any other name counts as
        ``unconfigured``.
        """
        if self._metrics is None:
            self._metrics = gateway_metrics(self._router, self._cache, label_cap)
            self.add_hook(self._metrics)
        return self._metrics

    @property
    def metrics(self) -> GatewayMetrics:
        """The Prometheus counters (enabled on first access, see ``enable_metrics``)."""
        return self.enable_metrics()

    def prometheus_collector(self) -> Any:
        """A ``prometheus_client`` collector of the gateway's own metrics (enables them)."""
        return gateway_collector(self.enable_metrics(), self._router, self._cache)

    # State changes are rare: always logged (rate-limited), then streamed.

    def _state_changed(self, event: Event) -> None:
        self._state_log(event)
        emit = self._emit
        if emit is not None:
            emit(event)

    def _health_changed(self, route: Route, state: TargetState) -> None:
        event = health_event(route, state)
        if event is not None:
            self._state_changed(event)

    def _circuit_changed(self, state: str) -> None:
        self._state_changed(circuit_event(state))

    # -- internals -----------------------------------------------------------

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

    async def _ensure_credentials(self, deadline: float) -> None:
        credentials = self._credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh(deadline)

    # -- inference routers and Global Inference Gateways -----------------------

    def invoke_router(
        self,
        router: str,
        body: Buffer,
        *,
        routing_target: str,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeInferenceRouter: the router ``router`` sends ``body`` to one destination
        of its routing target ``routing_target`` (await the result).

        The result's ``routed_resource_arn`` and ``routing_reason`` say where the
        router sent the call and why. The call has one deadline, and is hedged
        and retried by the ``[defaults]`` route rules, as ``invoke`` on a bare
        endpoint name is.
        """
        # The values of _ROUTER_MEMBERS' names, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            inference_id,
            prefix_aware_id,
            routing_target,
        )
        return self._runtimes.invoke(
            INFERENCE_ROUTER_RUNTIME,
            INVOKE_ROUTER,
            router,
            body,
            members,
            timeout,
            user_agent,
            _ROUTER_MEMBERS,
        )

    def invoke_router_members(
        self,
        router: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """``invoke_router`` with the members as one tuple, in the operation's signing order."""
        return self._runtimes.invoke(
            INFERENCE_ROUTER_RUNTIME, INVOKE_ROUTER, router, body, members, timeout, user_agent
        )

    async def invoke_router_async(
        self,
        router: str,
        *,
        routing_target: str,
        input_location: str,
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
        """InvokeInferenceRouterAsync: queue a request whose input is in S3 (``input_location``)."""
        # The values of _ROUTER_ASYNC_MEMBERS' names, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            filename,
            inference_id,
            input_location,
            invocation_timeout_seconds,
            request_ttl_seconds,
            routing_target,
            s3_output_path_extension,
        )
        return await self._runtimes.invoke_async(
            router, members, timeout, user_agent, _ROUTER_ASYNC_MEMBERS
        )

    async def invoke_router_async_members(
        self,
        router: str,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> AsyncInvocation:
        """``invoke_router_async`` with the members as one tuple (signing order)."""
        return await self._runtimes.invoke_async(router, members, timeout, user_agent)

    def invoke_global_gateway(
        self,
        gateway_id: str,
        body: Buffer,
        *,
        content_type: str = "application/json",
        accept: str | None = None,
        customer_identity_token: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeGlobalInferenceGateway: an OpenAI-compatible JSON ``body`` whose ``model``
        picks the model (await the result; its ``body`` is the completion).

        ``customer_identity_token`` (a JWT) is passed through, signed, and never
        logged or put in an error's text.
        """
        members = (accept, content_type, customer_identity_token)  # _GLOBAL_GATEWAY_MEMBERS
        return self._runtimes.invoke(
            GATEWAY_RUNTIME,
            INVOKE_GLOBAL_GATEWAY,
            gateway_id,
            body,
            members,
            timeout,
            user_agent,
            _GLOBAL_GATEWAY_MEMBERS,
        )

    def invoke_global_gateway_members(
        self,
        gateway_id: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """``invoke_global_gateway`` with the members as one tuple (signing order)."""
        return self._runtimes.invoke(
            GATEWAY_RUNTIME, INVOKE_GLOBAL_GATEWAY, gateway_id, body, members, timeout, user_agent
        )

    def invoke_global_gateway_stream(
        self,
        gateway_id: str,
        body: Buffer,
        *,
        content_type: str = "application/json",
        accept: str | None = None,
        customer_identity_token: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> RuntimeStream:
        """InvokeGlobalInferenceGatewayWithResponseStream: ``async for chunk in ...``.

        Each chunk is a ``PayloadPart``'s bytes: the model server's SSE
        (``data: {...}`` lines). A failure event mid-stream raises
        ``InternalStreamFailure`` or ``ModelError``; never hedged or retried.
        """
        members = (accept, content_type, customer_identity_token)  # _GLOBAL_GATEWAY_MEMBERS
        return self._runtimes.invoke_stream(
            gateway_id, body, members, timeout, user_agent, _GLOBAL_GATEWAY_MEMBERS
        )

    def invoke_global_gateway_stream_members(
        self,
        gateway_id: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> RuntimeStream:
        """``invoke_global_gateway_stream`` with the members as one tuple (signing order)."""
        return self._runtimes.invoke_stream(gateway_id, body, members, timeout, user_agent)
