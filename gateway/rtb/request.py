"""OpenRTB 2.5 / 2.6 bid requests: a compact, validated, typed view.

Only the fields the pre-filter needs are kept; everything else is ignored,
as OpenRTB asks of receivers (unknown fields and extensions are legal).
Every type error is reported with its JSON path, and nothing is silently
dropped: a request is either parsed whole or rejected with
`InvalidBidRequest`.

`null` is treated as "absent" for optional fields: several exchanges send
it, and rejecting it would throw away otherwise sound traffic.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Final

import orjson

from gateway.rtb._structs import MAX_TMAX
from gateway.rtb._typed import NotTyped, decode_record

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "MAX_DEPTH",
    "MAX_TMAX",
    "App",
    "BidRequest",
    "Device",
    "Geo",
    "Imp",
    "InvalidBidRequest",
    "Publisher",
    "Record",
    "Regs",
    "Site",
    "User",
    "parse_bid_request",
    "parse_record",
    "record_index",
    "record_view",
]

DEFAULT_MAX_REQUEST_BYTES: Final = 64 * 1024
# How deep arrays and objects may nest in a bid request (OpenRTB itself needs
# about 8 levels). Deeper is refused: JSON readers that recurse per level (the
# standard library's, and many a bidder's) fail far below what orjson allows.
MAX_DEPTH: Final = 64

# Primary kind of a multi-format impression: the richest format present.
_KINDS: Final = ("video", "audio", "native", "banner")
# Every combination of present formats, indexed by a bit mask in _KINDS
# order (video = 8 ... banner = 1), so an impression's kinds are one lookup.
_KIND_SETS: Final = tuple(
    tuple(kind for bit, kind in zip((8, 4, 2, 1), _KINDS, strict=True) if mask & bit)
    for mask in range(16)
)


class InvalidBidRequest(ValueError):
    """A bid request that is not JSON, not OpenRTB, or breaks a rule.

    ``reason`` sorts it for counters and logs: ``too_large``, ``not_json``,
    ``duplicate_key``, ``too_deep`` or ``invalid`` (any other problem; the message names it).
    """

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class Imp:
    id: str
    kind: str  # "banner" | "video" | "audio" | "native" (richest one present)
    kinds: tuple[str, ...]  # every format object present, in _KINDS order
    w: int | None
    h: int | None
    formats: tuple[tuple[int, int], ...]  # banner.format[] sizes
    bidfloor: float
    bidfloorcur: str
    instl: bool
    secure: bool | None


@dataclass(slots=True)
class Publisher:
    id: str | None
    domain: str | None


@dataclass(slots=True)
class Site:
    id: str | None
    domain: str | None
    page: str | None
    publisher: Publisher | None
    cat: tuple[str, ...]
    sectioncat: tuple[str, ...]
    pagecat: tuple[str, ...]


@dataclass(slots=True)
class App:
    id: str | None
    domain: str | None
    bundle: str | None
    publisher: Publisher | None
    cat: tuple[str, ...]
    sectioncat: tuple[str, ...]
    pagecat: tuple[str, ...]


@dataclass(slots=True)
class Geo:
    country: str | None
    region: str | None
    city: str | None
    lat: float | None
    lon: float | None


@dataclass(slots=True)
class Device:
    ua: str | None
    devicetype: int | None
    os: str | None
    osv: str | None
    make: str | None
    model: str | None
    has_ip: bool  # ip or ipv6 present; the address itself is not kept
    geo: Geo | None
    connectiontype: int | None
    js: bool | None
    language: str | None


@dataclass(slots=True)
class User:
    has_id: bool
    has_buyeruid: bool
    yob: int | None
    gender: str | None
    geo: Geo | None


@dataclass(slots=True)
class Regs:
    coppa: bool
    gdpr: int | None
    consent: str | None
    us_privacy: str | None
    gpp: str | None
    gpp_sid: tuple[int, ...]


@dataclass(slots=True)
class BidRequest:
    id: str
    imp: tuple[Imp, ...]
    site: Site | None
    app: App | None
    device: Device | None
    user: User | None
    regs: Regs
    has_schain: bool
    tmax: int | None  # milliseconds
    at: int
    bcat: tuple[str, ...]
    badv: tuple[str, ...]
    cur: tuple[str, ...]
    test: bool

    @property
    def publisher(self) -> Publisher | None:
        inventory = self.site or self.app
        return inventory.publisher if inventory is not None else None


# --- records: the validated request before it becomes a view ------------------
#
# The validators return plain tuples ("records"), each in its view class's
# field order; `record_view` turns one into the dataclasses. BidFilter's hot
# path stops at the record: it needs a handful of values (the feature row,
# tmax), and the ten or so view objects of a request cost ~1.5 us to build,
# against ~4 us for all the checks. One validator serves both paths, so they
# cannot disagree on what is valid or on the error reported.

Record = tuple[Any, ...]

_NO_REGS_RECORD: Final[Record] = (False, None, None, None, None, ())
_NO_REGS: Final = Regs(*_NO_REGS_RECORD)
_EMPTY: Final[dict[str, Any]] = {}


def record_index(view_class: type, field_name: str) -> int:
    """Position of a view class's field in its record."""
    return [f.name for f in fields(view_class)].index(field_name)


