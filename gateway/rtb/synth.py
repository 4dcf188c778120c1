"""Seeded synthetic OpenRTB 2.5/2.6 traffic with a known bid propensity.

The *world* (domains, apps, publishers, their quality, geo effects) comes
from `world_seed`; the *traffic* drawn from it comes from `seed`. Training
and the held-out report share the world and differ in traffic, as a model
trained on last week's log is scored on this week's requests.

Bid propensity is a product of effects, calibrated to a base bid rate of a
few percent (partner DSPs bid on under 5% of requests):
  publisher quality   a third of publishers are "junk" (made-for-arbitrage,
                      fraud-suspect) that DSPs almost never buy
  inventory quality   per domain / app bundle, lognormal around its publisher
  format              video > native > banner > audio
  device class        CTV > desktop > tablet > mobile
  geo                 per country (US high, IN low), per region and city
  hour / day          DSP budgets pace on their own clock: a peak in the US
                      evening (UTC), a trough in the US night; quieter weekends
Domains, apps and publishers are Zipf-distributed, so a long tail of
inventory is rarely seen (and unknown to a trained vocabulary).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = ["WEEK_START", "SyntheticBidRequest", "SyntheticTraffic", "sample_bodies"]

WEEK_START: Final = 1_717_372_800.0  # Monday 2024-06-03 00:00 UTC

_FORMAT_EFFECT: Final = {"video": 1.8, "native": 1.2, "banner": 1.0, "audio": 0.7}
_DEVICE_EFFECT: Final = {"ctv": 2.2, "desktop": 1.3, "tablet": 1.0, "mobile": 0.8}
_DEVICETYPE: Final = {"mobile": 4, "desktop": 2, "tablet": 5, "ctv": 3}
_DAY_EFFECT: Final = (1.1, 1.0, 1.0, 1.0, 1.05, 0.8, 0.75)
_JUNK_EFFECT: Final = 0.02
_PEAK_HOUR_UTC: Final = 19

# country (ISO 3166-1 alpha-3, as OpenRTB wants), traffic weight, effect, regions -> cities
_GEOS: Final[tuple[tuple[str, float, float, dict[str, tuple[str, ...]]], ...]] = (
    ("USA", 0.42, 1.5, {
        "CA": ("Los Angeles", "San Francisco", "San Diego"), "NY": ("New York", "Buffalo"),
        "TX": ("Houston", "Dallas", "Austin"), "FL": ("Miami", "Orlando"),
        "IL": ("Chicago",), "WA": ("Seattle", "Spokane"),
    }),
    ("GBR", 0.08, 1.2, {"ENG": ("London", "Manchester", "Birmingham"),
                        "SCT": ("Glasgow", "Edinburgh")}),
    ("DEU", 0.07, 1.0, {"BE": ("Berlin",), "BY": ("Munich", "Nuremberg"), "HH": ("Hamburg",)}),
    ("FRA", 0.05, 0.9, {"IDF": ("Paris",), "ARA": ("Lyon", "Grenoble")}),
    ("CAN", 0.05, 1.2, {"ON": ("Toronto", "Ottawa"), "QC": ("Montreal",),
                        "BC": ("Vancouver",)}),
    ("JPN", 0.04, 1.0, {"13": ("Tokyo",), "27": ("Osaka",)}),
    ("AUS", 0.03, 1.1, {"NSW": ("Sydney",), "VIC": ("Melbourne",)}),
    ("BRA", 0.07, 0.5, {"SP": ("Sao Paulo", "Campinas"), "RJ": ("Rio de Janeiro",)}),
    ("MEX", 0.05, 0.5, {"CMX": ("Mexico City",), "JAL": ("Guadalajara",)}),
    ("IND", 0.10, 0.25, {"MH": ("Mumbai", "Pune"), "DL": ("New Delhi",),
                         "KA": ("Bengaluru",)}),
    ("IDN", 0.04, 0.3, {"JK": ("Jakarta",), "JB": ("Bandung",)}),
)  # fmt: skip
_GDPR_COUNTRIES: Final = frozenset({"GBR", "DEU", "FRA"})

# (user agent template, os, make, model) per device class
_DEVICES: Final[dict[str, tuple[tuple[str, str, str, str], ...]]] = {
    "mobile": (
        ("Mozilla/5.0 (iPhone; CPU iPhone OS {ios}_{minor} like Mac OS X) AppleWebKit/605.1.15 "
         "(KHTML, like Gecko) Version/{ios}.{minor} Mobile/15E148 Safari/604.1",
         "iOS", "Apple", "iPhone"),
        ("Mozilla/5.0 (Linux; Android {android}; {phone}) AppleWebKit/537.36 "
         "(KHTML, like Gecko) Chrome/{chrome}.0.0.0 Mobile Safari/537.36",
         "Android", "", "{phone}"),
    ),
    "desktop": (
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
         "(KHTML, like Gecko) Chrome/{chrome}.0.0.0 Safari/537.36", "Windows", "", ""),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 "
         "(KHTML, like Gecko) Version/17.{minor} Safari/605.1.15", "macOS", "Apple", ""),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:{firefox}.0) Gecko/20100101 Firefox/{firefox}.0",
         "Linux", "", ""),
    ),
    "tablet": (
        ("Mozilla/5.0 (iPad; CPU OS {ios}_{minor} like Mac OS X) AppleWebKit/605.1.15 "
         "(KHTML, like Gecko) Version/{ios}.{minor} Mobile/15E148 Safari/604.1",
         "iPadOS", "Apple", "iPad"),
        ("Mozilla/5.0 (Linux; Android {android}; SM-X710) AppleWebKit/537.36 "
         "(KHTML, like Gecko) Chrome/{chrome}.0.0.0 Safari/537.36", "Android", "Samsung",
         "SM-X710"),
    ),
    "ctv": (
        ("Mozilla/5.0 (SMART-TV; LINUX; Tizen 7.0) AppleWebKit/537.36 "
         "(KHTML, like Gecko) 7.0 TV Safari/537.36", "Tizen", "Samsung", "QN65Q80C"),
        ("Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) "
         "Chrome/{chrome}.0.0.0 Safari/537.36 WebAppManager", "webOS", "LG", "OLED55C3"),
        ("Roku/DVP-13.0 (13.0.0.4170-AE)", "Roku OS", "Roku", "3941X"),
        ("Mozilla/5.0 (Linux; Android 9; AFTMM Build/PS7633.3445N; wv) AppleWebKit/537.36 "
         "(KHTML, like Gecko) Version/4.0 Chrome/{chrome}.0.0.0 Mobile Safari/537.36",
         "Fire OS", "Amazon", "AFTMM"),
    ),
}  # fmt: skip
_PHONES: Final = ("SM-S918B", "Pixel 8", "moto g 5G", "CPH2487", "2201116SG")
_BANNER_SIZES: Final = ((300, 250), (320, 50), (728, 90), (160, 600), (300, 600), (970, 250))
_IAB_CATS: Final = tuple(f"IAB{i}" for i in range(1, 27))
_WORDS: Final = (
    "daily", "news", "recipe", "sport", "tech", "game", "photo", "travel", "money", "style",
    "auto", "health", "movie", "music", "home", "garden", "weather", "puzzle", "word", "quiz",
    "local", "world", "market", "car", "pet", "baby", "fit", "cook", "film", "star",
)  # fmt: skip
_TLDS: Final = (".com", ".com", ".com", ".net", ".org", ".co.uk", ".de", ".io")


@dataclass(frozen=True, slots=True)
class SyntheticBidRequest:
    body: bytes
    propensity: float  # ground-truth probability that a DSP bids
    label: bool  # one draw from `propensity`
    timestamp: float  # Unix time the request "arrived" (drives hour/day features)


@dataclass(frozen=True, slots=True)
class _Inventory:
    channel: str  # "site" | "app"
    key: str  # domain or bundle
    publisher: str
    quality: float
    formats: tuple[str, ...]
    format_weights: tuple[float, ...]
    devices: tuple[str, ...]
    device_weights: tuple[float, ...]
    cats: tuple[str, ...]


class _World:
    """Everything fixed by `world_seed`: inventory, publishers, geo effects."""

    def __init__(self, seed: int, n_sites: int, n_apps: int, n_publishers: int) -> None:
        rng = random.Random(seed)
        publishers = [f"pub-{rng.getrandbits(32):08x}" for _ in range(n_publishers)]
        pub_quality = {
            pub: _JUNK_EFFECT if rng.random() < 0.35 else rng.lognormvariate(0.0, 0.8)
            for pub in publishers
        }
        pub_cum = _zipf_cum_weights(n_publishers, 0.9)
        self.sites = [self._site(rng, i, publishers, pub_cum, pub_quality) for i in range(n_sites)]
        self.apps = [self._app(rng, i, publishers, pub_cum, pub_quality) for i in range(n_apps)]
        self.site_cum = _zipf_cum_weights(n_sites, 1.05)
        self.app_cum = _zipf_cum_weights(n_apps, 1.05)
        self.geo_effect: dict[tuple[str, str, str], float] = {}
        self.geo_keys: list[tuple[str, str, str]] = []
        geo_weights = []
        for country, weight, effect, regions in _GEOS:
            region_share = weight / len(regions)
            for region, cities in regions.items():
                region_effect = effect * rng.lognormvariate(0.0, 0.2)
                for city in cities:
                    self.geo_keys.append((country, region, city))
                    geo_weights.append(region_share / len(cities))
                    city_effect = region_effect * rng.lognormvariate(0.0, 0.25)
                    self.geo_effect[(country, region, city)] = city_effect
        self.geo_cum = list(itertools.accumulate(geo_weights))

    @staticmethod
    def _site(
        rng: random.Random,
        i: int,
        publishers: list[str],
        pub_cum: list[float],
        pub_quality: dict[str, float],
    ) -> _Inventory:
        domain = f"{rng.choice(_WORDS)}{rng.choice(_WORDS)}{i}{rng.choice(_TLDS)}"
        pub = publishers[bisect.bisect(pub_cum, rng.random() * pub_cum[-1])]
        video = rng.random() * 0.3
        return _Inventory(
            channel="site",
            key=domain,
            publisher=pub,
            quality=pub_quality[pub] * rng.lognormvariate(0.0, 0.6),
            formats=("banner", "video", "native"),
            format_weights=(1.0 - video - 0.15, video, 0.15),
            devices=("desktop", "mobile", "tablet"),
            device_weights=(0.45, 0.45, 0.10),
            cats=(rng.choice(_IAB_CATS),),
        )

    @staticmethod
    def _app(
        rng: random.Random,
        i: int,
        publishers: list[str],
        pub_cum: list[float],
        pub_quality: dict[str, float],
    ) -> _Inventory:
        bundle = f"com.{rng.choice(_WORDS)}{i}.{rng.choice(_WORDS)}"
        pub = publishers[bisect.bisect(pub_cum, rng.random() * pub_cum[-1])]
        quality = pub_quality[pub] * rng.lognormvariate(0.0, 0.6)
        kind = rng.random()
        formats: tuple[str, ...]
        format_weights: tuple[float, ...]
        devices: tuple[str, ...]
        device_weights: tuple[float, ...]
        if kind < 0.15:  # streaming (CTV) apps: video only
            formats, format_weights = ("video",), (1.0,)
            devices, device_weights = ("ctv",), (1.0,)
        elif kind < 0.22:  # music / podcast apps
            formats, format_weights = ("audio", "banner"), (0.7, 0.3)
            devices, device_weights = ("mobile", "tablet"), (0.85, 0.15)
        else:
            formats, format_weights = ("banner", "video", "native"), (0.6, 0.3, 0.1)
            devices, device_weights = ("mobile", "tablet"), (0.8, 0.2)
        return _Inventory(
            "app", bundle, pub, quality, formats, format_weights, devices, device_weights,
            (rng.choice(_IAB_CATS),),
        )  # fmt: skip


class SyntheticTraffic:
    """Seeded generator of bid requests with ground-truth bid propensities."""

    def __init__(
        self,
        seed: int = 0,
        *,
        world_seed: int = 7,
        base_rate: float = 0.02,
        start: float = WEEK_START,
        days: float = 7.0,
        n_sites: int = 4000,
        n_apps: int = 2500,
        n_publishers: int = 400,
    ) -> None:
        self._rng = random.Random(seed)
        self._world = _World(world_seed, n_sites, n_apps, n_publishers)
        self._base_rate = base_rate
        self._start = start
        self._span = days * 86400.0

    def generate(self, n: int) -> Iterator[SyntheticBidRequest]:
        for _ in range(n):
            yield self.one()

    def one(self) -> SyntheticBidRequest:
        rng, world = self._rng, self._world
        timestamp = float(int(self._start + rng.random() * self._span))
        if rng.random() < 0.55:
            inventory = world.sites[
                bisect.bisect(world.site_cum, rng.random() * world.site_cum[-1])
            ]
        else:
            inventory = world.apps[bisect.bisect(world.app_cum, rng.random() * world.app_cum[-1])]
        fmt = rng.choices(inventory.formats, inventory.format_weights)[0]
        device = rng.choices(inventory.devices, inventory.device_weights)[0]
        geo = world.geo_keys[bisect.bisect(world.geo_cum, rng.random() * world.geo_cum[-1])]
        propensity = self._propensity(inventory, fmt, device, geo, timestamp)
        request = _Builder(rng).build(inventory, fmt, device, geo)
        label = rng.random() < propensity
        return SyntheticBidRequest(orjson.dumps(request), propensity, label, timestamp)

    def _propensity(
        self,
        inventory: _Inventory,
        fmt: str,
        device: str,
        geo: tuple[str, str, str],
        timestamp: float,
    ) -> float:
        seconds = int(timestamp)
        hour = (seconds % 86400) // 3600
        day = (seconds // 86400 + 3) % 7
        hour_effect = math.exp(0.9 * math.cos(2 * math.pi * (hour - _PEAK_HOUR_UTC) / 24))
        effect = (
            inventory.quality
            * _FORMAT_EFFECT[fmt]
            * _DEVICE_EFFECT[device]
            * self._world.geo_effect[geo]
            * hour_effect
            * _DAY_EFFECT[day]
        )
        return min(0.9, self._base_rate * effect)


class _Builder:
    """Turns the drawn facts into an OpenRTB 2.5 or 2.6 JSON object."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._v26 = rng.random() < 0.6

    def build(
        self, inventory: _Inventory, fmt: str, device: str, geo: tuple[str, str, str]
    ) -> dict[str, Any]:
        rng = self._rng
        request: dict[str, Any] = {
            "id": f"{rng.getrandbits(64):016x}",
            "imp": [self._imp(fmt, inventory.channel, "1")],
            inventory.channel: self._inventory(inventory),
            "device": self._device(device, geo, inventory.channel),
            "user": self._user(geo[0]),
            "at": 1,
            "tmax": rng.choice((80, 100, 120, 150, 200, 250, 300)),
            "cur": ["USD"],
            "bcat": rng.sample(_IAB_CATS, 3),
            "source": self._source(),
        }
        if rng.random() < 0.1:  # a few multi-imp requests
            request["imp"].append(self._imp(fmt, inventory.channel, "2"))
        regs = self._regs(geo[0])
        if regs:
            request["regs"] = regs
        return request

    def _imp(self, fmt: str, channel: str, imp_id: str) -> dict[str, Any]:
        rng = self._rng
        imp: dict[str, Any] = {
            "id": imp_id,
            "tagid": f"slot-{rng.randrange(1, 40)}",
            "bidfloor": round(rng.lognormvariate(-0.5, 0.8), 2),
            "bidfloorcur": "USD",
            "secure": 1,
        }
        if fmt == "banner":
            w, h = rng.choice(_BANNER_SIZES)
            imp["banner"] = {"w": w, "h": h, "format": [{"w": w, "h": h}], "pos": 1}
        elif fmt == "video":
            imp["video"] = {
                "mimes": ["video/mp4", "application/x-mpegURL"],
                "minduration": 5,
                "maxduration": rng.choice((15, 30, 60)),
                "protocols": [2, 3, 5, 6],
                "w": 1920 if channel == "app" else 640,
                "h": 1080 if channel == "app" else 480,
                "linearity": 1,
                "plcmt": 1,
            }
        elif fmt == "native":
            imp["native"] = {"request": '{"ver":"1.2","assets":[{"id":1,"title":{"len":90}}]}'}
        else:
            imp["audio"] = {"mimes": ["audio/mp4"], "minduration": 5, "maxduration": 30}
        if channel == "app" and fmt != "audio" and rng.random() < 0.2:
            imp["instl"] = 1
        return imp

    def _inventory(self, inventory: _Inventory) -> dict[str, Any]:
        publisher = {"id": inventory.publisher}
        if inventory.channel == "site":
            return {
                "id": f"s{zlib.crc32(inventory.key.encode()) % 10**6}",
                "domain": inventory.key,
                "page": f"https://{inventory.key}/article/{self._rng.randrange(10**5)}",
                "cat": list(inventory.cats),
                "publisher": publisher,
            }
        return {
            "id": f"a{len(inventory.key)}",
            "bundle": inventory.key,
            "storeurl": f"https://play.google.com/store/apps/details?id={inventory.key}",
            "cat": list(inventory.cats),
            "publisher": publisher,
        }

    def _device(self, device: str, geo: tuple[str, str, str], channel: str) -> dict[str, Any]:
        rng = self._rng
        template, os_name, make, model = rng.choice(_DEVICES[device])
        phone = rng.choice(_PHONES)
        ua = template.format(
            ios=rng.randrange(15, 18),
            minor=rng.randrange(0, 6),
            android=rng.randrange(11, 15),
            chrome=rng.randrange(118, 126),
            firefox=rng.randrange(118, 127),
            phone=phone,
        )
        model = model.format(phone=phone)
        out: dict[str, Any] = {
            "ua": ua,
            "ip": f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.0",
            "geo": {"country": geo[0], "region": geo[1], "city": geo[2], "type": 2},
            "os": os_name,
            "connectiontype": rng.choice((2, 2, 6, 5)),
            "language": "en",
        }
        if rng.random() < 0.85:  # some exchanges omit devicetype; the UA then decides
            out["devicetype"] = _DEVICETYPE[device]
        if make:
            out["make"] = make
        if model:
            out["model"] = model
        if channel == "site":
            out["js"] = 1
        else:
            out["ifa"] = f"{rng.getrandbits(128):032x}"
        return out

    def _user(self, country: str) -> dict[str, Any]:
        rng = self._rng
        user: dict[str, Any] = {"id": f"u{rng.getrandbits(48):012x}"}
        if rng.random() < 0.4:
            user["buyeruid"] = f"b{rng.getrandbits(48):012x}"
        if rng.random() < 0.2:
            user["yob"] = rng.randrange(1950, 2006)
        if country in _GDPR_COUNTRIES:
            consent = "CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA"
            if self._v26:
                user["consent"] = consent
            else:
                user["ext"] = {"consent": consent}
        return user

    def _regs(self, country: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if country in _GDPR_COUNTRIES:
            fields["gdpr"] = 1
        elif country == "USA":
            fields["us_privacy"] = "1YNN"
        if not fields:
            return {}
        if not self._v26:
            return {"ext": fields}
        if country == "USA" and self._rng.random() < 0.5:
            fields["gpp"] = "DBABMA~CPXxRfAPXxRfAAfKABENB-CgAAAAAAAAAAYgAAAAAAAA"
            fields["gpp_sid"] = [7]
        return fields

    def _source(self) -> dict[str, Any]:
        tid = f"{self._rng.getrandbits(64):016x}"
        schain = {"complete": 1, "ver": "1.0", "nodes": [{"asi": "exchange.example", "sid": "1"}]}
        if self._v26:
            return {"tid": tid, "schain": schain}
        return {"tid": tid, "ext": {"schain": schain}}


def _zipf_cum_weights(n: int, exponent: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank**exponent) for rank in range(1, n + 1)))


def sample_bodies(n: int, seed: int = 0) -> Sequence[bytes]:
    """Just the request bodies: handy for benchmarks and examples."""
    return [item.body for item in SyntheticTraffic(seed).generate(n)]
