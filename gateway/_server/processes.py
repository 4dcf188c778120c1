"""Child processes of the project's own servers (emulator, sidecar, benchmark clients).

Shared by everything that starts one: the child announces readiness with one
line on stdout, is stopped with SIGTERM (then SIGKILL), and dies with its
parent, so a killed test or benchmark never leaves a server running that
skews every later measurement or holds a pipe open.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["die_with_parent", "read_ready_line", "start", "terminate"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux only)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` with stdout piped, tied to this process's lifetime."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, env=env, preexec_fn=die_with_parent)


def read_ready_line(
    process: subprocess.Popen[bytes], prefix: str, what: str, timeout: float
) -> str:
    """Wait for the child's ``<prefix><address>`` line; return the address."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"the {what} process did not become ready")
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if readable:
            chunk = os.read(process.stdout.fileno(), 1024)
            if not chunk:
                raise RuntimeError(f"the {what} process exited ({process.wait()})")
            line += chunk
    text = line.decode().strip()
    if not text.startswith(prefix):
        raise RuntimeError(f"unexpected {what} output: {text!r}")
    return text[len(prefix) :]


def terminate(process: subprocess.Popen[bytes], grace: float = 5.0) -> int:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
    return process.returncode
