"""A target whose endpoint is gone, or whose model fails every call, must not take its route down.

The route is ``[bad, healthy]``. ``bad`` answers at once, as SageMaker does for a
deleted or misspelt endpoint (400 ``ValidationError`` "Endpoint ... not found") or
for a model that crashes (424 ``ModelError``); ``healthy`` answers in 5 ms. Those
answers are the target's state, not the caller's mistake: the calls they fail are
retried on ``healthy``, ``bad`` is ejected, and a fast failure never makes the
balancer prefer it. A route whose every target is in that state is down: not ready,
and ``target_healthy`` is 0 for each of its targets.

Driven over real sockets: the emulator, ``Gateway.invoke``, and the sidecar.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from gateway.routing import Route, TargetHealth
from gateway.sidecar import Sidecar

CALLS = 200
BATCH = 10
# The endpoint the route names and the emulator does not have.
MISSING = "deleted-endpoint"
# Targets in each state the attack used: an endpoint not found, a model failing.
BAD = {"not-found": MISSING, "model-error": "crashing"}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = {
        "seed": 37,
        "auth": {"credentials": {"AK": "SK"}},
        "endpoints": {
            "healthy": {"latency": {"base_ms": 5.0}},
            "crashing": {"faults": {"error_rates": {"ModelError": 1.0}}},
        },
    }
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


def _config(emulator: Emulator, routes: dict[str, Any]) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "routes": routes,
    }


def _state(route: Route, endpoint: str) -> Any:
    return next(t for t in route.targets if t.target.endpoint == endpoint)


@pytest.mark.parametrize("hedge", [False, True], ids=["plain", "hedged"])
@pytest.mark.parametrize("fault", sorted(BAD))
async def test_library_calls_succeed_while_one_target_is_dead(
    emulator: Emulator, fault: str, hedge: bool
) -> None:
    bad = BAD[fault]
    route: dict[str, Any] = {"targets": [bad, "healthy"], "hedge": {"enabled": hedge}}
    async with Gateway.from_config(_config(emulator, {"pair": route})) as gw:
        outcomes: Counter[str] = Counter()
        for _ in range(CALLS // BATCH):
            batch = [gw.invoke("pair", b"x", content_type="text/plain") for _ in range(BATCH)]
            for result in await asyncio.gather(*batch, return_exceptions=True):
                outcomes[getattr(result, "target", None) or type(result).__name__] += 1
        live = gw.route("pair")
        dead = _state(live, bad)
        # Before: 88-97% of these calls failed, and the dead target was never ejected.
        assert outcomes == {"healthy": CALLS}
        assert dead.state is TargetHealth.EJECTED
        assert dead.ewma_ms > _state(live, "healthy").ewma_ms
        assert not live.target_up(dead)
        assert gw.route_health() == {"pair": True}
    if fault == "model-error":
        # Ejected after its failure streak: it stopped getting calls.
        assert emulator.stats.count(endpoint=bad) < 20


async def test_sidecar_calls_succeed_and_readiness_follows_the_targets(
    emulator: Emulator,
) -> None:
    routes = {
        "pair": {"targets": [MISSING, "healthy"]},
        "dead": {"targets": [MISSING, "crashing"], "retry": {"max_attempts": 1}},
    }
    async with (
        Sidecar(_config(emulator, routes), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10) as http,
    ):
        statuses: Counter[int] = Counter()
        for _ in range(CALLS // BATCH):
            batch = [http.post("/endpoints/pair/invocations", content=b"x") for _ in range(BATCH)]
            statuses.update(answer.status_code for answer in await asyncio.gather(*batch))
        # Before: 198 of 200 answered 400.
        assert statuses == {200: CALLS}
        assert (await http.get("/readyz")).status_code == 200  # "dead" has had no call yet

        for _ in range(10):
            answer = await http.post("/endpoints/dead/invocations", content=b"x")
            assert answer.status_code in (400, 424)
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["reasons"] == ["route 'dead' has no healthy target"]
        assert (await http.get("/ping")).status_code == 503

        metrics = (await http.get("/metrics")).text
    healthy = {
        line.split("{", 1)[1].split("}", 1)[0]: line.rsplit(" ", 1)[1]
        for line in metrics.splitlines()
        if line.startswith("sagemaker_gateway_target_healthy{")
    }
    assert healthy == {
        f'route="pair",target="{MISSING}"': "0.0",
        'route="pair",target="healthy"': "1.0",
        f'route="dead",target="{MISSING}"': "0.0",
        'route="dead",target="crashing"': "0.0",
    }
