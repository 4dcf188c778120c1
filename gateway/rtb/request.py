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


def _bid_request(root: dict[str, Any]) -> BidRequest:
    site_obj = _opt_obj(root, "site", "")
    app_obj = _opt_obj(root, "app", "")
    if site_obj is not None and app_obj is not None:
        raise InvalidBidRequest("site and app are mutually exclusive")
    user_obj = _opt_obj(root, "user", "")
    tmax = _opt_int(root, "tmax", "")
    if tmax is not None and tmax <= 0:
        raise InvalidBidRequest(f"tmax: must be > 0, got {tmax}")
    at = _opt_int(root, "at", "")
    return BidRequest(
        id=_req_str(root, "id", ""),
        imp=_imps(root),
        site=_site(site_obj) if site_obj is not None else None,
        app=_app(app_obj) if app_obj is not None else None,
        device=_device(root),
        user=_user(user_obj) if user_obj is not None else None,
        regs=_regs(root, user_obj),
        has_schain=_has_schain(root),
        tmax=tmax,
        at=2 if at is None else at,
        bcat=_str_list(root, "bcat", ""),
        badv=_str_list(root, "badv", ""),
        cur=_str_list(root, "cur", ""),
        test=_opt_flag(root, "test", "") or False,
    )


def _imps(root: dict[str, Any]) -> tuple[Imp, ...]:
    raw = root.get("imp")
    if raw is None:
        raise InvalidBidRequest("missing required field: imp")
    if type(raw) is not list:
        raise InvalidBidRequest(f"imp: expected array, got {_json_type(raw)}")
    if not raw:
        raise InvalidBidRequest("imp is empty")
    return tuple([_imp(item, f"imp[{i}]") for i, item in enumerate(raw)])


def _imp(obj: Any, path: str) -> Imp:
    if type(obj) is not dict:
        raise InvalidBidRequest(f"{path}: expected object, got {_json_type(obj)}")
    kinds = tuple([kind for kind in _KINDS if obj.get(kind) is not None])
    if not kinds:
        raise InvalidBidRequest(f"{path}: needs one of banner, video, audio, native")
    w = h = None
    formats: tuple[tuple[int, int], ...] = ()
    banner = _opt_obj(obj, "banner", path)
    if banner is not None:
        w = _opt_int(banner, "w", path + ".banner")
        h = _opt_int(banner, "h", path + ".banner")
        formats = _formats(banner, path + ".banner.format")
    video = _opt_obj(obj, "video", path)
    if video is not None and w is None:
        w = _opt_int(video, "w", path + ".video")
        h = _opt_int(video, "h", path + ".video")
    _opt_obj(obj, "audio", path)
    _opt_obj(obj, "native", path)
    bidfloor = _opt_number(obj, "bidfloor", path)
    if bidfloor is not None and bidfloor < 0:
        raise InvalidBidRequest(f"{path}.bidfloor: must be >= 0, got {bidfloor}")
    return Imp(
        id=_req_str(obj, "id", path),
        kind=kinds[0],
        kinds=kinds,
        w=w,
        h=h,
        formats=formats,
        bidfloor=bidfloor or 0.0,
        bidfloorcur=_opt_str(obj, "bidfloorcur", path) or "USD",
        instl=_opt_flag(obj, "instl", path) or False,
        secure=_opt_flag(obj, "secure", path),
    )


def _formats(banner: dict[str, Any], path: str) -> tuple[tuple[int, int], ...]:
    raw = banner.get("format")
    if raw is None:
        return ()
    if type(raw) is not list:
        raise InvalidBidRequest(f"{path}: expected array, got {_json_type(raw)}")
    sizes = []
    for i, item in enumerate(raw):
        item_path = f"{path}[{i}]"
        if type(item) is not dict:
            raise InvalidBidRequest(f"{item_path}: expected object, got {_json_type(item)}")
        w = _opt_int(item, "w", item_path)
        h = _opt_int(item, "h", item_path)
        if w is not None and h is not None:
            sizes.append((w, h))  # wratio/hratio formats carry no fixed size
    return tuple(sizes)


def _publisher(parent: dict[str, Any], parent_path: str) -> Publisher | None:
    obj = _opt_obj(parent, "publisher", parent_path)
    if obj is None:
        return None
    path = parent_path + ".publisher"
    return Publisher(_opt_str(obj, "id", path), _opt_str(obj, "domain", path))


def _site(obj: dict[str, Any]) -> Site:
    return Site(
        id=_opt_str(obj, "id", "site"),
        domain=_opt_str(obj, "domain", "site"),
        page=_opt_str(obj, "page", "site"),
        publisher=_publisher(obj, "site"),
        cat=_str_list(obj, "cat", "site"),
        sectioncat=_str_list(obj, "sectioncat", "site"),
        pagecat=_str_list(obj, "pagecat", "site"),
    )


def _app(obj: dict[str, Any]) -> App:
    return App(
        id=_opt_str(obj, "id", "app"),
        domain=_opt_str(obj, "domain", "app"),
        bundle=_opt_str(obj, "bundle", "app"),
        publisher=_publisher(obj, "app"),
        cat=_str_list(obj, "cat", "app"),
        sectioncat=_str_list(obj, "sectioncat", "app"),
        pagecat=_str_list(obj, "pagecat", "app"),
    )


def _geo(parent: dict[str, Any], parent_path: str) -> Geo | None:
    obj = _opt_obj(parent, "geo", parent_path)
    if obj is None:
        return None
    path = parent_path + ".geo"
    return Geo(
        country=_opt_str(obj, "country", path),
        region=_opt_str(obj, "region", path),
        city=_opt_str(obj, "city", path),
        lat=_opt_number(obj, "lat", path),
        lon=_opt_number(obj, "lon", path),
    )


