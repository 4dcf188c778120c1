"""`python -m bench.sidecar_load --workers 2 --quick`: a well-formed report, no timing checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

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


def _needs(found: bool, message: str) -> None:
    """Skip without ``found`` on a developer's machine; fail in CI, which provides it."""
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _workers_report(*options: str) -> tuple[list[str], dict[str, Any]]:
    """``bench.sidecar_workers --quick --json`` with ``options``: its lines and its report."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.sidecar_workers", "--quick", "--json", *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    report = json.loads(lines[-1])
    assert report["errors"] == 0
    assert all(one["requests"] > 0 and many["requests"] > 0 for one, many in report["rounds"])
    return lines, report


def test_sidecar_workers_driven_by_wrk_with_a_stub_of_two_processes() -> None:
    _needs(shutil.which("wrk") is not None, "wrk not found: apt-get install -y wrk (.ci/run does)")
    lines, _ = _workers_report("--wrk", "2", "--stub-processes", "2")
    assert ", wrk -t2, 2 stub processes" in lines[0]


def test_sidecar_workers_with_a_cgroup_of_its_own_per_worker() -> None:
    """``--cpu-per-worker``: each serving process limited in a cgroup, all undone after."""
    from bench._cpu_share import CpuShares, CpuSharesUnavailable

    try:
        with CpuShares() as shares:
            root = shares.root
    except CpuSharesUnavailable as error:
        _needs(False, str(error))
    lines, _ = _workers_report("--cpu-per-worker", "0.5")
    assert lines[0] == "each worker in a cgroup of 0.5 CPU"
    # The run's groups are named after its process: none is left behind.
    left = [group.name for group in root.glob("gateway-bench-*") if group.is_dir()]
    assert [name for name in left if not name.startswith("gateway-bench-test")] == []
