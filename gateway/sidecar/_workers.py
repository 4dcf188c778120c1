"""Several sidecar processes on one port: a supervisor and its workers.

``python -m gateway sidecar --workers N`` runs :class:`Supervisor`. It
binds the address first (so a taken port fails once, clearly, before any
worker starts) and keeps that socket bound but never listening, so the
kernel never hands it a connection. Each worker is the ordinary sidecar
command in a process of its own (own event loop, own ``Gateway``, own near
cache) with its own listening socket bound with ``SO_REUSEPORT`` to the same
address: the kernel spreads new connections over the workers' listeners.

The supervisor restarts a worker that dies (with backoff), forwards
SIGTERM/SIGINT to every worker and exits once all of them have exited. It
forwards SIGHUP too (each worker reloads its ``[rtb]`` table) and goes on.

Metrics: each worker also answers its own exposition on a Unix socket in
the supervisor's private directory. A ``/metrics`` scrape, whichever worker
the kernel gives it to, asks its siblings for theirs and adds them up
sample by sample (:func:`merge_expositions`), so one scrape covers every
worker and the counters add up to what the port served.

A worker that dies must not take its counts with it (the sum would go down,
which Prometheus reads as a reset of the whole sum). Each worker keeps a
snapshot of its exposition as of the last scrape it answered; when one dies,
the supervisor adds that snapshot's counters and histograms to a
``retired.prom`` file, which names the workers it holds, and every scrape adds
``retired.prom`` to the live workers' numbers. A worker that does not answer a
scrape in full (dead and not yet retired, restarting, slow, or killed while it
answers) counts with its snapshot, unless ``retired.prom`` holds it already:
each worker's counts are in a scrape exactly once, whichever worker answers and
whenever the supervisor retires the dead one, so the sums never go down. What a
worker counted after its last scrape is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway._server import processes as child_process
from gateway.errors import ConfigError
from gateway.sidecar._logging import worker_restarted
from gateway.sidecar._metrics import cumulative_only, merge_expositions

__all__ = [
    "Supervisor",
    "WorkerContext",
    "available_cores",
    "os_reason",
    "reserve_address",
    "resolve_worker_count",
    "retire",
    "worker_count",
]

logger = logging.getLogger("gateway.sidecar")

# Set by the supervisor in each worker's environment (single underscore: not
# configuration, so the SAGEMAKER_GATEWAY__* overlay never sees them).
ENV_INDEX = "SAGEMAKER_GATEWAY_WORKER_INDEX"
ENV_DIR = "SAGEMAKER_GATEWAY_WORKER_DIR"
ENV_COUNT = "SAGEMAKER_GATEWAY_WORKER_COUNT"  # how many workers share the port (and the caps)

# A worker that dies this soon after starting counts as crash-looping: the
# delay before the next start doubles, up to the cap.
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 30.0
_HEALTHY_AFTER_S = 10.0
_SIBLING_TIMEOUT_S = 2.0
# A worker that answers no liveness check for this long is killed and replaced.
_LIVENESS_S = 15.0
# The supervisor's private directory: <tempdir>/<prefix><supervisor pid>-<random>.
_DIR_PREFIX = "sagemaker-gateway-workers-"
# In the supervisor's directory: the counts of workers that died, added up.
_RETIRED = "retired.prom"


def _snapshot_path(directory: Path, index: int, pid: int) -> Path:
    return directory / f"snapshot-{index}-{pid}.prom"


# A worker's answer to a sibling: its key, its exposition, then this line; an answer
# cut short (the worker killed while writing) lacks it and is not used.
_ANSWER_HEAD = b"# worker "
_ANSWER_END = b"# EOF\n"
# retired.prom's first line: the workers (index-pid) whose counts it holds.
_RETIRED_HEAD = "# retired workers:"
# How many retired workers it names (a scrape needs only those retired lately).
_MAX_RETIRED_KEYS = 256


def _read_retired(path: Path) -> tuple[list[str], str]:
    """The workers ``retired.prom`` holds, and its exposition; none when it is absent."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return [], ""
    head, _, rest = text.partition("\n")
    if not head.startswith(_RETIRED_HEAD):
        return [], text
    return head[len(_RETIRED_HEAD) :].split(), rest


