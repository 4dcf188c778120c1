"""The sidecar as an object (in-process), as a child process, and as a command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway._client import Gateway
from gateway._config.env import apply_environment, explain
from gateway._config.options import GatewayConfig
from gateway._config.reader import load_toml
from gateway._host.gc import GcTuning, tune_gc
from gateway._observe.tracing import configure_from_environment
from gateway._server import processes as child_process
from gateway._server.address import parse_listen
from gateway._server.http import (
    Handler,
    Request,
    Response,
    Server,
    ServerLimits,
    StreamingResponse,
    start_server,
)
from gateway.errors import ConfigError
from gateway.sidecar._app import SidecarApp
from gateway.sidecar._auth import Authenticator, make_authenticator
from gateway.sidecar._config import SidecarConfig
from gateway.sidecar._errors import error_response
from gateway.sidecar._limits import OperationBodyLimits
from gateway.sidecar._logging import configure_logging
from gateway.sidecar._rtb import RtbConfig, RtbProxy
from gateway.sidecar._workers import (
    Supervisor,
    WorkerContext,
    os_reason,
    reserve_address,
    resolve_worker_count,
    worker_count,
)

__all__ = ["Sidecar", "SidecarProcess", "main"]

logger = logging.getLogger("gateway.sidecar")

GatewaySource = Gateway | GatewayConfig | Mapping[str, Any] | str | Path
_READY_PREFIX = "sidecar listening on "
# Answered by the Sidecar itself; /ping and the rest go to the app.
_OWN_PATHS = frozenset({"/livez", "/readyz", "/metrics"})
_JSON = ("Content-Type", "application/json")
# sagemaker_gateway_sidecar_rejected_total{reason} of a request the server refused.
_SERVER_REFUSALS = {408: "request_timeout", 413: "too_large", 431: "headers_too_large"}


class Sidecar:
    """The SageMaker Runtime API on a local port, answered through a ``Gateway``.

    ::

        async with Gateway(...) as gw, Sidecar(gw, "127.0.0.1", 0) as sidecar:
            ...  # point boto3 at sidecar.url

    Given a ``Gateway``, the caller owns it (the sidecar starts it if needed,
    never closes it). Given a config (object, mapping or TOML/JSON path), the
    sidecar builds, starts and closes its own Gateway. Without ``config``,
    the ``[sidecar]`` table of the gateway's config is used.

    Proxy mode (an OpenRTB path scored by the bid filter, kept requests
    forwarded to bidders) is on when ``rtb`` is given or the gateway's
    config has an ``[rtb]`` table; ``reload_rtb`` applies a new one while
    serving (the command does on SIGHUP).
    """

    def __init__(
        self,
        gateway_or_config: GatewaySource,
        host: str | None = None,
        port: int | None = None,
        *,
        config: SidecarConfig | None = None,
        rtb: RtbConfig | None = None,
        reuse_port: bool = False,
        workers: int = 1,
    ) -> None:
        self._owns_gateway = not isinstance(gateway_or_config, Gateway)
        self.gateway = _as_gateway(gateway_or_config)
        if config is None:
            section = self.gateway.config.sections.get("sidecar", {})
            config = SidecarConfig.from_mapping(section)
        self.config = config
        default_host, default_port = parse_listen(config.listen, "sidecar.listen")
        self._host = default_host if host is None else host
        self._requested_port = default_port if port is None else port
        if rtb is None and "rtb" in self.gateway.config.sections:
            rtb = RtbConfig.from_mapping(self.gateway.config.sections["rtb"])
        # One of `workers` processes serving the port: the RTB rate cap is shared out.
        self.rtb = RtbProxy(self.gateway, rtb, workers=workers) if rtb is not None else None
        authenticate = make_authenticator(config.auth, self.gateway.config.region)
        self.app = SidecarApp(self.gateway, config, authenticate, self.rtb)
        self.body_limits = OperationBodyLimits(config.max_body_bytes)
        self._server: Server | None = None
        self._admin: Server | None = None
        # Set by the command on SIGTERM (see the property).
        self._draining = False
        # Workers of one supervisor share the port (SO_REUSEPORT).
        self._reuse_port = reuse_port
        # /metrics that covers every worker (set by a worker process), else the app's own.
        self.metrics_exposition: Callable[[], Awaitable[bytes]] | None = None
        self._app_handle = self.app.entry

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the sidecar is not started")
        return self._server.port

    @property
    def host(self) -> str:
        return self._host

    @property
    def draining(self) -> bool:
        """Set on SIGTERM: /readyz answers 503, serving goes on, every answer
        says ``Connection: close`` (clients move to another instance)."""
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._draining = value
        if self._server is not None:
            self._server.draining = value

    @property
    def url(self) -> str:
        return _url(self._host, self.port)

    @property
    def admin_url(self) -> str | None:
        """The admin listener (/metrics, /livez, /readyz); None when it is off."""
        admin = self._admin
        return _url(admin.host, admin.port) if admin is not None else None

    def limits(self) -> ServerLimits:
        config = self.config
        return ServerLimits(
            max_body_size=self.body_limits.largest,
            max_discard_size=max(16 * 1024 * 1024, 2 * self.body_limits.largest),
            header_timeout=config.header_timeout_s,
            body_timeout=config.body_timeout_s,
            keepalive_timeout=config.idle_timeout_s,
            write_timeout=config.write_timeout_s,
            shutdown_timeout=config.shutdown_grace_s,
        )

    def reload_rtb(self, rtb: RtbConfig | Mapping[str, Any]) -> list[str]:
        """Apply a new ``[rtb]`` table (policy, rules) to the running proxy.

        Returns the changed keys that need a restart (kept as they run). A table
        that fails its checks raises ``ConfigError`` and changes nothing.
        """
        if self.rtb is None:
            raise ConfigError("rtb: proxy mode is off; it starts with an [rtb] table")
        try:
            config = rtb if isinstance(rtb, RtbConfig) else RtbConfig.from_mapping(rtb)
        except ConfigError as error:
            self.rtb.reload_refused(error)
            raise
        return self.rtb.reload(config)

    async def start(self) -> Sidecar:
        # Checked before anything listens: an exposed port without auth never opens.
        self.config.check_bind(self._host)
        await self.gateway.start()
        try:
            if self.rtb is not None:
                await self.rtb.start()
            self._server = await self._listen(self._host, self._requested_port, self.handle)
            self._server.draining = self._draining
            self._server.on_reject = self._refused_by_server
            self._server.body_limits = self.body_limits
            # InvokeEndpoint from the protocol callbacks while a call goes the plain way.
            self._server.relay = self.app.relay_lane()
            admin = self.config.admin_address(self._host, self._requested_port)
            if admin is not None:
                try:
                    self._admin = await self._listen(*admin, self.handle_admin)
                except ConfigError as exc:  # one line that names the option
                    raise ConfigError(f"sidecar.admin_listen (--admin-listen): {exc}") from None
        except BaseException:
            if self._server is not None:
                await self._server.close(0)
                self._server = None
            await self._close_owned()
            raise
        self.app.started = True
        logger.info(
            "sidecar started",
            extra={
                "listen": self.url,
                "admin": self.admin_url,
                "auth": self.config.auth.mode,
                "max_in_flight": self.config.max_in_flight,
            },
        )
        if self._host in ("0.0.0.0", "::", ""):
            logger.warning(
                "sidecar listening on all interfaces, not only loopback",
                extra={"listen": f"{self._host or '0.0.0.0'}:{self.port}"},
            )
        return self

    async def _listen(self, host: str, port: int, handler: Handler) -> Server:
        try:
            return await start_server(
                handler, host, port, limits=self.limits(), reuse_port=self._reuse_port
            )
        except OSError as exc:  # taken port, address not on this host, unknown name
            raise ConfigError(f"cannot listen on {host}:{port}: {os_reason(exc)}") from None

    # -- requests -------------------------------------------------------------

    def handle(self, request: Request) -> Awaitable[Response | StreamingResponse]:
        """The server's handler: lifecycle paths here, everything else to the app.

        A plain function returning the app's coroutine: an invocation (a
        POST) pays one call and one string comparison, not a coroutine frame.
        """
        if request.method != "POST" and request.path in _OWN_PATHS:
            return self._own(request)
        return self._app_handle(request)

    async def _own(self, request: Request) -> Response | StreamingResponse:
        if request.method not in ("GET", "HEAD"):
            return await self._app_handle(request)  # the app's 404, as for any other
        return await self._answer_own(request, self.app.metrics_auth)

    async def handle_admin(self, request: Request) -> Response:
        """The admin listener: GET/HEAD /metrics, /livez, /readyz; 404 for anything else."""
        if request.method not in ("GET", "HEAD") or request.path not in _OWN_PATHS:
            return error_response("UnknownOperationException", "Unknown operation", 404)
        refused = self.app.refuse_unauthenticated(request, self.app.admin_auth)
        if refused is not None:
            return refused
        return await self._answer_own(request, None)

    async def _answer_own(self, request: Request, metrics_auth: Authenticator | None) -> Response:
        """/livez, /readyz, or /metrics (behind ``metrics_auth``), whatever the worker count."""
        path = request.path
        if path == "/livez":
            return Response(200, (_JSON,), b'{"status":"ok"}')
        if path == "/readyz":
            return self._readiness()
        refused = self.app.refuse_unauthenticated(request, metrics_auth)
        if refused is not None:
            return refused
        return Response(200, (("Content-Type", CONTENT_TYPE_LATEST),), await self.exposition())

    async def exposition(self) -> bytes:
        """The Prometheus text: every worker's, added up, or this process's own."""
        if self.metrics_exposition is not None:
            return await self.metrics_exposition()
        # Rendered off the event loop: calls keep flowing during a scrape.
        return await asyncio.to_thread(generate_latest, self.app.registry)

    def _refused_by_server(self, status: int, reason: str) -> None:
        """A request the HTTP server refused (malformed, too large, too slow): counted, logged."""
        refusal = _SERVER_REFUSALS.get(status, "bad_request")
        self.app.metrics.reject(refusal)
        access_log = self.app.access_log
        if access_log is not None and access_log.sampled():
            # Method and path are unknown or untrusted: the request never parsed.
            access_log.write("-", "-", None, status, refusal, 0.0, 0, None, None)

    def not_ready_reasons(self) -> list[str]:
        """Why ``/readyz`` answers 503 (empty: ready)."""
        reasons: list[str] = []
        if not self.app.started:
            reasons.append("not serving")
        if self.draining:
            reasons.append("draining")
        if not _credentials_usable(self.gateway):
            reasons.append("credentials not loaded or expired")
        reasons.extend(
            f"route {name!r} has no healthy target"
            for name, healthy in sorted(self.gateway.route_health().items())
            if not healthy
        )
        return reasons

    def _readiness(self) -> Response:
        reasons = self.not_ready_reasons()
        if reasons:
            body = orjson.dumps({"status": "not ready", "reasons": reasons})
            return Response(503, (_JSON,), body)
        return Response(200, (_JSON,), b'{"status":"ready"}')

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight calls finish (within ``grace``), then close."""
        server, self._server = self._server, None
        if server is not None:
            self.app.started = False
            in_flight = self.app.in_flight
            await server.close(self.config.shutdown_grace_s if grace is None else grace)
            logger.info("sidecar stopped", extra={"in_flight_at_stop": in_flight})
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close(0)
        await self._close_owned()

    async def _close_owned(self) -> None:
        if self.rtb is not None:
            await self.rtb.aclose()
        if self._owns_gateway:
            await self.gateway.aclose()

    async def __aenter__(self) -> Sidecar:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @staticmethod
    def start_subprocess(
        config: Mapping[str, Any] | str | Path | None = None,
        listen: str = "127.0.0.1:0",
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> SidecarProcess:
        """Run a sidecar in a child process (its own event loop and core)."""
        return SidecarProcess.start(config, listen, args, env)


def _url(host: str, port: int) -> str:
    shown = host if ":" not in host else f"[{host}]"
    if shown in ("0.0.0.0", "[::]", ""):
        shown = "127.0.0.1" if shown != "[::]" else "[::1]"
    return f"http://{shown}:{port}"


def _credentials_usable(gateway: Gateway) -> bool:
    # The gateway resolves credentials in start() and refuses to start without
    # them; this sees them expire while a refresh hangs or fails (or a gateway
    # that was never started).
    source = gateway._context.credentials
    return source is not None and bool(source.usable())


def _as_gateway(source: GatewaySource) -> Gateway:
    if isinstance(source, Gateway):
        return source
    if isinstance(source, GatewayConfig):
        return Gateway(config=source)
    return Gateway(config=load_gateway_config(source))


def load_gateway_config(source: Mapping[str, Any] | str | Path) -> GatewayConfig:
    """A GatewayConfig from a mapping, a ``.toml`` file or a ``.json`` file."""
    if isinstance(source, Mapping):
        return GatewayConfig.from_mapping(source)
    return GatewayConfig.from_mapping(_read_mapping(Path(source)))


def _read_mapping(path: Path) -> dict[str, Any]:
    if path.suffix != ".json":
        return load_toml(path)
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: must hold an object")
    return data


# -- child process ------------------------------------------------------------


class SidecarProcess:
    """Handle on a sidecar child process: ``url``, ``terminate()``, ``stop()``."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        url: str,
        config_file: str | None,
        admin_url: str | None = None,
    ) -> None:
        self.process = process
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        # The admin listener, when this handle chose its address (see start).
        self.admin_url = admin_url
        self._config_file = config_file

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        config: Mapping[str, Any] | str | Path | None,
        listen: str,
        args: Sequence[str],
        env: Mapping[str, str] | None,
    ) -> SidecarProcess:
        config_file: str | None = None
        command = [sys.executable, "-m", "gateway", "sidecar", "--listen", listen, *args]
        if isinstance(config, str | Path):
            command += ["--config", str(config)]
        elif config is not None:
            descriptor, config_file = tempfile.mkstemp(suffix=".json", prefix="sidecar-")
            with os.fdopen(descriptor, "wb") as file:
                file.write(orjson.dumps(config))
            command += ["--config", config_file]
        choose_admin = "--admin-listen" not in args
        for attempt in range(1, _ADMIN_PORT_TRIES + 1):
            admin_url: str | None = None
            admin_args: list[str] = []
            if choose_admin:
                # A free loopback port, so that the caller knows where to scrape.
                admin_port = _free_port()
                admin_url = f"http://127.0.0.1:{admin_port}"
                admin_args = ["--admin-listen", f"127.0.0.1:{admin_port}"]
            process = child_process.start(
                [*command, *admin_args], env={**os.environ, **(env or {})}
            )
            try:
                url = child_process.read_ready_line(process, _READY_PREFIX, "sidecar", timeout=30.0)
            except BaseException as failure:
                child_process.terminate(process, grace=30)
                # The port chosen here was free when probed, not when the child bound
                # it: another process can take it between (the child exits with 2).
                if (
                    isinstance(failure, RuntimeError)
                    and choose_admin
                    and process.returncode == 2
                    and attempt < _ADMIN_PORT_TRIES
                ):
                    continue
                _unlink(config_file)
                raise
            return cls(process, url, config_file, admin_url)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def terminate(self) -> None:
        """Send SIGTERM (graceful shutdown) without waiting."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def stop(self) -> int:
        """SIGTERM, wait (then kill); returns the exit code."""
        code = child_process.terminate(self.process, grace=30)
        _unlink(self._config_file)
        self._config_file = None
        return code

    def __enter__(self) -> SidecarProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# Attempts at a sidecar whose admin port SidecarProcess.start chose (see there).
_ADMIN_PORT_TRIES = 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unlink(path: str | None) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# -- command line ---------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gateway sidecar",
        description="The SageMaker Runtime API on a local port, answered through the gateway.",
        epilog="Every key of --config can also be set by a SAGEMAKER_GATEWAY__<SECTION>__<KEY> "
        "environment variable (flag > environment > file > default).",
    )
    parser.add_argument("--listen", help="HOST:PORT (default: sidecar.listen, 127.0.0.1:8081)")
    parser.add_argument(
        "--admin-listen",
        help="HOST:PORT of the admin listener (/metrics, /livez, /readyz), or 'off' "
        "(default: sidecar.admin_listen, off: the traffic port answers those paths)",
    )
    parser.add_argument("--config", help="the gateway's TOML (or JSON) file, with [sidecar]")
    parser.add_argument(
        "--upstream", action="append", default=[], help="SageMaker Runtime URL (endpoint_url)"
    )
    parser.add_argument("--region", help="AWS region of the upstream")
    parser.add_argument("--redis", help="Redis URL of the shared prediction cache")
    parser.add_argument(
        "--workers",
        help="worker processes sharing the port, or 'auto' for one per usable core "
        "(default: sidecar.workers, 1)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="one JSON line per request on stderr (sidecar.access_log; sampled by "
        "sidecar.access_log_sample)",
    )
    return parser


def _command_config(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> tuple[GatewayConfig, SidecarConfig]:
    mapping: dict[str, Any] = _read_mapping(Path(args.config)) if args.config else {}
    overlay = apply_environment(mapping, environ)
    mapping = overlay.mapping
    if len(args.upstream) > 1:
        raise ConfigError(
            "--upstream: give one URL; several upstreams are targets of [routes.*] in --config"
        )
    # Flags last: they win over the environment and the file.
    if args.upstream:
        mapping["endpoint_url"] = args.upstream[0]
    if args.region:
        mapping["region"] = args.region
    if args.redis:
        cache = mapping.get("cache", {})
        mapping["cache"] = {
            **(cache if isinstance(cache, Mapping) else {}),
            "redis_url": args.redis,
        }
    sidecar_flags: dict[str, Any] = {}
    if args.listen is not None:
        parse_listen(args.listen, "--listen")  # a bad flag is named as the flag
        sidecar_flags["listen"] = args.listen
    if args.admin_listen is not None:  # checked as [sidecar] admin_listen; named as the flag
        sidecar_flags["admin_listen"] = args.admin_listen
        overlay.sources["sidecar.admin_listen"] = "--admin-listen"
    if args.workers is not None:  # checked as [sidecar] workers; an error names the flag
        sidecar_flags["workers"] = args.workers
        overlay.sources["sidecar.workers"] = "--workers"
    if sidecar_flags:
        sidecar = mapping.get("sidecar", {})
        mapping["sidecar"] = {**(sidecar if isinstance(sidecar, Mapping) else {}), **sidecar_flags}
    try:
        gateway_config = GatewayConfig.from_mapping(mapping)
        sidecar_config = SidecarConfig.from_mapping(gateway_config.sections.get("sidecar", {}))
        if args.access_log:
            sidecar_config = dataclasses.replace(sidecar_config, access_log=True)
        if "rtb" in gateway_config.sections:  # validated now: a bad key fails before listening
            RtbConfig.from_mapping(gateway_config.sections["rtb"])
        # The sidecar builds its Gateway from this config: build one now (not
        # started) so the route and cache sections are checked before listening.
        Gateway(config=gateway_config)
    except ConfigError as error:
        raise explain(error, overlay.sources) from None
    return gateway_config, sidecar_config


def _rtb_config(args: argparse.Namespace, environ: Mapping[str, str]) -> RtbConfig | None:
    """The ``[rtb]`` table as the file and the environment give it now (None: no table)."""
    mapping: dict[str, Any] = _read_mapping(Path(args.config)) if args.config else {}
    overlay = apply_environment(mapping, environ)
    table = overlay.mapping.get("rtb")
    if table is None:
        return None
    try:
        return RtbConfig.from_mapping(table)
    except ConfigError as error:
        raise explain(error, overlay.sources) from None


def reload_rtb_from(sidecar: Sidecar, read: Callable[[], RtbConfig | None]) -> None:
    """SIGHUP: read the ``[rtb]`` table again and apply it; a bad one is logged and refused."""
    rtb = sidecar.rtb
    if rtb is None:
        logger.warning("SIGHUP: proxy mode is off; an [rtb] table takes effect at the next start")
        return
    try:
        config = read()
        if config is None:
            raise ConfigError("rtb: the [rtb] table is gone (proxy mode stops only with a restart)")
    except ConfigError as error:
        rtb.reload_refused(error)
        return
    rtb.reload(config)


async def _serve(
    gateway_config: GatewayConfig,
    config: SidecarConfig,
    listen: str,
    worker: WorkerContext | None = None,
    read_rtb: Callable[[], RtbConfig | None] | None = None,
) -> int:
    host, port = parse_listen(listen)
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signals.put_nowait, signum)
    sidecar = Sidecar(
        gateway_config,
        host,
        port,
        config=config,
        reuse_port=worker is not None,
        workers=worker_count() if worker is not None else 1,
    )
    if read_rtb is not None:
        loop.add_signal_handler(signal.SIGHUP, reload_rtb_from, sidecar, read_rtb)
    await sidecar.start()
    try:
        if worker is not None:
            await worker.start(lambda: generate_latest(sidecar.app.registry))
            sidecar.metrics_exposition = worker.exposition
        # Everything long-lived is loaded now (gateway, RTB filter, server):
        # frozen before the ready line, so before any client's traffic.
        tune_process_gc(sidecar)
        print(f"{_READY_PREFIX}{sidecar.url}", flush=True)
        received = await signals.get()
        if received == signal.SIGTERM and config.drain_s > 0:
            await _drain(sidecar, config.drain_s, signals)
        logger.info("shutting down", extra={"in_flight": sidecar.app.in_flight})
    finally:
        await sidecar.close()
        if worker is not None:
            await worker.close()
    return 0


async def _drain(sidecar: Sidecar, seconds: float, signals: asyncio.Queue[signal.Signals]) -> None:
    """Not ready, still serving, for ``seconds``: callers and load balancers move away.

    SIGINT (an operator's Ctrl-C) ends the drain early; a repeated SIGTERM
    does not (a supervisor or a container runtime may send it twice).
    """
    sidecar.draining = True
    logger.info("draining", extra={"drain_s": seconds, "in_flight": sidecar.app.in_flight})

    async def interrupted() -> None:
        while await signals.get() != signal.SIGINT:
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(interrupted(), seconds)


def tune_process_gc(sidecar: Sidecar) -> GcTuning | None:
    """The command's GC step: ``tune_gc`` as ``sidecar.gc_freeze`` / ``gc_thresholds`` say.

    Only for a process the sidecar owns (``python -m gateway sidecar``); an
    in-process ``Sidecar`` leaves its host application's GC alone. The
    frozen object count goes to /metrics (``sagemaker_gateway_sidecar_gc_frozen_objects``).
    """
    config = sidecar.config
    if not config.gc_freeze and config.gc_thresholds is None:
        return None
    tuning = tune_gc(freeze=config.gc_freeze, thresholds=config.gc_thresholds)
    if tuning.frozen:
        sidecar.app.metrics.gc_frozen_objects = tuning.frozen_objects
    logger.info(
        "gc tuned",
        extra={
            "gc_frozen_objects": tuning.frozen_objects if tuning.frozen else 0,
            "gc_collected": tuning.collected,
            "gc_thresholds": list(tuning.thresholds),
        },
    )
    return tuning


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(arguments)
    # SIGHUP reloads the [rtb] table once serving; until then it must not end the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(args.log_level)
    # OTEL_* variables (exporter, endpoint, sampler, service name) turn tracing on.
    configure_from_environment()
    try:
        gateway_config, config = _command_config(args, os.environ)
        listen = config.listen
        host, port = parse_listen(listen)
        config.check_bind(host)
    except ConfigError as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    worker = WorkerContext.from_environment()
    if worker is not None:
        worker.tag_logs()
    count = resolve_worker_count(config.workers)
    if worker is None and count > 1:
        admin = config.admin_address(host, port)
        return _supervise(arguments, host, port, admin, count, config.worker_liveness_s)
    try:
        read_rtb = functools.partial(_rtb_config, args, os.environ)
        serving = _serve(gateway_config, config, listen, worker, read_rtb)
        code: int = _event_loop_runner()(serving)
    except ConfigError as exc:  # found at start: credentials, a taken port, ...
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    return code


def _supervise(
    arguments: list[str],
    host: str,
    port: int,
    admin: tuple[str, int] | None,
    count: int,
    liveness_s: float,
) -> int:
    try:
        sock = reserve_address(host, port)
    except ConfigError as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    try:
        admin_sock = reserve_address(*admin) if admin is not None else None
    except ConfigError as exc:
        sock.close()
        print(f"sidecar: admin listener: {exc}", file=sys.stderr)
        return 2
    supervisor = Supervisor(
        arguments, sock, count, _READY_PREFIX, admin_sock, liveness_s=liveness_s
    )
    return asyncio.run(supervisor.run())


def _event_loop_runner() -> Callable[[Any], Any]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run
    runner: Callable[[Any], Any] = uvloop.run
    return runner
