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

from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "App",
    "BidRequest",
    "Device",
    "Geo",
    "Imp",
    "InvalidBidRequest",
    "Publisher",
    "Regs",
    "Site",
    "User",
    "parse_bid_request",
]

DEFAULT_MAX_REQUEST_BYTES: Final = 64 * 1024

# Primary kind of a multi-format impression: the richest format present.
_KINDS: Final = ("video", "audio", "native", "banner")
# Every combination of present formats, indexed by a bit mask in _KINDS
# order (video = 8 ... banner = 1), so an impression's kinds are one lookup.
_KIND_SETS: Final = tuple(
    tuple(kind for bit, kind in zip((8, 4, 2, 1), _KINDS, strict=True) if mask & bit)
    for mask in range(16)
)


class InvalidBidRequest(ValueError):
    """A bid request that is not JSON, not OpenRTB, or breaks a rule."""


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


_NO_REGS: Final = Regs(False, None, None, None, None, ())
_EMPTY: Final[dict[str, Any]] = {}


def parse_bid_request(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES
) -> BidRequest:
    """Parse and validate one OpenRTB 2.5/2.6 bid request.

    Raises `InvalidBidRequest` (a `ValueError`) naming the JSON path of the
    first problem found. Work is bounded: oversized bodies are refused
    before parsing and orjson limits nesting depth.
    """
    if len(data) > max_bytes:
        raise InvalidBidRequest(f"request too large: {len(data)} bytes > limit {max_bytes}")
    try:
        root = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidBidRequest(f"not JSON: {exc}") from None
    if type(root) is not dict:
        raise InvalidBidRequest(f"bid request: expected object, got {_json_type(root)}")
    return _bid_request(root)


# --- the validating readers -------------------------------------------------
#
# Straight-line code, one function per object: a field is one `dict.get`
# and one or two identity checks (`type(v) is str`), with the JSON path
# spelled out in the (cold) error branch. A generic `_opt_str(obj, key,
# path)` helper per field cost ~80 calls per request, more than the checks
# themselves. Fields are read in the same order as they are reported: the
# first problem found is the one named.


def _bid_request(root: dict[str, Any]) -> BidRequest:
    get = root.get
    site_obj = get("site")
    if site_obj is not None and type(site_obj) is not dict:
        raise _bad("site", "object", site_obj)
    app_obj = get("app")
    if app_obj is not None and type(app_obj) is not dict:
        raise _bad("app", "object", app_obj)
    if site_obj is not None and app_obj is not None:
        raise InvalidBidRequest("site and app are mutually exclusive")
    user_obj = get("user")
    if user_obj is not None and type(user_obj) is not dict:
        raise _bad("user", "object", user_obj)
    tmax = get("tmax")
    if tmax is not None:
        if type(tmax) is not int:
            raise _bad("tmax", "integer", tmax)
        if tmax <= 0:
            raise InvalidBidRequest(f"tmax: must be > 0, got {tmax}")
    at = get("at")
    if at is None:
        at = 2  # OpenRTB's default: second-price auction
    elif type(at) is not int:
        raise _bad("at", "integer", at)
    request_id = get("id")
    if type(request_id) is not str:
        if request_id is None:
            raise InvalidBidRequest("missing required field: id")
        raise _bad("id", "string", request_id)
    imps = _imps(get("imp"))
    site = _site(site_obj) if site_obj is not None else None
    app = _app(app_obj) if app_obj is not None else None
    device_obj = get("device")
    if device_obj is None:
        device = None
    elif type(device_obj) is dict:
        device = _device(device_obj)
    else:
        raise _bad("device", "object", device_obj)
    user = _user(user_obj) if user_obj is not None else None
    regs = _regs(get("regs"), user_obj)
    source = get("source")
    has_schain = False if source is None else _has_schain(source)
    bcat = get("bcat")
    bcat = () if bcat is None else _strings(bcat, "bcat")
    badv = get("badv")
    badv = () if badv is None else _strings(badv, "badv")
    cur = get("cur")
    cur = () if cur is None else _strings(cur, "cur")
    test = get("test")
    if test is None:
        test = False
    elif type(test) is int and (test == 0 or test == 1):
        test = test == 1
    else:
        raise _bad("test", "0 or 1", test)
    return BidRequest(
        request_id, imps, site, app, device, user, regs, has_schain,
        tmax, at, bcat, badv, cur, test,
    )  # fmt: skip


