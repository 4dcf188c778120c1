"""The bid request's msgspec structs and their decoder, for ``_typed``.

They live apart from ``_typed``, which mypyc compiles: msgspec reads a
struct's annotations at class creation, which a compiled class does not
give it. Each struct names only the fields the record needs; msgspec skips
the rest without building them. ``_typed`` unpacks each struct's values in
the order declared here: change an order there and here together.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

# ``X | None = None``: absent or null, as the validators treat them.
Flag = Literal[0, 1]
# The largest ``tmax`` (ms) read: a 32-bit integer, ~24 days. Larger is refused, as
# a deadline no auction has (a 400-digit one would not convert to seconds).
MAX_TMAX: Final = 2**31 - 1


class Node(msgspec.Struct, gc=False):
    """The base of every struct here. Decoded JSON holds no reference cycles,
    so the collector need not track (or ever walk) these objects."""


class Object(Node):
    """Any JSON object (its fields unread): audio, native, schain."""


class Format(Node):
    w: int | None = None
    h: int | None = None


class Banner(Node):
    w: int | None = None
    h: int | None = None
    format: list[Format] | None = None


class Video(Node):
    w: int | None = None
    h: int | None = None


class Imp(Node):
    id: str | None = None
    banner: Banner | None = None
    video: Video | None = None
    audio: Object | None = None
    native: Object | None = None
    bidfloor: Annotated[float, msgspec.Meta(ge=0)] | None = None
    bidfloorcur: str | None = None
    instl: Flag | None = None
    secure: Flag | None = None


class Publisher(Node):
    id: str | None = None
    domain: str | None = None


class Site(Node):
    id: str | None = None
    domain: str | None = None
    page: str | None = None
    publisher: Publisher | None = None
    cat: list[str] | None = None
    sectioncat: list[str] | None = None
    pagecat: list[str] | None = None


class App(Node):
    id: str | None = None
    domain: str | None = None
    bundle: str | None = None
    publisher: Publisher | None = None
    cat: list[str] | None = None
    sectioncat: list[str] | None = None
    pagecat: list[str] | None = None


class Geo(Node):
    country: str | None = None
    region: str | None = None
    city: str | None = None
    lat: float | None = None
    lon: float | None = None


class Device(Node):
    ip: str | None = None
    ipv6: str | None = None
    ua: str | None = None
    devicetype: int | None = None
    os: str | None = None
    osv: str | None = None
    make: str | None = None
    model: str | None = None
    geo: Geo | None = None
    connectiontype: int | None = None
    js: Flag | None = None
    language: str | None = None


class UserExt(Node):
    consent: str | None = None


class User(Node):
    id: str | None = None
    buyeruid: str | None = None
    yob: int | None = None
    gender: str | None = None
    geo: Geo | None = None
    consent: str | None = None
    ext: UserExt | None = None


class RegsExt(Node):
    gdpr: int | None = None
    us_privacy: str | None = None
    gpp: str | None = None
    gpp_sid: list[int] | None = None


class Regs(Node):
    gdpr: int | None = None
    us_privacy: str | None = None
    gpp: str | None = None
    gpp_sid: list[int] | None = None
    coppa: Flag | None = None
    ext: RegsExt | None = None


class SourceExt(Node):
    schain: Object | None = None


class Source(Node):
    schain: Object | None = None
    ext: SourceExt | None = None


class BidRequest(Node):
    id: str
    imp: Annotated[list[Imp], msgspec.Meta(min_length=1)]
    site: Site | None = None
    app: App | None = None
    device: Device | None = None
    user: User | None = None
    regs: Regs | None = None
    source: Source | None = None
    tmax: Annotated[int, msgspec.Meta(gt=0, le=MAX_TMAX)] | None = None
    at: int | None = None
    bcat: list[str] | None = None
    badv: list[str] | None = None
    cur: list[str] | None = None
    test: Flag | None = None


decode: Final = msgspec.json.Decoder(BidRequest).decode
