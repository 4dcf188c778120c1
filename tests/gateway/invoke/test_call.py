"""The call pipeline on a scripted backend: attempts, retries, hedges and deadlines.

Deterministic: the scripted transport answers, fails or holds each attempt on
cue, so every test decides the order of events itself. The end-to-end runs
over sockets live in test_routing_integration.py and tests/reliability.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, InvokeResult, errors
from gateway._invoke.call import (
    _HEDGE_WON,
    _HEDGE_WON_SAME_TARGET,
    _PRIMARY_WON,
    about_target,
    attempt_outcome,
    cancelled_outcome,
    outcome_of,
)
from gateway._observe.events import HEDGE, LOST, PRIMARY
from gateway.routing import Outcome
from tests.gateway._scripted import Held, ScriptedTransport

ROUTE = "bid"


def _route(**settings: Any) -> dict[str, Any]:
    return {
        ROUTE: {
            "targets": [{"endpoint": "a"}, {"endpoint": "b"}],
            "retry": {"max_attempts": 2, "backoff_base_ms": 0, "backoff_max_ms": 0},
            **settings,
        }
    }


@pytest.fixture
def transport() -> ScriptedTransport:
    return ScriptedTransport()


async def _gateway(transport: ScriptedTransport, **settings: Any) -> AsyncIterator[Gateway]:
    gateway = Gateway(
        "us-east-1",
        endpoint_url="http://scripted.invalid",
        credentials=("AKIDSCRIPTED", "scripted-secret"),
        transport=transport,
        routes=_route(**settings),
    )
    async with gateway:
        yield gateway


@pytest.fixture
async def gw(transport: ScriptedTransport) -> AsyncIterator[Gateway]:
    async for gateway in _gateway(transport):
        yield gateway


@pytest.fixture
async def hedging_gw(transport: ScriptedTransport) -> AsyncIterator[Gateway]:
    # A fixed quantile (the median) rather than the tail estimate, which would
    # find no tail in these latencies and not hedge at all.
    hedge = {"enabled": True, "min_delay_ms": 1, "max_extra_load": 0.5, "quantile": 0.5}
    async for gateway in _gateway(transport, hedge=hedge):
        # Sub-millisecond latencies seen before the first call: the hedge
        # delay starts at its 1 ms floor. A few answered calls fill the hedge
        # budget (each primary deposits max_extra_load of a token).
        route = gateway.route(ROUTE)
        for _ in range(200):
            route.observe_superseded(time.monotonic() - 0.0002)
        for _ in range(4):
            await gateway.invoke(ROUTE, b"warm-up")
        transport.sent.clear()
        yield gateway


def _other(endpoint: str) -> str:
    return "b" if endpoint == "a" else "a"


async def test_a_plain_call_is_one_signed_attempt(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    result = await gw.invoke(ROUTE, b"row", content_type="text/csv")
    assert result.body == b"row"
    assert (result.attempts, result.hedged) == (1, False)
    [sent] = transport.sent
    assert sent.path == f"/endpoints/{sent.endpoint}/invocations"
    assert sent.headers["content-type"] == "text/csv"
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDSCRIPTED/")


async def test_a_retryable_failure_is_retried_on_the_other_target(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    transport.on_any().error(503, "ServiceUnavailable")
    result = await gw.invoke(ROUTE, b"row")
    assert result.attempts == 2
    first, second = (sent.endpoint for sent in transport.sent)
    assert second == _other(first)
    assert result.body == b"row"


async def test_a_non_retryable_failure_is_raised_after_one_attempt(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    transport.on_any().error(400, "ValidationError")
    with pytest.raises(errors.ValidationError) as caught:
        await gw.invoke(ROUTE, b"row")
    assert not caught.value.retryable
    assert len(transport.sent) == 1


async def test_retries_stop_at_max_attempts_with_the_last_error(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    transport.on_any().error(503, "ServiceUnavailable").error(503, "ServiceUnavailable")
    with pytest.raises(errors.ServiceUnavailable):
        await gw.invoke(ROUTE, b"row")
    assert len(transport.sent) == 2


async def test_a_transport_error_is_retried_and_counts_against_the_target(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    transport.on_any().fail(errors.ConnectError("refused"))
    result = await gw.invoke(ROUTE, b"row")
    assert result.attempts == 2
    failed = transport.sent[0].endpoint
    state = next(t for t in gw.route(ROUTE).targets if t.key.endswith(failed))
    assert state.consecutive_failures == 1


async def test_the_deadline_ends_a_held_attempt(gw: Gateway, transport: ScriptedTransport) -> None:
    held = [transport.on("a").hold(), transport.on("b").hold()]
    with pytest.raises(errors.DeadlineExceeded):
        await gw.invoke(ROUTE, b"row", timeout=0.05)
    assert len(transport.sent) == 1  # no retry past the deadline
    assert sum(h.started.is_set() for h in held) == 1


async def _until_started(held: Held) -> None:
    await asyncio.wait_for(held.started.wait(), 5)


class _Race:
    """A hedged call whose primary and hedge are both held, once both were sent."""

    def __init__(self, call: asyncio.Future[InvokeResult], held: dict[str, Held], primary: str):
        self.call = call
        self.primary = held[primary]
        self.hedge = held[_other(primary)]


async def _race(gw: Gateway, transport: ScriptedTransport) -> _Race:
    held = {endpoint: transport.on(endpoint).hold() for endpoint in ("a", "b")}
    call = asyncio.ensure_future(gw.invoke(ROUTE, b"row"))
    for attempt in held.values():
        await _until_started(attempt)
    return _Race(call, held, transport.sent[0].endpoint)


async def test_the_scripted_backend_can_see_a_cancellation(transport: ScriptedTransport) -> None:
    held = transport.on("a").hold()
    waiting = asyncio.ensure_future(held.wait(time.monotonic() + 5))
    await _until_started(held)
    waiting.cancel()
    await asyncio.wait_for(held.cancelled.wait(), 5)


async def test_a_hedge_that_answers_first_wins_and_the_primary_is_cancelled(
    hedging_gw: Gateway, transport: ScriptedTransport
) -> None:
    race = await _race(hedging_gw, transport)
    race.hedge.release(b"from the hedge")
    result = await race.call
    assert (result.body, result.hedged, result.attempts) == (b"from the hedge", True, 2)
    await asyncio.wait_for(race.primary.cancelled.wait(), 5)


async def test_a_primary_that_answers_first_wins_and_the_hedge_is_cancelled(
    hedging_gw: Gateway, transport: ScriptedTransport
) -> None:
    race = await _race(hedging_gw, transport)
    race.primary.release(b"from the primary")
    result = await race.call
    assert (result.body, result.hedged) == (b"from the primary", True)
    await asyncio.wait_for(race.hedge.cancelled.wait(), 5)


async def test_a_fast_primary_failure_waits_for_the_hedge_in_flight(
    hedging_gw: Gateway, transport: ScriptedTransport
) -> None:
    race = await _race(hedging_gw, transport)
    race.primary.fail(errors.ConnectError("reset"))
    await asyncio.sleep(0)
    assert not race.call.done()  # a failure never wins while another attempt runs
    race.hedge.release(b"from the hedge")
    result = await race.call
    assert result.body == b"from the hedge"
    assert len(transport.sent) == 2  # no retry: the hedge answered


async def test_no_hedge_when_the_primary_answers_at_once(
    hedging_gw: Gateway, transport: ScriptedTransport
) -> None:
    for _ in range(20):
        result = await hedging_gw.invoke(ROUTE, b"row")
        assert not result.hedged
    assert len(transport.sent) == 20


# -- what a failed or cancelled attempt costs its target ------------------------------


@pytest.mark.parametrize(
    "error",
    [
        errors.PoolTimeout("no pooled connection became free in time"),
        errors.DeadlineExceeded("the deadline passed waiting for a connection", sent=False),
    ],
)
def test_an_attempt_that_never_left_the_pool_is_charged_to_no_target(error: Exception) -> None:
    assert outcome_of(error) is Outcome.CANCELLED


def test_a_deadline_passing_after_the_request_left_is_the_targets_failure() -> None:
    assert outcome_of(errors.DeadlineExceeded("the call's deadline passed")) is Outcome.FAILURE


def test_a_primary_that_lost_to_its_hedge_is_charged_to_its_target() -> None:
    later = time.monotonic() + 60
    lost = asyncio.CancelledError(_HEDGE_WON)
    assert cancelled_outcome(lost, PRIMARY, later) is Outcome.FAILURE
    # The hedge that lost to its primary, and a caller giving up early: nobody's failure.
    assert cancelled_outcome(asyncio.CancelledError(_PRIMARY_WON), HEDGE, later) is (
        Outcome.CANCELLED
    )
    assert cancelled_outcome(asyncio.CancelledError(), PRIMARY, later) is Outcome.CANCELLED
    # A hedge on the primary's own target (none other left) says nothing about it.
    same_target = asyncio.CancelledError(_HEDGE_WON_SAME_TARGET)
    assert cancelled_outcome(same_target, PRIMARY, later) is Outcome.CANCELLED
    assert attempt_outcome(same_target) == LOST


def test_an_attempt_cancelled_at_its_deadline_is_charged_to_its_target() -> None:
    past = time.monotonic() - 0.001
    assert cancelled_outcome(asyncio.CancelledError(), PRIMARY, past) is Outcome.FAILURE
    assert cancelled_outcome(asyncio.CancelledError(), HEDGE, past) is Outcome.FAILURE


# -- the caller's mistake or the target's state ---------------------------------------

_MISSING = "Endpoint a of account 123456789012 not found."


@pytest.mark.parametrize(
    "error",
    [
        errors.ValidationError(_MISSING, status=400),
        errors.ValidationError("Inference router r of account 123456789012 not found."),
        errors.ValidationError("Routing target t not found in inference router r."),
        errors.ModelError("Received server error (500) from primary", original_status_code=500),
        errors.ModelError("the model container failed", status=424),
        errors.ModelNotReady("Model is not ready yet."),
        errors.SignatureError("User: x is not authorized", code="AccessDeniedException"),
        errors.AccessDenied("not authorized to invoke the inference router"),
        errors.AccessDenied(
            "Global Inference Gateway: the caller is not authorized",
            origin="Global Inference Gateway",
        ),
        errors.ResourceNotFound(
            "Global Inference Gateway: gateway g not found", origin="Global Inference Gateway"
        ),
    ],
)
def test_an_answer_about_the_target_counts_against_it(error: errors.ServiceError) -> None:
    assert about_target(error)
    assert outcome_of(error) is Outcome.FAILURE


@pytest.mark.parametrize(
    "error",
    [
        errors.ValidationError("1 validation error detected: Value at 'body'"),
        errors.ValidationError("Variant blue not found for endpoint a."),
        errors.ModelError("Received client error (400) from primary", original_status_code=400),
        errors.InvalidRequest("a header value with a newline"),
        errors.PayloadTooLarge("the body is over 6 MB"),
        errors.SignatureError("The request signature we calculated does not match"),
        errors.AccessDenied(
            "inference gateway: 401 invalid customer identity token", origin="inference gateway"
        ),
        errors.ResourceNotFound(
            "inference gateway: 404 model not found", origin="inference gateway"
        ),
    ],
)
def test_the_callers_mistake_counts_against_no_target(error: errors.GatewayError) -> None:
    if isinstance(error, errors.ServiceError):
        assert not about_target(error)
    assert outcome_of(error) is Outcome.NEUTRAL


async def test_an_endpoint_not_found_is_retried_on_the_other_target(
    gw: Gateway, transport: ScriptedTransport
) -> None:
    transport.on_any().error(400, "ValidationError", _MISSING)
    result = await gw.invoke(ROUTE, b"row")
    assert result.attempts == 2
    first, second = (sent.endpoint for sent in transport.sent)
    assert second == _other(first)
    state = next(t for t in gw.route(ROUTE).targets if t.key == first)
    assert state.consecutive_failures == 1


async def test_an_answer_about_the_target_is_never_retried_on_that_target(
    transport: ScriptedTransport,
) -> None:
    transport.on_any().error(424, "ModelError", "the model crashed")
    async with Gateway(
        "us-east-1",
        endpoint_url="http://scripted.invalid",
        credentials=("AKIDSCRIPTED", "scripted-secret"),
        transport=transport,
    ) as gateway:
        # A bare endpoint name: a route of one target, nowhere else to go.
        with pytest.raises(errors.ModelError) as caught:
            await gateway.invoke("solo", b"row")
    assert caught.value.attempts == 1
    assert len(transport.sent) == 1


@pytest.mark.parametrize(
    "retry",
    [
        {"max_attempts": 1},
        {"max_attempts": 3, "budget_ratio": 0.0, "min_per_second": 0.0},
    ],
)
async def test_a_retry_elsewhere_spends_the_retry_limits(
    transport: ScriptedTransport, retry: dict[str, float]
) -> None:
    transport.on_any().error(400, "ValidationError", _MISSING)
    async for gateway in _gateway(transport, retry=retry):
        with pytest.raises(errors.ValidationError):
            await gateway.invoke(ROUTE, b"row")
    assert len(transport.sent) == 1


async def test_a_retry_elsewhere_never_outlives_the_deadline(
    transport: ScriptedTransport,
) -> None:
    transport.on_any().error(400, "ValidationError", _MISSING)
    slow_backoff = {"max_attempts": 3, "backoff_base_ms": 500, "backoff_max_ms": 500}
    async for gateway in _gateway(transport, retry=slow_backoff):
        started = time.monotonic()
        with pytest.raises(errors.ValidationError):
            await gateway.invoke(ROUTE, b"row", timeout=0.2)
        assert time.monotonic() - started < 0.2  # no wait for a retry that cannot fit
    assert len(transport.sent) == 1


async def test_a_retry_after_a_failed_hedge_goes_to_neither_target_it_tried(
    transport: ScriptedTransport,
) -> None:
    targets = [{"endpoint": name} for name in ("a", "b", "c")]
    hedge = {"enabled": True, "min_delay_ms": 1, "max_extra_load": 0.5, "quantile": 0.5}
    retry = {"max_attempts": 3, "backoff_base_ms": 0, "backoff_max_ms": 0}
    async for gateway in _gateway(transport, targets=targets, hedge=hedge, retry=retry):
        route = gateway.route(ROUTE)
        for _ in range(200):  # the hedge delay at its 1 ms floor, as in hedging_gw
            route.observe_superseded(time.monotonic() - 0.0002)
        for _ in range(6):
            await gateway.invoke(ROUTE, b"warm-up")
        transport.sent.clear()
        primary = transport.on_any().hold()
        hedge_attempt = transport.on_any().hold()
        call = asyncio.ensure_future(gateway.invoke(ROUTE, b"row"))
        await _until_started(primary)
        await _until_started(hedge_attempt)
        hedge_attempt.fail(errors.ValidationError(_MISSING, status=400))
        await asyncio.sleep(0)
        primary.fail(errors.ValidationError(_MISSING, status=400))
        result = await call
    assert len({sent.endpoint for sent in transport.sent}) == 3
    assert result.target == transport.sent[2].endpoint
