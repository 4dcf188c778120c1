"""Routes, balancing, ejection, MME affinity, hedging, retries and the deadline,
driven through ``Gateway.invoke`` against the emulator over real sockets."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from gateway.routing import TargetHealth
from tests.gateway.conftest import server_task

FAST = {"latency": {"base_ms": 1.0}}


def _emulator_config(**endpoints: dict[str, Any]) -> EmulatorConfig:
    return EmulatorConfig.from_dict({"seed": 11, "endpoints": endpoints})


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = _emulator_config(
        a=dict(FAST),
        b=dict(FAST),
        c=dict(FAST),
        d=dict(FAST),
        **{f"mme{i}": {"mme": {"allow_any": True, "cold_load_ms": 1}} for i in range(4)},
    )
    async with Emulator(config) as emu:
        yield emu


def _gateway(emu: Emulator, routes: dict[str, Any], **kwargs: Any) -> Gateway:
    return Gateway(
        "us-east-1", endpoint_url=emu.url, credentials=("AK", "SK"), routes=routes, **kwargs
    )


def _route(*targets: str, **settings: Any) -> dict[str, Any]:
    return {"targets": [{"endpoint": t} for t in targets], **settings}


async def test_a_route_spreads_calls_over_its_targets(emulator: Emulator) -> None:
    async with _gateway(emulator, {"pair": _route("a", "b")}) as gw:
        answered: Counter[str | None] = Counter()
        for _ in range(60):
            result = await gw.invoke("pair", b"x", content_type="text/plain", timeout=2)
            assert result.body == b"x"
            answered[result.target] += 1
    assert set(answered) == {"a", "b"}
    assert emulator.stats.count(endpoint="a") + emulator.stats.count(endpoint="b") == 60


async def test_a_name_without_a_route_goes_to_that_endpoint(emulator: Emulator) -> None:
    async with _gateway(emulator, {}) as gw:
        result = await gw.invoke("c", b"plain", timeout=2)
    assert result.target == "c"
    assert emulator.stats.count(endpoint="c") == 1


async def test_a_failing_target_is_ejected_then_readmitted(emulator: Emulator) -> None:
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = _route(
        "a",
        "b",
        ejection={"consecutive_failures": 3, "base_ejection_s": 0.3, "jitter": 0.0},
        retry={"max_attempts": 3, "budget_ratio": 0.5, "min_per_second": 50},
    )
    async with _gateway(emulator, {"pair": route}) as gw:
        # Concurrent callers keep a busy, so the balancer keeps trying b.
        for _ in range(10):
            batch = [gw.invoke("pair", b"x", timeout=2) for _ in range(8)]
            # Every call succeeds: failures on b are retried on a.
            assert {r.target for r in await asyncio.gather(*batch)} == {"a"}
        b_state = next(t for t in gw.route("pair").targets if t.key.startswith("b"))
        assert b_state.state is TargetHealth.EJECTED
        assert gw.route_health() == {"pair": True}
        calls_to_b = emulator.stats.count(endpoint="b")
        assert calls_to_b < 20  # ejected after 3 consecutive failures

        emulator.restore("b")
        await asyncio.sleep(0.45)  # past the ejection time: b is probed
        answered: Counter[str | None] = Counter()
        for _ in range(10):
            batch = [gw.invoke("pair", b"x", timeout=2) for _ in range(8)]
            answered.update(r.target for r in await asyncio.gather(*batch))
        assert answered["b"] > 0
        assert b_state.state is TargetHealth.HEALTHY


async def test_all_targets_failing_gives_a_clear_error_within_the_deadline(
    emulator: Emulator,
) -> None:
    for name in ("a", "b"):
        emulator.set_faults(name, error_rates={"ServiceUnavailable": 1.0})
    route = _route("a", "b", retry={"max_attempts": 3, "budget_ratio": 1.0, "min_per_second": 50})
    async with _gateway(emulator, {"pair": route}) as gw:
        started = time.monotonic()
        with pytest.raises(errors.ServiceUnavailable) as caught:
            await gw.invoke("pair", b"x", timeout=1.0)
        assert time.monotonic() - started < 1.0 + 1.0  # a hang check, not a benchmark
    assert caught.value.retryable
    # Three attempts: the first, then two retries spread over both targets.
    assert emulator.stats.count(endpoint="a") + emulator.stats.count(endpoint="b") == 3


async def test_the_callers_mistakes_are_not_retried(emulator: Emulator) -> None:
    emulator.set_faults("a", error_rates={"ValidationError": 1.0})
    emulator.set_faults("b", error_rates={"ValidationError": 1.0})
    route = _route("a", "b", retry={"max_attempts": 3, "budget_ratio": 1.0, "min_per_second": 50})
    async with _gateway(emulator, {"pair": route}) as gw:
        with pytest.raises(errors.ValidationError):
            await gw.invoke("pair", b"x", timeout=2)
        # Every target would refuse it: it counts against none.
        live = gw.route("pair")
        assert all(t.consecutive_failures == 0 and live.target_up(t) for t in live.targets)
    assert emulator.stats.count(endpoint="a") + emulator.stats.count(endpoint="b") == 1


async def test_model_not_ready_moves_the_call_to_another_target(emulator: Emulator) -> None:
    emulator.set_faults("a", error_rates={"ModelNotReadyException": 1.0})
    route = _route("a", "b", retry={"max_attempts": 2, "budget_ratio": 1.0, "min_per_second": 50})
    async with _gateway(emulator, {"pair": route}) as gw:
        for _ in range(20):
            assert (await gw.invoke("pair", b"x", timeout=2)).target == "b"
        a_state = next(t for t in gw.route("pair").targets if t.key.startswith("a"))
        # Not ready is its state: it counts against it, and the balancer avoids it.
        assert a_state.consecutive_failures >= 1
        assert emulator.stats.count(endpoint="a") < 5


async def test_retry_budget_holds_under_a_burst_of_failures(emulator: Emulator) -> None:
    emulator.set_faults("a", error_rates={"InternalFailure": 1.0})
    route = _route(
        "a",
        retry={"max_attempts": 3, "budget_ratio": 0.1, "min_per_second": 0.1},
        ejection={"max_ejected_share": 0.0},
    )
    async with _gateway(emulator, {"solo": route}) as gw:
        for _ in range(100):
            with pytest.raises(errors.InternalFailure):
                await gw.invoke("solo", b"x", timeout=2)
    upstream = emulator.stats.count(endpoint="a")
    # 100 first attempts, plus at most 10% of them as retries (and a token of reserve).
    assert 100 <= upstream <= 100 + 10 + 2


async def test_mme_models_stick_to_their_preferred_targets(emulator: Emulator) -> None:
    route = _route("mme0", "mme1", "mme2", "mme3", mme_preferred=2)
    models = [f"model-{i}.tar.gz" for i in range(24)]
    async with _gateway(emulator, {"mme": route}) as gw:
        live = gw.route("mme")
        seen: dict[str, set[str]] = {}
        for _ in range(3):
            for model in models:
                result = await gw.invoke("mme", b"x", target_model=model, timeout=2)
                seen.setdefault(model, set()).add(result.target or "")
        for model, targets in seen.items():
            preferred = {state.target.endpoint for state in live.preferred_targets(model)[:2]}
            assert targets <= preferred, model
    # Models spread over every endpoint instead of loading everywhere.
    loaded = {name: len(emulator.loaded_models(name)) for name in ("mme0", "mme1", "mme2", "mme3")}
    assert all(count > 0 for count in loaded.values())
    assert sum(loaded.values()) <= 2 * len(models)


async def test_a_slow_tail_is_hedged_away(emulator: Emulator) -> None:
    # Both targets stall now and then, so the balancer cannot simply avoid one.
    for name in ("a", "b"):
        emulator.set_faults(name, stall_rate=0.1, stall_ms=300)
    route = _route("a", "b", hedge={"enabled": True, "max_extra_load": 0.25, "min_delay_ms": 2})
    async with _gateway(emulator, {"pair": route}) as gw:
        gw.enable_metrics()
        results = []
        for _ in range(40):
            batch = [gw.invoke("pair", b"x", timeout=3) for _ in range(4)]
            results.extend(await asyncio.gather(*batch))
        metrics = gw.metrics
        assert all(t.outstanding == 0 for t in gw.route("pair").targets)
    assert all(r.body == b"x" for r in results)
    hedged = [r for r in results if r.hedged]
    assert hedged, "no hedge fired although a tenth of the answers stall"
    assert metrics.hedge_wins.get("pair", 0) > 0
    # The hedge budget: its ratio of the calls, plus the balance it starts with (its cap,
    # 200 calls' worth of deposits).
    assert metrics.hedges["pair"] <= 0.25 * len(results) + 0.25 * 200
    sent = emulator.stats.count(endpoint="a") + emulator.stats.count(endpoint="b")
    # A hedge cancelled before its request left never reaches the endpoint.
    assert len(results) <= sent <= len(results) + metrics.hedges["pair"]


async def test_the_deadline_bounds_the_call_and_leaves_nothing_running(
    emulator: Emulator,
) -> None:
    emulator.set_latency("a", base_ms=2000)
    async with _gateway(emulator, {}) as gw:
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded):
            await gw.invoke("a", b"x", timeout=0.1)
        assert time.monotonic() - started < 0.1 + 1.0  # a hang check
        assert _client_side(asyncio.all_tasks()) == {asyncio.current_task()}
        state = gw.route("a").targets[0]
        assert state.outstanding == 0


def _client_side(tasks: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    # The emulator runs in this loop too; its own tasks are not the call's.
    return {task for task in tasks if not server_task(task)}


async def test_cancelling_a_call_never_counts_against_the_target(emulator: Emulator) -> None:
    emulator.set_latency("a", base_ms=500)
    route = _route("a", ejection={"consecutive_failures": 1})
    async with _gateway(emulator, {"slow": route}) as gw:
        for _ in range(3):
            task = asyncio.ensure_future(gw.invoke("slow", b"x", timeout=5))
            await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        state = gw.route("slow").targets[0]
        assert state.state is TargetHealth.HEALTHY
        assert state.outstanding == 0


async def test_routes_come_from_the_config_file(emulator: Emulator, tmp_path: Any) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
region = "us-east-1"
endpoint_url = "{emulator.url}"

[credentials]
access_key_id = "AK"
secret_access_key = "SK"

[routes.bid-filter]
targets = [{{ endpoint = "c" }}, {{ endpoint = "d", weight = 2 }}]
timeout_ms = 500
retry = {{ max_attempts = 2, budget_ratio = 0.1, min_per_second = 5 }}
"""
    )
    async with Gateway.from_config(config) as gw:
        targets = {(await gw.invoke("bid-filter", b"x")).target for _ in range(30)}
        assert gw.route("bid-filter").timeout_s == 0.5
    assert targets == {"c", "d"}


