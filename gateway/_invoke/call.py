# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""One call's journey: route, attempt, hedge, retry, record, all under one deadline.

Every decision about a call is made here, for all three operations
(InvokeEndpoint, the response stream, InvokeEndpointAsync) and the active
health checks. ``Gateway`` (``_client``) only validates and builds calls;
target planning lives in ``_targets``, the prediction cache in ``_cached``;
the transport only moves bytes. The rules this module keeps:

1. One deadline per call. The first attempt, hedges and retries all spend
   from it; an attempt whose deadline has passed is never sent, and is not
   charged to the target.
2. The route picks the target (traffic shares, then peak-EWMA). A hedge or a
   retry goes to a different target whenever the route has one.
3. Only InvokeEndpoint is hedged and retried. A stream that has started
   cannot be replayed; an async invocation is queued on the far side.
4. A hedge fires after the route's hedge delay, within its hedge budget; the
   first answer wins and the other attempt is cancelled (the transport never
   reuses a connection left mid-response). A fast failure never wins while
   another attempt is still running.
5. Only ``GatewayError``s marked ``retryable`` are retried, and answers
   about the target itself (``about_target``: its endpoint not found, its
   model failing) on a target the call has not tried, all within the
   route's retry budget, ``max_attempts`` and the deadline; a retryable
   error that outlives the deadline is reported as ``DeadlineExceeded``.
   An answer's ``Retry-After`` cools its target down (``Route.cool_down``):
   the retry goes elsewhere, or waits for it only if the wait fits the deadline.
6. Every attempt is recorded exactly once, by :func:`record`: its outcome
   for the target's health (``outcome_of``: the target's state counts
   against it, the caller's mistake against no target), and an
   ``AttemptFinished`` event when a hook listens.

The success path without hedging is a plain ``await`` of one attempt. A
hedge costs a task only when it actually fires: the primary attempt keeps
running in the caller's own task, and a winning hedge wakes that task with a
cancellation it recognises and takes back (``Task.uncancel``), the way
``asyncio.timeout`` does. tenacity takes over only after a retryable
failure, so the success path pays nothing for retry machinery.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Final

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from gateway import errors
from gateway._aws.sigv4 import PresignedHead, payload_sha256
from gateway._http.connection import AnswerWaiter
from gateway._http.deadlines import Slot
from gateway._http.interfaces import StreamingResponse, Transport
from gateway._http.message import RawResponse
from gateway._http.native import NativeTransport
from gateway._http.request import PreparedRequest
from gateway._invoke.api import (
    INVOKE,
    InvokeResult,
    Operation,
    before_host_headers,
    decode_error,
    decode_runtime_error,
    request_for,
    result_from_response,
    safe_request_id,
    secrets_in_headers,
    secrets_of,
)
from gateway._invoke.target_plans import TargetPlan, TargetPlanner, router_takes
from gateway._observe.events import (
    CANCELLED,
    FAILED,
    HEDGE,
    INVOKE_ENDPOINT,
    LOST,
    PRIMARY,
    RETRY,
    WON,
    AttemptFinished,
    CacheLookup,
    CallFinished,
    CallStarted,
    Emit,
    HedgeFired,
    HedgeLost,
    RetryScheduled,
    routing_labels,
)
from gateway.routing import Outcome, Route, TargetState

__all__ = [
    "CallSpec",
    "Invoker",
    "RelayedCall",
    "about_target",
    "emit_cached_call",
    "emit_call_finished",
    "new_event",
    "observed_call",
    "prepared",
    "record",
]

# Final: compiled, C statics rather than a look-up in the module's dict each.
_SUCCESS: Final = Outcome.SUCCESS
_FAILURE: Final = Outcome.FAILURE
_NEUTRAL: Final = Outcome.NEUTRAL
_CANCELLED: Final = Outcome.CANCELLED
_HEDGE_WON = "gateway: a hedge attempt answered first"
# The hedge went to the primary's own target (no other was left): the loss says
# nothing about that target, so it is not charged for it.
_HEDGE_WON_SAME_TARGET = "gateway: a hedge attempt on the same target answered first"
_PRIMARY_WON = "gateway: the primary attempt answered first"
_MAX_PLANS = 4096


@dataclass(slots=True)
class CallSpec:
    """One invoke call, as the pipeline needs it."""

    route: Route
    operation: Operation
    model: str | None
    before_host: tuple[tuple[str, str], ...]  # accept, content-type: they sort before host
    after_host: list[tuple[str, str]]  # x-amzn-sagemaker-*, sorted
    variant_pinned: bool
    body: bytes
    deadline: float
    attempts: int = 0
    hedged: bool = False
    payload_hash: str = ""
    # The caller's user agent with ours appended (the sidecar's), else None.
    user_agent: str | None = None


_TARGET_VARIANT: Final = "x-amzn-sagemaker-target-variant"