def retire(directory: Path, index: int, pid: int) -> None:
    """Keep a dead worker's counters: its last snapshot joins ``retired.prom``.

    The file names the worker before its snapshot goes, so a scrape that read the
    snapshot meanwhile sees it counted and leaves it out. Retiring twice adds once.
    """
    snapshot = _snapshot_path(directory, index, pid)
    try:
        last = snapshot.read_text()
    except OSError:
        return  # never scraped: nothing counted that anyone saw
    retired = directory / _RETIRED
    keys, text = _read_retired(retired)
    key = f"{index}-{pid}"
    if key not in keys:
        merged = merge_expositions(
            [text, cumulative_only(last)] if text else [cumulative_only(last)]
        )
        keys = [*keys, key][-_MAX_RETIRED_KEYS:]
        head = f"{_RETIRED_HEAD} {' '.join(keys)}\n".encode()
        try:
            _write_atomically(retired, head + merged)
        except OSError as exc:  # a full or vanished temp dir: the counts are lost, not the run
            logger.warning("cannot keep a dead worker's counts", extra={"error": os_reason(exc)})
    snapshot.unlink(missing_ok=True)


def _write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def worker_count(environ: Mapping[str, str] = os.environ) -> int:
    """How many workers share this worker's port (1 outside a supervisor's workers)."""
    count = environ.get(ENV_COUNT, "1")
    return int(count) if count.isdecimal() and int(count) > 0 else 1


