"""The emulator as an object (in-process), as a child process, and as a command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway._config.reader import to_table
from gateway._server import processes as child_process
from gateway._server.address import is_loopback, parse_listen
from gateway._server.http import (
    Handler,
    Request,
    Response,
    Server,
    ServerLimits,
    StreamingResponse,
    start_server,
)
from gateway.emulator._auth import SignatureVerifier
from gateway.emulator._config import EmulatorConfig, FaultConfig
from gateway.emulator._errors import SageMakerError, error_response
from gateway.emulator._latency_config import LatencyConfig
from gateway.emulator._runtimes import RuntimeServices
from gateway.emulator._service import EmulatorService, RecordedRequest
from gateway.emulator._stats import EmulatorStats
from gateway.errors import ConfigError

__all__ = ["Emulator", "EmulatorProcess", "main"]

ConfigSource = EmulatorConfig | Mapping[str, Any] | str | Path | None

# The control token for remote callers of /_emulator/*, read by the command.
CONTROL_TOKEN_ENV = "SAGEMAKER_EMULATOR_CONTROL_TOKEN"
_CONTROL_PREFIX = "/_emulator/"
_RUNTIME_PREFIX = "/endpoints/"


def _check_bind(host: str, allow_remote: bool) -> None:
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r}: the emulator accepts any signature and its "
            "control API changes faults; bind to 127.0.0.1 / ::1, or pass --allow-remote "
            "(Emulator(..., allow_remote=True))"
        )


class _ControlGate:
    """The control API (``/_emulator/*``) for loopback callers, or with the token.

    Only installed when the emulator listens beyond loopback: then a remote
    caller needs ``Authorization: Bearer <control token>``; with no token
    configured, control stays loopback-only.
    """

    __slots__ = ("_expected", "_handle")

    def __init__(self, handle: Handler, token: str | None) -> None:
        self._handle = handle
        self._expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, request: Request) -> Response | StreamingResponse:
        if request.path.startswith(_CONTROL_PREFIX) and not self._allowed(request):
            return Response(
                403,
                (("Content-Type", "application/json"),),
                b'{"message":"the emulator control API needs a loopback caller or the '
                b'control token"}',
            )
        return await self._handle(request)

    def _allowed(self, request: Request) -> bool:
        if request.client is not None and is_loopback(request.client[0]):
            return True
        given = request.headers.get("authorization")
        if self._expected is None or given is None:
            return False
        return hmac.compare_digest(given.encode("latin-1"), self._expected)


class _HeadAuth:
    """Refuses a runtime call whose head shows it is not authenticated, before its body.

    The server runs it on each request's head (``head_check``): an unsigned
    or badly signed 6 MiB POST is answered without a byte of its body being
    kept. The signature over the body is checked later, by the service.
    """

    __slots__ = ("_stats", "_verifier")

    def __init__(self, config: EmulatorConfig, stats: EmulatorStats) -> None:
        self._verifier = SignatureVerifier(config.auth, config.region)
        self._stats = stats

    def __call__(self, request: Request) -> Response | None:
        path = request.path
        if request.method != "POST" or not path.startswith(_RUNTIME_PREFIX):
            return None
        try:
            self._verifier.verify_head(request)
        except SageMakerError as error:
            endpoint = path[len(_RUNTIME_PREFIX) :].partition("/")[0]
            self._stats.errors[(endpoint, error.code)] += 1
            return error_response(error, str(uuid.uuid4()))
        return None


def load_config(source: ConfigSource) -> EmulatorConfig:
    """A config from an object, a dict, or a ``.toml`` / ``.json`` file; None: the default."""
    if source is None:
        return EmulatorConfig.default()
    if isinstance(source, EmulatorConfig):
        return source
    if isinstance(source, Mapping):
        return EmulatorConfig.from_dict(source)
    path = Path(source)
    if path.suffix == ".json":
        try:
            return EmulatorConfig.from_dict(orjson.loads(path.read_bytes()))
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return EmulatorConfig.from_toml(path)


class Emulator:
    """A local SageMaker Runtime on a real socket.

    ::

        async with Emulator(EmulatorConfig.default(seed=1)) as emu:
            ...  # point a client at emu.url; read emu.stats
    """

    def __init__(
        self,
        config: ConfigSource = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: ServerLimits | None = None,
        allow_remote: bool = False,
        control_token: str | None = None,
    ) -> None:
        _check_bind(host, allow_remote)
        self.config = load_config(config)
        self._host = host
        self._control_token = control_token
        self._requested_port = port
        self._limits = limits or ServerLimits(
            max_body_size=self.config.server_body_limit(), server_header=None
        )
        self._service = EmulatorService(self.config)
        self._service.stats.name_endpoints(self.config.endpoints)
        self._server: Server | None = None

    @property
    def stats(self) -> EmulatorStats:
        return self._service.stats

    @property
    def runtimes(self) -> RuntimeServices:
        """The inference routers and Global Inference Gateways: their controls and stats."""
        return self._service.runtimes

    @property
    def recorded(self) -> list[RecordedRequest]:
        """The latest SageMaker Runtime requests as they arrived, oldest first."""
        return list(self._service.recorded)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        return self._server.port

    @property
    def url(self) -> str:
        host = self._host if ":" not in self._host else f"[{self._host}]"
        return f"http://{host}:{self.port}"

    async def start(self) -> Emulator:
        handler: Handler = self._service.handle
        if not is_loopback(self._host):
            handler = _ControlGate(handler, self._control_token)
        self._server = await start_server(
            handler,
            self._host,
            self._requested_port,
            limits=self._limits,
            head_check=_HeadAuth(self.config, self._service.stats),
        )
        return self

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close(grace=1.0)
            self._server = None
        await self._service.close()

    async def __aenter__(self) -> Emulator:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- control ------------------------------------------------------------

    def set_faults(self, endpoint: str, **changes: Any) -> FaultConfig:
        """Change fault injection now, e.g. ``set_faults("echo", reset_rate=1.0)``.

        Keys: error_rates (dict code -> rate), reset_rate, stall_rate, stall_ms,
        stream_error_rate, stream_error_code; those not given keep their current values.
        """
        return self._service.set_faults(endpoint, changes)

    def set_latency(self, endpoint: str, **changes: Any) -> LatencyConfig:
        """Change the latency distribution: base_ms, jitter_ms, tail_share, tail_ms."""
        return self._service.set_latency(endpoint, changes)

    def restore(self, endpoint: str | None = None) -> None:
        """Undo set_faults / set_latency (for one endpoint, or all)."""
        self._service.restore(endpoint)

    def loaded_models(self, endpoint: str) -> list[str]:
        """An MME endpoint's loaded models, least recently used first."""
        cache = self._service.endpoint(endpoint).cache
        return cache.loaded if cache is not None else []

    @staticmethod
    def start_subprocess(
        config: ConfigSource = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        allow_remote: bool = False,
        control_token: str | None = None,
    ) -> EmulatorProcess:
        """Run an emulator in a child process (its own event loop and core)."""
        return EmulatorProcess.start(config, host, port, allow_remote, control_token)


class EmulatorProcess:
    """Handle on an emulator child process: ``url``, ``stats()``, controls, ``stop()``."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        url: str,
        config_file: str | None,
        control_token: str | None = None,
    ) -> None:
        self.process = process
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self._config_file = config_file
        headers = {"authorization": f"Bearer {control_token}"} if control_token else {}
        self._client = httpx.Client(base_url=url, timeout=10.0, headers=headers)

    @classmethod
    def start(
        cls,
        config: ConfigSource,
        host: str,
        port: int,
        allow_remote: bool = False,
        control_token: str | None = None,
    ) -> EmulatorProcess:
        _check_bind(host, allow_remote)
        config_file: str | None = None
        command = [sys.executable, "-m", "gateway.emulator", "--listen", f"{host}:{port}"]
        if allow_remote:
            command.append("--allow-remote")
        env = {**os.environ}
        if control_token:
            env[CONTROL_TOKEN_ENV] = control_token
        if isinstance(config, str | Path):
            command += ["--config", str(config)]
        elif config is not None:
            data = _config_as_dict(config) if isinstance(config, EmulatorConfig) else config
            descriptor, config_file = tempfile.mkstemp(suffix=".json", prefix="emulator-")
            with os.fdopen(descriptor, "wb") as file:
                file.write(orjson.dumps(data, default=_json_default))
            command += ["--config", config_file]
        process = child_process.start(command, env=env)
        try:
            url = child_process.read_ready_line(
                process, "emulator listening on ", "emulator", timeout=20.0
            )
        except BaseException:
            child_process.terminate(process)
            if config_file:
                os.unlink(config_file)
            raise
        return cls(process, url, config_file, control_token)

    def stats(self) -> EmulatorStats:
        response = self._client.get("/_emulator/stats")
        response.raise_for_status()
        return EmulatorStats.from_snapshot(response.json())

    def reset_stats(self) -> None:
        self._client.post("/_emulator/stats/reset").raise_for_status()

    def set_faults(self, endpoint: str, **changes: Any) -> None:
        self._client.post(f"/_emulator/faults/{endpoint}", json=changes).raise_for_status()

    def set_latency(self, endpoint: str, **changes: Any) -> None:
        self._client.post(f"/_emulator/latency/{endpoint}", json=changes).raise_for_status()

    def restore(self, endpoint: str = "") -> None:
        self._client.post(f"/_emulator/restore/{endpoint}").raise_for_status()

    def stop(self) -> int:
        """SIGTERM, wait (then kill); returns the exit code."""
        self._client.close()
        code = child_process.terminate(self.process)
        if self._config_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._config_file)
            self._config_file = None
        return code

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _config_as_dict(config: EmulatorConfig) -> dict[str, Any]:
    """Back to the dict shape ``from_dict`` reads."""
    table: dict[str, Any] = to_table(config)
    for endpoint in table["endpoints"].values():
        model = endpoint["model"]
        # The model's table as given (an xgboost model's own keys), under the checked keys.
        endpoint["model"] = {**model.pop("options"), **model}
    return table


# -- command line -----------------------------------------------------------


async def _serve(emulator: Emulator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with emulator:
        print(f"emulator listening on {emulator.url}", flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway emulator", description="A local SageMaker Runtime."
    )
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
    parser.add_argument("--config", help="a TOML (or JSON) file; default: the built-in endpoints")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on a non-loopback address (control API: loopback callers, or "
        f"the token in ${CONTROL_TOKEN_ENV})",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        host, port = parse_listen(args.listen)
        emulator = Emulator(
            load_config(args.config),
            host,
            port,
            allow_remote=args.allow_remote,
            control_token=os.environ.get(CONTROL_TOKEN_ENV) or None,
        )
    except (ConfigError, OSError) as exc:
        print(f"emulator: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(emulator))
    else:
        uvloop.run(_serve(emulator))
    return 0
