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
import io
import math
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from gateway.rtb._logs import (
    MAX_LINE_BYTES,
    MAX_PARQUET_RATIO,
    LogLine,
    Outcome,
    TrainingRefused,
    _one_line,
    read_log,
    read_outcomes,
)
from gateway.rtb._training import (
    TrainResult,
    count_values,
    encodings_from_counts,
    feature_rows,
    synthetic_lines,
    train,
    train_on_lines,
)

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
