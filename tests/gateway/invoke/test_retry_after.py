"""A throttled answer's Retry-After cools its target down: calls go elsewhere until then,
and a retry waits for it only inside the call's deadline. Against the emulator's
inference router and Global Inference Gateway over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway._observe.events import Event, RetryScheduled
from gateway.emulator import Emulator, EmulatorConfig
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

pytestmark = pytest.mark.newer_runtimes

CREDENTIALS = {"credentials": {ACCESS_KEY: SECRET_KEY}}
HOME: dict[str, Any] = {
    "seed": 3,
    "auth": CREDENTIALS,
    "endpoints": {"local-a": {}, "dest": {}},
    "inference_routers": {
        "r": {"routing_targets": {"t": {"destinations": [{"endpoint": "dest"}]}}}
    },
    "global_inference_gateways": {"gwa": {"models": ["echo"]}, "gwb": {"models": ["echo"]}},
}
CHAT = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(HOME)) as emu:
        yield emu


def _gateway(emulator: Emulator, **sections: Any) -> Gateway:
    config = {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        **sections,
    }
    return Gateway.from_config(config, environ={})


def _router_calls(emulator: Emulator) -> int:
    return sum(1 for r in emulator.recorded if r.path.startswith("/inference-routers/"))


async def test_a_throttled_router_target_rests_while_the_endpoint_answers(
    emulator: Emulator,
) -> None:
    route = {
        "targets": [
            {"inference_router": "r", "routing_target": "t", "weight": 100},
            {"endpoint": "local-a", "weight": 1},
        ],
        "retry": {"max_attempts": 2},
    }
    emulator.runtimes.routers.set_faults("r", {"ThrottlingException": 1.0}, retry_after_s=30)
    async with _gateway(emulator, routes={"bid": route}) as gw:
        first = await gw.invoke("bid", b"{}")
        assert (first.target, first.attempts) == ("local-a", 2)  # retried elsewhere at once
        state = next(s for s in gw.route("bid").targets if s.key.startswith("router/"))
        assert state.cool_until > 0
        emulator.runtimes.routers.set_faults("r", {})
        later = [await gw.invoke("bid", b"{}") for _ in range(20)]
    assert {r.target for r in later} == {"local-a"}  # the router's 100 weight waits it out
    assert _router_calls(emulator) == 1


async def test_a_retry_waits_for_retry_after_when_it_fits_the_deadline(
    emulator: Emulator,
) -> None:
    emulator.runtimes.routers.set_faults("r", {"ThrottlingException": 1.0}, retry_after_s=1)
    scheduled: list[Event] = []
    async with _gateway(emulator) as gw:
        gw.add_hook(scheduled.append)

        def clear(event: Event) -> None:
            if isinstance(event, RetryScheduled):  # the retry will find the router well
                emulator.runtimes.routers.set_faults("r", {})

        gw.add_hook(clear)
        result = await gw.invoke_router("r", b"{}", routing_target="t", timeout=5.0)
    assert result.attempts == 2
    assert result.routing_reason == "local-preferred"
    retries = [e for e in scheduled if isinstance(e, RetryScheduled)]
    assert len(retries) == 1
    assert retries[0].error_code == "ThrottlingException"
    assert retries[0].backoff_s >= 0.9  # the Retry-After, not the few-ms backoff


async def test_a_retry_after_past_the_deadline_is_not_waited_for(emulator: Emulator) -> None:
    emulator.runtimes.routers.set_faults("r", {"ThrottlingException": 1.0}, retry_after_s=30)
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.Throttling) as caught:
            await gw.invoke_router("r", b"{}", routing_target="t", timeout=2.0)
    assert caught.value.retry_after == 30.0
    assert caught.value.attempts == 1  # no retry sent, no sleep past the deadline
    assert _router_calls(emulator) == 1


async def test_a_throttled_global_gateway_rests_while_the_other_answers(
    emulator: Emulator,
) -> None:
    routes = {
        "echo": {
            "targets": [{"endpoint": "gwa", "weight": 100}, {"endpoint": "gwb", "weight": 1}],
            "retry": {"max_attempts": 2, "max_retry_after_s": 60},
        }
    }
    gateways = emulator.runtimes.gateways
    gateways.set_faults("gwa", {"error_rates": {"ThrottlingException": 1.0}, "retry_after_s": 20})
    async with _gateway(emulator, global_gateway_routes=routes) as gw:
        first = await gw.invoke_global_gateway("echo", CHAT)
        gateways.set_faults("gwa", {"error_rates": {}})
        later = [await gw.invoke_global_gateway("echo", CHAT) for _ in range(10)]
    assert (first.target, first.attempts) == ("gwb", 2)
    assert {r.target for r in later} == {"gwb"}
    assert [f.gateway for f in gateways.forwarded].count("gwa") == 0


async def test_an_upstream_429_of_a_global_gateway_cools_it_down_too(emulator: Emulator) -> None:
    routes = {"echo": {"targets": ["gwa", "gwb"], "retry": {"max_attempts": 2}}}
    gateways = emulator.runtimes.gateways
    gateways.set_faults("gwa", {"upstream_error_rates": {"429": 1.0}, "retry_after_s": 20})
    gateways.set_faults("gwb", {"upstream_error_rates": {"429": 1.0}, "retry_after_s": 20})
    async with _gateway(emulator, global_gateway_routes=routes) as gw:
        with pytest.raises(errors.Throttling) as caught:
            await gw.invoke_global_gateway("echo", CHAT, timeout=2.0)
        states = gw._context.lane("sagemaker-gateway-runtime").router.resolve("echo").targets
    assert caught.value.attempts == 2  # one on each gateway, then max_attempts
    assert all(state.cool_until > 0 for state in states)
