"""The inference router and Global Inference Gateway runtimes, for ``Gateway``.

Each runtime has its own default routes (one per router name or gateway id),
hosts (``inferencerouter-runtime.sagemaker.<region>...``,
``gateway-runtime.sagemaker.<region>...``, resolved with botocore on the
runtime's first call, FIPS, dual-stack and ``AWS_ENDPOINT_URL_<SERVICE>``
included) and error shapes. Everything else is InvokeEndpoint's: the
operation table builds the request from the call's member tuple, and the one
``Invoker`` sends it under one deadline, through the pool, signed, hedged and
retried by the route's rules, with the same events.

``CustomerIdentityToken`` and ``CustomAttributes`` are sensitive: no event
carries a member, and an error's text never holds their values, whatever the
far side echoed.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from gateway import errors
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, service_model
from gateway._config.assembly import defaults_template
from gateway._config.options import GatewayConfig
from gateway._http.message import RawResponse
from gateway._invoke.api import (
    SENSITIVE,
    AsyncInvocation,
    InvokeResult,
    MemberOrder,
    Operation,
    async_invocation_from_response,
    before_host_headers,
    check_gateway_id,
    decode_runtime_error,
    operation_table,
    payload_bytes,
    redact,
    safe_request_id,
    sagemaker_headers,
    secrets_in,
    secrets_named,
)
from gateway._invoke.call import Invoker, code_of, prepared
from gateway._invoke.operations import check_timeout
from gateway._invoke.streaming import InvokeStream, OpenedStream, payload_parts
from gateway._invoke.target_plans import TargetPlan, TargetPlanner
from gateway._observe.events import CallFinished, CallStarted, Emit, routing_labels
from gateway.routing import Route, RouteConfig, Router
from gateway.routing._config import parse_routes

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from gateway._client import Gateway

__all__ = [
    "GATEWAY_RUNTIME",
    "INFERENCE_ROUTER_RUNTIME",
    "INVOKE_GLOBAL_GATEWAY",
    "INVOKE_GLOBAL_GATEWAY_STREAM",
    "INVOKE_ROUTER",
    "INVOKE_ROUTER_ASYNC",
    "RuntimeCalls",
    "RuntimeStream",
    "body_limit",
    "redacted",
]

INVOKE_ROUTER: Final = "InvokeInferenceRouter"
INVOKE_ROUTER_ASYNC: Final = "InvokeInferenceRouterAsync"
INVOKE_GLOBAL_GATEWAY: Final = "InvokeGlobalInferenceGateway"
INVOKE_GLOBAL_GATEWAY_STREAM: Final = "InvokeGlobalInferenceGatewayWithResponseStream"
# Member tuples whose checked headers are remembered, per operation.
_MAX_REMEMBERED = 1024
# How deep an error's cause chain is searched for a secret (DeadlineExceeded wraps one).
_MAX_CHAIN = 8


class _Runtime:
    """One runtime service: its default routes, its hosts and its own invoker."""

    def __init__(
        self, service: str, gateway: Gateway, routes: tuple[RouteConfig, ...] = ()
    ) -> None:
        config = gateway.config
        self.service = service
        self.routes = routes
        self.router = Router(
            routes, default_template=defaults_template(config), observer=gateway._health_changed
        )
        self.planner = TargetPlanner(config, service)
        self.invoker = Invoker(gateway.transport, self.planner)
        self.invoker.decode = decode_runtime_error
        self.invoker.emit = gateway._emit
        self.started = False
        self._lock = asyncio.Lock()

    async def start(self, gateway: Gateway) -> None:
        """Resolve this runtime's hosts with botocore, once (in a thread)."""
        async with self._lock:
            if self.started:
                return
            service_model(self.service)  # an older botocore: ServiceModelUnavailable
            regions = {t.region for route in self.routes for t in route.targets if t.region}
            region, url, region_urls, _ = await asyncio.to_thread(
                self.planner.resolve_with_botocore, regions
            )
            credentials = gateway._credentials
            assert credentials is not None
            self.planner.start(region, url, region_urls, credentials)
            self.started = True

    def resolve(self, name: str) -> Route:
        try:
            return self.router.resolve(name)
        except errors.ConfigError:
            self.planner._check_name(name)  # a bad name says so; else the config's error
            raise


