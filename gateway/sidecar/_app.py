# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The sidecar's request handler: SageMaker Runtime routes in, ``Gateway`` calls out.

Per request the hot path does one path split, one pass over the request
headers through the operation's header -> member table (``_api``), the
gateway call with the members as received,
and a few dict increments for metrics. No logging unless DEBUG is on, no
task, no copy of the body. InvokeEndpoint goes through :class:`RelayLane`
first, which answers it from the server's callbacks while its call goes the
plain way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic
from typing import Final, cast
from urllib.parse import unquote

import orjson
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)

from gateway import errors
from gateway._aws.models import SAGEMAKER_RUNTIME, service_model
from gateway._client import Gateway
from gateway._http.connection import AnswerWaiter
from gateway._http.message import RawResponse
from gateway._invoke import pipeline
from gateway._invoke.api import (
    BODY,
    INVOKE,
    RESULT_MEMBERS,
    STREAM,
    AsyncInvocation,
    InvokeResult,
    Operation,
    field_lines,
    result_from_response,
    safe_request_id,
    secrets_in_headers,
)
from gateway._invoke.call import RelayedCall
from gateway._invoke.context import CallContext, OperationPlan
from gateway._invoke.streaming import InvokeStream
from gateway._observe.tracing import ServerTracing, gateway_tracer, trace_id_of_traceparent
from gateway._server.http import Relay, Request, Response, StreamingResponse
from gateway._server.messages import Answered
from gateway.sidecar._auth import Authenticator, SigV4Rejected
from gateway.sidecar._config import SidecarConfig
from gateway.sidecar._errors import (
    error_response,
    gateway_error_response,
    new_request_id,
    runtime_error_response,
    runtime_refusal,
)
from gateway.sidecar._logging import AccessLog
from gateway.sidecar._metrics import BuildInfo, SidecarMetrics
from gateway.sidecar._paths import PATHS, Action
from gateway.sidecar._relay import aclose, relay
from gateway.sidecar._rtb import RtbProxy

__all__ = ["TIMEOUT_HEADER", "RelayLane", "SidecarApp"]

logger = logging.getLogger("gateway.sidecar")

# Not an AWS header: lets a non-SDK client (or an SDK with a before-send hook)
# give this call its own deadline, in milliseconds.
TIMEOUT_HEADER: Final = "x-gateway-timeout-ms"


# "Cache-Control: no-cache" (or no-store) skips the prediction cache (InvokeEndpoint only).
_CACHE_CONTROL: Final = "cache-control"
_USER_AGENT: Final = "user-agent"
_SAGEMAKER_PREFIX: Final = "x-amzn-sagemaker-"

# Each runtime's path prefix, its length, its actions and its service, from the table.
_PREFIXES: Final = PATHS.prefixes()
_EVENTSTREAM: Final = ("Content-Type", "application/vnd.amazon.eventstream")
_JSON: Final = ("Content-Type", "application/json")


class _BadRequest(Exception):
    """A header the sidecar itself cannot use; answered as ValidationError."""


class BusyPoll:
    """Keeps the event loop polling, not sleeping, for ``window_s`` after each request.

    A process asleep in ``epoll_wait`` is woken by the kernel when a socket
    becomes readable, and that wake-up costs: tens of microseconds on a
    virtual machine whose idle vCPU halted, several on bare metal leaving a
    CPU idle state. A loop still polling when the next request or the
    upstream's answer arrives reads it at once. The price is a core kept busy
    while traffic flows and for ``window_s`` after it stops.
    """

    __slots__ = ("_loop", "_until", "_window", "spinning")

    def __init__(self, window_s: float) -> None:
        self._window = window_s
        self._until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.spinning = False

    def touch(self) -> None:
        """A request came or went: poll until ``window_s`` from now."""
        loop = asyncio.get_running_loop()
        self._until = loop.time() + self._window
        # A chain left on another loop (closed while polling) does not count.
        if not self.spinning or self._loop is not loop:
            self.spinning = True
            self._loop = loop
            loop.call_soon(self._spin)

    def _spin(self) -> None:
        # A callback always ready: the loop polls its sockets with a zero timeout.
        loop = self._loop
        if loop is not None and loop.time() < self._until:
            loop.call_soon(self._spin)
        else:
            self.spinning = False


