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
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from bench._peers import aiobotocore_problem
from bench._stub import Certificate, StubServer, make_certificate
from gateway._host.build import build_kind
from gateway._server.processes import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = (
    "gateway-native",
    # The same client with the Prometheus metrics hook on the event stream.
    "gateway-native+metrics",
    "gateway-httpx",
    "aiobotocore",
    "boto3",
    "raw-floor",
    "raw-floor+sign",
    # The inference router and Global Inference Gateway calls, beside boto3's clients of them.
    "gateway-router",
    "boto3-router",
    "gateway-global",
    "boto3-global",
    # Their async and streaming operations: a 202 with the output location, and an
    # event stream of PayloadPart events read to its end.
    "gateway-router-async",
    "boto3-router-async",
    "gateway-global-stream",
    "boto3-global-stream",
)
ENDPOINT = "bench-endpoint"
ROUTER, ROUTING_TARGET, GATEWAY_ID = "bench-router", "bench-target", "benchgateway"
INPUT_LOCATION = "s3://bench-bucket/input/request.csv"
CHAT = b'{"model":"echo","messages":[{"role":"user","content":"3,14,1042,77,5,811,2"}]}'
# One headerless CSV row of the RTB model's seven features.
BODY = b"3,14,1042,77,5,811,2"
CONTENT_TYPE = "text/csv"
ACCEPT = "application/json"
REGION = "us-east-1"
ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
MARK = "@@bench "
SIGNING_TARGET = 20.0  # ours <= 1/20 of botocore's add_auth (the CPU targets: SETUPS)
# Each boto3 client's service and call, keyed by the client's name.
BOTO3_CALLS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "boto3": (
        "sagemaker-runtime",
        "invoke_endpoint",
        {"EndpointName": ENDPOINT, "Body": BODY, "ContentType": CONTENT_TYPE, "Accept": ACCEPT},
    ),
    "boto3-router": (
        "sagemaker-inference-router-runtime",
        "invoke_inference_router",
        {
            "InferenceRouterName": ROUTER,
            "RoutingTargetName": ROUTING_TARGET,
            "Body": BODY,
            "ContentType": CONTENT_TYPE,
            "Accept": ACCEPT,
        },
    ),
    "boto3-global": (
        "sagemaker-gateway-runtime",
        "invoke_global_inference_gateway",
        {"GatewayId": GATEWAY_ID, "Body": CHAT, "ContentType": "application/json"},
    ),
    "boto3-router-async": (
        "sagemaker-inference-router-runtime",
        "invoke_inference_router_async",
        {
            "InferenceRouterName": ROUTER,
            "RoutingTargetName": ROUTING_TARGET,
            "InputLocation": INPUT_LOCATION,
            "ContentType": CONTENT_TYPE,
            "Accept": ACCEPT,
        },
    ),
    "boto3-global-stream": (
        "sagemaker-gateway-runtime",
        "invoke_global_inference_gateway_with_response_stream",
        {"GatewayId": GATEWAY_ID, "Body": CHAT, "ContentType": "application/json"},
    ),
}


def _boto3_answer(response: dict[str, Any]) -> bytes:
    """What a boto3 call answered, as bytes: the body read to its end, an event
    stream's PayloadParts joined, or an async call's output location."""
    body = response.get("Body")
    if body is None:
        location: str = response["OutputLocation"]
        return location.encode()
    if hasattr(body, "read"):
        data: bytes = body.read()
        return data
    return b"".join(event["PayloadPart"]["Bytes"] for event in body)


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


DEFAULT_PLAN = Plan(calls=2000, rounds=2, seq_batches=3, seq_batch=400, warm=1000)
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


def _client_ssl(cafile: str | None) -> ssl.SSLContext | None:
    """Over TLS the clients trust the stub's certificate and nothing else."""
    return ssl.create_default_context(cafile=cafile) if cafile else None