def _imps(raw: Any) -> tuple[Imp, ...]:
    if type(raw) is not list:
        if raw is None:
            raise InvalidBidRequest("missing required field: imp")
        raise _bad("imp", "array", raw)
    if not raw:
        raise InvalidBidRequest("imp is empty")
    if len(raw) == 1:
        return (_imp(raw[0], 0),)
    return tuple([_imp(item, i) for i, item in enumerate(raw)])


def _imp(obj: Any, index: int) -> Imp:
    if type(obj) is not dict:
        raise _bad(f"imp[{index}]", "object", obj)
    get = obj.get
    banner = get("banner")
    video = get("video")
    audio = get("audio")
    native = get("native")
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
            raise _bad(f"imp[{index}].banner.w", "integer", w)
        h = banner.get("h")
        if h is not None and type(h) is not int:
            raise _bad(f"imp[{index}].banner.h", "integer", h)
        sizes = banner.get("format")
        if sizes is not None:
            formats = _formats(sizes, index)
    if video is not None:
        if type(video) is not dict:
            raise _bad(f"imp[{index}].video", "object", video)
        if w is None:
            w = video.get("w")
            if w is not None and type(w) is not int:
                raise _bad(f"imp[{index}].video.w", "integer", w)
            h = video.get("h")
            if h is not None and type(h) is not int:
                raise _bad(f"imp[{index}].video.h", "integer", h)
    if audio is not None and type(audio) is not dict:
        raise _bad(f"imp[{index}].audio", "object", audio)
    if native is not None and type(native) is not dict:
        raise _bad(f"imp[{index}].native", "object", native)
    bidfloor = get("bidfloor")
    if bidfloor is None:
        bidfloor = 0.0
    else:
        kind = type(bidfloor)
        if kind is int:
            bidfloor = float(bidfloor)
        elif kind is not float:
            raise _bad(f"imp[{index}].bidfloor", "number", bidfloor)
        if bidfloor < 0:
            raise InvalidBidRequest(f"imp[{index}].bidfloor: must be >= 0, got {bidfloor}")
    imp_id = get("id")
    if type(imp_id) is not str:
        if imp_id is None:
            raise InvalidBidRequest(f"missing required field: imp[{index}].id")
        raise _bad(f"imp[{index}].id", "string", imp_id)
    bidfloorcur = get("bidfloorcur")
    if bidfloorcur is not None and type(bidfloorcur) is not str:
        raise _bad(f"imp[{index}].bidfloorcur", "string", bidfloorcur)
    instl = get("instl")
    if instl is None:
        instl = False
    elif type(instl) is int and (instl == 0 or instl == 1):
        instl = instl == 1
    else:
        raise _bad(f"imp[{index}].instl", "0 or 1", instl)
    secure = get("secure")
    if secure is not None:
        if type(secure) is int and (secure == 0 or secure == 1):
            secure = secure == 1
        else:
            raise _bad(f"imp[{index}].secure", "0 or 1", secure)
    return Imp(
        imp_id, kinds[0], kinds, w, h, formats, bidfloor, bidfloorcur or "USD", instl, secure
    )


def _formats(raw: Any, index: int) -> tuple[tuple[int, int], ...]:
    if type(raw) is not list:
        raise _bad(f"imp[{index}].banner.format", "array", raw)
    sizes = []
    for i, item in enumerate(raw):
        if type(item) is not dict:
            raise _bad(f"imp[{index}].banner.format[{i}]", "object", item)
        w = item.get("w")
        if w is not None and type(w) is not int:
            raise _bad(f"imp[{index}].banner.format[{i}].w", "integer", w)
        h = item.get("h")
        if h is not None and type(h) is not int:
            raise _bad(f"imp[{index}].banner.format[{i}].h", "integer", h)
        if w is not None and h is not None:
            sizes.append((w, h))  # wratio/hratio formats carry no fixed size
    return tuple(sizes)


