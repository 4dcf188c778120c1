"""Hedges, retries and the deadline of ``Gateway.invoke`` on a scripted backend and virtual time.

The scripted transport (tests/gateway/_scripted.py) answers, fails or holds
each attempt on cue; the loop's clock jumps from one timer to the next, so a
hedge delay or a backoff is checked at its exact virtual moment, not by
sleeping through it. The same rules over sockets, end to end, are in
test_routing_integration.py and tests/reliability (test_hedge_loser.py,
test_hanging_target_hedge.py); the order-of-events cases are in test_call.py.

A route's own clock (latencies, budgets over time, Retry-After cool-downs)
stays the real one, fixed when ``gateway.routing`` is imported: these tests
rely only on what does not move with it (the initial hedge delay, token
counts, backoffs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, InvokeResult, errors
from tests._virtual_time import VirtualClock, virtual_time
from tests.gateway._scripted import Held, ScriptedTransport

ROUTE = "bid"
MS = 0.001
# The initial hedge delay holds for a route's first 100 answers (5 / max_extra_load).
HEDGE = {"enabled": True, "initial_delay_ms": 200, "max_extra_load": 0.05}
NO_BACKOFF = {"max_attempts": 2, "backoff_base_ms": 0, "backoff_max_ms": 0}


@contextlib.asynccontextmanager
async def scripted_gateway(
    transport: ScriptedTransport, *, targets: tuple[str, ...] = ("a", "b"), **route: Any
) -> AsyncIterator[Gateway]:
    settings = {"retry": NO_BACKOFF, **route}
    gateway = Gateway(
        "us-east-1",
        endpoint_url="http://scripted.invalid",
        credentials=("AKIDSCRIPTED", "scripted-secret"),
        transport=transport,
        routes={ROUTE: {"targets": [{"endpoint": name} for name in targets], **settings}},
    )
    async with gateway:
        yield gateway


def _invoke(gateway: Gateway, timeout: float = 5.0) -> asyncio.Task[InvokeResult]:
    return asyncio.ensure_future(gateway.invoke(ROUTE, b"row", timeout=timeout))


def _held(transport: ScriptedTransport) -> dict[str, Held]:
    return {endpoint: transport.on(endpoint).hold() for endpoint in ("a", "b")}


def _endpoints(transport: ScriptedTransport) -> list[str]:
    return [sent.endpoint for sent in transport.sent]


def _no_call_tasks() -> bool:
    current = asyncio.current_task()
    return all(task is current or task.done() for task in asyncio.all_tasks())


# -- hedging ---------------------------------------------------------------------------------


@virtual_time
async def test_the_hedge_fires_at_the_hedge_delay_to_the_other_target(
    clock: VirtualClock,
) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + 0.2 - MS)
        assert len(transport.sent) == 1
        await clock.advance_to(started + 0.2)
        primary, hedge = _endpoints(transport)
        assert hedge != primary
        assert held[hedge].started.is_set()
        held[primary].release(b"primary")
        assert (await call).body == b"primary"


@virtual_time
async def test_a_hedge_that_answers_first_wins_and_the_primary_is_cancelled(
    clock: VirtualClock,
) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + 0.3)
        primary, hedge = _endpoints(transport)
        held[hedge].release(b"from the hedge")
        result = await call
        assert clock.now() == started + 0.3  # answered the moment the hedge did
        assert (result.body, result.hedged, result.attempts) == (b"from the hedge", True, 2)
        assert result.target == hedge
        assert held[primary].cancelled.is_set()
        await clock.idle()
        assert _no_call_tasks()


@virtual_time
async def test_a_primary_that_answers_after_the_hedge_fired_still_wins(
    clock: VirtualClock,
) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + 0.25)
        primary, hedge = _endpoints(transport)
        held[primary].release(b"from the primary")
        result = await call
        assert (result.body, result.hedged, result.target) == (b"from the primary", True, primary)
        await clock.idle()  # the hedge's task is told on the next loop turn
        assert held[hedge].cancelled.is_set()
        assert _no_call_tasks()


@virtual_time
async def test_no_hedge_for_a_primary_that_answers_before_the_delay(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + 0.2 - MS)
        [primary] = _endpoints(transport)
        held[primary].release(b"in time")
        result = await call
        assert (result.body, result.hedged, result.attempts) == (b"in time", False, 1)
        await clock.advance(1.0)  # the hedge timer went with the answer
        assert len(transport.sent) == 1


@virtual_time
async def test_a_fast_hedge_failure_waits_for_the_primary(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + 0.25)
        primary, hedge = _endpoints(transport)
        held[hedge].fail(errors.ConnectError("refused"))
        await clock.advance(0.1)
        assert not call.done()  # a failure never wins while another attempt runs
        held[primary].release(b"from the primary")
        result = await call
        assert (result.body, result.target) == (b"from the primary", primary)
        assert len(transport.sent) == 2  # no retry: the primary answered


@virtual_time
async def test_no_hedge_whose_delay_would_end_past_the_deadline(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        _held(transport)
        started = clock.now()
        call = _invoke(gateway, timeout=0.15)
        await clock.advance_to(started + 0.15 - MS)
        assert not call.done()
        await clock.advance_to(started + 0.15)
        assert isinstance(call.exception(), errors.DeadlineExceeded)
        await clock.advance(1.0)
        assert len(transport.sent) == 1


@virtual_time
async def test_the_deadline_ends_a_primary_and_its_hedge_together(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport, hedge=HEDGE) as gateway:
        held = _held(transport)
        started = clock.now()
        call = _invoke(gateway, timeout=0.5)
        await clock.advance_to(started + 0.5 - MS)
        assert len(transport.sent) == 2
        assert not call.done()
        await clock.advance_to(started + 0.5)
        assert isinstance(call.exception(), errors.DeadlineExceeded)
        assert all(attempt.started.is_set() for attempt in held.values())
        await clock.idle()
        assert _no_call_tasks()
        for target in gateway.route(ROUTE).targets:
            assert target.outstanding == 0


@virtual_time
async def test_hedges_stop_when_the_hedge_budget_is_spent(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    # A budget of one hedge (200 calls' deposits at 0.5 %), spent by the first slow call.
    tight = {**HEDGE, "max_extra_load": 0.005}
    async with scripted_gateway(transport, hedge=tight) as gateway:
        first_primary = transport.on_any().hold()
        transport.on_any().answer(b"hedge")
        first = _invoke(gateway)
        await clock.advance(0.2)
        assert ((await first).body, (await first).hedged) == (b"hedge", True)
        assert first_primary.cancelled.is_set()
        second_primary = transport.on_any().hold()
        second = _invoke(gateway)
        await clock.advance(1.0)
        assert len(transport.sent) == 3  # no hedge this time
        second_primary.release(b"slow")
        assert ((await second).body, (await second).hedged) == (b"slow", False)


# -- retries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "waits"),
    [
        pytest.param("ServiceUnavailable", 503, 0.1, id="the-backoff"),
        pytest.param("ThrottlingException", 429, 0.2, id="twice-the-backoff-when-throttled"),
    ],
)
@virtual_time
async def test_a_retry_goes_elsewhere_after_its_backoff(
    code: str, status: int, waits: float, clock: VirtualClock
) -> None:
    transport = ScriptedTransport()
    # Base and ceiling equal: the jittered backoff is exactly 100 ms.
    retry = {"max_attempts": 2, "backoff_base_ms": 100, "backoff_max_ms": 100}
    async with scripted_gateway(transport, retry=retry) as gateway:
        transport.on_any().error(status, code)
        started = clock.now()
        call = _invoke(gateway)
        await clock.advance_to(started + waits - MS)
        assert len(transport.sent) == 1
        await clock.advance_to(started + waits)
        result = await call
        assert clock.now() == started + waits
        assert (result.body, result.attempts) == (b"row", 2)
        first, second = _endpoints(transport)
        assert second != first


@virtual_time
async def test_no_retry_whose_backoff_would_end_past_the_deadline(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    retry = {"max_attempts": 3, "backoff_base_ms": 500, "backoff_max_ms": 500}
    async with scripted_gateway(transport, retry=retry) as gateway:
        transport.on_any().error(503, "ServiceUnavailable")
        started = clock.now()
        with pytest.raises(errors.ServiceUnavailable) as caught:
            await gateway.invoke(ROUTE, b"row", timeout=0.2)
        assert clock.now() == started  # told at once, not after waiting out the deadline
        assert caught.value.attempts == 1
        assert len(transport.sent) == 1


@virtual_time
async def test_a_retry_still_running_at_the_deadline_ends_with_it(clock: VirtualClock) -> None:
    transport = ScriptedTransport()
    async with scripted_gateway(transport) as gateway:
        transport.on_any().error(503, "ServiceUnavailable")
        retry = transport.on_any().hold()
        started = clock.now()
        call = _invoke(gateway, timeout=0.3)
        await clock.advance_to(started + 0.3 - MS)
        assert retry.started.is_set()
        assert not call.done()
        await clock.advance_to(started + 0.3)
        error = call.exception()
        assert isinstance(error, errors.DeadlineExceeded)
        assert error.attempts == 2
        await clock.advance(1.0)
        assert len(transport.sent) == 2  # nothing after the deadline


@virtual_time
async def test_retries_stay_within_the_retry_budget() -> None:
    transport = ScriptedTransport()
    # Each call deposits half a token and a retry spends one: every other call may retry.
    budget = {**NO_BACKOFF, "budget_ratio": 0.5, "min_per_second": 0}
    async with scripted_gateway(transport, retry=budget) as gateway:
        outcomes = []
        for _ in range(6):
            transport.on_any().error(503, "ServiceUnavailable")
            try:
                result = await gateway.invoke(ROUTE, b"row")
                outcomes.append(f"retried:{result.attempts}")
            except errors.ServiceUnavailable as error:
                outcomes.append(f"failed:{error.attempts}")
        assert outcomes == ["failed:1", "retried:2"] * 3
        assert len(transport.sent) == 9