def _relay_head(
    plan: TargetPlan,
    operation: Operation,
    members: tuple[object, ...],
    before_host: tuple[tuple[str, str], ...],
    after_host: list[tuple[str, str]],
    variant_pinned: bool,
    user_agent: str | None,
) -> PresignedHead:
    """The head of a relayed call with these members to ``plan``'s target, signed up
    to its payload hash: kept per target and members, so that a relayed call whose
    members were seen this second builds no request and no signing key to find it.
    """
    signer = plan.signer
    kept = plan.relay_head_of(members)
    if kept is not None:
        agent, presigned = kept
        if agent == user_agent and signer.is_current(presigned):
            return presigned
    # (The members decide the headers, the variant's pinning with them: one key.)
    request = prepared(plan, operation, before_host, after_host, variant_pinned, b"")
    request.caller_agent = user_agent
    presigned = request.presigned()
    plan.keep_relay_head(members, (user_agent, presigned))
    return presigned


def prepared(
    plan: TargetPlan,
    operation: Operation,
    before_host: tuple[tuple[str, str], ...],
    after_host: list[tuple[str, str]],
    variant_pinned: bool,
    body: bytes,
    payload_hash: str = "",
) -> PreparedRequest:
    """The request of ``operation`` to ``plan``'s target: the one builder every call uses."""
    if plan.variant is not None and not variant_pinned and _TARGET_VARIANT in operation.by_header:
        # The target's variant, unless the caller named one; no member sorts after it.
        after_host = [*after_host, (_TARGET_VARIANT, plan.variant)]
    if plan.routing_target is not None:
        after_host = plan.routed_headers(operation, after_host)
    # path_of's lookup inlined: every request is built here.
    path, prefix = plan.paths.get(operation.name) or plan.path_of(operation)
    return request_for(
        plan.origin, path, prefix, plan.signer, before_host, after_host, body, payload_hash
    )


# Builds an event (a NamedTuple) in C: from compiled code, calling the class
# runs its Python-level __new__, which costs about 60% more.
new_event: Final = tuple.__new__


class _Race:
    """Shared by a call's primary attempt and its hedge."""

    __slots__ = ("backup", "caller", "hedge_result", "hedge_task", "primary_done", "woke_caller")

    def __init__(self, caller: asyncio.Task[object]) -> None:
        self.caller = caller
        self.hedge_task: asyncio.Task[InvokeResult | None] | None = None
        self.backup: TargetState | None = None  # the hedge's target, once it is sent
        self.hedge_result: InvokeResult | None = None
        self.primary_done = False
        self.woke_caller = False


def outcome_of(error: BaseException) -> Outcome:
    """How an attempt's failure counts for the target's health."""
    if isinstance(error, errors.PoolTimeout) or (
        isinstance(error, errors.DeadlineExceeded) and not error.sent
    ):
        # The request never left: a full pool is nobody's failure but the pool's.
        return _CANCELLED
    if isinstance(error, errors.ServiceError):
        return _FAILURE if error.retryable or about_target(error) else _NEUTRAL
    if isinstance(error, errors.TransportError | errors.TimeoutError):
        return _FAILURE
    return _NEUTRAL


# The messages of an answer saying the target's endpoint (or inference router, or
# routing target) does not exist: deleted, misspelt in the route, in another account.
_MISSING: Final = ("Endpoint ", "Inference router ", "Routing target ")
_ACCESS_DENIED: Final = "AccessDeniedException"
# The origin of a Global Inference Gateway's own errors (not its inference gateway's).
_GLOBAL_GATEWAY: Final = "Global Inference Gateway"


def about_target(error: errors.ServiceError) -> bool:
    """Whether an error answer tells of the target's own state, not the caller's mistake.

    An answer any target would give (a malformed body, a bad member, a model that
    refused the input) is the caller's; these are the target's, and count against
    it as a server fault does: its endpoint not found, its model failing (a 424
    whose container answered 5xx, or none) or not ready, access to it denied.
    """
    if isinstance(error, errors.ModelNotReady):
        return True
    if isinstance(error, errors.ModelError):
        status = error.original_status_code
        return status is None or status >= 500
    origin = error.origin
    if error.code == _ACCESS_DENIED or isinstance(error, errors.AccessDenied):
        # An inference gateway behind a Global Inference Gateway refusing the
        # caller's identity token is the caller's; the rest refuse our credentials.
        return origin is None or origin == _GLOBAL_GATEWAY
    if isinstance(error, errors.ResourceNotFound):
        return origin == _GLOBAL_GATEWAY  # the gateway itself, not the body's model
    if isinstance(error, errors.ValidationError):
        message = error.message
        return message.startswith(_MISSING) and "not found" in message
    return False


