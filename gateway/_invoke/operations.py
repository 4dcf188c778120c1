# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, re-check attributes narrowed
# before an await. A compiled install needs a rebuild after edits.
"""SageMaker Runtime's endpoint operations, as ``Gateway``'s public methods delegate them.

``Gateway`` fills each operation's member tuple from its keywords (the
public, typed signature) and hands it here, with itself: these functions
read its parts (router, invoker, cache, credentials, event stream), and own
what a call does with them: the cache, the deadline, the request, the events.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from gateway import errors
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    MAX_ASYNC_BODY_BYTES,
    AsyncInvocation,
    InvokeResult,
    MemberOrder,
    Operation,
    async_invocation_from_response,
    check_endpoint_name,
    payload_bytes,
    request_headers,
    safe_request_id,
    secrets_in,
)
from gateway._invoke.cached import KeyFields, KeyLayout
from gateway._invoke.call import call_failed, emit_cached_call, observed_call, prepared
from gateway._invoke.streaming import InvokeStream, OpenedStream
from gateway._invoke.target_plans import TargetPlan
from gateway._observe.events import (
    INVOKE_ENDPOINT_ASYNC,
    INVOKE_ENDPOINT_STREAM,
    CallFinished,
    CallStarted,
    Emit,
)
from gateway.routing import Route, TargetState

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from gateway._client import Gateway

__all__ = ["check_timeout", "invoke_async_members", "invoke_members", "open_stream"]

# Places in the member tuples that the call itself reads (-1: the installed model lacks it).
_MODEL: Final = INVOKE.index("TargetModel")
_SESSION: Final = INVOKE.index("SessionId")
_VARIANT: Final = INVOKE.index("TargetVariant")
_ATTRIBUTES: Final = INVOKE.index("CustomAttributes")
_STREAM_VARIANT: Final = INVOKE_STREAM.index("TargetVariant")


def _member(members: tuple[object, ...], place: int) -> object:
    """The member at ``place`` of a call's tuple; None where the model has no such member."""
    return None if place < 0 else members[place]


_INVOKE_KEY: Final = KeyLayout(INVOKE)
# A member tuple -> its request headers and cache-key fields: one lookup per call,
# as most calls repeat a few shapes (a call with an InferenceId is not remembered).
_InvokeShape = tuple[tuple[tuple[str, str], ...], list[tuple[str, str]], KeyFields]
_INVOKE_SHAPES: Final[dict[tuple[object, ...], _InvokeShape]] = {}
_MAX_SHAPES = 4096


def _invoke_shape(members: tuple[object, ...]) -> _InvokeShape:
    before_host, after_host = request_headers(INVOKE, members)
    shape = (before_host, after_host, _INVOKE_KEY.fields(members))
    for index in INVOKE.per_call:
        if members[index] is not None:
            return shape
    if len(_INVOKE_SHAPES) >= _MAX_SHAPES:
        _INVOKE_SHAPES.clear()
    _INVOKE_SHAPES[members] = shape
    return shape


async def invoke_members(
    gateway: Gateway,
    endpoint: str,
    body: Buffer,
    members: tuple[object, ...],
    timeout: float | None = None,
    cache: bool | None = None,
    cache_ttl: float | None = None,
    user_agent: str | None = None,
    order: MemberOrder | None = None,
) -> InvokeResult:
    """InvokeEndpoint with its header members as one tuple, in ``_api.INVOKE.headers`` order.

    For relays (the sidecar, ``gateway.compat``) that hold the members by
    name or header: every member of the installed model is sent and keyed,
    none spelled out here. A typed method passes its values in its own
    ``order``, which places them by name.
    """
    if order is not None:
        members = order.place(members)
    if not gateway._started:
        raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
    route = _resolve(gateway, endpoint)
    if timeout is None:
        timeout = route.timeout_s or gateway._default_timeout
    else:
        check_timeout(timeout)
    payload = payload_bytes(body)
    shape = _INVOKE_SHAPES.get(members)
    if shape is None:
        shape = _invoke_shape(members)
    before_host, after_host, key_fields = shape
    model = _member(members, _MODEL)
    target_model = None if model is None else str(model)
    agent = None if user_agent is None else gateway._caller_agent(user_agent)
    # A session is stateful on the far side: never answer it from a cache.
    key: str | None = None
    cached = gateway._cached
    if (
        cached is not None
        and _member(members, _SESSION) is None
        and (route.config.cache if cache is None else cache)
    ):
        if cached.versions_due(route.name):  # the fleet's version tags, re-read
            await cached.refresh_versions(route.name)
        key = cached.key_of(route.name, key_fields, payload)
        hit = cached.peek(key)
        if hit is not None:
            if gateway._emit is not None:
                emit_cached_call(gateway._emit, route.name, target_model, hit)
            return hit  # nothing else to build
    deadline = time.monotonic() + timeout
    credentials = gateway._credentials
    if credentials is not None and credentials.must_wait():
        await credentials.fresh(deadline)  # only inside the mandatory window
    pinned = _member(members, _VARIANT) is not None
    emit = gateway._emit
    if key is None or cached is None:
        call = gateway._invoker.invoke(
            route,
            INVOKE,
            target_model,
            before_host,
            after_host,
            pinned,
            payload,
            deadline,
            agent,
        )
        if emit is None:
            return await call
        routed = bool(route.routers)
        secret = members[_ATTRIBUTES]
        return await observed_call(emit, route.name, target_model, call, False, routed, secret)
    load = functools.partial(
        gateway._invoker.invoke,
        route,
        INVOKE,
        target_model,
        before_host,
        after_host,
        pinned,
        payload,
        deadline,
        agent,
    )
    loaded = cached.get_or_load(load, key, cache_ttl or route.config.cache_ttl_s, deadline)
    if emit is None:
        return await loaded
    routed = bool(route.routers)
    secret = members[_ATTRIBUTES]
    return await observed_call(emit, route.name, target_model, loaded, True, routed, secret)


