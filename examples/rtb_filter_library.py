"""The RTB pre-filter as a library: BidFilter over a Gateway route.

    python examples/rtb_filter_library.py

Scores 5,000 synthetic OpenRTB bid requests (with a known ground truth:
would a DSP have bid?) through ``BidFilter``: parse, feature rows, micro-
batched ``text/csv`` scoring on the emulator's XGBoost endpoint, keep/drop.
Then the same filter with the model unreachable fails open, and a malformed
request gets its specific error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway import Gateway
from gateway.emulator import Emulator
from gateway.rtb import BidFilter, FilterPolicy, InvalidBidRequest, parse_bid_request
from gateway.rtb.synth import SyntheticTraffic

HERE = Path(__file__).resolve().parent


async def main() -> None:
    traffic = list(SyntheticTraffic(seed=11).generate(5000))
    async with Emulator(HERE / "emulator.toml") as emulator:
        gateway = Gateway(
            "us-east-1",
            endpoint_url=emulator.url,
            credentials=("AKIDEXAMPLE", "secret"),
            routes={
                "bid-filter": {
                    "targets": [{"endpoint": "bid-filter"}, {"endpoint": "bid-filter-b"}],
                    "hedge": {"enabled": True},
                }
            },
        )
        async with gateway:
            policy = FilterPolicy(threshold=0.01, explore_share=0.01, seed=1)
            bid_filter = BidFilter(gateway, "bid-filter", policy=policy, max_batch=32)
            # Warm-up: the emulator compiles the model on first use.
            await bid_filter.decide(traffic[0].body, now=traffic[0].timestamp, budget=1.0)
            decisions = []
            for start in range(0, len(traffic), 250):  # bursts of 250 concurrent requests
                burst = traffic[start : start + 250]
                decisions += await asyncio.gather(
                    *(bid_filter.decide(item.body, now=item.timestamp) for item in burst)
                )
            await bid_filter.aclose()
            stats = bid_filter.stats
            dropped = sum(not d.keep for d in decisions)
            bids = [d for d, item in zip(decisions, traffic, strict=True) if item.label]
            lost = sum(not d.keep for d in bids)
            print(f"decided {len(decisions)} bid requests in {stats.batches} scoring calls")
            print(f"dropped {dropped / len(decisions):.1%} ('no bid' at once)")
            print(f"true bids lost: {lost} of {len(bids)} ({lost / max(len(bids), 1):.1%})")
            print(f"kept {stats.kept} (explored {stats.explored}, failed open {stats.failed_open})")
            print(f"first decision: {decisions[0]}")

            # The model is down (an endpoint that does not exist): every request is
            # kept and counted, within its budget; nothing is lost.
            dead = BidFilter(gateway, "no-such-endpoint")
            failed = await dead.decide_many(item.body for item in traffic[:100])
            await dead.aclose()
            print(
                f"model unreachable: {sum(d.keep for d in failed)} of {len(failed)} kept, "
                f"failed open {dead.stats.failed_open}"
            )

    try:
        parse_bid_request(b'{"id": "1", "imp": []}')
    except InvalidBidRequest as exc:
        print(f"malformed request: InvalidBidRequest: {exc}")


if __name__ == "__main__":
    asyncio.run(main())