@contextlib.asynccontextmanager
async def _gateway(
    url: str,
    transport_name: str,
    cafile: str | None,
    metrics: bool = False,
    operation: str = "invoke",
) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
    from gateway import Gateway, PoolConfig
    from gateway._http.httpx_transport import HttpxTransport
    from gateway._http.native import NativeTransport

    # The transport is built here only to hand it the stub's certificate; its
    # options are the ones Gateway(pool=...) would derive.
    options = PoolConfig(max_connections=64, prewarm=8, ssl_context=_client_ssl(cafile))
    transport = HttpxTransport(options) if transport_name == "httpx" else NativeTransport(options)
    async with Gateway(
        REGION,
        endpoint_url=url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        transport=transport,
    ) as gw:
        if metrics:
            gw.enable_metrics()
        invoke = gw.invoke
        invoke_router = gw.invoke_router
        invoke_router_async = gw.invoke_router_async
        invoke_global = gw.invoke_global_gateway
        invoke_global_stream = gw.invoke_global_gateway_stream

        def call(slot: int) -> Awaitable[Any]:
            return invoke(ENDPOINT, BODY, content_type=CONTENT_TYPE, accept=ACCEPT, timeout=1.0)

        def call_router(slot: int) -> Awaitable[Any]:
            return invoke_router(
                ROUTER,
                BODY,
                routing_target=ROUTING_TARGET,
                content_type=CONTENT_TYPE,
                accept=ACCEPT,
                timeout=1.0,
            )

        def call_global(slot: int) -> Awaitable[Any]:
            return invoke_global(GATEWAY_ID, CHAT, timeout=1.0)

        def call_router_async(slot: int) -> Awaitable[Any]:
            return invoke_router_async(
                ROUTER,
                routing_target=ROUTING_TARGET,
                input_location=INPUT_LOCATION,
                content_type=CONTENT_TYPE,
                accept=ACCEPT,
                timeout=1.0,
            )

        async def call_global_stream(slot: int) -> bytes:
            # A stream is only done once read to its end, as boto3's caller reads it.
            parts = [part async for part in invoke_global_stream(GATEWAY_ID, CHAT, timeout=1.0)]
            return b"".join(parts)

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

        calls = {
            "invoke": call,
            "router": call_router,
            "global": call_global,
            "router_async": call_router_async,
            "global_stream": call_global_stream,
        }
        yield (
            calls[operation],
            {
                "stats": stats,
                "open_connections": open_connections,
                "body": _ANSWERS.get(operation, _result_body),
            },
        )


def _result_body(result: Any) -> bytes:
    body: bytes = result.body
    return body


def _output_location(invocation: Any) -> bytes:
    location: str = invocation.output_location
    return location.encode()


# How each gateway operation's answer is turned into the bytes checked on the first call.
_ANSWERS: dict[str, Callable[[Any], bytes]] = {
    "router_async": _output_location,
    "global_stream": lambda joined: joined,
}


@contextlib.asynccontextmanager
async def _aiobotocore(
    url: str, cafile: str | None
) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
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
        verify=cafile,
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
async def _raw(
    url: str, signed: bool, cafile: str | None
) -> AsyncIterator[tuple[AsyncCall, dict[str, Any]]]:
    from bench._raw_client import RawFloorClient
    from gateway._aws.sigv4 import Credentials

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
        ssl_context=_client_ssl(cafile),
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


def _measure_boto3(
    url: str, cafile: str | None, plan: Plan, expected_body: bytes, name: str = "boto3"
) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    service, method, params = BOTO3_CALLS[name]
    client = boto3.session.Session().client(
        service,
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(max_pool_connections=64, retries={"max_attempts": 0}),
        verify=cafile,
    )
    invoke = getattr(client, method)

    def call() -> bytes:
        return _boto3_answer(invoke(**params))

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

    from gateway._aws.sigv4 import Credentials, SigV4Signer, payload_sha256
    from gateway._http.request import RequestSigner

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


