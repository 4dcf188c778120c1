"""The soak's short version: ``python -m bench.soak --quick`` in a subprocess.

Correctness, not timing: no call hung, none lost, no wrong answer (a caller
given another request's prediction), no stream cut short without an error,
no socket leaked here or held by the sidecar, every failure has a cause one
of the injected faults can produce, and every attack on the sidecar was
refused or cut off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
MUST_BE_ZERO = ("hung", "lost", "wrong", "incomplete", "leaked_connections", "unexpected")


def _quick_soak(*args: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick", "--json", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=150,
    )
    summary: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    for key in MUST_BE_ZERO:
        assert summary[key] == 0, (key, done.stdout)
    assert summary["attacks_mishandled"] == {}, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    return summary


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_quick_soak_with_hostile_upstream_and_attacks_has_nothing_hung_lost_wrong_or_leaked() -> (
    None
):
    summary = _quick_soak()
    assert summary["calls"] > 0 and summary["succeeded"] > 0
    # Every kind of fault was injected at least once, and the faults were felt upstream.
    assert set(summary["faults_injected"]) == {
        "reset",
        "stall",
        "error_burst",
        "eject",
        "redis_restart",
        "hostile",
    }
    assert summary["emulator_saw"]["resets"] > 0
    # The hostile upstream did misbehave, and the attacker ran every attack.
    assert sum(summary["hostile_misbehaved"].values()) > 0
    assert set(summary["attacks"]) == {
        "endless_target",
        "endless_header",
        "huge_declared_body",
        "slowloris",
        "no_reader",
    }
    # The attacks cost the sidecar little memory (its peak, from /proc).
    assert summary["sidecar_peak_rss_mib"] - summary["sidecar_rss_start_mib"] < 64
    counted = summary["succeeded"] + summary["failed"] + summary["hung"] + summary["wrong"]
    assert summary["calls"] == counted + summary["incomplete"]


def test_quick_soak_of_a_hanging_target_under_hedging_keeps_the_route_answering() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--quick", "--json", "--case", "hanging-hedge"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=150,
    )
    summary: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    for key in ("hung", "lost", "wrong", "leaked_connections", "unexpected", "healthy_ejections"):
        assert summary[key] == 0, (key, done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    for phase in summary["phases"]:
        # The hanging target took its share of calls, and was ejected for it.
        assert phase["hanging_ejections"] >= 1, done.stdout
        assert phase["succeeded"] > 0.95 * phase["calls"], done.stdout
