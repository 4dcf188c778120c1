"""``--workers N``: one port, N processes, one /metrics; a killed worker comes back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway._server import processes
from gateway.emulator import Emulator
from gateway.sidecar import SidecarProcess
from gateway.sidecar._metrics import merge_expositions
from gateway.sidecar._workers import WorkerContext, available_cores, reserve_address, retire


def _config(emulator: Emulator, **sidecar: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"shutdown_grace_s": 10, "drain_s": 0, **sidecar},
    }


def _children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}


def _requests_total(exposition: str) -> float:
    for family in text_string_to_metric_families(exposition):
        if family.name == "sagemaker_gateway_sidecar_requests":
            return sum(
                s.value
                for s in family.samples
                if s.name == "sagemaker_gateway_sidecar_requests_total"
            )
    return 0.0


@pytest.fixture
def two_workers(emulator: Emulator) -> Iterator[SidecarProcess]:
    process = SidecarProcess.start(
        _config(emulator), "127.0.0.1:0", ("--workers", "2", "--log-level", "WARNING"), None
    )
    try:
        yield process
    finally:
        process.stop()


async def _calls_on_fresh_connections(url: str, count: int) -> list[int]:
    """``count`` calls, each on a new connection, so the kernel picks a worker each time."""

    async def one(index: int) -> int:
        async with httpx.AsyncClient(base_url=url) as http:
            answer = await http.post("/endpoints/echo/invocations", content=b"%d" % index)
            return answer.status_code

    statuses: list[int] = []
    for start in range(0, count, 8):
        statuses += await asyncio.gather(*(one(i) for i in range(start, min(start + 8, count))))
    return statuses


async def test_two_workers_serve_one_port_and_one_scrape_adds_them_up(
    emulator: Emulator, two_workers: SidecarProcess
) -> None:
    workers = _children(two_workers.pid)
    assert len(workers) == 2
    statuses = await _calls_on_fresh_connections(two_workers.url, 60)
    assert statuses == [200] * 60
    # Each scrape lands on one worker; each must report all 60 calls (60
    # calls spread by the kernel over two workers: one worker's own count
    # alone would fall short).
    async with httpx.AsyncClient(base_url=two_workers.url) as http:
        for _ in range(4):
            scrape = await http.get("/metrics", headers={"connection": "close"})
            assert scrape.status_code == 200
            assert _requests_total(scrape.text) == 60
    assert emulator.stats.count(endpoint="echo") == 60


def _start_logging_to(log: Path, config: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gateway", "sidecar", "--config", str(config)]
    command += ["--listen", "127.0.0.1:0", "--workers", "2", "--log-level", "WARNING"]
    with log.open("wb") as stderr:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, preexec_fn=processes.die_with_parent
        )


async def test_a_killed_worker_is_replaced_and_logged_once(
    emulator: Emulator, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps(_config(emulator)))
    log = tmp_path / "stderr.log"
    process = await asyncio.to_thread(_start_logging_to, log, config)
    try:
        url = await asyncio.to_thread(
            processes.read_ready_line, process, "sidecar listening on ", "sidecar", 60
        )
        before = _children(process.pid)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        for _ in range(300):
            now = _children(process.pid)
            if len(now) == 2 and victim not in now:
                break
            await asyncio.sleep(0.05)
        assert victim not in now and len(now) == 2, (before, now)
        # The replacement serves: once it is ready, calls on fresh connections
        # (the kernel picks a worker for each) all succeed.
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(200):
                if (await http.get("/readyz", headers={"connection": "close"})).status_code == 200:
                    break
                await asyncio.sleep(0.05)
        assert await _calls_on_fresh_connections(url, 24) == [200] * 24
    finally:
        code = await asyncio.to_thread(processes.terminate, process, 30)
    assert code == 0
    restarts = [
        json.loads(line) for line in log.read_text().splitlines() if "worker restarted" in line
    ]
    assert len(restarts) == 1, restarts
    assert restarts[0]["pid"] == victim and restarts[0]["exit_code"] == -signal.SIGKILL


async def test_sigterm_under_load_with_workers_loses_no_accepted_call(
    emulator: Emulator,
) -> None:
    emulator.set_latency("slow", base_ms=100.0)
    process = await asyncio.to_thread(
        SidecarProcess.start,
        _config(emulator, drain_s=1.0),
        "127.0.0.1:0",
        ("--workers", "2", "--log-level", "WARNING"),
        None,
    )
    outcomes: Counter[str] = Counter()
    try:
        stop = asyncio.Event()
        clients = [
            asyncio.create_task(_client_loop(process.port, outcomes, stop)) for _ in range(64)
        ]
        for _ in range(500):
            if emulator.stats.count(endpoint="slow") >= 64:
                break
            await asyncio.sleep(0.01)
        served_before_sigterm = outcomes["ok"]
        process.terminate()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 60)
        code = await asyncio.to_thread(process.wait, 60)
    finally:
        await asyncio.to_thread(process.stop)
    assert code == 0
    assert outcomes["failed"] == 0, outcomes
    # Calls kept arriving and were served during the one-second drain.
    assert outcomes["ok"] >= served_before_sigterm + 64, outcomes
    assert emulator.stats.count(endpoint="slow") == outcomes["ok"], outcomes


async def _client_loop(port: int, outcomes: Counter[str], stop: asyncio.Event) -> None:
    """Closed loop of calls on fresh connections until the port refuses."""
    request = (
        b"POST /endpoints/slow/invocations HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
        b"connection: close\r\n\r\nhello"
    )
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            outcomes["refused"] += 1
            return
        except ConnectionResetError:
            # Sat in a listener's backlog as it closed: never accepted.
            outcomes["unanswered"] += 1
            if stop.is_set():
                return
            continue
        try:
            writer.write(request)
            answer = await reader.read()
        except ConnectionError:
            answer = b""
        finally:
            writer.close()
        if not answer:
            # Closed with nothing sent: sat in a backlog when the listener
            # closed, never reached the upstream (checked against the emulator).
            outcomes["unanswered"] += 1
        elif answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello"):
            outcomes["ok"] += 1
        else:
            outcomes["failed"] += 1
        if stop.is_set() and not answer:
            return


def test_a_taken_port_is_one_line_and_a_non_zero_exit() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        command = [sys.executable, "-m", "gateway", "sidecar", "--listen", f"127.0.0.1:{port}"]
        command += ["--upstream", "http://127.0.0.1:1", "--region", "us-east-1"]
        for workers in ("1", "2"):
            result = subprocess.run(
                [*command, "--workers", workers, "--log-level", "ERROR"],
                capture_output=True,
                timeout=60,
                check=False,
                env={**os.environ, "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},
            )
            stderr = result.stderr.decode()
            assert result.returncode == 2, stderr
            assert stderr == f"sidecar: cannot listen on 127.0.0.1:{port}: address already in use\n"
    finally:
        holder.close()


def test_a_second_multi_worker_sidecar_cannot_join_the_first() -> None:
    # The first supervisor's socket is in the SO_REUSEPORT group; a second
    # one (same user, same option) must still be refused, not share the port.
    first = reserve_address("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(Exception, match="address already in use"):
            reserve_address("127.0.0.1", port)
    finally:
        first.close()


def test_missing_credentials_and_bad_address_are_one_line(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") and not key.startswith("SAGEMAKER_GATEWAY")
    }
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    base = [sys.executable, "-m", "gateway", "sidecar", "--upstream", "http://127.0.0.1:1"]
    base += ["--region", "us-east-1", "--log-level", "ERROR"]
    for extra, message in (
        (["--listen", "127.0.0.1:0"], "could not load AWS credentials"),
        (["--listen", "127.0.0.1:0", "--workers", "2"], "could not load AWS credentials"),
        (["--listen", "192.0.2.1:0"], "cannot listen on 192.0.2.1:0"),
    ):
        run_env = dict(env)
        if "credentials" not in message:
            # Credentials present; an address off loopback needs inbound auth.
            run_env.update(AWS_ACCESS_KEY_ID="AK", AWS_SECRET_ACCESS_KEY="SK")
            run_env["SAGEMAKER_GATEWAY__SIDECAR__AUTH__MODE"] = "bearer"
            run_env["SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN"] = "t" * 24
        result = subprocess.run(
            [*base, *extra], capture_output=True, timeout=60, check=False, env=run_env
        )
        lines = result.stderr.decode().splitlines()
        assert result.returncode == 2, lines
        assert len(lines) == 1 and message in lines[0], lines


def test_merging_expositions_adds_every_family_sample_by_sample() -> None:
    first = (
        "# HELP calls_total Calls.\n# TYPE calls_total counter\n"
        'calls_total{route="a"} 3.0\ncalls_total{route="b"} 1.0\n'
        "# HELP busy In flight.\n# TYPE busy gauge\nbusy 2.0\n"
        "# HELP t Latency.\n# TYPE t histogram\n"
        't_bucket{le="0.1"} 1.0\nt_bucket{le="+Inf"} 2.0\nt_count 2.0\nt_sum 0.3\n'
    )
    second = (
        "# HELP calls_total Calls.\n# TYPE calls_total counter\n"
        'calls_total{route="a"} 4.0\ncalls_total{route="c"} 5.0\n'
        "# HELP busy In flight.\n# TYPE busy gauge\nbusy 1.0\n"
        "# HELP t Latency.\n# TYPE t histogram\n"
        't_bucket{le="0.1"} 0.0\nt_bucket{le="+Inf"} 1.0\nt_count 1.0\nt_sum 0.5\n'
    )
    merged = merge_expositions([first, second]).decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(merged)
        for sample in family.samples
    }
    assert samples[("calls_total", (("route", "a"),))] == 7
    assert samples[("calls_total", (("route", "b"),))] == 1
    assert samples[("calls_total", (("route", "c"),))] == 5
    assert samples[("busy", ())] == 3
    assert samples[("t_bucket", (("le", "+Inf"),))] == 3
    assert samples[("t_count", ())] == 3
    assert samples[("t_sum", ())] == pytest.approx(0.8)


def test_auto_workers_follow_affinity_and_the_container_cpu_limit(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    unlimited = tmp_path / "unlimited"
    unlimited.write_text("max 100000\n")
    assert available_cores(unlimited) == affinity
    one_and_a_half = tmp_path / "limited"
    one_and_a_half.write_text("150000 100000\n")
    assert available_cores(one_and_a_half) == min(affinity, 2)
    tiny = tmp_path / "tiny"
    tiny.write_text("10000 100000\n")
    assert available_cores(tiny) == 1
    assert available_cores(tmp_path / "absent") == affinity


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (a Unix socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="gw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_killed_supervisors_directory_is_removed_by_the_next_start(
    emulator: Emulator, short_tmp: Path
) -> None:
    tmp_path = short_tmp
    environment = {"TMPDIR": str(tmp_path)}

    def supervisor_directories() -> list[Path]:
        return sorted(tmp_path.glob("sagemaker-gateway-workers-*"))

    first = SidecarProcess.start(
        _config(emulator),
        "127.0.0.1:0",
        ("--workers", "2", "--log-level", "WARNING"),
        environment,
    )
    try:
        workers = _children(first.process.pid)
        (orphan,) = supervisor_directories()
        assert orphan.name.startswith(f"sagemaker-gateway-workers-{first.process.pid}-")
        first.process.kill()  # SIGKILL: no chance to clean up
        first.process.wait(10)
        for pid in workers:  # the workers die with their supervisor
            _wait_gone(pid)
        assert supervisor_directories() == [orphan]  # left behind
    finally:
        first.stop()
    second = SidecarProcess.start(
        _config(emulator),
        "127.0.0.1:0",
        ("--workers", "2", "--log-level", "WARNING"),
        environment,
    )
    try:
        (own,) = supervisor_directories()
        # Before: the killed supervisor's directory stayed for good, next to this one.
        assert own != orphan and not orphan.exists()
    finally:
        second.stop()
    assert supervisor_directories() == []


def _wait_gone(pid: int) -> None:
    for _ in range(500):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # A zombie until its parent (init, after the supervisor died) reaps it.
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still running")


async def test_a_stopped_worker_is_killed_and_replaced(emulator: Emulator, tmp_path: Path) -> None:
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps(_config(emulator, worker_liveness_s=1.5)))
    log = tmp_path / "stderr.log"
    process = await asyncio.to_thread(_start_logging_to, log, config)
    try:
        url = await asyncio.to_thread(
            processes.read_ready_line, process, "sidecar listening on ", "sidecar", 60
        )
        before = _children(process.pid)
        victim = min(before)
        # SIGSTOP: alive to the kernel, its listener still takes a share of new
        # connections, and nothing answers them. Before: kept as it was, forever.
        os.kill(victim, signal.SIGSTOP)
        for _ in range(400):
            now = _children(process.pid)
            if len(now) == 2 and victim not in now:
                break
            await asyncio.sleep(0.05)
        assert victim not in now and len(now) == 2, (before, now)
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(200):
                if (await http.get("/readyz", headers={"connection": "close"})).status_code == 200:
                    break
                await asyncio.sleep(0.05)
        assert await _calls_on_fresh_connections(url, 16) == [200] * 16
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
        code = await asyncio.to_thread(processes.terminate, process, 30)
    assert code == 0
    restarts = [
        json.loads(line) for line in log.read_text().splitlines() if "worker restarted" in line
    ]
    assert [(r["pid"], r["reason"], r["exit_code"]) for r in restarts] == [
        (victim, "unresponsive", -signal.SIGKILL)
    ]


def _counter_text(value: int) -> bytes:
    return (
        "# HELP sagemaker_gateway_sidecar_requests_total Requests.\n"
        "# TYPE sagemaker_gateway_sidecar_requests_total counter\n"
        f'sagemaker_gateway_sidecar_requests_total{{operation="invoke"}} {value}.0\n'
        "# HELP in_flight In flight.\n# TYPE in_flight gauge\nin_flight 1.0\n"
    ).encode()


async def test_summed_counters_never_go_down_when_a_worker_dies_mid_scrape(
    tmp_path: Path,
) -> None:
    """The issue's 46 -> 24 -> 48: a worker killed between two scrapes (or while it
    answers one) dropped out of the sum until the supervisor had kept its counts.
    Whoever answers, whenever the supervisor retires the dead worker, the sum holds."""
    counts = {0: 24, 1: 22}
    scraper = WorkerContext(0, str(tmp_path), pid=1000)
    victim = WorkerContext(1, str(tmp_path), pid=1001)
    await scraper.start(lambda: _counter_text(counts[0]))
    await victim.start(lambda: _counter_text(counts[1]))
    seen: list[float] = []

    async def scrape() -> None:
        seen.append(_requests_total((await scraper.exposition()).decode()))

    try:
        await scrape()  # 46, and each worker's snapshot as of it
        counts[1] = 24  # counted after the last scrape it answered: may be lost, never more
        # Killed: its socket file stays, nobody answers on it.
        assert victim._server is not None
        victim._server.close()
        await victim._server.wait_closed()
        await scrape()  # before the supervisor noticed
        # A sibling killed while writing its answer: cut mid-line.
        cut = tmp_path / "worker-2.sock"
        text = _counter_text(7)

        async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"# worker 2-1002\n" + text[: len(text) - 20])
            writer.close()

        server = await asyncio.start_unix_server(half, path=str(cut))
        await scrape()
        server.close()
        await server.wait_closed()
        cut.unlink()
        counts[0] = 26
        # The supervisor keeps the dead worker's last counts; a scrape may read its
        # snapshot and the retired file at any point of that.
        snapshot = (tmp_path / "snapshot-1-1001.prom").read_bytes()
        retire(tmp_path, 1, 1001)
        (tmp_path / "snapshot-1-1001.prom").write_bytes(snapshot)  # unlink not yet done
        await scrape()
        (tmp_path / "snapshot-1-1001.prom").unlink()
        await scrape()
        retire(tmp_path, 1, 1001)  # twice: still once
        await scrape()
    finally:
        await scraper.close()
        with contextlib.suppress(FileNotFoundError):
            (tmp_path / "worker-1.sock").unlink()
    assert seen == [46, 46, 46, 48, 48, 48]
