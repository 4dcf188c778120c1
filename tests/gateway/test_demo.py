"""``python -m gateway demo``, run as a user runs it: a subprocess, checked by its summary.

Only the presence and sanity of the figures is checked, never their size:
timings belong in benchmarks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import botocore.session

from gateway._aws.models import INFERENCE_ROUTER_RUNTIME
from tests._redis_procs import RedisServer

ROOT = Path(__file__).resolve().parents[2]
# The demo's inference-router lane runs where botocore has the router runtime's model.
ROUTER_LANE = INFERENCE_ROUTER_RUNTIME in botocore.session.get_session().get_available_services()


def _run_demo(*args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "gateway", "demo", "--duration", "3", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONWARNINGS": "error::RuntimeWarning"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    return completed.stdout


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in:\n{text}"
    return float(match.group(1).replace(",", ""))


def _check_summary(out: str) -> None:
    requests = _number(r"requests:\s+([\d,]+)", out)
    assert requests > 0
    assert _number(r"requests/s:\s+([\d,]+)", out) > 0
    p50 = _number(r"filter latency:\s+p50 ([\d.]+) ms", out)
    p99 = _number(r"filter latency:.*p99 ([\d.]+) ms", out)
    p999 = _number(r"filter latency:.*p99\.9 ([\d.]+) ms", out)
    assert 0 < p50 <= p99 <= p999
    filtered = _number(r"filtered:\s+([\d.]+)%", out)
    assert 0 < filtered < 100  # the model drops some traffic and keeps some
    assert 0 <= _number(r"failed open:\s+([\d,]+)", out) <= requests
    assert 0 <= _number(r"cache hit ratio:\s+([\d.]+)%", out) <= 100
    assert _number(r"hedges fired:\s+([\d,]+)", out) >= 0
    shares = re.findall(
        r"per-target share:\s+bid-filter: bid-filter ([\d.]+)%\s+bid-filter-b ([\d.]+)%"
        + (r"\s+router/bid-router/bid-filter ([\d.]+)%" if ROUTER_LANE else "$"),
        out,
        re.MULTILINE,
    )
    assert shares, out
    assert abs(sum(float(s) for s in shares[0]) - 100.0) < 0.5
    if ROUTER_LANE:
        # Some traffic went through the inference router, which says why it chose each one.
        assert float(shares[0][2]) > 0
        assert _number(r"inference router:\s+([\d,]+) calls via bid-router", out) > 0
        assert re.search(r"routing reasons: (local-preferred|capacity-available|failover)", out)
        assert re.search(r"router picked:\s+bid-filter", out)
    else:  # a botocore without the router's model (< 1.44.4): the lane says so, once
        assert out.count("the inference-router lane is skipped: ") == 1
        assert "botocore >= 1.44.4" in out
        assert re.search(r"inference router:\s+skipped", out)
    assert "per-target share:  models:" in out
    # The sidecar lane went through the sidecar and got answers.
    assert _number(r"calls:\s+([\d,]+) \(", out) > 0
    assert _number(r"MME:\s+(\d+) cold loads", out) >= 1


def test_demo_near_cache_only() -> None:
    out = _run_demo()
    assert "near tier only" in out
    _check_summary(out)


def test_demo_with_redis() -> None:
    # A Redis of its own: answers an earlier run left in a shared one would be hits,
    # and the summary's cold model loads would be missing.
    with RedisServer.running() as redis:
        out = _run_demo("--redis", redis.url, "--pool", "2000")
    assert f"near tier + Redis {redis.url}" in out
    _check_summary(out)
