"""Soak: calls through the library and the sidecar for a bounded time, faults and attacks at random.

::

    python -m bench.soak [--duration SECONDS] [--quick] [--seed N] [--json] [--case CASE]

An emulator child process serves two endpoints (``a`` and ``b``, one route
``pair`` over both, hedged and retried); a Redis server of our own backs
the prediction cache. Between the callers and the emulator sits a hostile
upstream (``bench.hostile``: a proxy that, during ``hostile`` spells, answers
twice, sends unsolicited responses, endless error bodies, truncated answers
and resets). Library callers use a ``Gateway`` (invocations on the route,
and some response streams); sidecar callers send plain HTTP to a sidecar
child process (with a Gateway of its own). Every request body carries a
unique id the echo model returns, so an answer meant for another request
is caught. A fault scheduler alternates quiet spells with one fault at a
time, chosen at random:

- ``reset``:        the emulator resets a share of connections on ``a``
- ``stall``:        the emulator holds a share of answers on ``b`` past the deadline
- ``error_burst``:  ``a`` answers a share of calls with ServiceUnavailable
- ``eject``:        ``a`` fails every call until it is ejected, then heals and is re-admitted
- ``redis_restart``: the Redis server is killed and started again on its port
- ``hostile``:      the hostile upstream misbehaves on a share of exchanges

Meanwhile an attacker (``bench.attacks``) hits the sidecar with raw-socket
attacks mixed into the load: an endless request target, an endless header,
a declared 100 MB body, a slowloris head, and pipelined requests it never
reads.

A second case, ``misbehaving_redis``, runs after it: library and sidecar
callers again, with the Redis behind both caches replaced by
``bench.bad_redis`` cycling through its wrong answers (integers, short
arrays, nested items, garbage, errors, no answer, all of them at random) and
the sidecar's ``max_in_flight`` small, so a request left counted in flight
would soon show as 429s. The cache fails open: no call may fail at all.

Printed at the end: calls made, succeeded, failed by cause, hung (a call
not finished by its deadline plus slack), lost (a call with no recorded
outcome), wrong (a caller received an answer meant for another request, or
a stream whose parts differ from what was sent), incomplete (a stream that
ended without error but short of its parts), leaked (sockets open in this
process after closing everything vs before starting, plus client
connections the sidecar still holds once every client has gone),
unexpected (a failure whose cause no fault active around that call could
produce), attacks made and mishandled (not refused with the right status,
or not cut off), the sidecar's resident memory at start and its peak
(VmHWM), and p99 latency per phase. The exit status is 1 when any of hung,
lost, wrong, incomplete, leaked, unexpected or mishandled is not 0.

``--case hanging-hedge`` runs only a hanging target under hedging: a route of
two targets on one emulator (one origin, a pool of 8), a tenth of the calls
to a target that never answers, hedged within a budget of 30% then 5%. The
route must keep answering: nothing hung, lost, wrong or leaked, no failure
but a timeout, and the healthy target never ejected.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench import attacks
from bench.bad_redis import MODES as BAD_REDIS_MODES
from bench.bad_redis import MisbehavingRedis
from bench.hostile import HostileUpstream
from gateway import Gateway, errors
from gateway._server.processes import die_with_parent
from gateway.emulator import Emulator, EmulatorProcess
from gateway.sidecar import Sidecar, SidecarProcess

ACCESS_KEY = "AKIDSOAK"
SECRET_KEY = "soak-secret-key"
CALL_TIMEOUT_S = 0.5
HANG_SLACK_S = 2.0
# A fault's effects can outlast its window: a stalled answer is still held,
# a reset connection is noticed on its next use.
FAULT_GRACE_S = 2.5
STALL_MS = 1500.0
HOSTILE_RATE = 0.2
# The sidecar cuts off a client that reads nothing for this long.
SIDECAR_WRITE_TIMEOUT_S = 2.0
STREAM_SHARE = 0.1

EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 17,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {
        "a": {"latency": {"base_ms": 1.0, "jitter_ms": 0.5}},
        "b": {"latency": {"base_ms": 1.0, "jitter_ms": 0.5}},
    },
}

ROUTES: dict[str, Any] = {
    "pair": {
        "targets": [{"endpoint": "a"}, {"endpoint": "b"}],
        "hedge": {"enabled": True, "max_extra_load": 0.1, "min_delay_ms": 5},
        "retry": {"max_attempts": 3, "budget_ratio": 0.5},
        "ejection": {
            "consecutive_failures": 5,
            "base_ejection_s": 1.0,
            "max_ejection_s": 2.0,
            "max_ejected_share": 0.5,
        },
    }
}

# Causes each fault can produce (see ``cause_of`` for the names).
TIMEOUT = "timeout"
TRANSPORT = "transport"
FAULT_CAUSES: dict[str, frozenset[str]] = {
    "reset": frozenset({TRANSPORT, TIMEOUT, "unavailable"}),
    "stall": frozenset({TIMEOUT}),
    "error_burst": frozenset({"ServiceUnavailable", "unavailable", TIMEOUT}),
    "eject": frozenset({"InternalFailure", TIMEOUT}),
    "redis_restart": frozenset(),  # the cache fails open: no call may fail
    # A broken upstream: an unusable answer is a transport failure or a timeout,
    # an endless error body an upstream error; never a wrong or a hung answer.
    "hostile": frozenset(
        {TRANSPORT, TIMEOUT, "unavailable", "ServiceUnavailable", "InternalDependencyException"}
    ),
}
FAULTS = tuple(FAULT_CAUSES)


# -- causes ---------------------------------------------------------------------


def cause_of(error: BaseException) -> str:
    """A library failure as a cause name."""
    if isinstance(error, errors.TimeoutError):
        return TIMEOUT
    if isinstance(error, errors.ConnectError):
        return "unavailable"
    if isinstance(error, errors.TransportError):
        return TRANSPORT
    if isinstance(error, errors.ServiceError):
        return error.code
    return f"unexpected:{type(error).__name__}"


def sidecar_cause(response: httpx.Response) -> str:
    """A sidecar error answer as the same cause names (see sidecar/_errors.py)."""
    code = response.headers.get("x-amzn-errortype", "").split(":", 1)[0]
    if code == "ModelError":
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(response.content)
            if isinstance(body, dict) and body.get("OriginalStatusCode") == 504:
                return TIMEOUT
    if code == "InternalDependencyException":
        return TRANSPORT
    if code == "ServiceUnavailable":
        return "ServiceUnavailable"
    return code or f"http{response.status_code}"


# -- bookkeeping -----------------------------------------------------------------


@dataclass
class FaultWindow:
    kind: str
    start: float
    end: float = float("inf")


@dataclass
class Ledger:
    started: int = 0
    outcomes: dict[int, str] = field(default_factory=dict)  # call id -> "ok" or cause
    failed: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    wrong: Counter[str] = field(default_factory=Counter)
    wrong_examples: list[str] = field(default_factory=list)  # "sent -> received", a few
    incomplete: int = 0
    latencies: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    windows: list[FaultWindow] = field(default_factory=list)

    def phase_at(self, moment: float) -> str:
        for window in reversed(self.windows):
            if window.start <= moment <= window.end:
                return window.kind
        return "quiet"

    def expected(self, cause: str, start: float, end: float) -> bool:
        for window in self.windows:
            overlaps = window.start <= end and start <= window.end + FAULT_GRACE_S
            if overlaps and cause in FAULT_CAUSES[window.kind]:
                return True
        return False

    def record_wrong(self, via: str, call: int, start: float, sent: bytes, got: bytes) -> None:
        if len(self.wrong_examples) < 5:
            self.wrong_examples.append(f"{via}: {sent[:40]!r} -> {got[:40]!r}")
        self.record(via, call, start, "wrong")

    def begin(self) -> int:
        self.started += 1
        return self.started

    def record(self, via: str, call: int, start: float, cause: str) -> None:
        end = time.monotonic()
        self.outcomes[call] = cause
        if cause == "ok":
            self.latencies[(via, self.phase_at(start))].append(end - start)
            return
        self.failed[f"{via}:{cause}"] += 1
        if cause == "hung":
            self.hung += 1
        elif cause == "wrong":
            self.wrong[via] += 1
        elif cause == "incomplete":
            self.incomplete += 1
        elif not self.expected(cause, start, end):
            self.unexpected[f"{via}:{cause}"] += 1


# -- infrastructure -----------------------------------------------------------------


def socket_fds() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
    return count


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisProcess:
    """A throw-away redis-server on a free port; kill() and start() again on it."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.workdir = tempfile.mkdtemp(prefix="soak-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._proc = subprocess.Popen(
            preexec_fn=die_with_parent,
            args=[
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _cache_settings(redis_url: str, who: str) -> dict[str, Any]:
    return {
        "namespace": f"soak-{os.getpid()}-{who}",
        "redis_url": redis_url,
        "ttl_s": 30,
        "near_max_entries": 64,
        "redis_socket_timeout_ms": 50,
        "circuit_failures": 3,
        "circuit_reset_s": 0.5,
    }


def _gateway(url: str, redis_url: str | None) -> Gateway:
    cache = _cache_settings(redis_url, "library") if redis_url is not None else None
    return Gateway(
        "us-east-1",
        endpoint_url=url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        routes=ROUTES,
        cache=cache,
        pool={"prewarm": 2, "connect_timeout_ms": 300},
    )


# -- callers ---------------------------------------------------------------------


async def library_caller(
    gw: Gateway, ledger: Ledger, stop: asyncio.Event, rng: random.Random
) -> None:
    while not stop.is_set():
        call = ledger.begin()
        if rng.random() < STREAM_SHARE:
            await _library_stream(gw, ledger, call)
            continue
        # A third repeat a small key set (cache hits: near and Redis); the rest are new.
        repeat = rng.random() < 0.33
        body = b"hot-%d" % rng.randrange(200) if repeat else b"call-%d" % call
        start = time.monotonic()
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S + HANG_SLACK_S):
                result = await gw.invoke("pair", body, timeout=CALL_TIMEOUT_S)
        except TimeoutError as error:
            if isinstance(error, errors.GatewayError):
                ledger.record("library", call, start, cause_of(error))
            else:
                ledger.record("library", call, start, "hung")
        except Exception as error:
            ledger.record("library", call, start, cause_of(error))
        else:
            if result.body == body:
                ledger.record("library", call, start, "ok")
            else:
                ledger.record_wrong("library", call, start, body, result.body)
        await asyncio.sleep(rng.random() * 0.004)


async def _library_stream(gw: Gateway, ledger: Ledger, call: int) -> None:
    """A response stream (endpoint ``a``, split in parts): all parts, or a typed error."""
    body = b"stream-%d-" % call + b"s" * 60
    start = time.monotonic()
    parts: list[bytes] = []
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S + HANG_SLACK_S):
            stream = gw.invoke_stream("a", body, timeout=CALL_TIMEOUT_S)
            parts.extend([part async for part in stream])
    except TimeoutError as error:
        cause = cause_of(error) if isinstance(error, errors.GatewayError) else "hung"
        ledger.record("stream", call, start, cause)
        return
    except Exception as error:
        ledger.record("stream", call, start, cause_of(error))
        return
    received = b"".join(parts)
    if received == body:
        ledger.record("stream", call, start, "ok")
    elif body.startswith(received):
        ledger.record("stream", call, start, "incomplete")
    else:
        ledger.record_wrong("stream", call, start, body, received)