def _publisher(obj: Any, parent: str) -> Publisher:
    if type(obj) is not dict:
        raise _bad(f"{parent}.publisher", "object", obj)
    get = obj.get
    publisher_id = get("id")
    if publisher_id is not None and type(publisher_id) is not str:
        raise _bad(f"{parent}.publisher.id", "string", publisher_id)
    domain = get("domain")
    if domain is not None and type(domain) is not str:
        raise _bad(f"{parent}.publisher.domain", "string", domain)
    return Publisher(publisher_id, domain)


def _site(obj: dict[str, Any]) -> Site:
    get = obj.get
    site_id = get("id")
    if site_id is not None and type(site_id) is not str:
        raise _bad("site.id", "string", site_id)
    domain = get("domain")
    if domain is not None and type(domain) is not str:
        raise _bad("site.domain", "string", domain)
    page = get("page")
    if page is not None and type(page) is not str:
        raise _bad("site.page", "string", page)
    publisher = get("publisher")
    if publisher is not None:
        publisher = _publisher(publisher, "site")
    cat = get("cat")
    cat = () if cat is None else _strings(cat, "site.cat")
    sectioncat = get("sectioncat")
    sectioncat = () if sectioncat is None else _strings(sectioncat, "site.sectioncat")
    pagecat = get("pagecat")
    pagecat = () if pagecat is None else _strings(pagecat, "site.pagecat")
    return Site(site_id, domain, page, publisher, cat, sectioncat, pagecat)


def _app(obj: dict[str, Any]) -> App:
    get = obj.get
    app_id = get("id")
    if app_id is not None and type(app_id) is not str:
        raise _bad("app.id", "string", app_id)
    domain = get("domain")
    if domain is not None and type(domain) is not str:
        raise _bad("app.domain", "string", domain)
    bundle = get("bundle")
    if bundle is not None and type(bundle) is not str:
        raise _bad("app.bundle", "string", bundle)
    publisher = get("publisher")
    if publisher is not None:
        publisher = _publisher(publisher, "app")
    cat = get("cat")
    cat = () if cat is None else _strings(cat, "app.cat")
    sectioncat = get("sectioncat")
    sectioncat = () if sectioncat is None else _strings(sectioncat, "app.sectioncat")
    pagecat = get("pagecat")
    pagecat = () if pagecat is None else _strings(pagecat, "app.pagecat")
    return App(app_id, domain, bundle, publisher, cat, sectioncat, pagecat)


def _geo(obj: Any, parent: str) -> Geo:
    if type(obj) is not dict:
        raise _bad(f"{parent}.geo", "object", obj)
    get = obj.get
    country = get("country")
    if country is not None and type(country) is not str:
        raise _bad(f"{parent}.geo.country", "string", country)
    region = get("region")
    if region is not None and type(region) is not str:
        raise _bad(f"{parent}.geo.region", "string", region)
    city = get("city")
    if city is not None and type(city) is not str:
        raise _bad(f"{parent}.geo.city", "string", city)
    lat = get("lat")
    if lat is not None and type(lat) is not float:
        if type(lat) is not int:
            raise _bad(f"{parent}.geo.lat", "number", lat)
        lat = float(lat)
    lon = get("lon")
    if lon is not None and type(lon) is not float:
        if type(lon) is not int:
            raise _bad(f"{parent}.geo.lon", "number", lon)
        lon = float(lon)
    return Geo(country, region, city, lat, lon)


def _device(obj: dict[str, Any]) -> Device:
    get = obj.get
    ip = get("ip")
    if ip is not None and type(ip) is not str:
        raise _bad("device.ip", "string", ip)
    ipv6 = get("ipv6")
    if ipv6 is not None and type(ipv6) is not str:
        raise _bad("device.ipv6", "string", ipv6)
    ua = get("ua")
    if ua is not None and type(ua) is not str:
        raise _bad("device.ua", "string", ua)
    devicetype = get("devicetype")
    if devicetype is not None and type(devicetype) is not int:
        raise _bad("device.devicetype", "integer", devicetype)
    os = get("os")
    if os is not None and type(os) is not str:
        raise _bad("device.os", "string", os)
    osv = get("osv")
    if osv is not None and type(osv) is not str:
        raise _bad("device.osv", "string", osv)
    make = get("make")
    if make is not None and type(make) is not str:
        raise _bad("device.make", "string", make)
    model = get("model")
    if model is not None and type(model) is not str:
        raise _bad("device.model", "string", model)
    geo = get("geo")
    if geo is not None:
        geo = _geo(geo, "device")
    connectiontype = get("connectiontype")
    if connectiontype is not None and type(connectiontype) is not int:
        raise _bad("device.connectiontype", "integer", connectiontype)
    js = get("js")
    if js is not None:
        if type(js) is int and (js == 0 or js == 1):
            js = js == 1
        else:
            raise _bad("device.js", "0 or 1", js)
    language = get("language")
    if language is not None and type(language) is not str:
        raise _bad("device.language", "string", language)
    has_ip = ip is not None or ipv6 is not None
    return Device(
        ua, devicetype, os, osv, make, model, has_ip, geo, connectiontype, js, language
    )  # fmt: skip


