"""`python -m bench.sidecar_load --workers 2 --quick`: a well-formed report, no timing checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest


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


def test_sidecar_workers_driven_by_wrk_with_a_stub_of_two_processes() -> None:
    if shutil.which("wrk") is None:
        message = "wrk not found: apt-get install -y wrk (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bench.sidecar_workers", "--quick", "--json"),
            *("--wrk", "2", "--stub-processes", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert ", wrk -t2, 2 stub processes" in result.stdout.splitlines()[0]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["errors"] == 0
    assert all(one["requests"] > 0 and many["requests"] > 0 for one, many in report["rounds"])


def test_sidecar_workers_with_a_cgroup_of_its_own_per_worker() -> None:
    """``--cpu-per-worker``: each serving process limited in a cgroup, all undone after."""
    from bench._cpu_share import CpuShares, CpuSharesUnavailable

    try:
        CpuShares().close()
    except CpuSharesUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error))
        pytest.skip(str(error))
    result = subprocess.run(
        [
            *(sys.executable, "-m", "bench.sidecar_workers", "--quick", "--json"),
            *("--cpu-per-worker", "0.5"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "each worker in a cgroup of 0.5 CPU"
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["errors"] == 0
    assert all(one["requests"] > 0 and many["requests"] > 0 for one, many in report["rounds"])