async def sidecar_caller(
    http: httpx.AsyncClient, ledger: Ledger, stop: asyncio.Event, rng: random.Random
) -> None:
    headers = {"content-type": "text/plain", "x-gateway-timeout-ms": str(CALL_TIMEOUT_S * 1000)}
    while not stop.is_set():
        call = ledger.begin()
        body = b"side-%d" % call
        start = time.monotonic()
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S + HANG_SLACK_S):
                response = await http.post(
                    "/endpoints/pair/invocations", content=body, headers=headers
                )
        except TimeoutError:
            ledger.record("sidecar", call, start, "hung")
        except httpx.HTTPError as error:
            # The sidecar itself must never drop a connection on its client.
            ledger.record("sidecar", call, start, f"unexpected:{type(error).__name__}")
        else:
            if response.status_code == 200 and response.content == body:
                ledger.record("sidecar", call, start, "ok")
            elif response.status_code == 200:
                ledger.record_wrong("sidecar", call, start, body, response.content)
            else:
                ledger.record("sidecar", call, start, sidecar_cause(response))
        await asyncio.sleep(rng.random() * 0.004)


# -- faults ----------------------------------------------------------------------


async def inject(
    kind: str,
    emulator: EmulatorProcess,
    redis: RedisProcess,
    rng: random.Random,
    favoured: str,
    hostile: HostileUpstream,
) -> None:
    """Apply one fault for a random spell, then undo it.

    The balancer steers away from a target that fails, so probabilistic faults
    go to both endpoints (no call can dodge them); ``eject`` hits the target the
    balancer favours right now, so it takes the failures and is ejected.
    """
    hold = 0.6 + rng.random() * 0.8
    both: tuple[str, ...] = ("a", "b")
    if kind == "redis_restart":
        await asyncio.to_thread(redis.kill)
        await asyncio.sleep(hold / 2)
        await asyncio.to_thread(redis.start)
        return
    if kind == "hostile":
        hostile.rate = hostile.spell_rate
        try:
            await asyncio.sleep(hold)
        finally:
            hostile.rate = 0.0
        return
    changes: dict[str, Any]
    if kind == "reset":
        targets, changes = both, {"reset_rate": 0.1}
    elif kind == "stall":
        targets, changes = both, {"stall_rate": 0.05, "stall_ms": STALL_MS}
    elif kind == "error_burst":
        targets, changes = both, {"error_rates": {"ServiceUnavailable": 0.2}}
    elif kind == "eject":
        targets, changes = (favoured,), {"error_rates": {"InternalFailure": 1.0}}
    else:  # pragma: no cover - FAULTS lists every kind
        raise ValueError(kind)
    for endpoint in targets:
        await asyncio.to_thread(emulator.set_faults, endpoint, **changes)
    await asyncio.sleep(hold)
    for endpoint in targets:
        await asyncio.to_thread(emulator.restore, endpoint)


