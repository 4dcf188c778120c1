"""`python -m bench.sidecar_load --workers 2 --quick`: a well-formed report, no timing checks."""

from __future__ import annotations

import json
import re
import subprocess
import sys


def test_sidecar_workers_quick_output_is_well_formed() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.sidecar_load", "--workers", "2", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.search(r"^stub http://\S+; 1 worker http://\S+; 2 workers http://\S+", lines[0])
    assert lines[1].split() == [
        *("round", "req/s", "1", "req/s", "2", "ratio"),
        *("cpu_us/req", "1", "cpu_us/req", "2"),
    ]
    rows = [line.split() for line in lines[2:4]]
    assert [row[0] for row in rows] == ["1", "2"]
    assert re.search(r"^2 workers: \d+\.\d\dx the req/s of 1 worker", result.stdout, re.M)
    report = json.loads(lines[-1])
    assert report["workers"] == 2 and len(report["rounds"]) == 2
    assert report["errors"] == 0
    # Both sidecars served in every round.
    assert all(one["requests"] > 0 and many["requests"] > 0 for one, many in report["rounds"])