def available_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may use, at least 1.

    Its CPU affinity, lowered to a container's CPU limit (cgroup v2
    ``cpu.max``, rounded up) when there is one: a pod limited to 2 CPUs on a
    64-core node gets 2 workers, not 64.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return max(1, cores)
    if quota != "max" and int(period) > 0:
        cores = min(cores, -(-int(quota) // int(period)))
    return max(1, cores)


def resolve_worker_count(workers: int) -> int:
    """``workers`` from the config (0 stands for ``auto``) as a process count."""
    return available_cores() if workers == 0 else workers


def reserve_address(host: str, port: int) -> socket.socket:
    """Bind ``host:port`` for the workers to share; raises ConfigError if impossible.

    Bound without ``SO_REUSEPORT`` first, so that the bind fails if anything
    holds the address (another sidecar included); then the option is set on
    the bound socket, which lets the workers' listeners join. It never
    listens: connections only ever go to the workers.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None
    return sock


def os_reason(error: OSError) -> str:
    """The operating system's words for ``error`` ("address already in use")."""
    if isinstance(error, socket.gaierror):
        return str(error.strerror or error).lower()
    if error.errno is not None:
        return os.strerror(error.errno).lower()
    return str(error)


# -- supervisor ---------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    index: int
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    backoff: float = _FIRST_BACKOFF_S
    ready: bool = False  # said it serves, and has not exited since
    last_answer: float = 0.0  # monotonic time of its last answer to a liveness check
    killed_for: str | None = None  # why the supervisor killed it, for the restart line


class Supervisor:
    """Starts, watches and stops the workers of one ``--workers N`` sidecar."""

    def __init__(
        self,
        argv: Sequence[str],
        sock: socket.socket,
        count: int,
        ready_prefix: str,
        admin_sock: socket.socket | None = None,
        *,
        liveness_s: float = _LIVENESS_S,
    ) -> None:
        self._liveness_s = liveness_s
        self._argv = list(argv)
        self._sock = sock
        self._admin_sock = admin_sock
        self._count = count
        self._ready_prefix = ready_prefix
        self._workers = [_Worker(index) for index in range(count)]
        self._stopping = False
        self._stop_signal = signal.SIGTERM
        self._changed = asyncio.Event()
        self._dir = ""
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def listen(self) -> str:
        return _address(self._sock)

    @property
    def admin_listen(self) -> str:
        return _address(self._admin_sock) if self._admin_sock is not None else "off"

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self._forward, signal.SIGHUP)
        _remove_orphaned_directories()
        self._dir = tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-")
        try:
            return await self._supervise()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._sock.close()
            if self._admin_sock is not None:
                self._admin_sock.close()

    async def _supervise(self) -> int:
        # The first worker alone: a config or credentials problem shows up as
        # its one error line, not N copies of it.
        first = await self._spawn(self._workers[0])
        if first is None:
            return await self._exit_code_of(self._workers[0])
        rest = await asyncio.gather(*(self._spawn(w) for w in self._workers[1:]))
        if self._stopping or any(url is None for url in rest):
            self._forward(signal.SIGTERM)
            await self._wait_all()
            return 0 if self._stopping else 1
        logger.info(
            "sidecar workers started",
            extra={"workers": self._count, "pids": [self._pid(w) for w in self._workers]},
        )
        print(f"{self._ready_prefix}{first}", flush=True)
        watchers = [asyncio.create_task(self._watch(worker)) for worker in self._workers]
        liveness = asyncio.create_task(self._check_liveness())
        try:
            await asyncio.gather(*watchers)
        finally:
            liveness.cancel()
        return 0

    async def _check_liveness(self) -> None:
        """Kill a worker whose event loop has answered no check for ``liveness_s``.

        The check is the one a sibling's ``/metrics`` scrape makes (its Unix
        socket, answered on its event loop), so a stopped (SIGSTOP) or wedged
        worker fails it. Killed, it is restarted as any worker that dies, and
        its listener no longer takes a share of new connections.
        """
        interval = self._liveness_s / 3
        while not self._stopping:
            await asyncio.sleep(interval)
            checked = [w for w in self._workers if w.ready and w.killed_for is None]
            answers = await asyncio.gather(*(self._answers(w, interval) for w in checked))
            now = time.monotonic()
            for worker, answered in zip(checked, answers, strict=True):
                if answered or not worker.ready:
                    worker.last_answer = now
                elif now - worker.last_answer >= self._liveness_s and not self._stopping:
                    self._kill_unresponsive(worker)

    async def _answers(self, worker: _Worker, timeout: float) -> bool:
        path = Path(self._dir) / f"worker-{worker.index}.sock"
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(str(path))
                try:
                    return bool(await reader.read(1))
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return False

    def _kill_unresponsive(self, worker: _Worker) -> None:
        process = worker.process
        if process is None or process.returncode is not None:
            return
        worker.killed_for = "unresponsive"
        with contextlib.suppress(ProcessLookupError):
            process.kill()  # SIGKILL: a stopped process cannot act on anything else

    def _pid(self, worker: _Worker) -> int | None:
        return worker.process.pid if worker.process is not None else None

    def _on_signal(self, signum: int) -> None:
        self._stopping = True
        self._stop_signal = signal.Signals(signum)
        self._forward(signum)
        self._changed.set()

    def _forward(self, signum: int) -> None:
        for worker in self._workers:
            process = worker.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)

    async def _spawn(self, worker: _Worker) -> str | None:
        """Start ``worker``; its URL once it is ready, None if it exited first."""
        env = {
            **os.environ,
            ENV_INDEX: str(worker.index),
            ENV_DIR: self._dir,
            ENV_COUNT: str(self._count),
        }
        command = [
            sys.executable,
            "-m",
            "gateway",
            "sidecar",
            *self._argv,
            "--listen",
            self.listen,
            "--admin-listen",
            self.admin_listen,
            "--workers",
            "1",
        ]
        worker.process = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            preexec_fn=child_process.die_with_parent,
        )
        worker.started_at = time.monotonic()
        assert worker.process.stdout is not None
        line = (await worker.process.stdout.readline()).decode().strip()
        if not line.startswith(self._ready_prefix):
            await worker.process.wait()
            return None
        worker.ready = True
        worker.last_answer = time.monotonic()
        # Nothing else is expected on stdout; read it so the pipe never fills.
        drain = asyncio.create_task(_drain(worker.process.stdout))
        self._tasks.add(drain)
        drain.add_done_callback(self._tasks.discard)
        if self._stopping:  # a signal arrived while it started: pass it on
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(self._stop_signal)
        return line[len(self._ready_prefix) :]

    async def _watch(self, worker: _Worker) -> None:
        """Wait for ``worker`` to exit; start it again unless shutting down."""
        while True:
            process = worker.process
            assert process is not None
            code = await process.wait()
            worker.ready = False
            reason, worker.killed_for = worker.killed_for or "exited", None
            retire(Path(self._dir), worker.index, process.pid)
            if self._stopping:
                return
            lived = time.monotonic() - worker.started_at
            if lived >= _HEALTHY_AFTER_S:
                worker.backoff = _FIRST_BACKOFF_S
            delay = worker.backoff
            worker.backoff = min(worker.backoff * 2, _MAX_BACKOFF_S)
            worker_restarted(worker.index, process.pid, code, reason, restart_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), delay)
            if self._stopping:
                return
            await self._spawn(worker)

    async def _wait_all(self) -> None:
        for worker in self._workers:
            if worker.process is not None:
                await worker.process.wait()

    async def _exit_code_of(self, worker: _Worker) -> int:
        """The first worker's exit status when it could not start (2: it said why)."""
        assert worker.process is not None
        code = await worker.process.wait()
        return code if code > 0 else 1


def _remove_orphaned_directories(root: str | None = None) -> None:
    """Remove the private directories of supervisors that are gone.

    A supervisor removes its directory as it exits; one killed outright
    (SIGKILL, OOM) cannot, and its workers die with it. The directory names
    its supervisor's pid: one of ours whose process no longer exists is
    removed here. A pid taken by another process since keeps its directory
    until a later start: never one in use is removed.
    """
    base = Path(root or tempfile.gettempdir())
    uid = os.getuid()
    for directory in base.glob(f"{_DIR_PREFIX}*-*"):
        pid_text = directory.name.removeprefix(_DIR_PREFIX).partition("-")[0]
        if not pid_text.isdecimal() or int(pid_text) == os.getpid():
            continue
        try:
            info = directory.lstat()
            if info.st_uid != uid or not stat.S_ISDIR(info.st_mode):
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except OSError:  # gone meanwhile, or a process of another user: not ours to judge
            continue


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


