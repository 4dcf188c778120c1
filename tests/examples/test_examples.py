"""Every example runs, as a user runs it (``python examples/NAME.py``), and says what it did.

Only the shape of the output is checked, never a timing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._peers import require_peers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# script -> patterns its output must contain
EXPECTED: dict[str, tuple[str, ...]] = {
    "embed_in_ad_server.py": (
        r"handled 200 ad requests: \d+ bid, \d+ no bid",
        r"'model': \d+",
        r"slow endpoint: bid=True \(fallback: deadline\)",
    ),
    "sidecar_with_boto3.py": (
        r"bid-filter call 1: score 0\.\d+ \(cache: miss\)",
        r"bid-filter call 2: score 0\.\d+ \(cache: near\)",
        r"models / model-a\.tar\.gz: \{\"inputs\": \[1, 2, 3\]\}",
        r"response stream: 3 parts -> 'streamed through the sidecar'",
        r"unknown endpoint -> botocore ValidationError",
        r"sagemaker_gateway_calls_total",
    ),
    "rtb_filter_library.py": (
        r"decided 5000 bid requests in \d+ scoring calls",
        r"dropped \d+\.\d% \('no bid' at once\)",
        r"true bids lost: \d+ of \d+",
        r"model unreachable: 100 of 100 kept, failed open 100",
        r"malformed request: InvalidBidRequest: imp",
    ),
    "rtb_proxy.py": (
        r"600 auctions: \{.*204: \d+.*\}",
        r"200: \d+",
        r"the bidder saw \d+ requests",
        r"a kept request: score 0\.\d+",
        r"a dropped request: score",
    ),
    "rtb_fabric.py": (
        r"before the reload: 1000 auctions from link-0123456789abcdef",
        r"rules +.*puzzle-apps \(rule_drop\): \d+",
        r"rules +.*ctv \(rule_keep\): \d+",
        r"no-bid +.*below_threshold nbr=0: \d+",
        r"no-bid +.*rule nbr=7: \d+",
        r"reloaded: rules \['puzzle-apps', 'embargo', 'audio'\]; keys needing a restart: \[\]",
        r"the bidder saw \d+ of 1400 requests",
    ),
    "microbenchmark.py": (
        r"sequential:\s+[\d.]+ us wall per call",
        r"64 in flight:\s+[\d.]+ us client CPU per call",
        r"connections opened while measuring: 0\b",
    ),
    "migrate_from_aiobotocore.py": (
        r"aiobotocore\s+168 scores, variant AllTraffic, error ValidationError",
        r"gateway\.compat\s+168 scores, variant AllTraffic, error ValidationError",
        r"identical results: True",
    ),
}
ARGS: dict[str, tuple[str, ...]] = {
    "microbenchmark.py": ("--calls", "1280"),
    # A loaded test host can miss 15 ms on every call; the slow endpoint keeps its 15 ms.
    "embed_in_ad_server.py": ("--deadline-ms", "500"),
}


def test_every_example_is_tested() -> None:
    scripts = {path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("_")}
    assert scripts == set(EXPECTED)
    assert (EXAMPLES / "gateway.toml").is_file()


# Examples that run a peer SDK (aiobotocore): in the peers environment.
PEER_EXAMPLES = {"migrate_from_aiobotocore.py"}


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(name, marks=[pytest.mark.peers] if name in PEER_EXAMPLES else [])
        for name in sorted(EXPECTED)
    ],
)
def test_example_runs(script: str) -> None:
    if script in PEER_EXAMPLES:
        require_peers()
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *ARGS.get(script, ())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    for pattern in EXPECTED[script]:
        assert re.search(pattern, completed.stdout), (
            f"{pattern!r} not in the output of {script}:\n{completed.stdout}"
        )
