# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Typed decoding of a bid request in C (msgspec): the fast path of ``parse_record``.

msgspec decodes the JSON straight into the structs of ``_structs``, checking every
type on the way and skipping unknown fields without building them; Python
then only assembles the record from the structs' attributes. The structs
accept exactly what ``request``'s validators accept, or less: whatever they
refuse (any type error, and the few rules a struct cannot express: an
impression without a format, site and app together) goes to the validators,
which then either accept it or name its first problem the way they always
have. So valid requests take the fast path, and errors read as before.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from gateway.rtb._structs import (
    App,
    Device,
    Geo,
    Imp,
    Publisher,
    Regs,
    Site,
    User,
    decode,
)

__all__ = ["decode_record"]

_KINDS: Final = ("video", "audio", "native", "banner")
_KIND_SETS: Final = tuple(
    tuple(kind for bit, kind in zip((8, 4, 2, 1), _KINDS, strict=True) if mask & bit)
    for mask in range(16)
)
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD]")
_NO_REGS_RECORD: Final[tuple[Any, ...]] = (False, None, None, None, None, ())


class NotTyped(Exception):
    """The fast path declines: the validators decide (and name the problem)."""


def decode_record(data: bytes | bytearray | memoryview | str) -> tuple[Any, ...]:
    """The record of a valid bid request; ``NotTyped`` for anything else."""
    if type(data) is not bytes or (b"\\" in data and _SURROGATE_ESCAPE.search(data)):
        # msgspec skips unknown fields without checking escaped surrogates,
        # which orjson refuses when lone: such rare bodies take the slow path.
        # So do other input types (bytearray, memoryview, str). A one-byte
        # search is memchr; CPython's two-byte ``in`` walks ~1 us a kilobyte.
        raise NotTyped
    if not data.isascii():
        # Nor does it check the UTF-8 of skipped strings: check it here (an
        # ASCII body, nearly all of them, needs no check).
        try:
            data.decode()
        except UnicodeDecodeError:
            raise NotTyped from None
    try:
        root = decode(data)
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


def _imp(imp: Imp) -> tuple[Any, ...]:
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


def _publisher(publisher: Publisher | None) -> tuple[Any, ...] | None:
    return None if publisher is None else (publisher.id, publisher.domain)


def _site(site: Site) -> tuple[Any, ...]:
    return (
        site.id, site.domain, site.page, _publisher(site.publisher),
        () if site.cat is None else tuple(site.cat),
        () if site.sectioncat is None else tuple(site.sectioncat),
        () if site.pagecat is None else tuple(site.pagecat),
    )  # fmt: skip


def _app(app: App) -> tuple[Any, ...]:
    return (
        app.id, app.domain, app.bundle, _publisher(app.publisher),
        () if app.cat is None else tuple(app.cat),
        () if app.sectioncat is None else tuple(app.sectioncat),
        () if app.pagecat is None else tuple(app.pagecat),
    )  # fmt: skip


def _geo(geo: Geo | None) -> tuple[Any, ...] | None:
    if geo is None:
        return None
    return (geo.country, geo.region, geo.city, geo.lat, geo.lon)


def _device(device: Device) -> tuple[Any, ...]:
    js = device.js
    return (
        device.ua, device.devicetype, device.os, device.osv, device.make, device.model,
        device.ip is not None or device.ipv6 is not None,
        _geo(device.geo), device.connectiontype,
        None if js is None else js == 1,
        device.language,
    )  # fmt: skip


def _user(user: User) -> tuple[Any, ...]:
    return (user.id is not None, user.buyeruid is not None, user.yob, user.gender, _geo(user.geo))


def _regs(regs: Regs | None, user: User | None) -> tuple[Any, ...]:
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
