"""Load on the sidecar in front of the fast local stub, and what it adds per call.

    python -m bench.sidecar_load                  # a few concurrency levels, ~30 s
    python -m bench.sidecar_load --quick          # small and short (CI), no timing claims
    python -m bench.sidecar_load --wrk            # also drive it with wrk, if installed
    python -m bench.sidecar_load --json           # one JSON object at the end
    python -m bench.sidecar_load --workers 2      # 1 worker vs 2 (bench.sidecar_workers)
    python -m bench.sidecar_load --busy-poll-us 300   # the sidecar polls 300 us after requests

Three processes: the stub (``bench._stub``), the sidecar (``python -m
gateway sidecar``, single-threaded, uvloop) and this one, the load
generator: uvloop, one raw keep-alive connection per concurrent client,
each sending a pre-built request and parsing the answer with httptools.

Per concurrency level: requests/s, p50/p99 latency seen by the load
generator, and the sidecar process's CPU (user+sys from /proc, as % of
one core, and in microseconds per request answered: the figure a shared
machine disturbs least). In the same run, the p50 of a direct ``Gateway.invoke`` of the
same call to the same stub, made from this process one call at a time,
and the sidecar's p50 at concurrency 1, measured in interleaved rounds
(medians reported); "sidecar adds X us p50" is their
difference: one more loopback hop, the sidecar's HTTP server, and the
load generator's own (small) client cost.

Numbers from a shared 2-core machine drift from run to run: compare the
figures printed by one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, cast

import httptools

from bench._stub import BODY, StubServer
from gateway import Gateway
from gateway.sidecar import SidecarProcess

PATH = "/endpoints/bench-model/invocations"
PAYLOAD = b'{"features": [0.1, 0.2, 0.3, 0.4]}'
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class LevelResult:
    concurrency: int
    requests: int
    seconds: float
    rps: float
    p50_us: float
    p99_us: float
    sidecar_cpu_percent: float
    # The sidecar's CPU time (user+sys) over the requests answered: the
    # figure a shared machine disturbs least (waiting for a core costs none).
    sidecar_cpu_us_per_request: float
    errors: int


# What boto3's invoke_endpoint sends besides host, content type, accept and length
# (botocore's spelling; tests/bench checks the names against botocore's own request):
# a real SDK's request has ten fields, the plain benchmark request four.
SDK_HEADERS = (
    ("Accept-Encoding", "identity"),
    (
        "User-Agent",
        "Boto3/1.35.0 md/Botocore#1.35.0 ua/2.0 os/linux#6.1.0 md/arch#x86_64 "
        "lang/python#3.11.7 md/pyimpl#CPython cfg/retry-mode#legacy Botocore/1.35.0",
    ),
    ("X-Amz-Date", "20261128T230000Z"),
    (
        "Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261128/us-east-1/sagemaker/aws4_request, "
        "SignedHeaders=accept;content-type;host;x-amz-date, Signature=" + "0" * 64,
    ),
    ("amz-sdk-invocation-id", "3f2c8a8e-6a5e-4f51-9d7e-2b0c1b9f6a11"),
    ("amz-sdk-request", "attempt=1; max=5"),
)


def build_request(host: str, sdk_headers: bool = False) -> bytes:
    """The benchmark's InvokeEndpoint request; with ``sdk_headers``, shaped as boto3's."""
    extra = "".join(f"{name}: {value}\r\n" for name, value in SDK_HEADERS) if sdk_headers else ""
    return (
        f"POST {PATH} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"accept: application/json\r\n{extra}content-length: {len(PAYLOAD)}\r\n\r\n"
    ).encode() + PAYLOAD


class _Client(asyncio.Protocol):
    """One keep-alive connection: send, wait for the whole answer, repeat."""

    def __init__(self, request: bytes, latencies: list[int], state: dict[str, Any]) -> None:
        self._request = request
        self._latencies = latencies
        self._state = state
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._sent_at = 0
        self.errors = 0
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._send()

    def _send(self) -> None:
        assert self._transport is not None
        self._sent_at = time.perf_counter_ns()
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_message_complete(self) -> None:
        if self._parser.get_status_code() != 200:
            self.errors += 1
        if self._state["recording"]:
            self._latencies.append(time.perf_counter_ns() - self._sent_at)
        if self._state["running"]:
            self._send()
        elif self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _cpu_seconds(pid: int) -> float:
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    """The (user, system) CPU seconds of ``pid`` so far, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _CLOCK_TICKS, int(fields[12]) / _CLOCK_TICKS


