# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, re-check attributes narrowed
# before an await. A compiled install needs a rebuild after edits.
"""What a call reads of its ``Gateway``: the call context and one lane per runtime.

``Gateway`` builds a :class:`CallContext` and hands it to the call pipeline
(``gateway._invoke.pipeline``), which never sees the ``Gateway`` itself. A
:class:`Lane` is one runtime service's routes, hosts and invoker: the
``sagemaker-runtime`` lane is built with the Gateway and started by its
``start``; the inference router and Global Inference Gateway lanes are built
and started (hosts resolved with botocore) on their first call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from gateway import errors
from gateway._aws.models import (
    GATEWAY_RUNTIME,
    INFERENCE_ROUTER_RUNTIME,
    SAGEMAKER_RUNTIME,
    service_model,
)
from gateway._config.assembly import defaults_template, make_cache, route_configs
from gateway._config.options import GatewayConfig
from gateway._http.interfaces import Transport
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    MemberOrder,
    Operation,
    answer_of,
    body_limit,
    check_gateway_id,
    check_header_value,
    decode_runtime_error,
    operation_table,
    request_headers,
    secrets_in,
    secrets_named,
)
from gateway._invoke.cached import CachedCalls, KeyFields, KeyLayout
from gateway._invoke.call import Invoker
from gateway._invoke.credentials import CredentialSource
from gateway._invoke.target_plans import TargetPlanner
from gateway._observe.events import Emit, Event
from gateway.cache import CacheConfig, PredictionCache
from gateway.routing import Route, RouteConfig, Router, TargetState
from gateway.routing._config import parse_routes

__all__ = [
    "NOT_STARTED",
    "CallContext",
    "Lane",
    "OperationPlan",
    "assemble",
    "global_gateway_routes",
]

# Generous upper bound for a call with no timeout: SageMaker's own 60 s
# container limit plus transfer time.
_NO_TIMEOUT_S = 70.0
NOT_STARTED = "the gateway is not started: use 'async with Gateway(...)'"
# A caller's user agent is cut to this many characters before ours is appended.
_MAX_CALLER_AGENT = 512
_MAX_REMEMBERED_AGENTS = 64

HealthObserver = Callable[[Route, TargetState], None]


class Lane:
    """One runtime service: its routes, its hosts and its own invoker."""

    __slots__ = ("_lock", "invoker", "planner", "router", "routes", "service", "started")

    def __init__(
        self, service: str, router: Router, planner: TargetPlanner, invoker: Invoker
    ) -> None:
        self.service = service
        self.router = router
        self.planner = planner
        self.invoker = invoker
        self.routes: tuple[RouteConfig, ...] = ()
        self.started = False
        self._lock = asyncio.Lock()

    @classmethod
    def for_runtime(
        cls,
        service: str,
        config: GatewayConfig,
        transport: Transport,
        observer: HealthObserver,
        routes: tuple[RouteConfig, ...] = (),
    ) -> Lane:
        """A newer runtime's lane: default routes per name, its own error shapes."""
        router = Router(routes, default_template=defaults_template(config), observer=observer)
        planner = TargetPlanner(config, service)
        invoker = Invoker(transport, planner)
        invoker.decode = decode_runtime_error
        lane = cls(service, router, planner, invoker)
        lane.routes = routes
        return lane

    async def start(self, credentials: CredentialSource) -> None:
        """Resolve this runtime's hosts with botocore, once (in a thread)."""
        async with self._lock:
            if self.started:
                return
            service_model(self.service)  # an older botocore: ServiceModelUnavailable
            regions = {t.region for route in self.routes for t in route.targets if t.region}
            region, url, region_urls, _ = await asyncio.to_thread(
                self.planner.resolve_with_botocore, regions
            )
            self.planner.start(region, url, region_urls, credentials)
            self.started = True

    def resolve(self, name: str) -> Route:
        """The route for ``name``: configured, or a default one over the resource it names."""
        try:
            return self.router.resolve(name)
        except errors.ConfigError:
            # Only a bad name gets here (a default route for it failed to build):
            # a bad name says so; else the config's error stands.
            self.planner._check_name(name)
            raise


