"""Side-by-side per-call cost of SageMaker Runtime clients, in one run.

    python -m bench.compare                       # every client, a few minutes
    python -m bench.compare --quick               # small counts (CI), under a minute
    python -m bench.compare --clients gateway-native,raw-floor --json

One local keep-alive stub (``bench._stub``: uvloop + httptools, a 24-byte
JSON answer) is started once, in its own process, and every client is
measured against it, each in a fresh child process of its own, one after
another. Per client:

* sequential wall time per call: the median over several batches of calls
  made one after another (plus the CPU per call of that phase);
* at 64 in flight (16 threads for boto3): client CPU per call, i.e. the
  ``time.process_time()`` delta of the client process (all its threads)
  divided by the calls -- the stub's CPU is in another process and is not
  counted -- and calls per second; the median over a few rounds;
* connections the client opened during the measured phases, read from the
  stub's own counter at marks the child signals on stdout (a warm client
  with a keep-alive pool opens none).

The signing comparison times botocore's ``SigV4Auth.add_auth`` and our
``SigV4Signer`` on the same request, in a child process as well.

Numbers from a shared 2-core machine drift from run to run: compare the
ratios printed from one run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from bench._stub import StubServer
from gateway._build import build_kind
from gateway._process import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = (
    "gateway-native",
    "gateway-httpx",
    "aiobotocore",
    "boto3",
    "raw-floor",
    "raw-floor+sign",
)
ENDPOINT = "bench-endpoint"
# One headerless CSV row of the RTB model's seven features.
BODY = b"3,14,1042,77,5,811,2"
CONTENT_TYPE = "text/csv"
ACCEPT = "application/json"
REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
MARK = "@@bench "
TARGETS = {
    # native CPU/call <= 1.3x the raw floor's, the floor doing what every
    # SageMaker call must: sign (SageMaker refuses unsigned requests).
    "native_vs_signed_floor": 1.3,
    "aiobotocore_vs_native": 12.0,  # aiobotocore CPU/call >= 12x native's
    "signing_speedup": 20.0,  # ours <= 1/20 of botocore's add_auth
}


@dataclass(frozen=True, slots=True)
class Plan:
    calls: int  # per concurrent round, at least (see round_seconds)
    rounds: int  # concurrent rounds (the median is reported)
    seq_batches: int
    seq_batch: int  # calls per sequential batch
    warm: int  # warm-up calls at full concurrency
    concurrency: int = 64
    threads: int = 16  # boto3's concurrent figure
    sign_number: int = 2000  # signing calls per timing repeat (botocore's; ours x20)
    sign_repeat: int = 7
    # Fast clients get more calls per round: enough for about this long (at the
    # rate seen during warm-up), so short rounds do not decide the figure.
    round_seconds: float = 1.0

    def round_calls(self, warm_rate: float) -> int:
        return max(self.calls, int(warm_rate * self.round_seconds) // 64 * 64)


DEFAULT_PLAN = Plan(calls=2000, rounds=3, seq_batches=5, seq_batch=400, warm=1000)
QUICK_PLAN = Plan(
    calls=500,
    rounds=2,
    seq_batches=3,
    seq_batch=100,
    warm=300,
    sign_number=300,
    sign_repeat=3,
    round_seconds=0.2,
)


# -- child side: the clients ---------------------------------------------------

# A client's call: slot -> an awaitable of its natural answer. ``extras["body"]``
# turns that answer into the response body (the first call is checked).
# Failures are counted by the harness (``_Failures``), the same way for every
# client, so no client pays for a wrapper coroutine of the harness's own.
AsyncCall = Callable[[int], Awaitable[Any]]


class _Failures(dict[str, int]):
    """Failed calls by exception type: a 1 s deadline can pass under load."""

    def count(self, error: Exception) -> None:
        name = type(error).__name__
        self[name] = self.get(name, 0) + 1


@contextlib.asynccontextmanager
async def _gateway(url: str, transport: str) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
    from gateway import Gateway

    async with Gateway(
        REGION,
        endpoint_url=url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        transport=transport,
        pool={"max_connections": 64, "prewarm": 8},
    ) as gw:
        invoke = gw.invoke

        def call(slot: int) -> Awaitable[Any]:
            return invoke(ENDPOINT, BODY, content_type=CONTENT_TYPE, accept=ACCEPT, timeout=1.0)

        def stats() -> dict[str, Any]:
            transport_stats = gw.transport.stats
            return {
                "connections_opened": transport_stats.connections_opened,
                "requests": transport_stats.requests,
                "reused": transport_stats.reused,
            }

        def open_connections() -> int:
            count: int = getattr(gw.transport, "open_connections", lambda: -1)()
            return count

        yield (
            call,
            {
                "stats": stats,
                "open_connections": open_connections,
                "body": lambda result: result.body,
            },
        )


@contextlib.asynccontextmanager
async def _aiobotocore(url: str) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    session = get_session()
    config = AioConfig(retries={"max_attempts": 0}, max_pool_connections=64)
    async with session.create_client(
        "sagemaker-runtime",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=config,
    ) as client:
        invoke_endpoint = client.invoke_endpoint

        async def call(slot: int) -> bytes:
            response = await invoke_endpoint(
                EndpointName=ENDPOINT, Body=BODY, ContentType=CONTENT_TYPE, Accept=ACCEPT
            )
            body: bytes = await response["Body"].read()
            return body

        yield call, {}


@contextlib.asynccontextmanager
async def _raw(url: str, signed: bool) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
    from bench._raw_client import RawFloorClient
    from gateway._signing import Credentials

    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    client = RawFloorClient(
        parts.hostname,
        parts.port,
        f"/endpoints/{ENDPOINT}/invocations",
        BODY,
        content_type=CONTENT_TYPE,
        accept=ACCEPT,
        signed=signed,
        region=REGION,
        credentials=Credentials(ACCESS_KEY, SECRET_KEY),
    )
    try:
        yield client.call, {"connect": client.connect}
    finally:
        await client.aclose()


def _sync_mark(name: str) -> None:
    """Tell the parent we reached a mark; wait until it has read the stub's counters."""
    print(MARK + json.dumps({"event": "mark", "name": name}), flush=True)
    if not sys.stdin.readline():
        raise SystemExit("parent went away")


