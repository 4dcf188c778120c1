"""``python -m bench.compare --quick`` runs end to end and reports sane JSON.

No timing is asserted (the machine is shared and noisy): only that every
figure is there and positive, that each client's calls reached the stub,
that a warm native gateway opens no connection while it is measured, and
that the ratios come with one value per alternating round.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ("gateway-native", "raw-floor", "raw-floor+sign")
REPEATS = 2


def run_quick(*extra: str) -> dict[str, Any]:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            "--quick",
            "--repeats",
            str(REPEATS),
            "--clients",
            ",".join(CLIENTS),
            "--json",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def check_setup(report: dict[str, Any], setup: dict[str, Any]) -> None:
    assert set(setup["clients"]) == set(CLIENTS)
    for name, row in setup["clients"].items():
        for key in ("sequential_us", "sequential_cpu_us", "cpu_us", "calls_per_s"):
            assert isinstance(row[key], float) and row[key] > 0, (name, key, row[key])
        assert len(row["cpu_us_spread"]["rounds"]) == REPEATS
        assert row["cpu_us_spread"]["min"] <= row["cpu_us"] <= row["cpu_us_spread"]["max"]
        assert row["in_flight"] == 64
        assert row["calls_per_round"] >= report["plan"]["calls"]
        # Every measured call reached the stub, and no connection was opened for it.
        assert row["stub_requests_measured"] == row["expected_requests_measured"] > 0
        assert row["connections_opened"]["warm"] > 0
        assert row["connections_opened_measured"] == 0, (name, row["connections_opened"])

    native = setup["clients"]["gateway-native"]
    stats = native["client_stats_measured"]
    assert stats["connections_opened"] == 0
    assert native["failed_calls"] == 0
    assert stats["requests"] == stats["reused"] == native["expected_requests_measured"]

    ratios = setup["ratios"]
    assert ratios["native_vs_floor"] > 0
    assert ratios["native_vs_signed_floor"] > 0
    spread = setup["ratio_spread"]["native_vs_signed_floor"]
    assert len(spread["rounds"]) == REPEATS
    assert spread["min"] <= ratios["native_vs_signed_floor"] <= spread["max"]
    # The verdict is a judgement on timings (noisy here): only that it is made.
    assert setup["verdicts"]["native_vs_signed_floor"] in {True, False}
    assert ratios["native_connections_opened_measured"] == 0
    assert setup["verdicts"]["native_zero_connections"] is True


def test_quick_compare_reports_every_client_and_zero_new_connections() -> None:
    report = run_quick("--plain")
    assert list(report["setups"]) == ["plain"]
    setup = report["setups"]["plain"]
    assert setup["stub"].startswith("http://")
    check_setup(report, setup)

    signing = report["signing"]
    assert signing["signature_matches_botocore"] is True
    for key in ("botocore_add_auth_us", "ours_presorted_us", "ours_per_call_us"):
        assert signing[key] > 0
    assert len(signing["speedup_hot_path_spread"]["rounds"]) == REPEATS
    assert report["machine"]["gateway_hot_path"] in {"compiled", "pure"}
    assert report["machine"]["versions"]["botocore"]
    assert report["tls_cost"] is None


def test_quick_compare_over_tls_reaches_an_https_stub_with_every_client() -> None:
    report = run_quick("--tls", "--no-signing")
    assert list(report["setups"]) == ["tls"]
    setup = report["setups"]["tls"]
    # Every client spoke HTTPS to the stub and verified its generated certificate
    # (a client that did not would fail its first call and the run would exit).
    assert setup["stub"].startswith("https://")
    assert setup["targets"]["tls"] is True
    check_setup(report, setup)
    assert report["signing"] is None