def _favoured(gw: Gateway) -> str:
    targets = [t for t in gw.route("pair").targets if t.ejected_until is None]
    best = min(targets, key=lambda t: t.ewma_ms) if targets else gw.route("pair").targets[0]
    return best.target.endpoint


async def fault_scheduler(
    ledger: Ledger,
    stop: asyncio.Event,
    emulator: EmulatorProcess,
    redis: RedisProcess,
    rng: random.Random,
    gw: Gateway,
    hostile: HostileUpstream,
) -> Counter[str]:
    injected: Counter[str] = Counter()
    # Every kind once (in random order) before any repeats, so a short run sees them all.
    queue = rng.sample(FAULTS, len(FAULTS))
    await asyncio.sleep(0.5)
    while not stop.is_set():
        kind = queue.pop(0) if queue else rng.choice(FAULTS)
        window = FaultWindow(kind, time.monotonic())
        ledger.windows.append(window)
        injected[kind] += 1
        try:
            await inject(kind, emulator, redis, rng, _favoured(gw), hostile)
        finally:
            window.end = time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.3 + rng.random() * 0.5):
                await stop.wait()
    return injected


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


# -- attacks on the sidecar ---------------------------------------------------------

MIB = 1024 * 1024
ATTACKS = ("endless_target", "endless_header", "huge_declared_body", "slowloris", "no_reader")
_ECHO_HEAD = b"POST /endpoints/a/invocations HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"


