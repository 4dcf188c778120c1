"""The trainer's work, the same on one machine or per partition on Dask (``distributed.py``).

Two passes over a log: the encoding part's value counts (`count_values`), then the
training and validation parts' feature rows (`feature_rows`); then the trees (`fit`).
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.rtb._logs import MAX_LINE_BYTES, LogLine, Outcome, TrainingRefused
from gateway.rtb.features import FeatureSpec, _reader, target_feature_spec
from gateway.rtb.request import InvalidBidRequest, Record, parse_record
from gateway.rtb.synth import SyntheticTraffic

__all__ = [
    "ENCODE",
    "TRAIN",
    "VALID",
    "Counts",
    "Rows",
    "TrainResult",
    "Unlabelled",
    "check_labelled",
    "count_values",
    "encodings_from_counts",
    "feature_rows",
    "fit",
    "part_of",
    "synthetic_lines",
    "train",
    "train_on_lines",
]

TREES: Final = 50
MAX_DEPTH: Final = 5
MIN_COUNT: Final = 10  # rarer values are left out of an encoding: they read as the prior
MAX_VALUES: Final = 3000  # per feature: keeps features.json commit-sized
SMOOTHING: Final = 50.0  # pseudo-count pulling rare values' bid rates toward the prior
ENCODE, TRAIN, VALID = "encode", "train", "valid"


@dataclass(slots=True)
class Unlabelled:
    """Readable requests without an outcome, or without a time: the data is refused."""

    no_outcome: int = 0
    no_time: int = 0
    example: str | None = None  # the first such request's id

    def add(self, request_id: str, *, outcome: bool) -> None:
        if outcome:
            self.no_time += 1
        else:
            self.no_outcome += 1
        if self.example is None:
            self.example = request_id[:80]

    def merge(self, other: Unlabelled) -> None:
        self.no_outcome += other.no_outcome
        self.no_time += other.no_time
        if self.example is None:
            self.example = other.example


@dataclass(slots=True)
class Counts:
    """Per target feature: value -> [requests, bids]; and the part's totals."""

    values: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    requests: int = 0
    bids: int = 0
    unreadable: int = 0
    unlabelled: Unlabelled = field(default_factory=Unlabelled)

    def merge(self, other: Counts) -> Counts:
        for name, table in other.values.items():
            mine = self.values.setdefault(name, {})
            for value, (seen, bids) in table.items():
                pair = mine.get(value)
                if pair is None:
                    mine[value] = [seen, bids]
                else:
                    pair[0] += seen
                    pair[1] += bids
        self.requests += other.requests
        self.bids += other.bids
        self.unreadable += other.unreadable
        self.unlabelled.merge(other.unlabelled)
        return self


@dataclass(slots=True)
class Rows:
    """Feature rows (CSV bytes, as the filter sends them) and labels, per part."""

    train: list[bytes] = field(default_factory=list)
    train_labels: list[bool] = field(default_factory=list)
    valid: list[bytes] = field(default_factory=list)
    valid_labels: list[bool] = field(default_factory=list)
    unreadable: int = 0
    unlabelled: Unlabelled = field(default_factory=Unlabelled)

    def merge(self, other: Rows) -> Rows:
        self.train += other.train
        self.train_labels += other.train_labels
        self.valid += other.valid
        self.valid_labels += other.valid_labels
        self.unreadable += other.unreadable
        self.unlabelled.merge(other.unlabelled)
        return self


@dataclass(frozen=True, slots=True)
class TrainResult:
    booster: Any  # xgboost.Booster
    spec: FeatureSpec
    valid_scores: list[float]
    valid_labels: list[bool]
    rows: dict[str, int]  # part -> rows (and "unreadable")


# --- the feature code, per partition (the same functions on one machine or on Dask) ----------


def part_of(body: bytes) -> str:
    """The part a request trains (by a hash of its bytes: stable, and no parse needed)."""
    bucket = zlib.crc32(body) % 10
    return ENCODE if bucket < 4 else (TRAIN if bucket < 9 else VALID)


