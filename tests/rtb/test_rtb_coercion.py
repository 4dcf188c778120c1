"""The loose types exchanges send (docs/reference/rtb-loose-types.md), and the fail-open path.

Each row of the coercion table (docs/reference/rtb-loose-types.md) has a case here: a canonical
request with one field swapped for its loose form must parse to the same
view, and so score on the same feature row, as the canonical request.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from gateway.rtb import BidFilter, Feature, FeatureSpec, InvalidBidRequest, Reason
from gateway.rtb.filter import InProcessResult
from gateway.rtb.request import MAX_TMAX, parse_bid_request, parse_record

CANONICAL: dict[str, Any] = {
    "id": "17",
    "imp": [
        {
            "id": "1",
            "banner": {"w": 300, "h": 250, "format": [{"w": 300, "h": 250}]},
            "bidfloor": 0.5,
            "bidfloorcur": "USD",
            "instl": 0,
            "secure": 1,
        }
    ],
    "site": {
        "id": "9",
        "domain": "news.example",
        "publisher": {"id": "123", "domain": "example"},
        "cat": ["IAB12"],
    },
    "device": {
        "ua": "Mozilla/5.0",
        "devicetype": 2,
        "ip": "192.0.2.1",
        "geo": {"country": "USA", "region": "CA", "city": "LA", "lat": 34.0, "lon": -118.0},
        "connectiontype": 2,
        "js": 1,
    },
    "user": {"id": "5", "yob": 1980},
    "regs": {"coppa": 0, "gdpr": 1, "gpp_sid": [7]},
    "tmax": 120,
    "at": 1,
    "bcat": ["IAB25"],
    "badv": ["42", "a.com"],
    "cur": ["USD"],
    "test": 0,
}


def loose(path: str, value: Any) -> bytes:
    """The canonical request with the field at ``path`` (dotted, list indexes as digits) set."""
    request = orjson.loads(orjson.dumps(CANONICAL))
    *parents, last = path.split(".")
    node = request
    for step in parents:
        node = node[int(step)] if step.isdigit() else node[step]
    node[int(last) if last.isdigit() else last] = value
    return orjson.dumps(request)


# (row of the table, path, loose value): each parses to the canonical view.
COERCED: list[tuple[str, str, Any]] = [
    ("string: integer", "imp.0.id", 1),
    ("string: integer", "site.publisher.id", 123),
    ("string: whole number", "site.publisher.id", 123.0),
    ("string: integer", "site.id", 9),
    ("string: integer", "id", 17),
    ("integer: text", "imp.0.banner.w", "300"),
    ("integer: text", "device.devicetype", "2"),
    ("integer: whole number", "imp.0.banner.h", 250.0),
    ("integer: whole-number text", "user.yob", "1980.0"),
    ("integer: text", "imp.0.banner.format.0.w", " 300 "),
    ("integer: text", "at", "1"),
    ("integer: text", "tmax", "120"),
    ("number: text", "imp.0.bidfloor", "0.5"),
    ("number: text", "device.geo.lat", "34"),
    ("number: integer", "device.geo.lon", -118),
    ("flag: boolean", "imp.0.secure", True),
    ("flag: boolean", "imp.0.instl", False),
    ("flag: text", "device.js", "1"),
    ("flag: text", "regs.coppa", "false"),
    ("flag: text", "imp.0.secure", "TRUE"),
    ("flag: boolean", "test", False),
    ("flag: boolean", "regs.gdpr", True),
    ("flag: text", "regs.gdpr", "1"),
    ("string list: integer item", "badv", [42, "a.com"]),
    ("string list: bare string", "cur", "USD"),
    ("string list: bare string", "bcat", "IAB25"),
    ("integer list: text item", "regs.gpp_sid", ["7"]),
    ("null: absent", "imp.0.bidfloorcur", None),
]


@pytest.mark.parametrize(("row", "path", "value"), COERCED, ids=[f"{r}:{p}" for r, p, _ in COERCED])
def test_a_loose_type_reads_as_its_canonical_value(row: str, path: str, value: Any) -> None:
    canonical = parse_bid_request(orjson.dumps(CANONICAL))
    assert parse_bid_request(loose(path, value)) == canonical, row


def test_a_loose_request_gets_the_canonical_feature_row() -> None:
    spec = FeatureSpec(
        "t",
        (
            Feature("floor", "numeric", ("imp.0.bidfloor",)),
            Feature("publisher", "hash", ("site.publisher.id",), buckets=97),
            Feature("w", "numeric", ("imp.0.w",)),
        ),
    )
    canonical = spec.record_csv_row(parse_record(orjson.dumps(CANONICAL)), 0)
    body = loose("imp.0", {**CANONICAL["imp"][0], "bidfloor": "0.5", "banner": {"w": "300"}})
    assert spec.record_csv_row(parse_record(loose("site.publisher.id", 123)), 0) == canonical
    assert spec.record_csv_row(parse_record(body), 0).split(b",")[0] == b"0.5"


def test_tmax_zero_means_no_limit_given() -> None:
    request = parse_bid_request(loose("tmax", 0))
    assert request.tmax is None
    bid_filter = BidFilter(ConstantScorer(), "e", default_budget=0.017)
    assert bid_filter.budget_for(request.tmax) == pytest.approx(0.017)


# A tmax of 400 digits: msgspec reads it as an int, which no float holds.
HUGE_TMAX = loose("tmax", 0).replace(b'"tmax":0', b'"tmax":' + b"9" * 400)


def test_tmax_up_to_max_tmax_is_read_and_a_budget_is_never_past_it() -> None:
    assert parse_bid_request(loose("tmax", MAX_TMAX)).tmax == MAX_TMAX == 2**31 - 1
    bid_filter = BidFilter(ConstantScorer(), "e")
    budget = bid_filter.budget_for(MAX_TMAX)
    assert budget == pytest.approx(MAX_TMAX / 1000 - 0.05)
    # A view built by hand is not checked by the parser: its tmax is clamped.
    assert bid_filter.budget_for(10**400) == bid_filter.budget_for(float("inf")) == budget


async def test_a_400_digit_tmax_is_unreadable_not_an_overflow() -> None:
    lenient = BidFilter(ConstantScorer(), "e", spec=ECHO)
    strict = BidFilter(ConstantScorer(), "e", spec=ECHO, strict=True)
    try:
        decision = await lenient.decide(HUGE_TMAX)
        assert (decision.keep, decision.reason) == (True, Reason.UNREADABLE)
        with pytest.raises(InvalidBidRequest):
            await strict.decide(HUGE_TMAX)
        view = parse_bid_request(loose("tmax", 0))
        view.tmax = 10**400  # a view built or changed by hand
        assert (await lenient.decide(view)).reason == Reason.SCORED_KEEP
    finally:
        await lenient.aclose()
        await strict.aclose()


UNREADABLE: list[tuple[str, bytes, str]] = [
    ("not_json", b"{not json", "not JSON"),
    ("invalid", b'{"id": "x", "imp": []}', "imp is empty"),
    ("invalid", loose("imp.0.banner.w", "wide"), "imp[0].banner.w: expected integer"),
    ("invalid", loose("imp.0.bidfloor", "0.5 USD"), "imp[0].bidfloor: expected number"),
    ("invalid", loose("imp.0.secure", "yes"), "imp[0].secure: expected 0 or 1"),
    ("invalid", loose("tmax", -1), "tmax: must be >= 0"),
    ("invalid", loose("tmax", True), "tmax: expected integer, got boolean"),
    ("invalid", loose("tmax", MAX_TMAX + 1), "tmax: must be <= 2147483647 (ms)"),
    ("invalid", loose("tmax", "1e300"), "tmax: must be <= 2147483647 (ms)"),
    ("invalid", loose("tmax", 1e300), "tmax: must be <= 2147483647 (ms)"),
    ("not_json", HUGE_TMAX, "not JSON: number is infinity"),
    ("invalid", loose("imp.0.id", 1.5), "imp[0].id: expected string, got number"),
    ("invalid", loose("device.geo.lat", "nan"), "device.geo.lat: expected number"),
]


@pytest.mark.parametrize(("reason", "body", "message"), UNREADABLE)
def test_what_is_still_unreadable_is_named(reason: str, body: bytes, message: str) -> None:
    with pytest.raises(InvalidBidRequest) as info:
        parse_bid_request(body)
    assert message in str(info.value) and info.value.reason == reason


class ConstantScorer:
    def __init__(self) -> None:
        self.rows = 0

    async def invoke(
        self, endpoint: str, body: bytes, *, content_type: str, accept: str, timeout: float | None
    ) -> InProcessResult:
        rows = body.count(b"\n") + 1
        self.rows += rows
        return InProcessResult(b"\n".join([b"0.5"] * rows))


ECHO = FeatureSpec("t", (Feature("floor", "numeric", ("imp.0.bidfloor",)),))


@pytest.mark.parametrize(("reason", "body", "message"), UNREADABLE)
async def test_the_library_keeps_an_unreadable_request_unscored(
    reason: str, body: bytes, message: str
) -> None:
    scorer = ConstantScorer()
    bid_filter = BidFilter(scorer, "e", spec=ECHO)
    try:
        decision = await bid_filter.decide(body)
    finally:
        await bid_filter.aclose()
    assert (decision.keep, decision.score, decision.reason) == (True, None, Reason.UNREADABLE)
    stats = bid_filter.stats
    assert (stats.kept, stats.unreadable, stats.unreadable_reasons) == (1, 1, {reason: 1})
    assert scorer.rows == 0


async def test_strict_mode_raises_instead() -> None:
    bid_filter = BidFilter(ConstantScorer(), "e", spec=ECHO, strict=True)
    with pytest.raises(InvalidBidRequest, match="imp is empty"):
        await bid_filter.decide(b'{"id": "x", "imp": []}')
    with pytest.raises(InvalidBidRequest, match="too large"):
        await bid_filter.decide(padded(70_000))
    assert bid_filter.stats.unreadable == 0
    await bid_filter.aclose()


def padded(size: int) -> bytes:
    """The canonical request padded (in an extension) to exactly ``size`` bytes."""
    base = orjson.dumps({**CANONICAL, "ext": {"pad": ""}})
    return base.replace(b'"pad":""', b'"pad":"' + b"x" * (size - len(base)) + b'"')


async def test_the_size_limit_is_a_setting_and_a_larger_request_is_kept_unscored() -> None:
    scorer = ConstantScorer()
    default = BidFilter(scorer, "e", spec=ECHO)
    larger = BidFilter(scorer, "e", spec=ECHO, max_request_bytes=128 * 1024)
    try:
        big = padded(70_000)
        assert len(big) == 70_000
        kept = await default.decide(big)
        scored = await larger.decide(big)
        at_limit = await default.decide(padded(64 * 1024))
    finally:
        await default.aclose()
        await larger.aclose()
    assert kept.reason is Reason.UNREADABLE
    assert default.stats.unreadable_reasons == {"too_large": 1}
    assert (scored.reason, scored.score) == (Reason.SCORED_KEEP, 0.5)
    assert at_limit.reason is Reason.SCORED_KEEP
    with pytest.raises(ValueError, match="max_request_bytes"):
        BidFilter(scorer, "e", max_request_bytes=0)


async def test_unreadable_requests_are_logged_once_per_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bid_filter = BidFilter(ConstantScorer(), "e", spec=ECHO)
    with caplog.at_level(logging.WARNING, logger="gateway.rtb"):
        for _ in range(50):
            await bid_filter.decide(b"{not json")
            await bid_filter.decide(b'{"id": "x", "imp": []}')
    await bid_filter.aclose()
    logged = [r.getMessage() for r in caplog.records if r.name == "gateway.rtb"]
    assert len(logged) == 2
    assert "not_json" in logged[0] and "imp is empty" in logged[1]
    assert bid_filter.stats.unreadable_reasons == {"not_json": 50, "invalid": 50}
