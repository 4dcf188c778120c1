"""A declarative, versioned feature spec: bid request -> one CSV row.

A spec is an ordered list of features, each a transform applied to one or
more field paths of the parsed `BidRequest` view (e.g. ``site.domain``,
``device.geo.region``, ``imp.0.bidfloor``). Specs round-trip through JSON
so the exact vocabularies a model was trained with ship next to it.

The default spec is the AWS RTB guidance's seven features, in its order:
day of week, hour, advertiser, domain, region, city, device type.

"advertiser" is a stand-in. The AWS sample data comes from a DSP's logs,
where the advertiser is known; a bid request names the seller, not the
buyer. The closest per-request account identity is the publisher, so the
feature is the publisher id (site.publisher.id, else app.publisher.id) as
a categorical index. It keeps the guidance's column layout while carrying
a real signal: publishers differ in how much demand they attract, and a
publisher still identifies a long-tail domain the vocabulary never saw.

Trained vocabularies (see `gateway.rtb.train`) are ordered by smoothed bid
rate, so a categorical index is monotone in demand and a depth-5 tree can
split a few thousand domains with a handful of thresholds.

`target_feature_spec` is the spec the bundled model uses: its categorical
features are smoothed target encodings (a value's bid rate, pulled toward
the prior), learned on one part of the training log and used as features
on another, so the trees see how a value the encoding never saw behaves
(it reads as the prior) next to the segment features (format, device
class, app or site). A request unlike anything in training scores near
its segment's base rate, not near zero as an unknown vocabulary index did.

Out of vocabulary: every spec counts, per categorical or target feature,
the rows whose value was present but unknown (`FeatureSpec.counters`), so
the filter can export the share and warn on drift.

Transforms:
  hour, day_of_week   from the request time (UTC), passed in or now
  categorical         vocabulary index, 1..N; 0 is the unknown bucket
  target              the value's encoding (a bid rate); `default` (the
                      prior) for a value not in it, or absent
  present             1 when the path has a value, else 0 (e.g. ``app``)
  hash                crc32(value) % buckets + 1; 0 when absent
  numeric             float value, `default` when absent
  device_class        user agent or OpenRTB devicetype -> 0 unknown,
                      1 mobile, 2 desktop, 3 tablet, 4 ctv
"""

from __future__ import annotations

import math
import time
import types
import typing
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import orjson

from gateway.rtb import _useragent
from gateway.rtb.request import BidRequest, Record, record_index

__all__ = [
    "BUNDLED_FEATURES_PATH",
    "TRANSFORMS",
    "Feature",
    "FeatureSpec",
    "default_feature_spec",
    "load_bundled_spec",
    "target_feature_spec",
]

BUNDLED_FEATURES_PATH: Final = Path(__file__).parent / "data" / "features.json"
TRANSFORMS: Final = frozenset(
    {"hour", "day_of_week", "categorical", "target", "hash", "numeric", "device_class", "present"}
)
_LOOKUPS: Final = frozenset({"categorical", "target"})  # counted when out of vocabulary
_TIME_TRANSFORMS: Final = frozenset({"hour", "day_of_week"})
_COMBINES: Final = frozenset({"first", "join"})

Value = int | float
_ValuesFunction = Callable[[BidRequest, int], list[Value]]
_RowFunction = Callable[[BidRequest, int], bytes]
_RecordRowFunction = Callable[[Record, int], bytes]