def _labelled(
    line: LogLine,
    outcomes: Mapping[str, Outcome] | None,
    default_ts: float | None,
    unlabelled: Unlabelled,
) -> tuple[Record, float, bool] | None:
    """The request, its time and its outcome; None (counted in ``unlabelled``) if it lacks one.

    Raises `InvalidBidRequest` for a line that is not a bid request.
    """
    record = parse_record(line.body, max_bytes=MAX_LINE_BYTES)
    ts, bid = line.ts, line.bid
    outcome = None if outcomes is None else outcomes.get(record[0])
    if outcome is not None:
        bid = outcome.bid
        if ts is None:
            ts = outcome.ts
    if ts is None:
        ts = default_ts
    if ts is None or bid is None:
        unlabelled.add(record[0], outcome=bid is not None)
        return None
    return record, ts, bid


def count_values(
    spec: FeatureSpec,
    lines: Iterable[LogLine],
    outcomes: Mapping[str, Outcome] | None = None,
    default_ts: float | None = None,
) -> Counts:
    """Value counts and bids of the encoding part, per target feature."""
    targets = [f for f in spec.features if f.transform == "target"]
    readers = [(f.name, _reader(f, record=True)) for f in targets]
    counts = Counts(values={f.name: {} for f in targets})
    for line in lines:
        if part_of(line.body) != ENCODE:
            continue
        try:
            labelled = _labelled(line, outcomes, default_ts, counts.unlabelled)
        except InvalidBidRequest:
            counts.unreadable += 1
            continue
        if labelled is None:
            continue
        record, _, bid = labelled
        counts.requests += 1
        counts.bids += bid
        for name, read in readers:
            value = read(record)
            if value is not None:
                pair = counts.values[name].get(value)
                if pair is None:
                    counts.values[name][value] = [1, int(bid)]
                else:
                    pair[0] += 1
                    pair[1] += bid
    return counts


def encodings_from_counts(counts: Counts) -> dict[str, tuple[dict[str, float], float]]:
    """Per target feature: value -> smoothed bid rate, and the prior for any other value."""
    prior = _rate(counts.bids / max(1, counts.requests))
    encodings = {}
    for name, table in counts.values.items():
        common = sorted(
            ((value, pair) for value, pair in table.items() if pair[0] >= MIN_COUNT),
            key=lambda item: (-item[1][0], item[0]),
        )[:MAX_VALUES]
        encodings[name] = (
            {
                value: _rate((bids + SMOOTHING * prior) / (seen + SMOOTHING))
                for value, (seen, bids) in sorted(common)
            },
            prior,
        )
    return encodings


def _rate(value: float) -> float:
    """Six significant digits: the CSV text and the trained float32 then agree exactly."""
    return float(f"{value:.6g}")


def feature_rows(
    spec: FeatureSpec,
    lines: Iterable[LogLine],
    outcomes: Mapping[str, Outcome] | None = None,
    default_ts: float | None = None,
) -> Rows:
    """The train and validation parts' rows, by the filter's own ``record_csv_row``."""
    rows = Rows()
    row_of = spec.record_csv_row
    for line in lines:
        part = part_of(line.body)
        if part == ENCODE:
            continue
        try:
            labelled = _labelled(line, outcomes, default_ts, rows.unlabelled)
        except InvalidBidRequest:
            rows.unreadable += 1
            continue
        if labelled is None:
            continue
        record, ts, bid = labelled
        if part == TRAIN:
            rows.train.append(row_of(record, ts))
            rows.train_labels.append(bid)
        else:
            rows.valid.append(row_of(record, ts))
            rows.valid_labels.append(bid)
    return rows


# --- training -----------------------------------------------------------------------


def train_on_lines(
    lines: Callable[[], Iterable[LogLine]],
    *,
    outcomes: Mapping[str, Outcome] | None = None,
    default_ts: float | None = None,
    seed: int = 1,
    spec: FeatureSpec | None = None,
) -> TrainResult:
    """Two passes over ``lines()`` (it is called twice): encodings, then rows; then the trees."""
    base = spec if spec is not None else target_feature_spec()
    counts = count_values(base, lines(), outcomes, default_ts)
    check_labelled(counts.unlabelled, counts.requests, outcomes is not None, "encoding")
    trained = _versioned(base.with_encodings(encodings_from_counts(counts)))
    rows = feature_rows(trained, lines(), outcomes, default_ts)
    return fit(trained, counts, rows, seed, joined=outcomes is not None)