async def _concurrent(call: AsyncCall, workers: int, total: int, failures: _Failures) -> None:
    remaining = total

    async def worker(slot: int) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                await call(slot)
            except Exception as error:  # counted and reported, not fatal
                failures.count(error)

    await asyncio.gather(*(worker(slot) for slot in range(workers)))


class _Round:
    """One timed stretch: wall, process CPU, and its user/system split (getrusage)."""

    def __init__(self) -> None:
        self.cpu = self.wall = self.user = self.system = 0.0

    def __enter__(self) -> _Round:
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self._cpu
        self.wall = time.perf_counter() - self._wall
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.user = usage.ru_utime - self._usage.ru_utime
        self.system = usage.ru_stime - self._usage.ru_stime


def _summary(
    plan: Plan, seq_walls: list[float], seq_cpu: float, rounds: list[_Round], calls: int
) -> dict[str, Any]:
    seq_calls = plan.seq_batches * plan.seq_batch
    cpu = [one.cpu / calls * 1e6 for one in rounds]
    rates = [calls / one.wall for one in rounds]
    return {
        "calls_per_round": calls,
        "user_cpu_us": statistics.median(one.user / calls * 1e6 for one in rounds),
        "system_cpu_us": statistics.median(one.system / calls * 1e6 for one in rounds),
        "sequential_us": statistics.median(seq_walls),
        "sequential_batches_us": seq_walls,
        "sequential_cpu_us": seq_cpu / seq_calls * 1e6,
        "cpu_us": statistics.median(cpu),
        "rounds_cpu_us": cpu,
        "calls_per_s": statistics.median(rates),
        "rounds_calls_per_s": rates,
        "sequential_calls": seq_calls,
        "concurrent_calls": calls * plan.rounds,
    }


