"""One call's journey: route, attempt, hedge, retry, record, all under one deadline.

The success path without hedging is a plain ``await`` of one attempt. A
hedge costs a task only when it actually fires: the primary attempt keeps
running in the caller's own task, and a winning hedge wakes that task with a
cancellation it recognises and takes back (``Task.uncancel``), the way
``asyncio.timeout`` does. tenacity takes over only after a retryable
failure, so the success path pays nothing for retry machinery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from gateway import errors
from gateway._metrics import GatewayMetrics, TargetMetrics
from gateway._signing import SigV4Signer
from gateway._transport import Transport
from gateway._wire import (
    InvokeResult,
    Origin,
    PreparedRequest,
    RequestSigner,
    decode_error,
    result_from_response,
)
from routing import Outcome, Route, TargetState

__all__ = ["CallSpec", "Invoker", "TargetPlan"]

_SUCCESS = Outcome.SUCCESS
_FAILURE = Outcome.FAILURE
_NEUTRAL = Outcome.NEUTRAL
_CANCELLED = Outcome.CANCELLED
_HEDGE_WON = "gateway: a hedge attempt answered first"
_MAX_PLANS = 4096


class TargetPlan:
    """Everything about one target computed once: where, which path, which signer."""

    __slots__ = (
        "endpoint",
        "host",
        "invoke_path",
        "invoke_prefix",
        "metrics",
        "origin",
        "signer",
        "variant",
    )

    def __init__(
        self,
        endpoint: str,
        origin: Origin,
        signer: RequestSigner,
        variant: str | None,
        metrics: TargetMetrics,
    ) -> None:
        self.endpoint = endpoint
        self.origin = origin
        self.host = origin.host_header
        self.signer = signer
        self.variant = variant
        self.invoke_path = f"/endpoints/{endpoint}/invocations"
        self.invoke_prefix = SigV4Signer.request_prefix("POST", self.invoke_path)
        self.metrics = metrics


@dataclass(slots=True)
class CallSpec:
    """One invoke call, as the pipeline needs it."""

    route: Route
    model: str | None
    before_host: tuple[tuple[str, str], ...]  # accept, content-type: they sort before host
    after_host: list[tuple[str, str]]  # x-amzn-sagemaker-*, sorted
    variant_pinned: bool
    body: bytes
    deadline: float
    attempts: int = 0
    hedged: bool = False
    payload_hash: str = ""


def _prepared(
    plan: TargetPlan,
    before_host: tuple[tuple[str, str], ...],
    after_host: list[tuple[str, str]],
    variant_pinned: bool,
    body: bytes,
    payload_hash: str,
) -> PreparedRequest:
    headers = [*before_host, ("host", plan.host), *after_host]
    if plan.variant is not None and not variant_pinned:
        # target-variant sorts last among the headers we send.
        headers.append(("x-amzn-sagemaker-target-variant", plan.variant))
    return PreparedRequest(
        plan.origin,
        plan.invoke_path,
        plan.invoke_prefix,
        headers,
        body,
        plan.signer,
        payload_hash,
        len(before_host) + 1,
    )


class _Race:
    """Shared by a call's primary attempt and its hedge."""

    __slots__ = ("caller", "hedge_result", "hedge_task", "primary_done", "woke_caller")

    def __init__(self, caller: asyncio.Task[object]) -> None:
        self.caller = caller
        self.hedge_task: asyncio.Task[InvokeResult | None] | None = None
        self.hedge_result: InvokeResult | None = None
        self.primary_done = False
        self.woke_caller = False


def outcome_of(error: BaseException) -> Outcome:
    """How an attempt's failure counts for the target's health."""
    if isinstance(error, errors.ModelNotReady):
        return _NEUTRAL  # the model is loading there; the endpoint is fine
    if isinstance(error, errors.ServiceError):
        return _FAILURE if error.retryable else _NEUTRAL
    if isinstance(error, errors.TransportError | errors.TimeoutError):
        return _FAILURE
    return _NEUTRAL


def _retrieve(task: asyncio.Task[InvokeResult | None]) -> None:
    # A hedge that failed after the call was settled is recorded in the route
    # and metrics already; reading the exception keeps asyncio from warning.
    if not task.cancelled():
        task.exception()


def _code_of(error: BaseException) -> str:
    if isinstance(error, errors.ServiceError):
        return error.code
    return type(error).__name__