class SidecarApp:
    """The handler given to the HTTP server; one per sidecar."""

    def __init__(
        self,
        gateway: Gateway,
        config: SidecarConfig,
        authenticate: Authenticator | None,
        rtb: RtbProxy | None = None,
    ) -> None:
        self._gw = gateway
        self.rtb = rtb
        self._max_in_flight = config.max_in_flight
        # Per operation (by id: it is not hashable; kept alive here), header name -> role.
        self._header_roles: dict[int, tuple[Operation, dict[str, int]]] = {}
        self._roles_operation: Operation | None = None
        self._roles: dict[str, int] = {}
        # The members tuple last returned: handed again while its values repeat.
        self._last_members: tuple[object, ...] = ()
        self._default_timeout = (
            config.default_timeout_ms / 1000 if config.default_timeout_ms is not None else None
        )
        self._authenticate = authenticate
        # Who may scrape /metrics: on the traffic port, inbound auth unless
        # metrics_auth is false; on the admin port, only when admin_auth is on.
        self.metrics_auth = authenticate if config.metrics_auth else None
        self.admin_auth = authenticate if config.admin_auth else None
        self.in_flight = 0
        self.started = False
        self.busy_poll = BusyPoll(config.busy_poll_us / 1e6) if config.busy_poll_us else None
        self._relay_lane = config.relay_lane
        labels = dict.fromkeys(action.label for action in PATHS.actions())
        operations = (*labels, *(("openrtb",) if rtb is not None else ()))
        self.metrics = SidecarMetrics(
            lambda: self.in_flight,
            config.metrics_label_cap,
            _configured_routes(gateway),
            operations,
        )
        # Read on every request: False skips the sidecar's own recording.
        self.recording = config.metrics
        self.registry = CollectorRegistry(auto_describe=False)
        if config.metrics:
            self.registry.register(self.metrics)
        if rtb is not None:
            self.registry.register(rtb.metrics)
        if config.metrics:
            gateway.enable_metrics(config.metrics_label_cap)
            self.registry.register(gateway.prometheus_collector())
        else:
            self.registry.register(BuildInfo())
        # The standard process_*, python_info and python_gc_* families.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(standard)
        self.access_log = AccessLog(config.access_log_sample) if config.access_log else None
        tracer = gateway_tracer()
        self.tracing = ServerTracing(tracer) if tracer is not None else None
        if rtb is not None:
            rtb.tracing = self.tracing
        # What the HTTP server calls: the plain handler unless something observes.
        self.entry: Callable[[Request], Awaitable[Response | StreamingResponse]] = (
            self.handle
            if self.access_log is None and self.tracing is None
            else self._handle_observed
        )

    def relay_lane(self) -> RelayLane | None:
        """The lane that relays InvokeEndpoint from the server's callbacks (see
        :class:`RelayLane`); None where every request needs the handler (an access
        log or server spans wrap each one, or ``relay_lane`` is off). Call it once the
        gateway has started."""
        if not self._relay_lane or self.entry != self.handle:
            return None
        context: CallContext | None = getattr(self._gw, "_context", None)
        if context is None or context.cached is not None:
            # A Gateway stand-in (tests), or a prediction cache (which the handler's
            # path consults): every request would be offered to the lane and refused.
            return None
        plan = context.plans.get(INVOKE.name)
        action = _invocations_action()
        if plan is None or action is None or action.operation is not INVOKE:
            return None
        return RelayLane(self, context, plan, action)

    # -- dispatch ------------------------------------------------------------

    def handle(self, request: Request) -> Awaitable[Response | StreamingResponse]:
        """The app's routes; a plain function returning the operation's coroutine.

        An invocation pays one call here, not a coroutine frame of its own
        that every resumption of the call would pass through.
        """
        path = request.path
        rtb = self.rtb
        if rtb is not None and path == rtb.path and request.method == "POST":
            return self._openrtb(rtb, request)
        for prefix, start, actions, service in _PREFIXES:
            if path.startswith(prefix):
                name, _, action_name = path[start:].partition("/")
                action = actions.get(action_name)
                if action is not None and request.method == "POST":
                    return self._invocation(request, action, name)
                if service != SAGEMAKER_RUNTIME:
                    self.metrics.reject("unknown_operation")
                    refusal = runtime_refusal("UnknownOperationException", "Unknown operation", 404)
                    return _answered(refusal)
                break
        else:
            if path == "/ping" and request.method in ("GET", "HEAD"):
                return _answered(self._ping())
        self.metrics.reject("unknown_operation")
        return _answered(error_response("UnknownOperationException", "Unknown operation", 404))

    # -- observability (access log, server spans) ---------------------------

    async def _handle_observed(self, request: Request) -> Response | StreamingResponse:
        """``handle`` inside a server span and/or followed by an access log line."""
        started = time.perf_counter()
        tracing = self.tracing
        trace_id: str | None = None
        if tracing is None:
            response = await self.handle(request)
            trace_id = trace_id_of_traceparent(request.headers.get("traceparent"))
        else:
            name = f"{request.method} {_span_route(request.path)}"
            with tracing.server_span(name, request.headers) as span:
                response = await self.handle(request)
                span.set_attribute("http.request.method", request.method)
                span.set_attribute("url.path", request.path)
                span.set_attribute("http.response.status_code", response.status)
                trace_id = tracing.trace_id(span)
        access_log = self.access_log
        if access_log is not None and access_log.sampled():
            client = request.client
            body = response.body if isinstance(response, Response) else None
            access_log.write(
                request.method,
                request.path,
                _route_of(request.path),
                response.status,
                _error_code(response) if response.status >= 400 else None,
                time.perf_counter() - started,
                len(request.body),
                len(body) if body is not None else None,
                trace_id,
                client=None if client is None else f"{client[0]}:{client[1]}",
                # Well-formed and free of the request's secrets, or "other" (an upstream
                # may echo a secret where its request id goes).
                request_id=safe_request_id(
                    _request_id(response), secrets_in_headers(list(request.headers.items()))
                ),
            )
        return response

    async def _invocation(
        self, request: Request, action: Action, name: str
    ) -> Response | StreamingResponse:
        started = monotonic()  # finished's clock (the gateway's, for the relay lane)
        refused = self._admit(request, action.runtime_errors)
        if refused is not None:
            return refused
        if "%" in name:
            name = unquote(name)
        if self.busy_poll is not None:
            self.busy_poll.touch()
        self.in_flight += 1
        try:
            operation = action.operation
            if operation is None:
                service_model(action.service)  # an older botocore: the error naming the release
                raise AssertionError(f"{action.service} is missing from botocore's models")
            members, timeout, cache, agent = self._members(request.headers, operation)
            if action.answer == BODY:
                # Inline, not a method: one coroutine less on every invocation.
                result = await self._gw.call(
                    operation,
                    name,
                    request.body,
                    members,
                    timeout=timeout,
                    cache=cache,
                    user_agent=agent,
                )
                answered = cast(InvokeResult, result)
                response: Response | StreamingResponse = (
                    _router_response(answered) if action.routed else _result_response(answered)
                )
            elif action.answer == STREAM:
                response = await self._stream(request, action, name, members, timeout, agent)
            else:
                response = await self._queued(request, action, name, members, timeout, agent)
        except Exception as error:
            response = _failure_answer(error, action, name)
        finally:
            self.in_flight -= 1
        self.finished(action, name, request, response, started)
        return response

    def finished(
        self,
        action: Action,
        name: str,
        request: Request,
        response: Response | StreamingResponse,
        started: float,
        now: float = 0.0,
    ) -> None:
        """An invocation answered (its call done): the busy poll, the sidecar's counters.

        ``started`` and ``now`` are ``time.monotonic`` readings; ``now`` 0.0: read here.
        """
        busy_poll = self.busy_poll
        if busy_poll is not None:
            busy_poll.touch()
        if self.recording:
            self.metrics.record(
                action.label,
                self.metrics.route_label(name),
                response.status,
                (now or monotonic()) - started,
                len(request.body),
                len(response.body) if isinstance(response, Response) else 0,
            )

    async def _openrtb(self, rtb: RtbProxy, request: Request) -> Response:
        """Proxy mode: score, then 204 or the bidder's answer (see ``_rtb``)."""
        started = time.perf_counter()
        refused = self._admit(request, False)
        if refused is not None:
            return refused
        busy_poll = self.busy_poll
        if busy_poll is not None:
            busy_poll.touch()
        self.in_flight += 1
        try:
            response = await rtb.handle(request)
        except Exception:
            # A bug, not a bidder's or the model's failure: answer "no bid".
            logger.exception("openrtb request failed unexpectedly")
            response = Response(204)
        finally:
            self.in_flight -= 1
        if busy_poll is not None:
            busy_poll.touch()
        if self.recording:
            self.metrics.record(
                "openrtb",
                "openrtb",
                response.status,
                time.perf_counter() - started,
                len(request.body),
                len(response.body),
            )
        return response

    def _admit(self, request: Request, runtime_errors: bool) -> Response | None:
        """Refuse before any work: in-flight cap, then inbound auth (in the error shape
        of the operation's service: ``runtime_errors`` for the newer runtimes')."""
        if self.in_flight >= self._max_in_flight:
            self.metrics.reject("in_flight_cap")
            return _refusal(runtime_errors, "ThrottlingException", "Rate exceeded", 429)
        if self._authenticate is not None:
            try:
                self._authenticate(request)
            except SigV4Rejected as rejected:
                self.metrics.reject("auth")
                return _refusal(runtime_errors, rejected.code, rejected.message, rejected.status)
        return None

    def _members(
        self, headers: dict[str, str], operation: Operation
    ) -> tuple[tuple[object, ...], float | None, bool | None, str | None]:
        """The call's members as received (in the operation's order), its timeout, cache choice
        and the caller's user agent (sent upstream first, the gateway's appended).

        Each header the operation's model defines goes through as it came;
        one of SageMaker's it does not define is refused, since dropping it
        would silently change the call.
        """
        members = operation.headers
        values: list[object] = [None] * len(members)
        if operation is self._roles_operation:
            roles = self._roles  # (the last operation's: one comparison, the common case)
        else:
            roles = self._header_roles_of(operation)
        timeout = self._default_timeout
        cache: bool | None = None
        user_agent: str | None = None
        for header, value in headers.items():
            role = roles.get(header)
            if role is None:
                role = _role_of(header, operation)
                if len(roles) < _MAX_HEADER_ROLES:  # (names a client makes up stay unkept)
                    roles[header] = role
            if role >= 0:
                member = members[role]
                values[role] = (
                    _integer(member.keyword, value) if member.kind == "integer" else value
                )
            elif role == _ROLE_NONE:
                continue
            elif role == _ROLE_TIMEOUT:
                timeout = _milliseconds(value)
            elif role == _ROLE_USER_AGENT:
                user_agent = value
            elif role == _ROLE_CACHE_CONTROL:
                directives = value.lower()
                cache = "no-cache" not in directives and "no-store" not in directives
            else:
                raise _BadRequest(f"header {header} is not supported by this operation")
        return self._same_members(values), timeout, cache, user_agent

    def _same_members(self, values: list[object]) -> tuple[object, ...]:
        """``values`` as a tuple: the last one returned where each value is the same object.

        The request scan hands a repeated header value as the same ``str`` each time
        (parsing's kept values), so a client that repeats its call gets one tuple: the
        plans find its shape and presigned head by identity, with no tuple hashed or
        compared. Identical objects are equal, so the tuple is always the call's own.
        """
        last = self._last_members
        if len(last) == len(values):
            for index, value in enumerate(values):
                if value is not last[index]:
                    break
            else:
                return last
        members = self._last_members = tuple(values)
        return members

    def _header_roles_of(self, operation: Operation) -> dict[str, int]:
        kept = self._header_roles.get(id(operation))
        if kept is None:
            kept = self._header_roles[id(operation)] = (operation, {})
        self._roles_operation = operation
        self._roles = kept[1]
        return kept[1]

    # -- operations ----------------------------------------------------------

    async def _stream(
        self,
        request: Request,
        action: Action,
        name: str,
        members: tuple[object, ...],
        timeout: float | None,
        agent: str | None,
    ) -> Response | StreamingResponse:
        assert action.operation is not None
        parts = cast(
            InvokeStream,
            await self._gw.call(
                action.operation, name, request.body, members, timeout=timeout, user_agent=agent
            ),
        )
        # Wait for the first part, so that an error before any byte is sent
        # is still an ordinary rest-json error with its real status.
        try:
            first: bytes | None = await anext(parts)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await aclose(parts)
            raise
        headers = _stream_headers(parts, action.operation, members)
        return StreamingResponse(relay(self, parts, first), 200, headers)

    async def _queued(
        self,
        request: Request,
        action: Action,
        name: str,
        members: tuple[object, ...],
        timeout: float | None,
        agent: str | None,
    ) -> Response:
        operation = action.operation
        assert operation is not None
        # An inline body where the operation has one (InvokeEndpointAsync's); else S3's.
        body = (request.body or None) if "Body" in operation.by_name else None
        answer = cast(
            AsyncInvocation,
            await self._gw.call(operation, name, body, members, timeout=timeout, user_agent=agent),
        )
        headers = [_JSON, ("x-amzn-RequestId", answer.request_id or new_request_id())]
        if answer.output_location is not None:
            headers.append(("X-Amzn-SageMaker-OutputLocation", answer.output_location))
        if answer.failure_location is not None:
            headers.append(("X-Amzn-SageMaker-FailureLocation", answer.failure_location))
        answer_body = {"InferenceId": answer.inference_id} if answer.inference_id else {}
        return Response(202, headers, orjson.dumps(answer_body))

    # -- operations endpoints ---------------------------------------------------

    def refuse_unauthenticated(
        self, request: Request, authenticate: Authenticator | None
    ) -> Response | None:
        """The auth error for ``request`` under ``authenticate`` (counted), None if allowed."""
        if authenticate is None:
            return None
        try:
            authenticate(request)
        except SigV4Rejected as rejected:
            self.metrics.reject("auth")
            return error_response(rejected.code, rejected.message, rejected.status)
        return None

    def _ping(self) -> Response:
        """200 once started and while every route has a healthy target, else 503."""
        if not self.started:
            return Response(503, (_JSON,), b'{"status":"not serving"}')
        # Older Gateways have no routing: then being started is all there is.
        route_health = getattr(self._gw, "route_health", None)
        if callable(route_health):
            health: Mapping[str, bool] = route_health()
            unhealthy = sorted(name for name, healthy in health.items() if not healthy)
            if unhealthy:
                return Response(503, (_JSON,), orjson.dumps({"unhealthy_routes": unhealthy}))
        return Response(200, (_JSON,), b'{"status":"ok"}')


