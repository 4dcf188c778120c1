"""``[global_gateway_routes.NAME]``: a model name over Global Inference Gateways in two
Regions (two emulators), retried on the other Region's gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}


def _region(name: str, gateway_id: str) -> dict[str, Any]:
    return {
        "region": name,
        "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
        "global_inference_gateways": {gateway_id: {"models": ["echo"]}},
    }


@pytest.fixture
async def regions() -> AsyncIterator[tuple[Emulator, Emulator]]:
    async with (
        Emulator(EmulatorConfig.from_dict(_region("us-east-1", "gwus"))) as us,
        Emulator(EmulatorConfig.from_dict(_region("eu-west-1", "gweu"))) as eu,
    ):
        yield us, eu


def _config(us: Emulator, eu: Emulator) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": us.url,
        "credentials": {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        "global_gateway_routes": {
            "echo": {
                "targets": [
                    {"endpoint": "gwus", "weight": 100},
                    {"endpoint": "gweu", "region": "eu-west-1", "url": eu.url, "weight": 1},
                ],
                "retry": {"max_attempts": 2},
            }
        },
    }


@pytest.mark.newer_runtimes
async def test_a_model_name_over_gateways_in_two_regions(
    regions: tuple[Emulator, Emulator],
) -> None:
    us, eu = regions
    body = json.dumps(CHAT).encode()
    async with Gateway.from_config(_config(us, eu), environ={}) as gw:
        first = await gw.invoke_global_gateway("echo", body)
        us.runtimes.gateways.set_faults(
            "gwus", {"error_rates": {"ServiceUnavailableException": 1.0}}
        )
        second = await gw.invoke_global_gateway("echo", body)
    assert (first.target, first.attempts) == ("gwus", 1)
    assert (second.target, second.attempts) == ("gweu", 2)
    assert json.loads(second.body)["choices"][0]["message"]["content"] == "bid on this one"
    assert [f.gateway for f in eu.runtimes.gateways.forwarded] == ["gweu"]


@pytest.mark.parametrize(
    "target",
    [{"endpoint": "GW-1"}, {"inference_router": "r", "routing_target": "t"}],
)
def test_a_route_target_must_be_a_gateway_id(target: dict[str, Any]) -> None:
    with pytest.raises(errors.ConfigError, match=r"global_gateway_routes\.echo\.targets"):
        Gateway.from_config(
            {"region": "us-east-1", "global_gateway_routes": {"echo": {"targets": [target]}}},
            environ={},
        )