@dataclass(frozen=True, slots=True)
class Feature:
    """One column: `transform` applied to the value found at `paths`.

    With several paths, ``combine="first"`` takes the first present value
    (e.g. site domain, else app bundle) and ``combine="join"`` joins them
    with "/" (e.g. country/region, so "CA" in the US and in Canada differ).
    """

    name: str
    transform: str
    paths: tuple[str, ...] = ()
    combine: str = "first"
    vocabulary: tuple[str, ...] = ()
    buckets: int = 0
    default: float = 0.0
    encoding: tuple[tuple[str, float], ...] = ()  # target: value -> bid rate

    def __post_init__(self) -> None:
        if self.transform not in TRANSFORMS:
            raise ValueError(f"feature {self.name!r}: unknown transform {self.transform!r}")
        if self.transform not in _TIME_TRANSFORMS and not self.paths:
            raise ValueError(f"feature {self.name!r}: transform {self.transform} needs paths")
        if self.combine not in _COMBINES:
            raise ValueError(f"feature {self.name!r}: combine must be 'first' or 'join'")
        if self.transform == "hash" and self.buckets <= 0:
            raise ValueError(f"feature {self.name!r}: hash needs buckets > 0")
        if not math.isfinite(self.default):
            raise ValueError(f"feature {self.name!r}: default must be finite")
        if self.vocabulary and self.transform != "categorical":
            raise ValueError(f"feature {self.name!r}: a vocabulary is for categorical features")
        if self.encoding and self.transform != "target":
            raise ValueError(f"feature {self.name!r}: an encoding is for target features")
        if not all(math.isfinite(rate) for _, rate in self.encoding):
            raise ValueError(f"feature {self.name!r}: encoding values must be finite")
        for path in self.paths:
            _check_path(path, self.name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "transform": self.transform}
        if self.paths:
            out["paths"] = list(self.paths)
        if self.combine != "first":
            out["combine"] = self.combine
        if self.transform == "categorical":
            out["vocabulary"] = list(self.vocabulary)
        if self.transform == "target":
            out["encoding"] = dict(self.encoding)
        if self.buckets:
            out["buckets"] = self.buckets
        if self.default:
            out["default"] = self.default
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Feature:
        unknown = set(data) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"feature {data.get('name')!r}: unknown keys {sorted(unknown)}")
        try:
            return cls(
                name=str(data["name"]),
                transform=str(data["transform"]),
                paths=tuple(str(p) for p in data.get("paths", ())),
                combine=str(data.get("combine", "first")),
                vocabulary=tuple(str(v) for v in data.get("vocabulary", ())),
                buckets=int(data.get("buckets", 0)),
                default=float(data.get("default", 0.0)),
                encoding=tuple(
                    (str(value), float(rate)) for value, rate in data.get("encoding", {}).items()
                ),
            )
        except KeyError as exc:
            raise ValueError(f"feature spec: missing key {exc.args[0]!r}") from None


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """An ordered, versioned list of features; compiled once, applied per request."""

    version: str
    features: tuple[Feature, ...]
    _values: _ValuesFunction = field(init=False, repr=False, compare=False)
    _row: _RowFunction = field(init=False, repr=False, compare=False)
    _record_row: _RecordRowFunction = field(init=False, repr=False, compare=False)
    # [rows, out-of-vocabulary rows of each `lookups` feature...], counted by every call.
    counters: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature spec: duplicate feature names")
        if not names:
            raise ValueError("feature spec: no features")
        counters = [0] * (1 + len(self.lookups))
        values, row, record_row = _compile(self.features, counters)
        object.__setattr__(self, "counters", counters)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_row", row)
        object.__setattr__(self, "_record_row", record_row)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    @property
    def lookups(self) -> tuple[str, ...]:
        """The features whose unknown values are counted (categorical and target)."""
        return tuple(f.name for f in self.features if f.transform in _LOOKUPS)

    def out_of_vocabulary(self) -> tuple[int, dict[str, int]]:
        """Rows computed so far, and per lookup feature the rows whose value it did not know."""
        counters = list(self.counters)  # one copy: rows and counts from the same moment
        return counters[0], dict(zip(self.lookups, counters[1:], strict=True))

    def with_encodings(
        self, encodings: Mapping[str, tuple[Mapping[str, float], float]]
    ) -> FeatureSpec:
        """A copy whose named target features use the given (encoding, prior)."""
        features = tuple(
            replace(
                f,
                encoding=tuple(encodings[f.name][0].items()),
                default=encodings[f.name][1],
            )
            if f.name in encodings
            else f
            for f in self.features
        )
        return FeatureSpec(self.version, features)

    def values(self, request: BidRequest, now: float | None = None) -> list[Value]:
        """Feature values in spec order; `now` is a Unix timestamp (default: now)."""
        return self._values(request, int(time.time() if now is None else now))

    def to_csv_row(self, request: BidRequest, now: float | None = None) -> bytes:
        """One headerless CSV row, no line terminator: the SageMaker XGBoost input."""
        return self._row(request, int(time.time() if now is None else now))

    def record_csv_row(self, record: Record, now: float | None = None) -> bytes:
        """`to_csv_row` of a `parse_record` record: the same bytes, without the view."""
        return self._record_row(record, int(time.time() if now is None else now))

    def with_vocabularies(self, vocabularies: Mapping[str, Sequence[str]]) -> FeatureSpec:
        """A copy whose named categorical features use the given vocabularies."""
        features = tuple(
            replace(f, vocabulary=tuple(vocabularies[f.name])) if f.name in vocabularies else f
            for f in self.features
        )
        return FeatureSpec(self.version, features)

    def fingerprint(self) -> str:
        """Short stable hash of the features (not the version): pins a model to its spec."""
        body = orjson.dumps([f.to_dict() for f in self.features], option=orjson.OPT_SORT_KEYS)
        return f"{zlib.crc32(body):08x}"

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "features": [f.to_dict() for f in self.features]}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpec:
        if not isinstance(data, Mapping) or "features" not in data or "version" not in data:
            raise ValueError("feature spec: expected an object with 'version' and 'features'")
        return cls(str(data["version"]), tuple(Feature.from_dict(f) for f in data["features"]))

    @classmethod
    def from_json(cls, data: bytes | str) -> FeatureSpec:
        try:
            return cls.from_dict(orjson.loads(data))
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"feature spec: not JSON: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> FeatureSpec:
        return cls.from_json(Path(path).read_bytes())

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_json() + b"\n")


