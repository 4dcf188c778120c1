"""BidFilter through the real path: Gateway -> emulator (xgboost model over text/csv).

The in-process evaluator is the reference: the emulator serves the same
bundled model, so every score must match it exactly and in row order.
Dead-model tests only check that each decision comes back failed-open well
inside a generous hang limit; no timing is asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb import (
    BidFilter,
    FilterPolicy,
    Reason,
    XGBoostModel,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.synth import sample_bodies
from gateway.rtb.xgb import BUNDLED_MODEL_PATH

NOW = 1_717_597_800.0
BODIES = sample_bodies(300, seed=23)
HANG_LIMIT = 10.0  # seconds: only catches a hang, never measures speed


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.default(seed=4)) as emu:
        yield emu


@pytest.fixture
async def gateway(emulator: Emulator) -> AsyncIterator[Gateway]:
    async with Gateway(
        region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")
    ) as gw:
        yield gw


def reference_scores(bodies: Sequence[bytes]) -> list[float]:
    """What the bundled model says for these requests, computed in-process."""
    spec = load_bundled_spec()
    model = XGBoostModel.load(BUNDLED_MODEL_PATH)
    body = b"\n".join(spec.to_csv_row(parse_bid_request(b), NOW) for b in bodies)
    return [float(line) for line in model.predict_csv(body).split()]


async def test_batches_through_the_emulator_come_back_in_order(
    gateway: Gateway, emulator: Emulator
) -> None:
    policy = FilterPolicy(threshold=0.01)
    bid_filter = BidFilter(gateway, "bid-filter", policy=policy, max_batch=32, max_wait=0.002)
    try:
        async with asyncio.timeout(HANG_LIMIT):
            decisions = await bid_filter.decide_many(BODIES, now=NOW, budget=5.0)
    finally:
        await bid_filter.aclose()
    assert [d.score for d in decisions] == reference_scores(BODIES)
    assert all(d.keep == (d.score is not None and d.score >= 0.01) for d in decisions)
    stats = bid_filter.stats
    assert stats.failed_open == 0 and stats.batches == sum(stats.batch_sizes.values())
    assert max(stats.batch_sizes) > 1  # really batched: several rows per invocation
    assert emulator.stats.count("bid-filter") == stats.batches


@pytest.mark.parametrize(
    "fault",
    [
        {"error_rates": {"InternalFailure": 1.0}},
        {"stall_rate": 1.0, "stall_ms": 5_000.0},
        {"reset_rate": 1.0},
    ],
    ids=["internal-failure", "stall", "connection-reset"],
)
async def test_a_dead_model_fails_open_within_the_deadline(
    gateway: Gateway, emulator: Emulator, fault: dict[str, object]
) -> None:
    emulator.set_faults("bid-filter", **fault)
    bid_filter = BidFilter(gateway, "bid-filter", policy=FilterPolicy(threshold=1.0))
    try:
        async with asyncio.timeout(HANG_LIMIT):
            decisions = await bid_filter.decide_many(BODIES[:40], now=NOW, budget=0.3)
    finally:
        await bid_filter.aclose()
    # threshold 1.0 would drop everything scored: every keep here is a fail-open
    assert all(d.keep and d.reason is Reason.FAILED_OPEN for d in decisions)
    stats = bid_filter.stats
    assert stats.failed_open == stats.kept == 40 and stats.dropped == 0
    assert stats.timeouts + stats.errors == 40


async def test_exploration_and_shadow_through_the_real_path(gateway: Gateway) -> None:
    reference = reference_scores(BODIES)
    threshold = sorted(reference)[len(reference) // 2]  # drop about half when enforcing

    async def run(policy: FilterPolicy) -> list[Reason]:
        bid_filter = BidFilter(gateway, "bid-filter", policy=policy, max_batch=64)
        try:
            async with asyncio.timeout(HANG_LIMIT):
                decisions = await bid_filter.decide_many(BODIES, now=NOW, budget=5.0)
        finally:
            await bid_filter.aclose()
        assert [d.score for d in decisions] == reference
        return [d.reason for d in decisions]

    below = sum(score < threshold for score in reference)
    explored = await run(FilterPolicy(threshold=threshold, explore_share=0.5, seed=7))
    assert 0 < explored.count(Reason.EXPLORED) < below
    assert explored.count(Reason.EXPLORED) + explored.count(Reason.SCORED_DROP) == below
    shadowed = await run(FilterPolicy(threshold=threshold, shadow=True))
    assert shadowed.count(Reason.SHADOW) == below and Reason.SCORED_DROP not in shadowed
