"""``python -m bench.rtb_throughput --quick --json`` runs end to end and reports sane JSON.

Only the shape and sanity of the report are checked, never a timing: the
machine is shared and noisy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = (
    "achieved_rps",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "filter_cpu_pct",
    "filter_cpu_us_per_request",
    "mean_batch",
)


def test_quick_run_reports_both_upstreams() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.rtb_throughput", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    assert report["parse_features_us"] > 0
    assert report["plan"]["gc"] == "frozen"  # the default: tune_gc() before each rate
    rows = report["rows"]
    assert [row["upstream"] for row in rows] == ["emulator", "stub"]
    for row in rows:
        for key in FIGURES:
            assert isinstance(row[key], float) and row[key] > 0, (row["upstream"], key, row[key])
        assert row["p50_ms"] <= row["p99_ms"] <= row["p999_ms"]
        assert row["batches"] > 0 and 0.0 <= row["kept_share"] <= 1.0
        assert row["failed_open"] >= 0 and isinstance(row["keeping_up"], bool)
        assert row["gc_frozen_objects"] > 0


CACHED_STUB = ("--cache", "--upstreams", "stub", "--gc", "default")


def test_quick_run_with_cached_scores() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.rtb_throughput", "--quick", "--json", *CACHED_STUB],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    assert report["plan"]["gc"] == "default"
    rows = report["rows"]
    assert [(row["upstream"], row["cache"]) for row in rows] == [("stub", False), ("stub", True)]
    assert all(row["gc_frozen_objects"] == 0 for row in rows)
    assert rows[0]["cache_hit_share"] == 0.0
    assert 0.0 < rows[1]["cache_hit_share"] < 1.0  # synthetic rows repeat, but not all
    for row in rows:
        assert row["achieved_rps"] > 0 and row["mean_batch"] > 0


def test_rules_cost_reports_both_sides_and_the_spread() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.rtb_throughput", "--rules-cost", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    assert report["rules"] == 20 and report["rounds"] > 0
    assert report["submit_us"] > 0 and report["with_rules_and_cap_us"] > 0
    assert report["added_us_min"] <= report["added_us_median"] <= report["added_us_max"]
    assert len(report["added_us_iqr"]) == 2 and len(report["ratio_iqr"]) == 2
    assert 0.5 < report["rule_matched_share"] <= 1.0  # the rules see the synthetic traffic
