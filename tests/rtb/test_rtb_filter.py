"""BidFilter: micro-batching, deadlines, fail-open, exploration, shadow mode."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
import pytest

from gateway.rtb import (
    BidFilter,
    Decision,
    Feature,
    FeatureSpec,
    FilterPolicy,
    InProcessScorer,
    Reason,
    parse_bid_request,
)
from gateway.rtb.synth import sample_bodies

# One feature, the floor price, which the fake model echoes back as the score.
ECHO_SPEC = FeatureSpec("echo", (Feature("floor", "numeric", ("imp.0.bidfloor",)),))


def bid(
    score: float, *, tmax: int | None = None, kind: str = "banner", country: str = "USA"
) -> bytes:
    request: dict[str, object] = {
        "id": "r",
        "imp": [{"id": "1", kind: {}, "bidfloor": score}],
        "device": {"geo": {"country": country}},
    }
    if tmax is not None:
        request["tmax"] = tmax
    return orjson.dumps(request)


@dataclass
class Result:
    body: bytes


class EchoScorer:
    """Scores each row with its first value; can be slow, fail, or miscount."""

    def __init__(self, delay: float = 0.0, fail: bool = False, drop_one: bool = False) -> None:
        self.delay = delay
        self.fail = fail
        self.drop_one = drop_one
        self.batches: list[int] = []
        self.timeouts: list[float | None] = []

    async def invoke(
        self,
        endpoint: str,
        body: bytes,
        *,
        content_type: str,
        accept: str,
        timeout: float | None,
    ) -> Result:
        assert (endpoint, content_type, accept) == ("bid-filter", "text/csv", "text/csv")
        rows = body.split(b"\n")
        self.batches.append(len(rows))
        self.timeouts.append(timeout)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("endpoint down")
        scores = [row.split(b",")[0] for row in rows]
        if self.drop_one:
            scores = scores[1:]
        return Result(b"\n".join(scores) + b"\n")


def make_filter(scorer: EchoScorer, **kwargs: object) -> BidFilter:
    options: dict[str, object] = {"spec": ECHO_SPEC, "policy": FilterPolicy(threshold=0.5)}
    options.update(kwargs)
    return BidFilter(scorer, "bid-filter", **options)  # type: ignore[arg-type]


async def test_keep_and_drop_by_threshold() -> None:
    bid_filter = make_filter(EchoScorer())
    keep, drop = await bid_filter.decide_many([bid(0.9), bid(0.1)])
    assert (keep.keep, keep.score, keep.reason) == (True, 0.9, Reason.SCORED_KEEP)
    assert (drop.keep, drop.score, drop.reason) == (False, 0.1, Reason.SCORED_DROP)
    stats = bid_filter.stats
    assert (stats.kept, stats.dropped, stats.batches, stats.batch_sizes) == (1, 1, 1, {2: 1})


async def test_batches_form_by_size_and_keep_order() -> None:
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, max_batch=4, max_wait=0.05)
    scores = [i / 10 for i in range(10)]
    decisions = await bid_filter.decide_many([bid(s, tmax=5000) for s in scores], now=0)
    assert [d.score for d in decisions] == scores  # row i <-> line i
    assert scorer.batches == [4, 4, 2]  # two full batches at once, the rest flushed later
    assert bid_filter.stats.batch_sizes == {4: 2, 2: 1}


async def test_batch_forms_by_wait() -> None:
    # Two requests in different loop turns share a batch: the first waits
    # max_wait for company. Only the lower bound of the wait is asserted.
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, max_batch=100, max_wait=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.ensure_future(bid_filter.decide(bid(0.9), budget=1.0))
    await asyncio.sleep(0)  # a later loop turn
    second = asyncio.ensure_future(bid_filter.decide(bid(0.8), budget=1.0))
    assert [(await first).score, (await second).score] == [0.9, 0.8]
    assert scorer.batches == [2]  # both waited for the same batch
    assert loop.time() - started >= 0.05


async def test_no_wait_still_batches_what_arrives_in_one_loop_turn() -> None:
    # max_wait=0 sends at the end of the turn: a burst shares one call
    # instead of making one call per request.
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, max_batch=100, max_wait=0.0)
    burst = [bid_filter.submit(bid(s / 10, tmax=5000), now=0) for s in range(5)]
    await asyncio.sleep(0)
    later = bid_filter.submit(bid(0.9, tmax=5000), now=0)
    decisions = [await future for future in [*burst, later]]
    assert [d.score for d in decisions] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.9]
    assert scorer.batches == [5, 1]


async def test_a_batch_of_min_batch_rows_goes_at_the_end_of_the_turn() -> None:
    # Group commit: enough rows for a call do not wait out max_wait...
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, max_batch=100, min_batch=3, max_wait=10.0)
    burst = [bid_filter.submit(bid(s / 10, tmax=5000), now=0) for s in range(4)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert all(future.done() for future in burst)
    assert scorer.batches == [4]  # the rows of the same turn went along
    # ...while fewer rows still wait for company.
    lonely = [bid_filter.submit(bid(0.9, tmax=5000), now=0) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert not any(future.done() for future in lonely)
    assert scorer.batches == [4]
    await bid_filter.aclose()


async def test_deadline_near_request_flushes_early() -> None:
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, max_batch=100, max_wait=1.0, call_time=0.002)
    loop = asyncio.get_running_loop()
    started = loop.time()
    relaxed = asyncio.ensure_future(bid_filter.decide(bid(0.9), budget=5.0))
    await asyncio.sleep(0)
    urgent = await bid_filter.decide(bid(0.7), budget=0.010)  # can't wait a second
    assert urgent.reason is Reason.SCORED_KEEP and urgent.score == 0.7
    assert loop.time() - started < 0.5
    assert (await relaxed).score == 0.9
    assert scorer.batches == [2]  # the urgent one took the waiting one along


async def test_tmax_sets_the_deadline() -> None:
    scorer = EchoScorer(delay=0.5)
    bid_filter = make_filter(scorer, tmax_margin=0.020, max_wait=0.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    decision = await bid_filter.decide(bid(0.9, tmax=60))  # 60 ms - 20 ms margin = 40 ms
    elapsed = loop.time() - started
    assert decision.reason is Reason.FAILED_OPEN and decision.keep and decision.score is None
    assert 0.035 <= elapsed < 0.2
    assert scorer.timeouts[0] is not None and scorer.timeouts[0] <= 0.040


async def test_no_budget_left_fails_open_at_once() -> None:
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, tmax_margin=0.050)
    decision = await bid_filter.decide(bid(0.1, tmax=30), budget=0.0)
    assert decision.reason is Reason.FAILED_OPEN and scorer.batches == []
    assert bid_filter.stats.timeouts == 1


async def test_a_tmax_shorter_than_the_margin_is_still_scored() -> None:
    """tmax 30 ms with a 50 ms margin used to leave no time at all: every such
    request failed open unscored. The margin is capped at half of tmax."""
    scorer = EchoScorer()
    bid_filter = make_filter(scorer, tmax_margin=0.050)
    decision = await bid_filter.decide(bid(0.1, tmax=30))
    assert decision.reason is Reason.SCORED_DROP and decision.score == 0.1
    assert scorer.timeouts[0] is not None and scorer.timeouts[0] <= 0.015


@pytest.mark.parametrize(
    ("margin", "share", "tmax", "budget"),
    [
        (0.050, 0.5, 200, 0.150),  # the margin: tmax is long
        (0.050, 0.5, 60, 0.030),  # half of tmax: shorter than the margin would leave
        (0.050, 0.25, 60, 0.045),
        (0.010, 0.5, 30, 0.020),
        (0.050, 0.5, None, 0.020),  # no tmax: the default budget
        (0.050, 0.5, 0, 0.020),
    ],
)
def test_scoring_budget_from_tmax(
    margin: float, share: float, tmax: int | None, budget: float
) -> None:
    bid_filter = make_filter(EchoScorer(), tmax_margin=margin, tmax_margin_share=share)
    assert bid_filter.budget_for(tmax) == pytest.approx(budget)


def test_a_margin_share_of_one_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="tmax_margin_share"):
        make_filter(EchoScorer(), tmax_margin_share=1.0)


async def test_slow_scorer_fails_open_within_each_deadline() -> None:
    bid_filter = make_filter(EchoScorer(delay=1.0), max_wait=0.0, max_batch=2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    early = asyncio.ensure_future(bid_filter.decide(bid(0.1), budget=0.020))
    late = asyncio.ensure_future(bid_filter.decide(bid(0.1), budget=0.060))
    assert (await early).reason is Reason.FAILED_OPEN
    assert loop.time() - started < 0.045  # the early one did not wait for the late one
    assert (await late).reason is Reason.FAILED_OPEN
    assert loop.time() - started < 0.2
    stats = bid_filter.stats
    assert (stats.failed_open, stats.kept, stats.dropped, stats.timeouts) == (2, 2, 0, 2)


@pytest.mark.parametrize("scorer", [EchoScorer(fail=True), EchoScorer(drop_one=True)])
async def test_errors_and_count_mismatch_fail_open_for_the_whole_batch(scorer: EchoScorer) -> None:
    bid_filter = make_filter(scorer)
    decisions = await bid_filter.decide_many([bid(0.1), bid(0.9), bid(0.2)])
    assert [d.reason for d in decisions] == [Reason.FAILED_OPEN] * 3
    assert all(d.keep for d in decisions)
    assert (bid_filter.stats.failed_open, bid_filter.stats.errors) == (3, 3)


async def test_exploration_share_is_seeded_and_close_to_configured() -> None:
    async def explored_flags(seed: int) -> list[bool]:
        policy = FilterPolicy(threshold=0.5, explore_share=0.1, seed=seed)
        bid_filter = make_filter(EchoScorer(), policy=policy, max_batch=64)
        decisions = await bid_filter.decide_many([bid(0.1)] * 4000)
        assert all(d.reason in (Reason.EXPLORED, Reason.SCORED_DROP) for d in decisions)
        assert all(d.keep == (d.reason is Reason.EXPLORED) for d in decisions)
        assert bid_filter.stats.explored == sum(d.keep for d in decisions)
        return [d.keep for d in decisions]

    flags = await explored_flags(3)
    assert 0.08 < sum(flags) / len(flags) < 0.12
    assert flags == await explored_flags(3)  # the same seed draws the same requests
    # high scores never count as explored
    policy = FilterPolicy(threshold=0.5, explore_share=1.0, seed=1)
    kept = await make_filter(EchoScorer(), policy=policy).decide(bid(0.9))
    assert kept.reason is Reason.SCORED_KEEP


async def test_shadow_mode_never_drops() -> None:
    policy = FilterPolicy(threshold=0.5, shadow=True, explore_share=0.5, seed=1)
    bid_filter = make_filter(EchoScorer(), policy=policy)
    decisions = await bid_filter.decide_many([bid(s / 100) for s in range(100)])
    assert all(d.keep for d in decisions)
    assert {d.reason for d in decisions} == {Reason.SHADOW, Reason.SCORED_KEEP}
    assert all(d.score is not None for d in decisions)
    stats = bid_filter.stats
    assert (stats.dropped, stats.shadowed, stats.kept) == (0, 50, 100)


async def test_thresholds_by_route_and_segment() -> None:
    policy = FilterPolicy(
        threshold=0.5,
        route_thresholds={"premium": 0.05},
        segment_thresholds={"format": {"video": 0.2}, "country": {"IND": 0.9}},
    )
    bid_filter = make_filter(EchoScorer(), policy=policy)
    assert (await bid_filter.decide(bid(0.3, kind="video"))).keep  # video: 0.2
    assert not (await bid_filter.decide(bid(0.3))).keep  # default 0.5
    assert not (await bid_filter.decide(bid(0.6, country="IND"))).keep  # IND: 0.9
    assert (await bid_filter.decide(bid(0.1, country="IND"), route="premium")).keep
    with pytest.raises(ValueError, match="unknown segment"):
        FilterPolicy(segment_thresholds={"color": {"red": 0.1}})
    with pytest.raises(
        ValueError, match=r"^config error at rtb\.threshold: must be between 0 and 1"
    ):
        FilterPolicy(threshold=1.5)


async def test_parsed_requests_and_invalid_bytes() -> None:
    bid_filter = make_filter(EchoScorer())
    assert (await bid_filter.decide(parse_bid_request(bid(0.7)))).score == 0.7
    unreadable = await bid_filter.decide(b'{"id": "x", "imp": []}')
    assert (unreadable.keep, unreadable.reason) == (True, Reason.UNREADABLE)


async def test_aclose_fails_pending_requests_open() -> None:
    bid_filter = make_filter(EchoScorer(), max_wait=10.0)
    pending = asyncio.ensure_future(bid_filter.decide(bid(0.1), budget=10.0))
    await asyncio.sleep(0)
    await bid_filter.aclose()
    assert (await pending).reason is Reason.FAILED_OPEN


async def test_bundled_model_end_to_end_in_process() -> None:
    scorer = InProcessScorer()
    bid_filter = BidFilter(scorer, "bid-filter", policy=FilterPolicy(threshold=0.005))
    decisions = await bid_filter.decide_many(sample_bodies(200, seed=99), now=1_717_597_800.0)
    assert len(decisions) == 200
    assert all(d.score is not None and 0.0 < d.score < 1.0 for d in decisions)
    assert {d.reason for d in decisions} <= {Reason.SCORED_KEEP, Reason.SCORED_DROP}
    assert scorer.calls == bid_filter.stats.batches


def test_a_decision_is_an_immutable_value() -> None:
    decision = Decision(False, 0.125, Reason.SCORED_DROP)
    assert (decision.keep, decision.score, decision.reason) == (False, 0.125, Reason.SCORED_DROP)
    assert decision == Decision(False, 0.125, Reason.SCORED_DROP)
    assert decision != Decision(True, 0.125, Reason.EXPLORED)
    assert len({decision, Decision(False, 0.125, Reason.SCORED_DROP)}) == 1
    assert repr(decision) == (
        "Decision(keep=False, score=0.125, reason=<Reason.SCORED_DROP: 'scored_drop'>)"
    )
    with pytest.raises(AttributeError):
        decision.keep = True  # type: ignore[misc]
    match decision:
        case Decision(False, score, Reason.SCORED_DROP):
            assert score == 0.125
        case _:
            pytest.fail("positional pattern did not match")