async def open_stream(
    gateway: Gateway,
    into: InvokeStream,
    endpoint: str,
    body: Buffer,
    members: tuple[object, ...],
    timeout: float | None,
    user_agent: str | None,
    order: MemberOrder | None = None,
) -> OpenedStream:
    """InvokeEndpointWithResponseStream up to its response head (the stream's first step)."""
    if order is not None:
        members = order.place(members)
    route, state, plan = _pick_single(gateway, endpoint, INVOKE_STREAM)
    emit = gateway._emit
    if emit is not None:
        emit(CallStarted(route.name, None, INVOKE_ENDPOINT_STREAM))
    started = time.monotonic()
    try:
        if timeout is None:
            timeout = route.timeout_s or gateway._default_timeout
        else:
            check_timeout(timeout)
        deadline = time.monotonic() + timeout
        payload = payload_bytes(body)
        before_host, after_host = request_headers(INVOKE_STREAM, members)
        request = prepared(
            plan,
            INVOKE_STREAM,
            before_host,
            after_host,
            _member(members, _STREAM_VARIANT) is not None,
            payload,
        )
        if user_agent is not None:
            request.caller_agent = gateway._caller_agent(user_agent)
        await gateway._ensure_credentials(deadline)
        stream, finish = await gateway._invoker.open_stream(route, state, plan, request, deadline)
    except BaseException as error:
        if emit is not None:
            duration = time.monotonic() - started
            failed = call_failed(
                route.name, None, plan.endpoint, duration, error, INVOKE_ENDPOINT_STREAM
            )
            emit(failed)
        raise
    into.response_headers = stream.headers
    into.target = plan.endpoint
    if emit is None:
        return stream, finish
    secrets = secrets_in(INVOKE_STREAM, members)
    request_id = safe_request_id(stream.headers.get("x-amzn-requestid"), secrets)
    return stream, _finish_observed(emit, finish, route.name, plan.endpoint, started, request_id)


async def invoke_async_members(
    gateway: Gateway,
    endpoint: str,
    body: Buffer | None,
    members: tuple[object, ...],
    timeout: float | None = None,
    user_agent: str | None = None,
    order: MemberOrder | None = None,
) -> AsyncInvocation:
    """``invoke_async`` with the members as one tuple (``_api.INVOKE_ASYNC.headers`` order)."""
    if order is not None:
        members = order.place(members)
    payload = (
        b"" if body is None else payload_bytes(body, MAX_ASYNC_BODY_BYTES, "InvokeEndpointAsync")
    )
    before_host, after_host = request_headers(INVOKE_ASYNC, members)
    # To an inference router target as InvokeInferenceRouterAsync, when it maps.
    route, state, plan = _pick_single(gateway, endpoint, INVOKE_ASYNC, after_host, payload)
    if timeout is None:
        timeout = route.timeout_s or gateway._default_timeout
    else:
        check_timeout(timeout)
    deadline = time.monotonic() + timeout
    request = prepared(
        plan,
        INVOKE_ASYNC,
        before_host,
        after_host,
        True,
        payload,
    )
    if user_agent is not None:
        request.caller_agent = gateway._caller_agent(user_agent)
    await gateway._ensure_credentials(deadline)
    sent = gateway._invoker.send_once(route, state, plan, request, deadline, (200, 202))
    emit = gateway._emit
    if emit is None:
        return async_invocation_from_response(await sent)
    emit(CallStarted(route.name, None, INVOKE_ENDPOINT_ASYNC))
    started = time.monotonic()
    try:
        answer = async_invocation_from_response(await sent)
    except BaseException as error:
        duration = time.monotonic() - started
        emit(call_failed(route.name, None, plan.endpoint, duration, error, INVOKE_ENDPOINT_ASYNC))
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
            safe_request_id(answer.request_id, secrets_in(INVOKE_ASYNC, members)),
        )
    )
    return answer


def _pick_single(
    gateway: Gateway,
    endpoint: str,
    operation: Operation,
    after_host: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> tuple[Route, TargetState, TargetPlan]:
    if not gateway._started:
        raise errors.GatewayError("the gateway is not started: use 'async with Gateway(...)'")
    route = _resolve(gateway, endpoint)
    return (route, *gateway._invoker.single(route, operation, after_host, body))


def _resolve(gateway: Gateway, endpoint: str) -> Route:
    try:
        return gateway._router.resolve(endpoint)
    except errors.ConfigError:
        # Only a bad name gets here (a default route for it failed to build).
        check_endpoint_name(endpoint)
        raise


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
            emit(call_failed(route, None, endpoint, duration, error, INVOKE_ENDPOINT_STREAM))

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
