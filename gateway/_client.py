# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The public client: ``Gateway``, a facade over the call pipeline.

``Gateway`` assembles the parts a call needs (routes, transport, cache,
credentials, instrumentation) into a call context at construction and start;
its typed methods (``gateway._invoke.typed``) and :meth:`Gateway.call` hand
each call to the pipeline (``gateway._invoke.pipeline``) with that context.
The success path stays plain: the near cache, the route, the sorted headers,
a pooled connection, sign, write, parse. No botocore object, no retry
wrapper, no task, no log formatting per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from mypy_extensions import mypyc_attr

from gateway import errors
from gateway._aws.sigv4 import Credentials
from gateway._config.assembly import (
    config_from_keywords,
    make_transport,
)
from gateway._config.env import apply_environment, explain
from gateway._config.options import GatewayConfig, PoolConfig
from gateway._config.reader import load_toml
from gateway._http.interfaces import Transport
from gateway._http.message import Origin
from gateway._invoke import pipeline
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    AsyncInvocation,
    InvokeResult,
    Operation,
)
from gateway._invoke.context import assemble
from gateway._invoke.streaming import InvokeStream
from gateway._invoke.typed import TypedOperations
from gateway._observe.events import Event, circuit_event, health_event
from gateway._observe.hooks import Hook, Instrumentation
from gateway._observe.logs import StateLog
from gateway._observe.prometheus import GatewayMetrics, gateway_collector, gateway_metrics
from gateway._observe.tracing import tracing_hook
from gateway.cache import CacheConfig, PredictionCache
from gateway.routing import Route, Router, TargetState

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Gateway", "InvokeStream"]


# Users (and tests) subclass Gateway; mypyc compiles this module, and a
# compiled class accepts Python subclasses only when told to.
@mypyc_attr(allow_interpreted_subclasses=True)
class Gateway(TypedOperations):
    """An async SageMaker Runtime client built for per-call CPU and tail latency.

    Use it as an async context manager; ``start()``/``aclose()`` do the same.
    ``endpoint`` arguments name either a route from the config (``[routes.NAME]``)
    or, failing that, a SageMaker endpoint. Each operation has a typed method
    (``invoke``, ``invoke_stream``, ``invoke_async``, ``invoke_router``...);
    :meth:`call` takes any operation with its members as one tuple.
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
        overrides = cache if isinstance(cache, CacheConfig) else None
        self._context = context = assemble(config, self._transport, overrides, self._health_changed)
        self._invoke_plan = context.plans[INVOKE.name]
        self._async_plan = context.plans[INVOKE_ASYNC.name]
        main = context.main
        self._router, self._targets, self._invoker = main.router, main.planner, main.invoker
        self._cache = context.prediction_cache
        self._metrics: GatewayMetrics | None = None
        self._state_log = StateLog()
        # The instrumentation stream (gateway._observe.events) goes to the call context:
        # None while no hook is registered, and then the call path builds no event at all.
        self._instrumentation = Instrumentation()
        self._instrumentation.subscribe(context.set_emit)
        for hook in hooks:
            self.add_hook(hook)
        self._health_task: asyncio.Task[None] | None = None

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
        context = self._context
        if context.started:
            return
        context.check_models()
        region = await context.start(self._state_changed)
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
        context.main.started = context.started = True

    async def aclose(self) -> None:
        """Stop health checks and close every connection and the cache's clients."""
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
            self._health_task = None
        if self._cache is not None:
            await self._cache.close()
        await self._context.aclose()

    # -- calls ---------------------------------------------------------------

    def call(
        self,
        operation: Operation,
        resource: str,
        body: Buffer | None,
        members: tuple[object, ...],
        *,
        timeout: float | None = None,
        cache: bool | None = None,
        cache_ttl: float | None = None,
        user_agent: str | None = None,
    ) -> Awaitable[InvokeResult | InvokeStream | AsyncInvocation]:
        """Any operation of the three runtimes, with its header members as one tuple.

        ``members`` is in ``operation.headers`` order (None: unset), so every member
        of the installed model is sent and keyed, none spelled out here: for relays
        (the sidecar, ``gateway.compat``) that hold members by name or header.
        ``resource`` is what the path names (an endpoint, a router, a gateway id).
        Await the answer in the operation's shape: an ``InvokeResult``, an
        ``InvokeStream`` (opened on its first iteration) or an ``AsyncInvocation``.
        ``cache`` and ``cache_ttl`` apply where answers are cached (InvokeEndpoint).
        """
        return pipeline.call(
            self._context, operation, resource, body, members, timeout, cache, cache_ttl, user_agent
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
        cached = self._context.cached
        if cached is not None:
            cached.set_version(endpoint, version, target_model)

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
        emit = self._context.emit
        if emit is not None:
            emit(event)

    def _health_changed(self, route: Route, state: TargetState) -> None:
        event = health_event(route, state)
        if event is not None:
            self._state_changed(event)

    def _circuit_changed(self, state: str) -> None:
        self._state_changed(circuit_event(state))