def _percentile(values: list[int], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] / 1000


async def run_level(
    port: int, pid: int, concurrency: int, warmup: float, duration: float
) -> LevelResult:
    loop = asyncio.get_running_loop()
    request = build_request(f"127.0.0.1:{port}")
    latencies: list[int] = []
    state = {"running": True, "recording": False}
    clients = []
    for _ in range(concurrency):
        _, client = await loop.create_connection(
            lambda: _Client(request, latencies, state), "127.0.0.1", port
        )
        clients.append(client)
    await asyncio.sleep(warmup)
    cpu_before, started = _cpu_seconds(pid), time.perf_counter()
    state["recording"] = True
    await asyncio.sleep(duration)
    state["recording"] = False
    elapsed, cpu = time.perf_counter() - started, _cpu_seconds(pid) - cpu_before
    state["running"] = False
    await asyncio.wait_for(asyncio.gather(*(c.closed for c in clients)), 10)
    return LevelResult(
        concurrency=concurrency,
        requests=len(latencies),
        seconds=round(elapsed, 3),
        rps=round(len(latencies) / elapsed, 1),
        p50_us=round(_percentile(latencies, 0.50), 1),
        p99_us=round(_percentile(latencies, 0.99), 1),
        sidecar_cpu_percent=round(100 * cpu / elapsed, 1),
        sidecar_cpu_us_per_request=round(1e6 * cpu / max(len(latencies), 1), 1),
        errors=sum(c.errors for c in clients),
    )


async def direct_gateway_p50(gw: Gateway, calls: int) -> float:
    """p50 of sequential ``Gateway.invoke`` calls of the same request to the same stub."""
    samples: list[int] = []
    for index in range(calls + calls // 5):
        started = time.perf_counter_ns()
        result = await gw.invoke(
            "bench-model", PAYLOAD, content_type="application/json", accept="application/json"
        )
        if index >= calls // 5:  # the first fifth warms up
            samples.append(time.perf_counter_ns() - started)
        assert result.body == BODY
    return statistics.median(samples) / 1000


async def compare_sequential(
    stub_url: str, port: int, pid: int, rounds: int, calls: int, duration: float
) -> tuple[float, float]:
    """Medians over interleaved rounds of (direct Gateway p50, sidecar p50 at concurrency 1).

    Interleaving makes both see the same machine: on a shared 2-core box,
    one-off measurements taken a minute apart drift by more than the
    difference being measured.
    """
    direct: list[float] = []
    via_sidecar: list[float] = []
    credentials = ("AKIDBENCH", "bench-secret")
    async with Gateway(region="us-east-1", endpoint_url=stub_url, credentials=credentials) as gw:
        for _ in range(rounds):
            direct.append(await direct_gateway_p50(gw, calls))
            via_sidecar.append((await run_level(port, pid, 1, 0.1, duration)).p50_us)
    return round(statistics.median(direct), 1), round(statistics.median(via_sidecar), 1)


def run_wrk(url: str, seconds: int, connections: int) -> str:
    script = (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(PAYLOAD.decode())}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:
        command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
        command += ["-s", file.name, url + PATH]
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout
    finally:
        os.unlink(file.name)


def sidecar_config(stub_url: str, busy_poll_us: int = 0) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": stub_url,
        "credentials": {"access_key_id": "AKIDBENCH", "secret_access_key": "bench-secret"},
        "pool": {"max_connections": 512, "prewarm": 4},
        "sidecar": {"max_in_flight": 100_000, "busy_poll_us": busy_poll_us},
    }