class _Op:
    """One operation of a started runtime, with what its calls check computed once."""

    __slots__ = (
        "_after_host",
        "_order",
        "limit",
        "name",
        "operation",
        "required",
        "runtime",
        "sensitive",
    )

    def __init__(self, runtime: _Runtime, operation: Operation) -> None:
        self.runtime = runtime
        self.operation = operation
        self.name = operation.name
        # Places of the required and the sensitive header members in the member tuple.
        self.required = tuple(i for i, m in enumerate(operation.headers) if m.required)
        self.sensitive = tuple(i for i, m in enumerate(operation.headers) if m.name in SENSITIVE)
        self.limit = body_limit(operation)
        # Checked headers after ``host`` by member tuple: a caller sends the same
        # few (a router's routing target), and checking one costs microseconds.
        self._after_host: dict[tuple[object, ...], list[tuple[str, str]]] = {}
        # How the typed method's values go into this model's tuple. One typed method calls
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

    def after_host(self, members: tuple[object, ...]) -> list[tuple[str, str]]:
        """``sagemaker_headers`` of ``members``, remembered unless they hold a secret."""
        headers = self._after_host.get(members)
        if headers is None:
            headers = sagemaker_headers(self.operation, members)
            remembered = self._after_host
            if len(remembered) < _MAX_REMEMBERED and all(
                members[index] is None for index in self.sensitive
            ):
                remembered[members] = headers  # never mutated: each request copies it
        return headers

    def check(self, members: tuple[object, ...]) -> None:
        for index in self.required:
            if members[index] is None:
                member = self.operation.headers[index].name
                raise errors.InvalidRequest(f"{member}: required by {self.name}")


