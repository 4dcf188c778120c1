"""Train the bid-filter model: on your own bid logs, or on synthetic traffic.

    python -m gateway.rtb.train --requests LOG [--outcomes OUTCOMES] --out DIR
    python -m gateway.rtb.train --out DIR [--rows N] [--seed S]        # synthetic
    python -m gateway.rtb.train --requests 'logs/*.jsonl.gz' --engine dask --scheduler HOST:8786

A log holds one bid request per line (JSON lines, optionally gzipped) or per
row (Parquet with a ``request`` column, if pyarrow is installed). A line is
the request as received, or an envelope ``{"request": {...} or "...",
"ts": unix seconds, "bid": 0/1}`` (``"price": p`` also counts as a bid when
p > 0: the bidder answered with a price). ``--outcomes`` joins labels (and
``ts``) by request id from JSON lines ``{"id": ..., "bid": 0/1}``; a joined
outcome wins over the line's own.

The data is checked before anything is written: every readable request has
an outcome (its own or a joined one) and a time (its own, its outcome's, or
``--default-ts``); the training and validation parts each hold bids and
no-bids; a Parquet ``request`` column holds text, and ``ts``, ``bid`` and
``price`` numbers. A line that is not a bid request, a line over
`MAX_LINE_BYTES`, or an envelope whose ``ts``, ``bid`` or ``price`` is not
a number, is skipped and counted (``unreadable``).
Anything else wrong (a file that is not gzip, Parquet or JSON lines as
named, a truncated one, an outcome file with a bad line) is refused: one
line on stderr, exit status 1, nothing written. Work is bounded per input
byte: lines are read at most `MAX_LINE_BYTES` at a time, and a Parquet
file may hold no more rows than bytes nor decode to more than
`MAX_PARQUET_RATIO` times its size (about the most gzip inflates).

Features are computed by the filter's own code (``parse_record`` and
``FeatureSpec.record_csv_row``), so a training row is byte for byte the row
the filter sends online. Each request falls, by a hash of its bytes, into
one of three parts: the target encodings are learned on the first (40%),
the trees on the second (50%) and validated on the third (10%), so the
trees learn what a value the encodings never saw is worth.

Writes to ``--out`` (required; never a folder inside the installed package),
each file atomically: ``model.json`` (XGBoost JSON: binary:logistic, 50 trees,
depth 5), ``features.json`` (the spec with its encodings), ``model.tar.gz``
(``xgboost-model``, the layout SageMaker's XGBoost container and the
emulator load, plus ``features.json``), ``report.md`` (the validation
part's trade-off: share filtered against bids lost) and, with matplotlib,
``tradeoff.png``. Needs the ``train`` extra (xgboost, numpy); ``--engine
dask`` needs the ``distributed`` extra. The serving path imports neither.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import io
import math
import os
import shutil
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

import orjson

from gateway.rtb.features import FeatureSpec, _reader, target_feature_spec
from gateway.rtb.request import InvalidBidRequest, Record, parse_record
from gateway.rtb.synth import SyntheticTraffic

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_PARQUET_RATIO",
    "LogLine",
    "Outcome",
    "TrainResult",
    "TrainingRefused",
    "count_values",
    "encodings_from_counts",
    "feature_rows",
    "main",
    "read_log",
    "read_outcomes",
    "train",
    "train_on_lines",
]

TREES: Final = 50
MAX_DEPTH: Final = 5
MIN_COUNT: Final = 10  # rarer values are left out of an encoding: they read as the prior
MAX_VALUES: Final = 3000  # per feature: keeps features.json commit-sized
SMOOTHING: Final = 50.0  # pseudo-count pulling rare values' bid rates toward the prior
ENCODE, TRAIN, VALID = "encode", "train", "valid"
# The longest log line read (16x the filter's default request limit); a longer one is
# skipped in bounded reads and counted as unreadable.
MAX_LINE_BYTES: Final = 1 << 20
# Decoded request bytes a Parquet file may hold per byte of its own (gzip's ceiling is ~1032).
MAX_PARQUET_RATIO: Final = 1024
_PARQUET_BATCH: Final = 1024
_MS_EPOCH: Final = 1e11  # a timestamp past this is in milliseconds


class TrainingRefused(ValueError):
    """The trainer refuses its input: the message (one line) names the file and the problem."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One logged bid request: its bytes, and what the log says besides (if anything)."""

    body: bytes
    ts: float | None = None
    bid: bool | None = None


# A line read but unusable (over MAX_LINE_BYTES, or an envelope whose time or label is not
# a number): an empty body, which no parser reads, so it is counted as unreadable.
UNREADABLE_LINE: Final = LogLine(b"")


@dataclass(frozen=True, slots=True)
class Outcome:
    bid: bool
    ts: float | None = None


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


