"""``python -m bench.tail`` end to end, small: every run is there and its counts add up.

No timing is asserted (the machine is shared): only that each upstream gets
its off, on and control runs, that only the hedged run sends hedges, that
won and wasted hedges add up to those fired, and that the stub served the
extra requests the table reports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_quick_tail_reports_fired_won_and_wasted_hedges_for_every_run() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.tail",
            "--calls",
            "1500",
            "--rounds",
            "1",
            "--upstreams",
            "stub",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summaries: list[dict[str, Any]] = orjson.loads(done.stdout)["summaries"]
    assert [(s["upstream"], s["kind"]) for s in summaries] == [
        ("stub", "off"),
        ("stub", "on"),
        ("stub", "control"),
    ]
    for summary in summaries:
        assert summary["calls"] + sum(summary["failures"].values()) == 1500
        assert summary["hedges_won"] + summary["hedges_wasted"] == summary["hedges_fired"]
        assert summary["p50_ms"]["median"] <= summary["p999_ms"]["median"]
        if summary["kind"] != "on":
            assert summary["hedges_fired"] == 0
            assert summary["extra_share"]["median"] == 0.0  # one request per call
        else:
            assert summary["meets_target"] in {True, False}  # judged, whatever the timing
