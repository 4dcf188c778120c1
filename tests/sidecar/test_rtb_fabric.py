"""Behind AWS RTB Fabric: thresholds per link (``route_header``), the link id passed on."""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway._server.http import Server
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb import RULE_PATHS
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import RtbConfig, Sidecar
from gateway.sidecar._rtb import LINK_HEADER
from tests.sidecar.test_rtb_proxy import BODY, PATH, config


@pytest.fixture
async def rtb_emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=2)) as emu:
        yield emu


async def test_thresholds_by_fabric_link_and_the_link_id_reaches_the_bidder(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    table = config(rtb_emulator.url, [bidder_url], route_header="X-Amz-Rtb-Link-Id")
    table["rtb"]["route_thresholds"] = {"link-premium": 0.0, "link-remnant": 1.0}
    async with (
        Sidecar(table, "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        assert sidecar.rtb is not None and sidecar.rtb.config.route_header == "x-amz-rtb-link-id"
        remnant = await http.post(PATH, content=BODY, headers={"x-amz-rtb-link-id": "link-remnant"})
        premium = await http.post(PATH, content=BODY, headers={"x-amz-rtb-link-id": "link-premium"})
        ignored = await http.post(
            PATH, content=BODY, headers={"x-bid-filter-route": "link-premium"}
        )
    assert (
        remnant.status_code == 204 and remnant.headers["x-bid-filter-no-bid"] == "below_threshold"
    )
    assert premium.status_code == 200
    # The default header is not read any more: that request got the global threshold.
    assert (ignored.status_code == 200) == (float(ignored.headers["x-bid-filter-score"]) >= 0.01)
    (forwarded,) = [r for r in bidder[0].received if "x-amz-rtb-link-id" in r.headers]
    assert forwarded.headers["x-amz-rtb-link-id"] == "link-premium"


HOWTO = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "rtb-fabric.md"


def test_the_how_to_lists_every_rule_path_and_its_config_is_valid() -> None:
    text = HOWTO.read_text()
    listed = text.split("The paths, as OpenRTB names them:", 1)[1].split("\n\n", 2)[1]
    after_labels = "".join(line.split(":", 1)[1] for line in listed.splitlines())
    assert set(re.findall(r"`([a-z0-9_.]+)`", after_labels)) == set(RULE_PATHS)
    fragment = text.split("```toml\n", 1)[1].split("```", 1)[0]
    parsed = RtbConfig.from_mapping(tomllib.loads(fragment)["rtb"])
    assert list(parsed.policy.rules) == [
        "blocked-bundles",
        "tiny-banners",
        "ctv",
        "audio",
        "no-schain",
    ]
    assert parsed.route_header == LINK_HEADER and parsed.no_bid == "nbr"
