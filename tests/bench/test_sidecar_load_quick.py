"""`python -m bench.sidecar_load --quick` prints a well-formed report (no timing checks)."""

from __future__ import annotations

import json
import re
import subprocess
import sys


def _quick_run(*options: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "bench.sidecar_load", "--quick", "--json", *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_sidecar_load_quick_output_is_well_formed() -> None:
    result = _quick_run()
    lines = result.stdout.splitlines()
    assert re.search(r"^stub http://127\.0\.0\.1:\d+; sidecar http://127\.0\.0\.1:\d+", lines[0])
    assert lines[1].split() == [
        "concurrency",
        "req/s",
        "p50_us",
        "p99_us",
        "sidecar_cpu%",
        "cpu_us_per_req",
        "errors",
    ]
    rows = [line.split() for line in lines[2:4]]
    assert [row[0] for row in rows] == ["1", "8"]
    assert all(len(row) == 7 for row in rows)
    assert all(re.fullmatch(r"\d+", v) for row in rows for v in (*row[:5], row[6]))
    assert all(re.fullmatch(r"\d+\.\d", row[5]) for row in rows)  # CPU us per request
    assert all(row[6] == "0" for row in rows)  # no failed requests
    text = result.stdout
    assert re.search(r"^direct Gateway\.invoke p50: \d+ us", text, re.M)
    assert re.search(r"^sidecar adds -?\d+ us p50$", text, re.M)
    assert re.search(
        r"^peak: \d+ req/s at concurrency \d+, sidecar CPU \d+% of one core, "
        r"\d+\.\d us a request$",
        text,
        re.M,
    )
    report = json.loads(lines[-1])
    assert {level["concurrency"] for level in report["levels"]} == {1, 8}
    peak = [lv for lv in report["levels"] if lv["concurrency"] == report["peak_concurrency"]]
    assert report["peak_sidecar_cpu_us_per_request"] == peak[0]["sidecar_cpu_us_per_request"] > 0
    assert report["sidecar_adds_p50_us"] == round(
        report["sidecar_p50_us_at_1"] - report["direct_gateway_p50_us"], 1
    )


def test_sidecar_load_runs_the_sidecar_with_busy_polling() -> None:
    lines = _quick_run("--busy-poll-us", "200").stdout.splitlines()
    assert lines[0].endswith(f"(pid {_pid(lines[0])}, one thread, uvloop, busy_poll_us 200)")
    report = json.loads(lines[-1])
    assert report["busy_poll_us"] == 200
    assert [level["errors"] for level in report["levels"]] == [0, 0]


def _pid(first_line: str) -> int:
    found = re.search(r"\(pid (\d+),", first_line)
    assert found is not None
    return int(found.group(1))
