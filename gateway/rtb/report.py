"""Drop/loss trade-off of the bundled model on held-out synthetic traffic.

    python -m gateway.rtb.report [--rows N] [--seed S] [--png out/rtb_tradeoff.png]

Scores held-out traffic (same synthetic world, a traffic seed the model was
not trained on) with the pure-Python evaluator and prints, per threshold,
the share of requests dropped against the share of true bids lost. Bids are
labels drawn from each request's known propensity; "expected lost" uses the
propensities themselves (less noisy), and "oracle lost" is what a perfect
ranking by true propensity would lose at the same drop share.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.rtb.features import FeatureSpec, load_bundled_spec
from gateway.rtb.request import parse_bid_request
from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.xgb import BUNDLED_MODEL_PATH, XGBoostModel

__all__ = ["Scored", "TradeoffRow", "main", "score_held_out", "tradeoff"]

THRESHOLDS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)


@dataclass(frozen=True, slots=True)
class Scored:
    score: float
    propensity: float
    label: bool


@dataclass(frozen=True, slots=True)
class TradeoffRow:
    threshold: float
    dropped: float  # share of requests
    bids_lost: float  # share of true bids (labels)
    expected_lost: float  # share of summed propensity
    oracle_lost: float  # perfect ranking, same drop share


def score_held_out(rows: int, seed: int, model: XGBoostModel, spec: FeatureSpec) -> list[Scored]:
    traffic = list(SyntheticTraffic(seed).generate(rows))
    features = [spec.values(parse_bid_request(t.body), t.timestamp) for t in traffic]
    scores = model.predict_rows(features)
    return [Scored(s, t.propensity, t.label) for s, t in zip(scores, traffic, strict=True)]


def tradeoff(scored: Sequence[Scored], thresholds: Sequence[float]) -> list[TradeoffRow]:
    by_score = sorted(scored, key=lambda s: s.score)
    scores = [s.score for s in by_score]
    oracle = sorted(s.propensity for s in scored)
    bid_prefix = _prefix([float(s.label) for s in by_score])
    expected_prefix = _prefix([s.propensity for s in by_score])
    oracle_prefix = _prefix(oracle)
    rows = []
    for threshold in sorted(set(thresholds)):
        cut = bisect.bisect_left(scores, threshold)  # requests scored below it are dropped
        rows.append(
            TradeoffRow(
                threshold=threshold,
                dropped=cut / len(by_score),
                bids_lost=bid_prefix[cut] / max(bid_prefix[-1], 1.0),
                expected_lost=expected_prefix[cut] / expected_prefix[-1],
                oracle_lost=oracle_prefix[cut] / oracle_prefix[-1],
            )
        )
    return rows


def _prefix(values: Sequence[float]) -> list[float]:
    out = [0.0]
    for value in values:
        out.append(out[-1] + value)
    return out


def median_threshold(scored: Sequence[Scored]) -> float:
    """The threshold that drops half the requests."""
    scores = sorted(s.score for s in scored)
    return scores[len(scores) // 2]


def markdown(rows: Sequence[TradeoffRow], *, labels_only: bool = False) -> str:
    """The table; ``labels_only`` (a log: no known propensities) keeps the first three columns."""
    if labels_only:
        head = [
            "| threshold | requests dropped | true bids lost |",
            "|----------:|-----------------:|---------------:|",
        ]
        body = [f"| {r.threshold:.4f} | {r.dropped:6.1%} | {r.bids_lost:6.2%} |" for r in rows]
        return "\n".join(head + body)
    lines = [
        "| threshold | requests dropped | true bids lost | expected bids lost | oracle lost |",
        "|----------:|-----------------:|---------------:|-------------------:|------------:|",
    ]
    lines += [
        f"| {r.threshold:.4f} | {r.dropped:6.1%} | {r.bids_lost:6.2%} | "
        f"{r.expected_lost:6.2%} | {r.oracle_lost:6.2%} |"
        for r in rows
    ]
    return "\n".join(lines)


def plot(scored: Sequence[Scored], rows: Sequence[TradeoffRow], path: Path) -> None:
    import matplotlib  # the plot extra; never on the serving path

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fine = tradeoff(scored, sorted({s.score for s in scored})[:: max(1, len(scored) // 400)])
    figure, axes = plt.subplots(figsize=(6.4, 4.8))
    axes.plot([r.dropped for r in fine], [r.bids_lost for r in fine], label="model (true bids)")
    axes.plot(
        [r.dropped for r in fine], [r.oracle_lost for r in fine], "--", label="oracle ranking"
    )
    axes.plot([0, 1], [0, 1], ":", color="grey", label="random drop")
    axes.scatter([r.dropped for r in rows], [r.bids_lost for r in rows], s=12, zorder=3)
    axes.axvline(0.5, color="lightgrey", linewidth=0.8)
    axes.axhline(0.05, color="lightgrey", linewidth=0.8)
    axes.set_xlabel("share of bid requests dropped")
    axes.set_ylabel("share of true bids lost")
    axes.set_title(f"RTB pre-filter trade-off ({len(scored):,} held-out requests)")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.legend(loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.rtb.report", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1001, help="held-out traffic seed")
    parser.add_argument("--model", type=Path, default=BUNDLED_MODEL_PATH)
    parser.add_argument("--features", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args(argv)
    spec = FeatureSpec.load(args.features) if args.features else load_bundled_spec()
    scored = score_held_out(args.rows, args.seed, XGBoostModel.load(args.model), spec)
    half = median_threshold(scored)
    rows = tradeoff(scored, [*THRESHOLDS, half])
    bids = sum(s.label for s in scored)
    print(f"held-out: {len(scored):,} requests (seed {args.seed}), {bids:,} true bids "
          f"({bids / len(scored):.2%}); spec {spec.version}\n")  # fmt: skip
    print(markdown(rows))
    at_half = next(r for r in rows if r.threshold == half)
    print(f"\nAt threshold {half:.4f} ({at_half.dropped:.1%} dropped): "
          f"{at_half.bids_lost:.2%} of true bids lost "
          f"({at_half.expected_lost:.2%} expected; target <= 5%).")  # fmt: skip
    if args.png is not None:
        plot(scored, rows, args.png)
        print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
