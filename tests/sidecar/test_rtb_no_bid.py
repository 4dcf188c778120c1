"""The proxy's own no-bids say why: a header, and OpenRTB's nbr when configured; counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway._config.env import apply_environment
from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.errors import ConfigError
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import RtbConfig, Sidecar
from tests.sidecar.test_rtb_proxy import BODY, DROP, KEEP, PATH, config, metrics

REQUEST_ID = orjson.loads(BODY)["id"]
DOMAIN = orjson.loads(BODY)["site"]["domain"]
UNREADABLE = b'{"id": "bad-1", "imp": []}'


@pytest.fixture
async def rtb_emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=2)) as emu:
        yield emu


async def serve(emulator: Emulator, bidder: tuple[ToyBidder, Server], **rtb: Any) -> Sidecar:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    return await Sidecar(config(emulator.url, [bidder_url], **rtb), "127.0.0.1", 0).start()


def rules(**extra: Any) -> dict[str, Any]:
    return {"block": {"path": "site.domain", "match": "equals", "value": DOMAIN, **extra}}


async def test_by_default_a_no_bid_is_204_with_its_reason_in_a_header(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    sidecar = await serve(rtb_emulator, bidder, unreadable="no_bid")
    try:
        async with httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http:
            below = await http.post(PATH, content=BODY, headers=DROP)
            unreadable = await http.post(PATH, content=UNREADABLE)
            sidecar.reload_rtb({**sidecar_table(sidecar), "rules": rules()})
            ruled = await http.post(PATH, content=BODY, headers=KEEP)
            counters = await metrics(http)
    finally:
        await sidecar.close()
    for answer, reason in ((below, "below_threshold"), (unreadable, "unreadable"), (ruled, "rule")):
        assert (answer.status_code, answer.content) == (204, b"")
        assert answer.headers["x-bid-filter-no-bid"] == reason
    assert unreadable.headers["x-bid-filter-reason"] == "unreadable"
    assert bidder[0].received == []
    for reason, count in (("below_threshold", 1), ("rule", 1), ("unreadable", 1), ("rate_cap", 0)):
        assert counters[f"sagemaker_gateway_rtb_no_bids_total{{reason={reason}}}"] == count


async def test_nbr_mode_answers_200_with_the_request_id_and_a_code(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    sidecar = await serve(
        rtb_emulator,
        bidder,
        no_bid="nbr",
        no_bid_codes={"below_threshold": 501},
        unreadable="no_bid",
        rules=rules(nbr=7),
    )
    try:
        async with httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http:
            ruled = await http.post(PATH, content=BODY, headers=KEEP)
            other = orjson.dumps({**orjson.loads(BODY), "site": {"domain": "other.example"}})
            below = await http.post(PATH, content=other, headers=DROP)
            unreadable = await http.post(PATH, content=UNREADABLE)
            not_json = await http.post(PATH, content=b"{nope")
    finally:
        await sidecar.close()
    for answer, reason, nbr, request_id in (
        (ruled, "rule", 7, REQUEST_ID),
        (below, "below_threshold", 501, REQUEST_ID),
        (unreadable, "unreadable", 2, "bad-1"),
        (not_json, "unreadable", 2, ""),
    ):
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["x-bid-filter-no-bid"] == reason
        assert answer.json() == {"id": request_id, "nbr": nbr}
    assert bidder[0].received == []


async def test_a_bidders_own_no_bid_is_still_relayed_as_204(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    bidder[0].status = 204
    sidecar = await serve(rtb_emulator, bidder, no_bid="nbr")
    try:
        async with httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http:
            answer = await http.post(PATH, content=BODY, headers=KEEP)
    finally:
        await sidecar.close()
    assert answer.status_code == 204 and "x-bid-filter-no-bid" not in answer.headers


def test_no_bid_settings_are_checked_and_read_from_the_environment() -> None:
    table = {"bidders": ["http://ads:8080/bid"]}
    environ = {
        "SAGEMAKER_GATEWAY__RTB__NO_BID": "204",
        "SAGEMAKER_GATEWAY__RTB__UNREADABLE": "no_bid",
    }
    parsed = RtbConfig.from_mapping(apply_environment({"rtb": table}, environ).mapping["rtb"])
    assert (parsed.no_bid, parsed.unreadable) == ("204", "no_bid")
    with pytest.raises(ConfigError, match=r"^config error at rtb\.no_bid_codes: unknown reason"):
        RtbConfig.from_mapping({**table, "no_bid_codes": {"too_low": 3}})
    with pytest.raises(
        ConfigError, match=r"^config error at rtb\.no_bid_codes\.rule: must be >= 0"
    ):
        RtbConfig.from_mapping({**table, "no_bid_codes": {"rule": -1}})
    with pytest.raises(ConfigError, match=r"^config error at rtb\.no_bid: must be one of 204, nbr"):
        RtbConfig.from_mapping({**table, "no_bid": "json"})


def sidecar_table(sidecar: Sidecar) -> dict[str, Any]:
    assert sidecar.rtb is not None
    running = sidecar.rtb.config
    return {
        "bidders": list(running.bidders),
        "route_thresholds": {"keep-all": 0.0, "drop-all": 1.0},
        "default_budget_ms": 2000.0,
        "unreadable": running.unreadable,
    }
