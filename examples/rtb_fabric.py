"""The RTB proxy as the responder behind an AWS RTB Fabric link: rules, model, rate cap.

    python examples/rtb_fabric.py

    requester --link (Fabric modules)--> responder gateway --> sidecar --> bidder
                                            rules -> model -> rate cap -'

Starts the emulator, a toy bidder and the sidecar (all in this process, on
free loopback ports) with an ``[rtb]`` table that has rules, OpenRTB no-bid
reasons (``no_bid = "nbr"``) and a rate cap toward the bidder, then plays the
responder gateway: synthetic auctions with Fabric's ``x-amz-rtb-link-id``
header, faster than the cap. It prints where each request went and why, then
reloads the rules (as SIGHUP does for ``python -m gateway sidecar``) and
sends more.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from gateway.emulator import Emulator
from gateway.rtb import load_bundled_spec, parse_bid_request
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.synth import SyntheticTraffic
from gateway.sidecar import Sidecar

HERE = Path(__file__).resolve().parent
LINK = "link-0123456789abcdef"
# The [rtb] table: the model's threshold, per-link thresholds, rules, no-bid answers, a cap.
RTB = """
bidders = ["http://127.0.0.1:9000/openrtb2/bid"]
endpoint = "bid-filter"
threshold = 0.01
route_header = "x-amz-rtb-link-id"
route_thresholds = { link-0123456789abcdef = 0.01 }
no_bid = "nbr"
seed = 1

[rate_cap]
rps = 40                        # the bidder takes 40 requests a second, all workers together

[rules.puzzle-apps]             # inventory this DSP never buys: no-bid, OpenRTB nbr 7
path = "app.bundle"
match = "prefix"
values = ["com.puzzle", "com.quiz"]
nbr = 7

[rules.embargo]                 # a few countries out, 10% held back to measure what it costs
path = "device.geo.country"
match = "in"
values = ["IND", "BRA"]
holdback = 0.1

[rules.ctv]                     # CTV always goes to the bidder, unscored
path = "device.devicetype"
match = "in"
values = [3, 7]
action = "keep"

[rules.audio]                   # audio scored against a threshold of its own
path = "imp.audio"
match = "exists"
action = "score"
threshold = 0.003
"""
WARM_UP_ROW = load_bundled_spec().to_csv_row(
    parse_bid_request(next(SyntheticTraffic(seed=1).generate(1)).body), 1_717_597_800.0
)


async def play(http: httpx.AsyncClient, url: str, bodies: list[bytes]) -> list[httpx.Response]:
    """The responder gateway: 25 auctions in flight at a time, as fast as they are answered."""
    headers = {"content-type": "application/json", "x-amz-rtb-link-id": LINK}
    answers: list[httpx.Response] = []
    for start in range(0, len(bodies), 25):
        part = bodies[start : start + 25]
        answers += await asyncio.gather(*(http.post(url, content=b, headers=headers) for b in part))
    return answers


def route(answers: list[httpx.Response]) -> dict[str, Counter[str]]:
    """Where each request ended, and why (from the headers the proxy answers with)."""
    out: dict[str, Counter[str]] = {"rules": Counter(), "no-bid": Counter(), "bidder": Counter()}
    for answer in answers:
        rule = answer.headers.get("x-bid-filter-rule")
        reason = answer.headers.get("x-bid-filter-reason", "-")
        if rule is not None:
            out["rules"][f"{rule} ({reason})"] += 1
        no_bid = answer.headers.get("x-bid-filter-no-bid")
        if no_bid is not None:
            out["no-bid"][f"{no_bid} nbr={answer.json()['nbr']}"] += 1
        else:
            out["bidder"][f"{answer.status_code} ({reason})"] += 1
    return out


def show(title: str, answers: list[httpx.Response]) -> None:
    print(f"{title}: {len(answers)} auctions from {LINK}")
    for stage, counts in route(answers).items():
        print(f"  {stage:8} " + ", ".join(f"{key}: {n}" for key, n in counts.most_common()))


async def main() -> None:
    config = tomllib.loads((HERE / "gateway.toml").read_text())
    rtb: dict[str, Any] = tomllib.loads(RTB)
    bidder = ToyBidder(path="/openrtb2/bid", keep_requests=False)
    rtb["bidders"] = [await bidder.start()]
    async with Emulator(HERE / "emulator.toml") as emulator:
        config["endpoint_url"] = emulator.url
        config["rtb"] = rtb
        async with Sidecar(config, "127.0.0.1", 0) as sidecar, httpx.AsyncClient(timeout=5) as http:
            for endpoint in ("bid-filter", "bid-filter-b"):  # the model compiles on first use
                await sidecar.gateway.invoke(
                    endpoint, WARM_UP_ROW, content_type="text/csv", timeout=5.0
                )
            url = f"{sidecar.url}/openrtb2/auction"
            traffic = [item.body for item in SyntheticTraffic(seed=11).generate(1400)]
            show("before the reload", await play(http, url, traffic[:1000]))
            assert sidecar.rtb is not None
            stats = sidecar.rtb.filter.stats
            print(f"  counted  rule hits {stats.rule_hits}, held back {stats.held_back}, "
                  f"no-bids {sidecar.rtb.metrics.no_bids}")  # fmt: skip
            del rtb["rules"]["ctv"]  # the same as editing the file and sending SIGHUP
            restart = sidecar.reload_rtb(rtb)
            print(f"reloaded: rules {list(rtb['rules'])}; keys needing a restart: {restart}")
            show("after the reload", await play(http, url, traffic[1000:]))
            print(f"the bidder saw {bidder.requests} of {len(traffic)} requests")
    await bidder.close()


if __name__ == "__main__":
    asyncio.run(main())