class RuntimeCalls:
    """The four operations of the two runtimes, for one ``Gateway``.

    The success path is kept as lean as ``invoke``'s: the operation's checks
    are computed once, and the secrets are gathered only when an error needs
    redacting.
    """

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._runtimes: dict[str, _Runtime] = {}
        self._ops: dict[str, _Op] = {}
        # Checked now, so a bad table fails the Gateway's construction, not its first call.
        self._gateway_routes = global_gateway_routes(gateway.config)

    def check_models(self) -> None:
        """Configured routes over a runtime need its model: ServiceModelUnavailable if absent."""
        if self._gateway_routes:
            service_model(GATEWAY_RUNTIME)

    def set_emit(self, emit: Emit | None) -> None:
        for runtime in self._runtimes.values():
            runtime.invoker.emit = emit

    def runtime(self, service: str) -> _Runtime:
        runtime = self._runtimes.get(service)
        if runtime is None:
            routes = self._gateway_routes if service == GATEWAY_RUNTIME else ()
            runtime = self._runtimes[service] = _Runtime(service, self._gateway, routes)
        return runtime

    async def _op(self, service: str, operation_name: str) -> _Op:
        """The operation, its runtime started (hosts resolved) on its first call."""
        gateway = self._gateway
        if not gateway._started:
            raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
        runtime = self.runtime(service)
        if not runtime.started:
            await runtime.start(gateway)
        op = self._ops.get(operation_name)
        if op is None:
            op = self._ops[operation_name] = _Op(
                runtime, operation_table()[(service, operation_name)]
            )
        return op

    def _deadline(self, route: Route, timeout: float | None) -> float:
        if timeout is None:
            timeout = route.timeout_s or self._gateway._default_timeout
        else:
            check_timeout(timeout)
        return time.monotonic() + timeout

    async def invoke(
        self,
        service: str,
        operation_name: str,
        name: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None,
        user_agent: str | None,
        names: tuple[str, ...] | None = None,
    ) -> InvokeResult:
        """InvokeInferenceRouter or InvokeGlobalInferenceGateway: routed, hedged, retried.

        ``members`` is the model's member tuple, or with ``names`` a typed method's
        values, one per name.
        """
        try:
            op = self._ops.get(operation_name)
            gateway = self._gateway
            if op is None or not gateway._started:
                op = await self._op(service, operation_name)
            members, names = op.place(names, members), None
            op.check(members)
            runtime = op.runtime
            route = runtime.resolve(name)
            deadline = self._deadline(route, timeout)
            operation = op.operation
            payload = payload_bytes(body, op.limit, operation_name)
            before_host = before_host_headers(operation, members)
            after_host = op.after_host(members)
            credentials = gateway._credentials
            if credentials is not None and credentials.must_wait():
                await credentials.fresh(deadline)
            agent = None if user_agent is None else gateway._caller_agent(user_agent)
            sent = runtime.invoker.invoke(
                route, operation, None, before_host, after_host, True, payload, deadline, agent
            )
            emit = gateway._emit
            if emit is None:
                return await sent
            secrets = secrets_in(operation, members)
            return await _observed(emit, route.name, operation_name, sent, secrets)
        except errors.GatewayError as error:
            redacted(error, _secrets_of(service, operation_name, members, names))
            raise

    async def invoke_async(
        self,
        name: str,
        members: tuple[object, ...],
        timeout: float | None,
        user_agent: str | None,
        names: tuple[str, ...] | None = None,
    ) -> AsyncInvocation:
        """InvokeInferenceRouterAsync: one attempt (the request is queued on the far side)."""
        try:
            op = await self._op(INFERENCE_ROUTER_RUNTIME, INVOKE_ROUTER_ASYNC)
            members, names = op.place(names, members), None
            op.check(members)
            route = op.runtime.resolve(name)
            deadline = self._deadline(route, timeout)
            operation = op.operation
            state, plan = op.runtime.invoker.single(route)
            request = prepared(
                plan,
                operation,
                before_host_headers(operation, members),
                sagemaker_headers(operation, members),
                True,
                b"",  # the input is in S3 (InputLocation): the model has no inline body
            )
            gateway = self._gateway
            if user_agent is not None:
                request.caller_agent = gateway._caller_agent(user_agent)
            await gateway._ensure_credentials(deadline)
            sent = op.runtime.invoker.send_once(
                route, state, plan, request, deadline, (operation.success_status,)
            )
            emit = gateway._emit
            if emit is None:
                return async_invocation_from_response(await sent)
            secrets = secrets_in(operation, members)
            return await _observed_async(emit, route.name, plan.endpoint, sent, secrets)
        except errors.GatewayError as error:
            secrets = _secrets_of(INFERENCE_ROUTER_RUNTIME, INVOKE_ROUTER_ASYNC, members, names)
            redacted(error, secrets)
            raise

    def invoke_stream(
        self,
        name: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None,
        user_agent: str | None,
        names: tuple[str, ...] | None = None,
    ) -> RuntimeStream:
        """InvokeGlobalInferenceGatewayWithResponseStream: the SSE bytes, part by part."""
        secrets = _secrets_of(GATEWAY_RUNTIME, INVOKE_GLOBAL_GATEWAY_STREAM, members, names)
        stream = RuntimeStream(secrets)
        opener = functools.partial(
            self._open_stream, stream, name, body, members, timeout, user_agent, names
        )
        stream._parts = payload_parts(opener, decode_runtime_error, secrets)
        return stream

    async def _open_stream(
        self,
        into: RuntimeStream,
        name: str,
        body: Buffer,
        members: tuple[object, ...],
        timeout: float | None,
        user_agent: str | None,
        names: tuple[str, ...] | None = None,
    ) -> OpenedStream:
        operation_name = INVOKE_GLOBAL_GATEWAY_STREAM
        op = await self._op(GATEWAY_RUNTIME, operation_name)
        members = op.place(names, members)
        op.check(members)
        route = op.runtime.resolve(name)
        deadline = self._deadline(route, timeout)
        operation = op.operation
        payload = payload_bytes(body, op.limit, operation_name)
        state, plan = op.runtime.invoker.single(route)
        request = prepared(
            plan,
            operation,
            before_host_headers(operation, members),
            sagemaker_headers(operation, members),
            True,
            payload,
        )
        gateway = self._gateway
        if user_agent is not None:
            request.caller_agent = gateway._caller_agent(user_agent)
        await gateway._ensure_credentials(deadline)
        emit = gateway._emit
        if emit is not None:
            emit(CallStarted(route.name, None, operation_name))
        started = time.monotonic()
        try:
            stream, finish = await op.runtime.invoker.open_stream(
                route, state, plan, request, deadline
            )
        except BaseException as error:
            if emit is not None:
                emit(_finished(route.name, plan, operation_name, started, error, None))
            raise
        into.response_headers = stream.headers
        into.target = plan.endpoint
        if emit is None:
            return stream, finish
        request_id = safe_request_id(
            stream.headers.get("x-amzn-requestid"), secrets_in(operation, members)
        )
        return stream, _finish_observed(
            emit, finish, route.name, plan, operation_name, started, request_id
        )