def default_feature_spec(version: str = "aws-rtb-7") -> FeatureSpec:
    """The AWS guidance's seven features, with empty (untrained) vocabularies."""
    return FeatureSpec(
        version,
        (
            Feature("day_of_week", "day_of_week"),
            Feature("hour", "hour"),
            Feature("advertiser", "categorical", ("site.publisher.id", "app.publisher.id")),
            Feature("domain", "categorical", ("site.domain", "app.bundle")),
            Feature("region", "categorical", ("device.geo.country", "device.geo.region"), "join"),
            Feature(
                "city",
                "categorical",
                ("device.geo.country", "device.geo.region", "device.geo.city"),
                "join",
            ),
            Feature("device_type", "device_class", ("device.ua", "device.devicetype")),
        ),
    )


def target_feature_spec(version: str = "rtb-target-10") -> FeatureSpec:
    """The AWS seven with target encodings, plus the segment: format, country, app or site."""
    target = "target"
    return FeatureSpec(
        version,
        (
            Feature("day_of_week", "day_of_week"),
            Feature("hour", "hour"),
            Feature("advertiser", target, ("site.publisher.id", "app.publisher.id")),
            Feature("domain", target, ("site.domain", "app.bundle")),
            Feature("region", target, ("device.geo.country", "device.geo.region"), "join"),
            Feature(
                "city",
                target,
                ("device.geo.country", "device.geo.region", "device.geo.city"),
                "join",
            ),
            Feature("device_type", "device_class", ("device.ua", "device.devicetype")),
            Feature("country", target, ("device.geo.country",)),
            Feature("format", target, ("imp.0.kind",)),
            Feature("app", "present", ("app",)),
        ),
    )


def load_bundled_spec() -> FeatureSpec:
    """The spec (with vocabularies) the bundled model was trained with."""
    return FeatureSpec.load(BUNDLED_FEATURES_PATH)


