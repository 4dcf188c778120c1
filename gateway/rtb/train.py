"""Train the bid-filter model: on your own bid logs, or on synthetic traffic.

    python -m gateway.rtb.train --requests LOG [--outcomes OUTCOMES] --out DIR
    python -m gateway.rtb.train --out DIR [--rows N] [--seed S]        # synthetic
    python -m gateway.rtb.train --requests 'logs/*.jsonl.gz' --engine dask --scheduler HOST:8786

A log holds one bid request per line (JSON lines, optionally gzipped) or per
row (Parquet with a ``request`` column, if pyarrow is installed). A line is
the request as received, or an envelope ``{"request": {...} or "...",
"ts": unix seconds, "bid": 0/1}`` (``"price": p`` also counts as a bid when
p > 0: the bidder answered with a price). ``--outcomes`` joins labels (and
``ts``) by request id from JSON lines ``{"id": ..., "bid": 0/1}``; a request
without an outcome is a no-bid.

Features are computed by the filter's own code (``parse_record`` and
``FeatureSpec.record_csv_row``), so a training row is byte for byte the row
the filter sends online. Each request falls, by a hash of its bytes, into
one of three parts: the target encodings are learned on the first (40%),
the trees on the second (50%) and validated on the third (10%), so the
trees learn what a value the encodings never saw is worth.

Writes to ``--out``: ``model.json`` (XGBoost JSON: binary:logistic, 50 trees,
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
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from gateway.rtb.features import FeatureSpec, _reader, target_feature_spec
from gateway.rtb.request import InvalidBidRequest, Record, parse_record
from gateway.rtb.synth import SyntheticTraffic

__all__ = [
    "LogLine",
    "Outcome",
    "TrainResult",
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
_MAX_LOGGED_BYTES: Final = 1 << 30  # a training log is read whole, whatever the serving limit
_MS_EPOCH: Final = 1e11  # a timestamp past this is in milliseconds


@dataclass(frozen=True, slots=True)
class LogLine:
    """One logged bid request: its bytes, and what the log says besides (if anything)."""

    body: bytes
    ts: float | None = None
    bid: bool | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    bid: bool
    ts: float | None = None


@dataclass(slots=True)
class Counts:
    """Per target feature: value -> [requests, bids]; and the part's totals."""

    values: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    requests: int = 0
    bids: int = 0
    unreadable: int = 0

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
        return self


@dataclass(slots=True)
class Rows:
    """Feature rows (CSV bytes, as the filter sends them) and labels, per part."""

    train: list[bytes] = field(default_factory=list)
    train_labels: list[bool] = field(default_factory=list)
    valid: list[bytes] = field(default_factory=list)
    valid_labels: list[bool] = field(default_factory=list)
    unreadable: int = 0

    def merge(self, other: Rows) -> Rows:
        self.train += other.train
        self.train_labels += other.train_labels
        self.valid += other.valid
        self.valid_labels += other.valid_labels
        self.unreadable += other.unreadable
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
    """The lines of one log file: JSON lines (``.gz`` inflated) or Parquet."""
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _read_parquet(path)
        return
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as lines:
        for line in lines:
            line = line.strip()
            if line:
                yield log_line(line)


def log_line(line: bytes) -> LogLine:
    """A log line: an envelope (``request`` with ``ts``/``bid``/``price``), or a bare request."""
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
    return LogLine(body, _timestamp(envelope.get("ts")), _label(envelope))


