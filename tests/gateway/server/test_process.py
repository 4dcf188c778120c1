"""Children of the project's servers die with their parent, even one killed by SIGKILL.

An emulator that outlived a killed benchmark kept a pipe open and loaded the
CPU for half an hour, skewing every later measurement.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = """
import sys, time
from gateway.emulator import Emulator
child = Emulator.start_subprocess()
print(child.process.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_an_emulator_child_dies_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert _alive(child_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        for _ in range(100):  # bounded wait for the kernel's parent-death signal
            if not _alive(child_pid):
                break
            time.sleep(0.05)
        assert not _alive(child_pid)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