# -- the relay lane ------------------------------------------------------------------

# What a request header is to an operation (SidecarApp._members): its member's place
# (0 or more), or one of these; kept per operation and header name.
_ROLE_NONE: Final = -1
_ROLE_TIMEOUT: Final = -2
_ROLE_USER_AGENT: Final = -3
_ROLE_CACHE_CONTROL: Final = -4
_ROLE_REFUSED: Final = -5
_MAX_HEADER_ROLES: Final = 256


def _role_of(header: str, operation: Operation) -> int:
    """What ``header`` (lower-case) is to ``operation``'s call; see :meth:`SidecarApp._members`."""
    index = operation.header_index.get(header)
    if index is not None:
        return index
    if header == TIMEOUT_HEADER:
        return _ROLE_TIMEOUT
    if header == _USER_AGENT:
        return _ROLE_USER_AGENT
    if header == _CACHE_CONTROL:
        return _ROLE_CACHE_CONTROL if operation is INVOKE else _ROLE_NONE
    if header.startswith(_SAGEMAKER_PREFIX):
        return _ROLE_REFUSED
    return _ROLE_NONE


_ENDPOINTS: Final = "/endpoints/"
_INVOCATIONS: Final = "/invocations"


def _invocations_action() -> Action | None:
    """InvokeEndpoint's action (``/endpoints/{name}/invocations``), from the paths table."""
    for prefix, _, actions, service in _PREFIXES:
        if prefix == _ENDPOINTS and service == SAGEMAKER_RUNTIME:
            return actions.get(_INVOCATIONS[1:])
    return None


