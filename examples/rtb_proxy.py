"""The RTB proxy: the sidecar's OpenRTB path in front of a toy bidder.

    python examples/rtb_proxy.py

    exchange --POST /openrtb2/auction--> sidecar --score--> emulator (XGBoost)
                                            |  dropped: 204 No Content at once
                                            '- kept: forwarded to the bidder, its answer relayed

Starts the emulator, a toy bidder (``gateway.rtb.bidder.ToyBidder``) and the
sidecar with the ``[rtb]`` table of examples/gateway.toml (its bidder URL
replaced with the toy bidder's), all on free loopback ports, then plays an
exchange sending synthetic bid requests.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections import Counter
from pathlib import Path

import httpx

from gateway.emulator import Emulator
from gateway.rtb import load_bundled_spec, parse_bid_request
from gateway.rtb.bidder import ToyBidder
from gateway.rtb.synth import SyntheticTraffic
from gateway.sidecar import Sidecar

HERE = Path(__file__).resolve().parent
# One feature row of a synthetic request, in the bundled model's spec.
WARM_UP_ROW = load_bundled_spec().to_csv_row(
    parse_bid_request(next(SyntheticTraffic(seed=1).generate(1)).body), 1_717_597_800.0
)


async def main() -> None:
    config = tomllib.loads((HERE / "gateway.toml").read_text())
    bidder = ToyBidder(path="/openrtb2/bid", keep_requests=False)
    bidder_url = await bidder.start()
    async with Emulator(HERE / "emulator.toml") as emulator:
        config["endpoint_url"] = emulator.url
        config["rtb"]["bidders"] = [bidder_url]
        async with Sidecar(config, "127.0.0.1", 0) as sidecar:
            auction = f"{sidecar.url}/openrtb2/auction"
            print(f"sidecar {auction} -> bidder {bidder_url}", flush=True)
            traffic = [item.body for item in SyntheticTraffic(seed=5).generate(600)]
            statuses: Counter[int] = Counter()
            reasons: Counter[str] = Counter()
            # The first answer of each status and reason.
            sample: dict[tuple[int, str], httpx.Response] = {}
            async with httpx.AsyncClient(timeout=5.0) as exchange:
                # Warm-up, through the sidecar's own Gateway: the emulator
                # compiles the model on first use, longer than a request's budget.
                for endpoint in ("bid-filter", "bid-filter-b"):
                    await sidecar.gateway.invoke(
                        endpoint, WARM_UP_ROW, content_type="text/csv", timeout=5.0
                    )
                for start in range(0, len(traffic), 50):  # 50 auctions in flight at a time
                    answers = await asyncio.gather(
                        *(
                            exchange.post(
                                auction, content=body, headers={"content-type": "application/json"}
                            )
                            for body in traffic[start : start + 50]
                        )
                    )
                    for answer in answers:
                        statuses[answer.status_code] += 1
                        reason = answer.headers.get("x-bid-filter-reason", "-")
                        reasons[reason] += 1
                        sample.setdefault((answer.status_code, reason), answer)
            print(f"{len(traffic)} auctions: {dict(statuses)} (204 = no bid, 200 = bid relayed)")
            print(f"filter reasons: {dict(reasons)}")
            print(f"the bidder saw {bidder.requests} requests; the rest never reached it")
            # A request the model scored and the bidder bid on; on a loaded host some are
            # kept unscored ("failed_open": the model missed the request's budget).
            if (200, "scored_keep") in sample:
                kept = sample[200, "scored_keep"]
                print(
                    f"a kept request: score {kept.headers.get('x-bid-filter-score')}, "
                    f"bid {kept.json()['seatbid'][0]['bid'][0]['price']}"
                )
            if (204, "scored_drop") in sample:
                dropped = sample[204, "scored_drop"]
                print(f"a dropped request: score {dropped.headers.get('x-bid-filter-score')}")
    await bidder.close()


if __name__ == "__main__":
    asyncio.run(main())