def _retrieve(task: asyncio.Task[InvokeResult | None]) -> None:
    # A hedge that failed after the call was settled is recorded in the route
    # and metrics already; reading the exception keeps asyncio from warning.
    if not task.cancelled():
        task.exception()


def code_of(error: BaseException) -> str:
    """The error code an event or a metric reports for ``error``."""
    if isinstance(error, errors.ServiceError):
        return error.code
    return type(error).__name__


def attempt_outcome(error: BaseException | None) -> str:
    """won, lost (superseded in a hedge race), cancelled or failed."""
    if error is None:
        return WON
    if isinstance(error, asyncio.CancelledError):
        reason = error.args[0] if error.args else None
        return LOST if reason in (_HEDGE_WON, _HEDGE_WON_SAME_TARGET, _PRIMARY_WON) else CANCELLED
    return FAILED


def emit_attempt(
    emit: Emit,
    route: str,
    target: str,
    endpoint: str,
    kind: str,
    started: float,
    error: BaseException | None,
) -> None:
    outcome = attempt_outcome(error)
    code = code_of(error) if outcome == FAILED and error is not None else None
    duration = monotonic() - started
    emit(new_event(AttemptFinished, (route, target, endpoint, kind, outcome, duration, code)))
    if kind == HEDGE and outcome == LOST:
        emit(HedgeLost(route, target))


def cancelled_outcome(error: BaseException, kind: str, deadline: float) -> Outcome:
    """How a cancelled attempt counts: against its target only if the target was too slow.

    A primary that lost to its hedge was slower than the hedge delay plus the
    hedge's whole answer; an attempt still unanswered at its call's deadline
    timed out (the canceller merely beat the transport's timer). Anything
    else (a hedge that lost, a caller giving up early) is nobody's failure.
    """
    if (
        kind == PRIMARY
        and isinstance(error, asyncio.CancelledError)
        and error.args
        and error.args[0] == _HEDGE_WON
    ):
        return _FAILURE
    if monotonic() >= deadline:
        return _FAILURE
    return _CANCELLED


def record(
    route: Route,
    state: TargetState,
    endpoint: str,
    started: float,
    error: BaseException | None,
    kind: str,
    emit: Emit | None,
    deadline: float = math.inf,
) -> None:
    """The one place an attempt is recorded: the target's health, then the event stream."""
    if error is None:
        route.finish(state, started, _SUCCESS)
    elif isinstance(error, asyncio.CancelledError | GeneratorExit):
        route.finish(state, started, cancelled_outcome(error, kind, deadline))
        error = asyncio.CancelledError() if isinstance(error, GeneratorExit) else error
    else:
        route.finish(state, started, outcome_of(error))
        if isinstance(error, errors.ServiceError) and error.retry_after is not None:
            route.cool_down(state, error.retry_after)  # it asked for rest: picks go elsewhere
    if emit is not None:
        emit_attempt(emit, route.name, state.key, endpoint, kind, started, error)