async def _measure_async(
    make: Callable[[], contextlib.AbstractAsyncContextManager[tuple[AsyncCall, dict[str, Any]]]],
    plan: Plan,
    expected_body: bytes,
) -> dict[str, Any]:
    async with make() as (call, extras):
        if "connect" in extras:
            await extras["connect"](plan.concurrency)
        body_of = extras.get("body", lambda answer: answer)
        first = body_of(await call(0))
        if first != expected_body:
            raise SystemExit(f"unexpected body from the stub: {first!r}")
        started = time.perf_counter()
        # Failures while warming up are not reported: only the measured calls count.
        await _concurrent(call, plan.concurrency, plan.warm, _Failures())
        calls = plan.round_calls(plan.warm / (time.perf_counter() - started))
        for _ in range(100):
            await call(0)
        stats = extras.get("stats")
        before = stats() if stats else None
        _sync_mark("warm")

        failures = _Failures()
        seq_walls: list[float] = []
        cpu0 = time.process_time()
        for _ in range(plan.seq_batches):
            start = time.perf_counter()
            for _ in range(plan.seq_batch):
                try:
                    await call(0)
                except Exception as error:  # counted and reported, not fatal
                    failures.count(error)
            seq_walls.append((time.perf_counter() - start) / plan.seq_batch * 1e6)
        seq_cpu = time.process_time() - cpu0
        _sync_mark("sequential")

        rounds: list[_Round] = []
        for _ in range(plan.rounds):
            with _Round() as one:
                await _concurrent(call, plan.concurrency, calls, failures)
            rounds.append(one)
        _sync_mark("concurrent")

        result = _summary(plan, seq_walls, seq_cpu, rounds, calls)
        result["in_flight"] = plan.concurrency
        result["failed_calls"] = sum(failures.values())
        result["failures"] = dict(failures)
        if stats is not None and before is not None:
            after = stats()
            result["client_stats_measured"] = {
                key: after[key] - before.get(key, 0) for key in after
            }
            if "open_connections" in extras:
                result["client_open_connections"] = extras["open_connections"]()
        return result


def _measure_boto3(url: str, plan: Plan, expected_body: bytes) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "sagemaker-runtime",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(max_pool_connections=64, retries={"max_attempts": 0}),
    )
    invoke_endpoint = client.invoke_endpoint

    def call() -> bytes:
        response = invoke_endpoint(
            EndpointName=ENDPOINT, Body=BODY, ContentType=CONTENT_TYPE, Accept=ACCEPT
        )
        body: bytes = response["Body"].read()
        return body

    def concurrent(pool: ThreadPoolExecutor, total: int) -> None:
        counter = itertools.count()

        def worker() -> None:
            while next(counter) < total:
                call()

        for future in [pool.submit(worker) for _ in range(plan.threads)]:
            future.result()

    if call() != expected_body:
        raise SystemExit("unexpected body from the stub")
    with ThreadPoolExecutor(plan.threads) as pool:
        started = time.perf_counter()
        concurrent(pool, plan.warm)
        calls = plan.round_calls(plan.warm / (time.perf_counter() - started))
        for _ in range(100):
            call()
        _sync_mark("warm")

        seq_walls: list[float] = []
        cpu0 = time.process_time()
        for _ in range(plan.seq_batches):
            start = time.perf_counter()
            for _ in range(plan.seq_batch):
                call()
            seq_walls.append((time.perf_counter() - start) / plan.seq_batch * 1e6)
        seq_cpu = time.process_time() - cpu0
        _sync_mark("sequential")

        rounds: list[_Round] = []
        for _ in range(plan.rounds):
            with _Round() as one:
                concurrent(pool, calls)
            rounds.append(one)
        _sync_mark("concurrent")
    client.close()
    result = _summary(plan, seq_walls, seq_cpu, rounds, calls)
    result["in_flight"] = plan.threads
    return result


def _best_us(function: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=repeat)) / number * 1e6


