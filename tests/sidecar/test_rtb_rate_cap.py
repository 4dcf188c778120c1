"""The bidders' rate cap: token buckets per bidder URL, the lowest-scored refused first,
shared out over the sidecar's workers."""

from __future__ import annotations

import asyncio
import json
import random
import time
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
from gateway.rtb.synth import sample_bodies
from gateway.sidecar import RtbConfig, Sidecar, SidecarProcess
from gateway.sidecar._ratecap import BidderCap
from tests.sidecar.test_rtb_proxy import KEEP, PATH, config, metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def settle(admitted: list[int | asyncio.Future[int]]) -> list[int]:
    return [item if isinstance(item, int) else await item for item in admitted]


async def test_a_bucket_spends_at_once_while_roomy_then_best_first_within_a_turn() -> None:
    clock = Clock()
    cap = BidderCap([100.0], burst_s=0.1, clock=clock)  # 10 tokens, roomy above 6
    first = [cap.admit(0.5) for _ in range(5)]
    assert first == [0, 0, 0, 0, 0]  # taken at once: 10 -> 5 tokens
    priorities = [0.3, 0.9, 0.1, 0.7, 0.5, 0.8, 0.2, 0.6, 0.4]
    waiting = [cap.admit(p) for p in priorities]
    assert all(isinstance(item, asyncio.Future) for item in waiting)
    answered = dict(zip(priorities, await settle(waiting), strict=True))
    assert sorted(p for p, target in answered.items() if target == 0) == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert sorted(p for p, target in answered.items() if target < 0) == [0.1, 0.2, 0.3, 0.4]
    assert (cap.admitted, cap.out_of_tokens) == (10, 4)
    clock.now += 0.051  # 51 ms at 100/s refill 5 tokens (and a tenth)
    assert await settle([cap.admit(0.0) for _ in range(6)]) == [0, 0, 0, 0, 0, -1]


async def test_over_the_cap_an_adaptive_cut_refuses_the_lowest_scores_at_once() -> None:
    clock = Clock()
    cap = BidderCap([1000.0], burst_s=0.01, clock=clock)
    draw = random.Random(4)
    refused: list[float] = []
    admitted: list[float] = []
    for _ in range(30):  # 3 s offered at 4000/s: four times the cap
        for _ in range(400):
            clock.now += 0.00025
            priority = draw.random()
            target = cap.admit(priority)
            if not isinstance(target, int):
                target = await target
            (admitted if target >= 0 else refused).append(priority)
    assert 0.7 < cap.cut < 0.8  # the cap takes a quarter: the top quarter of scores
    late = admitted[-2000:]
    assert len(admitted) <= 1000 * 3 + 10  # the rate, and one bucket
    assert min(late) >= cap.cut - 0.05
    assert cap.cut_off > 0.6 * len(refused)  # most refusals spent no token
    clock.now += 1.0  # traffic stops, then comes back under the cap: the cut goes
    for _ in range(3):
        clock.now += 0.1
        await settle([cap.admit(0.01)])
    assert cap.cut == float("-inf")


async def test_each_worker_takes_its_share_and_bidders_are_served_round_robin() -> None:
    clock = Clock()
    cap = BidderCap([40.0, None, 20.0], burst_s=0.5, share=4, clock=clock)
    assert cap.rates == [10.0, float("inf"), 5.0]
    targets = await settle([cap.admit(0.5) for _ in range(9)])
    assert targets[:3] == [0, 1, 2] and targets.count(1) >= 3
    only_capped = BidderCap([40.0], burst_s=0.01, share=4, clock=clock)  # 0.1 token: one
    assert await settle([only_capped.admit(0.5) for _ in range(3)]) == [0, -1, -1]