class RelayedCall:
    """A call whose first attempt :meth:`Invoker.relay` sent from a protocol callback.

    ``answer`` is that attempt's future. Once it is done, :meth:`result` is the
    answer of a call that succeeded at once (recorded, as :meth:`Invoker.invoke`
    records it); otherwise :meth:`rest` is the rest of the call, as ``invoke``
    goes on: the one silent resend of a socket that died while idle, then the
    retries within the route's budget and the deadline.
    """

    __slots__ = (
        "_request",
        "answer",
        "answered_at",
        "call_started",
        "counts",
        "invoker",
        "plan",
        "route",
        "sent",
        "slot",
        "spec",
        "started",
        "state",
        "user_agent",
    )

    def __init__(
        self,
        invoker: Invoker,
        route: Route,
        state: TargetState,
        plan: TargetPlan,
        started: float,
        sent: tuple[bytes, str],
        answer: AnswerWaiter,
        slot: Slot,
        spec: tuple[
            Operation,
            str | None,
            tuple[tuple[str, str], ...],
            list[tuple[str, str]],
            bool,
            bytes,
            float,
        ],
    ) -> None:
        self.invoker = invoker
        self.route = route
        self.state = state
        self.plan = plan
        self.started = started
        # The head sent and its payload hash: the request is built again from them
        # (and the spec) only if the first attempt fails.
        self.sent = sent
        self._request: PreparedRequest | None = None
        self.user_agent: str | None = None
        self.answer = answer
        self.slot = slot
        # The CallSpec's fields (operation, model, headers, pinned, body, deadline), built
        # into one only if the first attempt fails.
        self.spec = spec
        # When the call began, for its CallFinished (set by the pipeline when a hook listens).
        self.call_started = 0.0
        # The lone hook's way to count a call its first attempt answered, without its
        # events (GatewayMetrics.call_answered); None: the events are emitted.
        self.counts: Callable[[str, str, float, float], None] | None = None
        # When answered() counted the call (time.monotonic; 0.0: not read there).
        self.answered_at = 0.0

    @property
    def model(self) -> str | None:
        return self.spec[1]

    @property
    def request(self) -> PreparedRequest:
        """The request the first attempt sent, as the rest of the call resends or reads it."""
        request = self._request
        if request is None:
            operation, _, before_host, after_host, pinned, body, _ = self.spec
            request = prepared(self.plan, operation, before_host, after_host, pinned, body)
            request.caller_agent = self.user_agent
            head, payload_hash = self.sent
            request.sent_as(head, payload_hash)
            self._request = request
        return request

    def result(self) -> InvokeResult | None:
        """The answer, once ``answer`` is done, if the first attempt succeeded; else None."""
        response = self.answered()
        return None if response is None else result_from_response(response, self.plan.endpoint)

    def answered(self) -> RawResponse | None:
        """:meth:`result` as received (a relay copies it): its status 200, else None."""
        answer = self.answer
        self.slot.pop(answer, None)
        try:
            response = answer.result()  # one call: it raises a failure or a cancellation
        except BaseException:  # (read again, and raised, by rest)
            return None
        if response.status != 200:
            return None
        plan = self.plan
        route = self.route
        state = self.state
        counts = self.counts
        if counts is None:
            record(route, state, plan.endpoint, self.started, None, PRIMARY, self.invoker.emit)
        else:
            route.finish(state, self.started, _SUCCESS)
            now = self.answered_at = monotonic()
            counts(route.name, state.key, now - self.started, now - self.call_started)
        return response

    async def rest(self) -> InvokeResult:
        """The rest of the call, once :meth:`result` said None."""
        invoker = self.invoker
        request = self.request
        plan = self.plan
        try:
            try:
                response = self.answer.result()  # raises the attempt's failure
            except errors.StaleConnection:
                # The socket died while idle: the transport's one silent resend, fresh.
                transport = invoker._transport
                assert isinstance(transport, NativeTransport)  # relay() sends on no other
                transport.stats.stale_retries += 1
                response = await transport.request(request, self.spec[6], fresh=True)
            if response.status == 200:
                record(
                    self.route, self.state, plan.endpoint, self.started, None, PRIMARY, invoker.emit
                )
                return result_from_response(response, plan.endpoint)
            failure: BaseException = invoker._decode(plan, response, request)
        except BaseException as error:  # recorded by _first_failed, then retried or re-raised
            failure = error
        operation, model, before_host, after_host, pinned, body, deadline = self.spec
        call = CallSpec(
            self.route, operation, model, before_host, after_host, pinned, body, deadline
        )
        call.user_agent = request.caller_agent
        return await invoker._first_failed(call, self.state, self.started, request, failure)


