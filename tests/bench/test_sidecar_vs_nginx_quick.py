"""``python -m bench.sidecar_vs_nginx --quick``: both rows, sane numbers, no timing claims.

nginx, wrk and strace come from Debian (``apt-get install -y nginx wrk strace``;
.ci/run installs them). In CI (``CI=true``) a missing one fails the end-to-end
test; elsewhere it skips. The report parsers are checked on fixed text.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from bench.sidecar_load import build_request
from bench.sidecar_vs_nginx import (
    nginx_binary,
    parse_perf_shares,
    parse_strace_summary,
    parse_wrk,
    wrk_script,
)
from tests.bench.test_sdk_shaped_request import field_names

_WRK_REPORT = """\
Running 8s test @ http://127.0.0.1:40981/endpoints/bench-model/invocations
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.03ms  220.45us   9.12ms   91.20%
    Req/Sec    31.10k     1.20k   33.01k    80.00%
  Latency Distribution
     50%  987.00us
     75%    1.10ms
     90%    1.25ms
     99%    2.31ms
  247612 requests in 8.00s, 62.10MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  30951.50
Transfer/sec:      7.76MB
"""

_STRACE_SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.10    0.004000           1      4000           writev
 35.00    0.003500           0      4000       120 recvfrom
  0.00    0.000000           0         7           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.007500           0      8007       120 total
"""


_PERF_REPORT = """\
# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 29K of event 'cpu-clock'
# Overhead  Shared Object
# ........  ......................
#
    55.38%  [kernel.kallsyms]
    22.14%  libpython3.11.so.1.0
     8.22%  _hot_path__mypyc.cpython-311-x86_64-linux-gnu.so
     0.04%  libm.so.6


#
# (Tip: To see callchains in a more compact form: perf report -g folded)
#
"""


def test_perf_report_is_read_by_shared_object_without_its_comments() -> None:
    assert parse_perf_shares(_PERF_REPORT) == {
        "kernel": 55.38,
        "libpython3.11.so.1.0": 22.14,
        "_hot_path__mypyc.cpython-311-x86_64-linux-gnu.so": 8.22,
        "libm.so.6": 0.04,
    }


def test_wrk_report_is_read_with_its_units_and_errors() -> None:
    requests, seconds, p50, p99, errors = parse_wrk(_WRK_REPORT)
    assert (requests, seconds, p50, p99, errors) == (247612, 8.0, 987.0, 2310.0, 3)


def test_strace_summary_is_read_without_its_total_row() -> None:
    assert parse_strace_summary(_STRACE_SUMMARY) == {
        "writev": 4000,
        "recvfrom": 4000,
        "epoll_wait": 7,
    }


