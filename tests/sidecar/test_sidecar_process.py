"""The sidecar as a command: ready line, config errors, SIGTERM during load."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from gateway.emulator import Emulator
from gateway.sidecar import Sidecar, SidecarProcess

REQUEST = (
    b"POST /endpoints/slow/invocations HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    b"content-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
)


def _config(emulator: Emulator, **sidecar: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"shutdown_grace_s": 10, **sidecar},
    }


async def _one_call(port: int) -> str:
    """'ok', 'refused' (never accepted), 'unanswered' (no byte back) or 'failed'."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return "refused"
    try:
        writer.write(REQUEST)
        answer = await reader.read()
    except ConnectionError:
        answer = b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    if not answer:
        # Reset or closed with nothing sent back: the listener closed while
        # the connection sat in its backlog. Never reached the upstream (the
        # test checks that against the emulator's count).
        return "unanswered"
    head, _, body = answer.partition(b"\r\n\r\n")
    return "ok" if head.startswith(b"HTTP/1.1 200") and body == b"hello" else "failed"


async def _client_loop(port: int, outcomes: Counter[str], stop: asyncio.Event) -> None:
    while True:
        outcome = await _one_call(port)
        outcomes[outcome] += 1
        if outcome == "refused" or (stop.is_set() and outcome != "ok"):
            return


async def test_sigterm_during_load_loses_no_accepted_call(emulator: Emulator) -> None:
    emulator.set_latency("slow", base_ms=200.0)
    process = await asyncio.to_thread(
        SidecarProcess.start, _config(emulator), "127.0.0.1:0", ("--log-level", "WARNING"), None
    )
    try:
        outcomes: Counter[str] = Counter()
        stop = asyncio.Event()
        clients = [
            asyncio.create_task(_client_loop(process.port, outcomes, stop)) for _ in range(24)
        ]
        # Wait until a full wave of calls is in flight upstream, then SIGTERM.
        for _ in range(500):
            if emulator.stats.count(endpoint="slow") >= 24:
                break
            await asyncio.sleep(0.01)
        process.terminate()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 30)
        code = await asyncio.to_thread(process.wait, 30)
    finally:
        await asyncio.to_thread(process.stop)
    assert code == 0
    assert outcomes["failed"] == 0, outcomes
    assert outcomes["ok"] >= 24, outcomes
    assert outcomes["refused"] >= 1, outcomes
    # Every call that reached the upstream was answered to its client.
    assert emulator.stats.count(endpoint="slow") == outcomes["ok"], outcomes


async def test_ready_line_and_ping_over_the_command(emulator: Emulator) -> None:
    import httpx

    process = await asyncio.to_thread(
        Sidecar.start_subprocess, _config(emulator), "127.0.0.1:0", ("--log-level", "WARNING")
    )
    try:
        assert process.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=process.url) as http:
            assert (await http.get("/ping")).status_code == 200
            echoed = await http.post("/endpoints/echo/invocations", content=b"via process")
            assert echoed.content == b"via process"
            # The command owns its process: it froze the start-up heap (gc_freeze).
            metrics = (await http.get("/metrics")).text
        frozen = [
            line
            for line in metrics.splitlines()
            if line.startswith("sagemaker_gateway_sidecar_gc_frozen")
        ]
        assert len(frozen) == 1 and float(frozen[0].split()[-1]) > 0, frozen
    finally:
        code = await asyncio.to_thread(process.stop)
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1"], "sidecar.auth.mode"),
        (["--listen", "127.0.0.1:0", "--upstream", "ftp://x"], "endpoint_url"),
        (["--listen", "bad"], "--listen"),
        (["--config", "/nonexistent/gateway.toml"], "cannot read config file"),
    ],
)
def test_command_refuses_bad_configuration(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "sidecar", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert result.stdout == b""
