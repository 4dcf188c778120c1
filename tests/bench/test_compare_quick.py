"""``python -m bench.compare --quick`` runs end to end and reports sane JSON.

No timing is asserted (the machine is shared and noisy): only that every
figure is there and positive, that each client's calls reached the stub,
and that a warm native gateway opens no connection while it is measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ("gateway-native", "raw-floor", "raw-floor+sign")


def run_quick() -> dict[str, Any]:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            "--quick",
            "--clients",
            ",".join(CLIENTS),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def test_quick_compare_reports_every_client_and_zero_new_connections() -> None:
    report = run_quick()
    assert set(report["clients"]) == set(CLIENTS)
    for name, row in report["clients"].items():
        for key in ("sequential_us", "sequential_cpu_us", "cpu_us", "calls_per_s"):
            assert isinstance(row[key], float) and row[key] > 0, (name, key, row[key])
        assert row["in_flight"] == 64
        assert row["calls_per_round"] >= report["plan"]["calls"]
        # Every measured call reached the stub, and no connection was opened for it.
        assert row["stub_requests_measured"] == row["expected_requests_measured"] > 0
        assert row["connections_opened"]["warm"] > 0
        assert row["connections_opened_measured"] == 0, (name, row["connections_opened"])

    native = report["clients"]["gateway-native"]
    stats = native["client_stats_measured"]
    assert stats["connections_opened"] == 0
    assert native["failed_calls"] == 0
    assert stats["requests"] == stats["reused"] == native["expected_requests_measured"]

    signing = report["signing"]
    assert signing["signature_matches_botocore"] is True
    for key in ("botocore_add_auth_us", "ours_presorted_us", "ours_per_call_us"):
        assert signing[key] > 0
    ratios = report["ratios"]
    assert ratios["native_vs_floor"] > 0
    assert ratios["native_vs_signed_floor"] > 0
    # The verdict is a judgement on timings (noisy here): only that it is made.
    assert report["verdicts"]["native_vs_signed_floor"] in {True, False}
    assert report["machine"]["gateway_hot_path"] in {"compiled", "pure"}
    assert ratios["native_connections_opened_measured"] == 0
    assert report["verdicts"]["native_zero_connections"] is True
    assert report["machine"]["versions"]["botocore"]
