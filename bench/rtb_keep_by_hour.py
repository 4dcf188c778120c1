"""The bundled model's keep share over the day: ``python -m bench.rtb_keep_by_hour``.

Scores the 40 hand-written, real-shaped bid requests of ``tests/rtb/fixtures``
(none made by the project's generators) at the half hour of every hour of one
day (UTC; by default Wednesday 2024-06-05, the day the tests pin) and prints,
per hour, how many the bundled model keeps at the filter's default threshold.
The hour and the day of the week are features, so the share kept depends on
when a request arrives. ``--week`` prints the range over the week's 168 hours.

    python -m bench.rtb_keep_by_hour [--day 2024-06-05] [--threshold 0.01] [--week]
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.rtb import BUNDLED_MODEL_PATH, FilterPolicy, XGBoostModel, parse_bid_request
from gateway.rtb.features import load_bundled_spec

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "rtb" / "fixtures"
WEDNESDAY = datetime.date(2024, 6, 5)


def hand_written_requests() -> list[bytes]:
    """The fixtures' bid requests: one per ``*.json``, one per line of ``real_shaped``."""
    shaped = (FIXTURES / "real_shaped" / "requests.jsonl").read_bytes().splitlines()
    return [line for line in shaped if line.strip()] + [
        path.read_bytes() for path in sorted(FIXTURES.glob("*.json"))
    ]


def kept_by_hour(
    bodies: Sequence[bytes],
    day: datetime.date = WEDNESDAY,
    threshold: float | None = None,
    hours: int = 24,
) -> list[int]:
    """Per hour from ``day``'s midnight (UTC): the requests scored at or above ``threshold``."""
    if threshold is None:
        threshold = FilterPolicy().threshold
    spec = load_bundled_spec()
    model = XGBoostModel.load(BUNDLED_MODEL_PATH)
    views = [parse_bid_request(body) for body in bodies]
    midnight = datetime.datetime.combine(day, datetime.time(), datetime.UTC).timestamp()
    kept = []
    for hour in range(hours):
        now = midnight + hour * 3600 + 1800
        scores = model.predict_rows([spec.values(view, now) for view in views])
        kept.append(sum(score >= threshold for score in scores))
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rtb_keep_by_hour", description=__doc__)
    parser.add_argument("--day", type=datetime.date.fromisoformat, default=WEDNESDAY)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--week", action="store_true", help="also the range over 7 days")
    args = parser.parse_args(argv)
    bodies = hand_written_requests()
    kept = kept_by_hour(bodies, args.day, args.threshold)
    total = len(bodies)
    print(f"{args.day:%A %Y-%m-%d} (UTC), {total} hand-written requests")
    print("| hour | kept | share |\n|-----:|-----:|------:|")
    for hour, count in enumerate(kept):
        print(f"| {hour:02d}:30 | {count} | {count / total:.0%} |")
    mean = sum(kept) / len(kept) / total
    print(f"\nkept {min(kept)} to {max(kept)} of {total} over the day; mean share {mean:.0%}")
    if args.week:
        week = kept_by_hour(bodies, args.day, args.threshold, hours=7 * 24)
        share = sum(week) / len(week) / total
        print(f"over the week from it: {min(week)} to {max(week)}; mean share {share:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