def run_attack(kind: str, port: int) -> bool:
    """One raw-socket attack on the sidecar; True if it was refused or cut off as it should be."""
    if kind == "endless_target":
        outcome = attacks.flood(port, b"GET /", b"a", max_bytes=8 * MIB, seconds=10)
        return outcome.answer.startswith(b"HTTP/1.1 414 ")
    if kind == "endless_header":
        prefix = b"GET /ping HTTP/1.1\r\nhost: x\r\nx-long: "
        outcome = attacks.flood(port, prefix, b"v", max_bytes=8 * MIB, seconds=10)
        return outcome.answer.startswith(b"HTTP/1.1 431 ")
    if kind == "huge_declared_body":
        outcome = attacks.flood(port, _ECHO_HEAD % 100_000_000, b"", max_bytes=0, seconds=1)
        return outcome.answer.startswith(b"HTTP/1.1 413 ")
    if kind == "slowloris":
        # A head that never ends: a 408 (or a close) once the header timeout passes.
        outcome = attacks.flood(
            port, b"POST /endpoints/a/invocations HTTP/1.1\r\nhost: x\r\n", b"", max_bytes=0
        )
        return outcome.closed and (not outcome.answer or outcome.answer.startswith(b"HTTP/1.1 408"))
    # no_reader: pipelined 1 MiB echo calls, nothing read back; cut off by the write timeout.
    body = b"n" * MIB
    sock, _ = attacks.pipeline_without_reading(
        port, _ECHO_HEAD % len(body) + body, max_requests=20, stall_s=1.0
    )
    return attacks.wait_for_close(sock, SIDECAR_WRITE_TIMEOUT_S + 8)


async def attacker(
    port: int, stop: asyncio.Event, rng: random.Random
) -> tuple[Counter[str], Counter[str]]:
    made: Counter[str] = Counter()
    mishandled: Counter[str] = Counter()
    queue = rng.sample(ATTACKS, len(ATTACKS))  # every kind once before repeats
    while not stop.is_set():
        kind = queue.pop(0) if queue else rng.choice(ATTACKS)
        made[kind] += 1
        if not await asyncio.to_thread(run_attack, kind, port):
            mishandled[kind] += 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.2 + rng.random() * 0.5):
                await stop.wait()
    return made, mishandled


def sidecar_client_connections(port: int) -> int:
    """Client connections a server on ``port`` still holds (from /proc/net/tcp)."""
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                state, inode = fields[3], fields[9]
                # 0A: LISTEN, 06: TIME_WAIT (no socket left); inode 0: not owned.
                if local_port == port and state not in ("0A", "06") and inode != "0":
                    held += 1
    return held


def _sidecar_config(upstream_url: str, redis_url: str) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": upstream_url,
        "credentials": {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        "routes": ROUTES,
        "cache": _cache_settings(redis_url, "sidecar"),
        "pool": {"prewarm": 2, "connect_timeout_ms": 300},
        "sidecar": {
            "write_timeout_s": SIDECAR_WRITE_TIMEOUT_S,
            "header_timeout_s": 2.0,
            "shutdown_grace_s": 2.0,
        },
    }


# -- the run ----------------------------------------------------------------------


