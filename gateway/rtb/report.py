"""Drop/loss trade-off of the bundled model on held-out synthetic traffic, and over the week.

    python -m gateway.rtb.report [--rows N] [--seed S] [--threshold T] [--png out/rtb_tradeoff.png]
    python -m gateway.rtb.report --log requests.jsonl.gz [--threshold T]

Scores held-out traffic (same synthetic world, a traffic seed the model was
not trained on) with the pure-Python evaluator and prints, per threshold,
the share of requests dropped against the share of true bids lost. Bids are
labels drawn from each request's known propensity; "expected lost" uses the
propensities themselves (less noisy), and "oracle lost" is what a perfect
ranking by true propensity would lose at the same drop share.

Then, per hour of the week (UTC; rows the hour of day, columns the day), the
share of requests kept at ``--threshold`` (the filter's default, 0.01) and the
share of bids lost with them: the hour and the day are features of the model
and the bid rate swings over the day, so both move with the clock. On
synthetic traffic the bids lost are the expected ones (from propensities);
on a log, the logged outcomes.

``--log`` reads a bid log as the trainer does (``gateway.rtb.train``: JSON
lines or Parquet, each an envelope with ``request``, ``ts`` and ``bid`` or
``price``); lines without a time or an outcome, and unreadable requests, are
counted and left out. Both tables are then the log's.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.rtb._logs import read_log
from gateway.rtb.features import FeatureSpec, load_bundled_spec
from gateway.rtb.policy import FilterPolicy
from gateway.rtb.request import InvalidBidRequest, parse_bid_request
from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.xgb import BUNDLED_MODEL_PATH, XGBoostModel

__all__ = [
    "HourRow",
    "Scored",
    "TradeoffRow",
    "keep_by_hour",
    "main",
    "score_held_out",
    "score_log",
    "tradeoff",
]

THRESHOLDS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True, slots=True)
class Scored:
    score: float
    propensity: float
    label: bool
    timestamp: float | None = None  # Unix time the request was scored at


@dataclass(frozen=True, slots=True)
class HourRow:
    hour: int  # of the week, UTC: Monday 00:00-01:00 is 0, Sunday 23:00-24:00 is 167
    requests: int
    kept: float  # share of requests
    bids_lost: float  # share of the hour's bids (labels; propensities if `expected`)
    bids: float  # the hour's bids (labels, or summed propensity if `expected`)


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
    return [
        Scored(s, t.propensity, t.label, t.timestamp) for s, t in zip(scores, traffic, strict=True)
    ]


def score_log(
    paths: Iterable[str | Path], model: XGBoostModel, spec: FeatureSpec
) -> tuple[list[Scored], int]:
    """A bid log's requests scored at their logged time; and how many lines were left out."""
    features: list[list[float | int]] = []
    outcomes: list[tuple[bool, float]] = []
    skipped = 0
    for path in paths:
        for line in read_log(path):
            if line.ts is None or line.bid is None:
                skipped += 1
                continue
            try:
                view = parse_bid_request(line.body, max_bytes=len(line.body))
            except InvalidBidRequest:
                skipped += 1
                continue
            features.append(spec.values(view, line.ts))
            outcomes.append((line.bid, line.ts))
    scores = model.predict_rows(features) if features else []
    scored = [
        Scored(score, float(bid), bid, ts)
        for score, (bid, ts) in zip(scores, outcomes, strict=True)
    ]
    return scored, skipped