# -- worker side --------------------------------------------------------------


class WorkerContext:
    """A worker's link to its siblings: its own exposition out, theirs in."""

    def __init__(self, index: int, directory: str, pid: int | None = None) -> None:
        self.index = index
        self.pid = os.getpid() if pid is None else pid
        self.key = f"{index}-{self.pid}"
        self._dir = Path(directory)
        self._path = self._dir / f"worker-{index}.sock"
        self._snapshot = _snapshot_path(self._dir, index, self.pid)
        self._server: asyncio.AbstractServer | None = None
        self._local: Callable[[], bytes] = lambda: b""

    def tag_logs(self) -> None:
        """Every log line of this process carries ``"worker": <index>``."""
        index = self.index

        def tag(record: logging.LogRecord) -> bool:
            record.worker = index
            return True

        for handler in logging.getLogger("gateway").handlers:
            handler.addFilter(tag)

    @classmethod
    def from_environment(cls) -> WorkerContext | None:
        index, directory = os.environ.get(ENV_INDEX), os.environ.get(ENV_DIR)
        if index is None or not directory:
            return None
        return cls(int(index), directory)

    async def start(self, local_exposition: Callable[[], bytes]) -> None:
        """Answer siblings' requests for this worker's exposition."""
        self._local = local_exposition
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()  # left by this worker's previous life
        self._server = await asyncio.start_unix_server(self._answer, path=str(self._path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    def _own_exposition(self) -> bytes:
        """This worker's exposition, its snapshot kept for the supervisor (see module doc)."""
        text = self._local()
        # On failure the scrape still answers; only a later death would lose counts.
        with contextlib.suppress(OSError):
            _write_atomically(self._snapshot, text)
        return text

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(
                b"%b%b\n%b%b"
                % (_ANSWER_HEAD, self.key.encode(), self._own_exposition(), _ANSWER_END)
            )
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def exposition(self) -> bytes:
        """Every worker's metrics, added up (this one's read in-process).

        Per-process families keep their worker's number, whichever worker
        answered the scrape. The order matters (see the module doc): the
        answers, then the snapshots, then ``retired.prom``, which the
        supervisor writes before it removes a retired worker's snapshot.
        """
        paths = sorted(self._sibling_paths(), key=_worker_number)
        answers = await asyncio.gather(*(self._read(path) for path in paths))
        snapshots = self._snapshots()
        retired_keys, retired = _read_retired(self._dir / _RETIRED)
        counted = set(retired_keys)
        texts: list[str] = []
        numbers: list[str] = []
        for path, answer in zip(paths, answers, strict=True):
            if answer is not None and answer[0] not in counted:
                counted.add(answer[0])
                texts.append(answer[1])
                numbers.append(str(_worker_number(path)))
        # Workers that did not answer in full: their counts as of their last answer
        # (gauges and per-process families are not carried over).
        for key, snapshot in snapshots:
            if key not in counted:
                counted.add(key)
                texts.append(cumulative_only(snapshot))
                numbers.append("snapshot")
        if retired:
            texts.append(retired)  # dead workers' counters and histograms
            numbers.append("retired")
        return merge_expositions(texts, numbers)

    async def _read(self, path: Path) -> tuple[str, str] | None:
        """(the worker's key, its exposition), or None if it did not answer in full."""
        if path == self._path:
            return self.key, self._own_exposition().decode()
        return await _fetch(path)

    def _snapshots(self) -> list[tuple[str, str]]:
        """(key, text) of every worker's last answer still on file."""
        found: list[tuple[str, str]] = []
        for path in sorted(self._dir.glob("snapshot-*-*.prom")):
            try:
                found.append((path.stem.removeprefix("snapshot-"), path.read_text()))
            except FileNotFoundError:
                continue  # retired meanwhile: retired.prom, read after, holds it
        return found

    def _sibling_paths(self) -> Iterator[Path]:
        return self._dir.glob("worker-*.sock")


def _worker_number(path: Path) -> int:
    return int(path.stem.removeprefix("worker-"))


async def _fetch(path: Path) -> tuple[str, str] | None:
    """A sibling's key and exposition; None if it is gone, restarting or cut off mid-answer."""
    try:
        async with asyncio.timeout(_SIBLING_TIMEOUT_S):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                data = await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return None
    if not data.startswith(_ANSWER_HEAD) or not data.endswith(_ANSWER_END):
        return None
    head, _, text = data[: -len(_ANSWER_END)].partition(b"\n")
    return head[len(_ANSWER_HEAD) :].decode(), text.decode()


# The signature the sidecar command calls in a worker.
MetricsSource = Callable[[], Awaitable[bytes]]