def _require(found: str | None, tool: str) -> None:
    if found is None:
        message = f"{tool} not found: apt-get install -y nginx wrk strace (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_quick_run_reports_both_proxies_and_their_ratio() -> None:
    _require(nginx_binary(), "nginx")
    _require(shutil.which("wrk"), "wrk")
    _require(shutil.which("strace"), "strace")
    result = subprocess.run(
        [sys.executable, "-m", "bench.sidecar_vs_nginx", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    lines = text.splitlines()
    assert re.match(r"stub http://\S+; nginx [\d.]+ \(1 worker.*sidecar, \w+ build", lines[0])
    rows = [line.split() for line in lines if re.match(r"^\s+\d+ (nginx|sidecar) ", line)]
    # Two rounds, each proxy once a round, the order alternating.
    assert [(row[0], row[1]) for row in rows] == [
        ("1", "nginx"),
        ("1", "sidecar"),
        ("2", "sidecar"),
        ("2", "nginx"),
    ]
    assert all(float(value) > 0 for row in rows for value in row[2:6])
    assert all(row[6] == "0" for row in rows)  # no failed requests
    # The user and sys columns add up to the CPU per request (each rounded to 0.1 us).
    assert all(abs(float(row[7]) + float(row[8]) - float(row[5])) <= 0.25 for row in rows)
    assert re.search(r"^sidecar/nginx: CPU per request \d+\.\d\dx \(rounds ", text, re.M)
    calls = re.findall(r"^\s+(nginx|sidecar)\s+(\d+\.\d\d)  \(", text, re.M)
    assert [name for name, _ in calls] == ["nginx", "sidecar"]
    # Relaying one request takes at least a read and a write on each side.
    assert all(4 <= float(count) < 100 for _, count in calls)
    report = json.loads(lines[-1])
    assert set(report["medians"]) == {"nginx", "sidecar"}
    ratio = report["ratios"]["cpu_per_request"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
    assert set(report["syscalls_per_request"]) == {"nginx", "sidecar"}
    for sample in report["samples"]:
        split = sample["user_us_per_request"] + sample["sys_us_per_request"]
        assert split == pytest.approx(sample["cpu_us_per_request"], abs=0.02)


def _sidecar_alone(*extra: str) -> subprocess.CompletedProcess[str]:
    """One quick round without nginx or strace (plus ``extra``), which must succeed."""
    command = [sys.executable, "-m", "bench.sidecar_vs_nginx", "--quick", "--no-nginx"]
    command += ["--rounds", "1", "--strace-requests", "0", *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_without_nginx_the_sidecar_is_measured_alone() -> None:
    _require(shutil.which("wrk"), "wrk")
    result = _sidecar_alone()
    assert "nginx: skipped, --no-nginx; the sidecar alone" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"^\s+1 ", line)]
    assert [row[1] for row in rows] == ["sidecar"]
    assert "sidecar/nginx" not in result.stdout


def test_perf_adds_the_cpu_by_library_or_says_why_not() -> None:
    _require(shutil.which("wrk"), "wrk")
    result = _sidecar_alone("--perf", "--json")
    report = json.loads(result.stdout.splitlines()[-1])
    if shutil.which("perf") is None:
        assert "CPU by library: skipped, perf is not installed" in result.stdout
        assert report["cpu_by_library"] == {}
        return
    assert "CPU by library (perf record -e cpu-clock" in result.stdout
    shares = report["cpu_by_library"].get("sidecar")
    if shares is None:  # perf present but not allowed to record here: said, not hidden
        assert re.search(r"^\s+sidecar\s+skipped: ", result.stdout, re.M), result.stdout
        return
    # The sidecar's time is the kernel's and the interpreter's, in shares of one whole.
    assert shares["kernel"] > 0 and any(name.startswith("libpython") for name in shares)
    assert 95 <= sum(shares.values()) <= 100.5


def test_floors_add_the_bare_relays_beside_the_sidecar() -> None:
    _require(shutil.which("wrk"), "wrk")
    result = _sidecar_alone("--floors", "--json")
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"^\s+1 ", line)]
    assert [row[1] for row in rows] == ["sidecar", "floor", "floor-sig"]
    assert all(row[6] == "0" for row in rows)  # every request relayed, signed or not
    report = json.loads(result.stdout.splitlines()[-1])
    ratio = report["sidecar_vs_signed_floor"]["cpu_per_request"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
    assert "floor_ratios" not in report  # no nginx row to divide by


async def test_wrk_sends_the_same_fields_as_the_in_process_client() -> None:
    """``bench.sidecar_vs_nginx --sdk-headers``: wrk's script sends what build_request does."""
    _require(shutil.which("wrk"), "wrk")
    seen: list[bytes] = []

    async def first_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    server = await asyncio.start_server(first_request, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with wrk_script(sdk_headers=True) as script:
            wrk = ["wrk", "-t1", "-c1", "-d1s", "-s", script, f"http://127.0.0.1:{port}/x"]
            process = await asyncio.create_subprocess_exec(
                *wrk, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
            await asyncio.wait_for(process.wait(), 30)
    finally:
        server.close()
    assert seen, "wrk sent nothing"
    assert field_names(seen[0]) - {"content-length"} == (
        field_names(build_request("127.0.0.1:1", sdk_headers=True)) - {"content-length"}
    )
