"""The emulator as an object (in-process), as a child process, and as a command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway import _process as child_process
from gateway._http_server import Server, ServerLimits, start_server
from gateway.emulator._config import (
    ConfigError,
    EmulatorConfig,
    FaultConfig,
    LatencyConfig,
    MmeConfig,
)
from gateway.emulator._service import EmulatorService
from gateway.emulator._stats import EmulatorStats

__all__ = ["Emulator", "EmulatorProcess", "main"]

ConfigSource = EmulatorConfig | Mapping[str, Any] | str | Path | None


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
    ) -> None:
        self.config = load_config(config)
        self._host = host
        self._requested_port = port
        self._limits = limits or ServerLimits(
            max_body_size=self.config.max_body_size, server_header=None
        )
        self._service = EmulatorService(self.config)
        self._server: Server | None = None

    @property
    def stats(self) -> EmulatorStats:
        return self._service.stats

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
        self._server = await start_server(
            self._service.handle, self._host, self._requested_port, limits=self._limits
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
        stream_error_rate; those not given keep their current values.
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
        config: ConfigSource = None, host: str = "127.0.0.1", port: int = 0
    ) -> EmulatorProcess:
        """Run an emulator in a child process (its own event loop and core)."""
        return EmulatorProcess.start(config, host, port)


class EmulatorProcess:
    """Handle on an emulator child process: ``url``, ``stats()``, controls, ``stop()``."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, config_file: str | None) -> None:
        self.process = process
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self._config_file = config_file
        self._client = httpx.Client(base_url=url, timeout=10.0)

    @classmethod
    def start(cls, config: ConfigSource, host: str, port: int) -> EmulatorProcess:
        config_file: str | None = None
        command = [sys.executable, "-m", "gateway.emulator", "--listen", f"{host}:{port}"]
        if isinstance(config, str | Path):
            command += ["--config", str(config)]
        elif config is not None:
            data = _config_as_dict(config) if isinstance(config, EmulatorConfig) else config
            descriptor, config_file = tempfile.mkstemp(suffix=".json", prefix="emulator-")
            with os.fdopen(descriptor, "wb") as file:
                file.write(orjson.dumps(data, default=_json_default))
            command += ["--config", config_file]
        process = child_process.start(command)
        try:
            url = child_process.read_ready_line(
                process, "emulator listening on ", "emulator", timeout=20.0
            )
        except BaseException:
            child_process.terminate(process)
            if config_file:
                os.unlink(config_file)
            raise
        return cls(process, url, config_file)

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
    endpoints: dict[str, Any] = {}
    for name, endpoint in config.endpoints.items():
        spec = endpoint.model
        model = {
            **spec.options,
            "type": spec.type,
            "body": spec.body.decode(),
            "content_type": spec.content_type,
            "url": spec.url,
            "timeout_s": spec.timeout_s,
        }
        item: dict[str, Any] = {
            "model": model,
            "variants": [{"name": v.name, "weight": v.weight} for v in endpoint.variants],
            "latency": _fields(endpoint.latency),
            "faults": {
                **_fields(endpoint.faults),
                "error_rates": dict(endpoint.faults.error_rates),
            },
            "stream_parts": endpoint.stream_parts,
            "stream_interval_ms": endpoint.stream_interval_ms,
        }
        if endpoint.mme is not None:
            item["mme"] = {**_fields(endpoint.mme), "models": list(endpoint.mme.models)}
        endpoints[name] = item
    return {
        "endpoints": endpoints,
        "auth": {
            "credentials": dict(config.auth.credentials),
            "required": config.auth.required,
            "max_skew_s": config.auth.max_skew_s,
        },
        **({"seed": config.seed} if config.seed is not None else {}),
        "account_id": config.account_id,
        "region": config.region,
        "max_body_size": config.max_body_size,
    }


def _fields(config: MmeConfig | LatencyConfig | FaultConfig) -> dict[str, Any]:
    return asdict(config)


# -- command line -----------------------------------------------------------


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def _serve(config: EmulatorConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with Emulator(config, host, port) as emulator:
        print(f"emulator listening on {emulator.url}", flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway emulator", description="A local SageMaker Runtime."
    )
    parser.add_argument(
        "--listen", type=_parse_listen, default=("127.0.0.1", 8080), help="HOST:PORT"
    )
    parser.add_argument("--config", help="a TOML (or JSON) file; default: the built-in endpoints")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        config = load_config(args.config)
    except (ConfigError, OSError) as exc:
        print(f"emulator: {exc}", file=sys.stderr)
        return 2
    host, port = args.listen
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(config, host, port))
    else:
        uvloop.run(_serve(config, host, port))
    return 0