def _read_parquet(path: Path) -> Iterator[LogLine]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise SystemExit(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    table = parquet.read_table(path)
    columns = table.column_names
    if "request" not in columns:
        raise SystemExit(f"{path}: a Parquet log needs a 'request' column (the raw JSON)")
    requests = table.column("request").to_pylist()
    ts = table.column("ts").to_pylist() if "ts" in columns else [None] * len(requests)
    outcome = next((c for c in ("bid", "price") if c in columns), None)
    labels = table.column(outcome).to_pylist() if outcome else [None] * len(requests)
    for request, when, label in zip(requests, ts, labels, strict=True):
        body = request.encode() if isinstance(request, str) else bytes(request)
        yield LogLine(body, _timestamp(when), None if label is None else bool(label and label > 0))


def read_outcomes(path: str | Path) -> dict[str, Outcome]:
    """Request id -> outcome, from JSON lines ``{"id", "bid" or "price", "ts"?}`` (``.gz`` too)."""
    outcomes: dict[str, Outcome] = {}
    for line in read_log(path):
        try:
            item = orjson.loads(line.body)
        except orjson.JSONDecodeError as exc:
            raise SystemExit(f"{path}: not JSON lines: {exc}") from None
        if not isinstance(item, dict) or "id" not in item:
            raise SystemExit(f"{path}: every outcome needs an 'id'")
        outcomes[str(item["id"])] = Outcome(bool(_label(item)), _timestamp(item.get("ts")))
    return outcomes


def _label(item: Mapping[str, Any]) -> bool | None:
    if "bid" in item:
        return bool(item["bid"])
    price = item.get("price")
    return None if price is None else bool(float(price) > 0)


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    seconds = float(value)
    return seconds / 1000 if seconds > _MS_EPOCH else seconds


# --- the feature code, per partition (the same functions on one machine or on Dask) ----------


def part_of(body: bytes) -> str:
    """The part a request trains (by a hash of its bytes: stable, and no parse needed)."""
    bucket = zlib.crc32(body) % 10
    return ENCODE if bucket < 4 else (TRAIN if bucket < 9 else VALID)


def _labelled(
    line: LogLine, outcomes: Mapping[str, Outcome] | None, default_ts: float | None
) -> tuple[Record, float, bool]:
    record = parse_record(line.body, max_bytes=_MAX_LOGGED_BYTES)
    ts, bid = line.ts, line.bid
    if outcomes is not None:
        outcome = outcomes.get(record[0])
        bid = outcome is not None and outcome.bid
        if ts is None and outcome is not None:
            ts = outcome.ts
    if ts is None:
        ts = default_ts
    if ts is None or bid is None:
        missing = "a time (ts)" if ts is None else "an outcome (bid)"
        raise InvalidBidRequest(f"request {record[0]!r} has no {missing}", "unlabelled")
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
            record, _, bid = _labelled(line, outcomes, default_ts)
        except InvalidBidRequest:
            counts.unreadable += 1
            continue
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
            record, ts, bid = _labelled(line, outcomes, default_ts)
        except InvalidBidRequest:
            rows.unreadable += 1
            continue
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
    trained = _versioned(base.with_encodings(encodings_from_counts(counts)))
    rows = feature_rows(trained, lines(), outcomes, default_ts)
    return fit(trained, counts, rows, seed)


def fit(spec: FeatureSpec, counts: Counts, rows: Rows, seed: int) -> TrainResult:
    """XGBoost on the rows' CSV bytes (the very text the filter sends), checked on validation."""
    import numpy as np  # the train extra; never on the serving path
    import xgboost as xgb

    if not rows.train or not rows.valid:
        raise SystemExit(
            f"too few readable, labelled requests to train: {len(rows.train)} training and "
            f"{len(rows.valid)} validation rows ({rows.unreadable + counts.unreadable} skipped)"
        )

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
    """model.json, features.json, model.tar.gz, report.md (and tradeoff.png with matplotlib)."""
    from gateway.rtb.report import Scored, markdown, median_threshold, tradeoff

    out.mkdir(parents=True, exist_ok=True)
    model = out / "model.json"
    result.booster.save_model(str(model))
    result.spec.save(out / "features.json")
    write_artifact(model, out / "features.json", out / "model.tar.gz")
    scored = [
        Scored(score, float(label), label)
        for score, label in zip(result.valid_scores, result.valid_labels, strict=True)
    ]
    thresholds = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, median_threshold(scored)]
    table = tradeoff(scored, sorted(thresholds))
    bids = sum(result.valid_labels)
    (out / "report.md").write_text(
        f"# Trade-off on the validation part\n\n"
        f"{len(scored):,} requests, {bids:,} bids ({bids / max(1, len(scored)):.2%}); "
        f"spec {result.spec.version}; rows per part {result.rows}.\n\n"
        f"'requests dropped' is the share filtered, 'true bids lost' the share of bids "
        f"among them.\n\n{markdown(table, labels_only=True)}\n"
    )
    try:
        from gateway.rtb.report import plot

        plot(scored, table, out / "tradeoff.png")
    except ImportError:  # the plot extra is optional
        pass
    return {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}


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
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such log: {', '.join(missing)}")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.rtb.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--requests", nargs="+", metavar="LOG", help="bid request logs (globs)")
    parser.add_argument("--outcomes", nargs="+", metavar="LOG", help="outcomes joined by id")
    parser.add_argument("--default-ts", type=float, default=None, help="time of untimed lines")
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic rows (no --requests)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=("local", "dask"), default="local")
    parser.add_argument("--scheduler", default=None, help="dask scheduler address (else local)")
    args = parser.parse_args(argv)
    outcomes: dict[str, Outcome] | None = None
    if args.outcomes:
        outcomes = {}
        for path in _paths(args.outcomes):
            outcomes.update(read_outcomes(path))
    if args.engine == "dask":
        if not args.requests:
            raise SystemExit("--engine dask trains on --requests logs")
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
