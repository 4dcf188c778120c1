"""Rules in the proxy: decided before scoring, named in the answer, reloaded while serving."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.errors import ConfigError
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import Sidecar, SidecarProcess
from gateway.sidecar._sidecar import _command_config, _parser
from tests.sidecar.test_rtb_proxy import BODY, KEEP, PATH, config, metrics

BLOCK = {"path": "site.domain", "match": "equals", "value": orjson.loads(BODY)["site"]["domain"]}


@pytest.fixture
async def rtb_emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=2)) as emu:
        yield emu


@pytest.fixture
async def rules_sidecar(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> AsyncIterator[tuple[Sidecar, httpx.AsyncClient]]:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    rules = {
        "block": {**BLOCK, "nbr": 7},
        "ctv": {"path": "device.devicetype", "match": "in", "values": [3, 7], "action": "keep"},
    }
    table = config(rtb_emulator.url, [bidder_url], rules=rules)
    async with (
        Sidecar(table, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        yield sidecar, http


def changed(**fields: Any) -> bytes:
    request = orjson.loads(BODY)
    request.update(fields)
    return orjson.dumps(request)


async def test_a_rule_drops_before_scoring_and_keeps_unscored(
    rules_sidecar: tuple[Sidecar, httpx.AsyncClient], bidder: tuple[ToyBidder, Server]
) -> None:
    sidecar, http = rules_sidecar
    dropped = await http.post(PATH, content=BODY, headers=KEEP)
    assert dropped.status_code == 204
    assert dropped.headers["x-bid-filter-reason"] == "rule_drop"
    assert dropped.headers["x-bid-filter-rule"] == "block"
    assert "x-bid-filter-score" not in dropped.headers
    assert bidder[0].received == []
    ctv = changed(site={"domain": "other.example"}, app=None, device={"devicetype": 3})
    kept = await http.post(PATH, content=ctv, headers=KEEP)
    assert kept.status_code == 200 and kept.headers["x-bid-filter-reason"] == "rule_keep"
    (forwarded,) = bidder[0].received
    assert forwarded.headers["x-bid-filter-rule"] == "ctv"
    assert sidecar.rtb is not None and sidecar.rtb.filter.stats.batches == 0  # never scored
    counters = await metrics(http)
    assert counters["sagemaker_gateway_rtb_rule_hits_total{rule=block}"] == 1
    assert counters["sagemaker_gateway_rtb_rule_hits_total{rule=ctv}"] == 1
    assert counters["sagemaker_gateway_rtb_rule_dropped_total"] == 1
    assert counters["sagemaker_gateway_rtb_rule_kept_total"] == 1


async def test_reload_applies_new_rules_to_the_next_request(
    rules_sidecar: tuple[Sidecar, httpx.AsyncClient],
) -> None:
    sidecar, http = rules_sidecar
    assert sidecar.rtb is not None
    table: dict[str, Any] = {
        "bidders": list(sidecar.rtb.config.bidders),
        "route_thresholds": {"keep-all": 0.0, "drop-all": 1.0},
        "default_budget_ms": 2000.0,
    }
    assert sidecar.reload_rtb(table) == []  # no rules now
    assert (await http.post(PATH, content=BODY, headers=KEEP)).status_code == 200
    with pytest.raises(ConfigError, match=r"^config error at rtb\.rules\.zip\.path: .*zip"):
        sidecar.reload_rtb(
            {**table, "rules": {"zip": {"path": "device.geo.zip", "match": "exists"}}}
        )
    assert (await http.post(PATH, content=BODY, headers=KEEP)).status_code == 200  # unchanged
    restart = sidecar.reload_rtb({**table, "rules": {"block": BLOCK}, "max_batch": 4})
    assert restart == ["max_batch"]
    assert sidecar.rtb.config.max_batch == 32  # runs as it started
    answer = await http.post(PATH, content=BODY, headers=KEEP)
    assert (answer.status_code, answer.headers["x-bid-filter-rule"]) == (204, "block")
    counters = await metrics(http)
    assert counters["sagemaker_gateway_rtb_reloads_total{outcome=applied}"] == 2
    assert counters["sagemaker_gateway_rtb_reloads_total{outcome=refused}"] == 1


def test_the_command_refuses_a_rule_on_a_path_no_request_has(tmp_path: Path) -> None:
    file = tmp_path / "gateway.json"
    rules = {"geo": {"path": "device.geo.zip", "match": "in", "values": ["10001"]}}
    file.write_text(json.dumps({"rtb": {"bidders": ["http://ads:8080/bid"], "rules": rules}}))
    args = _parser().parse_args(["--config", str(file)])
    with pytest.raises(ConfigError, match=r"^config error at rtb\.rules\.geo\.path: .*zip"):
        _command_config(args, {})
    variable = "SAGEMAKER_GATEWAY__RTB__RULES__GEO__PATH"
    with pytest.raises(ConfigError, match=rf"^{variable} \(rtb\.rules\.geo\.path\): .*bundle"):
        _command_config(args, {variable: "site.bundle"})


async def test_sighup_reloads_the_rules_in_every_worker(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server], tmp_path: Path
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    file = tmp_path / "gateway.json"
    file.write_text(json.dumps(config(rtb_emulator.url, [bidder_url])))
    args = ("--workers", "2", "--log-level", "WARNING")
    process = await asyncio.to_thread(SidecarProcess.start, str(file), "127.0.0.1:0", args, None)
    try:
        assert process.admin_url is not None
        async with (
            httpx.AsyncClient(base_url=process.url, timeout=10.0) as http,
            httpx.AsyncClient(base_url=process.admin_url, timeout=10.0) as admin,
        ):
            assert (await fresh(http, BODY)).status_code == 200
            file.write_text(json.dumps(config(rtb_emulator.url, [bidder_url], rules={"b": BLOCK})))
            process.process.send_signal(signal.SIGHUP)
            await until(admin, "sagemaker_gateway_rtb_reloads_total{outcome=applied}", 2)
            for _ in range(6):  # fresh connections: the kernel picks a worker each time
                answer = await fresh(http, BODY)
                assert (answer.status_code, answer.headers["x-bid-filter-rule"]) == (204, "b")
            file.write_text("{not json")
            process.process.send_signal(signal.SIGHUP)
            await until(admin, "sagemaker_gateway_rtb_reloads_total{outcome=refused}", 2)
            assert (await fresh(http, BODY)).headers["x-bid-filter-rule"] == "b"
            assert process.process.poll() is None
    finally:
        await asyncio.to_thread(process.stop)


async def fresh(http: httpx.AsyncClient, body: bytes) -> httpx.Response:
    return await http.post(PATH, content=body, headers={**KEEP, "connection": "close"})


async def until(admin: httpx.AsyncClient, sample: str, value: float) -> None:
    for _ in range(200):
        if (await metrics(admin)).get(sample) == value:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"{sample} never reached {value}: {await metrics(admin)}")
