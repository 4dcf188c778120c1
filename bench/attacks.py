"""Raw-socket attacks on an HTTP server, and the server's memory read from /proc.

Used by ``bench.soak`` and the reliability tests: each attack is a plain
blocking socket driven with ``select``, so it can run in a thread beside
normal traffic and report exactly how far it got before the server answered.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass

__all__ = [
    "Flood",
    "flood",
    "peak_rss",
    "pipeline_without_reading",
    "rss",
    "wait_for_close",
]

_CHUNK = 64 * 1024


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise LookupError(f"{field} not in /proc/{pid}/status")


def rss(pid: int) -> int:
    """Resident memory of ``pid`` now, in bytes."""
    return _status_kb(pid, "VmRSS:")


def peak_rss(pid: int) -> int:
    """The most resident memory ``pid`` has ever had (VmHWM), in bytes."""
    return _status_kb(pid, "VmHWM:")


@dataclass(frozen=True, slots=True)
class Flood:
    sent: int  # bytes the server accepted before it answered or closed
    answer: bytes  # what it answered (b"" if it only closed or reset)
    closed: bool  # the server closed or reset the connection


def flood(
    port: int,
    prefix: bytes,
    filler: bytes,
    *,
    max_bytes: int = 64 * 1024 * 1024,
    seconds: float = 20.0,
    host: str = "127.0.0.1",
) -> Flood:
    """Send ``prefix`` then ``filler`` endlessly until the server answers or closes.

    Stops sending at ``max_bytes`` (an empty ``filler``: after the prefix) and
    gives up after ``seconds`` (a server that takes it all and never
    answers); then waits briefly for a late answer.
    """
    sock = socket.create_connection((host, port), timeout=5)
    sock.setblocking(False)
    pending = prefix
    sent = 0
    answer = b""
    closed = False
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            # The prefix always goes out; then filler up to max_bytes (none: just wait).
            want_write = bool(pending) or (bool(filler) and sent < max_bytes)
            readable, writable, _ = select.select([sock], [sock] if want_write else [], [], 0.5)
            if readable:
                break
            if not writable:
                continue
            if not pending:
                pending = filler * max(1, _CHUNK // len(filler))
            try:
                count = sock.send(pending)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            sent += count
            pending = pending[count:]
        answer, closed_late = _read_answer(sock, 5.0)
        closed = closed or closed_late
    finally:
        sock.close()
    return Flood(sent, answer, closed)


def _read_answer(sock: socket.socket, seconds: float) -> tuple[bytes, bool]:
    """Whatever arrives within ``seconds``; True if the server closed or reset."""
    received = bytearray()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            break
        try:
            data = sock.recv(_CHUNK)
        except ConnectionResetError:
            return bytes(received), True
        except BlockingIOError:
            continue
        if not data:
            return bytes(received), True
        received += data
    return bytes(received), False


def pipeline_without_reading(
    port: int, request: bytes, *, max_requests: int = 40, stall_s: float = 2.0
) -> tuple[socket.socket, int]:
    """Pipeline ``request`` up to ``max_requests`` times, reading nothing back.

    Sends until the server stops taking bytes for ``stall_s``; returns the
    open socket (for :func:`wait_for_close`) and how many bytes were taken.
    """
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    payload = memoryview(request * max_requests)
    sent = 0
    last_progress = time.monotonic()
    while sent < len(payload) and time.monotonic() - last_progress < stall_s:
        _, writable, _ = select.select([], [sock], [], 0.2)
        if not writable:
            continue
        try:
            count = sock.send(payload[sent : sent + _CHUNK])
        except (BrokenPipeError, ConnectionResetError):
            break
        if count:
            sent += count
            last_progress = time.monotonic()
    return sock, sent


def wait_for_close(sock: socket.socket, seconds: float) -> bool:
    """Drain ``sock`` slowly-never: True once the server has closed or reset it.

    Reads nothing until the server gives up, then checks for EOF or a reset;
    the socket is closed either way.
    """
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                # MSG_PEEK: look without reading (a reading client would let the server progress).
                data = sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                return True
            if not data:
                return True
            # The server's answers are sitting unread; a reset or close shows as an error.
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return True
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
            if info[0] in _CLOSED_STATES:
                return True
        return False
    finally:
        sock.close()


# TCP states (linux/tcp_states.h) after the peer closed: CLOSE_WAIT, LAST_ACK, CLOSE.
_CLOSED_STATES = {8, 9, 7}