def measure_signing(number: int = 2000, repeat: int = 7) -> dict[str, Any]:
    """µs per signature: botocore ``add_auth`` vs ours, on the same request.

    Also checks that both produce the same ``Authorization`` value.
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    from gateway._signing import Credentials, SigV4Signer, payload_sha256
    from gateway._wire import RequestSigner

    host = "runtime.sagemaker.us-east-1.amazonaws.com"
    path = f"/endpoints/{ENDPOINT}/invocations"
    request = AWSRequest(
        method="POST",
        url=f"https://{host}{path}",
        data=BODY,
        headers={"Content-Type": CONTENT_TYPE, "Accept": ACCEPT},
    )
    auth = SigV4Auth(BotoCredentials(ACCESS_KEY, SECRET_KEY), "sagemaker", REGION)
    auth.add_auth(request)  # add_auth replaces X-Amz-Date and Authorization each time
    amz_date = str(request.headers["X-Amz-Date"])

    signer = SigV4Signer(REGION)
    credentials = Credentials(ACCESS_KEY, SECRET_KEY)
    prefix = SigV4Signer.request_prefix("POST", path)
    base = [("accept", ACCEPT), ("content-type", CONTENT_TYPE), ("host", host)]
    headers = [*base, ("x-amz-date", amz_date)]
    payload_hash = payload_sha256(BODY)
    request_signer = RequestSigner(signer, lambda: credentials)

    ours = signer.authorization_presorted(prefix, headers, payload_hash, credentials, amz_date)
    general = signer.authorization("POST", path, headers, payload_hash, credentials, amz_date)
    matches = ours == general == request.headers["Authorization"]

    def botocore_add_auth() -> None:
        auth.add_auth(request)

    def ours_presorted() -> str:
        return signer.authorization_presorted(prefix, headers, payload_hash, credentials, amz_date)

    def ours_general() -> str:
        return signer.authorization("POST", path, headers, payload_hash, credentials, amz_date)

    def ours_per_call() -> list[tuple[str, str]]:
        # The general per-call path: hash the body, date, insert, sign.
        return request_signer.sign(prefix, base, payload_sha256(BODY))

    def ours_hot_path() -> bytes:
        # What the native transport does per call: hash the body, then sign
        # from the second's presigned head (RequestSigner.signed_head), giving
        # the whole head's bytes ready to send. add_auth hashes the body too.
        return request_signer.signed_head(path, prefix, base, payload_sha256(BODY), len(BODY), 3)

    botocore_us = _best_us(botocore_add_auth, number, repeat)
    presorted_us = _best_us(ours_presorted, number * 20, repeat)
    general_us = _best_us(ours_general, number * 20, repeat)
    per_call_us = _best_us(ours_per_call, number * 20, repeat)
    hot_path_us = _best_us(ours_hot_path, number * 20, repeat)
    return {
        "botocore_add_auth_us": botocore_us,
        "ours_presorted_us": presorted_us,
        "ours_general_us": general_us,
        "ours_per_call_us": per_call_us,
        "speedup_presorted": botocore_us / presorted_us,
        "speedup_per_call": botocore_us / per_call_us,
        "ours_hot_path_us": hot_path_us,
        "speedup_hot_path": botocore_us / hot_path_us,
        "signature_matches_botocore": matches,
        "method": f"best of {repeat} repeats",
    }


def child_main(name: str, url: str, plan: Plan) -> dict[str, Any]:
    if name == "signing":
        return measure_signing(plan.sign_number, plan.sign_repeat)
    from bench._stub import BODY as STUB_BODY

    if name == "boto3":
        return _measure_boto3(url, plan, STUB_BODY)
    import uvloop

    factories: dict[
        str,
        Callable[[], contextlib.AbstractAsyncContextManager[tuple[AsyncCall, dict[str, Any]]]],
    ] = {
        "gateway-native": lambda: _gateway(url, "native"),
        "gateway-httpx": lambda: _gateway(url, "httpx"),
        "aiobotocore": lambda: _aiobotocore(url),
        "raw-floor": lambda: _raw(url, signed=False),
        "raw-floor+sign": lambda: _raw(url, signed=True),
    }
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure_async(factories[name], plan, STUB_BODY))


# -- parent side ------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AWS_ENDPOINT_URL", "AWS_PROFILE"))
    }
    # Hermetic: no shared config, no instance metadata lookups.
    env.update(
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


def _read_message(stdout: IO[str]) -> dict[str, Any]:
    for line in stdout:
        if line.startswith(MARK):
            message: dict[str, Any] = json.loads(line[len(MARK) :])
            return message
        sys.stderr.write(line)  # anything else a library printed
    raise RuntimeError("the child exited without a result")


def run_child(
    name: str, plan: Plan, stub: StubServer | None, cpus: set[int] | None = None
) -> dict[str, Any]:
    """Run one client in a fresh process; read the stub's counters at each of its marks."""
    command = [sys.executable, "-m", "bench.compare", "--child", name, "--plan"]
    command.append(json.dumps(asdict(plan)))
    if stub is not None:
        command += ["--url", stub.url]
    snapshots: dict[str, dict[str, int]] = {}
    if stub is not None:
        snapshots["start"] = stub.stats()
    started = time.perf_counter()
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=_child_env(),
        preexec_fn=die_with_parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            if cpus is not None:
                os.sched_setaffinity(process.pid, cpus)
            while True:
                message = _read_message(process.stdout)
                if message["event"] != "mark":
                    result: dict[str, Any] = message["result"]
                    break
                assert stub is not None, "only stub-less children (signing) skip marks"
                snapshots[message["name"]] = stub.stats()
                process.stdin.write("go\n")
                process.stdin.flush()
        except BaseException:
            process.kill()
            raise
        process.stdin.close()
        if process.wait() != 0:
            raise RuntimeError(f"client {name} failed with exit status {process.returncode}")
    result["client"] = name
    result["elapsed_s"] = time.perf_counter() - started
    if stub is not None:
        _add_stub_counts(result, snapshots, plan)
    return result