def hour_of_week(timestamp: float) -> int:
    """0 for Monday 00:00-01:00 UTC ... 167 for Sunday 23:00-24:00 (as the features count)."""
    seconds = int(timestamp)
    return (seconds // 86400 + 3) % 7 * 24 + (seconds % 86400) // 3600


def keep_by_hour(
    scored: Sequence[Scored], threshold: float, *, expected: bool = False
) -> list[HourRow]:
    """Per hour of the week: requests, the share kept at ``threshold``, the bids lost with
    the rest (``expected``: summed propensities instead of labels). Hours without traffic
    are left out."""
    requests = [0] * 168
    kept = [0] * 168
    bids = [0.0] * 168
    lost = [0.0] * 168
    for item in scored:
        if item.timestamp is None:
            continue
        hour = hour_of_week(item.timestamp)
        bid = item.propensity if expected else float(item.label)
        requests[hour] += 1
        bids[hour] += bid
        if item.score >= threshold:
            kept[hour] += 1
        else:
            lost[hour] += bid
    return [
        HourRow(hour, requests[hour], kept[hour] / requests[hour],
                lost[hour] / bids[hour] if bids[hour] else 0.0, bids[hour])
        for hour in range(168)
        if requests[hour]
    ]  # fmt: skip


def hours_markdown(rows: Sequence[HourRow]) -> str:
    """The week as two grids, a row per day and a column per hour (UTC): the share kept,
    then the share of bids lost, in percent ("-": no traffic that hour)."""
    by_hour = {row.hour: row for row in rows}
    hours = " | ".join(f"{hour:02d}" for hour in range(24))
    lines: list[str] = []
    for title, value in (("kept %", "kept"), ("lost %", "bids_lost")):
        lines += ["", f"| {title} | {hours} |", "|---|" + "---:|" * 24]
        for day, name in enumerate(DAYS):
            cells = []
            for hour in range(24):
                row = by_hour.get(day * 24 + hour)
                cells.append(" -" if row is None else f"{100 * getattr(row, value):2.0f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines[1:])


def hours_summary(rows: Sequence[HourRow]) -> str:
    """The range of the share kept over the week, and the week's totals."""
    if not rows:
        return "no request with a time: no per-hour figures"
    low = min(rows, key=lambda row: row.kept)
    high = max(rows, key=lambda row: row.kept)
    requests = sum(row.requests for row in rows)
    kept = sum(row.kept * row.requests for row in rows) / requests
    bids = sum(row.bids for row in rows)
    lost = sum(row.bids_lost * row.bids for row in rows) / bids if bids else 0.0

    def when(row: HourRow) -> str:
        return f"{DAYS[row.hour // 24]} {row.hour % 24:02d}:00"

    return (
        f"kept {low.kept:.0%} ({when(low)}) to {high.kept:.0%} ({when(high)}) of each hour's "
        f"requests; over the week {kept:.1%} kept, {lost:.2%} of bids lost"
    )


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
    parser.add_argument(
        "--threshold",
        type=float,
        default=FilterPolicy().threshold,
        help="the threshold of the per-hour table (default: the filter's)",
    )
    parser.add_argument(
        "--log", action="append", default=[], help="a bid log (JSON lines, .gz, Parquet): "
        "its requests instead of synthetic traffic; may repeat"
    )  # fmt: skip
    args = parser.parse_args(argv)
    spec = FeatureSpec.load(args.features) if args.features else load_bundled_spec()
    model = XGBoostModel.load(args.model)
    if args.log:
        scored, skipped = score_log(args.log, model, spec)
        if not scored:
            print(f"no usable line in {', '.join(args.log)} ({skipped} left out)", file=sys.stderr)
            return 1
        bids = sum(s.label for s in scored)
        print(f"log: {len(scored):,} requests, {bids:,} bids ({bids / len(scored):.2%}); "
              f"{skipped:,} lines left out (no time, no outcome or unreadable); "
              f"spec {spec.version}\n")  # fmt: skip
    else:
        scored = score_held_out(args.rows, args.seed, model, spec)
        bids = sum(s.label for s in scored)
        print(f"held-out: {len(scored):,} requests (seed {args.seed}), {bids:,} true bids "
              f"({bids / len(scored):.2%}); spec {spec.version}\n")  # fmt: skip
    half = median_threshold(scored)
    rows = tradeoff(scored, [*THRESHOLDS, half])
    print(markdown(rows, labels_only=bool(args.log)))
    at_half = next(r for r in rows if r.threshold == half)
    expected = "" if args.log else f" ({at_half.expected_lost:.2%} expected; target <= 5%)"
    print(f"\nAt threshold {half:.4f} ({at_half.dropped:.1%} dropped): "
          f"{at_half.bids_lost:.2%} of true bids lost{expected}.")  # fmt: skip
    hours = keep_by_hour(scored, args.threshold, expected=not args.log)
    lost = (
        "bids lost: the logged outcomes" if args.log else "bids lost: expected, from propensities"
    )
    print(f"\nPer hour of the week (UTC) at threshold {args.threshold:g} ({lost}):\n")
    print(hours_markdown(hours))
    print(f"\n{hours_summary(hours)}.")
    if args.png is not None:
        plot(scored, rows, args.png)
        print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
