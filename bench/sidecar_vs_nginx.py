"""The sidecar beside nginx: the same stub behind each, the same wrk load, rounds alternating.

    python -m bench.sidecar_vs_nginx                  # 3 rounds of 8 s, wrk -t1 -c32
    python -m bench.sidecar_vs_nginx --rounds 5 --duration 8 --connections 32
    python -m bench.sidecar_vs_nginx --quick          # tiny and short (CI): no timing claims
    python -m bench.sidecar_vs_nginx --json           # one JSON object at the end
    python -m bench.sidecar_vs_nginx --baseline /tmp/base   # and the sidecar of another checkout
    python -m bench.sidecar_vs_nginx --floors         # and bare Python relays (the floor)
    python -m bench.sidecar_vs_nginx --perf           # and each proxy's CPU by library (perf)
    python -m bench.sidecar_vs_nginx --sdk-headers    # requests with boto3's ten fields

The question an operator asks: what does the sidecar cost next to the proxy I
would otherwise run? Both proxies sit in front of one ``bench._stub`` (its
own process) and are driven in turn by ``wrk`` (one thread, ``--connections``
keep-alive connections, ``--duration`` seconds a round); the order alternates
from round to round, so both see the same machine.

- nginx: one worker, upstream keep-alive (``keepalive`` in its upstream
  block, HTTP/1.1, no ``Connection`` header passed on), no access log; it
  only relays. Debian: ``apt-get install -y nginx`` (1.22 in bookworm).
- the sidecar: ``python -m gateway sidecar``, one worker (one process, one
  thread, uvloop), with what it always does: SigV4 signing, routing (the
  default route's balancer and health), metrics. Its build (compiled hot
  path or plain Python) is printed: compare compiled builds.

Per round and proxy: requests/s, wrk's p50/p99 latency, and the proxy's CPU
(user+sys from /proc, the proxy and its children) per request answered: the
figure a shared machine disturbs least; then that CPU split into user (the
proxy's own code) and sys (the kernel's work on its behalf: system calls, and
the loopback TCP work done in their context). Then the medians, the sidecar/nginx
ratio per round (median and range) and, with ``strace`` installed, system
calls per request: ``strace -c -f`` attached to each proxy while exactly
``--strace-requests`` requests go through it (after a warm-up, on
connections opened before counting). ``--baseline DIR`` adds a third row, the
sidecar of another checkout (a before/after in one run, rounds alternating
over all three). A before/after has a bias to calibrate: in A/A runs (``--baseline``
naming this checkout, 6 rounds each) the sidecar started first, this checkout's,
used 1.06x-1.16x the CPU per request of the other in each of five runs, and
0.96x when the baseline was started first. Run the pair both ways (from each
checkout, ``--baseline`` naming the other) and compare with an A/A run of the
same length. ``--floors`` adds two more rows, ``bench._floor_relay``:
the least a relay in Python does per request (uvloop and httptools, a
callback per step, no task), without and with the sidecar's signing; what
the sidecar costs over ``floor-sig`` is its own per-request machinery, not
the language. Without nginx the sidecar is measured
alone, and the output says how to install nginx. Needs ``wrk`` (``apt-get
install -y wrk``); ``strace`` is optional (``apt-get install -y strace``).
``--perf`` adds where each proxy's CPU goes natively: ``perf record -e
cpu-clock`` over one more wrk run each, its samples by shared object (the
kernel, the interpreter, the compiled code, libcrypto...), which the user/sys
split only halves (``apt-get install -y linux-perf``; optional too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from bench._floor_relay import READY_PREFIX as FLOOR_READY_PREFIX
from bench._stub import StubServer
from bench.instructions import _Client, _drive
from bench.sidecar_load import PATH, PAYLOAD, SDK_HEADERS, build_request, sidecar_config
from bench.sidecar_workers import tree_cpu_split
from gateway._host.build import build_kind
from gateway._server import processes as child_process
from gateway.sidecar import SidecarProcess

INSTALL_NGINX = "apt-get install -y nginx"
INSTALL_WRK = "apt-get install -y wrk"
INSTALL_STRACE = "apt-get install -y strace"
INSTALL_PERF = "apt-get install -y linux-perf"

_NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    upstream stub {{
        server 127.0.0.1:{upstream};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://stub;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


class Proxy(Protocol):
    name: str
    url: str
    pid: int


@dataclass
class Sample:
    proxy: str
    round: int
    requests: int
    seconds: float
    rps: float
    p50_us: float
    p99_us: float
    cpu_us_per_request: float
    errors: int
    # The CPU split: the proxy's own code (user) and the kernel's work for it (sys).
    user_us_per_request: float = 0.0
    sys_us_per_request: float = 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def nginx_binary() -> str | None:
    """nginx on PATH, or where Debian puts it (/usr/sbin is not on every PATH)."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    return found