# The operations whose answers are predictions keyed by what the call sends: the cache
# serves them. (An inference router's answer depends on where it routed the request.)
_CACHED: Final = frozenset({INVOKE.name})
# Member tuples whose headers and cache-key fields are remembered, per operation: most
# calls repeat a few shapes.
_MAX_SHAPES = 4096
# Members unique to an end user, as the per-call ones (InferenceId) are to a call: a tuple
# holding one is never remembered (it would fill the memo and keep a user's token).
_PER_USER: Final = ("CustomerIdentityToken",)

_Shape = tuple[tuple[tuple[str, str], ...], list[tuple[str, str]], KeyFields | None]


class OperationPlan:
    """One operation over its runtime's lane, with what its calls check computed once."""

    __slots__ = (
        "_last_members",
        "_last_shape",
        "_order",
        "answer",
        "fresh",
        "key",
        "lane",
        "limit",
        "model",
        "name",
        "ok",
        "operation",
        "required",
        "routed",
        "sensitive",
        "session",
        "shapes",
        "variant",
    )

    def __init__(self, lane: Lane, operation: Operation) -> None:
        self.lane = lane
        self.operation = operation
        self.name = operation.name
        headers = operation.headers
        # The newer runtimes' required members are checked before sending. SageMaker
        # Runtime checks its own: an older model marks InvokeEndpointAsync's InputLocation
        # required, though the service takes an inline Body in its place.
        self.required = (
            ()
            if operation.service.name == SAGEMAKER_RUNTIME
            else tuple(i for i, m in enumerate(headers) if m.required)
        )
        self.sensitive = operation.sensitive
        self.fresh = operation.per_call + tuple(
            operation.index(n) for n in _PER_USER if n in operation.name_index
        )
        self.limit = body_limit(operation)
        # Places the call itself reads (-1: the installed model has no such member).
        self.model = operation.index("TargetModel")
        self.session = operation.index("SessionId")
        self.variant = operation.index("TargetVariant")
        # Where the cache's key fields are (None: the operation's answers are not cached).
        self.key = KeyLayout(operation) if operation.name in _CACHED else None
        # An inference router's answer says where it routed the request.
        self.routed = lane.service == INFERENCE_ROUTER_RUNTIME
        self.ok = (200, operation.success_status)
        self.answer = answer_of(operation)
        # A member tuple -> its headers and key fields (the call reads it, then shape()).
        self.shapes: dict[tuple[object, ...], _Shape] = {}
        # The tuple last found there, and its shape: see shape_of.
        self._last_members: tuple[object, ...] | None = None
        self._last_shape: _Shape | None = None
        # How a typed method's values go into this model's tuple. One typed method calls
        # each operation, always with the same names tuple: an identity test, no lookup.
        self._order: MemberOrder | None = None

    def place(
        self, names: tuple[str, ...] | None, values: tuple[object, ...]
    ) -> tuple[object, ...]:
        """A typed method's ``values``, one per member of ``names``, as this model's tuple.

        ``names`` None: ``values`` already is the tuple (a relay's).
        """
        if names is None:
            return values
        order = self._order
        if order is None or order.names is not names:
            order = self._order = MemberOrder(self.operation, names)
        return order.place(values)

    def shape_of(self, members: tuple[object, ...]) -> _Shape:
        """:meth:`shape`, the last tuple remembered found by identity: a relay hands the
        same tuple again while its values repeat (``SidecarApp._members``), and a
        tuple's hash and comparison, a dict look-up, cost about 900 instructions."""
        if members is self._last_members:
            last = self._last_shape
            if last is not None:
                return last
        shape = self.shapes.get(members)
        if shape is None:
            return self.shape(members)
        self._last_members = members
        self._last_shape = shape
        return shape

    def shape(self, members: tuple[object, ...]) -> _Shape:
        """The call's request headers (before and after ``host``) and cache-key fields."""
        shape = self.shapes.get(members)
        if shape is not None:
            return shape
        for index in self.required:
            if members[index] is None:
                member = self.operation.headers[index].name
                raise errors.InvalidRequest(f"{member}: required by {self.name}")
        before_host, after_host = request_headers(self.operation, members)
        key = self.key
        shape = (before_host, after_host, None if key is None else key.fields(members))
        for index in self.fresh:
            if members[index] is not None:
                return shape
        if len(self.shapes) >= _MAX_SHAPES:
            self.shapes.clear()
        self.shapes[members] = shape
        self._last_members = members
        self._last_shape = shape
        return shape

    def pinned(self, members: tuple[object, ...]) -> bool:
        """Whether the call names its production variant (a model without one: always)."""
        return self.variant < 0 or members[self.variant] is not None

    def secrets(
        self, values: tuple[object, ...], names: tuple[str, ...] | None = None
    ) -> tuple[str, ...]:
        """The values of the call's sensitive members (``names``: as a typed method lists them)."""
        if names is not None:
            return secrets_named(names, values)
        return secrets_in(self.operation, values)