class RelayLane(Relay):
    """InvokeEndpoint relayed from the HTTP server's protocol callbacks.

    While a call goes the plain way (no cache, no hedge, a warm socket to its
    target, its first attempt answered 200), no task, coroutine or event loop
    pass stands between the request and its answer: the request's members go
    to the pipeline's :func:`~gateway._invoke.pipeline.relay`, the attempt's
    future calls back with the upstream's answer, and the answer is written from
    that callback. Everything else is the handler's: ``take`` returns False
    before anything starts (the call needs a cache, a hedge, a refusal, a
    socket to open), and a first attempt that fails goes on in a task, the
    same retries and the same answers as the handler's. It counts what the
    handler counts: in flight, the sidecar's counters, the gateway's events.
    """

    def __init__(
        self, app: SidecarApp, context: CallContext, plan: OperationPlan, action: Action
    ) -> None:
        self._app = app
        self._context = context
        self._plan = plan
        self._action = action
        rtb = app.rtb
        self._rtb_path = rtb.path if rtb is not None else None
        self.taken = 0  # requests taken (each answered by the lane or its task)
        # The last path taken and its endpoint's name: a client calls one path request
        # after request, and the server's reader hands on the same str for it.
        self._last_path: str | None = None
        self._last_name = ""

    def take(self, request: Request, answered: Answered) -> bool:
        # One clock reading: the sidecar's latency and the call's start (its deadline).
        started = monotonic()
        app = self._app
        if request.method != "POST" or app.in_flight >= app._max_in_flight:
            return False
        path = request.path
        if path is self._last_path:
            name = self._last_name
        else:
            found = self._endpoint_name(path)
            if found is None:
                return False
            name = found
            self._last_path = path
            self._last_name = name
        # Whatever refuses the call as a whole (its route, a cache, a hook that reads
        # request ids) refuses it before it is authenticated and read, which the
        # handler would then repeat.
        route = pipeline.relay_route(self._context, self._plan, name, len(request.body))
        if route is None:
            return False
        authenticate = app._authenticate
        if authenticate is not None:
            try:
                authenticate(request)
            except SigV4Rejected:
                return False  # the handler refuses it (and counts the refusal)
        try:
            members, timeout, _, agent = app._members(request.headers, INVOKE)
        except _BadRequest:
            return False
        relayed = _Relayed(self, request, answered, members, name, started)
        call = pipeline.relay(
            self._context,
            self._plan,
            route,
            request.body,
            members,
            timeout,
            agent,
            relayed,
            started,
        )
        if call is None:
            return False
        relayed.call = call
        app.in_flight += 1
        self.taken += 1
        if app.busy_poll is not None:
            app.busy_poll.touch()
        return True

    def _endpoint_name(self, path: str) -> str | None:
        """The endpoint an InvokeEndpoint path names; None for any other path (the
        handler's), and for one the name of which needs decoding or is not one."""
        if (
            not path.endswith(_INVOCATIONS)
            or not path.startswith(_ENDPOINTS)
            or path == self._rtb_path
        ):
            return None
        name = path[len(_ENDPOINTS) : -len(_INVOCATIONS)]
        if not name or "/" in name or "%" in name:
            return None
        return name

    def answer(self, relayed: _Relayed, call: RelayedCall) -> None:
        """The first attempt is done: answer now, or go on in a task.

        Called from the upstream connection's protocol callback as its answer
        completes: nothing here may raise into it.
        """
        app = self._app
        response: Response | None
        try:
            answer = pipeline.relay_answered(self._context, self._plan, call, relayed.members)
            response = None if answer is None else _relayed_response(answer, call)
        except Exception as error:
            # A bug: the request is answered all the same (InternalFailure, logged).
            response = _failure_answer(error, self._action, relayed.name)
        if response is None:
            task = asyncio.get_running_loop().create_task(self._rest(relayed, call))
            relayed.answered(relayed.request, task)
            return
        app.in_flight -= 1
        # (The clock read as the call was counted, a few microseconds before: no other.)
        now = call.answered_at
        app.finished(self._action, relayed.name, relayed.request, response, relayed.started, now)
        relayed.answered(relayed.request, response)

    async def _rest(self, relayed: _Relayed, call: RelayedCall) -> Response:
        """The rest of a call whose first attempt failed: retried, or its error answered."""
        app = self._app
        try:
            result = await pipeline.relay_rest(self._context, self._plan, call, relayed.members)
            response = _result_response(result)
        except Exception as error:
            response = _failure_answer(error, self._action, relayed.name)
        finally:
            app.in_flight -= 1
        app.finished(self._action, relayed.name, relayed.request, response, relayed.started)
        return response