def nginx_version(binary: str) -> str:
    result = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    found = re.search(r"nginx/(\S+)", result.stderr + result.stdout)
    return found.group(1) if found else "?"


class NginxProcess:
    """nginx, one worker, relaying to ``upstream`` over kept-alive connections."""

    name = "nginx"

    def __init__(self, binary: str, upstream_port: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="nginx-bench-")
        directory = self._dir.name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = Path(directory, "nginx.conf")
        conf.write_text(_NGINX_CONF.format(dir=directory, upstream=upstream_port, port=self.port))
        # -e: the error log from the first line on (not the compiled-in /var/log path).
        command = [binary, "-p", directory, "-c", str(conf), "-e", f"{directory}/error.log"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self.pid = self.process.pid
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    error = self.process.stderr.read().decode() if self.process.stderr else ""
                    self.stop()
                    raise RuntimeError(f"nginx did not start: {error.strip()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: the workers finish, then exit
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        self._dir.cleanup()


class SidecarUnderTest:
    """The sidecar, one worker, as ``python -m gateway sidecar`` runs it (of ``tree``, if given)."""

    def __init__(self, stub_url: str, tree: Path | None = None) -> None:
        self.name = "sidecar" if tree is None else "baseline"
        config = sidecar_config(stub_url)
        # Both rows start alike, this checkout's sidecar too (one confound less in an
        # A/A run; see the module docstring). PYTHONSAFEPATH: the working directory
        # (maybe this checkout) never shadows the tree.
        root = tree if tree is not None else Path(__file__).resolve().parents[1]
        env = {"PYTHONPATH": str(root), "PYTHONSAFEPATH": "1"}
        self._process = SidecarProcess.start(
            config, "127.0.0.1:0", ("--log-level", "WARNING", "--workers", "1"), env
        )
        self.url = self._process.url
        self.pid = self._process.pid

    def stop(self) -> None:
        self._process.stop()


class FloorRelay:
    """``bench._floor_relay``: what a Python relay costs at the least (``--sign``: and signing)."""

    def __init__(self, stub_url: str, sign: bool) -> None:
        self.name = "floor-sig" if sign else "floor"
        command = [sys.executable, "-m", "bench._floor_relay", "--upstream", stub_url]
        self._process = child_process.start([*command, *(["--sign"] if sign else [])])
        try:
            self.url = child_process.read_ready_line(
                self._process, FLOOR_READY_PREFIX, "floor relay", timeout=30.0
            )
        except BaseException:
            child_process.terminate(self._process)
            raise
        self.pid = self._process.pid

    def stop(self) -> None:
        child_process.terminate(self._process)


# -- wrk --------------------------------------------------------------------------------

_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


def _duration_us(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if found is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(found.group(1)) * _UNITS_US[found.group(2)]


def parse_wrk(output: str) -> tuple[int, float, float, float, int]:
    """(requests, seconds, p50 us, p99 us, errors) from ``wrk --latency``'s report."""
    total = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s)", output, re.M)
    p50 = re.search(r"^\s*50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s*99%\s+(\S+)", output, re.M)
    if total is None or p50 is None or p99 is None:
        raise RuntimeError(f"cannot read wrk's report:\n{output}")
    seconds = _duration_us(total.group(2) + total.group(3)) / 1e6
    errors = 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non_2xx:
        errors += int(non_2xx.group(1))
    socket_errors = re.search(r"Socket errors: (.*)", output)
    if socket_errors:
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(1)))
    return (
        int(total.group(1)),
        seconds,
        _duration_us(p50.group(1)),
        _duration_us(p99.group(1)),
        errors,
    )


