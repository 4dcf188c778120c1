"""The soak's short version: ``python -m bench.soak --quick`` in a subprocess.

Correctness, not timing: no call hung, none lost, no socket leaked, and every
failure has a cause one of the injected faults can produce.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_quick_soak_has_no_hung_lost_leaked_or_unexpected_calls() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick", "--json"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert summary["calls"] > 0 and summary["succeeded"] > 0
    assert summary["hung"] == 0
    assert summary["lost"] == 0
    assert summary["leaked_connections"] == 0
    assert summary["unexpected"] == 0, summary["unexpected_by_cause"]
    # Every kind of fault was injected at least once, and the faults were felt upstream.
    assert set(summary["faults_injected"]) == {
        "reset",
        "stall",
        "error_burst",
        "eject",
        "redis_restart",
    }
    assert summary["emulator_saw"]["resets"] > 0
    assert summary["calls"] == summary["succeeded"] + summary["failed"] + summary["hung"]