class _Relayed:
    """A request the relay lane took, until it is answered."""

    __slots__ = ("answered", "call", "lane", "members", "name", "request", "started")

    def __init__(
        self,
        lane: RelayLane,
        request: Request,
        answered: Answered,
        members: tuple[object, ...],
        name: str,
        started: float,
    ) -> None:
        self.lane = lane
        self.request = request
        self.answered = answered
        self.call: RelayedCall | None = None  # set once its first attempt is sent
        self.members = members
        self.name = name
        self.started = started

    def __call__(self, answer: AnswerWaiter) -> None:
        """The call's attempt is done (its ``then``): the object is its own callback,
        with no bound method made for each request."""
        call = self.call
        if call is not None:  # (always, once the lane has taken the request)
            self.call = None  # answered once, and no cycle left through it
            self.lane.answer(self, call)


async def _answered(response: Response) -> Response:
    """An answer ready at once, as the awaitable the server expects of a handler."""
    return response


def _refusal(runtime_errors: bool, code: str, message: str, status: int) -> Response:
    """The sidecar's own refusal of a call, in its service's shape (the new runtimes
    name the message ``Message``)."""
    if runtime_errors:
        return runtime_refusal(code, message, status)
    return error_response(code, message, status)


def _failure_answer(error: Exception, action: Action, name: str) -> Response:
    """The answer to an invocation whose call raised ``error``."""
    if isinstance(error, _BadRequest):
        code = "ValidationException" if action.runtime_errors else "ValidationError"
        return _refusal(action.runtime_errors, code, str(error), 400)
    if not isinstance(error, errors.GatewayError):
        # A bug, not a SageMaker answer: say InternalFailure, keep the trace.
        logger.exception("invocation failed unexpectedly", extra={"route": name})
    return _error_answer(error, action)