@contextmanager
def wrk_script(sdk_headers: bool = False) -> Iterator[str]:
    """The Lua script making wrk send the benchmark's POST (``sdk_headers``: shaped as boto3's)."""
    script = (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(PAYLOAD.decode())}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    if sdk_headers:
        fields = (("Accept", "application/json"), *SDK_HEADERS)
        script += "".join(f"wrk.headers[{json.dumps(n)}] = {json.dumps(v)}\n" for n, v in fields)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="wrk-") as file:
        file.write(script)
        file.flush()
        yield file.name


def run_wrk(url: str, script: str, threads: int, connections: int, seconds: int) -> str:
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["-s", script, url + PATH]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed: {result.stderr.strip()}")
    return result.stdout


def measure(proxy: Proxy, script: str, args: argparse.Namespace, index: int) -> Sample:
    """One round against ``proxy``: a short warm-up run, then the measured one."""
    run_wrk(proxy.url, script, args.threads, args.connections, 1)
    user_before, sys_before = tree_cpu_split(proxy.pid)
    output = run_wrk(proxy.url, script, args.threads, args.connections, args.duration)
    user_after, sys_after = tree_cpu_split(proxy.pid)
    user, system = user_after - user_before, sys_after - sys_before
    requests, seconds, p50, p99, errors = parse_wrk(output)
    per_request = 1e6 / max(requests, 1)
    return Sample(
        proxy=proxy.name,
        round=index,
        requests=requests,
        seconds=round(seconds, 3),
        rps=round(requests / seconds, 1),
        p50_us=round(p50, 1),
        p99_us=round(p99, 1),
        cpu_us_per_request=round((user + system) * per_request, 2),
        errors=errors,
        user_us_per_request=round(user * per_request, 2),
        sys_us_per_request=round(system * per_request, 2),
    )


# -- strace -------------------------------------------------------------------------------


def _tree_pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c``'s table: system call -> calls (the ``total`` row left out)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or not re.fullmatch(r"[\d.]+", fields[0]):
            continue
        name = fields[-1]
        if name != "total":
            calls[name] = int(fields[3])
    return calls


async def _counted_run(
    port: int,
    requests: int,
    connections: int,
    start: Callable[[], None],
    sdk_headers: bool = False,
) -> tuple[int, list[_Client]]:
    """``requests`` requests over ``connections`` opened before ``start()``: the number failed,
    and the connections, still open."""
    loop = asyncio.get_running_loop()
    request = build_request(f"127.0.0.1:{port}", sdk_headers)
    budget = [requests]
    done: asyncio.Future[None] = loop.create_future()
    clients = []
    for _ in range(connections):
        _, client = await loop.create_connection(
            lambda: _Client(request, budget, done, held=True), "127.0.0.1", port
        )
        clients.append(client)
    start()
    for client in clients:
        client.send()
    await asyncio.wait_for(done, 120)
    # The last answers in flight when the budget ran out.
    await asyncio.sleep(0.3)
    return sum(client.errors for client in clients), clients


