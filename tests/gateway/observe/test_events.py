"""The instrumentation stream: events out of real calls (emulator over sockets),
the Prometheus hook built on it, and the rate-limited state-change log lines."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway
from gateway._invoke.credentials import CredentialSource
from gateway._observe.counting import OTHER, UNCONFIGURED
from gateway._observe.events import (
    AttemptFinished,
    CacheLookup,
    CallFinished,
    CallStarted,
    CircuitClosed,
    CircuitOpened,
    CredentialsRefreshFailed,
    Event,
    HedgeFired,
    HedgeLost,
    RetryScheduled,
    TargetEjected,
    TargetReadmitted,
)
from gateway._observe.hooks import Instrumentation
from gateway._observe.logs import RateLimiter, StateLog
from gateway._observe.prometheus import GatewayMetrics
from gateway.emulator import Emulator, EmulatorConfig
from gateway.routing import TargetHealth

FAST = {"latency": {"base_ms": 1.0}}


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = EmulatorConfig.from_dict({"seed": 7, "endpoints": {"a": FAST, "b": FAST}})
    async with Emulator(config) as emu:
        yield emu


def _gateway(emu: Emulator, routes: dict[str, Any] | None = None, **kwargs: Any) -> Gateway:
    return Gateway(
        "us-east-1", endpoint_url=emu.url, credentials=("AK", "SK"), routes=routes, **kwargs
    )


def _route(*targets: str, **settings: Any) -> dict[str, Any]:
    return {"targets": [{"endpoint": t} for t in targets], **settings}


async def test_a_plain_call_emits_start_one_won_primary_attempt_and_finish(
    emulator: Emulator,
) -> None:
    recorder = Recorder()
    async with _gateway(emulator, hooks=[recorder]) as gw:
        await gw.invoke("a", b"x", timeout=2)
    kinds = [type(e) for e in recorder.events]
    assert kinds == [CallStarted, AttemptFinished, CallFinished]
    attempt = recorder.of(AttemptFinished)[0]
    assert (attempt.route, attempt.endpoint, attempt.kind, attempt.outcome) == (
        "a",
        "a",
        "primary",
        "won",
    )
    assert attempt.duration_s > 0 and attempt.error_code is None
    finished = recorder.of(CallFinished)[0]
    assert (finished.endpoint, finished.attempts, finished.error_code) == ("a", 1, None)


class IdBlindRecorder(Recorder):
    """A hook that says it never reads CallFinished.request_id."""

    reads_request_id = False


async def test_call_finished_carries_the_request_id_for_any_hook_that_may_read_it(
    emulator: Emulator,
) -> None:
    recorder, blind = Recorder(), IdBlindRecorder()
    async with _gateway(emulator, hooks=[recorder]) as gw:
        answer = await gw.invoke("a", b"x", timeout=2)
        gw.enable_metrics()  # beside another hook: the id is still read
        await gw.invoke("a", b"x", timeout=2)
    assert answer.request_id
    ids = [event.request_id for event in recorder.of(CallFinished)]
    assert len(ids) == 2 and all(ids) and ids[0] == answer.request_id
    async with _gateway(emulator, hooks=[blind]) as gw:
        await gw.invoke("a", b"x", timeout=2)
    # Alone, a hook that never reads it spares the call finding it.
    assert [event.request_id for event in blind.of(CallFinished)] == [None]
    beside = IdBlindRecorder()
    async with _gateway(emulator, hooks=[beside]) as gw:
        gw.enable_metrics()  # the metrics hook reads none either: still spared
        await gw.invoke("a", b"x", timeout=2)
    assert [event.request_id for event in beside.of(CallFinished)] == [None]


async def test_without_a_hook_nothing_is_emitted_and_metrics_start_when_asked(
    emulator: Emulator,
) -> None:
    async with _gateway(emulator) as gw:
        assert gw.hooks == ()
        assert gw._invoker.emit is None  # the call path's one None check
        await gw.invoke("a", b"x", timeout=2)
        metrics = gw.enable_metrics()
        assert gw.hooks == (metrics,)
        await gw.invoke("a", b"x", timeout=2)
        gw.remove_hook(metrics)
        assert gw.hooks == () and gw._invoker.emit is None  # free again
        await gw.invoke("a", b"x", timeout=2)
    # Only the call made while it listened ("a" is a bare name, not a configured route).
    assert metrics.calls == {UNCONFIGURED: 1}
    assert metrics.target("a", "a").attempts == {("primary", "won"): 1}


async def test_a_failed_call_reports_its_code_and_a_retry(emulator: Emulator) -> None:
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = _route(
        "a",
        "b",
        retry={"max_attempts": 3, "budget_ratio": 1.0, "min_per_second": 100},
        ejection={"max_ejected_share": 0.0},
    )
    recorder = Recorder()
    async with _gateway(emulator, {"pair": route}, hooks=[recorder]) as gw:
        metrics = gw.enable_metrics()
        for _ in range(20):
            await gw.invoke("pair", b"x", timeout=2)
    failed = [a for a in recorder.of(AttemptFinished) if a.outcome == "failed"]
    assert failed and {a.target for a in failed} == {"b"}
    assert {a.error_code for a in failed} == {"InternalFailure"}
    retries = recorder.of(RetryScheduled)
    assert retries and all(r.error_code == "InternalFailure" for r in retries)
    retried = [a for a in recorder.of(AttemptFinished) if a.kind == "retry"]
    assert retried and all(a.outcome == "won" and a.target == "a" for a in retried)
    assert metrics.retries["pair"] == len(retried)
    assert metrics.target("pair", "b").errors == {"InternalFailure": len(failed)}


async def test_a_hedge_race_reports_winner_and_loser(emulator: Emulator) -> None:
    for name in ("a", "b"):
        emulator.set_faults(name, stall_rate=0.05, stall_ms=200)
    route = _route("a", "b", hedge={"enabled": True, "max_extra_load": 0.25, "min_delay_ms": 2})
    recorder = Recorder()
    async with _gateway(emulator, {"pair": route}, hooks=[recorder]) as gw:
        metrics = gw.enable_metrics()
        for _ in range(40):
            await asyncio.gather(*(gw.invoke("pair", b"x", timeout=3) for _ in range(4)))
        await asyncio.sleep(0.3)  # losers still unwinding
    fired = recorder.of(HedgeFired)
    assert fired, "no hedge fired although some answers stall"
    outcomes = Counter((a.kind, a.outcome) for a in recorder.of(AttemptFinished))
    # Each fired hedge ends as won (the primary then lost) or lost (cancelled).
    assert outcomes[("hedge", "won")] > 0
    assert outcomes[("primary", "lost")] == outcomes[("hedge", "won")]
    assert outcomes[("hedge", "lost")] == len(recorder.of(HedgeLost))
    assert outcomes[("hedge", "won")] + outcomes[("hedge", "lost")] <= len(fired)
    assert metrics.hedges["pair"] == len(fired)
    assert metrics.hedge_wins["pair"] == outcomes[("hedge", "won")]


async def test_unconfigured_names_fold_into_one_label_and_spend_nothing(
    emulator: Emulator,
) -> None:
    async with _gateway(emulator, routes={"pair": _route("a", "b")}) as gw:
        metrics = gw.enable_metrics(label_cap=3)
        for index in range(12):
            with pytest.raises(Exception):  # noqa: B017 - any error: the name does not exist
                await gw.invoke(f"bogus-{index}", b"x", timeout=2)
        # The configured route keeps its name after any number of bogus ones.
        await gw.invoke("pair", b"x", timeout=2)
    assert metrics.calls == {UNCONFIGURED: 12, "pair": 1}
    pairs = set(metrics.targets)
    assert (UNCONFIGURED, UNCONFIGURED) in pairs
    assert pairs - {(UNCONFIGURED, UNCONFIGURED)} <= {("pair", "a"), ("pair", "b")}


def test_unconfigured_pairs_are_remembered_within_a_bound_of_their_own() -> None:
    """A bare endpoint name is not folded again on every attempt, and no number of junk
    names keeps a configured pair from being remembered (or grows the memo unbounded)."""
    metrics = GatewayMetrics(label_cap=2, routes={"pair": ["a", "b"]})

    def attempt(route: str, target: str) -> None:
        metrics(AttemptFinished(route, target, target, "primary", "won", 0.01, None))

    for index in range(50):
        attempt(f"junk-{index}", "t")
    attempt("bare", "bare")
    attempt("pair", "a")
    attempt("pair", "a")
    remembered = metrics._by_name
    assert remembered[("pair", "a")] is metrics.targets[("pair", "a")]
    assert ("bare", "bare") not in remembered  # past the unconfigured bound: folded each time
    assert len(remembered) == 4 * 2 + 1
    assert metrics.targets[(UNCONFIGURED, UNCONFIGURED)].attempts[("primary", "won")] == 51
    assert metrics.targets[("pair", "a")].attempts[("primary", "won")] == 2


async def test_without_configured_routes_labels_beyond_the_cap_fold_into_other(
    emulator: Emulator,
) -> None:
    async with _gateway(emulator) as gw:
        metrics = GatewayMetrics(label_cap=3)  # no list of routes: any name, capped
        gw.add_hook(metrics)
        # Unknown endpoint names: each is a default route of its own.
        for index in range(12):
            with pytest.raises(Exception):  # noqa: B017 - any error: the name does not exist
                await gw.invoke(f"bogus-{index}", b"x", timeout=2)
    routes = {route for route, _ in metrics.targets}
    assert len(routes) <= 4 and OTHER in routes
    assert set(metrics.calls) == routes
    assert len(metrics.targets) <= 2 * 3 + 1
    assert sum(metrics.calls.values()) == 12  # folded, never dropped


async def test_ejection_and_readmission_are_events_and_warning_lines(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = _route(
        "a",
        "b",
        # Ejected long enough that a loaded machine's slow first loop cannot outlast it
        # (a readmission and a second ejection in it would be two events).
        ejection={"consecutive_failures": 2, "base_ejection_s": 2.0, "jitter": 0.0},
        retry={"max_attempts": 3, "budget_ratio": 0.5, "min_per_second": 50},
    )
    recorder = Recorder()
    caplog.set_level(logging.WARNING, logger="gateway.state")
    async with _gateway(emulator, {"pair": route}, hooks=[recorder]) as gw:
        metrics = gw.enable_metrics()
        b_state = next(t for t in gw.route("pair").targets if t.key.startswith("b"))
        for _ in range(10):
            await asyncio.gather(*(gw.invoke("pair", b"x", timeout=2) for _ in range(8)))
        assert b_state.state is TargetHealth.EJECTED
        emulator.restore("b")
        await asyncio.sleep(2.2)
        for _ in range(10):
            await asyncio.gather(*(gw.invoke("pair", b"x", timeout=2) for _ in range(8)))
        assert b_state.state is TargetHealth.HEALTHY
    (ejected,) = recorder.of(TargetEjected)
    assert (ejected.route, ejected.target, ejected.ejections) == ("pair", b_state.key, 1)
    assert 0 < ejected.duration_s <= 2.0
    (readmitted,) = recorder.of(TargetReadmitted)
    assert readmitted.target == b_state.key
    assert metrics.ejections == {("pair", b_state.key): 1}
    lines = [(r.getMessage(), r.levelno, getattr(r, "target", None)) for r in caplog.records]
    assert ("target ejected", logging.WARNING, b_state.key) in lines
    assert ("target re-admitted", logging.WARNING, b_state.key) in lines


def test_state_lines_are_rate_limited_per_subject(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = StateLog(limiter=RateLimiter(10.0, clock=lambda: now[0]))
    caplog.set_level(logging.WARNING, logger="gateway.state")
    for flap in range(50):  # a flapping target
        log(TargetEjected("r", "t1", 1.0, flap))
        log(TargetReadmitted("r", "t1"))
    log(TargetEjected("r", "t2", 1.0, 1))  # another subject is not held back
    assert [(r.getMessage(), getattr(r, "target", None)) for r in caplog.records] == [
        ("target ejected", "t1"),
        ("target re-admitted", "t1"),
        ("target ejected", "t2"),
    ]
    now[0] = 11.0
    log(TargetEjected("r", "t1", 1.0, 51))
    last = caplog.records[-1]
    assert last.getMessage() == "target ejected"
    assert last.suppressed == 49  # type: ignore[attr-defined]


def test_redis_and_credential_lines(caplog: pytest.LogCaptureFixture) -> None:
    log = StateLog()
    caplog.set_level(logging.WARNING, logger="gateway.state")
    log(CircuitOpened("redis"))
    log(CredentialsRefreshFailed("NoCredentialsError"))
    log(CacheLookup("r", "near"))  # not a state change: no line
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "Redis lost: cache circuit open, the Redis tier is skipped",
        "AWS credentials refresh failed",
    ]
    assert caplog.records[1].error == "NoCredentialsError"  # type: ignore[attr-defined]


async def test_a_dead_redis_logs_redis_lost_once_at_start(
    emulator: Emulator, caplog: pytest.LogCaptureFixture, unused_tcp_port: int
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.state")
    recorder = Recorder()
    cache = {"redis_url": f"redis://127.0.0.1:{unused_tcp_port}/0", "circuit_reset_s": 30}
    async with _gateway(emulator, cache=cache, hooks=[recorder]) as gw:
        await gw.invoke("a", b"x", timeout=2)
    assert recorder.of(CircuitOpened) == [CircuitOpened("redis")]
    assert not recorder.of(CircuitClosed)
    assert [r.getMessage() for r in caplog.records if r.name == "gateway.state"] == [
        "Redis lost: cache circuit open, the Redis tier is skipped"
    ]
    assert recorder.of(CacheLookup) == [CacheLookup("a", "miss")]


async def test_credential_refreshes_are_streamed_without_the_secret() -> None:
    recorder = Recorder()
    source = CredentialSource(_failing_fetch)
    source.observer = recorder
    with pytest.raises(Exception):  # noqa: B017 - start() reports the failure its own way
        await source.start()
    await source.aclose()
    assert recorder.events == [CredentialsRefreshFailed("RuntimeError")]


def _failing_fetch() -> Any:
    raise RuntimeError("secret-value-must-not-travel")


def test_a_broken_hook_never_breaks_the_stream(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()

    def broken(event: Event) -> None:
        raise ValueError("bug in a hook")

    instrumentation = Instrumentation([broken, recorder])
    assert instrumentation.emit is not None
    for _ in range(3):
        instrumentation.emit(CacheLookup("r", "near"))
    assert len(recorder.events) == 3
    assert len([r for r in caplog.records if "hook" in r.getMessage()]) == 1


def test_metrics_hook_counts_cache_sources() -> None:
    metrics = GatewayMetrics()
    for source in ("near", "near", "redis", "miss"):
        metrics(CacheLookup("r", source))
    assert metrics.cache_lookups == {"near": 2, "redis": 1, "miss": 1}


@pytest.mark.parametrize(
    "retry",
    [
        {"max_attempts": 1},
        {"max_attempts": 2, "budget_ratio": 1.0, "min_per_second": 100},
        # A budget that runs dry: most failures get no retry at all.
        {"max_attempts": 3, "budget_ratio": 0.01, "min_per_second": 1},
    ],
    ids=["one-attempt", "two-attempts", "budget"],
)
async def test_retry_scheduled_only_for_retries_that_are_sent(
    emulator: Emulator, retry: dict[str, Any]
) -> None:
    """One RetryScheduled per retry attempt: none when max_attempts, the budget or
    the deadline says no (tenacity runs ``wait`` before ``stop``)."""
    emulator.set_faults("a", error_rates={"InternalFailure": 1.0})
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = _route("a", "b", retry=retry, ejection={"max_ejected_share": 0.0})
    recorder = Recorder()
    async with _gateway(emulator, {"pair": route}, hooks=[recorder]) as gw:
        for _ in range(40):
            with pytest.raises(Exception):  # noqa: B017 - both targets fail
                await gw.invoke("pair", b"x", timeout=2)
    sent = [a for a in recorder.of(AttemptFinished) if a.kind == "retry"]
    scheduled = recorder.of(RetryScheduled)
    assert len(scheduled) == len(sent)
    if retry["max_attempts"] == 1:
        assert scheduled == []
    else:
        assert sent and all(r.attempt < retry["max_attempts"] for r in scheduled)


def test_enable_metrics_defaults_to_the_metrics_label_cap() -> None:
    """The default is written as a literal (so the compiled build can show it): the same."""
    import inspect

    from gateway._observe.counting import DEFAULT_LABEL_CAP

    default = inspect.signature(Gateway.enable_metrics).parameters["label_cap"].default
    assert default == DEFAULT_LABEL_CAP