def _error_answer(error: BaseException, action: Action) -> Response:
    """The answer for an error of a call: in its runtime's vocabulary, else SageMaker's."""
    if action.runtime_errors:
        return runtime_error_response(error, action.service)
    return gateway_error_response(error)


def _configured_routes(gateway: Gateway) -> list[str] | None:
    """The route names of the gateway's config (None for a Gateway without a router)."""
    router = getattr(gateway, "router", None)
    return list(router.routes) if router is not None else None


def _result_response(result: InvokeResult) -> Response:
    """InvokeEndpoint's answer: the upstream's field lines copied where they can be."""
    lines = result.field_lines()
    if lines is None:
        return Response(200, _result_headers(result), result.body)
    cache = result.cache
    headers = () if cache is None else (("x-gateway-cache", cache),)
    return Response(200, headers, result.body, lines)


def _relayed_response(answer: RawResponse, call: RelayedCall) -> Response:
    """A relayed call's answer: the upstream's field lines copied, with no result built
    (:func:`_result_response`'s where they cannot be)."""
    raw = answer.raw
    lines = None if raw is None else field_lines(raw)
    if lines is None:
        return _result_response(result_from_response(answer, call.plan.endpoint))
    return Response(200, (), answer.body, lines)


def _result_headers(result: InvokeResult) -> list[tuple[str, str]]:
    # Each field read once: every read is a method call on the result. The request id
    # as the upstream sent it, as copying the head's lines would relay it (request_id
    # reads "other" for one that is not well-formed: for logs, metrics and spans).
    headers = [("x-amzn-RequestId", result.field("request_id") or new_request_id())]
    for member, field_name in RESULT_MEMBERS:
        value = result.field(field_name)
        if value is not None:
            headers.append((member.wire_header, value))
    if result.cache is not None:
        headers.append(("x-gateway-cache", result.cache))
    return headers


