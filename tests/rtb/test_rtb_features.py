"""Feature spec: hand-computed rows, JSON round trip, validation."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from gateway.rtb import (
    Feature,
    FeatureSpec,
    default_feature_spec,
    load_bundled_spec,
    parse_bid_request,
)
from gateway.rtb._useragent import CTV, DESKTOP, MOBILE, TABLET, UNKNOWN, device_class
from gateway.rtb.features import target_feature_spec

FIXTURES = Path(__file__).parent / "fixtures"
# Wednesday 2024-06-05 14:30:00 UTC
WEDNESDAY_1430 = 1_717_597_800.0


def spec_with_vocab() -> FeatureSpec:
    return default_feature_spec().with_vocabularies(
        {
            "advertiser": ["8953", "other"],
            "domain": ["a.com", "www.foobar.com", "com.yahoo.weather"],
            "region": ["USA/CA", "DEU/BE"],
            "city": ["DEU/BE/Berlin"],
        }
    )


def test_default_spec_is_the_aws_seven() -> None:
    assert default_feature_spec().names == (
        "day_of_week", "hour", "advertiser", "domain", "region", "city", "device_type",
    )  # fmt: skip


def test_site_row_matches_hand_computed() -> None:
    request = parse_bid_request((FIXTURES / "banner_site_25.json").read_bytes())
    # Wednesday=2, 14h, publisher "8953" -> 1, www.foobar.com -> 2, DEU/BE -> 2,
    # DEU/BE/Berlin -> 1, Macintosh UA -> desktop (2)
    assert spec_with_vocab().to_csv_row(request, WEDNESDAY_1430) == b"2,14,1,2,2,1,2"
    assert spec_with_vocab().values(request, WEDNESDAY_1430) == [2, 14, 1, 2, 2, 1, DESKTOP]


def test_app_row_uses_bundle_and_unknown_buckets() -> None:
    request = parse_bid_request((FIXTURES / "video_app_26.json").read_bytes())
    # publisher unknown -> 0, bundle -> 3, USA/CA -> 1, city unknown -> 0, iPhone -> mobile
    assert spec_with_vocab().to_csv_row(request, WEDNESDAY_1430) == b"2,14,0,3,1,0,1"


def test_missing_sections_give_unknown_buckets() -> None:
    request = parse_bid_request((FIXTURES / "banner_formats_no_regs.json").read_bytes())
    assert spec_with_vocab().to_csv_row(request, 0.0) == b"3,0,0,0,0,0,0"  # 1970-01-01: Thursday


def test_hash_numeric_and_index_paths() -> None:
    spec = FeatureSpec(
        "t1",
        (
            Feature("pub", "hash", ("site.publisher.id",), buckets=64),
            Feature("floor", "numeric", ("imp.0.bidfloor",), default=-1.0),
            Feature("second_w", "numeric", ("imp.1.w",), default=-1.0),
            Feature("format", "categorical", ("imp.0.kind",), vocabulary=("banner", "video")),
            Feature("lat", "numeric", ("device.geo.lat",), default=0.5),
        ),
    )
    request = parse_bid_request((FIXTURES / "banner_site_25.json").read_bytes())
    expected_hash = zlib.crc32(b"8953") % 64 + 1
    assert spec.values(request, 0) == [expected_hash, 0.03, -1.0, 1, 0.5]
    assert spec.to_csv_row(request, 0) == f"{expected_hash},0.03,-1.0,1,0.5".encode()


def test_json_round_trip_and_bundled_spec() -> None:
    spec = spec_with_vocab()
    again = FeatureSpec.from_json(spec.to_json())
    assert again == spec and again.fingerprint() == spec.fingerprint()
    bundled = load_bundled_spec()
    assert bundled.names == target_feature_spec().names
    assert bundled.version.endswith(bundled.fingerprint())
    assert len(bundled.features[3].encoding) > 100
    assert FeatureSpec.from_json(bundled.to_json()) == bundled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": "1", "features": [{"name": "x", "transform": "magic"}]}, "unknown transform"),
        ({"version": "1", "features": [{"name": "x", "transform": "hash", "paths": ["site.id"]}]},
         "buckets"),
        ({"version": "1", "features": [{"name": "x", "transform": "numeric",
                                        "paths": ["site.nope"]}]}, "no field 'nope'"),
        ({"version": "1", "features": [{"name": "x", "transform": "numeric",
                                        "paths": ["site.cat"]}]}, "names a list"),
        ({"version": "1", "features": [{"name": "x", "transform": "categorical"}]}, "needs paths"),
        ({"version": "1", "features": [{"name": "x", "transform": "hour", "color": 1}]},
         "unknown keys"),
        ({"features": []}, "expected an object"),
        ({"version": "1", "features": []}, "no features"),
    ],
)  # fmt: skip
def test_invalid_specs_are_refused_at_load(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FeatureSpec.from_dict(data)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) Mobile/15E148", MOBILE),
        ("Mozilla/5.0 (Linux; Android 14; Pixel 8) Chrome/124.0 Mobile Safari/537.36", MOBILE),
        ("Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) Mobile/15E148 Safari/604.1", TABLET),
        ("Mozilla/5.0 (Linux; Android 13; SM-X710) Chrome/124.0 Safari/537.36", TABLET),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/124.0.0.0 Safari/537.36", DESKTOP),
        ("Mozilla/5.0 (SMART-TV; LINUX; Tizen 7.0) AppleWebKit/537.36", CTV),
        ("Roku/DVP-13.0 (13.0.0.4170-AE)", CTV),
        ("Mozilla/5.0 (Linux; Android 9; AFTMM Build/PS7633; wv) Mobile Safari/537.36", CTV),
        ("curl/8.0", UNKNOWN),
        (None, UNKNOWN),
        (3, CTV),
        (5, TABLET),
        (99, UNKNOWN),
    ],
)
def test_device_class(value: str | int | None, expected: int) -> None:
    assert device_class(value) == expected
