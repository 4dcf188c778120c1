"""``python -m gateway.rtb.report``: the share kept and the bids lost per hour of the week."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from gateway.rtb.report import Scored, hour_of_week, hours_markdown, keep_by_hour, main
from gateway.rtb.synth import WEEK_START, SyntheticTraffic


def test_hours_of_the_week_count_from_monday_midnight_utc() -> None:
    assert hour_of_week(WEEK_START) == 0  # Monday 2024-06-03 00:00 UTC
    assert hour_of_week(WEEK_START + 2 * 86400 + 14.5 * 3600) == 2 * 24 + 14  # Wed 14:30
    assert hour_of_week(WEEK_START + 7 * 86400 - 1) == 167
    assert hour_of_week(WEEK_START + 7 * 86400) == 0


def test_keep_by_hour_counts_each_hour_apart() -> None:
    wednesday_14 = WEEK_START + 2 * 86400 + 14 * 3600 + 60
    sunday_04 = WEEK_START + 6 * 86400 + 4 * 3600 + 60
    scored = [
        Scored(0.5, 0.2, True, wednesday_14),
        Scored(0.005, 0.1, True, wednesday_14),  # dropped at 0.01: its bid is lost
        Scored(0.02, 0.05, False, wednesday_14),
        Scored(0.001, 0.3, False, wednesday_14),  # dropped, no bid
        Scored(0.009, 0.4, True, sunday_04),
        Scored(0.9, 0.9, True, None),  # no time: not in any hour
    ]
    wednesday, sunday = keep_by_hour(scored, 0.01)
    assert (wednesday.hour, wednesday.requests, wednesday.kept) == (62, 4, 0.5)
    assert wednesday.bids_lost == pytest.approx(1 / 2)
    assert (sunday.hour, sunday.kept, sunday.bids_lost) == (148, 0.0, 1.0)
    expected = keep_by_hour(scored, 0.01, expected=True)[0]
    assert expected.bids_lost == pytest.approx((0.1 + 0.3) / (0.2 + 0.1 + 0.05 + 0.3))
    grid = hours_markdown([wednesday, sunday]).splitlines()
    assert grid[0].startswith("| kept % | 00 | 01 |") and grid[0].endswith("| 23 |")
    wed = next(line for line in grid if line.startswith("| Wed |"))
    assert wed.split(" | ")[1 + 14] == "50"
    assert wed.split(" | ")[1 + 13] == " -"
    assert len([line for line in grid if line.startswith(("| Mon", "| Sun"))]) == 4


def test_the_report_prints_the_week_on_synthetic_traffic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--rows", "4000", "--seed", "9"]) == 0
    out = capsys.readouterr().out
    assert "Per hour of the week (UTC) at threshold 0.01 (bids lost: expected" in out
    days = [line for line in out.splitlines() if line.startswith(("| Mon |", "| Sun |"))]
    assert len(days) == 4 and all(line.count("|") == 26 for line in days)
    assert "of each hour's requests; over the week" in out


def test_the_report_reads_a_log_with_times_and_outcomes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "bids.jsonl.gz"
    lines = [
        orjson.dumps({"request": orjson.loads(t.body), "ts": t.timestamp, "bid": int(t.label)})
        for t in SyntheticTraffic(5).generate(600)
    ]
    lines += [
        orjson.dumps({"request": {"id": "x", "imp": [{"id": "1", "banner": {}}]}}),  # no ts
        orjson.dumps({"request": {"id": "y", "imp": []}, "ts": WEEK_START, "bid": 0}),
    ]
    log.write_bytes(gzip.compress(b"\n".join(lines)))
    assert main(["--log", str(log), "--threshold", "0.02"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("log: 600 requests")
    assert "2 lines left out (no time, no outcome or unreadable)" in out
    assert "at threshold 0.02 (bids lost: the logged outcomes)" in out
    assert "expected bids lost" not in out  # a log has no propensities
