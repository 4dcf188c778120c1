"""The record path (`parse_record`, `record_csv_row`) against the typed view path.

BidFilter turns raw bytes into a record and reads its feature row from it,
never building the view; the sidecar and `decide(view)` go through
`parse_bid_request` and `to_csv_row`. Both must accept and refuse exactly the
same requests, with the same error, and give the same view and the same row.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.rtb import (
    App,
    BidRequest,
    Device,
    Feature,
    FeatureSpec,
    FilterPolicy,
    Geo,
    Imp,
    InvalidBidRequest,
    Publisher,
    Regs,
    Site,
    User,
    default_feature_spec,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb.request import parse_record, record_index, record_view
from gateway.rtb.synth import sample_bodies

FIXTURES = Path(__file__).parent / "fixtures"
TIMES = (1_717_597_800, 1_717_372_800, 1_717_900_000 + 3599)

# Every path kind a spec can name: nested, list-indexed, bool and float leaves,
# fields the bundled spec never reads, and each transform.
WIDE_SPEC = FeatureSpec(
    "wide",
    (
        Feature("hour", "hour"),
        Feature("dow", "day_of_week"),
        Feature("floor", "numeric", ("imp.0.bidfloor",), default=-1.0),
        Feature("second_floor", "numeric", ("imp.1.bidfloor",), default=-2.0),
        Feature("w", "numeric", ("imp.0.w",)),
        Feature("kind", "categorical", ("imp.0.kind",), vocabulary=("banner", "video")),
        Feature("cur", "hash", ("imp.0.bidfloorcur",), buckets=7),
        Feature("secure", "numeric", ("imp.0.secure",), default=0.5),
        Feature("page", "hash", ("site.page", "app.bundle", "site.domain"), buckets=1000),
        Feature("pub", "hash", ("app.publisher.domain", "site.publisher.domain"), buckets=50),
        Feature("geo", "hash", ("user.geo.country", "device.geo.city"), "join", buckets=99),
        Feature("lat", "numeric", ("device.geo.lat",)),
        Feature("ip", "numeric", ("device.has_ip",)),
        Feature("js", "numeric", ("device.js",), default=3.0),
        Feature("device", "device_class", ("device.ua", "device.devicetype")),
        Feature("gdpr", "numeric", ("regs.gdpr",), default=9.0),
        Feature("coppa", "numeric", ("regs.coppa",)),
        Feature("consent", "hash", ("regs.consent",), buckets=5),
        Feature("buyer", "numeric", ("user.has_buyeruid",)),
        Feature("yob", "numeric", ("user.yob",)),
        Feature("schain", "numeric", ("has_schain",)),
        Feature("tmax", "numeric", ("tmax",)),
        Feature("test", "numeric", ("test",)),
        Feature("id", "hash", ("id",), buckets=3),
    ),
)
SPECS = (load_bundled_spec(), default_feature_spec(), WIDE_SPEC)

# Values a mutation writes into a request: wrong types, nulls, edge numbers,
# and objects that open the optional branches (ext, schain, gpp_sid...).
VALUES: tuple[Any, ...] = (
    None, 0, 1, 2, -1, 0.5, -0.5, 3.0, True, False, "", "x", "1", [], [1], ["a"],
    ["a", 2], {}, {"w": 1}, {"schain": {}}, {"gdpr": 1}, {"consent": 3},
    {"gpp_sid": [1, "x"]}, {"w": 300, "h": 250}, [{"w": 1, "h": 2}], [{"w": "1"}],
    10**30,
)  # fmt: skip
KEYS = (
    "ext", "schain", "consent", "gpp", "gpp_sid", "us_privacy", "gdpr", "coppa", "geo", "w",
    "h", "format", "banner", "video", "audio", "native", "publisher", "ipv6", "ip", "js",
    "lat", "lon", "id", "site", "app", "user", "cat", "pagecat", "sectioncat", "secure",
    "instl", "bidfloor", "bidfloorcur", "test", "bcat", "badv", "cur", "tmax", "at",
    "source", "devicetype", "buyeruid", "yob", "gender", "city", "region", "country",
)  # fmt: skip


def outcome_of_view(body: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse_bid_request(body)
    except InvalidBidRequest as invalid:
        return "invalid", str(invalid)


def outcome_of_record(body: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse_record(body)
    except InvalidBidRequest as invalid:
        return "invalid", str(invalid)


def assert_same(body: bytes) -> bool:
    """Both paths agree on `body`; True if it is a valid request."""
    view_kind, view = outcome_of_view(body)
    record_kind, record = outcome_of_record(body)
    assert view_kind == record_kind, body
    if view_kind == "invalid":
        assert view == record, body  # the very same message
        return False
    rebuilt = record_view(record)
    assert rebuilt == view, body
    assert repr(asdict(rebuilt)) == repr(asdict(view)), body  # 1 vs 1.0 vs True too
    for spec in SPECS:
        for now in TIMES:
            row = spec.to_csv_row(view, now)
            assert spec.record_csv_row(record, now) == row, (spec.version, body)
            assert row == ",".join(map(str, spec.values(view, now))).encode()
    return True


def nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from nodes(child, (*path, index))


def mutate(request: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Replace, delete or add a few values anywhere in the request."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        everything = list(nodes(request))
        path, _ = rng.choice(everything)
        if path and rng.random() < 0.5:
            parent: Any = request
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict) and rng.random() < 0.15:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(VALUES))
        else:
            _, container = rng.choice([(p, n) for p, n in everything if isinstance(n, dict | list)])
            if isinstance(container, dict):
                container[rng.choice(KEYS)] = copy.deepcopy(rng.choice(VALUES))
            else:
                container.append(copy.deepcopy(rng.choice(VALUES)))
    return request


def test_records_follow_the_view_field_order() -> None:
    """`record_view` builds views positionally: a record's length is its class's field count."""
    record = parse_record((FIXTURES / "video_app_26.json").read_bytes())
    assert len(record) == len(fields(BidRequest))
    assert len(record[1][0]) == len(fields(Imp))
    assert len(record[3]) == len(fields(App)) and len(record[3][3]) == len(fields(Publisher))
    assert len(record[4]) == len(fields(Device)) and len(record[4][7]) == len(fields(Geo))
    assert len(record[5]) == len(fields(User)) and len(record[6]) == len(fields(Regs))
    assert (
        record_index(BidRequest, "tmax") == 8
        and record[8] == parse_bid_request((FIXTURES / "video_app_26.json").read_bytes()).tmax
    )
    assert record_index(Site, "publisher") == record_index(App, "publisher") == 3


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_fixtures_agree(path: Path) -> None:
    assert assert_same(path.read_bytes())


def test_synthetic_traffic_agrees() -> None:
    for seed in (1, 2, 3):
        for body in sample_bodies(700, seed=seed):
            assert assert_same(body)


def test_mutated_requests_agree_on_views_rows_and_errors() -> None:
    rng = random.Random(7)
    bases = [json.loads(body) for body in sample_bodies(200, seed=4)]
    bases += [json.loads(path.read_bytes()) for path in sorted(FIXTURES.glob("*.json"))]
    valid = 0
    for _ in range(6000):
        request = mutate(copy.deepcopy(rng.choice(bases)), rng)
        valid += assert_same(json.dumps(request).encode())
    assert 1000 < valid < 5000  # both branches well exercised


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b"{}",
        b'{"id": "1", "imp": []}',
        b'{"id": "1", "imp": [{"id": "1", "banner": {}}, 7]}',
        b'{"id": "1", "imp": [{"id": "1", "banner": {}}], "site": {}, "app": {}}',
        b'{"id": "1", "imp": [{"id": "1", "banner": {}}], "tmax": 0}',
        b'{"id": "1", "imp": [{"id": "1", "native": {}}], "site": null, "app": {"publisher": {}}}',
        b'{"id": "1", "imp": [{"id": "1", "banner": {}}, {"id": "2", "video": {"w": 1}}]}',
        b'{"id": "1", "imp": [{"id": "1", "audio": {}}], "user": {"ext": {"consent": "c"}}}',
        b'{"id": "1", "imp": [{"id": "1", "banner": {}}], "regs": {"gpp_sid": [], "ext": {}}}',
    ],
)
def test_edge_cases_agree(body: bytes) -> None:
    assert_same(body)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), children, max_size=5)
    ),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(imp=_json, device=_json, regs=_json, user=_json, site=_json)
def test_arbitrary_sections_agree(imp: Any, device: Any, regs: Any, user: Any, site: Any) -> None:
    shell = {
        "id": "1",
        "imp": [{"id": "1", "banner": {}}, imp],
        "device": device,
        "regs": regs,
        "user": user,
        "site": site,
    }
    assert_same(json.dumps(shell).encode())


def test_threshold_without_the_request_unless_segmented() -> None:
    plain = FilterPolicy(threshold=0.2, route_thresholds={"r": 0.3})
    assert plain.threshold_for(None) == 0.2
    assert plain.threshold_for(None, "r") == 0.3
    segmented = FilterPolicy(threshold=0.2, segment_thresholds={"format": {"video": 0.4}})
    with pytest.raises(ValueError, match="segment thresholds need the request"):
        segmented.threshold_for(None)