class Invoker:
    """Runs calls over a router's routes through one transport."""

    def __init__(
        self,
        transport: Transport,
        targets: TargetPlanner,
    ) -> None:
        self._transport = transport
        self._targets = targets
        self._plans: dict[TargetState, TargetPlan] = {}
        # The instrumentation stream; None (no hook): nothing is built or sent.
        self.emit: Emit | None = None
        # An error answer's decoder: each runtime's model has its own error shapes.
        self.decode: Callable[[RawResponse, Sequence[str]], errors.ServiceError] = decode_error

    def _decode(
        self, plan: TargetPlan, response: RawResponse, request: PreparedRequest
    ) -> errors.ServiceError:
        # Redacted as it is decoded: the request's secrets never reach the error.
        secrets = secrets_in_headers(request.headers)
        # An inference router target answers in its own runtime's error shapes.
        if plan.routing_target is not None:
            error = decode_runtime_error(response, secrets)
        else:
            error = self.decode(response, secrets)
        if error.code in _REFUSED_KEYS and _keys_rotated_since(request):
            # Signed with keys that were replaced while the request was on its way (an
            # expired or revoked key): signed again with the current ones, it may pass.
            error.retryable = True
        return error

    def plan(self, route: Route, state: TargetState) -> TargetPlan:
        # A TargetState belongs to exactly one route, so it is the key.
        plan = self._plans.get(state)
        if plan is None:
            if len(self._plans) >= _MAX_PLANS:
                # Default routes come and go with endpoint names; start afresh.
                self._plans.clear()
            plan = self._plans[state] = self._targets.plan_for(route, state)
        return plan

    # -- one attempt ---------------------------------------------------------

    def _request(self, call: CallSpec, plan: TargetPlan) -> PreparedRequest:
        call.attempts += 1
        request = prepared(
            plan,
            call.operation,
            call.before_host,
            call.after_host,
            call.variant_pinned,
            call.body,
            call.payload_hash,
        )
        request.caller_agent = call.user_agent
        return request

    async def _attempt(self, call: CallSpec, state: TargetState) -> InvokeResult:
        plan = self.plan(call.route, state)
        request = self._request(call, plan)
        response = await self._transport.request(request, call.deadline)
        call.payload_hash = request.payload_hash  # hashed once, whatever the attempts
        if response.status == 200:
            return result_from_response(response, plan.endpoint)
        raise self._decode(plan, response, request)

    def _finish(
        self,
        call: CallSpec,
        state: TargetState,
        started: float,
        error: BaseException | None,
        kind: str,
    ) -> None:
        route = call.route
        endpoint = self.plan(route, state).endpoint if self.emit is not None else ""
        record(route, state, endpoint, started, error, kind, self.emit, call.deadline)

    async def _attempt_recorded(
        self, call: CallSpec, state: TargetState, started: float, kind: str
    ) -> InvokeResult:
        try:
            result = await self._attempt(call, state)
        except BaseException as error:
            self._finish(call, state, started, error, kind)
            raise
        self._finish(call, state, started, None, kind)
        return result

    # -- the call ------------------------------------------------------------

    async def invoke(
        self,
        route: Route,
        operation: Operation,
        model: str | None,
        before_host: tuple[tuple[str, str], ...],
        after_host: list[tuple[str, str]],
        variant_pinned: bool,
        body: bytes,
        deadline: float,
        user_agent: str | None = None,
    ) -> InvokeResult:
        """One call (see :class:`CallSpec` for the arguments).

        The plain path, one attempt that succeeds, is inlined here and builds
        no CallSpec: only a hedge or a failure needs one.
        """
        if monotonic() >= deadline:
            # Nothing is sent, and the target's health is not charged for it
            # (the metrics hook counts it from the call's CallFinished).
            raise errors.DeadlineExceeded("the call's deadline passed before the first attempt")
        state = route.pick(model)
        if state is None:
            raise errors.NoHealthyTarget(f"route {route.name}: every target is ejected")
        if route.hedging:
            delay = route.hedge_delay()
            if delay is not None and monotonic() + delay < deadline:
                call = CallSpec(
                    route, operation, model, before_host, after_host, variant_pinned, body, deadline
                )
                call.user_agent = user_agent
                return await self._invoke_hedged(call, state, delay)
        # Planned before the attempt starts: a bad endpoint name fails here, unrecorded.
        plan = self._plans.get(state) or self.plan(route, state)
        started = route.start(state)
        request = prepared(plan, operation, before_host, after_host, variant_pinned, body)
        if user_agent is not None:
            request.caller_agent = user_agent
        try:
            response = await self._transport.request(request, deadline)
            if response.status == 200:
                record(route, state, plan.endpoint, started, None, PRIMARY, self.emit)
                return result_from_response(response, plan.endpoint)
            failure: BaseException = self._decode(plan, response, request)
        except BaseException as error:  # recorded below, then retried or re-raised
            failure = error
        call = CallSpec(
            route, operation, model, before_host, after_host, variant_pinned, body, deadline
        )
        call.user_agent = user_agent
        return await self._first_failed(call, state, started, request, failure)

    async def _first_failed(
        self,
        call: CallSpec,
        state: TargetState,
        started: float,
        request: PreparedRequest,
        failure: BaseException,
    ) -> InvokeResult:
        """The rest of a call whose first attempt (``request``, to ``state``) failed."""
        call.attempts = 1
        call.payload_hash = request.payload_hash  # hashed once, whatever the attempts
        self._finish(call, state, started, failure, PRIMARY)
        if isinstance(failure, errors.GatewayError):
            return await self._after_failure(call, failure, [state])
        raise failure

    def relay(
        self,
        route: Route,
        operation: Operation,
        model: str | None,
        members: tuple[object, ...],
        before_host: tuple[tuple[str, str], ...],
        after_host: list[tuple[str, str]],
        variant_pinned: bool,
        body: bytes,
        now: float,
        deadline: float,
        user_agent: str | None,
        then: Callable[[AnswerWaiter], None],
    ) -> RelayedCall | None:
        """:meth:`invoke`'s first attempt, sent without suspending (from a protocol
        callback); None, with nothing started, where it cannot be: no warm socket to
        its target, a target not planned yet, the native transport not in use.

        The caller checks what :meth:`invoke` would do otherwise: no hedging on
        ``route``, no inference router among its targets. ``now`` (the call's
        start, read just before) and ``deadline`` are ``time.monotonic`` readings:
        one clock reading a call. ``then(answer)`` is called once the attempt's
        ``answer`` is done, never from inside this call (see
        :meth:`NativeTransport.send_on`).
        """
        transport = self._transport
        if not isinstance(transport, NativeTransport):
            return None
        if now >= deadline:
            return None
        state = route.pick(model)
        if state is None:
            return None
        plan = self._plans.get(state)
        if plan is None:
            return None  # planned (and a bad name refused) on invoke's path first
        try:
            presigned = _relay_head(
                plan, operation, members, before_host, after_host, variant_pinned, user_agent
            )
        except Exception:
            return None  # signing failed: invoke's path records and answers it
        connection = transport.idle_connection(plan.origin, now)
        if connection is None:
            return None
        started = route.start(state)
        payload_hash = payload_sha256(body)
        head = presigned.head(payload_hash, len(body))
        answer, slot = transport.send_bytes_on(
            connection, plan.origin, head + body, deadline, now, then
        )
        spec = (operation, model, before_host, after_host, variant_pinned, body, deadline)
        call = RelayedCall(
            self, route, state, plan, started, (head, payload_hash), answer, slot, spec
        )
        call.user_agent = user_agent
        return call

    def _stamp(self, call: CallSpec, result: InvokeResult) -> InvokeResult:
        result.attempts = call.attempts
        result.hedged = call.hedged
        return result

    # -- hedging -------------------------------------------------------------

    async def _invoke_hedged(
        self, call: CallSpec, state: TargetState, delay: float
    ) -> InvokeResult:
        caller = asyncio.current_task()
        assert caller is not None
        race = _Race(caller)
        started = call.route.start(state)
        timer = asyncio.get_running_loop().call_later(
            delay, self._fire_hedge, call, race, state, delay
        )
        try:
            result = await self._attempt_recorded(call, state, started, PRIMARY)
        except asyncio.CancelledError:
            timer.cancel()
            if race.woke_caller and caller.uncancel() == 0:
                assert race.hedge_result is not None
                call.route.observe_superseded(started)
                return self._stamp(call, race.hedge_result)
            self._cancel_hedge(race, None)
            raise
        except errors.GatewayError as error:
            timer.cancel()
            race.primary_done = True
            return await self._primary_failed(call, race, error, state)
        race.primary_done = True
        timer.cancel()
        self._cancel_hedge(race, _PRIMARY_WON)
        return self._stamp(call, result)

    def _fire_hedge(self, call: CallSpec, race: _Race, primary: TargetState, delay: float) -> None:
        if race.primary_done:
            return
        task = asyncio.get_running_loop().create_task(self._hedge(call, race, primary, delay))
        task.add_done_callback(_retrieve)
        race.hedge_task = task

    async def _hedge(
        self, call: CallSpec, race: _Race, primary: TargetState, delay: float
    ) -> InvokeResult | None:
        # The timer can fire in the same loop turn as the primary's answer,
        # before the caller resumes: yield once so such a hedge is never sent
        # and never spends a budget token.
        await asyncio.sleep(0)
        route = call.route
        if race.primary_done or monotonic() >= call.deadline or not route.try_acquire_hedge():
            return None
        backup = route.pick(call.model, exclude=(primary,), reuse_excluded=True)
        if backup is None:
            return None
        call.hedged = True
        race.backup = backup
        emit = self.emit
        if emit is not None:
            emit(HedgeFired(route.name, backup.key, delay))
        started = route.start_backup(backup)
        result = await self._attempt_recorded(call, backup, started, HEDGE)
        race.hedge_result = result
        if not race.primary_done:
            # Wake the caller, still awaiting the primary, with a cancellation
            # it recognises: the primary attempt unwinds and is drained.
            race.woke_caller = True
            race.caller.cancel(_HEDGE_WON if backup is not primary else _HEDGE_WON_SAME_TARGET)
        return result

    @staticmethod
    def _cancel_hedge(race: _Race, reason: str | None) -> None:
        task = race.hedge_task
        if task is not None and not task.done():
            task.cancel(reason)

    async def _primary_failed(
        self, call: CallSpec, race: _Race, error: errors.GatewayError, primary: TargetState
    ) -> InvokeResult:
        """A fast failure never wins while another attempt is still running."""
        task = race.hedge_task
        if task is None:
            return await self._after_failure(call, error, [primary])
        try:
            result = await task
        except errors.GatewayError as hedge_error:
            backup = race.backup
            tried = [primary] if backup is None or backup is primary else [primary, backup]
            return await self._after_failure(call, hedge_error, tried)
        if result is None:  # the hedge stood down without sending anything
            return await self._after_failure(call, error, [primary])
        return self._stamp(call, result)

    # -- retries -------------------------------------------------------------

    async def _after_failure(
        self, call: CallSpec, error: errors.GatewayError, tried: list[TargetState]
    ) -> InvokeResult:
        """Retry within the budget and the deadline, elsewhere when possible.

        A retryable error may be retried on the same target when no other is left
        (an endpoint has several instances); an answer about the target itself
        (``about_target``) only on a target the call has not tried.
        """
        route = call.route
        if not _worth_retrying(error, route, tried):
            raise self._final(call, error)
        first_error = error
        last: errors.GatewayError = error

        def stop(state: RetryCallState) -> bool:
            remaining = call.deadline - monotonic()
            attempt = state.attempt_number
            if remaining <= route.backoff(attempt) or remaining <= route.ready_in(tried):
                return True  # a Retry-After wait that outlasts the deadline is no retry
            return not route.try_acquire_retry(attempt)

        def wait(state: RetryCallState) -> float:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            backoff = route.backoff(state.attempt_number)
            if isinstance(failure, errors.ModelNotReady | errors.Throttling):
                backoff *= 2  # the far side asked for room: give it some
            # Every target left is cooling down (Retry-After): wait for the first one back.
            backoff = max(backoff, route.ready_in(tried))
            return max(0.0, min(backoff, call.deadline - monotonic()))

        def scheduled(state: RetryCallState) -> None:
            # tenacity runs ``wait`` before ``stop``: only here is a retry certain.
            emit = self.emit
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            if emit is not None and failure is not None:
                code = code_of(failure)
                # The sleep ahead: next_action (every tenacity this allows; upcoming_sleep
                # is 8.2.3's).
                action = state.next_action
                sleep = 0.0 if action is None else float(action.sleep)
                emit(RetryScheduled(route.name, state.attempt_number, sleep, code))

        retrying = AsyncRetrying(
            stop=stop,
            wait=wait,
            before_sleep=scheduled,
            retry=retry_if_exception(
                lambda exc: (
                    isinstance(exc, errors.GatewayError) and _worth_retrying(exc, route, tried)
                )
            ),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number == 1:
                        raise first_error  # already happened; lets tenacity decide
                    try:
                        return await self._retry_once(call, tried, last)
                    except errors.GatewayError as failure:
                        last = failure
                        raise
        except errors.GatewayError as final:
            raise self._final(call, final) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _retry_once(
        self, call: CallSpec, tried: list[TargetState], last: errors.GatewayError
    ) -> InvokeResult:
        if monotonic() >= call.deadline:
            raise errors.DeadlineExceeded("the call's deadline passed before a retry")
        route = call.route
        state = route.pick(call.model, exclude=tried, reuse_excluded=last.retryable)
        if state is None:
            if not last.retryable:
                raise last  # its target's state: the untried target left while we waited
            raise errors.NoHealthyTarget(f"route {route.name}: no target left to retry on")
        tried.append(state)
        started = route.start_backup(state)
        result = await self._attempt_recorded(call, state, started, RETRY)
        return self._stamp(call, result)

    def _final(self, call: CallSpec, error: errors.GatewayError) -> errors.GatewayError:
        error.attempts = call.attempts
        if (
            not isinstance(error, errors.DeadlineExceeded)
            and error.retryable
            and monotonic() >= call.deadline
        ):
            deadline_error = errors.DeadlineExceeded(
                f"deadline passed after {call.attempts} attempt(s); last error: {error}"
            )
            deadline_error.__cause__ = error
            deadline_error.attempts = call.attempts
            return deadline_error
        return error

    # -- single attempts: the response stream and async invocations -------------

    def single(
        self,
        route: Route,
        operation: Operation | None = None,
        after_host: list[tuple[str, str]] | None = None,
        body: bytes = b"",
    ) -> tuple[TargetState, TargetPlan]:
        """The target of a call that is never hedged or retried.

        A call of ``operation`` that an inference router cannot take (a stream,
        an async invocation with an inline body) goes to the route's other targets.
        """
        routers = route.routers
        if (
            routers
            and operation is not None
            and not router_takes(operation, after_host or [], body)
        ):
            state = route.pick_outside(routers)
            if state is None:
                raise errors.InvalidRequest(
                    f"route {route.name}: {operation.name} cannot go to an inference router "
                    "target, and the route has no other target"
                )
            return state, self.plan(route, state)
        state = route.pick(None)
        if state is None:
            raise errors.NoHealthyTarget(f"route {route.name}: every target is ejected")
        return state, self.plan(route, state)

    async def open_stream(
        self,
        route: Route,
        state: TargetState,
        plan: TargetPlan,
        request: PreparedRequest,
        deadline: float,
    ) -> tuple[StreamingResponse, Callable[[BaseException | None], None]]:
        """Open a response stream; the caller calls ``finish`` once when it ends."""
        _check_deadline(deadline)
        started = route.start(state)

        def finished(error: BaseException | None) -> None:
            record(route, state, plan.endpoint, started, error, PRIMARY, self.emit, deadline)

        try:
            stream = await self._transport.stream(request, deadline)
        except BaseException as error:
            finished(error)
            raise
        return stream, finished

    async def send_once(
        self,
        route: Route,
        state: TargetState,
        plan: TargetPlan,
        request: PreparedRequest,
        deadline: float,
        ok: tuple[int, ...],
    ) -> RawResponse:
        """One recorded attempt; a status outside ``ok`` raises its decoded error."""
        _check_deadline(deadline)
        started = route.start(state)
        error: BaseException | None = None
        try:
            response = await self._transport.request(request, deadline)
            if response.status not in ok:
                raise self._decode(plan, response, request)
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            record(route, state, plan.endpoint, started, error, PRIMARY, self.emit, deadline)

    # -- active health checks ----------------------------------------------------

    async def health_checks(self, routes: list[Route]) -> None:
        """Forever: a cheap invocation to each target of ``routes`` when it is due."""
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
        plan = self.plan(route, state)
        try:
            # A probe whose content type cannot be sent fails like any other.
            values = INVOKE.values({"ContentType": content_type})
            request = prepared(plan, INVOKE, before_host_headers(INVOKE, values), [], True, body)
            response = await self._transport.request(request, monotonic() + 1.0)
        except errors.GatewayError:
            return False
        return response.status == 200


# The codes of an answer refusing the request's keys themselves (unknown, expired,
# or a signature made with them), not what the keys may do (AccessDenied).
_REFUSED_KEYS: Final = frozenset(
    {
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
    }
)


def _keys_rotated_since(request: PreparedRequest) -> bool:
    """Whether ``request`` was signed with an access key other than the current one."""
    signer = request.signer
    if signer is None:
        return False
    signed = request.signed_access_key()
    return signed is not None and signed != signer.current_access_key()


def _worth_retrying(error: errors.GatewayError, route: Route, tried: list[TargetState]) -> bool:
    """A retryable error anywhere; an answer about its target on a target not yet tried."""
    if error.retryable:
        return True
    return isinstance(error, errors.ServiceError) and about_target(error) and route.untried(tried)


def _check_deadline(deadline: float) -> None:
    if monotonic() >= deadline:
        raise errors.DeadlineExceeded("the call's deadline passed before it was sent")


# -- the call's events (only when a hook listens) -------------------------------


async def observed_call(
    emit: Emit,
    route: str,
    model: str | None,
    call: Awaitable[InvokeResult],
    cached: bool,
    routed: bool,
    members: tuple[object, ...],
    sensitive: tuple[int, ...],
    operation: str = INVOKE_ENDPOINT,
    started: float | None = None,
) -> InvokeResult:
    """One call between CallStarted and CallFinished (only when a hook listens).

    ``routed``: the answer may carry an inference router's reason and resource
    (read only then: it parses the head). ``sensitive``: the places in the call's
    ``members`` of its secrets; an answer's request id that holds one reads ``other``.
    ``started``: when the call began, where its CallStarted is emitted already.
    """
    if started is None:
        emit(new_event(CallStarted, (route, model, operation)))
        started = monotonic()
    try:
        result = await call
    except BaseException as error:
        duration = monotonic() - started
        emit(call_failed(route, model, None, duration, error, operation))
        raise
    emit_call_finished(
        emit, route, model, started, result, cached, routed, members, sensitive, operation
    )
    return result


def emit_call_finished(
    emit: Emit,
    route: str,
    model: str | None,
    started: float,
    result: InvokeResult,
    cached: bool,
    routed: bool,
    members: tuple[object, ...],
    sensitive: tuple[int, ...],
    operation: str,
) -> None:
    """The CallFinished of a call that ``result`` answered (see :func:`observed_call`)."""
    if cached:
        emit(CacheLookup(route, result.cache or "miss"))
    reason = resource = None
    if routed and result.cache is None:
        reason, resource = routing_labels(result.routing_reason, result.routed_resource_arn)
    # Not read for a lone hook that never reads it (the metrics hook, see Hook).
    request_id = result.request_id if getattr(emit, "reads_request_id", True) else None
    if request_id:
        secrets = [str(members[i]) for i in sensitive if members[i] is not None]
        if secrets:
            request_id = safe_request_id(request_id, secrets_of(secrets))
    emit(
        new_event(
            CallFinished,
            (
                route,
                model,
                result.target,
                monotonic() - started,
                result.attempts,
                result.hedged,
                result.cache,
                None,
                operation,
                request_id,
                reason,
                resource,
            ),
        )
    )


def call_failed(
    route: str,
    model: str | None,
    endpoint: str | None,
    duration: float,
    error: BaseException,
    operation: str,
    request_id: str | None = None,
) -> CallFinished:
    """The CallFinished of a call that raised ``error`` (its request id: the error's, else
    ``request_id``, the answer's, as for a stream failing after its head arrived)."""
    found = getattr(error, "request_id", None)
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
        found if isinstance(found, str) else request_id,
    )


def emit_cached_call(emit: Emit, route: str, model: str | None, result: InvokeResult) -> None:
    """A call answered from the near tier, as the three events a listener expects."""
    emit(CallStarted(route, model))
    emit(CacheLookup(route, "near"))
    emit(CallFinished(route, model, result.target, 0.0, 0, False, "near", None))