def child_main(name: str, url: str, cafile: str | None, plan: Plan) -> dict[str, Any]:
    if name == "signing":
        return measure_signing(plan.sign_number, plan.sign_repeat)
    from bench._stub import BODY as STUB_BODY
    from bench._stub import OUTPUT_LOCATION

    # The async operations answer where their output will be, not a body.
    expected = OUTPUT_LOCATION.encode() if name.endswith("-async") else STUB_BODY
    if name in BOTO3_CALLS:
        return _measure_boto3(url, cafile, plan, expected, name)
    import uvloop

    factories: dict[
        str,
        Callable[[], contextlib.AbstractAsyncContextManager[tuple[AsyncCall, dict[str, Any]]]],
    ] = {
        "gateway-native": lambda: _gateway(url, "native", cafile),
        "gateway-native+metrics": lambda: _gateway(url, "native", cafile, metrics=True),
        "gateway-httpx": lambda: _gateway(url, "httpx", cafile),
        "aiobotocore": lambda: _aiobotocore(url, cafile),
        "raw-floor": lambda: _raw(url, signed=False, cafile=cafile),
        "raw-floor+sign": lambda: _raw(url, signed=True, cafile=cafile),
        "gateway-router": lambda: _gateway(url, "native", cafile, operation="router"),
        "gateway-global": lambda: _gateway(url, "native", cafile, operation="global"),
        "gateway-router-async": lambda: _gateway(url, "native", cafile, operation="router_async"),
        "gateway-global-stream": lambda: _gateway(url, "native", cafile, operation="global_stream"),
    }
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_measure_async(factories[name], plan, expected))


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
        if stub.tls is not None:
            command += ["--cafile", stub.tls.cert_file]
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
def start_stub(cpus: set[int] | None, tls: Certificate | None = None) -> Iterator[StubServer]:
    """The stub, started with ``cpus`` as its affinity (a spawned child inherits it)."""
    if cpus is None:
        stub = StubServer(tls=tls)
    else:
        original = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
        try:
            stub = StubServer(tls=tls)
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
        "openssl": ssl.OPENSSL_VERSION,
        # The clients import the same install: "compiled" (mypyc) or "pure".
        "gateway_hot_path": build_kind(),
    }


