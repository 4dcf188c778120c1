"""Calls an inference router answered: their CallFinished and the Prometheus exposition
carry the routing reason and the routed resource, with bounded cardinality."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway import Gateway
from gateway._observe.events import CallFinished, Event, routing_labels
from gateway._observe.prometheus import GatewayMetrics
from gateway.emulator import Emulator, EmulatorConfig
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

ACCOUNT = "123456789012"
CONFIG: dict[str, Any] = {
    "seed": 8,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"local-a": {}, "dest-eu": {}},
    "inference_routers": {
        "r": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "dest-eu", "region": "eu-west-1"}]}
            }
        }
    },
}
DEST_EU = f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:endpoint/dest-eu"
REASONS = ("local-preferred", "capacity-available", "only-healthy", "failover", "other")


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emu:
        yield emu


def _samples(gw: Gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(gw.prometheus_collector())
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _reason(route: str, reason: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("sagemaker_gateway_routed_calls_total", (("reason", reason), ("route", route)))


def _resource(route: str, resource: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("sagemaker_gateway_routed_resources_total", (("resource", resource), ("route", route)))


@pytest.mark.newer_runtimes
async def test_router_answers_are_counted_by_reason_and_resource(emulator: Emulator) -> None:
    route = {
        "targets": ["local-a", {"inference_router": "r", "routing_target": "t", "priority": 1}],
        "ejection": {"consecutive_failures": 1},
    }
    config = {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        "routes": {"bid": route, "plain": {"targets": ["local-a"]}},
    }
    finished: list[CallFinished] = []

    def hook(event: Event) -> None:
        if isinstance(event, CallFinished):
            finished.append(event)

    async with Gateway.from_config(config, environ={}) as gw:
        before = _samples(gw)
        gw.add_hook(hook)
        await gw.invoke("bid", b"{}")  # the endpoint: no router labels
        emulator.set_faults("local-a", error_rates={"ServiceUnavailable": 1.0})
        await gw.invoke("bid", b"{}")  # failed over to the router, local-a ejected
        await gw.invoke("bid", b"{}")
        await gw.invoke_router("r", b"{}", routing_target="t")
        after = _samples(gw)
    # At zero from the start for the configured route with a router target, only.
    assert all(before[_reason("bid", reason)] == 0 for reason in REASONS)
    assert _reason("plain", "failover") not in before
    assert [(e.routing_reason, e.routed_resource) for e in finished] == [
        (None, None),
        ("only-healthy", DEST_EU),
        ("only-healthy", DEST_EU),
        ("only-healthy", DEST_EU),
    ]
    assert after[_reason("bid", "only-healthy")] == 2
    assert after[_reason("bid", "local-preferred")] == 0
    assert after[_resource("bid", DEST_EU)] == 2
    assert after[_reason("r", "only-healthy")] == 1  # invoke_router: the router's name
    assert after[_resource("r", DEST_EU)] == 1


@pytest.mark.parametrize(
    ("reason", "arn", "expected"),
    [
        ("failover", DEST_EU, ("failover", DEST_EU)),
        ("brand-new-reason", DEST_EU, ("other", DEST_EU)),
        ('local-preferred"} 1\nevil{x="', DEST_EU, ("other", DEST_EU)),
        ("failover", "arn:aws:sagemaker:eu-west-1:1:endpoint/x", ("failover", "other")),
        ("failover", DEST_EU + "\n", ("failover", "other")),
        ("failover", "x" * 5000, ("failover", "other")),
        (
            None,
            f"arn:aws-cn:sagemaker:cn-north-1:{ACCOUNT}:inference-component/ic-1",
            ("other", f"arn:aws-cn:sagemaker:cn-north-1:{ACCOUNT}:inference-component/ic-1"),
        ),
        ("failover", None, ("failover", "other")),
        (None, None, (None, None)),
    ],
)
def test_routing_labels_hold_documented_values_only(
    reason: str | None, arn: str | None, expected: tuple[str | None, str | None]
) -> None:
    assert routing_labels(reason, arn) == expected


def test_routed_resources_past_the_cap_count_as_other() -> None:
    metrics = GatewayMetrics(label_cap=2, routes={"bid": ["a"]}, routed=["bid"])
    for index in range(5):
        arn = f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:endpoint/e{index}"
        metrics(
            CallFinished(
                "bid",
                None,
                "r",
                0.001,
                1,
                False,
                None,
                None,
                "InvokeEndpoint",
                None,
                "failover",
                arn,
            )
        )
    resources = {resource: count for (_, resource), count in metrics.routed_resources.items()}
    assert len(resources) == 3 and resources["other"] == 3
    assert metrics.routing_reasons == {("bid", "failover"): 5}