def count_syscalls(
    proxy: Proxy, requests: int, connections: int, sdk_headers: bool = False
) -> dict[str, int]:
    """System calls ``proxy`` makes for ``requests`` requests (over ``connections``).

    The connections are open and the proxy warm before counting starts: what is
    counted is the relaying, not the accepting.
    """
    port = int(proxy.url.rsplit(":", 1)[1])
    warm_up = max(requests // 4, connections)
    asyncio.run(_drive(port, warm_up, connections, sdk_headers))
    with tempfile.TemporaryDirectory(prefix="strace-") as directory:
        out = Path(directory, "summary")
        command = ["strace", "-c", "-f", "-o", str(out)]
        for pid in _tree_pids(proxy.pid):
            command += ["-p", str(pid)]
        tracers: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            tracers.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            time.sleep(1.0)  # attached (to every thread) before the first request

        async def run() -> int:
            failed, clients = await _counted_run(port, requests, connections, start, sdk_headers)
            for tracer in tracers:
                tracer.send_signal(signal.SIGINT)
                await asyncio.to_thread(tracer.wait, 30)
            for client in clients:
                client.close()
            await asyncio.sleep(0)
            return failed

        try:
            failed = asyncio.run(run())
        finally:
            for tracer in tracers:
                if tracer.poll() is None:
                    tracer.kill()
                    tracer.wait()
        if failed:
            raise RuntimeError(f"{failed} of the strace run's requests failed")
        return parse_strace_summary(out.read_text())


# -- perf ---------------------------------------------------------------------------------

_PERF_SHARE = re.compile(r"\s*([\d.]+)%\s+(\S.*?)\s*$")


def parse_perf_shares(text: str) -> dict[str, float]:
    """``perf report --sort dso --stdio``: each shared object's share of the samples (%)."""
    shares: dict[str, float] = {}
    for line in text.splitlines():
        found = None if line.lstrip().startswith("#") else _PERF_SHARE.match(line)
        if found is not None:
            name = found.group(2)
            shares["kernel" if name == "[kernel.kallsyms]" else name] = float(found.group(1))
    return shares


def profile_by_library(proxy: Proxy, script: str, args: argparse.Namespace) -> dict[str, float]:
    """Where ``proxy``'s CPU goes natively over one wrk run: perf's samples by shared object.

    ``perf record -e cpu-clock`` (a software clock: a virtual machine without
    hardware counters has it too) attached to the proxy and its children.
    """
    with tempfile.TemporaryDirectory(prefix="perf-") as directory:
        data = Path(directory, "perf.data")
        pids = ",".join(str(pid) for pid in _tree_pids(proxy.pid))
        command = ["perf", "record", "-e", "cpu-clock", "-F", "4999", "-o", str(data), "-p", pids]
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(0.5)  # attached before the load starts
            run_wrk(proxy.url, script, args.threads, args.connections, args.duration)
        finally:
            recorder.send_signal(signal.SIGINT)
            _, errors = recorder.communicate(timeout=60)
        if not data.exists():
            raise RuntimeError(errors.decode(errors="replace").strip() or "perf recorded nothing")
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--sort", "dso", "--stdio"],
            capture_output=True,
            text=True,
            check=True,
        )
        return parse_perf_shares(report.stdout)


def _perf_section(
    proxies: list[NginxProcess | SidecarUnderTest | FloorRelay],
    script: str,
    args: argparse.Namespace,
) -> dict[str, dict[str, float]]:
    if not args.perf:
        return {}
    if shutil.which("perf") is None:
        print(f"CPU by library: skipped, perf is not installed ({INSTALL_PERF})")
        return {}
    print(f"CPU by library (perf record -e cpu-clock, one {args.duration} s wrk run each):")
    profiles = {}
    for proxy in proxies:
        try:
            shares = profile_by_library(proxy, script, args)
        except (RuntimeError, subprocess.SubprocessError) as error:
            print(f"{'':>5} {proxy.name:<9} skipped: {str(error).splitlines()[0][:200]}")
            continue
        profiles[proxy.name] = shares
        top = sorted(shares.items(), key=lambda item: -item[1])[:7]
        print(
            f"{'':>5} {proxy.name:<9} " + ", ".join(f"{name} {share:.1f}%" for name, share in top)
        )
    return profiles


# -- the report ----------------------------------------------------------------------------


def _ratio_summary(ratios: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(ratios), 2),
        "min": round(min(ratios), 2),
        "max": round(max(ratios), 2),
    }


def _row(sample: Sample) -> str:
    return (
        f"{sample.round:>5} {sample.proxy:<9} {sample.rps:>9.0f} {sample.p50_us:>8.0f} "
        f"{sample.p99_us:>8.0f} {sample.cpu_us_per_request:>10.1f} {sample.errors:>6} "
        f"{sample.user_us_per_request:>7.1f} {sample.sys_us_per_request:>7.1f}"
    )


