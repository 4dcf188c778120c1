# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, re-check attributes narrowed
# before an await. A compiled install needs a rebuild after edits.
"""The call pipeline: every operation of the three runtimes, one function per answer shape.

An operation's answer is a body (:func:`invoke`), a stream (:func:`stream`) or
a queued invocation (:func:`invoke_queued`). Each runs the same steps:
resolve the route -> the deadline -> the payload -> the headers -> credentials
-> the lane's invoker -> observe. What differs between operations (required
members, body limit, which members the call itself reads, whether answers are
cached) is read from the operation table once, into an :class:`OperationPlan`.

``CustomerIdentityToken`` and ``CustomAttributes`` are sensitive: no event
carries a member, and an error's text never holds their values, whatever the
far side echoed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import TYPE_CHECKING

from gateway import errors
from gateway._aws.models import SAGEMAKER_RUNTIME
from gateway._http.connection import AnswerWaiter
from gateway._http.message import RawResponse
from gateway._invoke.api import (
    BODY,
    QUEUED,
    STREAM,
    AsyncInvocation,
    InvokeResult,
    Operation,
    answer_of,
    async_invocation_from_response,
    decode_error,
    decode_runtime_error,
    operation_table,
    payload_bytes,
    redacted,
    result_from_response,
    safe_request_id,
    secrets_in,
    secrets_named,
)
from gateway._invoke.call import (
    RelayedCall,
    call_failed,
    emit_cached_call,
    emit_call_finished,
    new_event,
    observed_call,
    prepared,
)
from gateway._invoke.context import NOT_STARTED, CallContext, OperationPlan
from gateway._invoke.streaming import InvokeStream, OpenedStream, payload_parts
from gateway._observe.events import CallFinished, CallStarted, Emit
from gateway.routing import Route

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "call",
    "check_timeout",
    "invoke",
    "invoke_later",
    "invoke_queued",
    "invoke_queued_later",
    "relay",
    "relay_answered",
    "relay_rest",
    "relay_route",
    "stream",
]


def _member(members: tuple[object, ...], place: int) -> object:
    """The member at ``place`` of a call's tuple; None where the model has no such member."""
    return None if place < 0 else members[place]


def _deadline(ctx: CallContext, route: Route, timeout: float | None) -> float:
    if timeout is None:
        timeout = route.timeout_s or ctx.default_timeout
    else:
        check_timeout(timeout)
    return monotonic() + timeout


def call(
    ctx: CallContext,
    operation: Operation,
    resource: str,
    body: Buffer | None,
    members: tuple[object, ...],
    timeout: float | None = None,
    cache: bool | None = None,
    cache_ttl: float | None = None,
    user_agent: str | None = None,
) -> Awaitable[InvokeResult | InvokeStream | AsyncInvocation]:
    """Any operation, its members as the model's tuple, by the shape of its answer."""
    name = operation.name
    plan = ctx.plans.get(name)
    if plan is not None and plan.answer == BODY and plan.lane.started:
        payload = b"" if body is None else body
        return invoke(
            ctx, plan, resource, payload, members, None, timeout, cache, cache_ttl, user_agent
        )
    service = operation.service.name
    answer = answer_of(operation)
    if answer == QUEUED:
        return invoke_queued_later(
            ctx, service, name, resource, body, members, None, timeout, user_agent
        )
    payload = b"" if body is None else body
    if answer == STREAM:
        opened = stream(ctx, service, name, resource, payload, members, None, timeout, user_agent)
        return _ready(opened)
    return invoke_later(
        ctx, service, name, resource, payload, members, None, timeout, cache, cache_ttl, user_agent
    )


async def _ready(value: InvokeStream) -> InvokeStream:
    return value


# -- a body --------------------------------------------------------------------