class RuntimeStream(InvokeStream):
    """A Global Inference Gateway's response stream: each part is SSE bytes.

    Iterate it (``async for chunk in stream``). A failure event mid-stream
    raises ``InternalStreamFailure`` or ``ModelError`` (``ModelStreamError``);
    an error answer raises its class, its text free of the call's secrets.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self._secrets = secrets

    async def __anext__(self) -> bytes:
        try:
            return await super().__anext__()
        except errors.GatewayError as error:
            redacted(error, self._secrets)
            raise


# -- helpers ------------------------------------------------------------------


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


def _secrets_of(
    service: str,
    operation_name: str,
    members: tuple[object, ...],
    names: tuple[str, ...] | None = None,
) -> tuple[str, ...]:
    if names is not None:  # a typed method's values, one per name
        return secrets_named(names, members)
    operation = operation_table().get((service, operation_name))
    if operation is None:
        # An older botocore (the call fails naming the release it needs): keep every
        # string out of error text.
        return tuple(str(value) for value in members if isinstance(value, str) and value)
    return secrets_in(operation, members)


def redacted(error: errors.GatewayError, secrets: tuple[str, ...]) -> errors.GatewayError:
    """``error`` (and the errors it wraps) with every secret's value taken out of its text."""
    if not secrets:
        return error
    current: BaseException | None = error
    for _ in range(_MAX_CHAIN):
        if current is None:
            break
        current.args = tuple(
            redact(arg, secrets) if isinstance(arg, str) else arg for arg in current.args
        )
        if isinstance(current, errors.ServiceError):
            current.message = redact(current.message, secrets) or ""
        if isinstance(current, errors.ModelError):
            current.original_message = redact(current.original_message, secrets)
        current = current.__cause__ or current.__context__
    return error


def body_limit(operation: Operation) -> int:
    """The largest body the operation takes: its model's, or SageMaker's 6 MiB."""
    body = operation.by_name.get("Body")
    return (body.max_length if body is not None else None) or 6 * 1024 * 1024


def _finished(
    route: str,
    plan: TargetPlan | None,
    operation: str,
    started: float,
    error: BaseException | None,
    request_id: str | None,
    endpoint: str | None = None,
) -> CallFinished:
    if plan is not None:
        endpoint = plan.endpoint
    if request_id is None and error is not None:
        # An error answer's id: the one a caller quotes to AWS support.
        found = getattr(error, "request_id", None)
        request_id = found if isinstance(found, str) else None
    return CallFinished(
        route,
        None,
        endpoint,
        time.monotonic() - started,
        0 if endpoint is None else 1,
        False,
        None,
        None if error is None else code_of(error),
        operation,
        request_id,
    )


async def _observed(
    emit: Emit,
    route: str,
    operation: str,
    call: Awaitable[InvokeResult],
    secrets: tuple[str, ...],
) -> InvokeResult:
    emit(CallStarted(route, None, operation))
    started = time.monotonic()
    try:
        result = await call
    except BaseException as error:
        request_id = getattr(error, "request_id", None)
        emit(
            CallFinished(
                route,
                None,
                None,
                time.monotonic() - started,
                0,
                False,
                None,
                code_of(error),
                operation,
                request_id if isinstance(request_id, str) else None,
            )
        )
        raise
    reason = resource = None
    if operation == INVOKE_ROUTER:
        reason, resource = routing_labels(result.routing_reason, result.routed_resource_arn)
    emit(
        CallFinished(
            route,
            None,
            result.target,
            time.monotonic() - started,
            result.attempts,
            result.hedged,
            None,
            None,
            operation,
            safe_request_id(result.request_id, secrets),
            reason,
            resource,
        )
    )
    return result


async def _observed_async(
    emit: Emit,
    route: str,
    endpoint: str,
    call: Awaitable[RawResponse],
    secrets: tuple[str, ...],
) -> AsyncInvocation:
    emit(CallStarted(route, None, INVOKE_ROUTER_ASYNC))
    started = time.monotonic()
    try:
        answer = async_invocation_from_response(await call)
    except BaseException as error:
        emit(_finished(route, None, INVOKE_ROUTER_ASYNC, started, error, None, endpoint))
        raise
    emit(
        CallFinished(
            route,
            None,
            endpoint,
            time.monotonic() - started,
            1,
            False,
            None,
            None,
            INVOKE_ROUTER_ASYNC,
            safe_request_id(answer.request_id, secrets),
        )
    )
    return answer


def _finish_observed(
    emit: Emit,
    finish: Callable[[BaseException | None], None],
    route: str,
    plan: TargetPlan,
    operation: str,
    started: float,
    request_id: str | None,
) -> Callable[[BaseException | None], None]:
    def finished(error: BaseException | None) -> None:
        finish(error)
        emit(_finished(route, plan, operation, started, error, request_id))

    return finished