async def soak(duration: float, seed: int, hostile_rate: float = HOSTILE_RATE) -> dict[str, Any]:
    rng = random.Random(seed)
    sockets_at_start = socket_fds()
    redis = RedisProcess()
    emulator = await asyncio.to_thread(Emulator.start_subprocess, EMULATOR_CONFIG)
    hostile = await HostileUpstream(emulator.port, seed).start()
    hostile.spell_rate = hostile_rate
    ledger = Ledger()
    stop = asyncio.Event()
    injected: Counter[str] = Counter()
    made: Counter[str] = Counter()
    mishandled: Counter[str] = Counter()
    ejections = 0
    upstream: dict[str, Any] = {}
    sidecar: SidecarProcess | None = None
    sidecar_held = 0
    rss_start = rss_peak = 0
    try:
        await asyncio.to_thread(redis.start)
        sidecar = await asyncio.to_thread(
            Sidecar.start_subprocess,
            _sidecar_config(hostile.url, redis.url),
            "127.0.0.1:0",
            ("--log-level", "CRITICAL"),
        )
        library_gw = _gateway(hostile.url, redis.url)
        async with (
            library_gw,
            httpx.AsyncClient(
                base_url=sidecar.url,
                timeout=CALL_TIMEOUT_S + HANG_SLACK_S + 1,
                limits=httpx.Limits(max_connections=8),
            ) as http,
        ):
            rss_start = attacks.rss(sidecar.pid)
            tasks = [
                asyncio.create_task(
                    library_caller(library_gw, ledger, stop, random.Random(seed + n))
                )
                for n in range(6)
            ] + [
                asyncio.create_task(
                    sidecar_caller(http, ledger, stop, random.Random(seed + 100 + n))
                )
                for n in range(3)
            ]
            scheduler = asyncio.create_task(
                fault_scheduler(ledger, stop, emulator, redis, rng, library_gw, hostile)
            )
            attack = asyncio.create_task(attacker(sidecar.port, stop, random.Random(seed + 7)))
            await asyncio.sleep(duration)
            stop.set()
            injected = await scheduler
            await asyncio.gather(*tasks)
            made, mishandled = await attack
            for target in library_gw.route("pair").targets:
                ejections += target.ejections
        # Every client has gone: the sidecar must let go of every connection.
        for _ in range(100):
            sidecar_held = sidecar_client_connections(sidecar.port)
            if not sidecar_held:
                break
            await asyncio.sleep(0.05)
        rss_peak = attacks.peak_rss(sidecar.pid)
        stats = await asyncio.to_thread(emulator.stats)
        upstream = {
            "calls": stats.count(),
            "errors": dict(sorted(Counter(code for (_, code) in stats.errors.elements()).items())),
            "resets": sum(stats.resets.values()),
            "stalls": sum(stats.stalls.values()),
        }
    finally:
        if sidecar is not None:
            await asyncio.to_thread(sidecar.stop)
        await hostile.close()
        await asyncio.to_thread(emulator.stop)
        await asyncio.to_thread(redis.cleanup)
    # Sockets close asynchronously; give the loop a moment before counting.
    leaked = socket_fds() - sockets_at_start
    for _ in range(200):
        if leaked <= 0:
            break
        await asyncio.sleep(0.01)
        leaked = socket_fds() - sockets_at_start
    succeeded = sum(1 for outcome in ledger.outcomes.values() if outcome == "ok")
    phases: dict[str, dict[str, float]] = defaultdict(dict)
    for (via, phase), values in sorted(ledger.latencies.items()):
        phases[phase][via] = round(p99(values) * 1000, 2)
    bad_outcomes = ledger.hung + sum(ledger.wrong.values()) + ledger.incomplete
    return {
        "duration_s": duration,
        "calls": ledger.started,
        "succeeded": succeeded,
        "failed": sum(ledger.failed.values()) - bad_outcomes,
        "failed_by_cause": dict(sorted(ledger.failed.items())),
        "hung": ledger.hung,
        "lost": ledger.started - len(ledger.outcomes),
        "wrong": sum(ledger.wrong.values()),
        "wrong_by_caller": dict(ledger.wrong),
        "wrong_examples": ledger.wrong_examples,
        "incomplete": ledger.incomplete,
        "leaked_connections": max(leaked, 0) + sidecar_held,
        "leaked_here": max(leaked, 0),
        "sidecar_held_connections": sidecar_held,
        "unexpected": sum(ledger.unexpected.values()),
        "unexpected_by_cause": dict(ledger.unexpected),
        "faults_injected": dict(sorted(injected.items())),
        "hostile_misbehaved": dict(sorted(hostile.done.items())),
        "attacks": dict(sorted(made.items())),
        "attacks_mishandled": dict(sorted(mishandled.items())),
        "sidecar_rss_start_mib": round(rss_start / MIB, 1),
        "sidecar_peak_rss_mib": round(rss_peak / MIB, 1),
        "ejections": ejections,
        "emulator_saw": upstream,
        "p99_ms_by_phase": dict(phases),
    }


# -- case: a misbehaving Redis ------------------------------------------------------

BAD_REDIS_MAX_IN_FLIGHT = 8
# The circuit trips later and retries sooner than in the main case: the point
# here is to keep asking the bad Redis.
BAD_REDIS_CIRCUIT: dict[str, Any] = {"circuit_failures": 20, "circuit_reset_s": 0.2}
BAD_REDIS_MUST_BE_ZERO = ("hung", "lost", "wrong", "incomplete", "leaked_connections", "unexpected")


async def _cycle_redis_modes(
    bad: MisbehavingRedis, stop: asyncio.Event, rng: random.Random
) -> list[str]:
    """Every mode (and ``mixed``) in random order, then at random, for 0.3-0.8 s each."""
    modes = (*BAD_REDIS_MODES, "mixed")
    queue, cycled = rng.sample(modes, len(modes)), []
    while not stop.is_set():
        bad.mode = queue.pop(0) if queue else rng.choice(modes)
        cycled.append(bad.mode)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.3 + rng.random() * 0.5):
                await stop.wait()
    bad.mode = "ok"
    return cycled