async def invoke(
    ctx: CallContext,
    plan: OperationPlan,
    name: str,
    body: Buffer,
    values: tuple[object, ...],
    names: tuple[str, ...] | None = None,
    timeout: float | None = None,
    cache: bool | None = None,
    cache_ttl: float | None = None,
    user_agent: str | None = None,
) -> InvokeResult:
    """One call whose answer is a body: routed, hedged, retried, cached where it may be.

    ``values`` is the model's member tuple, or with ``names`` a typed method's
    values, one per name.
    """
    # The steps are written out, not called: this is every call's path.
    try:
        members = values if names is None else plan.place(names, values)
        if not ctx.started:
            raise errors.GatewayError(NOT_STARTED)
        lane = plan.lane
        try:
            route = lane.router.resolve(name)
        except errors.ConfigError:
            lane.planner._check_name(name)  # a bad name says so; else the config's error
            raise
        if timeout is None:
            timeout = route.timeout_s or ctx.default_timeout
        else:
            check_timeout(timeout)
        payload = payload_bytes(body, plan.limit, plan.name)
        before_host, after_host, key_fields = plan.shape_of(members)
        place = plan.model
        found = None if place < 0 else members[place]
        model = None if found is None else str(found)
        agent = None if user_agent is None else ctx.caller_agent(user_agent)
        # A session is stateful on the far side: never answer it from a cache.
        key: str | None = None
        cached = ctx.cached
        if (
            cached is not None
            and key_fields is not None
            and _member(members, plan.session) is None
            and (route.config.cache if cache is None else cache)
        ):
            if cached.versions_due(route.name):  # the fleet's version tags, re-read
                await cached.refresh_versions(route.name)
            key = cached.key_of(route.name, key_fields, payload)
            hit = cached.peek(key)
            if hit is not None:
                if ctx.emit is not None:
                    emit_cached_call(ctx.emit, route.name, model, hit)
                return hit  # nothing else to build
        deadline = monotonic() + timeout
        credentials = ctx.credentials
        if credentials is not None and credentials.must_wait():
            await credentials.fresh(deadline)  # only inside the mandatory window
        place = plan.variant
        pinned = place < 0 or members[place] is not None
        operation = plan.operation
        invoker = lane.invoker
        sent: Awaitable[InvokeResult]
        if key is None or cached is None:
            sent = invoker.invoke(
                route, operation, model, before_host, after_host, pinned, payload, deadline, agent
            )
        else:
            load = functools.partial(
                invoker.invoke,
                route,
                operation,
                model,
                before_host,
                after_host,
                pinned,
                payload,
                deadline,
                agent,
            )
            sent = cached.get_or_load(load, key, cache_ttl or route.config.cache_ttl_s, deadline)
        emit = ctx.emit
        if emit is None:
            return await sent
        routed = plan.routed or bool(route.routers)
        looked_up = key is not None
        return await observed_call(
            emit, route.name, model, sent, looked_up, routed, members, plan.sensitive, plan.name
        )
    except errors.GatewayError as error:
        if plan.sensitive:
            redacted(error, plan.secrets(values, names))
        raise


async def invoke_later(
    ctx: CallContext,
    service: str,
    operation_name: str,
    name: str,
    body: Buffer,
    values: tuple[object, ...],
    names: tuple[str, ...] | None = None,
    timeout: float | None = None,
    cache: bool | None = None,
    cache_ttl: float | None = None,
    user_agent: str | None = None,
) -> InvokeResult:
    """:func:`invoke` of an operation whose lane starts on its first call."""
    plan = await ctx.plan(service, operation_name)
    return await invoke(ctx, plan, name, body, values, names, timeout, cache, cache_ttl, user_agent)


# -- a body, from a protocol callback ---------------------------------------------


def relay_route(ctx: CallContext, plan: OperationPlan, name: str, size: int) -> Route | None:
    """The route a relayed call of ``name`` with a ``size``-byte body takes, or None where
    the call needs :func:`invoke`'s whole path: a cache, a hedge, an inference router,
    credentials to wait for, a hook that reads request ids, a body over the limit, a
    route not made yet. Asked first, before the relay reads the request any further
    (its signature checked, its members read): a call refused here pays for neither
    twice, and a request not yet authenticated makes nothing.
    """
    lane = plan.lane
    if not ctx.started or ctx.cached is not None or not lane.started or size > plan.limit:
        return None
    if ctx.relay_reads_ids:  # (False while no hook listens)
        return None
    # Found, not made: the caller is not authenticated yet (the handler's path makes it).
    route = lane.router.find(name)
    if route is None or route.hedging or route.routers:
        return None
    credentials = ctx.credentials
    if credentials is not None and credentials.must_wait():
        return None
    return route


