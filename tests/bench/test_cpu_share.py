"""``bench._cpu_share``: a cgroup per process with a CPU limit, real cgroups, all undone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._cpu_share import PERIOD_US, CpuShares, CpuSharesUnavailable


@pytest.fixture
def shares() -> Iterator[CpuShares]:
    try:
        made = CpuShares(prefix="gateway-bench-test")
    except CpuSharesUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error))  # CI runs as root on a machine with the cpu controller
        pytest.skip(str(error))
    with made:
        yield made


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def _limit_of(group: Path) -> tuple[int, int]:
    """(quota, period) in microseconds, from either cgroup version's files."""
    if (group / "cpu.max").exists():
        quota, period = (group / "cpu.max").read_text().split()
        return int(quota), int(period)
    return int((group / "cpu.cfs_quota_us").read_text()), int(
        (group / "cpu.cfs_period_us").read_text()
    )


def test_a_process_is_moved_into_a_group_with_its_limit_and_back_on_close(
    shares: CpuShares, sleeper: subprocess.Popen[bytes]
) -> None:
    group = shares.limit(sleeper.pid, 0.25)
    assert _limit_of(group) == (PERIOD_US // 4, PERIOD_US)
    assert str(sleeper.pid) in (group / "cgroup.procs").read_text().split()
    with open(f"/proc/{sleeper.pid}/cgroup") as membership:
        assert group.name in membership.read()
    shares.close()
    assert not group.exists()
    with open(f"/proc/{sleeper.pid}/cgroup") as membership:
        assert group.name not in membership.read()
    assert sleeper.poll() is None  # moved back, not killed


def test_each_process_gets_a_group_of_its_own(shares: CpuShares) -> None:
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        groups = [shares.limit(first.pid, 0.5), shares.limit(second.pid, 1.0)]
        assert groups[0] != groups[1]
        assert [_limit_of(group)[0] for group in groups] == [PERIOD_US // 2, PERIOD_US]
    finally:
        for process in (first, second):
            process.kill()
            process.wait()
    shares.close()  # the processes have exited: their groups go all the same
    assert not any(group.exists() for group in groups)


@pytest.mark.parametrize("cpus", [0.0, -1.0, 10_000.0])
def test_a_share_out_of_range_is_refused_before_any_group_is_made(
    shares: CpuShares, cpus: float
) -> None:
    with pytest.raises(ValueError, match="cpus must be between"):
        shares.limit(os.getpid(), cpus)
    assert shares._groups == []