# (proxy, over, report key): each ratio the report gives when both rows were measured.
_RATIOS = (
    ("sidecar", "nginx", "ratios"),
    ("baseline", "nginx", "baseline_ratios"),
    ("sidecar", "baseline", "sidecar_vs_baseline"),
    ("floor", "nginx", "floor_ratios"),
    ("floor-sig", "nginx", "signed_floor_ratios"),
    ("sidecar", "floor-sig", "sidecar_vs_signed_floor"),
)


def summarise(samples: list[Sample], names: list[str]) -> dict[str, object]:
    medians = {}
    for name in names:
        mine = [s for s in samples if s.proxy == name]
        medians[name] = {
            "rps": round(statistics.median(s.rps for s in mine), 1),
            "p50_us": round(statistics.median(s.p50_us for s in mine), 1),
            "p99_us": round(statistics.median(s.p99_us for s in mine), 1),
            "cpu_us_per_request": round(statistics.median(s.cpu_us_per_request for s in mine), 2),
            "user_us_per_request": round(statistics.median(s.user_us_per_request for s in mine), 2),
            "sys_us_per_request": round(statistics.median(s.sys_us_per_request for s in mine), 2),
        }
    report: dict[str, object] = {"medians": medians}
    by_round: dict[int, dict[str, Sample]] = {}
    for sample in samples:
        by_round.setdefault(sample.round, {})[sample.proxy] = sample
    for name, over, key in _RATIOS:
        if name in names and over in names:
            pairs = [(r[name], r[over]) for r in by_round.values()]
            report[key] = {
                "cpu_per_request": _ratio_summary(
                    [s.cpu_us_per_request / n.cpu_us_per_request for s, n in pairs]
                ),
                "rps": _ratio_summary([s.rps / n.rps for s, n in pairs]),
                "p50": _ratio_summary([s.p50_us / n.p50_us for s, n in pairs]),
                "p99": _ratio_summary([s.p99_us / n.p99_us for s, n in pairs]),
            }
    return report


def _format_ratio(ratio: dict[str, float]) -> str:
    return f"{ratio['median']:.2f}x (rounds {ratio['min']:.2f}-{ratio['max']:.2f})"


def _format_calls(calls: dict[str, int], requests: int, top: int = 6) -> str:
    total = sum(calls.values()) / requests
    most = sorted(calls.items(), key=lambda item: -item[1])[:top]
    detail = ", ".join(f"{name} {count / requests:.2f}" for name, count in most)
    return f"{total:.2f}  ({detail})"