# --- reading logs ----------------------------------------------------------------


def read_log(path: str | Path) -> Iterator[LogLine]:
    """The lines of one log file: JSON lines (``.gz`` inflated) or Parquet.

    Raises `TrainingRefused` for a file it cannot read as what its name says.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _read_parquet(path)
        return
    for line in _raw_lines(path):
        line = line.strip()
        if line:
            yield log_line(line) if len(line) <= MAX_LINE_BYTES else UNREADABLE_LINE


def _raw_lines(path: Path) -> Iterator[bytes]:
    """Each line of a JSON lines file (``.gz`` inflated), read at most `MAX_LINE_BYTES` at a time.

    A longer line comes out as its first ``MAX_LINE_BYTES + 1`` bytes (the rest is read
    and dropped), so a line bomb costs no more memory than a line at the limit.
    """
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as stream:
            readline = stream.readline
            while line := readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    rest = line
                    while rest and not rest.endswith(b"\n"):
                        rest = readline(MAX_LINE_BYTES)
                yield line
    except EOFError:
        raise TrainingRefused(f"{path}: truncated gzip (it ends before its end marker)") from None
    except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise TrainingRefused(f"{path}: cannot read: {_one_line(exc)}") from None


def log_line(line: bytes) -> LogLine:
    """A log line: an envelope (``request`` with ``ts``/``bid``/``price``), or a bare request.

    An envelope whose ``ts``, ``bid`` or ``price`` is not a number is `UNREADABLE_LINE`.
    """
    if b'"request"' not in line:
        return LogLine(line)
    try:
        envelope = orjson.loads(line)
    except orjson.JSONDecodeError:
        return LogLine(line)  # unreadable: counted later, like any other
    if not isinstance(envelope, dict) or "request" not in envelope or "imp" in envelope:
        return LogLine(line)  # a bid request with a "request" key somewhere
    request = envelope["request"]
    body = request.encode() if isinstance(request, str) else orjson.dumps(request)
    try:
        return LogLine(body, _timestamp(envelope.get("ts")), _label(envelope))
    except ValueError:
        return UNREADABLE_LINE


def read_outcomes(path: str | Path) -> dict[str, Outcome]:
    """Request id -> outcome, from JSON lines ``{"id", "bid" or "price", "ts"?}`` (``.gz`` too).

    Any line that is not such an outcome is refused (`TrainingRefused`, naming the line).
    """
    path = Path(path)
    outcomes: dict[str, Outcome] = {}
    for number, line in enumerate(_raw_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if len(line) > MAX_LINE_BYTES:
            raise TrainingRefused(f"{where}: a line over {MAX_LINE_BYTES:,} bytes")
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TrainingRefused(f"{where}: not JSON: {exc}") from None
        if not isinstance(item, dict) or "id" not in item:
            raise TrainingRefused(f"{where}: an outcome needs an 'id'")
        request_id = item["id"]
        if type(request_id) is not str and type(request_id) is not int:
            raise TrainingRefused(f"{where}: 'id' must be a string or an integer")
        try:
            label = _label(item)
            if label is None:
                raise ValueError("an outcome needs a 'bid' (0 or 1) or a 'price'")
            outcomes[str(request_id)] = Outcome(label, _timestamp(item.get("ts")))
        except ValueError as exc:
            raise TrainingRefused(f"{where}: {exc}") from None
    return outcomes


def _label(item: Mapping[str, Any]) -> bool | None:
    """``bid`` (0, 1, true or false), else ``price`` > 0 (a number), else None."""
    if "bid" in item:
        bid = item["bid"]
        if bid not in (0, 1):  # False == 0 and True == 1
            raise ValueError(f"'bid' must be 0 or 1, got {_shown(bid)}")
        return bool(bid)
    price = item.get("price")
    if price is None:
        return None
    return _number(price, "price") > 0


def _timestamp(value: Any) -> float | None:
    """Unix seconds (milliseconds past `_MS_EPOCH`): a finite number, or None."""
    if value is None:
        return None
    seconds = _number(value, "ts")
    return seconds / 1000 if seconds > _MS_EPOCH else seconds


def _number(value: Any, name: str) -> float:
    if (type(value) is not int and type(value) is not float) or not math.isfinite(value):
        raise ValueError(f"{name!r} must be a finite number, got {_shown(value)}")
    return float(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --- Parquet --------------------------------------------------------------------------


def _read_parquet(path: Path) -> Iterator[LogLine]:
    try:
        import pyarrow
        import pyarrow.parquet as parquet
    except ImportError:
        raise TrainingRefused(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow)"
        ) from None
    try:
        size = path.stat().st_size
        log = parquet.ParquetFile(path, read_dictionary=["request"])
        columns = _parquet_columns(path, log.schema_arrow, pyarrow)
        outcome = columns[-1] if columns[-1] in ("bid", "price") else None
        _check_parquet_sizes(path, log.metadata, columns, size)
        decoded = 0
        for batch in log.iter_batches(batch_size=_PARQUET_BATCH, columns=columns):
            requests = batch.column(0)
            if not pyarrow.types.is_dictionary(requests.type):
                requests = requests.dictionary_encode()
            values = requests.dictionary
            ts, labels = (
                batch.column(columns.index(name)).to_pylist() if name in columns else None
                for name in ("ts", outcome)
            )
            for row, index in enumerate(requests.indices.to_pylist()):
                if index is None:
                    yield UNREADABLE_LINE
                    continue
                body = values[index].as_buffer()
                decoded += body.size
                if decoded > MAX_PARQUET_RATIO * size:
                    raise TrainingRefused(
                        f"{path}: its requests decode to more than {MAX_PARQUET_RATIO}x "
                        f"its {size:,} bytes"
                    )
                if body.size > MAX_LINE_BYTES:
                    yield UNREADABLE_LINE
                    continue
                yield _parquet_line(
                    body.to_pybytes(),
                    None if ts is None else ts[row],
                    None if labels is None else labels[row],
                )
    except pyarrow.ArrowException as exc:
        raise TrainingRefused(f"{path}: not a readable Parquet file: {_one_line(exc)}") from None
    except OSError as exc:
        raise TrainingRefused(f"{path}: cannot read: {_one_line(exc)}") from None


def _parquet_columns(path: Path, schema: Any, pyarrow: Any) -> list[str]:
    """The columns read (request, then ts and bid or price if present), their types checked."""
    types = pyarrow.types
    names = schema.names
    if "request" not in names:
        raise TrainingRefused(f"{path}: a Parquet log needs a 'request' column (the raw JSON)")
    numbers = (types.is_integer, types.is_floating, types.is_null)
    kinds: dict[str, tuple[Callable[[Any], bool], ...]] = {
        "request": (types.is_string, types.is_large_string, types.is_binary, types.is_large_binary),
        "ts": numbers,
        "bid": (types.is_boolean, *numbers),
        "price": numbers,
    }
    outcome = next((c for c in ("bid", "price") if c in names), None)
    columns = [c for c in ("request", "ts", outcome) if c is not None and c in names]
    for name in columns:
        kind = schema.field(name).type
        value_kind = kind.value_type if types.is_dictionary(kind) else kind
        if not any(test(value_kind) for test in kinds[name]):
            expected = "text (the raw JSON)" if name == "request" else "numbers"
            raise TrainingRefused(f"{path}: column {name!r} must hold {expected}, not {kind}")
    return columns


def _check_parquet_sizes(path: Path, metadata: Any, columns: list[str], size: int) -> None:
    """Refuse, before decoding, a file that claims more rows than bytes or pages past the ratio."""
    rows = metadata.num_rows
    if rows > size:
        raise TrainingRefused(f"{path}: {rows:,} rows in {size:,} bytes (more rows than bytes)")
    pages = 0
    for group in range(metadata.num_row_groups):
        chunks = metadata.row_group(group)
        for index in range(chunks.num_columns):
            chunk = chunks.column(index)
            if chunk.path_in_schema in columns:
                pages += chunk.total_uncompressed_size
    if pages > MAX_PARQUET_RATIO * size:
        raise TrainingRefused(
            f"{path}: its pages inflate to {pages:,} bytes, more than {MAX_PARQUET_RATIO}x "
            f"its {size:,} bytes"
        )


def _parquet_line(body: bytes, ts: Any, label: Any) -> LogLine:
    if ts is not None and not math.isfinite(ts):
        return UNREADABLE_LINE
    if label is not None:
        if not math.isfinite(label):
            return UNREADABLE_LINE
        label = label > 0
    return LogLine(body, _timestamp(ts), label)


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


# --- outputs ------------------------------------------------------------------------------


def write_outputs(result: TrainResult, out: Path) -> dict[str, int]:
    """model.json, features.json, model.tar.gz, report.md (and tradeoff.png with matplotlib).

    Each is made in a temporary folder inside ``out``, then moved over its namesake
    (`os.replace`): a reader never sees a half-written file, and a failure before the
    moves leaves ``out`` as it was. Refuses a folder inside the installed package.
    """
    from gateway.rtb.report import Scored, markdown, median_threshold, tradeoff

    refuse_package_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".train-", dir=out))
    except OSError as exc:
        raise TrainingRefused(f"--out {out}: {_one_line(exc)}") from None
    try:
        model = staging / "model.json"
        result.booster.save_model(str(model))
        result.spec.save(staging / "features.json")
        write_artifact(model, staging / "features.json", staging / "model.tar.gz")
        scored = [
            Scored(score, float(label), label)
            for score, label in zip(result.valid_scores, result.valid_labels, strict=True)
        ]
        thresholds = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, median_threshold(scored)]
        table = tradeoff(scored, sorted(thresholds))
        bids = sum(result.valid_labels)
        (staging / "report.md").write_text(
            f"# Trade-off on the validation part\n\n"
            f"{len(scored):,} requests, {bids:,} bids ({bids / max(1, len(scored)):.2%}); "
            f"spec {result.spec.version}; rows per part {result.rows}.\n\n"
            f"'requests dropped' is the share filtered, 'true bids lost' the share of bids "
            f"among them.\n\n{markdown(table, labels_only=True)}\n"
        )
        try:
            from gateway.rtb.report import plot

            plot(scored, table, staging / "tradeoff.png")
        except ImportError:  # the plot extra is optional
            pass
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            os.replace(staging / name, out / name)
    except OSError as exc:
        raise TrainingRefused(f"--out {out}: {_one_line(exc)}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {name: (out / name).stat().st_size for name in names}


_PACKAGE: Final = Path(__file__).resolve().parents[1]  # the installed gateway package


def refuse_package_folder(out: Path) -> None:
    """Refuse an output folder inside the installed package (its bundled model included)."""
    target = out.resolve()
    if target == _PACKAGE or _PACKAGE in target.parents:
        raise TrainingRefused(
            f"--out {out}: inside the installed package ({_PACKAGE}); give a folder of your own"
        )


def write_artifact(model: Path, features: Path, artifact: Path) -> None:
    """model.tar.gz as SageMaker's XGBoost container loads it: ``xgboost-model`` at the top."""
    with tarfile.open(artifact, "w:gz") as tar:
        for source, name in ((model, "xgboost-model"), (features, "features.json")):
            info = tarfile.TarInfo(name)
            data = source.read_bytes()
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