async def misbehaving_redis_case(duration: float, seed: int) -> dict[str, Any]:
    """Library and sidecar calls for ``duration`` s while Redis answers wrongly; the counts."""
    rng = random.Random(seed)
    sockets_at_start = socket_fds()
    bad = await MisbehavingRedis(seed=seed).start()
    emulator = await asyncio.to_thread(Emulator.start_subprocess, EMULATOR_CONFIG)
    ledger, stop = Ledger(), asyncio.Event()
    sidecar: SidecarProcess | None = None
    sidecar_held = redis_held = 0
    cycled: list[str] = []
    try:
        config = _sidecar_config(emulator.url, bad.url)
        config["sidecar"]["max_in_flight"] = BAD_REDIS_MAX_IN_FLIGHT
        config["cache"].update(BAD_REDIS_CIRCUIT)
        library = Gateway(
            "us-east-1",
            endpoint_url=emulator.url,
            credentials=(ACCESS_KEY, SECRET_KEY),
            routes=ROUTES,
            cache={**_cache_settings(bad.url, "library"), **BAD_REDIS_CIRCUIT},
            pool={"prewarm": 2, "connect_timeout_ms": 300},
        )
        sidecar = await asyncio.to_thread(
            Sidecar.start_subprocess, config, "127.0.0.1:0", ("--log-level", "CRITICAL")
        )
        async with (
            library as gw,
            httpx.AsyncClient(
                base_url=sidecar.url,
                timeout=CALL_TIMEOUT_S + HANG_SLACK_S + 1,
                limits=httpx.Limits(max_connections=8),
            ) as http,
        ):
            callers = [
                asyncio.create_task(library_caller(gw, ledger, stop, random.Random(seed + n)))
                for n in range(4)
            ] + [
                asyncio.create_task(
                    sidecar_caller(http, ledger, stop, random.Random(seed + 50 + n))
                )
                for n in range(3)
            ]
            cycler = asyncio.create_task(_cycle_redis_modes(bad, stop, rng))
            await asyncio.sleep(duration)
            stop.set()
            await asyncio.gather(*callers)
            cycled = await cycler
        for _ in range(100):
            sidecar_held = sidecar_client_connections(sidecar.port)
            if not sidecar_held:
                break
            await asyncio.sleep(0.05)
    finally:
        if sidecar is not None:
            await asyncio.to_thread(sidecar.stop)
        await asyncio.to_thread(emulator.stop)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):  # every cache has closed its Redis connections
                await bad.until(lambda: bad.connections == 0)
        redis_held = bad.connections
        await bad.close()
    leaked = socket_fds() - sockets_at_start
    for _ in range(200):
        if leaked <= 0:
            break
        await asyncio.sleep(0.01)
        leaked = socket_fds() - sockets_at_start
    succeeded = sum(1 for outcome in ledger.outcomes.values() if outcome == "ok")
    bad_outcomes = ledger.hung + sum(ledger.wrong.values()) + ledger.incomplete
    return {
        "duration_s": duration,
        "calls": ledger.started,
        "succeeded": succeeded,
        "failed": sum(ledger.failed.values()) - bad_outcomes,
        "failed_by_cause": dict(sorted(ledger.failed.items())),
        "hung": ledger.hung,
        "lost": ledger.started - len(ledger.outcomes),
        "wrong": sum(ledger.wrong.values()),
        "wrong_examples": ledger.wrong_examples,
        "incomplete": ledger.incomplete,
        "leaked_connections": max(leaked, 0) + sidecar_held + redis_held,
        "unexpected": sum(ledger.unexpected.values()),
        "modes_cycled": len(cycled),
        "redis_misbehaved": dict(sorted(bad.done.items())),
        "redis_commands": dict(sorted(bad.commands.items())),
    }


def report_misbehaving_redis(case: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"misbehaving Redis: {case['duration_s']:g} s, {case['modes_cycled']} spells, "
            f"wrong replies sent: {case['redis_misbehaved']}",
            f"  calls made:      {case['calls']} (succeeded {case['succeeded']})",
            f"  failed:          {case['failed']} {case['failed_by_cause'] or ''}",
            f"  hung:            {case['hung']}",
            f"  lost:            {case['lost']}",
            f"  wrong answers:   {case['wrong']} {case['wrong_examples'] or ''}",
            f"  incomplete streams: {case['incomplete']}",
            f"  leaked connections: {case['leaked_connections']}",
            f"  unexpected:      {case['unexpected']}",
        ]
    )