def relay(
    ctx: CallContext,
    plan: OperationPlan,
    route: Route,
    body: bytes,
    members: tuple[object, ...],
    timeout: float | None,
    user_agent: str | None,
    then: Callable[[AnswerWaiter], None],
    now: float,
) -> RelayedCall | None:
    """:func:`invoke`'s call on ``route`` (from :func:`relay_route`) with its first
    attempt sent without suspending: for a relay that answers from its protocol
    callbacks (the sidecar's relay lane).

    None, with nothing started, where the call needs :func:`invoke`'s whole path
    after all: a member or agent refused, no warm socket. ``timeout`` is checked by
    the caller; ``now`` is when the call began, a ``time.monotonic`` reading (its
    deadline counts from it). ``then(answer)`` is called once the attempt's
    ``answer`` is done (never from inside this call): there, :func:`relay_answered`,
    then :func:`relay_rest` if it said None.
    """
    lane = plan.lane
    emit = ctx.emit
    if timeout is None:
        timeout = route.timeout_s or ctx.default_timeout
    try:
        shape = plan.shape_of(members)
        agent = None if user_agent is None else ctx.caller_agent(user_agent)
    except errors.GatewayError:
        return None  # a member or agent refused: invoke's path answers it
    before_host, after_host, _ = shape
    place = plan.model
    found = None if place < 0 else members[place]
    model = None if found is None else str(found)
    place = plan.variant
    pinned = place < 0 or members[place] is not None
    call = lane.invoker.relay(
        route,
        plan.operation,
        model,
        members,
        before_host,
        after_host,
        pinned,
        body,
        now,
        now + timeout,
        agent,
        then,
    )
    if call is not None and emit is not None:
        # A lone metrics hook counts the answered call at once (it reads no CallStarted).
        counts = call.counts = ctx.relay_counts
        if counts is None:
            emit(new_event(CallStarted, (route.name, model, plan.name)))
        call.call_started = now
    return call


def relay_answered(
    ctx: CallContext, plan: OperationPlan, call: RelayedCall, members: tuple[object, ...]
) -> RawResponse | None:
    """A :func:`relay` call's answer as received, once its attempt is done (a 200); None:
    see :func:`relay_rest`. An :class:`InvokeResult` is built only for the hooks' events."""
    response = call.answered()
    emit = ctx.emit
    if response is not None and emit is not None and call.call_started and call.counts is None:
        route = call.route.name
        emit_call_finished(
            emit,
            route,
            call.model,
            call.call_started,
            result_from_response(response, call.plan.endpoint),
            False,
            False,
            members,
            plan.sensitive,
            plan.name,
        )
    return response


async def relay_rest(
    ctx: CallContext, plan: OperationPlan, call: RelayedCall, members: tuple[object, ...]
) -> InvokeResult:
    """The rest of a :func:`relay` call whose first attempt did not succeed."""
    try:
        emit = ctx.emit
        if emit is None or not call.call_started:
            return await call.rest()
        return await observed_call(
            emit,
            call.route.name,
            call.model,
            call.rest(),
            False,
            False,
            members,
            plan.sensitive,
            plan.name,
            call.call_started,
        )
    except errors.GatewayError as error:
        if plan.sensitive:
            redacted(error, plan.secrets(members))
        raise


# -- a stream ------------------------------------------------------------------


def stream(
    ctx: CallContext,
    service: str,
    operation_name: str,
    name: str,
    body: Buffer,
    values: tuple[object, ...],
    names: tuple[str, ...] | None = None,
    timeout: float | None = None,
    user_agent: str | None = None,
) -> InvokeStream:
    """A call whose answer is an event stream: opened on its first iteration, never
    hedged or retried (a partly delivered stream cannot be replayed)."""
    operation = operation_table().get((service, operation_name))
    if names is not None:
        secrets = secrets_named(names, values)
    elif operation is not None:
        secrets = secrets_in(operation, values)
    else:
        # An older botocore (the call fails naming the release it needs): keep every
        # string out of error text.
        secrets = tuple(str(value) for value in values if isinstance(value, str) and value)
    into = InvokeStream(secrets)
    opener = functools.partial(
        _open_stream,
        ctx,
        service,
        operation_name,
        into,
        name,
        body,
        values,
        names,
        timeout,
        user_agent,
    )
    decode = decode_error if service == SAGEMAKER_RUNTIME else decode_runtime_error
    into._parts = payload_parts(opener, decode, secrets)
    return into


async def _open_stream(
    ctx: CallContext,
    service: str,
    operation_name: str,
    into: InvokeStream,
    name: str,
    body: Buffer,
    values: tuple[object, ...],
    names: tuple[str, ...] | None,
    timeout: float | None,
    user_agent: str | None,
) -> OpenedStream:
    """The stream up to its response head (the stream's first step)."""
    plan = await ctx.plan(service, operation_name)
    members = plan.place(names, values)
    lane = plan.lane
    route = lane.resolve(name)
    # Never to an inference router target (it takes no stream): to another target.
    state, target = lane.invoker.single(route, plan.operation)
    emit = ctx.emit
    if emit is not None:
        emit(CallStarted(route.name, None, operation_name))
    started = monotonic()
    try:
        deadline = _deadline(ctx, route, timeout)
        payload = payload_bytes(body, plan.limit, operation_name)
        before_host, after_host, _ = plan.shape(members)
        request = prepared(
            target, plan.operation, before_host, after_host, plan.pinned(members), payload
        )
        if user_agent is not None:
            request.caller_agent = ctx.caller_agent(user_agent)
        await ctx.fresh_credentials(deadline)
        opened, finish = await lane.invoker.open_stream(route, state, target, request, deadline)
    except BaseException as error:
        if emit is not None:
            duration = monotonic() - started
            emit(call_failed(route.name, None, target.endpoint, duration, error, operation_name))
        raise
    into.response_headers = opened.headers
    into.target = target.endpoint
    if emit is None:
        return opened, finish
    request_id = safe_request_id(opened.headers.get("x-amzn-requestid"), into.secrets)
    return opened, _finish_observed(
        emit, finish, route.name, target.endpoint, operation_name, started, request_id
    )