def ratios(clients: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The clients' CPU ratios, from figures measured in the same round."""

    def cpu(name: str) -> float | None:
        return clients[name]["cpu_us"] if name in clients else None

    def ratio(top: float | None, bottom: float | None) -> float | None:
        return top / bottom if top is not None and bottom else None

    def user(name: str) -> float | None:
        return clients[name]["user_cpu_us"] if name in clients else None

    native = cpu("gateway-native")
    return {
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
        "metrics_vs_native": ratio(cpu("gateway-native+metrics"), native),
        # The newer runtimes' calls: the gateway's CPU beside its InvokeEndpoint's and boto3's.
        "router_vs_native": ratio(cpu("gateway-router"), native),
        "global_vs_native": ratio(cpu("gateway-global"), native),
        "boto3_router_vs_router": ratio(cpu("boto3-router"), cpu("gateway-router")),
        "boto3_global_vs_global": ratio(cpu("boto3-global"), cpu("gateway-global")),
        "router_async_vs_native": ratio(cpu("gateway-router-async"), native),
        "global_stream_vs_native": ratio(cpu("gateway-global-stream"), native),
        "boto3_router_async_vs_router_async": ratio(
            cpu("boto3-router-async"), cpu("gateway-router-async")
        ),
        "boto3_global_stream_vs_global_stream": ratio(
            cpu("boto3-global-stream"), cpu("gateway-global-stream")
        ),
    }


def spread(values: list[float | None]) -> dict[str, Any]:
    """Median, min and max of one figure over the rounds (None when never measured)."""
    known = [value for value in values if value is not None]
    if not known:
        return {"median": None, "min": None, "max": None, "rounds": values}
    return {
        "median": statistics.median(known),
        "min": min(known),
        "max": max(known),
        "rounds": values,
    }


# Per-client figures that add up over rounds (counts); the others are medians.
_SUMMED = (
    "failed_calls",
    "sequential_calls",
    "concurrent_calls",
    "connections_opened_measured",
    "stub_requests_measured",
    "expected_requests_measured",
    "elapsed_s",
)
_MEDIANS = ("user_cpu_us", "system_cpu_us", "sequential_us", "sequential_cpu_us", "calls_per_s")
_SUMMED_MAPS = ("connections_opened", "client_stats_measured", "failures")


def merge_rounds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One client's figures over its rounds: medians, with each round's CPU kept."""
    merged: dict[str, Any] = {"client": results[0]["client"], "in_flight": results[0]["in_flight"]}
    merged["calls_per_round"] = min(one["calls_per_round"] for one in results)
    for key in (
        "user_cpu_us",
        "system_cpu_us",
        "sequential_us",
        "sequential_cpu_us",
        "calls_per_s",
    ):
        merged[key] = statistics.median(one[key] for one in results)
    merged["cpu_us"] = statistics.median(one["cpu_us"] for one in results)
    merged["cpu_us_spread"] = spread([one["cpu_us"] for one in results])
    for key in _SUMMED:
        if key in results[0]:
            merged[key] = sum(one[key] for one in results)
    for key in _SUMMED_MAPS:
        if key in results[0]:
            total: dict[str, Any] = {}
            for one in results:
                for name, value in one[key].items():
                    total[name] = total.get(name, 0) + value
            merged[key] = total
    if "client_open_connections" in results[-1]:
        merged["client_open_connections"] = results[-1]["client_open_connections"]
    return merged


@dataclass(frozen=True, slots=True)
class Setup:
    """One way of reaching the stub: plain HTTP or HTTPS, with its own targets."""

    name: str
    tls: bool
    # native CPU/call <= this x the floor that signs (SageMaker refuses unsigned calls)
    native_vs_signed_floor: float
    aiobotocore_vs_native: float  # aiobotocore CPU/call >= this x native's


SETUPS = {
    "plain": Setup("plain", tls=False, native_vs_signed_floor=1.3, aiobotocore_vs_native=12.0),
    # SageMaker only speaks HTTPS: this is what users pay in production.
    "tls": Setup("tls", tls=True, native_vs_signed_floor=1.3, aiobotocore_vs_native=15.0),
}


def run_setup(
    setup: Setup,
    names: list[str],
    plan: Plan,
    repeats: int,
    pins: tuple[set[int], set[int]] | None,
    certificate: Certificate | None,
) -> dict[str, Any]:
    """Every client ``repeats`` times, alternating (the order rotates each round).

    A ratio is taken between figures of the same round, then the median and
    spread of the rounds' ratios are reported: a burst of load from a
    neighbour then moves one round, not the verdict.
    """
    rounds: list[dict[str, dict[str, Any]]] = []
    with start_stub(pins[0] if pins else None, certificate if setup.tls else None) as stub:
        for index in range(repeats):
            shift = index % len(names)
            measured: dict[str, dict[str, Any]] = {}
            for name in names[shift:] + names[:shift]:
                print(
                    f"{setup.name} round {index + 1}/{repeats}: {name} ...",
                    file=sys.stderr,
                    flush=True,
                )
                measured[name] = run_child(name, plan, stub, pins[1] if pins else None)
            rounds.append(measured)
        url = stub.url
    clients = {name: merge_rounds([one[name] for one in rounds]) for name in names}
    per_round = [ratios(one) for one in rounds]
    ratio_spread = {key: spread([one[key] for one in per_round]) for key in per_round[0]}
    summary: dict[str, Any] = {key: value["median"] for key, value in ratio_spread.items()}
    summary["native_connections_opened_measured"] = clients.get("gateway-native", {}).get(
        "connections_opened_measured"
    )
    return {
        "stub": url,
        "rounds": repeats,
        "clients": clients,
        "ratios": summary,
        "ratio_spread": ratio_spread,
        "targets": asdict(setup),
        "verdicts": verdicts(summary, setup),
    }


def verdicts(summary: dict[str, Any], setup: Setup) -> dict[str, bool | None]:
    def check(value: float | None, ok: Callable[[float], bool]) -> bool | None:
        return None if value is None else ok(value)

    connections = summary["native_connections_opened_measured"]
    return {
        "native_vs_signed_floor": check(
            summary["native_vs_signed_floor"], lambda v: v <= setup.native_vs_signed_floor
        ),
        "aiobotocore_vs_native": check(
            summary["aiobotocore_vs_native"], lambda v: v >= setup.aiobotocore_vs_native
        ),
        "native_zero_connections": None if connections is None else connections == 0,
    }


def signing_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The signing figures' medians over the runs, with the speed-ups' spread."""
    out: dict[str, Any] = {"method": f"median of {len(runs)} runs, each {runs[0]['method']}"}
    for key, value in runs[0].items():
        if isinstance(value, float):
            out[key] = statistics.median(one[key] for one in runs)
    for key in ("speedup_hot_path", "speedup_presorted", "speedup_per_call"):
        out[f"{key}_spread"] = spread([one[key] for one in runs])
    out["signature_matches_botocore"] = all(one["signature_matches_botocore"] for one in runs)
    out["verdict"] = out["speedup_hot_path"] >= SIGNING_TARGET
    return out


def tls_cost(report: dict[str, Any]) -> dict[str, dict[str, float]] | None:
    """What TLS adds per call, client by client: medians of each set-up's rounds."""
    setups = report["setups"]
    if "plain" not in setups or "tls" not in setups:
        return None
    out: dict[str, dict[str, float]] = {}
    for name, row in setups["tls"]["clients"].items():
        plain = setups["plain"]["clients"].get(name)
        if plain:
            out[name] = {
                "added_cpu_us": row["cpu_us"] - plain["cpu_us"],
                "ratio": row["cpu_us"] / plain["cpu_us"],
            }
    return out


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return {True: "PASS", False: "MISS", None: "n/a"}[ok]


def _ratio(figure: dict[str, Any], digits: int = 2) -> str:
    """``median x (min-max over n rounds)``."""
    if figure["median"] is None:
        return "-"
    rounds = len([value for value in figure["rounds"] if value is not None])
    return (
        f"{_fmt(figure['median'], digits)}x ({_fmt(figure['min'], digits)}-"
        f"{_fmt(figure['max'], digits)} over {rounds} rounds)"
    )


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
    yield f"- versions: {versions}; {info.get('openssl', '')}"
    yield f"- gateway hot path: {info.get('gateway_hot_path', '-')} (see setup.py)"
    plan = report["plan"]
    yield (
        f"- rounds: every client {report['repeats']} times per set-up, alternating (the order "
        "rotates each round), each time in a fresh process; a ratio is taken within a round, "
        "and the median of the rounds' ratios is judged, with their min-max"
    )
    yield (
        "- stub: uvloop + httptools, own process, 24-byte JSON; over TLS a fresh self-signed "
        "P-256 certificate that the clients verify; "
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
    for setup in report["setups"].values():
        yield from _render_setup(setup)
    cost = report.get("tls_cost")
    if cost:
        yield ""
        yield "What TLS adds (median CPU µs/call over TLS - over plain HTTP, same run):"
        yield ""
        yield "| client | added CPU µs/call | TLS ÷ plain |"
        yield "|---|---:|---:|"
        for name, row in cost.items():
            yield f"| {name} | {_fmt(row['added_cpu_us'])} | {_fmt(row['ratio'], 2)}x |"
    signing = report.get("signing")
    if signing:
        yield from _render_signing(signing)


def _render_setup(setup: dict[str, Any]) -> Iterator[str]:
    targets = setup["targets"]
    title = "HTTPS (TLS)" if targets["tls"] else "plain HTTP"
    yield ""
    yield f"## {title}: {setup['stub']}"
    yield ""
    yield (
        "| client | seq wall µs/call | seq CPU µs/call | in flight | CPU µs/call (min-max) "
        "| (user + sys) | calls/s | conns opened (measured) | conns opened (warm-up) "
        "| failed calls |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for name, row in setup["clients"].items():
        conns = row.get("connections_opened", {})
        cpu = row["cpu_us_spread"]
        yield (
            f"| {name} | {_fmt(row['sequential_us'])} | {_fmt(row['sequential_cpu_us'])} "
            f"| {row['in_flight']} | {_fmt(row['cpu_us'])} ({_fmt(cpu['min'])}-{_fmt(cpu['max'])}) "
            f"| {_fmt(row['user_cpu_us'])} + {_fmt(row['system_cpu_us'])} "
            f"| {_fmt(row['calls_per_s'], 0)} "
            f"| {row.get('connections_opened_measured', '-')} | {conns.get('warm', '-')} "
            f"| {row.get('failed_calls', 0)} |"
        )
    summary, checks, spread_of = setup["ratios"], setup["verdicts"], setup["ratio_spread"]
    yield ""
    yield "Ratios (client CPU per call at full concurrency; median of the rounds' ratios):"
    yield ""
    yield (
        "- gateway-native ÷ raw-floor+sign (the floor that signs each call, as SageMaker "
        f"requires): {_ratio(spread_of['native_vs_signed_floor'])} "
        f"(target ≤ {targets['native_vs_signed_floor']}x): "
        f"{_verdict(checks['native_vs_signed_floor'])}"
    )
    yield (
        "- gateway-native ÷ raw-floor (the same unsigned bytes every call: the wire's own "
        f"cost, for reference): {_ratio(spread_of['native_vs_floor'])}; raw-floor+sign ÷ "
        f"raw-floor: {_ratio(spread_of['signed_floor_vs_floor'])}"
    )
    yield (
        f"- user CPU only: gateway-native ÷ raw-floor {_fmt(summary['native_vs_floor_user'], 2)}x, "
        f"÷ raw-floor+sign {_fmt(summary['native_vs_signed_floor_user'], 2)}x"
    )
    yield (
        f"- aiobotocore ÷ gateway-native: {_ratio(spread_of['aiobotocore_vs_native'], 1)} "
        f"(target ≥ {targets['aiobotocore_vs_native']:.0f}x): "
        f"{_verdict(checks['aiobotocore_vs_native'])}"
    )
    yield f"- boto3 ÷ gateway-native: {_ratio(spread_of['boto3_vs_native'], 1)}"
    yield f"- gateway-httpx ÷ gateway-native: {_ratio(spread_of['httpx_vs_native'], 1)}"
    yield (
        "- gateway-native+metrics ÷ gateway-native (the Prometheus hook on the event "
        f"stream): {_ratio(spread_of['metrics_vs_native'], 3)}"
    )
    yield (
        "- gateway-router (InvokeInferenceRouter) ÷ gateway-native (InvokeEndpoint): "
        f"{_ratio(spread_of['router_vs_native'], 3)}; boto3-router ÷ gateway-router: "
        f"{_ratio(spread_of['boto3_router_vs_router'], 1)}"
    )
    yield (
        "- gateway-global (InvokeGlobalInferenceGateway) ÷ gateway-native: "
        f"{_ratio(spread_of['global_vs_native'], 3)}; boto3-global ÷ gateway-global: "
        f"{_ratio(spread_of['boto3_global_vs_global'], 1)}"
    )
    yield (
        "- gateway-router-async (InvokeInferenceRouterAsync, a 202) ÷ gateway-native: "
        f"{_ratio(spread_of['router_async_vs_native'], 3)}; boto3-router-async ÷ "
        f"gateway-router-async: {_ratio(spread_of['boto3_router_async_vs_router_async'], 1)}"
    )
    yield (
        "- gateway-global-stream (InvokeGlobalInferenceGatewayWithResponseStream, two "
        f"PayloadPart events) ÷ gateway-native: {_ratio(spread_of['global_stream_vs_native'], 3)}; "
        "boto3-global-stream ÷ gateway-global-stream: "
        f"{_ratio(spread_of['boto3_global_stream_vs_global_stream'], 1)}"
    )
    yield (
        "- gateway-native connections opened once warm: "
        f"{summary['native_connections_opened_measured']} (target 0): "
        f"{_verdict(checks['native_zero_connections'])}"
    )


def _render_signing(signing: dict[str, Any]) -> Iterator[str]:
    yield ""
    yield f"## Signing, µs per signature ({signing['method']})"
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
    yield ""
    yield (
        "- botocore add_auth ÷ ours hot path (what each native call pays: both hash the "
        f"body; ours also builds the head): {_ratio(signing['speedup_hot_path_spread'], 1)} "
        f"(target ≥ {SIGNING_TARGET:.0f}x): {_verdict(signing['verdict'])}; "
        f"÷ ours presorted Authorization alone: {_ratio(signing['speedup_presorted_spread'], 1)}; "
        f"÷ ours general per call (httpx path): {_ratio(signing['speedup_per_call_spread'], 1)}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset")
    parser.add_argument("--calls", type=int, help="calls per concurrent round")
    parser.add_argument("--rounds", type=int, help="concurrent rounds per child (median kept)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="alternating rounds of every client per set-up (default 5; ratios are their median)",
    )
    wire = parser.add_mutually_exclusive_group()
    wire.add_argument("--tls", action="store_true", help="only over HTTPS (default: both)")
    wire.add_argument("--plain", action="store_true", help="only over plain HTTP (default: both)")
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
    parser.add_argument("--cafile", help=argparse.SUPPRESS)
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


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


def _peer_clients(names: list[str], *, explicit: bool) -> list[str]:
    """The aiobotocore row when aiobotocore can run here: dropped from the default set
    with a note, refused when asked for by name."""
    problem = aiobotocore_problem() if "aiobotocore" in names else None
    if problem is None:
        return names
    if explicit:
        raise SystemExit(f"cannot measure aiobotocore: {problem}")
    print(f"no aiobotocore row: {problem}", file=sys.stderr, flush=True)
    return [name for name in names if name != "aiobotocore"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        plan = Plan(**json.loads(args.plan))
        result = child_main(args.child, args.url or "", args.cafile, plan)
        print(MARK + json.dumps({"event": "result", "result": result}), flush=True)
        return 0

    names = [name.strip() for name in args.clients.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown:
        raise SystemExit(f"unknown clients: {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    names = _peer_clients(names, explicit=args.clients != parse_args([]).clients)
    plan = make_plan(args)
    pins = None if args.no_pin else pinning()
    setups = ["tls"] if args.tls else ["plain"] if args.plain else ["plain", "tls"]
    report: dict[str, Any] = {
        "command": " ".join(["python -m bench.compare", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "plan": asdict(plan),
        "repeats": args.repeats,
        "setups": {},
        "signing": None,
        "pinning": (
            {"stub_cpus": sorted(pins[0]), "client_cpus": sorted(pins[1])} if pins else None
        ),
    }
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as directory:
        certificate = make_certificate(Path(directory)) if "tls" in setups else None
        for name in setups:
            report["setups"][name] = run_setup(
                SETUPS[name], names, plan, args.repeats, pins, certificate
            )
    report["tls_cost"] = tls_cost(report)
    if not args.no_signing:
        runs = []
        for index in range(args.repeats):
            print(f"signing {index + 1}/{args.repeats} ...", file=sys.stderr, flush=True)
            runs.append(run_child("signing", plan, None, pins[1] if pins else None))
        report["signing"] = signing_summary(runs)

    text = json.dumps(report, indent=2)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print(text if args.json else "\n".join(render(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