def test_the_cap_is_checked_against_the_bidders() -> None:
    table = {"bidders": ["http://a:1/bid", "http://b:1/bid"], "rate_cap": {"rps": 100}}
    parsed = RtbConfig.from_mapping({**table, "rate_cap": {"bidders": {"http://b:1/bid": 5}}})
    assert parsed.rate_cap.rates(parsed.bidders) == [None, 5.0]
    assert RtbConfig.from_mapping(table).rate_cap.rates(["x", "y"]) == [100.0, 100.0]
    with pytest.raises(ConfigError, match=r"^config error at rtb\.rate_cap: .*'http://c:1/bid'"):
        RtbConfig.from_mapping({**table, "rate_cap": {"bidders": {"http://c:1/bid": 5}}})
    with pytest.raises(ConfigError, match=r"^config error at rtb\.rate_cap\.rps: must be > 0"):
        RtbConfig.from_mapping({**table, "rate_cap": {"rps": 0}})


@pytest.fixture
async def rtb_emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=2)) as emu:
        yield emu


def bodies(count: int) -> list[bytes]:
    return [
        orjson.dumps({**orjson.loads(body), "tmax": 5000}) for body in sample_bodies(count, seed=21)
    ]


async def test_through_the_proxy_the_cap_forwards_the_best_scored_of_a_burst(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    # One token, never roomy: every kept request waits for the end of its turn. The
    # burst's scores come back in one batch (min_batch above it), decided in one turn.
    rtb: dict[str, Any] = {"rate_cap": {"rps": 2, "burst_s": 0.5}, "max_wait_ms": 300.0}
    rtb.update(min_batch=64, bidder_timeout_ms=2000.0)
    async with (
        Sidecar(config(rtb_emulator.url, [bidder_url], **rtb), "127.0.0.1", 0) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url, timeout=10.0) as http,
    ):
        burst = bodies(24)
        answers = await asyncio.gather(*(http.post(PATH, content=b, headers=KEEP) for b in burst))
        counters = await metrics(http)
    forwarded = [float(a.headers["x-bid-filter-score"]) for a in answers if a.status_code == 200]
    capped = [a for a in answers if a.headers.get("x-bid-filter-no-bid") == "rate_cap"]
    assert len(forwarded) + len(capped) == 24
    assert 1 <= len(forwarded) <= 2  # one token, and what refills while the burst lasts
    capped_scores = [float(a.headers["x-bid-filter-score"]) for a in capped]
    assert max(forwarded) > max(capped_scores)  # the best of the burst went to the bidder
    assert counters["sagemaker_gateway_rtb_no_bids_total{reason=rate_cap}"] == len(capped)
    assert len(bidder[0].received) == len(forwarded)


async def test_two_workers_together_stay_under_the_cap(
    rtb_emulator: Emulator, bidder: tuple[ToyBidder, Server], tmp_path: Path
) -> None:
    bidder_url = f"http://127.0.0.1:{bidder[1].port}/bid"
    file = tmp_path / "gateway.json"
    # 10/s a worker, one token each; a slow answer from this busy test process is no failure.
    rtb = {"rate_cap": {"rps": 20, "burst_s": 0.05}, "bidder_timeout_ms": 5000.0}
    file.write_text(json.dumps(config(rtb_emulator.url, [bidder_url], **rtb)))
    args = ("--workers", "2", "--log-level", "WARNING")
    process = await asyncio.to_thread(SidecarProcess.start, str(file), "127.0.0.1:0", args, None)
    try:
        assert process.admin_url is not None
        async with httpx.AsyncClient(base_url=process.admin_url, timeout=10.0) as admin:
            burst = bodies(16)
            started = time.monotonic()
            statuses: list[int] = []
            while time.monotonic() - started < 2.0:
                statuses += await asyncio.gather(*(fresh(process.url, b) for b in burst))
            elapsed = time.monotonic() - started
            counters = await metrics(admin)
    finally:
        await asyncio.to_thread(process.stop)
    forwarded = len(bidder[0].received)
    assert statuses.count(200) == forwarded
    assert forwarded <= 20 * elapsed + 2  # the cap, and one token per worker
    capped = counters["sagemaker_gateway_rtb_no_bids_total{reason=rate_cap}"]
    assert capped == statuses.count(204) > 0
    admitted = counters["sagemaker_gateway_rtb_rate_cap_total{outcome=admitted}"]
    assert admitted == forwarded


async def fresh(url: str, body: bytes) -> int:
    """One request on a new connection (so the kernel picks a worker)."""
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as http:
        return (await http.post(PATH, content=body, headers=KEEP)).status_code