# -- a queued invocation -----------------------------------------------------------


async def invoke_queued(
    ctx: CallContext,
    plan: OperationPlan,
    name: str,
    body: Buffer | None,
    values: tuple[object, ...],
    names: tuple[str, ...] | None = None,
    timeout: float | None = None,
    user_agent: str | None = None,
) -> AsyncInvocation:
    """A call the far side queues (its input in S3, or a small body inline): one attempt."""
    try:
        members = plan.place(names, values)
        if not ctx.started:
            raise errors.GatewayError(NOT_STARTED)
        payload = b"" if body is None else payload_bytes(body, plan.limit, plan.name)
        before_host, after_host, _ = plan.shape(members)
        lane = plan.lane
        route = lane.resolve(name)
        # To an inference router target as InvokeInferenceRouterAsync, where it maps.
        state, target = lane.invoker.single(route, plan.operation, after_host, payload)
        deadline = _deadline(ctx, route, timeout)
        request = prepared(target, plan.operation, before_host, after_host, True, payload)
        if user_agent is not None:
            request.caller_agent = ctx.caller_agent(user_agent)
        await ctx.fresh_credentials(deadline)
        sent = lane.invoker.send_once(route, state, target, request, deadline, plan.ok)
        emit = ctx.emit
        if emit is None:
            return async_invocation_from_response(await sent)
        secrets = plan.secrets(members)
        return await _observed_queued(emit, route.name, target.endpoint, plan.name, sent, secrets)
    except errors.GatewayError as error:
        if plan.sensitive:
            redacted(error, plan.secrets(values, names))
        raise


async def invoke_queued_later(
    ctx: CallContext,
    service: str,
    operation_name: str,
    name: str,
    body: Buffer | None,
    values: tuple[object, ...],
    names: tuple[str, ...] | None = None,
    timeout: float | None = None,
    user_agent: str | None = None,
) -> AsyncInvocation:
    """:func:`invoke_queued` of an operation whose lane starts on its first call."""
    plan = await ctx.plan(service, operation_name)
    return await invoke_queued(ctx, plan, name, body, values, names, timeout, user_agent)


async def _observed_queued(
    emit: Emit,
    route: str,
    endpoint: str,
    operation: str,
    call: Awaitable[RawResponse],
    secrets: tuple[str, ...],
) -> AsyncInvocation:
    emit(CallStarted(route, None, operation))
    started = monotonic()
    try:
        answer = async_invocation_from_response(await call)
    except BaseException as error:
        duration = monotonic() - started
        emit(call_failed(route, None, endpoint, duration, error, operation))
        raise
    request_id = safe_request_id(answer.request_id, secrets)
    emit(_one_attempt(route, endpoint, monotonic() - started, operation, request_id))
    return answer


# -- helpers ------------------------------------------------------------------------


def _one_attempt(
    route: str, endpoint: str, duration: float, operation: str, request_id: str | None
) -> CallFinished:
    """The CallFinished of a call that one attempt answered."""
    return CallFinished(
        route, None, endpoint, duration, 1, False, None, None, operation, request_id
    )


def _finish_observed(
    emit: Emit,
    finish: Callable[[BaseException | None], None],
    route: str,
    endpoint: str,
    operation: str,
    started: float,
    request_id: str | None,
) -> Callable[[BaseException | None], None]:
    """A stream's ``finish`` that also ends its call (CallFinished) after the attempt."""

    def finished(error: BaseException | None) -> None:
        finish(error)
        duration = monotonic() - started
        if error is None:
            emit(_one_attempt(route, endpoint, duration, operation, request_id))
        else:
            emit(call_failed(route, None, endpoint, duration, error, operation, request_id))

    return finished


def check_timeout(timeout: float) -> None:
    """A call's timeout must be a duration: NaN, infinity or a negative number is refused."""
    try:
        valid = 0.0 <= timeout < math.inf  # False for NaN
    except TypeError:
        valid = False
    if not valid:
        raise errors.InvalidRequest(
            f"timeout must be a finite number of seconds >= 0, got {timeout!r}"
        )