# An inference router's answer headers, beside InvokeEndpoint's.
_ROUTER_RESULT_HEADERS: Final = (
    ("routed_resource_arn", "X-Amzn-SageMaker-Invoked-Routed-Resource-Arn"),
    ("routing_reason", "X-Amzn-SageMaker-Invoked-Routing-Reason"),
)


def _router_response(result: InvokeResult) -> Response:
    """InvokeInferenceRouter's answer: the upstream's field lines, or its fields re-encoded."""
    if result.field_lines() is not None:
        return _result_response(result)
    headers = _result_headers(result)
    for field_name, wire_name in _ROUTER_RESULT_HEADERS:
        value = result.field(field_name)
        if value is not None:
            headers.append((wire_name, value))
    return Response(200, headers, result.body)


def _stream_headers(
    parts: InvokeStream, operation: Operation, members: tuple[object, ...]
) -> list[tuple[str, str]]:
    """The stream answer's head: the request id and the operation's header members the
    upstream sent (its custom attributes echoed, as SageMaker does, when it sent none)."""
    upstream = parts.response_headers
    request_id = upstream.get("x-amzn-requestid")
    headers = [_EVENTSTREAM, ("x-amzn-RequestId", request_id or new_request_id())]
    if upstream:
        headers.extend(
            (member.wire_header, upstream[member.header])
            for member in operation.response
            if member.location == "header" and member.header in upstream
        )
    elif (place := operation.index("CustomAttributes")) >= 0 and members[place] is not None:
        headers.append(("X-Amzn-SageMaker-Custom-Attributes", str(members[place])))
    return headers