class Invoker:
    """Runs calls over a router's routes through one transport."""

    def __init__(
        self,
        transport: Transport,
        plan_for: Callable[[Route, TargetState], TargetPlan],
        metrics: GatewayMetrics,
    ) -> None:
        self._transport = transport
        self._plan_for = plan_for
        self._plans: dict[TargetState, TargetPlan] = {}
        self.metrics = metrics

    def plan(self, route: Route, state: TargetState) -> TargetPlan:
        # A TargetState belongs to exactly one route, so it is the key.
        plan = self._plans.get(state)
        if plan is None:
            if len(self._plans) >= _MAX_PLANS:
                # Default routes come and go with endpoint names; start afresh.
                self._plans.clear()
            plan = self._plans[state] = self._plan_for(route, state)
        return plan

    # -- one attempt ---------------------------------------------------------

    def _request(self, call: CallSpec, plan: TargetPlan) -> PreparedRequest:
        call.attempts += 1
        return _prepared(
            plan,
            call.before_host,
            call.after_host,
            call.variant_pinned,
            call.body,
            call.payload_hash,
        )

    async def _attempt(self, call: CallSpec, state: TargetState) -> InvokeResult:
        plan = self.plan(call.route, state)
        request = self._request(call, plan)
        response = await self._transport.request(request, call.deadline)
        call.payload_hash = request.payload_hash  # hashed once, whatever the attempts
        if response.status == 200:
            return result_from_response(response, plan.endpoint)
        raise decode_error(response)

    def _finish(
        self,
        call: CallSpec,
        state: TargetState,
        started: float,
        error: BaseException | None,
    ) -> None:
        route = call.route
        if error is None:
            route.finish(state, started, _SUCCESS)
            self.plan(route, state).metrics.record_success(time.monotonic() - started)
            return
        if isinstance(error, asyncio.CancelledError):
            route.finish(state, started, _CANCELLED)
            return
        route.finish(state, started, outcome_of(error))
        self.plan(route, state).metrics.record_error(_code_of(error))

    async def _attempt_recorded(
        self, call: CallSpec, state: TargetState, started: float
    ) -> InvokeResult:
        try:
            result = await self._attempt(call, state)
        except BaseException as error:
            self._finish(call, state, started, error)
            raise
        self._finish(call, state, started, None)
        return result

    # -- the call ------------------------------------------------------------

    async def invoke(
        self,
        route: Route,
        model: str | None,
        before_host: tuple[tuple[str, str], ...],
        after_host: list[tuple[str, str]],
        variant_pinned: bool,
        body: bytes,
        deadline: float,
    ) -> InvokeResult:
        """One call (see :class:`CallSpec` for the arguments).

        The plain path, one attempt that succeeds, is inlined here and builds
        no CallSpec: only a hedge or a failure needs one.
        """
        state = route.pick(model)
        if state is None:
            raise errors.NoHealthyTarget(f"route {route.name}: every target is ejected")
        if route.hedging:
            delay = route.hedge_delay()
            if delay is not None and time.monotonic() + delay < deadline:
                call = CallSpec(
                    route, model, before_host, after_host, variant_pinned, body, deadline
                )
                return await self._invoke_hedged(call, state, delay)
        started = route.start(state)
        plan = self._plans.get(state) or self.plan(route, state)
        request = _prepared(plan, before_host, after_host, variant_pinned, body, "")
        try:
            response = await self._transport.request(request, deadline)
            if response.status == 200:
                route.finish(state, started, _SUCCESS)
                plan.metrics.record_success(time.monotonic() - started)
                return result_from_response(response, plan.endpoint)
            failure: BaseException = decode_error(response)
        except BaseException as error:  # recorded below, then retried or re-raised
            failure = error
        call = CallSpec(route, model, before_host, after_host, variant_pinned, body, deadline)
        call.attempts = 1
        call.payload_hash = request.payload_hash  # hashed once, whatever the attempts
        self._finish(call, state, started, failure)
        if isinstance(failure, errors.GatewayError):
            return await self._after_failure(call, failure, [state])
        raise failure

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
        timer = asyncio.get_running_loop().call_later(delay, self._fire_hedge, call, race, state)
        try:
            result = await self._attempt_recorded(call, state, started)
        except asyncio.CancelledError:
            timer.cancel()
            if race.woke_caller and caller.uncancel() == 0:
                assert race.hedge_result is not None
                call.route.observe_superseded(started)
                self.metrics.bump(self.metrics.hedge_wins, call.route.name)
                return self._stamp(call, race.hedge_result)
            self._cancel_hedge(race)
            raise
        except errors.GatewayError as error:
            timer.cancel()
            race.primary_done = True
            return await self._primary_failed(call, race, error, state)
        race.primary_done = True
        timer.cancel()
        self._cancel_hedge(race)
        return self._stamp(call, result)

    def _fire_hedge(self, call: CallSpec, race: _Race, primary: TargetState) -> None:
        if race.primary_done:
            return
        task = asyncio.get_running_loop().create_task(self._hedge(call, race, primary))
        task.add_done_callback(_retrieve)
        race.hedge_task = task

    async def _hedge(
        self, call: CallSpec, race: _Race, primary: TargetState
    ) -> InvokeResult | None:
        # The timer can fire in the same loop turn as the primary's answer,
        # before the caller resumes: yield once so such a hedge is never sent
        # and never spends a budget token.
        await asyncio.sleep(0)
        route = call.route
        if race.primary_done or not route.try_acquire_hedge():
            return None
        backup = route.pick(call.model, exclude=(primary,), reuse_excluded=True)
        if backup is None:
            return None
        call.hedged = True
        self.metrics.bump(self.metrics.hedges, route.name)
        started = route.start_backup(backup)
        result = await self._attempt_recorded(call, backup, started)
        race.hedge_result = result
        if not race.primary_done:
            # Wake the caller, still awaiting the primary, with a cancellation
            # it recognises: the primary attempt unwinds and is drained.
            race.woke_caller = True
            race.caller.cancel(_HEDGE_WON)
        return result

    @staticmethod
    def _cancel_hedge(race: _Race) -> None:
        task = race.hedge_task
        if task is not None and not task.done():
            task.cancel()

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
            return await self._after_failure(call, hedge_error, [primary])
        if result is None:  # the hedge stood down without sending anything
            return await self._after_failure(call, error, [primary])
        self.metrics.bump(self.metrics.hedge_wins, call.route.name)
        return self._stamp(call, result)

    # -- retries -------------------------------------------------------------

    async def _after_failure(
        self, call: CallSpec, error: errors.GatewayError, tried: list[TargetState]
    ) -> InvokeResult:
        """Retry within the budget and the deadline, elsewhere when possible."""
        if not error.retryable:
            raise self._final(call, error)
        route = call.route
        first_error = error

        def stop(state: RetryCallState) -> bool:
            remaining = call.deadline - time.monotonic()
            attempt = state.attempt_number
            return remaining <= route.backoff(attempt) or not route.try_acquire_retry(attempt)

        def wait(state: RetryCallState) -> float:
            outcome = state.outcome
            failure = outcome.exception() if outcome is not None else None
            backoff = route.backoff(state.attempt_number)
            if isinstance(failure, errors.ModelNotReady | errors.Throttling):
                backoff *= 2  # the far side asked for room: give it some
            return max(0.0, min(backoff, call.deadline - time.monotonic()))

        retrying = AsyncRetrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception(
                lambda exc: isinstance(exc, errors.GatewayError) and exc.retryable
            ),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number == 1:
                        raise first_error  # already happened; lets tenacity decide
                    return await self._retry_once(call, tried)
        except errors.GatewayError as final:
            raise self._final(call, final) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _retry_once(self, call: CallSpec, tried: list[TargetState]) -> InvokeResult:
        route = call.route
        state = route.pick(call.model, exclude=tried, reuse_excluded=True)
        if state is None:
            raise errors.NoHealthyTarget(f"route {route.name}: no target left to retry on")
        tried.append(state)
        self.metrics.bump(self.metrics.retries, route.name)
        started = route.start_backup(state)
        result = await self._attempt_recorded(call, state, started)
        return self._stamp(call, result)

    def _final(self, call: CallSpec, error: errors.GatewayError) -> errors.GatewayError:
        if isinstance(error, errors.DeadlineExceeded) or (
            error.retryable and time.monotonic() >= call.deadline
        ):
            self.metrics.bump(self.metrics.deadline_exceeded, call.route.name)
            if not isinstance(error, errors.DeadlineExceeded):
                deadline_error = errors.DeadlineExceeded(
                    f"deadline passed after {call.attempts} attempt(s); last error: {error}"
                )
                deadline_error.__cause__ = error
                return deadline_error
        return error
