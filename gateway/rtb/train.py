"""Train the bundled bid-likelihood model on synthetic traffic.

    python -m gateway.rtb.train --out gateway/rtb/data/ [--rows N] [--seed S]

Writes `model.json` (XGBoost JSON: binary:logistic, 50 trees, depth 5, the
AWS RTB guidance's shape) and `features.json` (the feature spec with the
vocabularies learned here). Needs the `train` extra (xgboost, numpy); the
serving path never imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.rtb.features import Feature, FeatureSpec, _reader, default_feature_spec
from gateway.rtb.request import BidRequest, parse_bid_request
from gateway.rtb.synth import SyntheticTraffic

__all__ = ["TrainingData", "build_vocabularies", "main", "train"]

TREES = 50
MAX_DEPTH = 5
_MIN_COUNT = 10  # rarer values fall into the unknown bucket
_MAX_VOCABULARY = 3000  # keeps features.json commit-sized
_SMOOTHING = 50.0  # pseudo-count pulling rare values' bid rates toward the mean


@dataclass(slots=True)
class TrainingData:
    requests: list[BidRequest]
    timestamps: list[float]
    labels: list[bool]


def synthesize(rows: int, seed: int) -> TrainingData:
    data = TrainingData([], [], [])
    for item in SyntheticTraffic(seed).generate(rows):
        data.requests.append(parse_bid_request(item.body))
        data.timestamps.append(item.timestamp)
        data.labels.append(item.label)
    return data


def build_vocabularies(spec: FeatureSpec, data: TrainingData) -> dict[str, list[str]]:
    """Per categorical feature: values seen >= _MIN_COUNT times, by smoothed bid rate."""
    prior = sum(data.labels) / max(1, len(data.labels))
    return {
        feature.name: _vocabulary(feature, data, prior)
        for feature in spec.features
        if feature.transform == "categorical"
    }


def _vocabulary(feature: Feature, data: TrainingData, prior: float) -> list[str]:
    read = _reader(feature)
    seen: Counter[str] = Counter()
    bids: Counter[str] = Counter()
    for request, label in zip(data.requests, data.labels, strict=True):
        value = read(request)
        if value is not None:
            seen[value] += 1
            bids[value] += label
    common = [value for value, count in seen.most_common(_MAX_VOCABULARY) if count >= _MIN_COUNT]

    def smoothed_rate(value: str) -> float:
        return (bids[value] + _SMOOTHING * prior) / (seen[value] + _SMOOTHING)

    # Ordered by demand, so the index itself is a good split variable for trees.
    return sorted(common, key=lambda value: (smoothed_rate(value), value))


def train(rows: int, seed: int) -> tuple[Any, FeatureSpec]:
    """Returns (xgboost.Booster, trained FeatureSpec)."""
    import numpy as np  # the train extra; never on the serving path
    import xgboost as xgb

    data = synthesize(rows, seed)
    spec = default_feature_spec().with_vocabularies(
        build_vocabularies(default_feature_spec(), data)
    )
    spec = FeatureSpec(f"aws-rtb-7+{spec.fingerprint()}", spec.features)
    matrix = np.array(
        [spec.values(r, t) for r, t in zip(data.requests, data.timestamps, strict=True)],
        dtype=np.float32,
    )
    dtrain = xgb.DMatrix(matrix, label=np.array(data.labels, dtype=np.float32))
    dtrain.feature_names = list(spec.names)
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
    booster = xgb.train(params, dtrain, num_boost_round=TREES)
    return booster, spec


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.rtb.train", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    booster, spec = train(args.rows, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(args.out / "model.json"))
    spec.save(args.out / "features.json")
    sizes = {name: (args.out / name).stat().st_size for name in ("model.json", "features.json")}
    print(f"trained on {args.rows} rows (seed {args.seed}), spec {spec.version}: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