def check_labelled(
    unlabelled: Unlabelled, labelled: int, joined: bool, part: str | None = None
) -> None:
    """Refuse the data if any readable request (of ``part``, or all) has no outcome or no time."""
    missing = unlabelled.no_outcome + unlabelled.no_time
    if not missing:
        return
    first = unlabelled.example
    of = f"{missing:,} of {missing + labelled:,} readable requests"
    of += f" (the first: id {first!r})" if part is None else f" in the {part} part (id {first!r})"
    if unlabelled.no_outcome:
        source = "none joined by id from --outcomes" if joined else "give --outcomes"
        raise TrainingRefused(f"{of} have no outcome: no bid or price of their own, and {source}")
    raise TrainingRefused(f"{of} have no time: no ts of their own or joined; give --default-ts")


def fit(
    spec: FeatureSpec, counts: Counts, rows: Rows, seed: int, *, joined: bool = False
) -> TrainResult:
    """XGBoost on the rows' CSV bytes (the very text the filter sends), checked on validation.

    Refuses (`TrainingRefused`) data that failed a check: a request without an outcome
    or a time, too few rows, or a part without bids or without no-bids.
    """
    unlabelled = Unlabelled()
    unlabelled.merge(counts.unlabelled)
    unlabelled.merge(rows.unlabelled)
    check_labelled(unlabelled, counts.requests + len(rows.train) + len(rows.valid), joined)
    if not rows.train or not rows.valid:
        raise TrainingRefused(
            f"too few readable, labelled requests to train: {len(rows.train)} training and "
            f"{len(rows.valid)} validation rows ({rows.unreadable + counts.unreadable} skipped)"
        )
    for part, labels in (("training", rows.train_labels), ("validation", rows.valid_labels)):
        bids = sum(labels)
        if bids == 0 or bids == len(labels):
            only = "no-bids" if bids == 0 else "bids"
            raise TrainingRefused(
                f"the {part} part's {len(labels):,} requests are all {only}: training needs "
                f"both outcomes in each part (a larger log, or outcomes that join)"
            )

    import numpy as np  # the train extra; never on the serving path
    import xgboost as xgb

    def matrix(lines: list[bytes], labels: list[bool]) -> Any:
        values = np.loadtxt(io.BytesIO(b"\n".join(lines)), delimiter=",", dtype=np.float32, ndmin=2)
        data = xgb.DMatrix(values, label=np.array(labels, dtype=np.float32))
        data.feature_names = list(spec.names)
        return data

    dtrain = matrix(rows.train, rows.train_labels)
    dvalid = matrix(rows.valid, rows.valid_labels)
    params = {
        "objective": "binary:logistic",
        "max_depth": MAX_DEPTH,
        "eta": 0.2,
        "min_child_weight": 5,
        "tree_method": "hist",
        "nthread": 2,
        "seed": seed,
        "eval_metric": "logloss",
    }
    booster = xgb.train(
        params, dtrain, num_boost_round=TREES, evals=[(dvalid, VALID)], verbose_eval=False
    )
    scores = [float(s) for s in booster.predict(dvalid)]
    sizes = {
        ENCODE: counts.requests,
        TRAIN: len(rows.train),
        VALID: len(rows.valid),
        "unreadable": counts.unreadable + rows.unreadable,
    }
    return TrainResult(booster, spec, scores, list(rows.valid_labels), sizes)


def _versioned(spec: FeatureSpec) -> FeatureSpec:
    return FeatureSpec(f"{spec.version.split('+')[0]}+{spec.fingerprint()}", spec.features)


def synthetic_lines(rows: int, seed: int) -> list[LogLine]:
    """The synthetic generator's traffic as a log (envelope values: time and label)."""
    return [
        LogLine(item.body, item.timestamp, item.label)
        for item in SyntheticTraffic(seed).generate(rows)
    ]


def train(rows: int, seed: int) -> tuple[Any, FeatureSpec]:
    """Train on synthetic traffic; returns (xgboost.Booster, trained FeatureSpec)."""
    lines = synthetic_lines(rows, seed)
    result = train_on_lines(lambda: lines, seed=seed)
    return result.booster, result.spec
