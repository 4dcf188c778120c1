"""User agent (or OpenRTB devicetype) -> a coarse device class.

Substring checks, not a UA database: the model only needs the class, and
bid streams repeat a small set of user agents, so results are memoised.
"""

from __future__ import annotations

from typing import Final

UNKNOWN: Final = 0
MOBILE: Final = 1
DESKTOP: Final = 2
TABLET: Final = 3
CTV: Final = 4

DEVICE_CLASSES: Final = {"unknown": UNKNOWN, "mobile": MOBILE, "desktop": DESKTOP}
DEVICE_CLASSES.update({"tablet": TABLET, "ctv": CTV})

# OpenRTB 2.x list 5.21 / AdCOM list "Device Types".
_DEVICETYPE_CLASS: Final = {1: MOBILE, 2: DESKTOP, 3: CTV, 4: MOBILE, 5: TABLET, 6: UNKNOWN, 7: CTV}

_CTV_MARKERS: Final = (
    "smart-tv", "smarttv", "smart tv", "tizen", "web0s", "webos", "roku", "appletv",
    "apple tv", "crkey", "; aft", "bravia", "hbbtv", "playstation", "xbox", "googletv",
    "android tv", "vizio",
)  # fmt: skip
_TABLET_MARKERS: Final = ("ipad", "tablet", "kindle", "silk/", "sm-t", "tab ")
_MOBILE_MARKERS: Final = ("iphone", "mobile", "android", "ipod", "windows phone")
_DESKTOP_MARKERS: Final = ("windows nt", "macintosh", "x11", "cros", "linux x86_64")

# Only this many leading characters are looked at. Real user agents are
# a few hundred characters and every marker sits early in them; a longer one
# is hostile or broken, and must cost neither CPU nor memory in proportion.
MAX_UA_CHARS: Final = 512
# The memo holds at most this many keys of at most MAX_UA_CHARS each: about
# 4096 x (512 + overhead) bytes, ~2.5 MiB however the traffic varies.
_CACHE_LIMIT: Final = 4096
_cache: dict[str, int] = {}


def device_class(value: str | int | None) -> int:
    """Class of a user agent string, or of an OpenRTB devicetype integer."""
    if value is None:
        return UNKNOWN
    if type(value) is int:
        return _DEVICETYPE_CLASS.get(value, UNKNOWN)
    ua = value if type(value) is str else str(value)  # str() of a str still costs a call
    if len(ua) > MAX_UA_CHARS:
        ua = ua[:MAX_UA_CHARS]
    cached = _cache.get(ua)
    if cached is None:
        cached = _classify(ua.lower())
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()  # hostile traffic can vary UAs endlessly; stay bounded
        _cache[ua] = cached
    return cached


def _classify(ua: str) -> int:
    if any(marker in ua for marker in _CTV_MARKERS):
        return CTV
    if any(marker in ua for marker in _TABLET_MARKERS):
        return TABLET
    if "android" in ua and "mobile" not in ua:
        return TABLET  # Android tablets omit "Mobile" from the UA
    if any(marker in ua for marker in _MOBILE_MARKERS):
        return MOBILE
    if any(marker in ua for marker in _DESKTOP_MARKERS):
        return DESKTOP
    return UNKNOWN