def _build_kind_of(tree: Path) -> str:
    """Which build the sidecar of ``tree`` runs: compiled, pure or mixed."""
    code = "from gateway._host.build import build_kind; print(build_kind())"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return result.stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sidecar_vs_nginx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 3)")
    parser.add_argument("--duration", type=int, help="wrk's seconds per round (default 8)")
    parser.add_argument("--connections", type=int, help="wrk's connections (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="wrk's threads (default 1)")
    parser.add_argument(
        "--strace-requests", type=int, help="requests counted under strace (default 4000; 0: skip)"
    )
    parser.add_argument("--no-nginx", action="store_true", help="measure the sidecar alone")
    parser.add_argument(
        "--baseline", type=Path, help="also the sidecar of this checkout (a before/after)"
    )
    parser.add_argument(
        "--floors", action="store_true", help="also bare Python relays, without and with signing"
    )
    parser.add_argument(
        "--perf", action="store_true", help="also each proxy's CPU by library (perf record)"
    )
    parser.add_argument(
        "--sdk-headers", action="store_true", help="requests with boto3's fields (ten, not four)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny and short, for CI")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = parser.parse_args(argv)
    defaults = (2, 1, 4, 200) if args.quick else (3, 8, 32, 4000)
    for name, default in zip(
        ("rounds", "duration", "connections", "strace_requests"), defaults, strict=True
    ):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        print(f"wrk is not installed: {INSTALL_WRK}", file=sys.stderr)
        return 2
    nginx = None if args.no_nginx else nginx_binary()
    with StubServer() as stub, wrk_script(args.sdk_headers) as script:
        proxies: list[NginxProcess | SidecarUnderTest | FloorRelay] = []
        try:
            if nginx is not None:
                proxies.append(NginxProcess(nginx, stub.port))
            proxies.append(SidecarUnderTest(stub.url))
            if args.baseline is not None:
                proxies.append(SidecarUnderTest(stub.url, args.baseline))
            if args.floors:
                proxies += [FloorRelay(stub.url, sign=False), FloorRelay(stub.url, sign=True)]
            names = [proxy.name for proxy in proxies]
            features = "(1 worker, signing, routing, metrics)"
            described = {
                "nginx": f"nginx {nginx_version(nginx) if nginx else ''} (1 worker, "
                "upstream keep-alive, no signing)",
                "sidecar": f"sidecar, {build_kind()} build {features}",
                "baseline": f"baseline: the sidecar of {args.baseline}, "
                f"{_build_kind_of(args.baseline) if args.baseline else ''} build {features}",
                "floor": "floor: a bare Python relay (uvloop, httptools, no signing)",
                "floor-sig": "floor-sig: the bare relay, signing as the sidecar does",
            }
            print(f"stub {stub.url}; " + "; ".join(f"{described[p.name]} {p.url}" for p in proxies))
            if nginx is None:
                why = "--no-nginx" if args.no_nginx else f"not installed ({INSTALL_NGINX})"
                print(f"nginx: skipped, {why}; the sidecar alone")
            print(
                f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, "
                f"{args.rounds} rounds, order alternating"
                + (", requests with boto3's fields" if args.sdk_headers else "")
            )
            print(
                f"{'round':>5} {'proxy':<9} {'req/s':>9} {'p50_us':>8} {'p99_us':>8} "
                f"{'cpu_us/req':>10} {'errors':>6} {'user_us':>7} {'sys_us':>7}",
                flush=True,
            )
            samples = []
            for index in range(1, args.rounds + 1):
                order = proxies if index % 2 else proxies[::-1]
                for proxy in order:
                    sample = measure(proxy, script, args, index)
                    samples.append(sample)
                    print(_row(sample), flush=True)
            report = summarise(samples, names)
            report["samples"] = [asdict(sample) for sample in samples]
            report["build"] = build_kind()
            print("medians:")
            medians = report["medians"]
            assert isinstance(medians, dict)
            for name in names:
                m = medians[name]
                print(
                    f"{'':>5} {name:<9} {m['rps']:>9.0f} {m['p50_us']:>8.0f} "
                    f"{m['p99_us']:>8.0f} {m['cpu_us_per_request']:>10.1f} {'':>6} "
                    f"{m['user_us_per_request']:>7.1f} {m['sys_us_per_request']:>7.1f}"
                )
            for name, over, key in _RATIOS:
                ratios = report.get(key)
                label = f"{name}/{over}"
                if isinstance(ratios, dict):
                    print(
                        f"{label}: CPU per request {_format_ratio(ratios['cpu_per_request'])}, "
                        f"req/s {_format_ratio(ratios['rps'])}, "
                        f"p50 {_format_ratio(ratios['p50'])}, p99 {_format_ratio(ratios['p99'])}"
                    )
            report["syscalls_per_request"] = _syscalls_section(proxies, args)
            report["cpu_by_library"] = _perf_section(proxies, script, args)
        finally:
            for proxy in proxies:
                proxy.stop()
    errors = sum(sample.errors for sample in samples)
    if args.json:
        print(json.dumps(report))
    return 1 if errors else 0


def _syscalls_section(
    proxies: list[NginxProcess | SidecarUnderTest | FloorRelay], args: argparse.Namespace
) -> dict[str, float]:
    if args.strace_requests <= 0:
        return {}
    if shutil.which("strace") is None:
        print(f"syscalls per request: skipped, strace is not installed ({INSTALL_STRACE})")
        return {}
    requests = args.strace_requests
    print(
        f"syscalls per request (strace -c -f, {requests} requests "
        f"over {args.connections} connections):",
        flush=True,
    )
    per_request = {}
    for proxy in proxies:
        calls = count_syscalls(proxy, requests, args.connections, args.sdk_headers)
        per_request[proxy.name] = round(sum(calls.values()) / requests, 2)
        print(f"{'':>5} {proxy.name:<9} {_format_calls(calls, requests)}", flush=True)
    return per_request


if __name__ == "__main__":
    sys.exit(main())
