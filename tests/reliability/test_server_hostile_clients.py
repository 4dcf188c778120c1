"""Raw-socket attacks on both servers (sidecar and emulator), each in its own process.

Memory is read from ``/proc/<pid>/status`` of the server process: VmHWM (the
peak resident set) before and after an attack, so a spike that was freed
again still counts.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from bench.attacks import flood, peak_rss, pipeline_without_reading, wait_for_close
from gateway.emulator import Emulator, EmulatorProcess
from gateway.sidecar import Sidecar, SidecarProcess

MIB = 1024 * 1024
WRITE_TIMEOUT_S = 1.0
EMULATOR_CONFIG = {"seed": 3, "auth": {"required": False}, "endpoints": {"echo": {}}}


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    port: int
    pid: int
    invoke_path: str


@pytest.fixture(scope="module")
def emulator_process() -> Iterator[EmulatorProcess]:
    with Emulator.start_subprocess(EMULATOR_CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def sidecar_process(emulator_process: EmulatorProcess) -> Iterator[SidecarProcess]:
    config = {
        "region": "us-east-1",
        "endpoint_url": emulator_process.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "sidecar": {"write_timeout_s": WRITE_TIMEOUT_S, "shutdown_grace_s": 1},
    }
    process = Sidecar.start_subprocess(config, args=("--log-level", "ERROR"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(params=["sidecar", "emulator"])
def target(
    request: pytest.FixtureRequest,
    sidecar_process: SidecarProcess,
    emulator_process: EmulatorProcess,
) -> Target:
    if request.param == "sidecar":
        return Target(
            "sidecar", sidecar_process.port, sidecar_process.pid, "/endpoints/echo/invocations"
        )
    return Target(
        "emulator",
        emulator_process.port,
        emulator_process.process.pid,
        "/endpoints/echo/invocations",
    )


def _still_serves(target: Target) -> None:
    body = f"alive-{time.monotonic_ns()}".encode()
    response = httpx.post(f"http://127.0.0.1:{target.port}{target.invoke_path}", content=body)
    assert response.status_code == 200 and response.content == body


def _warm(target: Target) -> None:
    for _ in range(3):
        _still_serves(target)


ATTACKS = {
    # Severe 1: an endless request target.
    "target": (b"GET /", b"a", 414),
    # Severe 2: an endless header name, and an endless header value.
    "header-name": (b"GET / HTTP/1.1\r\nhost: x\r\nx-", b"n", 431),
    "header-value": (b"GET / HTTP/1.1\r\nhost: x\r\nx-long: ", b"v", 431),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_endless_head_is_refused_at_the_limit_without_memory_growth(
    target: Target, attack: str
) -> None:
    prefix, filler, status = ATTACKS[attack]
    _warm(target)
    before = peak_rss(target.pid)
    outcome = flood(target.port, prefix, filler, max_bytes=96 * MIB)
    grown = peak_rss(target.pid) - before
    assert outcome.answer.startswith(b"HTTP/1.1 %d " % status), (outcome.sent, outcome.answer[:80])
    assert b"connection: close" in outcome.answer
    # Refused after the 64 KiB head limit, not after the attacker's 96 MiB;
    # what was accepted beyond it sat in socket buffers, never in the server.
    assert outcome.sent < 24 * MIB
    assert grown < 8 * MIB, f"{target.name} peak RSS grew {grown / MIB:.1f} MiB"
    _still_serves(target)


def test_endless_header_in_small_fragments_is_refused(target: Target) -> None:
    """Many small reads: the head is counted per read, not per completed header."""
    sock = socket.create_connection(("127.0.0.1", target.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-long: ")
        answer = b""
        for _ in range(4000):  # 4000 x 64 B = 250 KiB, four times the limit
            try:
                sock.sendall(b"v" * 64)
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.0005)
            try:
                answer = sock.recv(4096)
            except (BlockingIOError, TimeoutError):
                continue
            finally:
                sock.settimeout(5)
            break
        if not answer:
            answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 ")
    _still_serves(target)


def test_declared_oversized_body_is_refused_before_it_is_sent(target: Target) -> None:
    """Content-Length: 100 MB, and not a byte of it sent: the 413 comes at once."""
    sock = socket.create_connection(("127.0.0.1", target.port), timeout=5)
    try:
        sock.sendall(
            b"POST " + target.invoke_path.encode() + b" HTTP/1.1\r\nhost: x\r\n"
            b"content-length: 100000000\r\n\r\n"
        )
        answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413 ")
    _still_serves(target)


def _pipelined_echo(target: Target, size: int) -> bytes:
    return (
        b"POST " + target.invoke_path.encode() + b" HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/octet-stream\r\n"
        b"content-length: %d\r\n\r\n" % size
    ) + b"p" * size


def test_pipelining_without_reading_pins_little_memory(target: Target) -> None:
    """Medium 6: 40 pipelined 4 MiB echo calls and the client reads nothing."""
    _warm(target)
    before = peak_rss(target.pid)
    sock, taken = pipeline_without_reading(target.port, _pipelined_echo(target, 4 * MIB))
    grown = peak_rss(target.pid) - before
    try:
        # Reading stopped once the answers backed up: a few requests' worth
        # is in the socket buffers and the server, not sixteen of them.
        assert taken < 40 * MIB, f"the server took {taken / MIB:.0f} MiB"
        assert grown < 32 * MIB, f"{target.name} peak RSS grew {grown / MIB:.1f} MiB"
    finally:
        sock.close()
    _still_serves(target)


def test_a_peer_that_never_reads_is_cut_off(sidecar_process: SidecarProcess) -> None:
    """The write-progress timeout (write_timeout_s = 1 here) frees the connection."""
    target = Target(
        "sidecar", sidecar_process.port, sidecar_process.pid, "/endpoints/echo/invocations"
    )
    sock, _ = pipeline_without_reading(target.port, _pipelined_echo(target, 2 * MIB))
    assert wait_for_close(sock, WRITE_TIMEOUT_S + 10)
    _still_serves(target)