def _add_stub_counts(
    result: dict[str, Any], snapshots: dict[str, dict[str, int]], plan: Plan
) -> None:
    def delta(key: str, first: str, last: str) -> int:
        return snapshots[last][key] - snapshots[first][key]

    result["connections_opened"] = {
        "warm": delta("connections", "start", "warm"),
        "sequential": delta("connections", "warm", "sequential"),
        "concurrent": delta("connections", "sequential", "concurrent"),
    }
    result["connections_opened_measured"] = delta("connections", "warm", "concurrent")
    result["stub_requests_measured"] = delta("requests", "warm", "concurrent")
    result["expected_requests_measured"] = result["sequential_calls"] + result["concurrent_calls"]


def pinning() -> tuple[set[int], set[int]] | None:
    """(stub CPUs, client CPUs): the stub on the last usable core, clients on the others."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return None
    return {usable[-1]}, set(usable[:-1])


@contextlib.contextmanager
def start_stub(cpus: set[int] | None) -> Iterator[StubServer]:
    """The stub, started with ``cpus`` as its affinity (a spawned child inherits it)."""
    if cpus is None:
        stub = StubServer()
    else:
        original = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
        try:
            stub = StubServer()
        finally:
            os.sched_setaffinity(0, original)
    try:
        yield stub
    finally:
        stub.stop()


def machine() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for package in ("botocore", "boto3", "aiobotocore", "httpx", "httpcore", "httptools", "uvloop"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": versions,
        # The clients import the same install: "compiled" (mypyc) or "pure".
        "gateway_hot_path": build_kind(),
    }


def ratios(clients: dict[str, dict[str, Any]], signing: dict[str, Any] | None) -> dict[str, Any]:
    def cpu(name: str) -> float | None:
        return clients[name]["cpu_us"] if name in clients else None

    def ratio(top: float | None, bottom: float | None) -> float | None:
        return top / bottom if top is not None and bottom else None

    def user(name: str) -> float | None:
        return clients[name]["user_cpu_us"] if name in clients else None

    native = cpu("gateway-native")
    out: dict[str, Any] = {
        # User CPU only: loopback makes each write() also pay the stub's wake-up in
        # system time, and the slower a client, the more often the stub sleeps.
        "native_vs_floor_user": ratio(user("gateway-native"), user("raw-floor")),
        "native_vs_signed_floor_user": ratio(user("gateway-native"), user("raw-floor+sign")),
        "native_vs_floor": ratio(native, cpu("raw-floor")),
        "native_vs_signed_floor": ratio(native, cpu("raw-floor+sign")),
        "signed_floor_vs_floor": ratio(cpu("raw-floor+sign"), cpu("raw-floor")),
        "aiobotocore_vs_native": ratio(cpu("aiobotocore"), native),
        "boto3_vs_native": ratio(cpu("boto3"), native),
        "httpx_vs_native": ratio(cpu("gateway-httpx"), native),
        # What each call pays (body hash, date, signature, the head's bytes).
        "signing_speedup": signing["speedup_hot_path"] if signing else None,
        "signing_speedup_presorted": signing["speedup_presorted"] if signing else None,
        "signing_speedup_per_call": signing["speedup_per_call"] if signing else None,
        "native_connections_opened_measured": (
            clients["gateway-native"].get("connections_opened_measured")
            if "gateway-native" in clients
            else None
        ),
    }
    return out


def verdicts(summary: dict[str, Any]) -> dict[str, bool | None]:
    def check(value: float | None, ok: Callable[[float], bool]) -> bool | None:
        return None if value is None else ok(value)

    connections = summary["native_connections_opened_measured"]
    return {
        "native_vs_signed_floor": check(
            summary["native_vs_signed_floor"], lambda v: v <= TARGETS["native_vs_signed_floor"]
        ),
        "aiobotocore_vs_native": check(
            summary["aiobotocore_vs_native"], lambda v: v >= TARGETS["aiobotocore_vs_native"]
        ),
        "signing_speedup": check(
            summary["signing_speedup"], lambda v: v >= TARGETS["signing_speedup"]
        ),
        "native_zero_connections": None if connections is None else connections == 0,
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return {True: "PASS", False: "MISS", None: "n/a"}[ok]


def render(report: dict[str, Any]) -> Iterator[str]:
    info = report["machine"]
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    yield "# bench.compare: per-call cost of SageMaker Runtime clients"
    yield ""
    yield (
        f"- machine: {info['cores']} cores ({info['usable_cores']} usable), "
        f"{info['implementation']} {info['python']}, {info['platform']}"
    )
    load = info["load_average"]
    if load:
        yield f"- load average at start: {' / '.join(f'{v:.2f}' for v in load)}"
    yield f"- versions: {versions}"
    yield f"- gateway hot path: {info.get('gateway_hot_path', '-')} (see setup.py)"
    plan = report["plan"]
    yield (
        f"- stub: {report['stub']} (uvloop + httptools, own process, 24-byte JSON); "
        f"sequential: median of {plan['seq_batches']} batches of {plan['seq_batch']}; "
        f"concurrent: median of {plan['rounds']} rounds of at least {plan['calls']} calls "
        f"(or ~{plan['round_seconds']} s' worth) at "
        f"{plan['concurrency']} in flight (boto3: {plan['threads']} threads); "
        "CPU = time.process_time() of the client process (the user + sys split comes "
        "from getrusage, which the kernel apportions by tick samples: indicative only)"
    )
    pins = report["pinning"]
    yield (
        f"- pinning: stub on CPU {pins['stub_cpus']}, clients on CPU {pins['client_cpus']}"
        if pins
        else "- pinning: none"
    )
    yield f"- command: {report['command']}"
    yield ""
    yield (
        "| client | seq wall µs/call | seq CPU µs/call | in flight | CPU µs/call "
        "| (user + sys) | calls/s | conns opened (measured) | conns opened (warm-up) "
        "| failed calls |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for name, row in report["clients"].items():
        conns = row.get("connections_opened", {})
        yield (
            f"| {name} | {_fmt(row['sequential_us'])} | {_fmt(row['sequential_cpu_us'])} "
            f"| {row['in_flight']} | {_fmt(row['cpu_us'])} "
            f"| {_fmt(row['user_cpu_us'])} + {_fmt(row['system_cpu_us'])} "
            f"| {_fmt(row['calls_per_s'], 0)} "
            f"| {row.get('connections_opened_measured', '-')} | {conns.get('warm', '-')} "
            f"| {row.get('failed_calls', 0)} |"
        )
    signing = report.get("signing")
    if signing:
        yield ""
        yield f"Signing, µs per signature ({signing['method']}):"
        yield ""
        yield "| signer | µs |"
        yield "|---|---:|"
        yield f"| botocore SigV4Auth.add_auth | {_fmt(signing['botocore_add_auth_us'], 2)} |"
        yield f"| ours authorization_presorted | {_fmt(signing['ours_presorted_us'], 2)} |"
        yield (
            "| ours per call (payload hash + RequestSigner.sign) "
            f"| {_fmt(signing['ours_per_call_us'], 2)} |"
        )
        yield (
            "| ours hot path (payload hash + RequestSigner.signed_head: the whole head) "
            f"| {_fmt(signing['ours_hot_path_us'], 2)} |"
        )
        yield f"| ours authorization (general) | {_fmt(signing['ours_general_us'], 2)} |"
        yield ""
        yield f"Signatures identical to botocore's: {signing['signature_matches_botocore']}"
    summary, checks = report["ratios"], report["verdicts"]
    yield ""
    yield "Ratios (client CPU per call at full concurrency, same run):"
    yield ""
    yield (
        "- gateway-native ÷ raw-floor+sign (the floor that signs each call, as SageMaker "
        f"requires): {_fmt(summary['native_vs_signed_floor'], 2)}x "
        f"(target ≤ {TARGETS['native_vs_signed_floor']}x): "
        f"{_verdict(checks['native_vs_signed_floor'])}"
    )
    yield (
        "- gateway-native ÷ raw-floor (the same unsigned bytes every call: the wire's own "
        f"cost, for reference): {_fmt(summary['native_vs_floor'], 2)}x; raw-floor+sign ÷ "
        f"raw-floor: {_fmt(summary['signed_floor_vs_floor'], 2)}x"
    )
    yield (
        f"- user CPU only: gateway-native ÷ raw-floor {_fmt(summary['native_vs_floor_user'], 2)}x, "
        f"÷ raw-floor+sign {_fmt(summary['native_vs_signed_floor_user'], 2)}x"
    )
    yield (
        f"- aiobotocore ÷ gateway-native: {_fmt(summary['aiobotocore_vs_native'])}x "
        f"(target ≥ {TARGETS['aiobotocore_vs_native']:.0f}x): "
        f"{_verdict(checks['aiobotocore_vs_native'])}"
    )
    yield f"- boto3 ÷ gateway-native: {_fmt(summary['boto3_vs_native'])}x"
    yield f"- gateway-httpx ÷ gateway-native: {_fmt(summary['httpx_vs_native'])}x"
    yield (
        "- signing, botocore add_auth ÷ ours hot path (what each native call pays: both "
        f"hash the body; ours also builds the head): {_fmt(summary['signing_speedup'])}x "
        f"(target ≥ {TARGETS['signing_speedup']:.0f}x): {_verdict(checks['signing_speedup'])}; "
        f"÷ ours presorted Authorization alone: {_fmt(summary['signing_speedup_presorted'])}x; "
        f"÷ ours general per call (httpx path): {_fmt(summary['signing_speedup_per_call'])}x"
    )
    yield (
        "- gateway-native connections opened once warm: "
        f"{summary['native_connections_opened_measured']} (target 0): "
        f"{_verdict(checks['native_zero_connections'])}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    parser.add_argument("--calls", type=int, help="calls per concurrent round")
    parser.add_argument("--rounds", type=int, help="concurrent rounds (median reported)")
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    parser.add_argument("--no-signing", action="store_true", help="skip the signing comparison")
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin the stub and the clients to separate cores",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--json-out", type=Path, help="also write the JSON report here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    plan = QUICK_PLAN if args.quick else DEFAULT_PLAN
    changes: dict[str, int] = {}
    if args.calls:
        changes["calls"] = args.calls
        changes["seq_batch"] = max(10, args.calls // 10)
        changes["warm"] = max(plan.concurrency * 2, args.calls // 4)
    if args.rounds:
        changes["rounds"] = args.rounds
    return Plan(**{**asdict(plan), **changes})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        result = child_main(args.child, args.url or "", Plan(**json.loads(args.plan)))
        print(MARK + json.dumps({"event": "result", "result": result}), flush=True)
        return 0

    names = [name.strip() for name in args.clients.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown:
        raise SystemExit(f"unknown clients: {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    plan = make_plan(args)
    pins = None if args.no_pin else pinning()
    report: dict[str, Any] = {
        "command": " ".join(["python -m bench.compare", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "plan": asdict(plan),
        "clients": {},
        "signing": None,
        "pinning": (
            {"stub_cpus": sorted(pins[0]), "client_cpus": sorted(pins[1])} if pins else None
        ),
    }
    client_cpus = pins[1] if pins else None
    with start_stub(pins[0] if pins else None) as stub:
        report["stub"] = stub.url
        for name in names:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            report["clients"][name] = run_child(name, plan, stub, client_cpus)
    if not args.no_signing:
        print("measuring signing ...", file=sys.stderr, flush=True)
        report["signing"] = run_child("signing", plan, None, client_cpus)
    report["ratios"] = ratios(report["clients"], report["signing"])
    report["verdicts"] = verdicts(report["ratios"])

    text = json.dumps(report, indent=2)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print(text if args.json else "\n".join(render(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