class CallContext:
    """The parts of one ``Gateway`` that its calls use, and nothing else of it.

    ``emit`` is the instrumentation stream (None while no hook listens: the
    pipeline then builds no event at all); ``credentials`` is set at start.
    """

    __slots__ = (
        "_agents",
        "cached",
        "config",
        "credentials",
        "default_timeout",
        "emit",
        "gateway_routes",
        "lanes",
        "main",
        "observer",
        "plans",
        "prediction_cache",
        "relay_counts",
        "relay_reads_ids",
        "started",
        "transport",
    )

    def __init__(
        self,
        config: GatewayConfig,
        transport: Transport,
        main: Lane,
        prediction_cache: PredictionCache | None,
        default_timeout: float,
        observer: HealthObserver,
        gateway_routes: tuple[RouteConfig, ...] = (),
    ) -> None:
        self.config = config
        self.transport = transport
        self.main = main
        self.lanes: dict[str, Lane] = {main.service: main}
        self.prediction_cache = prediction_cache
        self.cached = CachedCalls(prediction_cache) if prediction_cache is not None else None
        self.default_timeout = default_timeout
        self.observer = observer
        self.gateway_routes = gateway_routes
        self.emit: Emit | None = None
        # What the relay path reads of the hooks, read again whenever they change
        # (set_emit): whether one reads request ids, and the lone metrics hook's count.
        self.relay_reads_ids = False
        self.relay_counts: Callable[[str, str, float, float], None] | None = None
        # Operation name -> its plan, over its lane (built on the operation's first call).
        self.plans: dict[str, OperationPlan] = {}
        self.credentials: CredentialSource | None = None
        self.started = False
        # Caller's user agent -> the one sent (see caller_agent).
        self._agents: dict[str, str | None] = {}

    async def start(self, observer: Callable[[Event], None]) -> str | None:
        """Resolve the main lane's hosts and the credentials, and open the pools.

        ``observer`` hears the credentials' state changes; returns the Region.
        """
        main = self.main
        routes = main.router.routes.values()
        regions = {t.region for r in routes for t in r.config.targets if t.region}
        region, url, region_urls, fetch = await asyncio.to_thread(
            main.planner.resolve_with_botocore, regions
        )
        config = self.config
        if config.credentials is not None:
            credentials = CredentialSource.static(config.credentials)
        else:
            assert fetch is not None
            credentials = CredentialSource(
                fetch,
                advisory_s=config.credential_refresh_advisory_s,
                mandatory_s=config.credential_refresh_mandatory_s,
            )
        self.credentials = credentials
        credentials.observer = observer
        main.planner.start(region, url, region_urls, credentials)
        await credentials.start()
        await self.transport.start(main.planner.all_origins(routes))
        return region

    async def aclose(self) -> None:
        """Close every connection and stop refreshing credentials."""
        await self.transport.aclose()
        if self.credentials is not None:
            await self.credentials.aclose()
        self.started = False

    def check_models(self) -> None:
        """Configured routes over a runtime need its model: ServiceModelUnavailable if absent."""
        if self.gateway_routes:
            service_model(GATEWAY_RUNTIME)

    def add_plan(self, operation: Operation) -> OperationPlan:
        """The plan of an operation of the main (sagemaker-runtime) lane."""
        plan = self.plans[operation.name] = OperationPlan(self.main, operation)
        return plan

    def lane(self, service: str) -> Lane:
        """The lane of ``service``, built on first use."""
        lane = self.lanes.get(service)
        if lane is None:
            routes = self.gateway_routes if service == GATEWAY_RUNTIME else ()
            lane = Lane.for_runtime(service, self.config, self.transport, self.observer, routes)
            lane.invoker.emit = self.emit
            self.lanes[service] = lane
        return lane

    async def started_lane(self, service: str) -> Lane:
        """The lane of ``service``, its hosts resolved (on its first call)."""
        if not self.started:
            raise errors.GatewayError(NOT_STARTED)
        lane = self.lane(service)
        if not lane.started:
            credentials = self.credentials
            assert credentials is not None
            await lane.start(credentials)
        return lane

    async def plan(self, service: str, name: str) -> OperationPlan:
        """The plan of operation ``name``, its lane started (hosts resolved) on its first call."""
        plan = self.plans.get(name)
        if plan is not None and plan.lane.started and self.started:
            return plan
        lane = await self.started_lane(service)
        if plan is None:
            plan = self.plans[name] = OperationPlan(lane, operation_table()[(service, name)])
        return plan

    def set_emit(self, emit: Emit | None) -> None:
        self.emit = emit
        self.relay_reads_ids = emit is not None and bool(getattr(emit, "reads_request_id", True))
        self.relay_counts = None if emit is None else getattr(emit, "call_answered", None)
        for lane in self.lanes.values():
            lane.invoker.emit = emit

    def caller_agent(self, caller: str) -> str | None:
        """``caller``'s user agent (its first 512 characters) with the gateway's appended.

        Remembered: a proxy's callers send a handful of agents, each on
        every call, and checking one costs microseconds.
        """
        agents = self._agents
        if caller in agents:
            return agents[caller]
        own: str = self.main.planner.user_agent
        checked = check_header_value("user-agent", caller[:_MAX_CALLER_AGENT])
        if len(agents) >= _MAX_REMEMBERED_AGENTS:
            agents.clear()
        agent = agents[caller] = f"{checked} {own}" if checked else None
        return agent

    async def fresh_credentials(self, deadline: float) -> None:
        """Wait for credentials only inside their mandatory refresh window."""
        credentials = self.credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh(deadline)