def _device(root: dict[str, Any]) -> Device | None:
    obj = _opt_obj(root, "device", "")
    if obj is None:
        return None
    has_ip = (
        _opt_str(obj, "ip", "device") is not None or _opt_str(obj, "ipv6", "device") is not None
    )
    return Device(
        ua=_opt_str(obj, "ua", "device"),
        devicetype=_opt_int(obj, "devicetype", "device"),
        os=_opt_str(obj, "os", "device"),
        osv=_opt_str(obj, "osv", "device"),
        make=_opt_str(obj, "make", "device"),
        model=_opt_str(obj, "model", "device"),
        has_ip=has_ip,
        geo=_geo(obj, "device"),
        connectiontype=_opt_int(obj, "connectiontype", "device"),
        js=_opt_flag(obj, "js", "device"),
        language=_opt_str(obj, "language", "device"),
    )


def _user(obj: dict[str, Any]) -> User:
    return User(
        has_id=_opt_str(obj, "id", "user") is not None,
        has_buyeruid=_opt_str(obj, "buyeruid", "user") is not None,
        yob=_opt_int(obj, "yob", "user"),
        gender=_opt_str(obj, "gender", "user"),
        geo=_geo(obj, "user"),
    )


def _regs(root: dict[str, Any], user: dict[str, Any] | None) -> Regs:
    """Privacy signals from the 2.6 fields, falling back to the 2.5 `ext` ones."""
    regs = _opt_obj(root, "regs", "")
    user_ext = _opt_obj(user, "ext", "user") if user is not None else None
    consent = _consent(user, user_ext)
    if regs is None:
        return _NO_REGS if consent is None else Regs(False, None, consent, None, None, ())
    ext = _opt_obj(regs, "ext", "regs") or _EMPTY
    gdpr = _opt_int(regs, "gdpr", "regs")
    if gdpr is None:
        gdpr = _opt_int(ext, "gdpr", "regs.ext")
    us_privacy = _opt_str(regs, "us_privacy", "regs")
    if us_privacy is None:
        us_privacy = _opt_str(ext, "us_privacy", "regs.ext")
    gpp = _opt_str(regs, "gpp", "regs")
    if gpp is None:
        gpp = _opt_str(ext, "gpp", "regs.ext")
    gpp_sid = _int_list(regs, "gpp_sid", "regs") or _int_list(ext, "gpp_sid", "regs.ext.gpp_sid")
    coppa = _opt_flag(regs, "coppa", "regs") or False
    return Regs(coppa, gdpr, consent, us_privacy, gpp, gpp_sid)


def _consent(user: dict[str, Any] | None, user_ext: dict[str, Any] | None) -> str | None:
    if user is not None:
        consent = _opt_str(user, "consent", "user")
        if consent is not None:
            return consent
    if user_ext is not None:
        return _opt_str(user_ext, "consent", "user.ext")
    return None


def _has_schain(root: dict[str, Any]) -> bool:
    source = _opt_obj(root, "source", "")
    if source is None:
        return False
    if _opt_obj(source, "schain", "source") is not None:
        return True
    ext = _opt_obj(source, "ext", "source")
    return ext is not None and _opt_obj(ext, "schain", "source.ext") is not None


# --- typed field access; each raises with the JSON path of the bad value ---


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


def _where(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _type_error(parent: str, key: str, expected: str, value: object) -> InvalidBidRequest:
    where = _where(parent, key)
    return InvalidBidRequest(f"{where}: expected {expected}, got {_json_type(value)}")


# Each takes the JSON path of `obj` ("" for the root) and builds the field's
# path only when reporting an error: the success path allocates nothing.


def _req_str(obj: dict[str, Any], key: str, parent: str) -> str:
    value = obj.get(key)
    if type(value) is str:
        return value
    if value is None:
        raise InvalidBidRequest(f"missing required field: {_where(parent, key)}")
    raise _type_error(parent, key, "string", value)


def _opt_str(obj: dict[str, Any], key: str, parent: str) -> str | None:
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    raise _type_error(parent, key, "string", value)


def _opt_int(obj: dict[str, Any], key: str, parent: str) -> int | None:
    value = obj.get(key)
    if value is None or type(value) is int:
        return value
    raise _type_error(parent, key, "integer", value)


def _opt_number(obj: dict[str, Any], key: str, parent: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    kind = type(value)
    if kind is float or kind is int:
        return float(value)
    raise _type_error(parent, key, "number", value)


def _opt_flag(obj: dict[str, Any], key: str, parent: str) -> bool | None:
    """OpenRTB booleans are the integers 0 and 1."""
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is int and (value == 0 or value == 1):
        return value == 1
    raise _type_error(parent, key, "0 or 1", value)


def _opt_obj(obj: dict[str, Any], key: str, parent: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None or type(value) is dict:
        return value
    raise _type_error(parent, key, "object", value)


def _str_list(obj: dict[str, Any], key: str, parent: str) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is not list:
        raise _type_error(parent, key, "array", value)
    for i, item in enumerate(value):
        if type(item) is not str:
            raise _type_error(parent, f"{key}[{i}]", "string", item)
    return tuple(value)


def _int_list(obj: dict[str, Any], key: str, parent: str) -> tuple[int, ...]:
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is not list:
        raise _type_error(parent, key, "array", value)
    for i, item in enumerate(value):
        if type(item) is not int:
            raise _type_error(parent, f"{key}[{i}]", "integer", item)
    return tuple(value)