# --- compilation: the whole spec becomes generated functions ---
#
# Reading a handful of attributes per feature through generic path-walking
# closures costs ~1 us per feature; straight-line code with the paths and
# vocabularies baked in costs a fraction of that, and this runs per request.
# Three functions come out of one spec: `values` (numbers) and `row` (CSV)
# read the view, `record_row` reads the same paths from a record by index.
# Each path, and each object on the way (``device``, ``device.geo``), is read
# once per call however many features use it, and the rows take categorical
# indexes as text from a table rather than formatting ints.


def _compile(
    features: Sequence[Feature], counters: list[int]
) -> tuple[_ValuesFunction, _RowFunction, _RecordRowFunction]:
    namespace: dict[str, Any] = {
        "crc32": zlib.crc32,
        "device_class": _useragent.device_class,
        "counters": counters,
    }
    names = [f"v{i}" for i in range(len(features))]
    csv = ",".join("{" + name + "}" for name in names)
    source: list[str] = []
    for function, record, text in (
        ("values", False, False),
        ("row", False, True),
        ("record_row", True, True),
    ):
        reads = _Reads(record=record)
        body: list[str] = ["    counters[0] += 1"]
        lookup = 0
        for i, feature in enumerate(features):
            if feature.transform in _LOOKUPS:
                lookup += 1
            body += _feature_lines(feature, f"v{i}", namespace, i, reads, text=text, slot=lookup)
        result = f'f"{csv}".encode()' if text else f"[{', '.join(names)}]"
        source += [f"def {function}(r, t):", *reads.lines, *body, f"    return {result}"]
    exec(compile("\n".join(source), "<feature spec>", "exec"), namespace)
    return namespace["values"], namespace["row"], namespace["record_row"]


def _reader(feature: Feature, *, record: bool = False) -> Callable[[Any], Any]:
    """The raw (untransformed) value of one feature, from a view (or a record if
    `record`): the same reads the rows make; used to learn vocabularies and encodings."""
    namespace: dict[str, Any] = {}
    reads = _Reads(record=record)
    body = _read_lines(feature, "x", reads)
    source = "\n".join(["def read(r):", *reads.lines, *body, "    return x"])
    exec(compile(source, f"<feature {feature.name}>", "exec"), namespace)
    read: Callable[[Any], Any] = namespace["read"]
    return read


def _feature_lines(
    feature: Feature,
    target: str,
    namespace: dict[str, Any],
    i: int,
    reads: _Reads,
    *,
    text: bool,
    slot: int,
) -> list[str]:
    """Code that leaves the feature's value in `target` (its CSV text if `text`).

    A lookup feature's unknown value (present, not in its table) adds one to
    ``counters[slot]``; that branch runs only for unknown values.
    """
    transform = feature.transform
    if transform == "hour":
        return [f"    {target} = (t % 86400) // 3600"]
    if transform == "day_of_week":
        # 1970-01-01 was a Thursday; Monday is 0 as in datetime.weekday().
        return [f"    {target} = (t // 86400 + 3) % 7"]
    lines = _read_lines(feature, "x", reads)
    if transform in _LOOKUPS:
        if transform == "categorical":
            table: dict[str, Any] = {v: n for n, v in enumerate(feature.vocabulary, start=1)}
            unknown: Any = 0
        else:
            table = dict(feature.encoding)
            unknown = feature.default
        if text:  # the CSV rows take the text from the table: no formatting per call
            table = {value: str(number) for value, number in table.items()}
            unknown = str(unknown)
        kind = "text" if text else "table"  # one namespace serves all three functions
        namespace[f"{kind}{i}"] = table
        namespace[f"{kind}_unknown{i}"] = unknown
        lines += [
            f"    {target} = {kind}{i}.get(x)",
            f"    if {target} is None:",
            f"        {target} = {kind}_unknown{i}",
            "        if x is not None:",
            f"            counters[{slot}] += 1",
        ]
    elif transform == "hash":
        lines.append(
            f"    {target} = 0 if x is None else crc32(str(x).encode()) % {feature.buckets} + 1"
        )
    elif transform == "numeric":
        namespace[f"numeric{i}"] = _numeric(feature.default)
        lines.append(f"    {target} = numeric{i}(x)")
    elif transform == "present":
        lines.append(f"    {target} = 0 if x is None else 1")
    else:
        lines.append(f"    {target} = device_class(x)")
    return lines


