"""Features that generalise: target encodings whose unseen value is the prior, the
out-of-vocabulary counters and warning, and the bundled model on real-shaped requests
that none of the project's generators produced (tests/rtb/fixtures/real_shaped)."""

from __future__ import annotations

import logging
import re
import statistics
from pathlib import Path

import orjson
import pytest

from bench.rtb_keep_by_hour import hand_written_requests, kept_by_hour
from gateway.rtb import (
    BUNDLED_MODEL_PATH,
    BidFilter,
    Feature,
    FeatureSpec,
    InProcessResult,
    XGBoostModel,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.request import parse_record
from gateway.rtb.synth import SyntheticTraffic

FIXTURES = Path(__file__).parent / "fixtures"
REAL_SHAPED = [
    line.encode()
    for line in (FIXTURES / "real_shaped" / "requests.jsonl").read_text().splitlines()
    if line.strip()
]
WEDNESDAY_1430 = 1_717_597_800.0
RTB_HOW_TO = Path(__file__).parents[2] / "docs" / "how-to" / "rtb.md"

SPEC = FeatureSpec(
    "t",
    (
        Feature("domain", "target", ("site.domain", "app.bundle"), encoding=(("a.com", 0.25),)),
        Feature("format", "target", ("imp.0.kind",), encoding=(("banner", 0.5),), default=0.125),
        Feature("app", "present", ("app",)),
    ),
)


def request(domain: str | None, kind: str = "banner", channel: str = "site") -> bytes:
    inventory = {} if domain is None else {"domain" if channel == "site" else "bundle": domain}
    return orjson.dumps({"id": "r", "imp": [{"id": "1", kind: {}}], channel: inventory})


def test_a_known_value_reads_its_rate_and_an_unseen_one_the_prior() -> None:
    spec = FeatureSpec(SPEC.version, SPEC.features)
    assert spec.values(parse_bid_request(request("a.com")), 0) == [0.25, 0.5, 0]
    assert spec.values(parse_bid_request(request("b.com", "video")), 0) == [0.0, 0.125, 0]
    assert spec.record_csv_row(parse_record(request("b.com", channel="app")), 0) == b"0.0,0.5,1"
    assert spec.to_csv_row(parse_bid_request(request(None)), 0) == b"0.0,0.5,0"
    # b.com twice (domain), video once (format); an absent domain is not "unknown".
    assert spec.out_of_vocabulary() == (4, {"domain": 2, "format": 1})


def test_encodings_round_trip_and_are_checked() -> None:
    assert FeatureSpec.from_json(SPEC.to_json()) == SPEC
    assert orjson.loads(SPEC.to_json())["features"][0]["encoding"] == {"a.com": 0.25}
    with pytest.raises(ValueError, match="finite"):
        Feature("x", "target", ("site.domain",), encoding=(("a", float("nan")),))
    with pytest.raises(ValueError, match="vocabulary is for categorical"):
        SPEC.with_vocabularies({"domain": ["x.com"]})  # would be ignored: refused instead


async def test_the_filter_exports_and_warns_on_unknown_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = FeatureSpec(SPEC.version, SPEC.features)
    bid_filter = BidFilter(ConstantScorer(), "e", spec=spec, oov_window=10)
    with caplog.at_level(logging.WARNING, logger="gateway.rtb"):
        await bid_filter.decide_many([request("a.com")] * 10)  # known: no warning
        await bid_filter.decide_many([request("new.example")] * 10 + [request("a.com")])
    await bid_filter.aclose()
    stats = bid_filter.stats
    assert (stats.rows, stats.out_of_vocabulary) == (21, {"domain": 10, "format": 0})
    warnings = [r.getMessage() for r in caplog.records if "out of vocabulary" in r.getMessage()]
    assert warnings == [
        "features out of vocabulary in the last 10 rows (warning past 50%): domain 100%"
    ]


class ConstantScorer:
    async def invoke(
        self, endpoint: str, body: bytes, *, content_type: str, accept: str, timeout: float | None
    ) -> InProcessResult:
        return InProcessResult(b"\n".join(b"0.5" for _ in body.splitlines()))


def bundled_scores(bodies: list[bytes], now: float = WEDNESDAY_1430) -> list[float]:
    spec = load_bundled_spec()
    model = XGBoostModel.load(BUNDLED_MODEL_PATH)
    return model.predict_rows([spec.values(parse_bid_request(b), now) for b in bodies])


@pytest.mark.parametrize(
    ("hours", "share"), [(-10.0, 0.4), (-6.0, 0.25), (0.0, 0.75), (6.0, 0.75)]
)  # from Wednesday 14:30 UTC: 04:30, 08:30, 14:30 and 20:30
def test_the_bundled_model_keeps_real_shaped_requests(hours: float, share: float) -> None:
    """Requests from real exchanges' shapes (none generated here): the model trained with
    vocabulary indexes kept 0 of these 34 at the default threshold (0.01) at 14:30; unseen
    inventory now scores near its segment's base rate. The hour is a feature: fewer are
    kept in the hours the training traffic bid least (33 of 34 at 14:30, 9 at 08:30)."""
    assert len(REAL_SHAPED) >= 30
    scores = bundled_scores(REAL_SHAPED, WEDNESDAY_1430 + hours * 3600)
    kept = sum(score >= 0.01 for score in scores)
    assert kept >= share * len(scores), sorted(scores)
    if share == 0.75:
        assert 0.01 < statistics.median(scores) < 0.1


def test_the_share_kept_depends_on_the_hour_and_the_docs_state_its_range() -> None:
    """The docs gave the share at 14:30 UTC alone ("keeps 39 of 40"), true at that hour."""
    bodies = hand_written_requests()
    kept = kept_by_hour(bodies)  # Wednesday, each hour's half hour, threshold 0.01
    assert len(bodies) == 40 and len(kept) == 24
    assert kept[14] == 39 and min(kept) < max(kept)
    assert min(kept) >= len(bodies) / 4  # at no hour less than a quarter
    text = " ".join(RTB_HOW_TO.read_text().split())
    claim = re.search(r"keeps (\d+) to (\d+) of (\d+) at the default threshold", text)
    assert claim is not None, "the RTB how-to states the range kept over the day"
    assert tuple(map(int, claim.groups())) == (min(kept), max(kept), len(bodies))
    mean = round(100 * sum(kept) / (24 * len(bodies)))
    assert f"{mean}% over the day (`python -m bench.rtb_keep_by_hour`)" in text


@pytest.mark.parametrize(
    ("kind", "channel"),
    [(k, c) for k in ("banner", "video", "native") for c in ("site", "app")] + [("audio", "app")],
)  # the generator's segments (it has no audio on sites)
def test_a_request_unlike_training_scores_near_its_segment_base_rate(
    kind: str, channel: str
) -> None:
    segment = [
        item.propensity
        for item in SyntheticTraffic(77).generate(4000)
        if f'"{kind}":' in item.body.decode() and f'"{channel}":' in item.body.decode()
    ]
    base = statistics.mean(segment)
    body = orjson.loads(request("never.seen.example", kind, channel))
    body[channel]["publisher"] = {"id": "never-seen"}
    body["device"] = {"devicetype": 2, "geo": {"country": "ZZZ", "region": "Q", "city": "X"}}
    (score,) = bundled_scores([orjson.dumps(body)])
    assert base / 3 < score < base * 3, (base, score)