def assemble(
    config: GatewayConfig,
    transport: Transport,
    cache: CacheConfig | None,
    observer: HealthObserver,
) -> CallContext:
    """A Gateway's call context: its sagemaker-runtime lane, its cache and their plans.

    ``cache`` overrides the config's ``[cache]`` table; ``observer`` hears every
    target's health changes, on every lane.
    """
    router = Router(
        route_configs(config), observer=observer, default_template=defaults_template(config)
    )
    planner = TargetPlanner(config)
    main = Lane(SAGEMAKER_RUNTIME, router, planner, Invoker(transport, planner))
    default_timeout = config.default_timeout_ms / 1000 if config.default_timeout_ms else 0.0
    context = CallContext(
        config,
        transport,
        main,
        make_cache(cache, config),
        default_timeout or _NO_TIMEOUT_S,
        observer,
        # Checked now, so a bad table fails the Gateway's construction, not its first call.
        global_gateway_routes(config),
    )
    for operation in (INVOKE, INVOKE_STREAM, INVOKE_ASYNC):
        context.add_plan(operation)
    return context


def global_gateway_routes(config: GatewayConfig) -> tuple[RouteConfig, ...]:
    """``[global_gateway_routes.NAME]``: a model name (or any name) over Global Inference
    Gateways, each target's ``endpoint`` a gateway id, in any Region."""
    section = config.sections.get("global_gateway_routes")
    if not section:
        return ()
    routes = tuple(parse_routes(section).values())
    for route in routes:
        for index, target in enumerate(route.targets):
            where = f"global_gateway_routes.{route.name}.targets[{index}]"
            if target.inference_router is not None or target.endpoint is None:
                raise errors.ConfigError.at(where, "a target is a Global Inference Gateway id")
            try:
                check_gateway_id(target.endpoint)
            except errors.InvalidRequest as exc:
                raise errors.ConfigError.at(f"{where}.endpoint", str(exc)) from None
    return routes
