"""The trainer's feature code on Dask, for logs that do not fit one machine.

    python -m gateway.rtb.train --engine dask --scheduler HOST:8786 --requests 'logs/*.jsonl.gz' \
        --out DIR
    train_on_files(paths, scheduler="HOST:8786")        # or None: a LocalCluster here
    train_on_bag(bag)                                   # any dask.bag of `LogLine`s

The two passes of `gateway.rtb.train` run per partition on the workers, with
the same functions as on one machine (`count_values`, `feature_rows`: the
filter's own parser and feature rows); only their small results come back
(value counts, then CSV rows), and XGBoost trains on the client. Needs the
``distributed`` extra (``dask[distributed]``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.rtb._logs import LogLine, Outcome, read_log
from gateway.rtb._training import (
    Counts,
    Rows,
    TrainResult,
    _versioned,
    check_labelled,
    count_values,
    encodings_from_counts,
    feature_rows,
    fit,
)
from gateway.rtb.features import FeatureSpec, target_feature_spec
from gateway.rtb.synth import SyntheticTraffic

__all__ = ["synthetic_bag", "train_on_bag", "train_on_files"]


def train_on_files(
    paths: Sequence[str | Path],
    *,
    scheduler: str | None = None,
    outcomes: Mapping[str, Outcome] | None = None,
    default_ts: float | None = None,
    seed: int = 1,
) -> TrainResult:
    """One partition per log file, on the scheduler at ``scheduler`` (or a LocalCluster)."""
    import dask.bag as db

    bag = db.from_sequence([str(p) for p in paths], npartitions=len(paths)).map_partitions(
        _read_files
    )
    with _client(scheduler):
        return train_on_bag(bag, outcomes=outcomes, default_ts=default_ts, seed=seed)


def train_on_bag(
    bag: Any,
    *,
    outcomes: Mapping[str, Outcome] | None = None,
    default_ts: float | None = None,
    seed: int = 1,
    spec: FeatureSpec | None = None,
) -> TrainResult:
    """Train on a dask.bag of `LogLine` (on the current Dask client or scheduler)."""
    base = (spec if spec is not None else target_feature_spec()).to_dict()
    counts: Counts = bag.reduction(
        functools.partial(_count, base, outcomes, default_ts), _merge
    ).compute()
    check_labelled(counts.unlabelled, counts.requests, outcomes is not None, "encoding")
    trained = _versioned(FeatureSpec.from_dict(base).with_encodings(encodings_from_counts(counts)))
    rows: Rows = bag.reduction(
        functools.partial(_rows, trained.to_dict(), outcomes, default_ts), _merge
    ).compute()
    return fit(trained, counts, rows, seed, joined=outcomes is not None)


def synthetic_bag(requests: int, partitions: int, *, seed: int = 1, templates: int = 2000) -> Any:
    """A dask.bag of ``requests`` synthetic log lines, generated on the workers.

    Each partition draws from the same ``templates`` synthetic requests (made
    once per worker) with fresh ids and labels drawn from their propensities:
    a million-line log without a million-line file, or the minutes the
    generator would take.
    """
    import dask.bag as db

    size = -(-requests // partitions)
    spans = [(i * size, min(size, requests - i * size)) for i in range(partitions)]
    return db.from_sequence(spans, npartitions=partitions).map_partitions(
        _synthetic_partition, seed, templates
    )


# --- per partition (run on the workers: module-level, so they pickle by name) ----------


def _read_files(paths: Iterable[str]) -> Iterator[LogLine]:
    for path in paths:
        yield from read_log(path)


def _count(
    spec: dict[str, Any],
    outcomes: Mapping[str, Outcome] | None,
    default_ts: float | None,
    lines: Iterable[LogLine],
) -> Counts:
    return count_values(FeatureSpec.from_dict(spec), lines, outcomes, default_ts)


def _rows(
    spec: dict[str, Any],
    outcomes: Mapping[str, Outcome] | None,
    default_ts: float | None,
    lines: Iterable[LogLine],
) -> Rows:
    return feature_rows(FeatureSpec.from_dict(spec), lines, outcomes, default_ts)


def _merge(parts: Iterable[Any]) -> Any:
    parts = list(parts)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    return merged


@functools.lru_cache(maxsize=2)
def _templates(seed: int, count: int) -> tuple[tuple[bytes, float, float], ...]:
    return tuple(
        (item.body, item.propensity, item.timestamp)
        for item in SyntheticTraffic(seed).generate(count)
    )


def _synthetic_partition(
    spans: Iterable[tuple[int, int]], seed: int, templates: int
) -> Iterator[LogLine]:
    drawn = _templates(seed, templates)
    for start, count in spans:
        rng = random.Random(seed * 1_000_003 + start)
        for index in range(start, start + count):
            body, propensity, ts = drawn[index % templates]
            # Synthetic bodies open with {"id":"<16 hex digits>": a new id, same request.
            yield LogLine(b'{"id":"%016x"' % index + body[24:], ts, rng.random() < propensity)


class _client:
    """A client on ``scheduler``, or on a LocalCluster of this machine's cores."""

    def __init__(self, scheduler: str | None) -> None:
        self._scheduler = scheduler
        self._client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> Any:
        from distributed import Client, LocalCluster

        if self._scheduler is None:
            # The dashboard on a free port: 8787 may be another cluster's.
            self._cluster = LocalCluster(
                processes=True, threads_per_worker=1, dashboard_address=":0"
            )
            self._client = Client(self._cluster)
        else:
            self._client = Client(self._scheduler)
        return self._client

    def __exit__(self, *exc: object) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()