async def measure(
    args: argparse.Namespace, stub: StubServer, sidecar: SidecarProcess
) -> dict[str, Any]:
    levels: list[LevelResult] = []
    for concurrency in args.concurrency:
        result = await run_level(sidecar.port, sidecar.pid, concurrency, args.warmup, args.duration)
        levels.append(result)
        print(
            f"{result.concurrency:>11} {result.rps:>9.0f} {result.p50_us:>8.0f} "
            f"{result.p99_us:>8.0f} {result.sidecar_cpu_percent:>12.0f} "
            f"{result.sidecar_cpu_us_per_request:>15.1f} {result.errors:>6}",
            flush=True,
        )
    direct, sequential = await compare_sequential(
        stub.url, sidecar.port, sidecar.pid, args.rounds, args.direct_calls, args.duration / 2
    )
    peak = max(levels, key=lambda level: level.rps)
    return {
        "levels": [asdict(level) for level in levels],
        "direct_gateway_p50_us": direct,
        "sidecar_p50_us_at_1": sequential,
        "sidecar_adds_p50_us": round(sequential - direct, 1),
        "sequential_rounds": args.rounds,
        "peak_rps": peak.rps,
        "peak_concurrency": peak.concurrency,
        "peak_sidecar_cpu_percent": peak.sidecar_cpu_percent,
        "peak_sidecar_cpu_us_per_request": peak.sidecar_cpu_us_per_request,
    }


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sidecar_load", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small and short, for CI")
    parser.add_argument("--wrk", action="store_true", help="also run wrk against the sidecar")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--concurrency", type=lambda v: [int(x) for x in v.split(",")])
    parser.add_argument("--duration", type=float, help="measured seconds per level")
    parser.add_argument(
        "--workers", type=int, help="compare 1 sidecar worker with N (bench.sidecar_workers)"
    )
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        default=0,
        help="the sidecar's busy_poll_us (0: off): its loop polls, not sleeps, after requests",
    )
    args = parser.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = [1, 8] if args.quick else [1, 8, 32, 64, 128]
    if args.duration is None:
        args.duration = 0.5 if args.quick else 4.0
    args.warmup = 0.2 if args.quick else 1.0
    args.direct_calls = 300 if args.quick else 2000
    args.rounds = 1 if args.quick else 5
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.workers is not None:
        from bench import sidecar_workers

        forwarded = ["--workers", str(args.workers)]
        forwarded += ["--quick"] if args.quick else []
        forwarded += ["--json"] if args.json else []
        return sidecar_workers.main(forwarded)
    with StubServer() as stub:
        sidecar = SidecarProcess.start(
            sidecar_config(stub.url, args.busy_poll_us),
            "127.0.0.1:0",
            ("--log-level", "WARNING"),
            None,
        )
        try:
            polling = f", busy_poll_us {args.busy_poll_us}" if args.busy_poll_us else ""
            print(
                f"stub {stub.url}; sidecar {sidecar.url} "
                f"(pid {sidecar.pid}, one thread, uvloop{polling})"
            )
            print(
                f"{'concurrency':>11} {'req/s':>9} {'p50_us':>8} {'p99_us':>8} "
                f"{'sidecar_cpu%':>12} {'cpu_us_per_req':>15} {'errors':>6}",
                flush=True,
            )
            import uvloop

            report = uvloop.run(measure(args, stub, sidecar))
            report["busy_poll_us"] = args.busy_poll_us
            if args.wrk:
                report["wrk"] = _wrk_section(sidecar.url, args)
        finally:
            sidecar.stop()
    rounds = report["sequential_rounds"]
    print(
        f"direct Gateway.invoke p50: {report['direct_gateway_p50_us']:.0f} us (median of {rounds})"
    )
    print(
        f"sidecar p50 at concurrency 1: {report['sidecar_p50_us_at_1']:.0f} us (median of {rounds})"
    )
    print(f"sidecar adds {report['sidecar_adds_p50_us']:.0f} us p50")
    print(
        f"peak: {report['peak_rps']:.0f} req/s at concurrency {report['peak_concurrency']}, "
        f"sidecar CPU {report['peak_sidecar_cpu_percent']:.0f}% of one core, "
        f"{report['peak_sidecar_cpu_us_per_request']:.1f} us a request"
    )
    if args.json:
        print(json.dumps(report))
    return 0


def _wrk_section(url: str, args: argparse.Namespace) -> str:
    if shutil.which("wrk") is None:
        print("wrk: not installed (apt-get install -y wrk)")
        return ""
    output = run_wrk(url, 1 if args.quick else 10, 64)
    print("wrk -t1 -c64:")
    print(output.rstrip())
    return output


if __name__ == "__main__":
    sys.exit(main())
