# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Typed decoding of a bid request in C (msgspec): the fast path of ``parse_record``.

msgspec decodes the JSON straight into the structs of ``_structs``, checking every
type on the way and skipping unknown fields without building them; Python
then only assembles the record from the structs' values. The structs
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
# A struct's values in field order (``_structs`` declares the order), in one
# C call: compiled code reads a msgspec attribute through the generic
# ``getattr``, several times slower than unpacking this tuple.
_fields: Final = msgspec.structs.astuple
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD]")
_BACKSLASH: Final = ord("\\")
_NO_REGS_RECORD: Final[tuple[Any, ...]] = (False, None, None, None, None, ())


class NotTyped(Exception):
    """The fast path declines: the validators decide (and name the problem)."""


def decode_record(data: bytes | bytearray | memoryview | str) -> tuple[Any, ...]:
    """The record of a valid bid request; ``NotTyped`` for anything else."""
    if type(data) is not bytes or (_BACKSLASH in data and _SURROGATE_ESCAPE.search(data)):
        # msgspec skips unknown fields without checking escaped surrogates,
        # which orjson refuses when lone: such rare bodies take the slow path.
        # So do other input types (bytearray, memoryview, str). An int operand
        # is a bare memchr (~20 ns); a bytes one first takes a buffer (~140 ns),
        # and CPython's two-byte ``in`` walks ~1 us a kilobyte.
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
    (
        request_id, imps, site, app, device, user, regs, source,
        tmax, at, bcat, badv, cur, test,
    ) = _fields(root)  # fmt: skip
    if site is not None and app is not None:
        raise NotTyped
    user_record, consent = (None, None) if user is None else _user(user)
    imp_records = (_imp(imps[0]),) if len(imps) == 1 else tuple([_imp(imp) for imp in imps])
    has_schain = source is not None and (
        source.schain is not None or (source.ext is not None and source.ext.schain is not None)
    )
    return (
        request_id,
        imp_records,
        None if site is None else _inventory(site),
        None if app is None else _inventory(app),
        None if device is None else _device(device),
        user_record,
        _regs(regs, consent),
        has_schain,
        tmax,
        2 if at is None else at,
        () if bcat is None else tuple(bcat),
        () if badv is None else tuple(badv),
        () if cur is None else tuple(cur),
        test == 1,
    )


def _imp(imp: Imp) -> tuple[Any, ...]:
    imp_id, banner, video, audio, native, bidfloor, bidfloorcur, instl, secure = _fields(imp)
    if imp_id is None:
        raise NotTyped
    kinds = _KIND_SETS[
        (video is not None) << 3 | (audio is not None) << 2 | (native is not None) << 1
        | (banner is not None)
    ]  # fmt: skip
    if not kinds:
        raise NotTyped
    w = h = None
    formats: tuple[tuple[int, int], ...] = ()
    if banner is not None:
        w, h, sizes = _fields(banner)
        if sizes:
            formats = tuple([(s.w, s.h) for s in sizes if s.w is not None and s.h is not None])
    if video is not None and w is None:
        w, h = _fields(video)
    return (
        imp_id, kinds[0], kinds, w, h, formats,
        0.0 if bidfloor is None else bidfloor,
        bidfloorcur or "USD",
        instl == 1,
        None if secure is None else secure == 1,
    )  # fmt: skip


def _publisher(publisher: Publisher | None) -> tuple[Any, ...] | None:
    return None if publisher is None else (publisher.id, publisher.domain)


def _inventory(inventory: Site | App) -> tuple[Any, ...]:
    """A site's record, or an app's (``page`` and ``bundle`` share the third place)."""
    inventory_id, domain, page_or_bundle, publisher, cat, sectioncat, pagecat = _fields(inventory)
    return (
        inventory_id, domain, page_or_bundle, _publisher(publisher),
        () if cat is None else tuple(cat),
        () if sectioncat is None else tuple(sectioncat),
        () if pagecat is None else tuple(pagecat),
    )  # fmt: skip


def _geo(geo: Geo | None) -> tuple[Any, ...] | None:
    return None if geo is None else _fields(geo)


def _device(device: Device) -> tuple[Any, ...]:
    ip, ipv6, ua, devicetype, os, osv, make, model, geo, connectiontype, js, language = _fields(
        device
    )
    return (
        ua, devicetype, os, osv, make, model,
        ip is not None or ipv6 is not None,
        _geo(geo), connectiontype,
        None if js is None else js == 1,
        language,
    )  # fmt: skip


def _user(user: User) -> tuple[tuple[Any, ...], str | None]:
    """The user's record, and its consent string: 2.6's field, else 2.5's ``ext``."""
    user_id, buyeruid, yob, gender, geo, consent, ext = _fields(user)
    if consent is None and ext is not None:
        consent = ext.consent
    return (user_id is not None, buyeruid is not None, yob, gender, _geo(geo)), consent


def _regs(regs: Regs | None, consent: str | None) -> tuple[Any, ...]:
    """The 2.6 fields, else the 2.5 ``ext`` ones, as the validator reads them."""
    if regs is None:
        return _NO_REGS_RECORD if consent is None else (False, None, consent, None, None, ())
    gdpr, us_privacy, gpp, gpp_sid_list, coppa, ext = _fields(regs)
    gpp_sid: tuple[int, ...] = () if gpp_sid_list is None else tuple(gpp_sid_list)
    if ext is not None:
        if gdpr is None:
            gdpr = ext.gdpr
        if us_privacy is None:
            us_privacy = ext.us_privacy
        if gpp is None:
            gpp = ext.gpp
        if not gpp_sid and ext.gpp_sid is not None:
            gpp_sid = tuple(ext.gpp_sid)
    return (coppa == 1, gdpr, consent, us_privacy, gpp, gpp_sid)