def _numeric(default: float) -> Callable[[Any], float]:
    def numeric(value: Any) -> float:
        if type(value) in (int, float, bool) and math.isfinite(value):
            return float(value)
        return default

    return numeric


def _read_lines(feature: Feature, target: str, reads: _Reads) -> list[str]:
    """Code that leaves the feature's raw value (or None) in `target`."""
    values = [reads.value(path) for path in feature.paths]
    if feature.combine == "first" or len(values) == 1:
        lines = [f"    {target} = {values[0]}"]
        for value in values[1:]:  # the first path that has a value
            lines += [f"    if {target} is None:", f"        {target} = {value}"]
        return lines
    none = " and ".join(f"{value} is None" for value in values)
    joined = "/".join("{'' if " + value + " is None else " + value + "}" for value in values)
    return [f'    {target} = None if {none} else f"{joined}"']


class _Reads:
    """Reads of paths from `r` (a view, or a record if `record`) into locals.

    Every path and every object on the way is read once, by the code in
    `lines` (which goes before the code using the locals); a path that
    meets None on the way reads as None.
    """

    def __init__(self, *, record: bool) -> None:
        self.record = record
        self.lines: list[str] = []
        self._locals: dict[str, str] = {}  # path prefix -> local holding it

    def value(self, path: str) -> str:
        """The local holding the path's value."""
        names = path.split(".")
        source = "r"
        for k, step in enumerate(_steps(path, record=self.record)):
            prefix = ".".join(names[: k + 1])
            local = self._locals.get(prefix)
            if local is None:
                local = self._locals[prefix] = f"n{len(self._locals)}"
                self.lines.append(f"    {local} = {_access(source, step)}")
            source = local
        return source


def _access(source: str, step: str | int) -> str:
    """One step from `source` (`r`, never None, or a local that may be None)."""
    if isinstance(step, int):
        read = f"({source}[{step}] if len({source}) > {step} else None)"
    else:
        read = f"{source}{step}"
    return read if source == "r" else f"(None if {source} is None else {read})"


def _steps(path: str, *, record: bool) -> list[str | int]:
    """Per step of a (checked) path: a list index, or how to read the field
    (`.name` on a view, `[position]` on a record)."""
    steps: list[str | int] = []
    kind: Any = BidRequest
    for step in path.split("."):
        kind = _unwrap_optional(kind)
        if step.isdigit():
            steps.append(int(step))
            kind = typing.get_args(kind)[0]
            continue
        steps.append(f"[{record_index(kind, step)}]" if record else f".{step}")
        kind = typing.get_type_hints(kind)[step]
    return steps


def _check_path(path: str, feature: str) -> None:
    """Refuse paths that name no field of the view, at load time rather than per request."""
    kind: Any = BidRequest
    for step in path.split("."):
        kind = _unwrap_optional(kind)
        if step.isdigit():
            if typing.get_origin(kind) is not tuple:
                raise ValueError(f"feature {feature!r}: path {path!r}: {step} indexes a non-list")
            kind = typing.get_args(kind)[0]
            continue
        hints = typing.get_type_hints(kind) if isinstance(kind, type) else {}
        if step not in hints:
            raise ValueError(f"feature {feature!r}: path {path!r}: no field {step!r}")
        kind = hints[step]
    if typing.get_origin(_unwrap_optional(kind)) is tuple:
        raise ValueError(f"feature {feature!r}: path {path!r} names a list, not a value")


def _unwrap_optional(kind: Any) -> Any:
    if isinstance(kind, types.UnionType):
        args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        return args[0] if len(args) == 1 else kind
    return kind