def _user(obj: dict[str, Any]) -> User:
    get = obj.get
    user_id = get("id")
    if user_id is not None and type(user_id) is not str:
        raise _bad("user.id", "string", user_id)
    buyeruid = get("buyeruid")
    if buyeruid is not None and type(buyeruid) is not str:
        raise _bad("user.buyeruid", "string", buyeruid)
    yob = get("yob")
    if yob is not None and type(yob) is not int:
        raise _bad("user.yob", "integer", yob)
    gender = get("gender")
    if gender is not None and type(gender) is not str:
        raise _bad("user.gender", "string", gender)
    geo = get("geo")
    if geo is not None:
        geo = _geo(geo, "user")
    return User(user_id is not None, buyeruid is not None, yob, gender, geo)


def _regs(regs: Any, user: dict[str, Any] | None) -> Regs:
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
                raise _bad("user.consent", "string", consent)
        elif user_ext is not None:
            consent = user_ext.get("consent")
            if consent is not None and type(consent) is not str:
                raise _bad("user.ext.consent", "string", consent)
    if regs is None:
        return _NO_REGS if consent is None else Regs(False, None, consent, None, None, ())
    get = regs.get
    ext = get("ext")
    if ext is None:
        ext = _EMPTY
    elif type(ext) is not dict:
        raise _bad("regs.ext", "object", ext)
    gdpr = get("gdpr")
    if gdpr is None:
        gdpr = ext.get("gdpr")
        if gdpr is not None and type(gdpr) is not int:
            raise _bad("regs.ext.gdpr", "integer", gdpr)
    elif type(gdpr) is not int:
        raise _bad("regs.gdpr", "integer", gdpr)
    us_privacy = get("us_privacy")
    if us_privacy is None:
        us_privacy = ext.get("us_privacy")
        if us_privacy is not None and type(us_privacy) is not str:
            raise _bad("regs.ext.us_privacy", "string", us_privacy)
    elif type(us_privacy) is not str:
        raise _bad("regs.us_privacy", "string", us_privacy)
    gpp = get("gpp")
    if gpp is None:
        gpp = ext.get("gpp")
        if gpp is not None and type(gpp) is not str:
            raise _bad("regs.ext.gpp", "string", gpp)
    elif type(gpp) is not str:
        raise _bad("regs.gpp", "string", gpp)
    gpp_sid = get("gpp_sid")
    gpp_sid = () if gpp_sid is None else _integers(gpp_sid, "regs.gpp_sid")
    if not gpp_sid:
        ext_sid = ext.get("gpp_sid")
        gpp_sid = () if ext_sid is None else _integers(ext_sid, "regs.ext.gpp_sid")
    coppa = get("coppa")
    if coppa is None:
        coppa = False
    elif type(coppa) is int and (coppa == 0 or coppa == 1):
        coppa = coppa == 1
    else:
        raise _bad("regs.coppa", "0 or 1", coppa)
    return Regs(coppa, gdpr, consent, us_privacy, gpp, gpp_sid)


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
        raise _bad(where, "array", value)
    for item in value:
        if type(item) is not str:
            index = next(i for i, x in enumerate(value) if type(x) is not str)
            raise _bad(f"{where}[{index}]", "string", item)
    return tuple(value)


def _integers(value: Any, where: str) -> tuple[int, ...]:
    if type(value) is not list:
        raise _bad(where, "array", value)
    for item in value:
        if type(item) is not int:
            index = next(i for i, x in enumerate(value) if type(x) is not int)
            raise _bad(f"{where}[{index}]", "integer", item)
    return tuple(value)


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