def report(summary: dict[str, Any]) -> str:
    lines = [
        f"soak: {summary['duration_s']:g} s, faults injected: {summary['faults_injected']}",
        f"  calls made:      {summary['calls']}",
        f"  succeeded:       {summary['succeeded']}",
        f"  failed:          {summary['failed']}",
    ]
    lines += [f"    {cause}: {n}" for cause, n in summary["failed_by_cause"].items()]
    lines += [
        f"  hung:            {summary['hung']}",
        f"  lost:            {summary['lost']}",
        f"  wrong answers:   {summary['wrong']} {summary['wrong_by_caller'] or ''}",
        *(f"    e.g. {example}" for example in summary["wrong_examples"]),
        f"  incomplete streams: {summary['incomplete']}",
        f"  leaked connections: {summary['leaked_connections']} "
        f"(here {summary['leaked_here']}, held by the sidecar "
        f"{summary['sidecar_held_connections']})",
        f"  unexpected:      {summary['unexpected']} {summary['unexpected_by_cause'] or ''}",
        f"  hostile upstream misbehaved: {summary['hostile_misbehaved']}",
        f"  attacks on the sidecar: {summary['attacks']}",
        f"  attacks mishandled: {sum(summary['attacks_mishandled'].values())} "
        f"{summary['attacks_mishandled'] or ''}",
        f"  sidecar RSS:     {summary['sidecar_rss_start_mib']} MiB at start, "
        f"peak {summary['sidecar_peak_rss_mib']} MiB",
        f"  target ejections: {summary['ejections']}",
        f"  emulator saw:    {summary['emulator_saw']}",
        "  p99 latency (ms) by phase:",
    ]
    for phase, values in summary["p99_ms_by_phase"].items():
        parts = ", ".join(f"{via} {ms}" for via, ms in values.items())
        lines.append(f"    {phase:<14} {parts}")
    return "\n".join(lines)


# -- the case of a hanging target under hedging ------------------------------------------

# One origin, a pool of 8, a tenth of the traffic to a target that never answers;
# the route hedges within a budget of 30%, then the default 5%.
HANGING_POOL_SIZE = 8
HANGING_BUDGETS = (0.3, 0.05)
HANGING_CALLERS = 8
HANGING_EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 29,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {
        "good": {"latency": {"base_ms": 1.0, "jitter_ms": 0.5}},
        # Held for an hour: never answered within the run.
        "hang": {"faults": {"stall_rate": 1.0, "stall_ms": 3_600_000}},
    },
}


@dataclass
class HangingTally:
    started: int = 0
    succeeded: int = 0
    # A call to the hanging target that no hedge rescued runs into its deadline:
    # the only failure this case may produce (until the target is ejected).
    timed_out: int = 0
    unexpected: Counter[str] = field(default_factory=Counter)
    hung: int = 0
    wrong: int = 0
    latencies: list[float] = field(default_factory=list)


def _hanging_routes(budget: float) -> dict[str, Any]:
    return {
        "half": {
            "targets": [{"endpoint": "hang", "weight": 1}, {"endpoint": "good", "weight": 9}],
            "hedge": {"enabled": True, "max_extra_load": budget, "min_delay_ms": 5},
            # As the main soak's route: an ejected target is probed again within seconds.
            "retry": ROUTES["pair"]["retry"],
            "ejection": ROUTES["pair"]["ejection"],
        }
    }


async def _hanging_caller(
    gw: Gateway, tally: HangingTally, stop: asyncio.Event, rng: random.Random
) -> None:
    while not stop.is_set():
        tally.started += 1
        body = b"half-%d-%d" % (id(rng), tally.started)
        start = time.monotonic()
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S + HANG_SLACK_S):
                result = await gw.invoke("half", body, timeout=CALL_TIMEOUT_S)
        except errors.DeadlineExceeded:
            tally.timed_out += 1
        except TimeoutError as error:
            if isinstance(error, errors.GatewayError):  # a PoolTimeout: the pool filled up
                tally.unexpected[type(error).__name__] += 1
            else:
                tally.hung += 1
        except Exception as error:
            tally.unexpected[type(error).__name__] += 1
        else:
            if result.body == body:
                tally.succeeded += 1
                tally.latencies.append(time.monotonic() - start)
            else:
                tally.wrong += 1
        await asyncio.sleep(rng.random() * 0.004)


async def _hanging_phase(url: str, budget: float, duration: float, seed: int) -> dict[str, Any]:
    tally = HangingTally()
    stop = asyncio.Event()
    gw = Gateway(
        "us-east-1",
        endpoint_url=url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        routes=_hanging_routes(budget),
        # A pool wait shorter than the call's deadline: a full pool shows as PoolTimeout.
        pool={
            "max_connections": HANGING_POOL_SIZE,
            "prewarm": 2,
            "connect_timeout_ms": 300,
            "pool_timeout_ms": 200,
        },
    )
    async with gw:
        callers = [
            asyncio.create_task(_hanging_caller(gw, tally, stop, random.Random(seed + n)))
            for n in range(HANGING_CALLERS)
        ]
        await asyncio.sleep(duration)
        stop.set()
        await asyncio.gather(*callers)
        targets = {state.target.endpoint: state for state in gw.route("half").targets}
        policy = gw.route("half").hedge_policy
        open_at_end = gw.transport.open_connections()
    recorded = tally.succeeded + tally.timed_out + tally.hung + tally.wrong
    return {
        "hedge_budget": budget,
        "calls": tally.started,
        "succeeded": tally.succeeded,
        "timed_out": tally.timed_out,
        "unexpected": dict(tally.unexpected),
        "hung": tally.hung,
        "lost": tally.started - recorded - sum(tally.unexpected.values()),
        "wrong": tally.wrong,
        "hedges_fired": policy.fired if policy is not None else 0,
        "hanging_ejections": targets["hang"].ejections,
        "healthy_ejections": targets["good"].ejections,
        "open_connections_at_end": open_at_end,
        "p99_ms": round(p99(tally.latencies) * 1000, 2) if tally.latencies else None,
    }


