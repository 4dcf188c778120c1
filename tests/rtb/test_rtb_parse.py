"""Parsing OpenRTB 2.5/2.6 bid requests into the typed view."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.rtb import BidRequest, InvalidBidRequest, parse_bid_request

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> BidRequest:
    return parse_bid_request((FIXTURES / name).read_bytes())


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_parses(path: Path) -> None:
    request = parse_bid_request(path.read_bytes())
    assert request.id
    assert request.imp


def test_banner_site_25() -> None:
    request = load("banner_site_25.json")
    imp = request.imp[0]
    assert (imp.kind, imp.w, imp.h, imp.bidfloor, imp.bidfloorcur) == (
        "banner",
        300,
        250,
        0.03,
        "USD",
    )
    assert request.site is not None and request.app is None
    assert request.site.domain == "www.foobar.com"
    assert request.site.publisher is not None and request.site.publisher.id == "8953"
    assert request.publisher == request.site.publisher
    assert request.device is not None and request.device.has_ip and request.device.js is True
    assert request.device.geo is not None and request.device.geo.city == "Berlin"
    assert (request.regs.gdpr, request.regs.consent) == (1, "BOEFEAyOEFEAyAHABDENAI4AAAB9vABAASA")
    assert request.has_schain  # source.ext.schain, the 2.5 location
    assert (request.tmax, request.at, request.cur) == (120, 1, ("USD",))


def test_video_app_26() -> None:
    request = load("video_app_26.json")
    imp = request.imp[0]
    assert (imp.kind, imp.w, imp.h, imp.instl, imp.secure) == ("video", 640, 480, True, True)
    assert request.app is not None and request.app.bundle == "com.yahoo.weather"
    assert request.device is not None
    assert request.device.has_ip  # ipv6 only
    assert (request.device.devicetype, request.device.os, request.device.osv) == (4, "iOS", "17.4")
    assert request.device.geo is not None and request.device.geo.lat == 37.77
    assert request.user is not None
    assert (request.user.has_id, request.user.has_buyeruid, request.user.yob) == (True, True, 1984)
    regs = request.regs
    assert (regs.gdpr, regs.us_privacy, regs.consent, regs.coppa) == (
        0,
        "1YNN",
        "CONSENT-26",
        False,
    )
    assert regs.gpp is not None and regs.gpp.startswith("DBABMA") and regs.gpp_sid == (7, 8)
    assert request.has_schain
    assert (request.bcat, request.badv, request.at) == (("IAB25", "IAB26"), ("competitor.com",), 2)


def test_native_site_25_reads_ext_privacy() -> None:
    request = load("native_site_25.json")
    assert request.imp[0].kind == "native"
    assert request.regs.us_privacy == "1YYN" and request.regs.gdpr is None
    assert request.site is not None and request.site.pagecat == ("IAB12",)
    assert request.test is True and request.at == 2  # OpenRTB default auction type


def test_26_fields_win_over_25_ext() -> None:
    request = load("audio_app_26.json")
    assert request.imp[0].kind == "audio"
    assert request.regs.gdpr == 1  # regs.gdpr beats regs.ext.gdpr = 0
    assert request.regs.consent == "CONSENT-26"  # user.consent beats user.ext.consent
    assert request.regs.us_privacy == "1NNN"  # only in ext: the 2.5 value is used
    assert request.regs.gpp_sid == (2,)


def test_multi_imp_multi_format_and_coppa() -> None:
    request = load("ctv_video_26.json")
    assert [imp.kind for imp in request.imp] == ["video", "video"]
    assert request.imp[1].kinds == ("video", "banner")
    assert request.imp[1].formats == ((1920, 1080),)  # the ratio-only format has no size
    assert request.regs.coppa is True and request.user is None and not request.has_schain


def test_minimal_request_without_regs() -> None:
    request = load("banner_formats_no_regs.json")
    assert request.imp[0].formats == ((300, 250), (320, 50))
    assert request.device is None and request.site is None and request.app is None
    assert request.regs.gdpr is None and request.regs.gpp_sid == ()


def test_null_is_absent() -> None:
    body = b'{"id":"x","imp":[{"id":"1","banner":{"w":null}}],"site":null,"tmax":null}'
    request = parse_bid_request(body)
    assert request.imp[0].w is None and request.site is None and request.tmax is None


def _with(path: str, value: Any) -> bytes:
    """The banner fixture with one field replaced (value _DELETE removes it)."""
    request = json.loads((FIXTURES / "banner_site_25.json").read_text())
    *parents, last = path.split(".")
    node = request
    for step in parents:
        node = node[int(step)] if step.isdigit() else node[step]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return orjson.dumps(request)


_DELETE = object()

MALFORMED = [
    (b"", "not JSON"),
    (b"{", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "bid request: expected object, got array"),
    (b"[" * 5000 + b"]" * 5000, "nested deeper than 64 levels"),
    (_with("imp", _DELETE), "missing required field: imp"),
    (_with("id", _DELETE), "missing required field: id"),
    (_with("id", [7]), "id: expected string, got array"),
    (_with("imp", []), "imp is empty"),
    (_with("imp", {}), "imp: expected array, got object"),
    (_with("imp.0", "x"), "imp[0]: expected object, got string"),
    (_with("imp.0.banner.w", "300px"), "imp[0].banner.w: expected integer, got string"),
    (_with("imp.0.banner.h", 2.5), "imp[0].banner.h: expected integer, got number"),
    (_with("imp.0.banner", _DELETE), "imp[0]: needs one of banner, video, audio, native"),
    (_with("imp.0.id", _DELETE), "missing required field: imp[0].id"),
    (_with("imp.0.bidfloor", -1), "imp[0].bidfloor: must be >= 0"),
    (_with("imp.0.bidfloor", "0.5 USD"), "imp[0].bidfloor: expected number, got string"),
    (_with("imp.0.secure", 2), "imp[0].secure: expected 0 or 1, got integer"),
    (_with("imp.0.banner.format", [{"w": "1x"}]), "imp[0].banner.format[0].w: expected integer"),
    (_with("app", {"bundle": "com.x"}), "site and app are mutually exclusive"),
    (_with("site.publisher", []), "site.publisher: expected object, got array"),
    (_with("site.cat", ["IAB1", {}]), "site.cat[1]: expected string, got object"),
    (_with("device.geo.country", True), "device.geo.country: expected string, got boolean"),
    (_with("device.geo.lat", "north"), "device.geo.lat: expected number, got string"),
    (_with("device.devicetype", "phone"), "device.devicetype: expected integer, got string"),
    (_with("regs.ext.gdpr", "yes"), "regs.ext.gdpr: expected 0 or 1, got string"),
    (_with("regs.gpp_sid", [7, "eight"]), "regs.gpp_sid[1]: expected integer, got string"),
    (_with("user.ext.consent", 1.5), "user.ext.consent: expected string, got number"),
    (_with("tmax", -1), "tmax: must be >= 0"),
    (_with("tmax", "120ms"), "tmax: expected integer, got string"),
    (_with("cur", 840), "cur: expected array, got integer"),
    (_with("source.ext.schain", 1), "source.ext.schain: expected object, got integer"),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_requests_name_the_problem(body: bytes, message: str) -> None:
    with pytest.raises(InvalidBidRequest) as info:
        parse_bid_request(body)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_size_limit_is_configurable() -> None:
    body = (FIXTURES / "video_app_26.json").read_bytes()
    with pytest.raises(InvalidBidRequest, match="request too large"):
        parse_bid_request(body, max_bytes=100)
    assert parse_bid_request(body, max_bytes=len(body)).id == "1234567893"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "imp",
                    "banner",
                    "video",
                    "w",
                    "h",
                    "site",
                    "app",
                    "device",
                    "geo",
                    "regs",
                    "ext",
                    "gdpr",
                    "user",
                    "consent",
                    "format",
                    "tmax",
                ]
            )
            | st.text(max_size=5),
            children,
            max_size=6,
        )
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_arbitrary_json_only_raises_invalid_bid_request(value: Any) -> None:
    with contextlib.suppress(InvalidBidRequest):
        parse_bid_request(json.dumps(value).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_invalid_bid_request(data: bytes) -> None:
    with contextlib.suppress(InvalidBidRequest):
        parse_bid_request(data)


@settings(max_examples=200, deadline=None)
@given(imp=_json, device=_json, regs=_json)
def test_arbitrary_sections_in_a_valid_shell(imp: Any, device: Any, regs: Any) -> None:
    shell = {"id": "1", "imp": [{"id": "1", "banner": {}}, imp], "device": device, "regs": regs}
    with contextlib.suppress(InvalidBidRequest):
        parse_bid_request(json.dumps(shell).encode())