def parse_bid_request(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> BidRequest:
    """Parse and validate one OpenRTB 2.5/2.6 bid request.

    Raises `InvalidBidRequest` (a `ValueError`) naming the JSON path of the
    first problem found. Work is bounded: oversized bodies are refused
    before parsing, and so are arrays and objects nested deeper than
    `MAX_DEPTH`.
    """
    return record_view(parse_record(data, max_bytes=max_bytes))


def parse_record(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> Record:
    """`parse_bid_request` without the view: the same checks, a `Record` out.

    Valid requests are decoded in C (`_typed`, msgspec structs); anything that
    path declines goes through the validators below, which accept it or name
    its first problem.
    """
    if len(data) > max_bytes:
        raise InvalidBidRequest(
            f"request too large: {len(data)} bytes > limit {max_bytes}", "too_large"
        )
    refuse_deep_nesting(data)
    try:
        return decode_record(data)
    except NotTyped:
        return validated_record(data)


def refuse_duplicate_keys(data: bytes | bytearray | memoryview | str) -> None:
    """Raise `InvalidBidRequest` if any JSON object in ``data`` repeats a key.

    JSON parsers keep one of the repeated values (orjson and msgspec the last,
    others the first), so a request with a repeated key can be scored on one
    value and read by a bidder on another. A proxy that forwards the bytes it
    scored must refuse such a request. This pass costs a few microseconds (the
    standard library's C scanner with a pairs hook), so the parser leaves it to
    its callers: `BidFilter` runs it on raw bodies, and so does the OpenRTB proxy.
    """
    text = bytes(data).decode("utf-8") if not isinstance(data, str) else data
    try:
        _PAIRS_DECODER.decode(text)
    except _DuplicateKey as duplicate:
        raise InvalidBidRequest(
            f"bid request: duplicate key {duplicate.args[0]!r}", "duplicate_key"
        ) from None
    except RecursionError:
        # This reader recurses per level. After `parse_record` (which refuses
        # more than MAX_DEPTH levels) it cannot get here; called on its own, it may.
        raise InvalidBidRequest(
            f"bid request: nested deeper than {MAX_DEPTH} levels", "too_deep"
        ) from None
    except ValueError as exc:  # the validators name any other problem
        raise InvalidBidRequest(f"not JSON: {exc}", "not_json") from None


# Every byte but the opening brackets, all but the brackets, and the brackets as
# signed steps (+1 opening, 0xff = -1 closing) for a running sum of the depth.
_NOT_OPENING: Final = bytes(b for b in range(256) if b not in b"[{")
_NOT_BRACKET: Final = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
# A JSON string, or an unterminated one with the rest of the input. A match from any
# quote succeeds, so each byte is read once: a pattern that had to fail on an
# unterminated string would rescan the rest from every quote after it (quadratic).
# Possessive repeats keep no backtracking state per escape.
_JSON_STRING: Final = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)


def refuse_deep_nesting(data: bytes | bytearray | memoryview | str) -> None:
    """Raise `InvalidBidRequest` if arrays and objects in ``data`` nest deeper than `MAX_DEPTH`.

    One pass in C for nearly every request: no more opening brackets than
    `MAX_DEPTH` (strings included) means no deeper nesting. Only a request
    with more is measured exactly, strings left out.
    """
    raw = data if isinstance(data, bytes) else _as_bytes(data)
    if len(raw.translate(None, _NOT_OPENING)) <= MAX_DEPTH:
        return
    if _nesting_depth(raw) > MAX_DEPTH:
        raise InvalidBidRequest(f"bid request: nested deeper than {MAX_DEPTH} levels", "too_deep")


def _as_bytes(data: bytearray | memoryview | str) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")  # a lone surrogate is the parser's to name
    return bytes(data)


def _nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (JSON or not), strings left out.

    An unterminated string runs to the end of ``raw``: no JSON reader goes past it.
    """
    skeleton = _JSON_STRING.sub(b"", raw).translate(_DEPTH_STEPS, _NOT_BRACKET)
    return max(itertools.accumulate(memoryview(skeleton).cast("b")), default=0)


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key[:80])
            seen.add(key)
    return obj


_PAIRS_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def validated_record(data: bytes | bytearray | memoryview | str) -> Record:
    """The record by the validators alone (the path that names every problem)."""
    try:
        root = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidBidRequest(f"not JSON: {exc}", "not_json") from None
    if type(root) is not dict:
        raise InvalidBidRequest(f"bid request: expected object, got {_json_type(root)}")
    return _bid_request(root)


def record_view(record: Record) -> BidRequest:
    """The typed view of a record from `parse_record`.

    One flat function (no helper per class): this runs for every request
    parsed into a view, and a call costs as much as building a small object.
    """
    imps = record[1]
    site = record[2]
    if site is not None:
        publisher = site[3]
        if publisher is not None:
            publisher = Publisher(*publisher)
        site = Site(site[0], site[1], site[2], publisher, site[4], site[5], site[6])
    app = record[3]
    if app is not None:
        publisher = app[3]
        if publisher is not None:
            publisher = Publisher(*publisher)
        app = App(app[0], app[1], app[2], publisher, app[4], app[5], app[6])
    device = record[4]
    if device is not None:
        geo = device[7]
        device = Device(
            device[0], device[1], device[2], device[3], device[4], device[5], device[6],
            None if geo is None else Geo(*geo), device[8], device[9], device[10],
        )  # fmt: skip
    user = record[5]
    if user is not None:
        geo = user[4]
        user = User(user[0], user[1], user[2], user[3], None if geo is None else Geo(*geo))
    regs = record[6]
    return BidRequest(
        record[0],
        (Imp(*imps[0]),) if len(imps) == 1 else tuple([Imp(*imp) for imp in imps]),
        site, app, device, user,
        _NO_REGS if regs is _NO_REGS_RECORD else Regs(*regs),
        record[7], record[8], record[9], record[10], record[11], record[12], record[13],
    )  # fmt: skip


# --- the validating readers -------------------------------------------------
#
# Straight-line code, one function per object: a field is one `dict.get`
# and one or two identity checks (`type(v) is str`), with the JSON path
# spelled out in the (cold) error branch. A generic `_opt_str(obj, key,
# path)` helper per field cost ~80 calls per request, more than the checks
# themselves. Fields are read in the same order as they are reported: the
# first problem found is the one named. Each returns its object's record.


def _bid_request(root: dict[str, Any]) -> Record:
    site_obj = root.get("site")
    if site_obj is not None and type(site_obj) is not dict:
        raise _bad("site", "object", site_obj)
    app_obj = root.get("app")
    if app_obj is not None and type(app_obj) is not dict:
        raise _bad("app", "object", app_obj)
    if site_obj is not None and app_obj is not None:
        raise InvalidBidRequest("site and app are mutually exclusive")
    user_obj = root.get("user")
    if user_obj is not None and type(user_obj) is not dict:
        raise _bad("user", "object", user_obj)
    tmax = root.get("tmax")
    if tmax is not None:
        if type(tmax) is not int:
            tmax = _integer(tmax, "tmax")
        if tmax <= 0:
            if tmax < 0:
                raise InvalidBidRequest(f"tmax: must be >= 0, got {tmax}")
            tmax = None  # 0: several exchanges' way of saying "no limit given"
        elif tmax > MAX_TMAX:
            raise InvalidBidRequest(f"tmax: must be <= {MAX_TMAX} (ms)")
    at = root.get("at")
    if at is None:
        at = 2  # OpenRTB's default: second-price auction
    elif type(at) is not int:
        at = _integer(at, "at")
    request_id = root.get("id")
    if type(request_id) is not str:
        if request_id is None:
            raise InvalidBidRequest("missing required field: id")
        request_id = _text(request_id, "id")
    imps = root.get("imp")
    # Nearly every request has one impression: read it without the list walk.
    imps = (_imp(imps[0], 0),) if type(imps) is list and len(imps) == 1 else _imps(imps)
    site = _site(site_obj) if site_obj is not None else None
    app = _app(app_obj) if app_obj is not None else None
    device = root.get("device")
    if device is not None:
        if type(device) is not dict:
            raise _bad("device", "object", device)
        device = _device(device)
    user = _user(user_obj) if user_obj is not None else None
    regs = _regs(root.get("regs"), user_obj)
    source = root.get("source")
    has_schain = False if source is None else _has_schain(source)
    bcat = root.get("bcat")
    bcat = () if bcat is None else _strings(bcat, "bcat")
    badv = root.get("badv")
    badv = () if badv is None else _strings(badv, "badv")
    cur = root.get("cur")
    cur = () if cur is None else _strings(cur, "cur")
    test = root.get("test")
    test = False if test is None else _flag(test, "test")
    return (
        request_id, imps, site, app, device, user, regs, has_schain,
        tmax, at, bcat, badv, cur, test,
    )  # fmt: skip


def _imps(raw: Any) -> tuple[Record, ...]:
    if type(raw) is not list:
        if raw is None:
            raise InvalidBidRequest("missing required field: imp")
        raise _bad("imp", "array", raw)
    if not raw:
        raise InvalidBidRequest("imp is empty")
    return tuple([_imp(item, i) for i, item in enumerate(raw)])


def _imp(obj: Any, index: int) -> Record:
    if type(obj) is not dict:
        raise _bad(f"imp[{index}]", "object", obj)
    banner = obj.get("banner")
    video = obj.get("video")
    audio = obj.get("audio")
    native = obj.get("native")
    kinds = _KIND_SETS[
        (video is not None) << 3 | (audio is not None) << 2 | (native is not None) << 1
        | (banner is not None)
    ]  # fmt: skip
    if not kinds:
        raise InvalidBidRequest(f"imp[{index}]: needs one of banner, video, audio, native")
    w = h = None
    formats: tuple[tuple[int, int], ...] = ()
    if banner is not None:
        if type(banner) is not dict:
            raise _bad(f"imp[{index}].banner", "object", banner)
        w = banner.get("w")
        if w is not None and type(w) is not int:
            w = _integer(w, f"imp[{index}].banner.w")
        h = banner.get("h")
        if h is not None and type(h) is not int:
            h = _integer(h, f"imp[{index}].banner.h")
        sizes = banner.get("format")
        if sizes is not None:
            formats = _formats(sizes, index)
    if video is not None:
        if type(video) is not dict:
            raise _bad(f"imp[{index}].video", "object", video)
        if w is None:
            w = video.get("w")
            if w is not None and type(w) is not int:
                w = _integer(w, f"imp[{index}].video.w")
            h = video.get("h")
            if h is not None and type(h) is not int:
                h = _integer(h, f"imp[{index}].video.h")
    if audio is not None and type(audio) is not dict:
        raise _bad(f"imp[{index}].audio", "object", audio)
    if native is not None and type(native) is not dict:
        raise _bad(f"imp[{index}].native", "object", native)
    bidfloor = obj.get("bidfloor")
    if bidfloor is None:
        bidfloor = 0.0
    else:
        kind = type(bidfloor)
        if kind is int:
            bidfloor = float(bidfloor)
        elif kind is not float:
            bidfloor = _number(bidfloor, f"imp[{index}].bidfloor")
        if bidfloor < 0:
            raise InvalidBidRequest(f"imp[{index}].bidfloor: must be >= 0, got {bidfloor}")
    imp_id = obj.get("id")
    if type(imp_id) is not str:
        if imp_id is None:
            raise InvalidBidRequest(f"missing required field: imp[{index}].id")
        imp_id = _text(imp_id, f"imp[{index}].id")
    bidfloorcur = obj.get("bidfloorcur")
    if bidfloorcur is not None and type(bidfloorcur) is not str:
        bidfloorcur = _text(bidfloorcur, f"imp[{index}].bidfloorcur")
    instl = obj.get("instl")
    instl = False if instl is None else _flag(instl, f"imp[{index}].instl")
    secure = obj.get("secure")
    if secure is not None:
        secure = _flag(secure, f"imp[{index}].secure")
    return (
        imp_id, kinds[0], kinds, w, h, formats, bidfloor, bidfloorcur or "USD", instl, secure
    )  # fmt: skip


def _formats(raw: Any, index: int) -> tuple[tuple[int, int], ...]:
    if type(raw) is not list:
        raise _bad(f"imp[{index}].banner.format", "array", raw)
    sizes = []
    for i, item in enumerate(raw):
        if type(item) is not dict:
            raise _bad(f"imp[{index}].banner.format[{i}]", "object", item)
        w = item.get("w")
        if w is not None and type(w) is not int:
            w = _integer(w, f"imp[{index}].banner.format[{i}].w")
        h = item.get("h")
        if h is not None and type(h) is not int:
            h = _integer(h, f"imp[{index}].banner.format[{i}].h")
        if w is not None and h is not None:
            sizes.append((w, h))  # wratio/hratio formats carry no fixed size
    return tuple(sizes)


def _publisher(obj: Any, parent: str) -> Record:
    if type(obj) is not dict:
        raise _bad(f"{parent}.publisher", "object", obj)
    publisher_id = obj.get("id")
    if publisher_id is not None and type(publisher_id) is not str:
        publisher_id = _text(publisher_id, f"{parent}.publisher.id")
    domain = obj.get("domain")
    if domain is not None and type(domain) is not str:
        domain = _text(domain, f"{parent}.publisher.domain")
    return (publisher_id, domain)


def _site(obj: dict[str, Any]) -> Record:
    site_id = obj.get("id")
    if site_id is not None and type(site_id) is not str:
        site_id = _text(site_id, "site.id")
    domain = obj.get("domain")
    if domain is not None and type(domain) is not str:
        domain = _text(domain, "site.domain")
    page = obj.get("page")
    if page is not None and type(page) is not str:
        page = _text(page, "site.page")
    publisher = obj.get("publisher")
    if publisher is not None:
        publisher = _publisher(publisher, "site")
    cat = obj.get("cat")
    cat = () if cat is None else _strings(cat, "site.cat")
    sectioncat = obj.get("sectioncat")
    sectioncat = () if sectioncat is None else _strings(sectioncat, "site.sectioncat")
    pagecat = obj.get("pagecat")
    pagecat = () if pagecat is None else _strings(pagecat, "site.pagecat")
    return (site_id, domain, page, publisher, cat, sectioncat, pagecat)


def _app(obj: dict[str, Any]) -> Record:
    app_id = obj.get("id")
    if app_id is not None and type(app_id) is not str:
        app_id = _text(app_id, "app.id")
    domain = obj.get("domain")
    if domain is not None and type(domain) is not str:
        domain = _text(domain, "app.domain")
    bundle = obj.get("bundle")
    if bundle is not None and type(bundle) is not str:
        bundle = _text(bundle, "app.bundle")
    publisher = obj.get("publisher")
    if publisher is not None:
        publisher = _publisher(publisher, "app")
    cat = obj.get("cat")
    cat = () if cat is None else _strings(cat, "app.cat")
    sectioncat = obj.get("sectioncat")
    sectioncat = () if sectioncat is None else _strings(sectioncat, "app.sectioncat")
    pagecat = obj.get("pagecat")
    pagecat = () if pagecat is None else _strings(pagecat, "app.pagecat")
    return (app_id, domain, bundle, publisher, cat, sectioncat, pagecat)


def _geo(obj: Any, parent: str) -> Record:
    if type(obj) is not dict:
        raise _bad(f"{parent}.geo", "object", obj)
    country = obj.get("country")
    if country is not None and type(country) is not str:
        country = _text(country, f"{parent}.geo.country")
    region = obj.get("region")
    if region is not None and type(region) is not str:
        region = _text(region, f"{parent}.geo.region")
    city = obj.get("city")
    if city is not None and type(city) is not str:
        city = _text(city, f"{parent}.geo.city")
    lat = obj.get("lat")
    if lat is not None and type(lat) is not float:
        lat = _number(lat, f"{parent}.geo.lat")
    lon = obj.get("lon")
    if lon is not None and type(lon) is not float:
        lon = _number(lon, f"{parent}.geo.lon")
    return (country, region, city, lat, lon)


def _device(obj: dict[str, Any]) -> Record:
    ip = obj.get("ip")
    if ip is not None and type(ip) is not str:
        ip = _text(ip, "device.ip")
    ipv6 = obj.get("ipv6")
    if ipv6 is not None and type(ipv6) is not str:
        ipv6 = _text(ipv6, "device.ipv6")
    ua = obj.get("ua")
    if ua is not None and type(ua) is not str:
        ua = _text(ua, "device.ua")
    devicetype = obj.get("devicetype")
    if devicetype is not None and type(devicetype) is not int:
        devicetype = _integer(devicetype, "device.devicetype")
    os = obj.get("os")
    if os is not None and type(os) is not str:
        os = _text(os, "device.os")
    osv = obj.get("osv")
    if osv is not None and type(osv) is not str:
        osv = _text(osv, "device.osv")
    make = obj.get("make")
    if make is not None and type(make) is not str:
        make = _text(make, "device.make")
    model = obj.get("model")
    if model is not None and type(model) is not str:
        model = _text(model, "device.model")
    geo = obj.get("geo")
    if geo is not None:
        geo = _geo(geo, "device")
    connectiontype = obj.get("connectiontype")
    if connectiontype is not None and type(connectiontype) is not int:
        connectiontype = _integer(connectiontype, "device.connectiontype")
    js = obj.get("js")
    if js is not None:
        js = _flag(js, "device.js")
    language = obj.get("language")
    if language is not None and type(language) is not str:
        language = _text(language, "device.language")
    has_ip = ip is not None or ipv6 is not None
    return (ua, devicetype, os, osv, make, model, has_ip, geo, connectiontype, js, language)


def _user(obj: dict[str, Any]) -> Record:
    user_id = obj.get("id")
    if user_id is not None and type(user_id) is not str:
        user_id = _text(user_id, "user.id")
    buyeruid = obj.get("buyeruid")
    if buyeruid is not None and type(buyeruid) is not str:
        buyeruid = _text(buyeruid, "user.buyeruid")
    yob = obj.get("yob")
    if yob is not None and type(yob) is not int:
        yob = _integer(yob, "user.yob")
    gender = obj.get("gender")
    if gender is not None and type(gender) is not str:
        gender = _text(gender, "user.gender")
    geo = obj.get("geo")
    if geo is not None:
        geo = _geo(geo, "user")
    return (user_id is not None, buyeruid is not None, yob, gender, geo)


def _regs(regs: Any, user: dict[str, Any] | None) -> Record:
    """Privacy signals from the 2.6 fields, falling back to the 2.5 `ext` ones."""
    if regs is not None and type(regs) is not dict:
        raise _bad("regs", "object", regs)
    consent = None
    if user is not None:
        user_ext = user.get("ext")
        if user_ext is not None and type(user_ext) is not dict:
            raise _bad("user.ext", "object", user_ext)
        consent = user.get("consent")
        if consent is not None:
            if type(consent) is not str:
                consent = _text(consent, "user.consent")
        elif user_ext is not None:
            consent = user_ext.get("consent")
            if consent is not None and type(consent) is not str:
                consent = _text(consent, "user.ext.consent")
    if regs is None:
        return _NO_REGS_RECORD if consent is None else (False, None, consent, None, None, ())
    ext = regs.get("ext")
    if ext is None:
        ext = _EMPTY
    elif type(ext) is not dict:
        raise _bad("regs.ext", "object", ext)
    gdpr = regs.get("gdpr")
    if gdpr is None:
        gdpr = ext.get("gdpr")
        if gdpr is not None and type(gdpr) is not int:
            gdpr = int(_flag(gdpr, "regs.ext.gdpr"))  # true, "1", ...
    elif type(gdpr) is not int:
        gdpr = int(_flag(gdpr, "regs.gdpr"))
    us_privacy = regs.get("us_privacy")
    if us_privacy is None:
        us_privacy = ext.get("us_privacy")
        if us_privacy is not None and type(us_privacy) is not str:
            us_privacy = _text(us_privacy, "regs.ext.us_privacy")
    elif type(us_privacy) is not str:
        us_privacy = _text(us_privacy, "regs.us_privacy")
    gpp = regs.get("gpp")
    if gpp is None:
        gpp = ext.get("gpp")
        if gpp is not None and type(gpp) is not str:
            gpp = _text(gpp, "regs.ext.gpp")
    elif type(gpp) is not str:
        gpp = _text(gpp, "regs.gpp")
    gpp_sid = regs.get("gpp_sid")
    gpp_sid = () if gpp_sid is None else _integers(gpp_sid, "regs.gpp_sid")
    if not gpp_sid:
        ext_sid = ext.get("gpp_sid")
        gpp_sid = () if ext_sid is None else _integers(ext_sid, "regs.ext.gpp_sid")
    coppa = regs.get("coppa")
    coppa = False if coppa is None else _flag(coppa, "regs.coppa")
    return (coppa, gdpr, consent, us_privacy, gpp, gpp_sid)


def _has_schain(source: Any) -> bool:
    if type(source) is not dict:
        raise _bad("source", "object", source)
    schain = source.get("schain")
    if schain is not None:
        if type(schain) is not dict:
            raise _bad("source.schain", "object", schain)
        return True
    ext = source.get("ext")
    if ext is None:
        return False
    if type(ext) is not dict:
        raise _bad("source.ext", "object", ext)
    schain = ext.get("schain")
    if schain is None:
        return False
    if type(schain) is not dict:
        raise _bad("source.ext.schain", "object", schain)
    return True


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if type(value) is not list:
        if type(value) is str:
            return (value,)  # one bare value for a list of one
        raise _bad(where, "array", value)
    for item in value:
        if type(item) is not str:
            return tuple(
                [x if type(x) is str else _text(x, f"{where}[{i}]") for i, x in enumerate(value)]
            )
    return tuple(value)


def _integers(value: Any, where: str) -> tuple[int, ...]:
    if type(value) is not list:
        raise _bad(where, "array", value)
    for item in value:
        if type(item) is not int:
            return tuple(
                [x if type(x) is int else _integer(x, f"{where}[{i}]") for i, x in enumerate(value)]
            )
    return tuple(value)


# --- coercions (cold): the loose types exchanges send -------------------------
#
# Reached only when a field's JSON type is not the one OpenRTB names; the
# README's coercion table lists exactly what each accepts. Whatever none of
# them reads stays an error naming the field.

_TRUE_TEXTS: Final = frozenset({"1", "true"})
_FALSE_TEXTS: Final = frozenset({"0", "false"})


def _text(value: object, where: str) -> str:
    """A string field: an integer (or a whole float) is read as its decimal text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    raise _bad(where, "string", value)


def _integer(value: object, where: str) -> int:
    """An integer field: a whole float, or decimal text ("300", "300.0")."""
    number = _finite(value)
    if number is not None and number.is_integer():
        return int(number)
    raise _bad(where, "integer", value)


def _number(value: object, where: str) -> float:
    """A number field (given neither float nor int): decimal text ("0.5") is read as its number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    number = _finite(value) if isinstance(value, str) else None
    if number is None:
        raise _bad(where, "number", value)
    return number


def _flag(value: object, where: str) -> bool:
    """A 0/1 field: also true/false, and "0", "1", "true", "false" as text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and (value == 0 or value == 1):
        return value == 1
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_TEXTS:
            return True
        if text in _FALSE_TEXTS:
            return False
    raise _bad(where, "0 or 1", value)


def _finite(value: object) -> float | None:
    """A float, or a number's decimal text, as a finite float; None for anything else."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


# --- errors (cold) ------------------------------------------------------------


def _json_type(value: object) -> str:
    kind = type(value)
    if kind is str:
        return "string"
    if kind is bool:
        return "boolean"
    if kind is int:
        return "integer"
    if kind is float:
        return "number"
    if kind is list:
        return "array"
    if kind is dict:
        return "object"
    return "null" if value is None else kind.__name__


def _bad(where: str, expected: str, value: object) -> InvalidBidRequest:
    return InvalidBidRequest(f"{where}: expected {expected}, got {_json_type(value)}")