async def hanging_hedge_soak(duration: float, seed: int) -> dict[str, Any]:
    """The route of a hanging and a healthy target, hedged: it must keep answering."""
    sockets_at_start = socket_fds()
    emulator = await asyncio.to_thread(Emulator.start_subprocess, HANGING_EMULATOR_CONFIG)
    try:
        phases = [
            await _hanging_phase(emulator.url, budget, duration / len(HANGING_BUDGETS), seed)
            for budget in HANGING_BUDGETS
        ]
    finally:
        await asyncio.to_thread(emulator.stop)
    leaked = socket_fds() - sockets_at_start
    for _ in range(200):
        if leaked <= 0:
            break
        await asyncio.sleep(0.01)
        leaked = socket_fds() - sockets_at_start
    totals = {
        key: sum(phase[key] for phase in phases)
        for key in ("calls", "succeeded", "timed_out", "hung", "lost", "wrong")
    }
    return {
        "case": "hanging-hedge",
        "duration_s": duration,
        **totals,
        "unexpected": sum(sum(phase["unexpected"].values()) for phase in phases),
        "healthy_ejections": sum(phase["healthy_ejections"] for phase in phases),
        "leaked_connections": max(leaked, 0),
        "phases": phases,
    }


def report_hanging(summary: dict[str, Any]) -> str:
    lines = [
        f"soak, hanging target under hedging: {summary['duration_s']:g} s, "
        f"pool of {HANGING_POOL_SIZE}, a tenth of the calls to a target that never answers",
    ]
    for phase in summary["phases"]:
        lines += [
            f"  hedge budget {phase['hedge_budget']:.0%}: calls {phase['calls']}, "
            f"succeeded {phase['succeeded']}, timed out {phase['timed_out']}, "
            f"unexpected {phase['unexpected'] or 0}, hung {phase['hung']}, "
            f"lost {phase['lost']}, wrong {phase['wrong']}",
            f"    hedges {phase['hedges_fired']}, ejections: hanging "
            f"{phase['hanging_ejections']}, healthy {phase['healthy_ejections']}; "
            f"open connections at the end {phase['open_connections_at_end']}; "
            f"p99 {phase['p99_ms']} ms",
        ]
    lines.append(
        f"  hung {summary['hung']}, lost {summary['lost']}, wrong {summary['wrong']}, "
        f"leaked {summary['leaked_connections']}, unexpected {summary['unexpected']}, "
        f"healthy target ejected {summary['healthy_ejections']} times"
    )
    return "\n".join(lines)


HANGING_MUST_BE_ZERO = (
    "hung",
    "lost",
    "wrong",
    "leaked_connections",
    "unexpected",
    "healthy_ejections",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--quick", action="store_true", help="a short run (12 s) for CI")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="also print the summary as JSON")
    parser.add_argument(
        "--hostile-rate",
        type=float,
        default=HOSTILE_RATE,
        help=f"share of exchanges spoilt in hostile spells (default {HOSTILE_RATE})",
    )
    parser.add_argument(
        "--case",
        choices=("full", "hanging-hedge"),
        default="full",
        help="full: the whole soak (default); hanging-hedge: a hanging target under hedging only",
    )
    args = parser.parse_args(argv)
    duration = 12.0 if args.quick else args.duration
    if duration <= 0:
        parser.error("--duration must be > 0")
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    if not 0 <= args.hostile_rate <= 1:
        parser.error("--hostile-rate must be in [0, 1]")
    if args.case == "hanging-hedge":
        return _run_hanging(duration, args.seed, args.json)
    summary = asyncio.run(soak(duration, args.seed, args.hostile_rate))
    print(report(summary), flush=True)
    bad_redis = asyncio.run(misbehaving_redis_case(max(4.0, duration / 4), args.seed))
    summary["misbehaving_redis"] = bad_redis
    print(report_misbehaving_redis(bad_redis), flush=True)
    if args.json:
        print(orjson.dumps(summary).decode(), flush=True)
    bad = any(
        summary[key]
        for key in (
            "hung",
            "lost",
            "wrong",
            "incomplete",
            "leaked_connections",
            "unexpected",
            "attacks_mishandled",
        )
    )
    bad = bad or any(bad_redis[key] for key in BAD_REDIS_MUST_BE_ZERO)
    return 1 if bad else 0


def _run_hanging(duration: float, seed: int, as_json: bool) -> int:
    summary = asyncio.run(hanging_hedge_soak(duration, seed))
    print(report_hanging(summary), flush=True)
    if as_json:
        print(orjson.dumps(summary).decode(), flush=True)
    return 1 if any(summary[key] for key in HANGING_MUST_BE_ZERO) else 0


if __name__ == "__main__":
    sys.exit(main())