def _route_of(path: str) -> str | None:
    """The route of an invocation path (an endpoint or router name, a gateway id), None for
    other paths."""
    found = PATHS.find(path)
    if found is None:
        return None
    name = found[1]
    return unquote(name) if "%" in name else name


def _span_route(path: str) -> str:
    # Low-cardinality span names: the endpoint, router or gateway is in url.path.
    found = PATHS.find(path)
    if found is None:
        return path
    action, name, _ = found
    if action is not None and action.operation is not None:
        return action.span_route
    return path.replace(name, "{name}", 1) if name else path


def _error_code(response: Response | StreamingResponse) -> str | None:
    for name, value in response.headers:
        if name.lower() == "x-amzn-errortype":
            return value.partition(":")[0]
    return None


def _request_id(response: Response | StreamingResponse) -> str | None:
    """The answer's ``x-amzn-RequestId``: one the sidecar set, or the upstream's it relays."""
    for name, value in response.headers:
        if name.lower() == "x-amzn-requestid":
            return value
    if isinstance(response, Response):
        for line in response.head_lines.split(b"\r\n"):
            field, _, raw = line.partition(b":")
            if field.strip().lower() == b"x-amzn-requestid":
                return raw.strip().decode("latin-1")
    return None


def _milliseconds(value: str) -> float:
    try:
        milliseconds = float(value)
    except ValueError:
        milliseconds = -1.0
    if not milliseconds > 0 or milliseconds == float("inf"):
        raise _BadRequest(f"{TIMEOUT_HEADER} must be a positive number of milliseconds")
    return milliseconds / 1000


def _integer(name: str, value: str) -> int:
    # ASCII digits only (str.isdigit takes '²' and other scripts' digits, which
    # int() then refuses), and few enough that int() never hits its digit cap.
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise _BadRequest(f"{name} must be a non-negative integer, got {value[:32]!r}")
    return int(value)
