"""/ping and /metrics."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway import Gateway
from gateway._observe.counting import UNCONFIGURED
from gateway.emulator import Emulator
from gateway.sidecar import Sidecar
from tests.sidecar.conftest import ClientFactory


async def test_ping(sidecar: Sidecar) -> None:
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        response = await http.get("/ping")
    assert response.status_code == 200


class _UnhealthyGateway(Gateway):
    def route_health(self) -> dict[str, bool]:
        return {"pair": True, "solo": False}


async def test_ping_reports_a_route_without_healthy_targets(emulator: Emulator) -> None:
    gw = _UnhealthyGateway(region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
    async with (
        gw,
        Sidecar(gw, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url) as http,
    ):
        response = await http.get("/ping")
    assert response.status_code == 503
    assert response.json() == {"unhealthy_routes": ["solo"]}


async def test_metrics_parse_and_count(
    emulator: Emulator, sidecar: Sidecar, boto_client: ClientFactory
) -> None:
    emulator.set_faults("constant", error_rates={"ValidationError": 1.0})
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        for _ in range(3):
            await http.post("/endpoints/echo/invocations", content=b"x")
        await http.post("/endpoints/constant/invocations", content=b"x")
        await http.post("/nowhere")
        response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    requests = {
        (s.labels["operation"], s.labels["route"], s.labels["code"]): s.value
        for s in families["sagemaker_gateway_sidecar_requests"].samples
        if s.name == "sagemaker_gateway_sidecar_requests_total"
    }
    # Bare endpoint names, not configured routes: one label for them all.
    assert requests[("invoke", UNCONFIGURED, "200")] == 3
    assert requests[("invoke", UNCONFIGURED, "400")] == 1
    assert {s.value for s in families["sagemaker_gateway_sidecar_in_flight"].samples} == {0}
    rejected = {
        s.labels["reason"]: s.value for s in families["sagemaker_gateway_sidecar_rejected"].samples
    }
    assert {reason: n for reason, n in rejected.items() if n} == {"unknown_operation": 1}
    assert rejected["in_flight_cap"] == 0  # there from the start
    latency = families["sagemaker_gateway_sidecar_request_duration_seconds"]
    count = next(
        s
        for s in latency.samples
        if s.name.endswith("_count") and s.labels["operation"] == "invoke"
    )
    assert count.value == 4
    # The gateway's own collector is registered too.
    assert any(name.startswith("sagemaker_gateway") for name in families)
    await asyncio.sleep(0)
