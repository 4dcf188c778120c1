"""Embed the gateway in an async ad server: one prediction per request, under a deadline.

    python examples/embed_in_ad_server.py
    python examples/embed_in_ad_server.py --deadline-ms 250   # a busy test host

The handler scores a bid request on the "bid-filter" route (two redundant
endpoints, hedging and retries on) with a 15 ms deadline. Whatever happens
upstream, the handler answers in time: a DeadlineExceeded or any other
GatewayError falls back to a default decision instead of stalling the auction.
Runs against the built-in emulator, started here on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from gateway import DeadlineExceeded, Gateway, GatewayError
from gateway.emulator import Emulator
from gateway.rtb import load_bundled_spec, parse_bid_request
from gateway.rtb.synth import SyntheticTraffic

HERE = Path(__file__).resolve().parent
DEADLINE_MS = 15.0  # what this ad server can spend on the prediction
THRESHOLD = 0.01


@dataclass
class AdResponse:
    bid: bool
    score: float | None
    source: str  # "model" or "fallback: <why>"
    took_ms: float


class AdServer:
    def __init__(self, gateway: Gateway, deadline_s: float) -> None:
        self.gateway = gateway
        self.deadline_s = deadline_s
        self.spec = load_bundled_spec()

    async def handle(
        self, raw_request: bytes, endpoint: str = "bid-filter", deadline_s: float | None = None
    ) -> AdResponse:
        started = time.perf_counter()
        row = self.row_of(raw_request)
        timeout = self.deadline_s if deadline_s is None else deadline_s
        try:
            result = await self.gateway.invoke(
                endpoint, row, content_type="text/csv", accept="text/csv", timeout=timeout
            )
        except DeadlineExceeded:
            return self._fallback("deadline", started)
        except GatewayError as exc:
            return self._fallback(type(exc).__name__, started)
        score = float(result.body)
        took = (time.perf_counter() - started) * 1000
        return AdResponse(score >= THRESHOLD, score, "model", took)

    def row_of(self, raw_request: bytes) -> bytes:
        """The model's feature row (CSV) for a bid request."""
        return self.spec.to_csv_row(parse_bid_request(raw_request), time.time())

    @staticmethod
    def _fallback(why: str, started: float) -> AdResponse:
        # No score in time: bid anyway (a lost auction costs more than a wasted bid).
        return AdResponse(True, None, f"fallback: {why}", (time.perf_counter() - started) * 1000)


async def main(deadline_ms: float) -> None:
    async with Emulator(HERE / "emulator.toml") as emulator:
        gateway = Gateway.from_config(
            {
                "region": "us-east-1",
                "endpoint_url": emulator.url,  # in AWS: leave out, or a VPC endpoint URL
                "credentials": {"access_key_id": "AKIDEXAMPLE", "secret_access_key": "secret"},
                "pool": {"max_connections": 32, "prewarm": 4},
                "routes": {
                    "bid-filter": {
                        "targets": [{"endpoint": "bid-filter"}, {"endpoint": "bid-filter-b"}],
                        "hedge": {"enabled": True, "max_extra_load": 0.05, "min_delay_ms": 1},
                        "retry": {"max_attempts": 2},
                    }
                },
            }
        )
        async with gateway:
            server = AdServer(gateway, deadline_ms / 1000)
            requests = [item.body for item in SyntheticTraffic(seed=3).generate(200)]
            # Warm-up, with a budget of seconds: the emulator compiles its XGBoost model on
            # first use, longer than a request's 15 ms.
            row = server.row_of(requests[0])
            for endpoint in ("bid-filter", "bid-filter-b"):
                await gateway.invoke(endpoint, row, content_type="text/csv", timeout=5.0)
            # Auctions arrive 20 at a time, as an ad server's event loop would see them.
            responses: list[AdResponse] = []
            for wave in range(0, len(requests), 20):
                chunk = requests[wave : wave + 20]
                responses += await asyncio.gather(*(server.handle(body) for body in chunk))
            by_source: dict[str, int] = {}
            for response in responses:
                by_source[response.source] = by_source.get(response.source, 0) + 1
            bids = sum(r.bid for r in responses)
            slowest = max(r.took_ms for r in responses)
            print(
                f"handled {len(responses)} ad requests: {bids} bid, {len(responses) - bids} no bid"
            )
            print(f"answer sources: {by_source}; slowest handler: {slowest:.1f} ms")
            first = responses[0]
            print(f"first request: bid={first.bid} score={first.score} ({first.source})")

            # An endpoint that takes ~20 ms cannot meet a 15 ms deadline: the
            # call gives up at the deadline and the handler falls back.
            late = await server.handle(requests[0], endpoint="slow", deadline_s=DEADLINE_MS / 1000)
            print(f"slow endpoint: bid={late.bid} ({late.source}) after {late.took_ms:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--deadline-ms", type=float, default=DEADLINE_MS, help="the handler's deadline"
    )
    asyncio.run(main(parser.parse_args().deadline_ms))