# --- command line -------------------------------------------------------------------------


def _paths(patterns: Sequence[str]) -> list[Path]:
    paths = [Path(p) for pattern in patterns for p in sorted(glob.glob(pattern)) or [pattern]]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise TrainingRefused(f"no such log file: {', '.join(missing)}")
    return paths


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")  # one line, no usage block


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


_finite.__name__ = "finite number"  # argparse names the type in its message


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="python -m gateway.rtb.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for the model and its report"
    )
    parser.add_argument("--requests", nargs="+", metavar="LOG", help="bid request logs (globs)")
    parser.add_argument("--outcomes", nargs="+", metavar="LOG", help="outcomes joined by id")
    parser.add_argument("--default-ts", type=_finite, default=None, help="time of untimed lines")
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic rows (no --requests)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=("local", "dask"), default="local")
    parser.add_argument("--scheduler", default=None, help="dask scheduler address (else local)")
    args = parser.parse_args(argv)
    if args.engine == "dask" and not args.requests:
        parser.error("--engine dask trains on --requests logs")
    try:
        return _train(args)
    except TrainingRefused as refused:
        print(f"{parser.prog}: {refused}", file=sys.stderr)
        return 1


def _train(args: argparse.Namespace) -> int:
    refuse_package_folder(args.out)  # before hours of work, not after
    outcomes: dict[str, Outcome] | None = None
    if args.outcomes:
        outcomes = {}
        for path in _paths(args.outcomes):
            outcomes.update(read_outcomes(path))
    if args.engine == "dask":
        from gateway.rtb import distributed

        result = distributed.train_on_files(
            _paths(args.requests),
            scheduler=args.scheduler,
            outcomes=outcomes,
            default_ts=args.default_ts,
            seed=args.seed,
        )
    elif args.requests:
        paths = _paths(args.requests)
        result = train_on_lines(
            lambda: (line for path in paths for line in read_log(path)),
            outcomes=outcomes,
            default_ts=args.default_ts,
            seed=args.seed,
        )
    else:
        lines = synthetic_lines(args.rows, args.seed)
        result = train_on_lines(lambda: lines, seed=args.seed)
    sizes = write_outputs(result, args.out)
    logloss = _logloss(result.valid_scores, result.valid_labels)
    print(
        f"trained ({args.engine}) on {result.rows}, spec {result.spec.version}; "
        f"validation logloss {logloss:.5f}; wrote {sizes}"
    )
    return 0


def _logloss(scores: Sequence[float], labels: Sequence[bool]) -> float:
    eps = 1e-7
    total = 0.0
    for score, label in zip(scores, labels, strict=True):
        p = min(1 - eps, max(eps, score))
        total -= math.log(p if label else 1 - p)
    return total / max(1, len(scores))


if __name__ == "__main__":
    sys.exit(main())