async def test_a_bad_route_config_names_the_key(emulator: Emulator) -> None:
    with pytest.raises(errors.ConfigError, match=r"routes\.bad\.hedge\.max_extra_load"):
        _gateway(emulator, {"bad": _route("a", hedge={"max_extra_load": 3})})


async def test_active_health_checks_eject_and_readmit_without_traffic(
    emulator: Emulator,
) -> None:
    emulator.set_faults("b", error_rates={"InternalFailure": 1.0})
    route = _route(
        "a",
        "b",
        health_check={"enabled": True, "interval_s": 0.05, "body": "ping"},
        ejection={"consecutive_failures": 2, "base_ejection_s": 0.2, "jitter": 0.0},
    )
    async with _gateway(emulator, {"pair": route}) as gw:
        b_state = next(t for t in gw.route("pair").targets if t.key.startswith("b"))
        for _ in range(100):  # bounded wait: no call is made, only the checks run
            if b_state.state is TargetHealth.EJECTED:
                break
            await asyncio.sleep(0.02)
        assert b_state.state is TargetHealth.EJECTED
        assert emulator.stats.count(endpoint="b") >= 2  # the checks are real invocations

        emulator.restore("b")
        for _ in range(200):
            if b_state.state is TargetHealth.HEALTHY:
                break
            await asyncio.sleep(0.02)
        assert b_state.state is TargetHealth.HEALTHY
