"""Typed decoding of a bid request in C (msgspec): the fast path of ``parse_record``.

msgspec decodes the JSON straight into the structs below, checking every
type on the way and skipping unknown fields without building them; Python
then only assembles the record from the structs' attributes. The structs
accept exactly what ``request``'s validators accept, or less: whatever they
refuse (any type error, and the few rules a struct cannot express: an
impression without a format, site and app together) goes to the validators,
which then either accept it or name its first problem the way they always
have. So valid requests take the fast path, and errors read as before.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

__all__ = ["decode_record"]

# Each struct names only the fields the record needs; the rest are skipped.
# ``X | None = None``: absent or null, as the validators treat them.
_Flag = Literal[0, 1]


class _Object(msgspec.Struct):
    """Any JSON object (its fields unread): audio, native, schain."""


class _Format(msgspec.Struct):
    w: int | None = None
    h: int | None = None


class _Banner(msgspec.Struct):
    w: int | None = None
    h: int | None = None
    format: list[_Format] | None = None


class _Video(msgspec.Struct):
    w: int | None = None
    h: int | None = None


class _Imp(msgspec.Struct):
    id: str | None = None
    banner: _Banner | None = None
    video: _Video | None = None
    audio: _Object | None = None
    native: _Object | None = None
    bidfloor: Annotated[float, msgspec.Meta(ge=0)] | None = None
    bidfloorcur: str | None = None
    instl: _Flag | None = None
    secure: _Flag | None = None


class _Publisher(msgspec.Struct):
    id: str | None = None
    domain: str | None = None


class _Site(msgspec.Struct):
    id: str | None = None
    domain: str | None = None
    page: str | None = None
    publisher: _Publisher | None = None
    cat: list[str] | None = None
    sectioncat: list[str] | None = None
    pagecat: list[str] | None = None


class _App(msgspec.Struct):
    id: str | None = None
    domain: str | None = None
    bundle: str | None = None
    publisher: _Publisher | None = None
    cat: list[str] | None = None
    sectioncat: list[str] | None = None
    pagecat: list[str] | None = None


class _Geo(msgspec.Struct):
    country: str | None = None
    region: str | None = None
    city: str | None = None
    lat: float | None = None
    lon: float | None = None


class _Device(msgspec.Struct):
    ip: str | None = None
    ipv6: str | None = None
    ua: str | None = None
    devicetype: int | None = None
    os: str | None = None
    osv: str | None = None
    make: str | None = None
    model: str | None = None
    geo: _Geo | None = None
    connectiontype: int | None = None
    js: _Flag | None = None
    language: str | None = None


class _UserExt(msgspec.Struct):
    consent: str | None = None


class _User(msgspec.Struct):
    id: str | None = None
    buyeruid: str | None = None
    yob: int | None = None
    gender: str | None = None
    geo: _Geo | None = None
    consent: str | None = None
    ext: _UserExt | None = None


class _RegsExt(msgspec.Struct):
    gdpr: int | None = None
    us_privacy: str | None = None
    gpp: str | None = None
    gpp_sid: list[int] | None = None


class _Regs(msgspec.Struct):
    gdpr: int | None = None
    us_privacy: str | None = None
    gpp: str | None = None
    gpp_sid: list[int] | None = None
    coppa: _Flag | None = None
    ext: _RegsExt | None = None


class _SourceExt(msgspec.Struct):
    schain: _Object | None = None


class _Source(msgspec.Struct):
    schain: _Object | None = None
    ext: _SourceExt | None = None


class _BidRequest(msgspec.Struct):
    id: str
    imp: Annotated[list[_Imp], msgspec.Meta(min_length=1)]
    site: _Site | None = None
    app: _App | None = None
    device: _Device | None = None
    user: _User | None = None
    regs: _Regs | None = None
    source: _Source | None = None
    tmax: Annotated[int, msgspec.Meta(gt=0)] | None = None
    at: int | None = None
    bcat: list[str] | None = None
    badv: list[str] | None = None
    cur: list[str] | None = None
    test: _Flag | None = None


_decode: Final = msgspec.json.Decoder(_BidRequest).decode
_KINDS: Final = ("video", "audio", "native", "banner")
_KIND_SETS: Final = tuple(
    tuple(kind for bit, kind in zip((8, 4, 2, 1), _KINDS, strict=True) if mask & bit)
    for mask in range(16)
)
_NO_REGS_RECORD: Final[tuple[Any, ...]] = (False, None, None, None, None, ())


class NotTyped(Exception):
    """The fast path declines: the validators decide (and name the problem)."""


def decode_record(data: bytes | bytearray | memoryview | str) -> tuple[Any, ...]:
    """The record of a valid bid request; ``NotTyped`` for anything else."""
    if type(data) is not bytes or (b"\\u" in data and (b"\\ud" in data or b"\\uD" in data)):
        # msgspec skips unknown fields without checking escaped surrogates,
        # which orjson refuses when lone: such rare bodies take the slow path.
        # So do other input types (bytearray, memoryview, str).
        raise NotTyped
    if not data.isascii():
        # Nor does it check the UTF-8 of skipped strings: check it here (an
        # ASCII body, nearly all of them, needs no check).
        try:
            data.decode()
        except UnicodeDecodeError:
            raise NotTyped from None
    try:
        root = _decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        raise NotTyped from None
    site = root.site
    app = root.app
    if site is not None and app is not None:
        raise NotTyped
    imps = root.imp
    imp_records = (_imp(imps[0]),) if len(imps) == 1 else tuple([_imp(imp) for imp in imps])
    user = root.user
    regs = _regs(root.regs, user)
    source = root.source
    has_schain = source is not None and (
        source.schain is not None or (source.ext is not None and source.ext.schain is not None)
    )
    at = root.at
    test = root.test
    bcat = root.bcat
    badv = root.badv
    cur = root.cur
    return (
        root.id,
        imp_records,
        None if site is None else _site(site),
        None if app is None else _app(app),
        None if root.device is None else _device(root.device),
        None if user is None else _user(user),
        regs,
        has_schain,
        root.tmax,
        2 if at is None else at,
        () if bcat is None else tuple(bcat),
        () if badv is None else tuple(badv),
        () if cur is None else tuple(cur),
        test == 1,
    )


def _imp(imp: _Imp) -> tuple[Any, ...]:
    if imp.id is None:
        raise NotTyped
    banner = imp.banner
    video = imp.video
    kinds = _KIND_SETS[
        (video is not None) << 3 | (imp.audio is not None) << 2 | (imp.native is not None) << 1
        | (banner is not None)
    ]  # fmt: skip
    if not kinds:
        raise NotTyped
    w = h = None
    formats: tuple[tuple[int, int], ...] = ()
    if banner is not None:
        w = banner.w
        h = banner.h
        sizes = banner.format
        if sizes:
            formats = tuple([(s.w, s.h) for s in sizes if s.w is not None and s.h is not None])
    if video is not None and w is None:
        w = video.w
        h = video.h
    bidfloor = imp.bidfloor
    return (
        imp.id, kinds[0], kinds, w, h, formats,
        0.0 if bidfloor is None else bidfloor,
        imp.bidfloorcur or "USD",
        imp.instl == 1,
        None if imp.secure is None else imp.secure == 1,
    )  # fmt: skip


def _publisher(publisher: _Publisher | None) -> tuple[Any, ...] | None:
    return None if publisher is None else (publisher.id, publisher.domain)


def _site(site: _Site) -> tuple[Any, ...]:
    return (
        site.id, site.domain, site.page, _publisher(site.publisher),
        () if site.cat is None else tuple(site.cat),
        () if site.sectioncat is None else tuple(site.sectioncat),
        () if site.pagecat is None else tuple(site.pagecat),
    )  # fmt: skip


def _app(app: _App) -> tuple[Any, ...]:
    return (
        app.id, app.domain, app.bundle, _publisher(app.publisher),
        () if app.cat is None else tuple(app.cat),
        () if app.sectioncat is None else tuple(app.sectioncat),
        () if app.pagecat is None else tuple(app.pagecat),
    )  # fmt: skip


def _geo(geo: _Geo | None) -> tuple[Any, ...] | None:
    if geo is None:
        return None
    return (geo.country, geo.region, geo.city, geo.lat, geo.lon)


def _device(device: _Device) -> tuple[Any, ...]:
    js = device.js
    return (
        device.ua, device.devicetype, device.os, device.osv, device.make, device.model,
        device.ip is not None or device.ipv6 is not None,
        _geo(device.geo), device.connectiontype,
        None if js is None else js == 1,
        device.language,
    )  # fmt: skip


def _user(user: _User) -> tuple[Any, ...]:
    return (user.id is not None, user.buyeruid is not None, user.yob, user.gender, _geo(user.geo))


def _regs(regs: _Regs | None, user: _User | None) -> tuple[Any, ...]:
    """The 2.6 fields, else the 2.5 ``ext`` ones, as the validator reads them."""
    consent = None
    if user is not None:
        consent = user.consent
        if consent is None and user.ext is not None:
            consent = user.ext.consent
    if regs is None:
        return _NO_REGS_RECORD if consent is None else (False, None, consent, None, None, ())
    ext = regs.ext
    gdpr = regs.gdpr
    us_privacy = regs.us_privacy
    gpp = regs.gpp
    gpp_sid: tuple[int, ...] = () if regs.gpp_sid is None else tuple(regs.gpp_sid)
    if ext is not None:
        if gdpr is None:
            gdpr = ext.gdpr
        if us_privacy is None:
            us_privacy = ext.us_privacy
        if gpp is None:
            gpp = ext.gpp
        if not gpp_sid and ext.gpp_sid is not None:
            gpp_sid = tuple(ext.gpp_sid)
    return (regs.coppa == 1, gdpr, consent, us_privacy, gpp, gpp_sid)
