"""A fixed share of a CPU for each of some processes, with a cgroup each (Linux, root).

``bench.sidecar_workers --cpu-per-worker 0.4`` gives every sidecar worker its own
cgroup with a CPU bandwidth limit: each worker is then a core of 0.4 CPU, and N
workers get N such cores while the load generator and the stub keep the rest of
the machine. On a host with few cores that is how N workers' scaling can be
measured with a load generator that is not the bottleneck: the workers' cores
are smaller, not shared with it.

cgroup v2 (``cpu.max`` in a group under the unified hierarchy, its ``cpu``
controller enabled) and v1 (the ``cpu`` controller's ``cpu.cfs_quota_us``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CpuShares", "CpuSharesUnavailable"]

# A short period: the limit is enforced every 10 ms, so a worker is throttled in
# short steps (a 100 ms period would stall it for tens of milliseconds at a time).
PERIOD_US = 10_000
_V2_ROOT = Path("/sys/fs/cgroup")
_V1_ROOT = Path("/sys/fs/cgroup/cpu")


class CpuSharesUnavailable(RuntimeError):
    """No cgroup CPU controller this process may write to."""


def _v2_root() -> Path | None:
    controllers = _V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        subtree = _V2_ROOT / "cgroup.subtree_control"
        with contextlib.suppress(OSError):
            subtree.write_text("+cpu")
        if "cpu" in subtree.read_text().split():
            return _V2_ROOT
    return None


def _v1_root() -> Path | None:
    if (_V1_ROOT / "cpu.cfs_quota_us").exists():
        return _V1_ROOT
    return None


@dataclass
class CpuShares:
    """Groups made by :meth:`limit`, undone on close: their processes moved to the
    hierarchy's root group (where a process on a host without cgroup managers starts),
    the groups removed."""

    prefix: str = "gateway-bench"
    _groups: list[Path] = field(default_factory=list)
    _root: Path | None = None
    _v2: bool = False

    def __post_init__(self) -> None:
        root = _v2_root()
        self._v2 = root is not None
        if root is None:
            root = _v1_root()
        if root is None or not os.access(root, os.W_OK):
            raise CpuSharesUnavailable(
                "no writable cgroup cpu controller (needs root, and cgroup v1's cpu "
                "hierarchy or v2's cpu controller)"
            )
        self._root = root

    @property
    def root(self) -> Path:
        """The hierarchy's root the groups are made in."""
        assert self._root is not None
        return self._root

    def limit(self, pid: int, cpus: float) -> Path:
        """Move ``pid`` (all its threads) into a new group allowed ``cpus`` CPUs; its path."""
        most = os.cpu_count() or 1
        if not 0.01 <= cpus <= most:
            raise ValueError(f"cpus must be between 0.01 and {most} (the CPU count), not {cpus}")
        assert self._root is not None
        group = self._root / f"{self.prefix}-{os.getpid()}-{len(self._groups)}"
        group.mkdir()
        self._groups.append(group)
        quota = round(cpus * PERIOD_US)
        if self._v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        (group / "cgroup.procs").write_text(str(pid))
        return group

    def close(self) -> None:
        assert self._root is not None
        for group in reversed(self._groups):
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):  # (exited since)
                        (self._root / "cgroup.procs").write_text(pid)
                group.rmdir()
        self._groups.clear()

    def __enter__(self) -> CpuShares:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
