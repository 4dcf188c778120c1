"""Throw-away redis-server processes for tests: single, Sentinel, Cluster.

Every process listens on 127.0.0.1 on a free port, persists nothing
(``--save "" --appendonly no``), keeps its files in a temporary directory
and is stopped by the owner (use the context managers or ``stop()``). Tests
that kill or slow Redis use these, never the shared server on 6379.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "RedisCluster3",
    "RedisSentinel",
    "RedisServer",
    "free_cluster_port",
    "free_port",
    "ping",
    "redis_cli",
    "shared_redis_available",
]

_READY_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too."""
    for _ in range(1000):
        port = free_port()
        if port + 10000 < 65536 and _port_is_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def ping(port: int, timeout: float = 0.2) -> bool:
    """True if something on ``port`` answers a Redis PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def shared_redis_available() -> bool:
    return ping(6379)


def redis_cli(port: int, *args: str, timeout: float = 10.0) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout


class RedisServer:
    """One redis-server on a free port; ``kill()`` and ``start()`` again on the same port."""

    def __init__(self, *extra_args: str, port: int | None = None, workdir: Path | None = None):
        self.port = port or free_port()
        self.extra_args = extra_args
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix=f"redis-{self.port}-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            *self.extra_args,
        ]

    def start(self) -> RedisServer:
        self._proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_until(lambda: ping(self.port), f"redis-server on {self.port}")
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would; the port is free again when this returns."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def cli(self, *args: str) -> str:
        return redis_cli(self.port, *args)

    @classmethod
    @contextlib.contextmanager
    def running(cls, *extra_args: str) -> Iterator[RedisServer]:
        server = cls(*extra_args)
        try:
            yield server.start()
        finally:
            server.cleanup()


class RedisSentinel:
    """A master and one sentinel watching it as ``service_name``."""

    def __init__(self, service_name: str = "mymaster") -> None:
        self.service_name = service_name
        self.master = RedisServer()
        self.sentinel_port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.service_name}/0"

    def start(self) -> RedisSentinel:
        self.master.start()
        conf = self.master.workdir / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.master.workdir}\n"
            f"sentinel monitor {self.service_name} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {self.service_name} 5000\n"
        )
        self._proc = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_until(self._knows_master, f"sentinel on {self.sentinel_port}")
        except BaseException:
            self.cleanup()
            raise
        return self

    def _knows_master(self) -> bool:
        if not ping(self.sentinel_port):
            return False
        answer = redis_cli(
            self.sentinel_port, "SENTINEL", "get-master-addr-by-name", self.service_name
        )
        return str(self.master.port) in answer

    def cleanup(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
            self._proc = None
        self.master.cleanup()


class RedisCluster3:
    """Three masters, no replicas, all 16384 slots assigned.

    ``node_args`` are extra redis-server arguments for every node.
    """

    def __init__(self, *node_args: str) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="redis-cluster-"))
        self.nodes: list[RedisServer] = []
        self.node_args = node_args

    @property
    def seeds(self) -> list[str]:
        return [f"127.0.0.1:{node.port}" for node in self.nodes]

    def start(self) -> RedisCluster3:
        for _ in range(3):
            port = free_cluster_port()
            node = RedisServer(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(self.workdir / f"nodes-{port}.conf"),
                "--cluster-node-timeout",
                "2000",
                *self.node_args,
                port=port,
                workdir=self.workdir,
            )
            self.nodes.append(node)
            node.start()
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *self.seeds,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=30,
            check=True,
        )
        _wait_until(self._all_ok, "cluster_state:ok")
        return self

    def _all_ok(self) -> bool:
        return all("cluster_state:ok" in node.cli("CLUSTER", "INFO") for node in self.nodes)

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if predicate():
                return
        time.sleep(0.02)
    raise RuntimeError(f"{what} did not become ready in {_READY_TIMEOUT_S} s")
